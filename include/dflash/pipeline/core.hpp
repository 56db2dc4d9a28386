#pragma once
// dflash::detail::pipeline_core<P, Specs...>: the run-time state of a Pipeline
// that its agents (agents/*.hpp) share, composed of parts named for what they
// hold — core_types (what each link carries, the help-first rules),
// device_state (backend, streams, event pools), flow_state (the profiler and
// items' flow rows), run_control (cancel, drain, the first error),
// help_first_state (seats, the source's park), ordered_stages (in_order
// reorder buffers) — plus the stages, one endpoint per link (what the link
// kind's open() made), and the live-worker counts that close a stage's output
// when its last worker exits. The facade (pipeline.hpp) owns one and starts
// the agents; nothing here knows a link kind by name.

#include <array>
#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "dflash/pipeline/agents/segment_sync.hpp"
#include "dflash/pipeline/core_types.hpp"
#include "dflash/pipeline/device_state.hpp"
#include "dflash/pipeline/flow_state.hpp"
#include "dflash/pipeline/help_first.hpp"
#include "dflash/pipeline/in_order.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/pipeline/run_control.hpp"
#include "dflash/pipeline/stop.hpp"

namespace dflash::detail {

template <ProfilerPolicy P, class... Specs>
class pipeline_core : public core_types<P, Specs...>,
                      public device_state<topology<Specs...>>,  // first: stages and device links hold its events and memory
                      public flow_state<P, topology<Specs...>>,
                      public run_control,
                      public help_first_state<core_types<P, Specs...>>,
                      public ordered_stages<topology<Specs...>, typename flow_state<P, topology<Specs...>>::tag_type> {
  using Types = core_types<P, Specs...>;
  using Topo = topology<Specs...>;
  using Flow = flow_state<P, Topo>;

 public:
  using typename Types::shape_type;
  using typename Flow::tag_type;
  using Types::link_count;
  using Types::stage_count;
  template <std::size_t I>  // (the parts' own aliases would make the name ambiguous)
  using stage_type = typename Types::template stage_type<I>;
  template <std::size_t L>
  using link_kind = typename Types::template link_kind<L>;
  template <std::size_t L>
  using endpoint_type = typename Types::template endpoint_type<L>;

  template <class... Args>
  pipeline_core(const P& prof, const shape_type& shape, Args&&... stages)
      : Flow(prof), stages_(std::forward<Args>(stages)...), shape_(shape) {
    [&]<std::size_t... L>(std::index_sequence<L...>) { (open_link<L>(), ...); }(std::make_index_sequence<link_count>{});
    this->open_help_first(shape_);
  }
  pipeline_core(const pipeline_core&) = delete;
  pipeline_core& operator=(const pipeline_core&) = delete;
  ~pipeline_core() { this->destroy_streams(); }  // each worker already waited for its stream's work

  [[nodiscard]] const shape_type& shape() const noexcept { return shape_; }
  template <std::size_t I>
  [[nodiscard]] auto& stage() noexcept {
    return detail::get<I>(stages_);
  }
  template <std::size_t L>
  [[nodiscard]] endpoint_type<L>& link() noexcept {
    return *detail::get<L>(links_);
  }
  template <std::size_t L>
  [[nodiscard]] bool link_open() const noexcept {
    return detail::get<L>(links_) != nullptr;
  }
  [[nodiscard]] segment_sync& segment(std::size_t first) noexcept { return segs_[first]; }

  // ---- run control: what a drain or a cancel wakes ----
  void drain() noexcept {
    mark_draining();
    this->end_pull();  // a parked source thread exits
  }
  /// Every link wakes its blocked threads; threads exit after their current call.
  void cancel() noexcept {
    mark_cancelled();
    this->end_pull();
    [&]<std::size_t... L>(std::index_sequence<L...>) {
      ((link_open<L>() ? link_kind<L>::cancel(link<L>()) : void()), ...);
    }(std::make_index_sequence<link_count>{});
    for (auto& g : segs_) g.turn.notify_all();  // threads waiting for an in_order turn (they also re-check every 2 ms)
  }
  /// Records the first error and cancels.
  void fail(std::exception_ptr e) noexcept {
    keep_first_error(std::move(e));
    cancel();
  }
  /// The next source item's tag, numbered across every source worker (a pipeline without tags reads nothing).
  [[nodiscard]] tag_type next_source_tag() noexcept {
    if constexpr (Flow::tagged) return this->source_tag(next_seq());
    else return tag_type{};
  }
  template <std::size_t I, class Run>
  bool deliver_in_order(typename stage_type<I>::input_type&& x, const tag_type& tag, Run&& run) {
    return ordered_stages<Topo, tag_type>::template deliver_in_order<I>(std::move(x), tag, std::forward<Run>(run),
                                                                        [this] { return !cancelled(); });
  }
  void check_in_order_complete() {
    if (std::string why = this->unfinished(); !why.empty()) fail(std::make_exception_ptr(std::logic_error(why)));
  }

  // ---- threads ----
  /// Threads stage I starts: none if it runs on its producers' threads or in another process.
  template <std::size_t I>
  [[nodiscard]] std::size_t threads_of() const noexcept {
    if (!shape_.here(I)) return 0;
    if constexpr (Topo::template direct_in<I>()) return 0;
    else if constexpr (Topo::template direct_out<I>()) {
      const std::size_t p = parallel_stage<I>();
      return p < stage_count ? shape_.workers[p] : 1;
    } else {
      return shape_.workers[I];
    }
  }
  /// The stage with several workers in the direct segment starting at A, or stage_count if none.
  template <std::size_t A>
  [[nodiscard]] std::size_t parallel_stage() const noexcept {
    return parallel_stage_of<Topo, A>(shape_);
  }
  template <std::size_t I>
  void set_live(std::size_t n) noexcept {
    live_[I].store(n, std::memory_order_relaxed);
  }
  // The last thread of stage I (of the direct segment I..B) closes its output: downstream drains and ends.
  // Not after a cancel: every link is cancelled then, and a close would tell
  // an end that did not come (another stage's thread may still be inside a
  // call of stage I, help-first, when its own threads leave on the cancel).
  template <std::size_t I, std::size_t B = I>
  void worker_exit() noexcept {
    if (live_[I].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if constexpr (B < link_count)
        if (!this->cancelled()) link_kind<B>::close(link<B>());
    }
  }
  /// One stream per worker of each device stage, made by run().
  void make_streams() {
    std::array<std::size_t, stage_count> threads{};
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((threads[I] = threads_of<I>()), ...); }(
        std::make_index_sequence<stage_count>{});
    device_state<Topo>::make_streams(shape_, threads);
  }

 private:
  // Each link the kind's open() makes: only where a stage next to it runs in this process.
  template <std::size_t L>
  void open_link() {
    if (!shape_.here(L) && !shape_.here(L + 1)) return;
    using B = std::remove_pointer_t<decltype(this->backend_ptr())>;
    const link_context<P, B> ctx{shape_.depths[L], this->prof(), this->backend_ptr(), std::span<const int>(shape_.ranks[L]),
                                 std::span<const int>(shape_.ranks[L + 1]), shape_.rows[L]};
    detail::get<L>(links_) = link_kind<L>::template open<typename Types::template item_type<L>, P>(ctx);
    if constexpr (Topo::template pending_at<L>) this->open_pool(L);
    if constexpr (Topo::template slots_at<L>) this->open_slot_stamps(L, shape_.depths[L]);
  }

  typename Types::stages_tuple stages_;
  shape_type shape_;
  typename Types::links_tuple links_;
  std::array<std::atomic<std::size_t>, stage_count> live_{};
  std::array<segment_sync, stage_count> segs_;  // used by direct segments (indexed by first stage)
};

}  // namespace dflash::detail
