#pragma once
// dflash::detail::pipeline_core<P, Specs...>: the run-time state of a Pipeline
// that its agents (agents/*.hpp) share — the stages, one endpoint per link
// (what the link kind's open() made), the device state, and the run control:
// cancel, drain, the first error, the live-worker counts that close a stage's
// output when its last worker exits. The facade (pipeline.hpp) owns one and
// starts the agents; nothing here knows a link kind by name.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/device/event_pool.hpp"
#include "dflash/pipeline/checks.hpp"
#include "dflash/pipeline/endpoint.hpp"
#include "dflash/pipeline/agents/segment_sync.hpp"
#include "dflash/pipeline/agents/source_pull.hpp"
#include "dflash/pipeline/agents/stage_seats.hpp"
#include "dflash/pipeline/in_order.hpp"
#include "dflash/pipeline/item.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/pipeline/shape.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/pipeline/stop.hpp"
#include "dflash/pipeline/topology.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::detail {

template <ProfilerPolicy P, class... Specs>
class pipeline_core {
 public:
  using topo = topology<Specs...>;
  static constexpr std::size_t stage_count = topo::stage_count;
  static constexpr std::size_t link_count = topo::link_count;
  using shape_type = pipeline_shape<stage_count, link_count>;
  using backend_type = typename topo::backend_type;
  template <std::size_t I>
  using stage_type = typename topo::template stage_type<I>;
  template <std::size_t L>
  using link_kind = typename topo::template link_kind<L>;

  /// Items carry a flow_stamp (item.hpp): the policy stamps items with its clock.
  static constexpr bool flow = FlowPolicy<P>;
  /// What follows an item from stage to stage: its flow_stamp, or its sequence
  /// number (unused unless some stage is in_order).
  using tag_type = std::conditional_t<flow, flow_stamp, std::uint64_t>;
  /// Links carry the tag in an envelope (else the tag is never read).
  static constexpr bool tagged = flow || topo::sequenced;

  /// The policy's keys list every flow row (pipeline_keys does; a hand-made key set may not).
  static constexpr bool flow_keys_listed = []<std::size_t... I>(std::index_sequence<I...>) {
    return ((I == 0 || (P::keys::contains(stage_age_key<stage_type<I>::name>::name()) &&
                        P::keys::contains(stage_age_clock_backwards_key<stage_type<I>::name>::name()) &&
                        (!topo::template device_stage<I> ||
                         P::keys::contains(stage_age_gpu_end_key<stage_type<I>::name>::name())))) &&
            ...) &&
           P::keys::contains(stage_e2e_key<stage_type<stage_count - 1>::name>::name());
  }(std::make_index_sequence<stage_count>{});

  template <std::size_t L>
  static auto item_of() {
    using T = typename stage_type<L>::output_type;
    if constexpr (topo::template pending_at<L>)
      return std::type_identity<pending<T, backend_type, std::conditional_t<flow, flow_stamp, no_stamp>>>{};
    else if constexpr (tagged && !topo::template slots_at<L>) return std::type_identity<sequenced<T, tag_type>>{};
    else return std::type_identity<T>{};
  }

 public:
  /// What link L carries: the producer's output_type, or it in an envelope (item.hpp).
  template <std::size_t L>
  using item_type = typename decltype(item_of<L>())::type;
  /// The run-time object of link L (a bounded_queue, a device_channel, ...).
  template <std::size_t L>
  using endpoint_type = typename link_kind<L>::template endpoint<item_type<L>, P>;

 private:
  template <std::size_t... I>
  static auto stages_of(std::index_sequence<I...>) -> std::tuple<stage_type<I>...>;
  template <std::size_t... L>
  static auto links_of(std::index_sequence<L...>) -> std::tuple<std::unique_ptr<endpoint_type<L>>...>;
  template <std::size_t I>
  using order_value = std::conditional_t<std::is_void_v<typename stage_type<I>::input_type>, char,
                                         typename stage_type<I>::input_type>;
  // A reorder buffer only where a stage is in_order: the others hold an empty
  // placeholder, so a build compiles no buffer (a std::map) it never uses.
  struct no_reorder {};
  template <std::size_t I>
  using order_type =
      std::conditional_t<topo::template in_order_at<I>, reorder_buffer<order_value<I>, tag_type>, no_reorder>;
  template <std::size_t... I>
  static auto orders_of(std::index_sequence<I...>) -> std::tuple<order_type<I>...>;

  // Device state: owned only by pipelines with device links.
  struct device_state_none {};
  struct device_state_some {
    using B = backend_type;
    B backend;
    std::array<std::vector<typename B::stream_type>, stage_count> streams{};
    std::array<std::vector<int>, stage_count> devices{};  // the device of each stream (placement)
    std::array<std::unique_ptr<event_pool<B>>, link_count> pools{};
  };
  // The stamps of device links' slots, by slot index: the user's device item
  // carries none. Written by the producer before publish, read by the
  // consumer after pop (the channel's hand-over orders them).
  struct slot_stamps_none {};
  using slot_stamps =
      std::conditional_t<flow && topo::has_device_links, std::array<std::vector<flow_stamp>, link_count>, slot_stamps_none>;

 public:
  template <class... Args>
  pipeline_core(const P& prof, const shape_type& shape, Args&&... stages)
      : prof_(prof), stages_(std::forward<Args>(stages)...), shape_(shape) {
    open_links(std::make_index_sequence<link_count>{});
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         if constexpr (helped<I>)
           if (shape_.here(I - 1) && shape_.here(I)) seats_[I] = std::make_unique<stage_seats>(topo::template in_order_at<I> ? 1 : shape_.workers[I]);
       }()),
       ...);
    }(std::make_index_sequence<stage_count>{});
    // One source worker only: several workers' calls may wait for one another
    // (a barrier, one index's input made by another), and a consumer thread in
    // one index's call would leave the others' own threads parked.
    if constexpr (source_pulled)
      if (shape_.here(0) && shape_.here(1) && shape_.workers[0] == 1) pull_ = std::make_unique<source_pull>();
  }
  pipeline_core(const pipeline_core&) = delete;
  pipeline_core& operator=(const pipeline_core&) = delete;
  ~pipeline_core() { destroy_streams(); }  // each worker already waited for its stream's work

  [[nodiscard]] const P& prof() const noexcept { return prof_.get(); }
  [[nodiscard]] const shape_type& shape() const noexcept { return shape_; }
  template <std::size_t I>
  [[nodiscard]] stage_type<I>& stage() noexcept {
    return std::get<I>(stages_);
  }
  template <std::size_t L>
  [[nodiscard]] endpoint_type<L>& link() noexcept {
    return *std::get<L>(links_);
  }
  template <std::size_t L>
  [[nodiscard]] bool link_open() const noexcept {
    return std::get<L>(links_) != nullptr;
  }
  [[nodiscard]] auto& backend() noexcept { return dev_.backend; }
  [[nodiscard]] auto& streams(std::size_t i) noexcept { return dev_.streams[i]; }
  /// The device of worker w of device stage i (its stream's).
  [[nodiscard]] int device(std::size_t i, std::size_t w) const noexcept { return dev_.devices[i][w]; }
  [[nodiscard]] auto& pool(std::size_t l) noexcept { return *dev_.pools[l]; }
  [[nodiscard]] segment_sync& segment(std::size_t first) noexcept { return segs_[first]; }
  template <std::size_t I>
  [[nodiscard]] auto& reorder() noexcept {
    return std::get<I>(orders_);
  }

  // ---- help-first: a producer's thread may call the next host stage itself (host_worker.hpp) ----
  /// Stage I runs on a host_worker of its own (no device stream, no direct segment).
  template <std::size_t I>
  static constexpr bool host_agent = !topo::template device_stage<I> && !topo::template direct_in<I>() &&
                                     !topo::template direct_out<I>();
  /// Stage I is fed, from a host_worker stage, by a link kind that lets a
  /// producer call the consumer instead of pushing (queue_link says so; a
  /// user's kind, whose push may do more, is never bypassed), unless stage I
  /// is OwnThreadsOnlyStage.
  template <std::size_t I>
  static constexpr bool helped = [] {
    if constexpr (I == 0) return false;
    else
      return host_agent<I - 1> && host_agent<I> && !OwnThreadsOnlyStage<stage_type<I>> &&
             !topo::template crosses_at<I - 1> &&
             requires { requires link_kind<I - 1>::consumer_callable_by_producer; } &&
             HelpFirstEndpoint<endpoint_type<I - 1>>;
  }();
  /// The seats of helped stage I; null where its producer or it runs in another process.
  template <std::size_t I>
  [[nodiscard]] stage_seats* seats() noexcept {
    return seats_[I].get();
  }
  /// Stage 1's threads may call the source (agents/source_pull.hpp): stage 1
  /// is helped (above) and the source may run on threads not its own (pulled
  /// at run time only with one source worker, see the constructor).
  static constexpr bool source_pulled = [] {
    if constexpr (stage_count < 2) return false;
    else
      return helped<1> && !OwnThreadsOnlyStage<stage_type<0>> && PullableEndpoint<endpoint_type<0>, item_type<0>>;
  }();
  /// The source's seats and park where stage 1's threads call it; null elsewhere.
  [[nodiscard]] source_pull* pull() noexcept { return pull_.get(); }

  // ---- run control ----
  [[nodiscard]] bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
  [[nodiscard]] bool draining() const noexcept { return draining_.load(std::memory_order_acquire); }
  void drain() noexcept {
    draining_.store(true, std::memory_order_release);
    if (pull_) pull_->end();  // a parked source thread exits
  }
  /// Every link wakes its blocked threads; threads exit after their current call.
  void cancel() noexcept {
    cancelled_.store(true, std::memory_order_release);
    if (pull_) pull_->end();
    [&]<std::size_t... L>(std::index_sequence<L...>) {
      ((link_open<L>() ? link_kind<L>::cancel(link<L>()) : void()), ...);
    }(std::make_index_sequence<link_count>{});
    for (auto& g : segs_) g.turn.notify_all();  // threads waiting for an in_order turn (they also re-check every 2 ms)
  }
  /// Records the first error and cancels.
  void fail(std::exception_ptr e) noexcept {
    {
      std::lock_guard lk(err_m_);
      if (!error_) error_ = std::move(e);
    }
    cancel();
  }
  [[nodiscard]] std::exception_ptr take_error() noexcept {
    std::lock_guard lk(err_m_);
    return std::exchange(error_, nullptr);
  }
  /// The next source sequence number, one numbering across every source worker.
  std::uint64_t next_seq() noexcept { return source_seq_.fetch_add(1, std::memory_order_relaxed); }

  // ---- flow: stamps and the rows they give (profiled pipelines only) ----
  /// The tag of an item leaving its source with sequence number `seq`.
  [[nodiscard]] tag_type source_tag([[maybe_unused]] std::uint64_t seq) const noexcept {
    if constexpr (flow) return flow_stamp{seq, now_ns()};
    else return seq;
  }
  /// The next source item's tag, numbered across every source worker (a pipeline without tags reads nothing).
  [[nodiscard]] tag_type next_source_tag() noexcept {
    if constexpr (tagged) return source_tag(next_seq());
    else return tag_type{};
  }
  /// Stage I starts the item tagged `t`: "<stage>.age".
  template <std::size_t I>
  void flow_start([[maybe_unused]] const tag_type& t) const {
    if constexpr (flow && I > 0) since_born<stage_age_key<stage_type<I>::name>, I>(t);
  }
  /// Stage I ended its call on the item tagged `t` (a source: the item it
  /// made): the sink's "<sink>.e2e", and for policies that draw flows
  /// (TraceProfiler) the item's step on this stage's work range.
  template <std::size_t I>
  void flow_done([[maybe_unused]] const tag_type& t) const {
    if constexpr (flow) {
      using work = stage_work_key<stage_type<I>::name>;
      if constexpr (requires { prof().flow_step(work{}, t.seq, flow_phase::step); })
        prof().flow_step(work{}, t.seq,
                         I == 0 ? flow_phase::start : I + 1 == stage_count ? flow_phase::end : flow_phase::step);
      if constexpr (I + 1 == stage_count) since_born<stage_e2e_key<stage_type<I>::name>, I>(t);
    }
  }
  /// The device work of stage I (I > 0) on the item born at `born_ns` ended
  /// at `end_ns` (both on the profiler's clock): "<stage>.age_gpu_end".
  template <std::size_t I>
  void flow_gpu_end(std::int64_t born_ns, std::int64_t end_ns) const
    requires flow
  {
    age_at<stage_age_gpu_end_key<stage_type<I>::name>, I>(born_ns, end_ns);
  }
  /// The stamp beside slot `slot` of device link L (flow only).
  [[nodiscard]] flow_stamp& slot_stamp(std::size_t l, std::size_t slot) noexcept
    requires(flow && topo::has_device_links)
  {
    return stamps_[l][slot];
  }

  /// Threads stage I starts: none if it runs on its producers' threads or in another process.
  template <std::size_t I>
  [[nodiscard]] std::size_t threads_of() const noexcept {
    if (!shape_.here(I)) return 0;
    if constexpr (topo::template direct_in<I>()) return 0;
    else if constexpr (topo::template direct_out<I>()) {
      const std::size_t p = parallel_stage<I>();
      return p < stage_count ? shape_.workers[p] : 1;
    } else {
      return shape_.workers[I];
    }
  }
  /// The stage with several workers in the direct segment starting at A, or stage_count if none.
  template <std::size_t A>
  [[nodiscard]] std::size_t parallel_stage() const noexcept {
    return parallel_stage_of<topo, A>(shape_);
  }
  template <std::size_t I>
  void set_live(std::size_t n) noexcept {
    live_[I].store(n, std::memory_order_relaxed);
  }
  // The last thread of stage I (of the direct segment I..B) closes its output: downstream drains and ends.
  template <std::size_t I, std::size_t B = I>
  void worker_exit() noexcept {
    if (live_[I].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if constexpr (B < link_count) link_kind<B>::close(link<B>());
    }
  }
  // Trace tracks read "target_forward#2", not "thread 3" (stateful policies only).
  template <std::size_t I>
  void name_worker(std::size_t w) const noexcept {
    if constexpr (P::enabled) {
      try {
        name_this_thread(prof(), std::string(stage_type<I>::name.view()) + "#" + std::to_string(w));
      } catch (...) {  // a name is cosmetic: never a reason to stop
      }
    }
  }

  [[nodiscard]] static std::int64_t now_ns() noexcept
    requires flow
  {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(P::clock::now().time_since_epoch()).count();
  }

 private:
  // A clock behind the birth stamp gives no age: the item is counted under
  // "<stage>.age_clock_backwards" instead (a negative age would print as a
  // huge unsigned one; clamping it to 0 would hide that the clocks disagree).
  template <class K, std::size_t I>
  void since_born(const flow_stamp& t) const {
    age_at<K, I>(t.born_ns, now_ns());
  }
  template <class K, std::size_t I>
  void age_at(std::int64_t born_ns, std::int64_t at_ns) const {
    if (at_ns < born_ns)
      prof().add(stage_age_clock_backwards_key<stage_type<I>::name>{}, std::chrono::nanoseconds{0});
    else
      prof().add(K{}, std::chrono::nanoseconds{at_ns - born_ns});
  }

 public:
  // in_order stage I: runs `run(x, tag)` if x is due, then the parked items that follow it.
  template <std::size_t I, class Run>
  bool deliver_in_order(typename stage_type<I>::input_type&& x, const tag_type& tag, Run&& run) {
    return reorder<I>().deliver(std::move(x), tag, stage_type<I>::name.view(), std::forward<Run>(run),
                                [this] { return !cancelled(); });
  }
  // An in_order stage that still parks items after a normal end waited for an
  // item that never came: report the loss instead of ending as if complete.
  void check_in_order_complete() {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         if constexpr (topo::template in_order_at<I>) {
           auto& o = reorder<I>();
           if (o.parked() != 0)
             fail(std::make_exception_ptr(std::logic_error(
                 "dflash::Pipeline: in_order stage '" + std::string(stage_type<I>::name.view()) + "' ended with " +
                 std::to_string(o.parked()) + " item(s) parked: item #" + std::to_string(o.next()) +
                 " never arrived, so they were not delivered")));
         }
       }()),
       ...);
    }(std::make_index_sequence<stage_count>{});
  }

  // ---- device streams: one per worker of each device stage, made by run() ----
  // Each on its worker's device (shape.devices), checked against the backend's
  // device count first; the run() thread's current device is left as it was.
  void make_streams() {
    if constexpr (topo::has_device_links) {
      auto& b = dev_.backend;
      check_devices<topo>(shape_, [&] {
        if constexpr (MultiDeviceBackend<backend_type>) return b.device_count();
        else return 1;
      });
      [[maybe_unused]] int was = 0;
      if constexpr (MultiDeviceBackend<backend_type>) was = std::min(b.current_device(), b.device_count() - 1);
      try {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          (([&] {
             if constexpr (topo::template device_stage<I>)
               for (std::size_t w = 0; w < threads_of<I>(); ++w) {
                 const int placed = shape_.device_of(I, w);
                 const int d = placed < 0 ? was : placed;
                 if constexpr (MultiDeviceBackend<backend_type>) b.set_device(d);
                 dev_.streams[I].push_back(b.create_stream());
                 dev_.devices[I].push_back(d);
               }
           }()),
           ...);
        }(std::make_index_sequence<stage_count>{});
      } catch (...) {
        if constexpr (MultiDeviceBackend<backend_type>) b.set_device(was);
        throw;
      }
      if constexpr (MultiDeviceBackend<backend_type>) b.set_device(was);
    }
  }

 private:
  // Each link the kind's open() makes: only where a stage next to it runs in this process.
  template <std::size_t... L>
  void open_links(std::index_sequence<L...>) {
    (open_link<L>(), ...);
  }
  template <std::size_t L>
  void open_link() {
    if (!shape_.here(L) && !shape_.here(L + 1)) return;
    const link_context<P, std::conditional_t<topo::has_device_links, backend_type, no_backend>> ctx{
        shape_.depths[L], prof(), device_backend(), std::span<const int>(shape_.ranks[L]),
        std::span<const int>(shape_.ranks[L + 1]), shape_.rows[L]};
    std::get<L>(links_) = link_kind<L>::template open<item_type<L>, P>(ctx);
    if constexpr (topo::template pending_at<L>) dev_.pools[L] = std::make_unique<event_pool<backend_type>>(dev_.backend);
    if constexpr (flow && topo::template slots_at<L>) stamps_[L].assign(shape_.depths[L], flow_stamp{});
  }
  auto* device_backend() noexcept {
    if constexpr (topo::has_device_links) return &dev_.backend;
    else return static_cast<no_backend*>(nullptr);
  }
  void destroy_streams() noexcept {
    if constexpr (topo::has_device_links) {
      for (auto& v : dev_.streams) {
        for (auto st : v) dev_.backend.destroy_stream(st);
        v.clear();
      }
      for (auto& v : dev_.devices) v.clear();
    }
  }

  using stages_tuple = decltype(stages_of(std::make_index_sequence<stage_count>{}));
  using links_tuple = decltype(links_of(std::make_index_sequence<link_count>{}));
  using orders_tuple = decltype(orders_of(std::make_index_sequence<stage_count>{}));
  using device_state = std::conditional_t<topo::has_device_links, device_state_some, device_state_none>;

  [[no_unique_address]] profiler_ref<P> prof_;
  [[no_unique_address]] device_state dev_;  // first: stages and device links may hold its events and memory
  stages_tuple stages_;
  shape_type shape_;
  links_tuple links_;
  std::array<std::atomic<std::size_t>, stage_count> live_{};
  std::array<segment_sync, stage_count> segs_;  // used by direct segments (indexed by first stage)
  orders_tuple orders_;
  std::array<std::unique_ptr<stage_seats>, stage_count> seats_{};  // helped stages only
  std::unique_ptr<source_pull> pull_;                               // a source stage 1's threads call
  [[no_unique_address]] slot_stamps stamps_;
  std::atomic<std::uint64_t> source_seq_{0};
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> draining_{false};
  std::mutex err_m_;
  std::exception_ptr error_;
};

}  // namespace dflash::detail
