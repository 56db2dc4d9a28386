#pragma once
// Every check a dflash::Pipeline makes, with the message that states the fix:
//   static_checks<Topology>::value  at compile time — the entries alternate
//       stage / link kind, each stage has what its position and neighbouring
//       links ask (call shape, types), what a link's delivery rules out,
//       each link kind's own requirements (Link::check<link_site>), adjacent
//       types match;
//   checked_shape<Topology>(shape)  at run time — workers, depths, direct
//       segments and placement, before any thread or link exists
//       (std::invalid_argument).

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/detail/capacity.hpp"
#include "dflash/detail/format.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/pipeline/link_site.hpp"
#include "dflash/pipeline/shape.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/pipeline/topology.hpp"

namespace dflash::detail {

// Instantiated once per adjacent pair; the error names From and To.
template <class From, class To>
struct link_check {
  static_assert(std::is_same_v<typename From::output_type, typename To::input_type>,
                "dflash::Pipeline: a stage's output_type does not match the next stage's input_type "
                "(From and To in link_check<From, To> are the two stages)");
  static constexpr bool value = true;
};

template <class T>
struct static_checks {
 private:
  template <std::size_t I>
  static consteval bool check_stage() {
    using S = typename T::template stage_type<I>;
    static_assert(requires { S::name; },
                  "dflash::Pipeline: a stage has no `name`: add `static constexpr dflash::fixed_string "
                  "name{\"my_stage\"};` (its keys are my_stage.wait / my_stage.work)");
    static_assert(requires { typename S::input_type; },
                  "dflash::Pipeline: a stage has no `input_type`: add `using input_type = ...;` (void for a source)");
    static_assert(requires { typename S::output_type; },
                  "dflash::Pipeline: a stage has no `output_type`: add `using output_type = ...;` (void for a sink)");
    static_assert(!requires { S::name; } || NamedStage<S>,
                  "dflash::Pipeline: a stage's `name` must be a `static constexpr dflash::fixed_string`");
    if constexpr (!NamedStage<S>) {
      return false;  // reported above
    } else if constexpr (T::template device_stage<I>) {
      return check_device_stage<I, S>();
    } else if constexpr (I == 0) {
      static_assert(SourceStage<S>,
                    "dflash::Pipeline: the first stage must be a source: input_type = void, "
                    "std::optional<output_type> operator()()");
    } else if constexpr (I + 1 == T::stage_count) {
      static_assert(SinkStage<S>,
                    "dflash::Pipeline: the last stage must be a sink: output_type = void, void operator()(input_type&&)");
    } else {
      static_assert(TransformStage<S>,
                    "dflash::Pipeline: a middle stage must be a transform: output_type operator()(input_type&&)");
    }
    return true;
  }

  // A stage next to a link that carries device slots: the call shape its position asks.
  template <std::size_t I, class S>
  static consteval bool check_device_stage() {
    using DS = device_stream<typename T::backend_type>;
    using In = typename S::input_type;
    using Out = typename S::output_type;
    if constexpr (I == 0) {
      static_assert(callable_maybe_indexed<S, Out&, DS>,
                    "dflash::Pipeline: a source before a device_link must be callable as "
                    "bool(output_type& slot, dflash::device_stream<B>) — enqueue the work that fills the slot, "
                    "return false when exhausted");
    } else if constexpr (I + 1 == T::stage_count) {
      static_assert(callable_maybe_indexed<S, In&, DS>,
                    "dflash::Pipeline: a sink after a device_link must be callable as "
                    "void(input_type& slot, dflash::device_stream<B>)");
    } else if constexpr (T::template input_slot<I>() && T::template output_slot<I>()) {
      static_assert(callable_maybe_indexed<S, In&, Out&, DS>,
                    "dflash::Pipeline: a stage between two device_links must be callable as "
                    "void(input_type& in_slot, output_type& out_slot, dflash::device_stream<B>)");
    } else if constexpr (T::template input_slot<I>()) {
      static_assert(callable_maybe_indexed<S, In&, DS>,
                    "dflash::Pipeline: a stage after a device_link (and before a queue_link) must be callable as "
                    "output_type(input_type& slot, dflash::device_stream<B>)");
    } else {
      static_assert(callable_maybe_indexed<S, In&&, Out&, DS>,
                    "dflash::Pipeline: a stage before a device_link must be callable as "
                    "void(input_type&&, output_type& slot, dflash::device_stream<B>) — a host-only stage cannot "
                    "feed a device_link");
    }
    return true;
  }

  // A link that drops or multiplies items (its delivery says so) breaks what
  // needs each item once: an in_order stage after it would park every later
  // item for one that never comes, and an event of a pending value would go
  // back to its pool never, or twice.
  template <std::size_t L>
  static consteval bool check_delivery() {
    using D = typename T::template link_kind<L>::delivery;
    if constexpr (!std::is_same_v<D, delivers_each_once>) {
      static_assert(!link_site<T, L>::in_order_downstream,
                    "dflash::Pipeline: an in_order stage follows a link whose delivery is not delivers_each_once (it "
                    "drops, multiplies or regroups items), so the in_order stage would wait for items that never "
                    "come: put the in_order stage before that link, or drop in_order");
      static_assert(!link_site<T, L>::carries_pending,
                    "dflash::Pipeline: a link whose delivery is not delivers_each_once cannot follow a device stage "
                    "into a host stage (each value there carries an event that must reach its consumer once): put a "
                    "host stage between them, joined by a queue_link");
    }
    return true;
  }

  template <std::size_t... L>
  static consteval bool check_all(std::index_sequence<L...>) {
    static_assert((PipelineLink<typename T::template link_kind<L>> && ...),
                  "dflash::Pipeline: every second entry must be a link kind — dflash::queue_link<\"name\", depth>, "
                  "dflash::device_link<\"name\", depth>, dflash::direct_link<\"name\", depth> (or a type modelling "
                  "dflash::PipelineLink, e.g. dflash::mpi::net_link)");
    if constexpr ((PipelineLink<typename T::template link_kind<L>> && ...)) {
      static_assert(!(T::sequenced && T::has_device_links),
                    "dflash::Pipeline: in_order stages are not supported in pipelines with device links yet");
      return (check_stage<L>() && ...) && check_stage<T::stage_count - 1>() &&
             (link_check<typename T::template stage_type<L>, typename T::template stage_type<L + 1>>::value && ...) &&
             (check_delivery<L>() && ...) && (T::template link_kind<L>::template check<link_site<T, L>>() && ...);
    } else {
      return false;
    }
  }

 public:
  static constexpr bool value = check_all(std::make_index_sequence<T::link_count>{});
};

// A profiler that follows items (FlowPolicy, item.hpp) must list the flow rows among its keys.
template <class Core>
struct flow_keys_check {
  static_assert(!Core::flow || Core::flow_keys_listed,
                "dflash::Pipeline: this profiler follows every item (it times with a clock, pipeline/item.hpp) and "
                "records '<stage>.age', '<stage>.age_clock_backwards', '<device stage>.age_gpu_end' and '<sink>.e2e', "
                "which its key set lacks: "
                "build its keys with dflash::pipeline_keys<...>, or opt out of flow tracking with a policy that "
                "declares `static constexpr bool flow = false;`");
  static constexpr bool value = true;
};

// A direct segment runs on the threads of its one parallel stage; its source
// (if any) is serial; an in_order stage in it directly follows the parallel stage.
template <class T, std::size_t A, class Shape>
void check_segment(const Shape& s) {
  if constexpr (T::template direct_out<A>() && !T::template direct_in<A>()) {
    constexpr std::size_t B = T::template segment_last<A>();
    constexpr std::size_t none = T::stage_count;
    if (A == 0 && s.workers[0] > 1)
      throw_invalid_argument("dflash::Pipeline: a source joined by a direct_link runs one call at a time "
                             "(workers must be 1, got %zu)", s.workers[0]);
    const std::size_t p = parallel_stage_of<T, A>(s);
    for (std::size_t k = p + 1; k <= B && p < none; ++k)
      if (s.workers[k] > 1)
        throw_invalid_argument("dflash::Pipeline: stages %zu and %zu are joined by direct_links and both have several "
                               "workers; a direct segment runs on the workers of one parallel stage (put a queue_link "
                               "between them)", p, k);
    if (T::template in_order_at<A> && p < none)
      throw_invalid_argument("dflash::Pipeline: the in_order stage %zu starts a direct segment, which then runs on one "
                             "thread: stage %zu of that segment cannot have several workers", A, p);
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (((T::template in_order_at<A + K> && K > 0 && p < none && p + 1 != A + K)
            ? throw_invalid_argument("dflash::Pipeline: the in_order stage %zu in a direct segment must directly "
                                     "follow its parallel stage (%zu)", A + K, p)
            : void()),
       ...);
    }(std::make_index_sequence<B - A + 1>{});
  }
}

/// What checked_shape reads of a topology and a shape, as plain data: the
/// checks below are one non-template function shared by every pipeline type,
/// not a copy compiled per topology.
struct shape_facts {
  std::span<const std::size_t> workers, depths;
  std::span<const std::vector<int>> ranks;  ///< per stage; empty = every process
  int rank;
  std::span<const bool> in_order;               ///< per stage
  std::span<const std::string_view> link_names;  ///< per link
  std::span<const bool> crosses_processes;      ///< per link
  std::span<const row_sizes> rows;              ///< per link
  std::span<const bool> carries_rows;           ///< per link: its delivery is delivers_rows_once
};

/// Stage i of `f` runs on `rank` (an empty list: on every process).
inline bool runs_on(const shape_facts& f, std::size_t i, int rank) noexcept {
  const auto& r = f.ranks[i];
  return r.empty() || std::find(r.begin(), r.end(), rank) != r.end();
}
/// Stage i of `f` runs in this process (pipeline_shape::here over plain data).
inline bool runs_here(const shape_facts& f, std::size_t i) noexcept { return runs_on(f, i, f.rank); }

/// Workers, depths and placement of any topology; std::invalid_argument with the fix otherwise.
inline void check_shape_facts(const shape_facts& f) {
  for (std::size_t i = 0; i < f.workers.size(); ++i)
    if (f.workers[i] == 0) throw_invalid_argument("dflash::Pipeline: stage %zu needs at least one worker (got 0)", i);
  for (std::size_t i = 0; i < f.workers.size(); ++i)
    if (f.in_order[i] && f.workers[i] != 1)
      throw_invalid_argument("dflash::Pipeline: stage %zu is in_order and runs on exactly one worker (got %zu)", i,
                             f.workers[i]);
  for (std::size_t i = 0; i < f.depths.size(); ++i) {
    const int len = static_cast<int>(f.link_names[i].size());
    const char* name = f.link_names[i].data();
    if (f.depths[i] == 0)
      throw_invalid_argument("dflash::Pipeline: link %zu ('%.*s') needs a depth of at least 1 (got 0)", i, len, name);
    // One limit for every link kind, whatever it allocates (a direct link's window allocates nothing).
    if (f.depths[i] > max_ring_capacity)
      throw_invalid_argument("dflash::Pipeline: link %zu ('%.*s') needs a depth of at most 2^61 (got %zu)", i, len,
                             name, f.depths[i]);
    // A rows link checks its own sizes against its item type when it is made.
    if (!f.carries_rows[i] && f.rows[i] != row_sizes{})
      throw_invalid_argument("dflash::Pipeline: link %zu ('%.*s') does not carry rows: shape.rows[%zu] is for a "
                             "dflash::device_queue_link only and must stay {}", i, len, name, i);
  }
}

/// Placement: a link between this process and another must be able to cross, and some stage must run here.
inline void check_placement_facts(const shape_facts& f) {
  for (std::size_t l = 0; l < f.depths.size(); ++l)
    if (runs_here(f, l) != runs_here(f, l + 1) && !f.crosses_processes[l])
      throw_invalid_argument(
          "dflash::Pipeline: stages %zu and %zu run in different processes (shape.ranks), but link %zu ('%.*s') cannot "
          "cross processes: make it a dflash::mpi::net_link, or place both stages on the same ranks",
          l, l + 1, l, static_cast<int>(f.link_names[l].size()), f.link_names[l].data());
  bool any = false;
  for (std::size_t i = 0; i < f.workers.size(); ++i) any = any || runs_here(f, i);
  if (!any)
    throw_invalid_argument("dflash::Pipeline: no stage runs in this process (rank %d is in none of shape.ranks)",
                           f.rank);
}

/// The shape, if every size and the placement make sense for topology T; std::invalid_argument otherwise.
template <class T, class Shape>
Shape checked_shape(const Shape& s) {
  static constexpr auto in_order = []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<bool, T::stage_count>{T::template in_order_at<I>...};
  }(std::make_index_sequence<T::stage_count>{});
  static constexpr auto names = []<std::size_t... L>(std::index_sequence<L...>) {
    return std::array<std::string_view, T::link_count>{T::template link_kind<L>::name.view()...};
  }(std::make_index_sequence<T::link_count>{});
  static constexpr auto crosses = []<std::size_t... L>(std::index_sequence<L...>) {
    return std::array<bool, T::link_count>{bool(T::template link_kind<L>::crosses_processes)...};
  }(std::make_index_sequence<T::link_count>{});
  static constexpr auto carries_rows = []<std::size_t... L>(std::index_sequence<L...>) {
    return std::array<bool, T::link_count>{
        std::is_same_v<typename T::template link_kind<L>::delivery, delivers_rows_once>...};
  }(std::make_index_sequence<T::link_count>{});
  const shape_facts f{s.workers, s.depths, s.ranks, s.rank, in_order, names, crosses, s.rows, carries_rows};
  check_shape_facts(f);
  [&]<std::size_t... I>(std::index_sequence<I...>) { (check_segment<T, I>(s), ...); }(
      std::make_index_sequence<T::stage_count>{});
  check_placement_facts(f);
  return s;
}

/// Device placement (shape.devices) against the backend's `count` devices,
/// at run(): std::invalid_argument for an id that does not exist or devices
/// given to a stage that has no stream to place.
template <class T, class Shape, class CountDevices>
void check_devices(const Shape& s, CountDevices&& count) {
  bool any = false;
  for (const auto& d : s.devices) any = any || !d.empty();
  if (!any) return;
  const int n = count();
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (([&] {
       if (s.devices[I].empty()) return;
       const std::string_view name = T::template stage_type<I>::name.view();
       const int len = static_cast<int>(name.size());
       if constexpr (!T::template device_stage<I>)
         throw_invalid_argument("dflash::Pipeline: stage %zu ('%.*s') is placed on devices (shape.devices), but it is "
                                "not a device stage: only a stage next to a device_link has a stream to place",
                                I, len, name.data());
       for (const int d : s.devices[I]) {
         if (d >= 0 && d < n) continue;
         if (n > 0)
           throw_invalid_argument("dflash::Pipeline: stage %zu ('%.*s'): device %d in shape.devices does not exist "
                                  "(%d device(s): ids 0..%d)", I, len, name.data(), d, n, n - 1);
         throw_invalid_argument("dflash::Pipeline: stage %zu ('%.*s'): device %d in shape.devices does not exist "
                                "(the backend has no device)", I, len, name.data(), d);
       }
     }()),
     ...);
  }(std::make_index_sequence<T::stage_count>{});
}

}  // namespace dflash::detail
