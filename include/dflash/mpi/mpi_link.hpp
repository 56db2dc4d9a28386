#pragma once
// dflash::mpi::mpi_link<T, "hs_net", Depth>: items of type T from pipelines on
// producer ranks to pipelines on consumer ranks, with an in-process queue's
// semantics, expressed as two adapter stages so dflash::Pipeline is unchanged:
//
//   producer rank:  source -> ... -> mpi_link_sink<P, hs_link>      (last stage)
//   consumer rank:  mpi_link_source<P, hs_link> -> ... -> sink      (first stage)
//
//   using hs_link = dflash::mpi::mpi_link<HsItem, "hs_net", 8>;
//   hs_link link(job, /*producers*/ {1, 2}, /*consumers*/ {0});
//
// The endpoints, for a stage or a pipeline link kind built on top:
//   producer: send(item, prof)  blocks for a credit, hands the item over
//             take_sent()       an item whose send completed, to refill
//                               (its vectors keep their memory), or empty
//             close()           no more items from this rank: FIN follows
//                               the last one (job::run's normal end does it,
//                               or the link's owner: end_on_close())
//   consumer: receive(prof)     the next item, or empty once closed
//             recycle(item)     a consumed item back: the next arriving item
//                               is received into its vectors
//   both:     a job stop (any rank's stage threw or stopped the job) wakes
//             every blocked call with dflash::pipeline_stop.
//
// * Exactly once: every item goes to one consumer and is delivered once.
// * Keys: "<Name>.push_wait" (sink blocked for a credit), "<Name>.pop_wait"
//   (source blocked for an item), plus the stages' own "<Name>.send.*" /
//   "<Name>.recv.*".
// The job co-owns the link's MPI state: the handle may go before finish().
//
// The parts, one header each: link_frame.hpp (the wire format: tags, header
// messages, limits), link_sender.hpp (the producer side; its posted batches:
// link_batches.hpp), link_receiver.hpp (the consumer side; items whose
// buffers are on their way: link_arrivals.hpp), link_credits.hpp (credits
// and backpressure), link_core.hpp (what the job drives: stop, the ends of
// the unsynchronised streams, which thread makes the MPI calls), over
// link_shared.hpp (their shared state) and process_group.hpp (what they need
// from the job).

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/mpi/job.hpp"
#include "dflash/mpi/link_core.hpp"
#include "dflash/mpi/link_shared.hpp"
#include "dflash/mpi/wire.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/profile/key_suffixes.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::mpi {

template <WireItem T, fixed_string Name, std::size_t Depth>
class mpi_link {
  static_assert(Depth > 0, "dflash::mpi::mpi_link<T, Name, Depth>: Depth must be at least 1");
  using core = detail::link_core<T, Name, Depth, job>;

 public:
  using value_type = T;
  static constexpr auto name = Name;
  static constexpr std::size_t depth = Depth;
  using push_wait = push_wait_key<Name>;
  using pop_wait = pop_wait_key<Name>;

  mpi_link(job& j, std::vector<int> producers, std::vector<int> consumers) : job_(j) {
    auto bad = [](const std::string& m) {
      throw std::invalid_argument("dflash::mpi::mpi_link \"" + std::string(Name.view()) + "\": " + m);
    };
    if (producers.empty()) bad("needs at least one producer rank");
    if (consumers.empty()) bad("needs at least one consumer rank");
    std::vector<bool> seen(static_cast<std::size_t>(j.size()), false);
    for (const auto* v : {&producers, &consumers})
      for (int r : *v) {
        if (r < 0 || r >= j.size())
          bad("rank " + std::to_string(r) + " is not in the job (size " + std::to_string(j.size()) + ")");
        if (seen[static_cast<std::size_t>(r)])
          bad("rank " + std::to_string(r) + " is listed twice (a rank is a producer or a consumer, once)");
        seen[static_cast<std::size_t>(r)] = true;
      }
    core_ = std::make_shared<core>(j, std::move(producers), std::move(consumers));
    job_.attach(core_);
  }
  /// Before start() or after finish(): the link's state goes. While the job
  /// runs, the job keeps it and completes its MPI requests (see job::release).
  ~mpi_link() { job_.release(core_.get(), Name.view()); }
  mpi_link(const mpi_link&) = delete;
  mpi_link& operator=(const mpi_link&) = delete;

  [[nodiscard]] bool is_producer() const noexcept { return core_->is_producer(); }
  [[nodiscard]] bool is_consumer() const noexcept { return core_->is_consumer(); }

  /// Producer side: blocks (recorded as "<Name>.push_wait") until a credit is
  /// free, then hands the item to the progress thread. Throws pipeline_stop
  /// when the job stopped, std::length_error for a buffer over 2 GiB.
  template <class P>
  void send(T&& item, const P& prof) {
    core_->send(std::move(item), prof);
  }

  /// Producer side: an item whose send completed (at most Depth are kept), to
  /// refill and send again: its vectors keep their memory, so a producer
  /// that reuses items allocates nothing per item. Empty if none.
  [[nodiscard]] std::optional<T> take_sent() { return core_->take_sent(); }

  /// Producer side: this rank sends no more items; consumers see FIN after
  /// its last item. job::run does it when this rank's pipeline ends
  /// normally; send() after close() throws std::logic_error.
  void close() { core_->close(); }

  /// For a link kind built on mpi_link (net_link): from now on this link ends
  /// only by close(), which its pipeline calls when the producing stage's
  /// last worker exits, never by the end of a job::run. So a link made while
  /// an earlier run was going on is not ended by that run, and a rank may run
  /// stages on both sides of a round trip (its link's end does not wait for
  /// the rank's whole pipeline).
  void end_on_close() { job_.own_end(core_.get()); }

  /// Consumer side: the next item, or empty once every producer finished and
  /// everything arrived; `from` (if given) gets the producer rank it came
  /// from. Blocks as "<Name>.pop_wait"; throws pipeline_stop when the job
  /// stopped.
  template <class P>
  std::optional<T> receive(const P& prof, int* from = nullptr) {
    return core_->receive(prof, from);
  }

  /// Consumer side: a consumed item back (at most Depth are kept); the next
  /// item that arrives is received into its vectors (no allocation when they
  /// are large enough, no zeroing when the size is the same).
  void recycle(T&& item) { core_->recycle(std::move(item)); }

  [[nodiscard]] link_stats stats() const { return core_->stats(); }

  /// Nothing of this rank's is pending on the link: as a producer, every item
  /// it sent was consumed (its credit came back); as a consumer, it holds no
  /// unread item and owes no credit. Items still on their way to a consumer
  /// are not seen there, so a consumer rank knows from its own count (or FIN)
  /// that it received everything. Before job::lock_mpi() on both sides of a
  /// link: a rank that holds the lock with traffic pending stalls its peer.
  [[nodiscard]] bool settled() const { return core_->settled(); }

 private:
  job& job_;
  std::shared_ptr<core> core_;
};

/// Last stage on a producer rank: sends each item over the link.
template <ProfilerPolicy P, class Link>
struct mpi_link_sink {
  static constexpr auto name = name_cat<Link::name, ".send">;
  using input_type = typename Link::value_type;
  using output_type = void;
  using keys = key_set<name_cat<Link::name, key_suffix::push_wait>>;

  Link* link;
  [[no_unique_address]] profiler_ref<P> prof;

  void operator()(input_type&& x) { link->send(std::move(x), prof.get()); }
};

/// First stage on a consumer rank: the items producers sent; exhausted once
/// every producer finished.
template <ProfilerPolicy P, class Link>
struct mpi_link_source {
  static constexpr auto name = name_cat<Link::name, ".recv">;
  using input_type = void;
  using output_type = typename Link::value_type;
  using keys = key_set<name_cat<Link::name, key_suffix::pop_wait>>;

  Link* link;
  [[no_unique_address]] profiler_ref<P> prof;

  std::optional<output_type> operator()() { return link->receive(prof.get()); }
};

}  // namespace dflash::mpi
