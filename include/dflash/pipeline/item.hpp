#pragma once
// What a link carries for an item: the stage's value itself, or the value in
// an envelope with what the pipeline needs to know about it —
//   sequenced<T, Tag>  its tag: the source sequence number (pipelines with an
//                      in_order stage), or its flow_stamp (profiled pipelines)
//   pending<T, B, Tag> an event device work that still writes it records (host
//                      links after a device stage: the consumer waits on it),
//                      and its flow_stamp when profiled
// A pipeline that needs neither carries the user's type unchanged: with
// NullProfiler and no in_order stage a link's element type is the stage's type.
// Device links keep the stamp beside the slot (pipeline_core), never in the
// user's device item.

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "dflash/detail/std_chrono.hpp"

namespace dflash {

/// Where an item came from, for a profiled pipeline: its source sequence
/// number and the time (ns on the profiler's clock) it left its source.
struct flow_stamp {
  std::uint64_t seq;
  std::int64_t born_ns;
};

/// A stateful policy whose clock stamps items (P::clock) follows every item
/// unless it opts out with `static constexpr bool flow = false;`.
template <class P>
concept FlowPolicy = P::enabled && requires { typename P::clock; } && !requires { requires !P::flow; };

namespace detail {

/// No stamp: adds nothing to an envelope ([[no_unique_address]]).
struct no_stamp {};

template <class T, class Tag = std::uint64_t>
struct sequenced {
  Tag seq;
  T value;
};

template <class T, class B, class Stamp = no_stamp>
struct pending {
  T value;
  typename B::event_type ev;
  [[no_unique_address]] Stamp stamp{};
};

/// The source sequence number in a tag (a number, or a flow_stamp).
constexpr std::uint64_t seq_of(std::uint64_t s) noexcept { return s; }
constexpr std::uint64_t seq_of(const flow_stamp& s) noexcept { return s.seq; }

}  // namespace detail
}  // namespace dflash
