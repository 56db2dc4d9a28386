#pragma once
// graphed<S>: a device stage whose per-item device work is captured once into a graph and then
// replayed with one launch per item (a CUDA graph on cuda_backend; recorded closures on the host
// twin), for stages whose host launches cost as much as the work they launch ("<stage>.launch"
// close to "<stage>.gpu": the bottleneck report says launch-bound).
//
//   struct fill {                                 // host -> device link, in graph form
//     static constexpr dflash::fixed_string name{"fill"};
//     using input_type = int;  using output_type = Slot;
//     void prepare(int& x, Slot& out, const DS& s);        // each item, not captured: host fields,
//                                                          // buffer sizes, per-item values into the
//                                                          // slot's device memory (a copy on s)
//     void launch(const int& x, Slot& out, const DS& s);   // captured once per key, then replayed
//     auto graph_key(const int& x, const Slot& out) const; // what the launches depend on
//     void after_launch(int& x, Slot& out, const DS& s);   // optional, each item, not captured:
//                                                          // what must follow the replay on s (not
//                                                          // called when the replay throws: the run fails)
//   };
// Each of the four may take a trailing worker index (std::size_t), as a stage's call may: a
// stage with per-worker scratch names it in its key.
//   dflash::Pipeline<P, src, q, dflash::graphed<fill>, dflash::device_link<"hs", 4>, ...>
//
// The rule a graph imposes: launch() is recorded once, with the values it had then; a replay
// runs the same launches on the same addresses. So launch() reads per-item values from memory
// (written by prepare on the same stream), never from its arguments' values, and graph_key
// names every address and size its launches use — typically the slot's buffers — so a slot
// with other buffers gets its own capture (K slots: K graphs, recaptured only when a buffer
// grows). A key must name the slot's own memory: two items in flight on one graph would be
// launched from two streams at once, which CUDA serialises (and their work would collide).
// What cannot be captured fails loudly, naming the stage: a synchronisation, an event, an
// allocation inside launch() (prepare sizes buffers, launch only launches). Host -> link and
// link -> link call shapes; the stage's own keys pass through.

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "dflash/device/backend.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/profile/fixed_string.hpp"

namespace dflash {

/// What a graphed stage did: captures (one per key) and launches (one per item).
struct graph_stats {
  std::uint64_t captures = 0;
  std::uint64_t launches = 0;
};

namespace detail {
template <class S>
struct graphed_keys {};
template <class S>
  requires requires { typename S::keys; }
struct graphed_keys<S> {
  using keys = typename S::keys;
};

// The backend of the stage's slots: its output's (host -> link, link -> link).
template <class S>
using graphed_backend_t = typename S::output_type::backend_type;

// The key of an item, with the worker index when graph_key takes one.
template <class S>
decltype(auto) graph_key_of(const S& s, const typename S::input_type& x, const typename S::output_type& out,
                            std::size_t worker) {
  if constexpr (requires { s.graph_key(x, out, worker); }) return s.graph_key(x, out, worker);
  else return s.graph_key(x, out);
}

template <class S>
using graph_key_t = std::remove_cvref_t<decltype(graph_key_of(std::declval<const S&>(),
                                                              std::declval<const typename S::input_type&>(),
                                                              std::declval<const typename S::output_type&>(),
                                                              std::size_t{}))>;
}  // namespace detail

template <class S>
concept GraphableStage = requires { typename S::output_type::backend_type; } &&
                         GraphBackend<detail::graphed_backend_t<S>> &&
                         requires(S& s, typename S::input_type& x, typename S::output_type& out,
                                  const device_stream<detail::graphed_backend_t<S>>& ds, std::size_t w) {
                           requires requires { s.launch(x, out, ds); } || requires { s.launch(x, out, ds, w); };
                           requires requires { std::as_const(s).graph_key(std::as_const(x), std::as_const(out)); } ||
                                        requires { std::as_const(s).graph_key(std::as_const(x), std::as_const(out), w); };
                         } &&
                         std::totally_ordered<detail::graph_key_t<S>>;

template <class S>
struct graphed : detail::graphed_keys<S> {
  static_assert(GraphableStage<S>,
                "dflash::graphed<S>: S needs launch(in, out, stream) (the captured work), graph_key(in, out) "
                "const returning an ordered value (what the launches depend on), either with an optional trailing "
                "worker index, a device slot (or device_rows) as output_type, "
                "and a backend that can capture graphs (cuda_backend, host_stream_backend)");
  using B = detail::graphed_backend_t<S>;
  using key_type = detail::graph_key_t<S>;
  static constexpr fixed_string name = S::name;
  using input_type = typename S::input_type;
  using output_type = typename S::output_type;

  S stage;

  /// Constructed as S is: graphed<S>(s), or graphed<S>(args of S's constructor...).
  template <class... A>
    requires(!(sizeof...(A) == 1 && (std::same_as<std::remove_cvref_t<A>, graphed> && ...))) &&
            std::constructible_from<S, A&&...>
  explicit graphed(A&&... a) : stage(std::forward<A>(a)...) {}
  // A move shares the cache, as a copy does: a moved-from stage stays usable.
  graphed(const graphed&) = default;
  graphed(graphed&& o) noexcept(std::is_nothrow_move_constructible_v<S>) : stage(std::move(o.stage)), cache_(o.cache_) {}
  graphed& operator=(const graphed&) = default;
  graphed& operator=(graphed&& o) noexcept(std::is_nothrow_move_assignable_v<S>) {
    stage = std::move(o.stage);
    cache_ = o.cache_;
    return *this;
  }

  template <class In>
    requires std::same_as<std::remove_cvref_t<In>, input_type>
  void operator()(In&& x, output_type& out, const device_stream<B>& s, std::size_t worker) {
    if constexpr (requires { stage.prepare(x, out, s, worker); }) stage.prepare(x, out, s, worker);
    else if constexpr (requires { stage.prepare(x, out, s); }) stage.prepare(x, out, s);
    const typename B::graph_type& g =
        cache_->get(detail::graph_key_of(stage, std::as_const(x), std::as_const(out), worker), s,
                    [&] {
                      if constexpr (requires { stage.launch(x, out, s, worker); }) stage.launch(x, out, s, worker);
                      else stage.launch(x, out, s);
                    });
    try {
      s.backend().launch_graph(g, s.native());
    } catch (const std::exception& e) {
      throw failed("replaying its graph failed", e);
    }
    cache_->launched();
    if constexpr (requires { stage.after_launch(x, out, s, worker); }) stage.after_launch(x, out, s, worker);
    else if constexpr (requires { stage.after_launch(x, out, s); }) stage.after_launch(x, out, s);
  }

  [[nodiscard]] graph_stats stats() const { return cache_->stats(); }

 private:
  // An error of the stage's graph, with the stage's name.
  static std::runtime_error failed(const char* what, const std::exception& e) {
    return std::runtime_error(std::string("dflash::graphed: stage '") + std::string(S::name.view()) + "': " + what +
                              ": " + e.what());
  }

  // Shared by the copies a pipeline makes of the stage (its workers' streams replay one graph
  // per key); graphs are destroyed with the last copy, after the pipeline's streams ended.
  class cache {
   public:
    cache() = default;
    cache(const cache&) = delete;
    cache& operator=(const cache&) = delete;
    ~cache() {
      for (auto& [k, g] : graphs_) B::destroy_graph(g);
    }
    // Under the lock: one capture per key, whichever worker gets there first.
    template <class Launch>
    const typename B::graph_type& get(key_type k, const device_stream<B>& s, Launch&& launch) {
      const std::lock_guard lk(m_);
      if (auto it = graphs_.find(k); it != graphs_.end()) return it->second;
      typename B::graph_type g = capture(s, launch);
      try {
        auto& placed = graphs_.emplace(std::move(k), g).first->second;
        ++captures_;
        return placed;
      } catch (...) {
        B::destroy_graph(g);
        throw;
      }
    }
    // Counted apart from the map's lock: a replay takes no lock but the lookup's.
    void launched() noexcept { launches_.fetch_add(1, std::memory_order_relaxed); }
    [[nodiscard]] graph_stats stats() const {
      const std::lock_guard lk(m_);
      return {captures_, launches_.load(std::memory_order_relaxed)};
    }

   private:
    // launch() recorded on s. A capture that launch() did not fail but that ended invalid
    // (CUDA: another thread synchronised the whole device meanwhile) is tried once more.
    template <class Launch>
    static typename B::graph_type capture(const device_stream<B>& s, Launch& launch) {
      B& b = s.backend();
      for (int attempt = 0;; ++attempt) {
        bool launched = false;
        try {
          b.begin_capture(s.native());
          launch();
          launched = true;
          return b.end_capture(s.native());
        } catch (const std::exception& e) {
          b.abort_capture(s.native());
          if (launched && attempt == 0) continue;
          throw failed("its launch() could not be captured into a graph", e);
        } catch (...) {
          b.abort_capture(s.native());
          throw;
        }
      }
    }

    mutable std::mutex m_;
    std::map<key_type, typename B::graph_type> graphs_;
    std::uint64_t captures_ = 0;
    std::atomic<std::uint64_t> launches_{0};
  };
  std::shared_ptr<cache> cache_ = std::make_shared<cache>();
};

}  // namespace dflash
