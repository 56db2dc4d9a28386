#pragma once
// dflash::Pipeline: stages and bounded queues composed at compile time, each
// stage on its own thread(s), wait vs work time recorded per stage without
// user code. Usage (stages as in stage.hpp):
//
//   template <class P>
//   using train_pipeline = dflash::Pipeline<P,
//       batch_source<P>,           dflash::queue_spec<"batch_queue", 8>,
//       dflash::workers<target_forward<P>, 4>,   dflash::queue_spec<"post_queue", 8>,
//       postprocess<P>,            dflash::queue_spec<"hs_queue", 60>,
//       drafter_train<P>>;
//
//   using profiler = dflash::AccumulatingProfiler<dflash::pipeline_keys_t<train_pipeline>>;
//   profiler prof;
//   train_pipeline<profiler> p(prof, batch_source<profiler>{...}, target_forward<profiler>{...},
//                              postprocess<profiler>{...}, drafter_train<profiler>{...});
//   p.run();     // starts every thread, returns at once
//   p.join();    // waits; rethrows the first exception a stage threw
//   std::cout << prof.summary();   // <stage>.wait/.work, <queue>.push_wait/.pop_wait
//
// Runtime sizes (e.g. from a CLI): pass a shape after the profiler; the
// compile-time workers<S, N> / queue_spec<Name, Depth> values are its defaults.
//   auto shape = train_pipeline<profiler>::default_shape();
//   shape.workers[1] = n_targets;  shape.depths[2] = hs_depth;   // 0 -> std::invalid_argument
//   train_pipeline<profiler> p(prof, shape, stages...);
//
// Lifecycle: the source runs until it returns an empty optional; each stage's
// output queue is closed when its last worker exits, so the pipeline drains to
// the sink and join() returns. A stage that throws cancels the pipeline: every
// queue is closed, every thread exits after its current call, join() rethrows.
// stop() (cancel) does the same from outside: blocked threads wake at once and
// the latency is one in-flight call per stage; stop(stop_mode::drain) stops
// the source only and lets queued items reach the sink. A stage ends the
// pipeline early from inside its call with `throw dflash::pipeline_stop{};`
// (e.g. a sink that has seen enough): the same as stop(), join() returns.
// Keys: "<stage>.wait" (blocked in pop/push), "<stage>.work" (inside the
// stage's call), plus queue_keys<queue name>, plus each stage's own `keys`.
// They never depend on P, so pipeline_keys_t<train_pipeline> names them all.

#include <array>
#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana/at.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/tuple.hpp>

#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/bounded_queue.hpp"

namespace dflash {

enum class stop_mode {
  cancel,  ///< close every queue now; threads exit after their current call
  drain,   ///< stop the source; items already queued still reach the sink
};

/// Thrown from a stage's call to end the pipeline early and cleanly: the same
/// as stop() (stop_mode::cancel) from outside. The call's item is dropped,
/// every thread exits after its current call, and join() returns normally
/// (it still rethrows a real error another stage threw). Deliberately not a
/// std::exception, so a `catch (const std::exception&)` does not swallow it.
/// (A source that wants to drain instead returns an empty optional.)
struct pipeline_stop {};

namespace detail {
template <class Spec>
struct stage_spec {
  using stage = Spec;
  static constexpr std::size_t count = 1;
};
template <class S, std::size_t N>
struct stage_spec<workers<S, N>> {
  using stage = S;
  // Read through workers<S, N> so that it is instantiated and its N > 0
  // check fires (matching this pattern alone instantiates nothing).
  static constexpr std::size_t count = workers<S, N>::count;
};

template <class T>
struct is_queue_spec : std::false_type {};
template <fixed_string N, std::size_t D>
struct is_queue_spec<queue_spec<N, D>> : std::true_type {};

template <std::size_t I, class... T>
using nth_t = std::tuple_element_t<I, std::tuple<T...>>;

// Instantiated once per adjacent pair; the error names From and To.
template <class From, class To>
struct link_check {
  static_assert(std::is_same_v<typename From::output_type, typename To::input_type>,
                "dflash::Pipeline: a stage's output_type does not match the next stage's input_type "
                "(From and To in link_check<From, To> are the two stages)");
  static constexpr bool value = true;
};

template <class S, class... Args>
decltype(auto) call_stage(S& s, [[maybe_unused]] std::size_t worker, Args&&... args) {
  if constexpr (std::is_invocable_v<S&, Args&&..., std::size_t>) return s(std::forward<Args>(args)..., worker);
  else return s(std::forward<Args>(args)...);
}
}  // namespace detail

/// Threads per stage and capacity per queue, chosen at run time.
template <std::size_t Stages, std::size_t Queues>
struct pipeline_shape {
  std::array<std::size_t, Stages> workers{};
  std::array<std::size_t, Queues> depths{};
};

template <ProfilerPolicy P, class... Specs>
class Pipeline {
  static_assert(sizeof...(Specs) >= 3 && sizeof...(Specs) % 2 == 1,
                "dflash::Pipeline<P, ...>: list stages and queues alternately — stage, queue_spec<\"name\", depth>, "
                "stage, ..., stage (at least a source, a queue and a sink)");

 public:
  static constexpr std::size_t stage_count = (sizeof...(Specs) + 1) / 2;
  static constexpr std::size_t queue_count = stage_count - 1;

  template <std::size_t I>
  using stage_type = typename detail::stage_spec<detail::nth_t<2 * I, Specs...>>::stage;
  template <std::size_t I>
  static constexpr std::size_t workers_of = detail::stage_spec<detail::nth_t<2 * I, Specs...>>::count;
  template <std::size_t I>
  using queue_spec_type = detail::nth_t<2 * I + 1, Specs...>;

 private:
  template <std::size_t... I>
  static consteval bool check_specs(std::index_sequence<I...>) {
    static_assert((detail::is_queue_spec<queue_spec_type<I>>::value && ...),
                  "dflash::Pipeline: every second entry must be a dflash::queue_spec<\"name\", depth>");
    static_assert(SourceStage<stage_type<0>>,
                  "dflash::Pipeline: the first stage must be a source: input_type = void, "
                  "std::optional<output_type> operator()()");
    static_assert(SinkStage<stage_type<stage_count - 1>>,
                  "dflash::Pipeline: the last stage must be a sink: output_type = void, void operator()(input_type&&)");
    static_assert(((I + 1 == queue_count || TransformStage<stage_type<I + 1>>) && ...),
                  "dflash::Pipeline: a middle stage must be a transform: output_type operator()(input_type&&)");
    return (detail::link_check<stage_type<I>, stage_type<I + 1>>::value && ...);
  }
  static_assert(check_specs(std::make_index_sequence<queue_count>{}));

  template <std::size_t... I>
  static auto keys_of(std::index_sequence<I...>)
      -> key_set_cat_t<stage_keys_t<stage_type<0>>,
                       key_set_cat_t<queue_keys<queue_spec_type<I>::name>, stage_keys_t<stage_type<I + 1>>>...>;
  template <std::size_t... I>
  static auto stages_of(std::index_sequence<I...>) -> boost::hana::tuple<stage_type<I>...>;

 public:
  /// Every key this pipeline (and its stages' own keys) records; independent of P.
  using keys = decltype(keys_of(std::make_index_sequence<queue_count>{}));

  template <std::size_t I>
  using queue_type = bounded_queue<typename stage_type<I>::output_type, P, queue_spec_type<I>::name>;

 private:
  template <std::size_t... I>
  static auto queues_of(std::index_sequence<I...>) -> boost::hana::tuple<std::unique_ptr<queue_type<I>>...>;
  using stages_tuple = decltype(stages_of(std::make_index_sequence<stage_count>{}));
  using queues_tuple = decltype(queues_of(std::make_index_sequence<queue_count>{}));

 public:
  /// Stages in order (or none, to default-construct them all). `prof` must outlive the pipeline.
  template <class... Args>
    requires(sizeof...(Args) == stage_count || sizeof...(Args) == 0)
  explicit Pipeline(const P& prof, Args&&... stages)
      : prof_(prof), stages_(std::forward<Args>(stages)...), shape_(default_shape()) {
    make_queues(std::make_index_sequence<queue_count>{});
  }

  using shape_type = pipeline_shape<stage_count, queue_count>;
  /// The compile-time sizes: workers<S, N>::count per stage, queue_spec depth per queue.
  [[nodiscard]] static constexpr shape_type default_shape() noexcept {
    shape_type s;
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((s.workers[I] = workers_of<I>), ...); }(
        std::make_index_sequence<stage_count>{});
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((s.depths[I] = queue_spec_type<I>::depth), ...); }(
        std::make_index_sequence<queue_count>{});
    return s;
  }
  /// Runtime sizes; every worker count and depth must be >= 1 (std::invalid_argument otherwise).
  template <class... Args>
    requires(sizeof...(Args) == stage_count || sizeof...(Args) == 0)
  Pipeline(const P& prof, const shape_type& shape, Args&&... stages)
      : prof_(prof), stages_(std::forward<Args>(stages)...), shape_(checked(shape)) {
    make_queues(std::make_index_sequence<queue_count>{});
  }
  template <class... Args>
    requires(std::is_empty_v<P> && (sizeof...(Args) == stage_count || sizeof...(Args) == 0))
  Pipeline(const shape_type& shape, Args&&... stages) : Pipeline(P{}, shape, std::forward<Args>(stages)...) {}
  [[nodiscard]] const shape_type& shape() const noexcept { return shape_; }
  /// For empty policies (NullProfiler): no profiler argument.
  template <class... Args>
    requires(std::is_empty_v<P> && (sizeof...(Args) == stage_count || sizeof...(Args) == 0) &&
             (!std::is_same_v<std::remove_cvref_t<Args>, P> && ...))
  explicit Pipeline(Args&&... stages) : Pipeline(P{}, std::forward<Args>(stages)...) {}

  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Cancels and joins if still running; an unobserved stage exception is dropped.
  ~Pipeline() {
    if (threads_.empty()) return;
    cancel();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  /// Starts every stage's threads and returns. Once per pipeline.
  void run() {
    if (started_) throw std::logic_error("dflash::Pipeline::run(): the pipeline was already started");
    started_ = true;
    threads_.reserve(total_workers());
    try {
      launch(std::make_index_sequence<stage_count>{});
    } catch (...) {
      cancel();
      for (auto& t : threads_)
        if (t.joinable()) t.join();
      threads_.clear();
      throw;
    }
  }

  /// Waits for every thread; rethrows the first exception a stage threw.
  /// Call from one thread.
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    std::exception_ptr e;
    {
      std::lock_guard lk(err_m_);
      e = std::exchange(error_, nullptr);
    }
    if (e) std::rethrow_exception(e);
  }

  /// Thread-safe, non-blocking; follow with join().
  void stop(stop_mode mode = stop_mode::cancel) noexcept {
    if (mode == stop_mode::drain) draining_.store(true, std::memory_order_release);
    else cancel();
  }

  [[nodiscard]] bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

  template <std::size_t I>
  [[nodiscard]] queue_type<I>& queue() noexcept {
    return *boost::hana::at_c<I>(queues_);
  }
  template <std::size_t I>
  [[nodiscard]] stage_type<I>& stage() noexcept {
    return boost::hana::at_c<I>(stages_);
  }
  [[nodiscard]] const P& profiler() const noexcept { return prof_.get(); }

 private:
  template <std::size_t... I>
  void make_queues(std::index_sequence<I...>) {
    ((boost::hana::at_c<I>(queues_) = std::make_unique<queue_type<I>>(shape_.depths[I], prof_.get())), ...);
  }
  static shape_type checked(const shape_type& s) {
    for (std::size_t i = 0; i < stage_count; ++i)
      if (s.workers[i] == 0)
        throw std::invalid_argument("dflash::Pipeline: stage " + std::to_string(i) + " needs at least one worker (got 0)");
    for (std::size_t i = 0; i < queue_count; ++i)
      if (s.depths[i] == 0)
        throw std::invalid_argument("dflash::Pipeline: queue " + std::to_string(i) + " needs a depth of at least 1 (got 0)");
    return s;
  }
  std::size_t total_workers() const noexcept {
    std::size_t n = 0;
    for (std::size_t w : shape_.workers) n += w;
    return n;
  }
  template <std::size_t... I>
  void launch(std::index_sequence<I...>) {
    ((live_[I].store(shape_.workers[I], std::memory_order_relaxed)), ...);
    (launch_stage<I>(), ...);
  }
  template <std::size_t I>
  void launch_stage() {
    for (std::size_t w = 0; w < shape_.workers[I]; ++w) threads_.emplace_back([this, w] { worker<I>(w); });
  }

  void close_all() noexcept {
    boost::hana::for_each(queues_, [](auto& q) { q->close(); });
  }
  void cancel() noexcept {
    cancelled_.store(true, std::memory_order_release);
    close_all();
  }
  void fail(std::exception_ptr e) noexcept {
    {
      std::lock_guard lk(err_m_);
      if (!error_) error_ = std::move(e);
    }
    cancel();
  }

  template <std::size_t I>
  void worker(std::size_t w) noexcept {
    using S = stage_type<I>;
    using wait_key = stage_wait_key<S::name>;
    using work_key = stage_work_key<S::name>;
    S& s = boost::hana::at_c<I>(stages_);
    const P& prof = prof_.get();
    try {
      if constexpr (I == 0) {
        auto& out = queue<0>();
        while (!cancelled() && !draining_.load(std::memory_order_acquire)) {
          auto item = timed(prof, work_key{}, [&] { return detail::call_stage(s, w); });
          if (!item) break;
          bool ok;
          {
            auto t = prof.scope(wait_key{});
            ok = out.push(std::move(*item));
          }
          if (!ok) break;
        }
      } else {
        auto& in = queue<I - 1>();
        for (;;) {
          std::optional<typename S::input_type> item;
          {
            auto t = prof.scope(wait_key{});
            item = in.pop();
          }
          if (!item || cancelled()) break;
          if constexpr (I + 1 < stage_count) {
            typename S::output_type y =
                timed(prof, work_key{}, [&] { return detail::call_stage(s, w, std::move(*item)); });
            bool ok;
            {
              auto t = prof.scope(wait_key{});
              ok = queue<I>().push(std::move(y));
            }
            if (!ok) break;
          } else {
            timed(prof, work_key{}, [&] { detail::call_stage(s, w, std::move(*item)); });
          }
        }
      }
    } catch (const pipeline_stop&) {
      cancel();
    } catch (...) {
      fail(std::current_exception());
    }
    // The last worker of a stage closes its output: downstream drains and ends.
    if (live_[I].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if constexpr (I < queue_count) queue<I>().close();
    }
  }

  [[no_unique_address]] profiler_ref<P> prof_;
  stages_tuple stages_;
  shape_type shape_;
  queues_tuple queues_;
  std::array<std::atomic<std::size_t>, stage_count> live_{};
  std::vector<std::thread> threads_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> draining_{false};
  bool started_ = false;
  std::mutex err_m_;
  std::exception_ptr error_;
};

/// The complete key set of a pipeline template, for the profiler's type:
/// `AccumulatingProfiler<pipeline_keys_t<train_pipeline>>`.
template <template <class> class PipelineOf>
using pipeline_keys_t = typename PipelineOf<NullProfiler>::keys;

}  // namespace dflash
