#pragma once
// The PipelineLink concept: what a link kind (the entry between two stages of
// a dflash::Pipeline) must answer, so the pipeline composes kinds without
// knowing them. A kind is a plain type, usually a template on its name and
// depth; each ships in its own header:
//
//   links/queue.hpp   queue_link<Name, Depth>    a bounded host queue; each side has its own threads
//   links/direct.hpp  direct_link<Name, Depth>   no queue: the consumer runs on the producer's threads
//   links/device.hpp  device_link<Name, Depth>   device-resident slots moved in stream order
//   links/device_queue.hpp  device_queue_link<Name, Capacity, MaxRowsPerPush, BatchRows>
//                     rows whose counts only the device knows, in a ring in device memory
//   mpi/net_link.hpp  mpi::net_link<Name, Depth> items between processes (MPI ranks)
//
// The answers:
//   name, depth            the key prefix and the compile-time default depth
//   keys                   the profile keys its endpoint records (a key_set)
//   consumer_threads       consumer_on_own_threads: the stages on either side have their own threads
//                          consumer_on_producer_threads: the consumer runs on the producer's threads
//   carries                carries_values: the item moves through (the stages call with values)
//                          carries_device_slots: the item stays on a device; stages get a slot and a stream
//   crosses_processes      its two stages may run in different processes
//   model                  how the analysis (analysis/bottleneck.hpp) models it
//   endpoint<Item, P>      the run-time object the pipeline makes for it, from a link_context:
//                          values: bool push(Item&&) (false: closed), std::optional<Item> pop()
//                          device slots: the device_channel protocol (acquire/publish/pop/release)
//   open<Item>(ctx)        makes the endpoint (std::unique_ptr; a null pointer for no endpoint)
//   close(e)               no more items from the producer side (normal end: the consumer drains)
//   cancel(e)              wake every blocked thread now; later hand-overs fail
//   check<Topology, L>()   its requirements on the stages on either side, as static_asserts that
//                          state the fix (Topology is dflash::detail::topology; L the link's index)
// And optionally:
//   consumer_callable_by_producer  true: between host stages the producer's thread may call a
//                          cheap consumer itself instead of pushing (queue_link; the endpoint
//                          then offers pushes() and record_handover(), agents/host_worker.hpp)

#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "dflash/analysis/pipeline_layout.hpp"
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
/// device backend of the pipeline's device links (null without any), and
/// where the stages on either side run (ranks; empty = this process only).
template <class P, class Backend>
struct link_context {
  std::size_t depth;
  const P& prof;
  Backend* backend;
  std::span<const int> producer_ranks, consumer_ranks;
};

/// The endpoint of a link kind that needs no run-time object (direct_link).
struct no_endpoint {};

/// The plain answers most link kinds give, as a base: the name and default
/// depth, "<Name>.push_wait" / "<Name>.pop_wait" keys, where the consumer
/// runs, what crosses, whether it joins processes, how the analysis models it,
/// no requirement beyond matching types, and closing and cancelling as the
/// endpoint's own close() and cancel(). A kind derives from it and adds its
/// endpoint and open (and may hide any answer).
template <fixed_string Name, std::size_t Depth, class ConsumerThreads, class Carries, bool CrossesProcesses,
          analysis::link_kind Model>
struct link_answers {
  static constexpr auto name = Name;
  static constexpr std::size_t depth = Depth;
  using keys = queue_keys<Name>;
  using consumer_threads = ConsumerThreads;
  using carries = Carries;
  static constexpr bool crosses_processes = CrossesProcesses;
  static constexpr analysis::link_kind model = Model;
  template <class Topology, std::size_t L>
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
// An endpoint whose fill a thread can read (a queue link's ring). The pulled
// source and the backlog yield (agents/) look at it; other endpoints are not asked.
template <class E>
concept fill_visible = requires(E& e) {
  { e.size() } -> std::convertible_to<std::size_t>;
  { e.capacity() } -> std::convertible_to<std::size_t>;
};
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
  { L::crosses_processes } -> std::convertible_to<bool>;
  { L::model } -> std::convertible_to<analysis::link_kind>;
} && detail::is_fixed_string_value<std::remove_cv_t<decltype(L::name)>>::value &&
                       detail::is_one_of_threads<typename L::consumer_threads> &&
                       detail::is_one_of_carries<typename L::carries> && is_key_set<typename L::keys>::value;

}  // namespace dflash
