#pragma once
// dflash::direct_link<"to_sink", 8>: no queue and no thread of its own: the
// next stage runs on the threads that produced its item, as oneTBB's serial
// filters run on whichever thread holds the token. Stages joined by direct
// links form a segment that runs on the worker threads of its one parallel
// stage (workers<S, N>); its other stages run one call at a time, those before
// the parallel stage (e.g. the source) in the order threads reach them, those
// after it in completion order — or in source order for an in_order<S> stage
// right after it. Depth bounds that stage's reorder window: a thread whose
// item is further ahead than Depth waiting items waits its turn. Records
// "<Name>.push_wait" (time waiting for the next stage's turn). Host stages only.
// The segment's scheduler is agents/direct_segment.hpp.

#include <cstddef>
#include <memory>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/key_suffixes.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

template <fixed_string Name, std::size_t Depth>
struct direct_link : link_answers<Name, Depth, consumer_on_producer_threads, carries_values,
                                  /*crosses_processes=*/false, analysis::model_kind::direct> {
  static_assert(Depth > 0, "dflash::direct_link<Name, Depth>: Depth must be at least 1");
  // No pop: the consumer is called with the item, so only the wait for its turn is a key.
  using keys = key_set<name_cat<Name, key_suffix::push_wait>>;

  template <class Item, class P>
  using endpoint = no_endpoint;

  template <class Item, class P, class Ctx>
  static std::unique_ptr<no_endpoint> open(const Ctx&) {
    return nullptr;
  }
  static void close(no_endpoint&) noexcept {}
  static void cancel(no_endpoint&) noexcept {}

  template <class Site>
  static consteval bool check() {
    static_assert(!Site::producer_on_device && !Site::consumer_on_device,
                  "dflash::Pipeline: a direct_link joins host stages only; a stage next to a device_link cannot "
                  "also be next to a direct_link (put a queue_link there)");
    if constexpr (Site::consumer_in_order)
      static_assert(Site::source_reaches_consumer_directly,
                    "dflash::Pipeline: an in_order stage reached by a direct_link needs the source in the same direct "
                    "segment (source, direct_link, ..., in_order<S>): only then do items enter it in source order. "
                    "Put a queue_link before the in_order stage instead");
    return true;
  }
};

}  // namespace dflash
