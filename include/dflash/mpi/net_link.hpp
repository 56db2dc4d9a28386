#pragma once
// dflash::mpi::net_link<"hs_net", 8>: a Pipeline link between stages that run
// in different processes (MPI ranks). Every rank constructs the same pipeline
// type; the shape's placement (pipeline_shape::ranks) says which ranks run
// which stages, and each rank runs its part through dflash::mpi::job::run(p):
//
//   using train = dflash::Pipeline<P, source, dflash::queue_link<"batch_queue", 8>, target,
//                                  dflash::mpi::net_link<"hs_net", 8>, drafter>;
//   dflash::mpi::job job(argc, argv);
//   auto shape = train::default_shape();
//   shape.rank = job.rank();
//   shape.ranks = {{0, 1}, {0, 1}, {2}};    // source and target on ranks 0-1, the drafter on 2
//   train p(prof, shape, ...);  job.start(prof);  job.run(p);  job.finish();
//
// Its endpoint is an mpi_link (mpi_link.hpp) over the job of this process:
// the producer ranks are those of the stage before it, the consumers those
// of the stage after it, and its guarantees are the mpi_link's — credits of
// Depth items per producer rank (backpressure), every item delivered once,
// an end once every producer rank's producing stage has ended (the stage's
// last worker closes the link: FIN follows its last item), a stop or error on
// any rank stops every rank (a blocked hand-over throws dflash::pipeline_stop).
// The end is the pipeline's own, so a link built while an earlier run was
// going on is not ended by it, and items may leave a rank and come back
// (shape.ranks {{0}, {1}, {0}}). Records "<Name>.push_wait" and
// "<Name>.pop_wait" as a queue_link does. Items: trivially copyable, or
// described by mpi::wire<T> (wire.hpp); a device stage's output crosses once
// its work completed (the pipeline waits for it before the hand-over). A
// profiled pipeline's flow stamp crosses with the item (an envelope, below)
// and is converted where it arrives from its producer rank's clock to this
// rank's, with the offsets job::start() estimated (clock_offset.hpp), so the
// ages after the link are ages even when the ranks' clocks disagree.

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/mpi/job.hpp"
#include "dflash/mpi/mpi_link.hpp"
#include "dflash/mpi/process_group.hpp"
#include "dflash/mpi/wire.hpp"
#include "dflash/pipeline/item.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::mpi {

/// An item in its flow envelope: the stamp goes in the header, then the item's own fields.
template <WireCustom T, class Tag>
struct wire<dflash::detail::sequenced<T, Tag>> {
  static void for_each_field(dflash::detail::sequenced<T, Tag>& x, auto&& f) {
    f(x.seq);
    wire<T>::for_each_field(x.value, f);
  }
};

template <fixed_string Name, std::size_t Depth>
struct net_link : link_answers<Name, Depth, consumer_on_own_threads, carries_values, /*crosses_processes=*/true,
                               analysis::model_kind::queue> {
  static_assert(Depth > 0, "dflash::mpi::net_link<Name, Depth>: Depth must be at least 1");

  // The ranks' process group is this process's job, found by open() with
  // job::current(): a Pipeline is built from a profiler and a shape, so the
  // link_context it opens a link with names no group. The endpoint uses only
  // what ProcessGroup names.
  using group = job;
  static_assert(ProcessGroup<group>);

  template <class Item, class P>
  class endpoint {
   public:
    endpoint(group& g, std::vector<int> producers, std::vector<int> consumers, const P& prof)
        : group_(g), link_(g, std::move(producers), std::move(consumers)), prof_(prof) {
      link_.end_on_close();  // its end is this pipeline's, not the end of whichever run comes first
    }
    /// Blocks for a credit, then hands the item to the job's progress thread.
    bool push(Item&& x) {
      link_.send(std::move(x), prof_);
      return true;
    }
    /// The next item from any producer rank; empty once every producer rank
    /// finished. Its flow stamp, if it has one, on this rank's clock.
    std::optional<Item> pop() {
      int from = -1;
      auto x = link_.receive(prof_, &from);
      if constexpr (requires { x->seq.born_ns; })
        if (x) x->seq.born_ns = group_.to_local_clock(x->seq.born_ns, from);
      return x;
    }
    [[nodiscard]] link_stats stats() const { return link_.stats(); }

    /// The producing stage's last worker on this rank exited normally (the
    /// pipeline closes no link after a cancel: then the job's STOP, not an
    /// end, reaches the consumers): FIN follows its last item.
    void close() noexcept {
      if (!link_.is_producer()) return;
      try {
        link_.close();
      } catch (...) {  // only a non-producer throws, ruled out above
      }
    }

   private:
    group& group_;
    mpi_link<Item, Name, Depth> link_;
    const P& prof_;
  };

  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    if (c.producer_ranks.empty() || c.consumer_ranks.empty())
      throw std::invalid_argument("dflash::mpi::net_link \"" + std::string(Name.view()) +
                                  "\": place the stages on either side on ranks (pipeline_shape::ranks); a net_link "
                                  "joins stages that run in different processes");
    if (c.depth != Depth)
      throw std::invalid_argument("dflash::mpi::net_link \"" + std::string(Name.view()) + "\": its depth (credits per "
                                  "producer rank) is the compile-time " + std::to_string(Depth) + ", got " +
                                  std::to_string(c.depth) + " in the shape; change net_link<Name, Depth> instead");
    ProcessGroup auto* g = group::current();
    if (!g)
      throw std::logic_error("dflash::mpi::net_link \"" + std::string(Name.view()) +
                             "\": no dflash::mpi::job exists in this process; create it before the pipeline");
    return std::make_unique<endpoint<Item, P>>(*g, std::vector<int>(c.producer_ranks.begin(), c.producer_ranks.end()),
                                               std::vector<int>(c.consumer_ranks.begin(), c.consumer_ranks.end()),
                                               c.prof);
  }
  // The end of the items is each producer rank's FIN, sent once its producing
  // stage's workers all exited; a stop reaches every rank through the job.
  template <class E>
  static void close(E& e) noexcept {
    e.close();
  }
  template <class E>
  static void cancel(E&) noexcept {}

  // Credits of Depth items per producer rank are what it holds between the stages.
  static constexpr analysis::link_model model(const analysis::link_facts& f) noexcept {
    const std::size_t producers = f.producer_processes > 0 ? f.producer_processes : 1;
    return {analysis::model_kind::queue, Depth * producers, 1, 1, true, {}};
  }

  template <class Site>
  static consteval bool check() {
    static_assert(!Site::numbered,
                  "dflash::mpi::net_link: in_order stages are not supported in a pipeline with a net_link (source "
                  "order is per rank)");
    static_assert(WireItem<typename Site::value_type>,
                  "dflash::mpi::net_link: the item must be trivially copyable or described by "
                  "dflash::mpi::wire<T> (mpi/wire.hpp)");
    return true;
  }
};

}  // namespace dflash::mpi
