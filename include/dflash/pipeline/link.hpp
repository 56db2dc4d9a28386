#pragma once
// The PipelineLink concept: what a link kind (the entry between two stages of
// a dflash::Pipeline) must answer, so the pipeline composes kinds without
// knowing them. A kind is a plain type, usually a template on its name and
// depth; each ships in its own header:
//
//   links/queue.hpp   queue_link<Name, Depth>    a bounded host queue; each side has its own threads
//   links/direct.hpp  direct_link<Name, Depth>   no queue: the consumer runs on the producer's threads
//   links/device.hpp  device_link<Name, Depth>   device-resident slots moved in stream order
//   links/device_queue.hpp  device_queue_link<Name, Capacity, MaxRowsPerPush, BatchRows, Fill>
//                     rows whose counts only the device knows, in a ring in device memory
//   mpi/net_link.hpp  mpi::net_link<Name, Depth> items between processes (MPI ranks)
//
// The answers:
//   name, depth            the key prefix and the compile-time default depth: the one run-time size
//                          of a link (shape.depths), whose meaning is the kind's — a queue's
//                          capacity, a device link's slots, a direct link's reorder window, a
//                          net_link's credits per producer rank, a device queue's rows
//   keys                   the profile keys its endpoint records (a key_set)
//   consumer_threads       consumer_on_own_threads: the stages on either side have their own threads
//                          consumer_on_producer_threads: the consumer runs on the producer's threads
//   carries                carries_values: the item moves through (the stages call with values)
//                          carries_device_slots: the item stays on a device; stages get a slot and a stream
//   delivery               delivers_each_once: every item pushed is popped once, FIFO per producer thread
//                          delivers_ratio<Out, In>: Out items leave for every In that enter (a kind
//                            that filters or fans out; never before an in_order stage or after a device stage)
//                          delivers_rows_once: every row once; calls on either side do not correspond
//   crosses_processes      its two stages may run in different processes
//   endpoint<Item, P>      the run-time object the pipeline makes for it, answering the endpoint
//                          protocol of what it carries (pipeline/endpoint.hpp: ValueEndpoint or
//                          SlotEndpoint; Item may be an envelope, moved through whole)
//   open<Item>(ctx)        makes the endpoint (std::unique_ptr; a null pointer for no endpoint);
//                          a kind whose delivery is delivers_rows_once reads ctx.rows (shape.rows)
//   close(e)               no more items from the producer side (normal end: the consumer drains);
//                          called once the producing stage's last thread left, never after cancel(e)
//   cancel(e)              wake every blocked thread now; later hand-overs fail
//   check<Site>()          its requirements on the place it was put in, as static_asserts that state
//                          the fix (Site is a dflash::link_site, pipeline/link_site.hpp)
// And optionally:
//   model(link_facts)      how the analysis models it (analysis/pipeline_layout.hpp); a kind without
//                          it is not modelled, and the what-if analysis says so instead of predicting
//   consumer_callable_by_producer  true: between host stages the producer's thread may call a
//                          cheap consumer itself instead of pushing (queue_link; the endpoint is then
//                          a HelpFirstEndpoint, and push() does not run for the items it helps with:
//                          set it only where push() does nothing but store, endpoint.hpp)
//
// Every shipped kind and one written in a test pass the same conformance
// suite (tests/conformance/): a new kind joins it with one line.

#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/pipeline/shape.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

/// Where the stage after a link runs.
struct consumer_on_own_threads {};
struct consumer_on_producer_threads {};
/// What crosses a link.
struct carries_values {};
struct carries_device_slots {};

/// What a link kind's open() gets: the run-time depth, the profiler, the
/// device backend of the pipeline's device links (null without any), where
/// the stages on either side run (ranks; empty = this process only), and the
/// shape's row sizes (a kind that carries rows; {} for any other).
template <class P, class Backend>
struct link_context {
  std::size_t depth;
  const P& prof;
  Backend* backend;
  std::span<const int> producer_ranks, consumer_ranks;
  row_sizes rows{};
};

/// The endpoint of a link kind that needs no run-time object (direct_link).
struct no_endpoint {};

/// What a link does to the items that enter it (a kind's `delivery`).
struct delivers_each_once {};
template <std::size_t Out, std::size_t In>
struct delivers_ratio {
  static_assert(Out > 0 && In > 0 && Out != In,
                "dflash::delivers_ratio<Out, In>: Out and In must be at least 1 and differ (a kind that passes each "
                "item once says delivers_each_once)");
  static constexpr std::size_t items_out = Out, items_in = In;
};
struct delivers_rows_once {};

/// The plain answers most link kinds give, as a base: the name and default
/// depth, "<Name>.push_wait" / "<Name>.pop_wait" keys, where the consumer
/// runs, what crosses, each item once, whether it joins processes, how the
/// analysis models it, no requirement beyond matching types, and closing and
/// cancelling as the endpoint's own close() and cancel(). A kind derives from
/// it and adds its endpoint and open (and may hide any answer).
template <fixed_string Name, std::size_t Depth, class ConsumerThreads, class Carries, bool CrossesProcesses,
          analysis::model_kind Model>
struct link_answers {
  static constexpr auto name = Name;
  static constexpr std::size_t depth = Depth;
  using keys = queue_keys<Name>;
  using consumer_threads = ConsumerThreads;
  using carries = Carries;
  using delivery = delivers_each_once;
  static constexpr bool crosses_processes = CrossesProcesses;
  static constexpr analysis::link_model model(const analysis::link_facts& f) noexcept {
    return {Model, f.depth, 1, 1, CrossesProcesses, {}};
  }
  template <class Site>
  static consteval bool check() {
    return true;  // any two stages whose types match (checked for every link)
  }
  template <class E>
  static void close(E& e) noexcept {
    e.close();
  }
  template <class E>
  static void cancel(E& e) noexcept {
    e.cancel();
  }
};

namespace detail {
template <class T>
inline constexpr bool is_one_of_threads =
    std::is_same_v<T, consumer_on_own_threads> || std::is_same_v<T, consumer_on_producer_threads>;
template <class T>
inline constexpr bool is_one_of_carries = std::is_same_v<T, carries_values> || std::is_same_v<T, carries_device_slots>;
template <class T>
inline constexpr bool is_delivery = std::is_same_v<T, delivers_each_once> || std::is_same_v<T, delivers_rows_once>;
template <std::size_t Out, std::size_t In>
inline constexpr bool is_delivery<delivers_ratio<Out, In>> = true;
template <class T>
struct is_fixed_string_value : std::false_type {};
template <std::size_t N>
struct is_fixed_string_value<fixed_string<N>> : std::true_type {};
}  // namespace detail

template <class L>
concept PipelineLink = requires {
  L::name;
  { L::depth } -> std::convertible_to<std::size_t>;
  typename L::keys;
  typename L::consumer_threads;
  typename L::carries;
  typename L::delivery;
  { L::crosses_processes } -> std::convertible_to<bool>;
} && detail::is_fixed_string_value<std::remove_cv_t<decltype(L::name)>>::value &&
                       detail::is_one_of_threads<typename L::consumer_threads> &&
                       detail::is_one_of_carries<typename L::carries> && detail::is_delivery<typename L::delivery> &&
                       is_key_set<typename L::keys>::value;

/// The analysis model of link kind L for one link (its model(), or none with the reason).
template <PipelineLink L>
constexpr analysis::link_model link_model_of(const analysis::link_facts& f) noexcept {
  if constexpr (requires { { L::model(f) } -> std::convertible_to<analysis::link_model>; }) return L::model(f);
  else return analysis::link_model::none("its link kind answers no model(link_facts), pipeline/link.hpp");
}

}  // namespace dflash
