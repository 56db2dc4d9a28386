#pragma once
// One rank's end of an mpi_link (mpi_link.hpp), as its process group (the
// job) sees it: a job_link (job_link.hpp) that composes the producer side
// (link_sender.hpp), the consumer side (link_receiver.hpp) and the credits it
// owes (link_credits.hpp) over the state they share (link_shared.hpp).
//
// * Stop / error: job stops (see job.hpp) wake blocked sink / source calls,
//   which end their pipeline with dflash::pipeline_stop. Code on top of the
//   endpoints raises them with job::fail(reason) (an error rank 0 reports)
//   or job::stop_all() (a stop without error); both reach every rank.
// * Unsynchronised headers and credits: batch headers and credits are
//   MPI_Isend (no acknowledgement from the receiver: a 64-byte item would
//   otherwise pay a message back per batch and per credit). Each such
//   stream ends with a synchronous message on its tag (FIN, or an empty
//   marker / credit when the rank says FINAL, see quiescent()): MPI keeps
//   one source's messages on one tag in order, so its match proves every
//   earlier one matched and nothing is left unmatched at MPI_Finalize.
// * Threads: a blocked send / receive makes the link's MPI calls itself
//   (job::drive) for a while before it sleeps, and an item or credit
//   handed over is posted by the calling thread when the job's MPI lock is
//   free (that post alone, not a whole pass): the progress thread is the
//   fallback, not a hop per item.

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/mpi/job_link.hpp"
#include "dflash/mpi/link_credits.hpp"
#include "dflash/mpi/link_frame.hpp"
#include "dflash/mpi/link_receiver.hpp"
#include "dflash/mpi/link_sender.hpp"
#include "dflash/mpi/link_shared.hpp"
#include "dflash/mpi/process_group.hpp"

namespace dflash::mpi {

class job;  // the process group an mpi_link joins (job.hpp)

namespace detail {

// A link's state and its work on the progress thread. The job co-owns it, so
// its MPI requests complete even if the mpi_link handle is destroyed first.
template <WireItem T, fixed_string Name, std::size_t Depth, ProcessGroup G = job>
class link_core final : public job_link {
 public:
  link_core(G& g, std::vector<int> producers, std::vector<int> consumers)
      : s_(g, std::move(producers), std::move(consumers)),
        credits_(s_, link_tags<Name>::credit, Depth),
        sender_(s_),
        receiver_(s_, credits_) {}

  [[nodiscard]] bool is_producer() const noexcept { return s_.producer; }
  [[nodiscard]] bool is_consumer() const noexcept { return s_.consumer; }

  template <class P>
  void send(T&& item, const P& prof) {
    sender_.send(std::move(item), prof, waiter(), driver());
  }
  std::optional<T> take_sent() { return sender_.take_sent(); }
  void close() { sender_.close(); }
  template <class P>
  std::optional<T> receive(const P& prof, int* from) {
    return receiver_.receive(prof, from, waiter(), driver());
  }
  void recycle(T&& item) { receiver_.recycle(std::move(item)); }

  [[nodiscard]] bool settled() const {
    std::lock_guard lk(s_.m);
    const bool sent = !s_.producer || sender_.in_flight() == 0;  // counts each item from send() to its credit
    const bool owed = s_.consumer && (receiver_.holds_items() || credits_.owes_any());
    return sent && !owed;
  }

  [[nodiscard]] link_stats stats() const {
    std::lock_guard lk(s_.m);
    auto s = s_.stats;
    s.queued = sender_.queued();
    s.receiving = receiver_.receiving();
    s.driven = driven_.load(std::memory_order_relaxed);
    return s;
  }

  // ---- job_link (with the job's MPI lock: progress thread or a driving stage) --
  int tag_base() const override { return tag_base_; }

  void on_stop() override {
    std::lock_guard lk(s_.m);
    s_.stopped = true;
    sender_.drop_queued();  // not yet posted: dropped
    s_.cv.notify_all();
  }
  bool finish_sending() override {
    std::lock_guard lk(s_.m);
    if (s_.producer) sender_.closing();
    return s_.consumer && !receiver_.all_fins();
  }

  // Asked when this rank is about to say FINAL (nothing more is sent after):
  // the first time it is otherwise quiescent it ends its unsynchronised
  // streams with a synchronous message each, and is quiescent once they
  // matched.
  bool quiescent() override {
    {
      std::lock_guard lk(s_.m);
      if (!sender_.done()) return false;
    }
    if (!s_.streams_closed) {
      s_.streams_closed = true;
      MPI_Comm c = s_.group.comm();
      if (s_.producer) sender_.end_streams(c);
      if (s_.consumer) credits_.end_streams(c);
    }
    credits_.complete();
    const bool headers_ended = sender_.streams_ended();
    return headers_ended && credits_.empty();
  }

  bool in_flight() override {  // under the job's MPI lock
    return sender_.requests_in_flight() || receiver_.requests_in_flight() || !credits_.empty();
  }

  bool progress() override { return pass(/*idle=*/true); }

  void retire() override {
    sender_.retire();
    receiver_.retire();
  }

  static constexpr int tag_base_ = link_tags<Name>::base;

 private:
  // A blocked send or receive drives the link itself (job::drive) for up to
  // drive_budget: within a credit window the answer usually comes in a few
  // µs, and a hand-off to the progress thread and back costs two thread
  // switches. Then it sleeps and leaves the polling to the progress thread.
  template <class Pred>
  void wait_driving(std::unique_lock<std::mutex>& lk, Pred ready) {
    if (ready()) return;
    typename G::driver_scope driving(s_.group);
    const auto until = std::chrono::steady_clock::now() + drive_budget;
    for (unsigned i = 1;; ++i) {
      lk.unlock();
      if (!drive([this] { pass(/*idle=*/false); })) std::this_thread::yield();  // the progress thread is in a pass
      lk.lock();
      if (ready()) return;
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
    }
    driving.end();
    lk.unlock();
    s_.group.wake();  // the progress thread polls at full speed for a sleeping stage
    lk.lock();
    s_.cv.wait(lk, ready);
  }
  static constexpr std::chrono::microseconds drive_budget{200};
  template <class Work>
  bool drive(Work&& work) {
    if (!s_.group.drive(std::forward<Work>(work))) return false;
    driven_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // How the sender and receiver wait and drive.
  auto waiter() {
    return [this](std::unique_lock<std::mutex>& lk, auto ready) { this->wait_driving(lk, ready); };
  }
  auto driver() {
    return [this](auto&& work) { return this->drive(std::forward<decltype(work)>(work)); };
  }
  // One pass over the link's work. `idle`: the pass is the progress thread's
  // (no stage is taking items), so credits short of a batch go back too.
  bool pass(bool idle) {
    MPI_Comm c = s_.group.comm();
    bool busy = false;
    if (s_.producer) busy |= sender_.progress(c);
    if (s_.consumer) busy |= receiver_.progress(c, idle);
    return busy;
  }

  link_shared<G> s_;
  link_credits<G> credits_;
  link_sender<T, Name, Depth, G> sender_;
  link_receiver<T, Name, Depth, G> receiver_;
  std::atomic<std::uint64_t> driven_{0};
};

}  // namespace detail
}  // namespace dflash::mpi
