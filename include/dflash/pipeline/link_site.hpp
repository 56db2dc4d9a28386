#pragma once
// dflash::link_site<Topology, L>: what a link kind's check<Site>() (link.hpp)
// may ask about the place it was put in — the stages on either side and what
// the pipeline around it is — as plain compile-time answers. It is the public
// view of the pipeline's topology: a kind's requirements read these names,
// never dflash::detail::topology.

#include <cstddef>
#include <utility>

#include "dflash/pipeline/topology.hpp"

namespace dflash {

template <class Topology, std::size_t L>
struct link_site {
  /// The link's index: it joins stage L and stage L + 1.
  static constexpr std::size_t index = L;
  /// The stages on either side (the user's stage types).
  using producer = typename Topology::template stage_type<L>;
  using consumer = typename Topology::template stage_type<L + 1>;
  /// The type that crosses (the producer's output_type); envelopes aside (endpoint.hpp).
  using value_type = typename producer::output_type;

  static constexpr bool producer_is_source = L == 0;
  static constexpr bool consumer_is_sink = L + 2 == Topology::stage_count;
  /// The stage runs on a device worker (it is next to a link that carries device slots).
  static constexpr bool producer_on_device = Topology::template device_stage<L>;
  static constexpr bool consumer_on_device = Topology::template device_stage<L + 1>;
  static constexpr std::size_t producer_workers = Topology::template workers_of<L>;
  static constexpr std::size_t consumer_workers = Topology::template workers_of<L + 1>;

  /// The consumer is an in_order stage.
  static constexpr bool consumer_in_order = Topology::template in_order_at<L + 1>;
  /// Some stage after this link is in_order: it needs every item once.
  static constexpr bool in_order_downstream = []<std::size_t... K>(std::index_sequence<K...>) {
    return (Topology::template in_order_at<L + 1 + K> || ...);
  }(std::make_index_sequence<Topology::stage_count - L - 1>{});
  /// The pipeline numbers items at the source (some stage anywhere is in_order).
  static constexpr bool numbered = Topology::sequenced;
  /// The producer's values may still be written by its device work: the link
  /// carries them with an event the consumer waits on (detail::pending).
  static constexpr bool carries_pending = Topology::template pending_at<L>;
  /// The pipeline places this link's two stages in processes of their own (the kind crosses processes).
  static constexpr bool crosses_processes = Topology::template crosses_at<L>;
  /// The stages from the source up to the consumer are joined by links whose
  /// consumer runs on the producer's threads (one direct segment from the source).
  static constexpr bool source_reaches_consumer_directly = Topology::template segment_first<L + 1>() == 0;
};

}  // namespace dflash
