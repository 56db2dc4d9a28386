#pragma once
// detail::flow_state<P, Topo>: the profiler of a Pipeline and what it records
// about items' flow — the tag an item carries from stage to stage (its
// flow_stamp under a FlowPolicy, else its source sequence number), the
// "<stage>.age" / "<stage>.age_gpu_end" / "<sink>.e2e" rows, the flow steps a
// TraceProfiler draws, and the stamps kept beside device links' slots (a
// user's device item carries none). Nothing here runs unless P is a
// FlowPolicy, or some stage is in_order (then only the sequence number).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/detail/format.hpp"
#include "dflash/detail/std_chrono.hpp"
#include "dflash/pipeline/item.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::detail {

template <ProfilerPolicy P, class Topo>
class flow_state {
  template <std::size_t I>
  using stage_type = typename Topo::template stage_type<I>;
  static constexpr std::size_t stage_count = Topo::stage_count;

 public:
  /// Items carry a flow_stamp (item.hpp): the policy stamps items with its clock.
  static constexpr bool flow = FlowPolicy<P>;
  /// What follows an item from stage to stage: its flow_stamp, or its sequence
  /// number (unused unless some stage is in_order).
  using tag_type = std::conditional_t<flow, flow_stamp, std::uint64_t>;
  /// Links carry the tag in an envelope (else the tag is never read).
  static constexpr bool tagged = flow || Topo::sequenced;

  /// The policy's keys list every flow row (pipeline_keys does; a hand-made key set may not).
  static constexpr bool flow_keys_listed = []<std::size_t... I>(std::index_sequence<I...>) {
    return ((I == 0 || (P::keys::contains(stage_age_key<stage_type<I>::name>::name()) &&
                        P::keys::contains(stage_age_clock_backwards_key<stage_type<I>::name>::name()) &&
                        (!Topo::template device_stage<I> ||
                         P::keys::contains(stage_age_gpu_end_key<stage_type<I>::name>::name())))) &&
            ...) &&
           P::keys::contains(stage_e2e_key<stage_type<stage_count - 1>::name>::name());
  }(std::make_index_sequence<stage_count>{});

  explicit flow_state(const P& prof) noexcept : prof_(prof) {}

  [[nodiscard]] const P& prof() const noexcept { return prof_.get(); }

  /// The tag of an item leaving its source with sequence number `seq`.
  [[nodiscard]] tag_type source_tag([[maybe_unused]] std::uint64_t seq) const noexcept {
    if constexpr (flow) return flow_stamp{seq, now_ns()};
    else return seq;
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
  /// The stamp beside slot `slot` of device link L (flow only). Written by
  /// the producer before publish, read by the consumer after pop (the
  /// channel's hand-over orders them).
  [[nodiscard]] flow_stamp& slot_stamp(std::size_t l, std::size_t slot) noexcept
    requires(flow && Topo::has_device_links)
  {
    return stamps_[l][slot];
  }

  /// Trace tracks read "target_forward#2", not "thread 3" (stateful policies only).
  template <std::size_t I>
  void name_worker(std::size_t w) const noexcept {
    if constexpr (P::enabled) {
      try {
        const std::string_view name = stage_type<I>::name.view();
        name_this_thread(prof(), formatted("%.*s#%zu", static_cast<int>(name.size()), name.data(), w));
      } catch (...) {  // a name is cosmetic: never a reason to stop
      }
    }
  }

  [[nodiscard]] static std::int64_t now_ns() noexcept
    requires flow
  {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(P::clock::now().time_since_epoch()).count();
  }

 protected:
  /// Device link L has `slots` slots, each with a stamp beside it.
  void open_slot_stamps([[maybe_unused]] std::size_t l, [[maybe_unused]] std::size_t slots) {
    if constexpr (flow && Topo::has_device_links) stamps_[l].assign(slots, flow_stamp{});
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

  struct slot_stamps_none {};
  using slot_stamps = std::conditional_t<flow && Topo::has_device_links,
                                         std::array<std::vector<flow_stamp>, Topo::link_count>, slot_stamps_none>;

  [[no_unique_address]] profiler_ref<P> prof_;
  [[no_unique_address]] slot_stamps stamps_;
};

}  // namespace dflash::detail
