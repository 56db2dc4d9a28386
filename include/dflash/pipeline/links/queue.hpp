#pragma once
// dflash::queue_link<"hs_queue", 60>: a bounded host queue between two stages,
// each on its own threads. The producer blocks while Depth items wait
// (backpressure); the consumer blocks while none does. Records
// "<Name>.push_wait" and "<Name>.pop_wait" (queue/queue_keys.hpp). Between
// host stages the producer's thread may call a cheap consumer stage itself
// instead of pushing (help-first, agents/host_worker.hpp).

#include <cstddef>
#include <memory>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/queue/bounded_queue.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

template <fixed_string Name, std::size_t Depth>
struct queue_link : link_answers<Name, Depth, consumer_on_own_threads, carries_values, /*crosses_processes=*/false,
                                 analysis::model_kind::queue> {
  static_assert(Depth > 0, "dflash::queue_link<Name, Depth>: Depth must be at least 1");

  template <class Item, class P>
  using endpoint = bounded_queue<Item, P, Name>;
  // A push may be replaced by the producer's thread calling a cheap host
  // consumer itself (agents/host_worker.hpp); the queue still records it.
  static constexpr bool consumer_callable_by_producer = true;

  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    return std::make_unique<endpoint<Item, P>>(c.depth, c.prof);
  }
  // A closed queue wakes every blocked push and pop: cancelling is closing.
  template <class E>
  static void cancel(E& e) noexcept {
    e.close();
  }
};

}  // namespace dflash
