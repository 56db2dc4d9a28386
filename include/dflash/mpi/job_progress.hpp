#pragma once
// The progress thread of a dflash::mpi::job (job.hpp): one pass runs every
// phase once (see loop()), under the job's MPI lock (job_mpi_calls.hpp).
//
// Stop: when the local pipeline is cancelled (a stage threw, or a stage ended
// it with dflash::pipeline_stop) the progress thread sees it within a poll
// period and sends STOP to every rank; a rank that gets STOP stops its
// pipeline (blocked link calls wake and end their stage) — well within 1 s.
// Only the rank whose stage threw reports an error; finish() carries it to
// rank 0, and every rank's finish() returns ok = false.
//
// Errors on the progress thread: an item that does not fit (a buffer over
// MPI's int count, caught in the sink stage; a header that does not match the
// consumer's wire<T> layout or the bytes that arrived) fails the job like a
// stage error: this rank's error, STOP to every rank, every finish() returns
// ok = false and rank 0 names the rank and reason. Anything else escaping the
// progress thread leaves its state unknown, so it prints the rank and reason
// and calls MPI_Abort: every rank ends, none waits.
//
// Clean shutdown: every message is sent with MPI_Issend (complete = matched by
// the receiver), or, for a link's batch headers and credits, with MPI_Isend in
// a stream that the link ends with an MPI_Issend on the same tag before FINAL
// (MPI keeps one source's messages on one tag in order: its match proves
// theirs); a rank sends its FINAL message to rank 0 only after all its sends
// completed; rank 0 answers every FINAL with BYE. So no message is left
// unmatched at MPI_Finalize.

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/mpi/control_messages.hpp"
#include "dflash/mpi/job_collector.hpp"
#include "dflash/mpi/job_links.hpp"
#include "dflash/mpi/job_mpi_calls.hpp"
#include "dflash/mpi/job_state.hpp"
#include "dflash/mpi/owned_sends.hpp"
#include "dflash/mpi/runtime.hpp"

namespace dflash::mpi::detail {

class progress_loop {
 public:
  progress_loop(const runtime& rt, mpi_calls& mpi, job_state& state, link_registry& links, profile_collector& profile)
      : rt_(rt), mpi_(mpi), state_(state), links_(links), profile_(profile) {}

  /// Stage threads may drive their links from now on; the thread starts.
  void start() {
    {
      const auto lk = mpi_.lock();
      mpi_.allow_driving(true);  // the calling thread makes no MPI call until finish()
    }
    thread_ = std::thread([this] {
      try {
        loop();
      } catch (const std::exception& e) {
        fatal(rt_, e.what());
      } catch (...) {
        fatal(rt_, "unknown exception");
      }
    });
  }
  [[nodiscard]] bool started() const noexcept { return thread_.joinable(); }
  /// Waits for the loop's end (finish() asked for it: state.request_finish()).
  void join() { thread_.join(); }

  /// Passes the thread made over its phases.
  [[nodiscard]] std::uint64_t passes() const noexcept { return passes_.load(std::memory_order_relaxed); }
  /// After join(): every rank finished without an error (BYE said so).
  [[nodiscard]] bool bye_ok() const noexcept { return bye_ok_; }
  /// Some rank's run was ended by a stop (rank 0's BYE says so; read after join).
  [[nodiscard]] bool stopped_any() const noexcept { return stopped_any_; }

 private:
  using clock = std::chrono::steady_clock;
  int rank() const noexcept { return rt_.rank(); }
  int size() const noexcept { return rt_.size(); }
  MPI_Comm comm() const noexcept { return rt_.comm(); }

  // What the loop carries from pass to pass (progress thread only).
  struct loop_state {
    clock::time_point next_report;
    bool stop_sent = false;   // STOP went to every other rank
    bool final_sent = false;  // this rank's FINAL is out (rank 0: recorded)
    int finals = 0;           // rank 0: FINALs recorded, its own included
    bool bye_sent = false;    // rank 0
    bool done = false;        // leave the loop
  };

  void loop() {
    loop_state s{clock::now() + profile_.interval()};
    for (;;) {
      bool busy = false, requests = false, driven = false;
      {
        const auto mpi = mpi_.lock();  // a stage thread driving its link waits for the pass (drive())
        busy = receive_stops();
        busy |= send_stop(s);
        busy |= drive_links();
        busy |= drop_orphans();
        busy |= send_periodic_report(s);
        if (rank() == 0) busy |= receive_reports();
        busy |= send_final(s);
        busy |= rank() == 0 ? collect_finals_and_bye(s) : await_bye(s);
        if (s.done) {
          links_.retire();  // every rank said FINAL: the links' posted receives can go
          mpi_.allow_driving(false);  // finish() and ~job make MPI calls on their own thread next
          return;
        }
        requests = !owned_.empty() || links_.in_flight();
        driven = mpi_.drove();  // stage threads drove since the last pass
        passes_.fetch_add(1, std::memory_order_relaxed);  // counted under the lock: lock_mpi() holders see no pass
      }
      mpi_.after_pass(busy, requests, driven);
    }
  }

  void enter_stop() {
    if (!state_.enter_stop()) return;
    links_.stop_all();
    state_.stop_pipeline();
  }

  // 1. STOP from another rank.
  bool receive_stops() {
    bool any = false;
    while (try_receive(comm(), MPI_ANY_SOURCE, tag_stop)) {
      enter_stop();
      any = true;
    }
    return any;
  }
  // 2. A local stop (stop_all(), a cancelled pipeline, a STOP seen) goes to every rank, once.
  // Never after our FINAL: a rank leaves once it has BYE, without draining STOPs, so a
  // STOP posted then might never be matched (and we would wait for it forever). One
  // posted before FINAL is matched before it (FINAL waits for every send of ours),
  // and the receiver is still in its loop then (BYE needs every FINAL).
  bool send_stop(loop_state& s) {
    if (s.stop_sent || s.final_sent) return false;
    if (!state_.stop_requested() && !state_.stopped() && !state_.cancelled()) return false;
    // A rank that saw STOP sends it again: harmless, and covers a stop raised here at the same time.
    for (int r = 0; r < size(); ++r)
      if (r != rank()) owned_.post_message(stop_message{}, r, tag_stop, comm());
    s.stop_sent = true;
    enter_stop();
    return true;
  }
  // 3. The links' sends and receives, and FIN once the run a link belongs to
  // ended normally (link_registry::progress).
  bool drive_links() {
    const bool busy = links_.progress(state_);
    return owned_.complete() || busy;
  }
  // 3b. Stopped and finishing: a message on a link tag that no link of this
  // rank owns is for a link this rank never made (it failed before building
  // its pipeline, while a producer elsewhere had sent on its first credits).
  // Nothing else would ever match it, and the sender could not say FINAL
  // until it matched; so it is received and dropped. One probe per source and
  // pass: the next message from that source in MPI's order, dropped while it
  // is an orphan (a job message or an owned link's is left to its receiver).
  bool drop_orphans() {
    if (!state_.stopped() || !state_.finish_requested()) return false;
    bool any = false;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      for (;;) {
        int flag = 0;
        MPI_Status st;
        check(MPI_Iprobe(r, MPI_ANY_TAG, comm(), &flag, &st), "MPI_Iprobe");
        if (!flag || st.MPI_TAG < tag_links || links_.owns(link_tag_base(st.MPI_TAG))) break;
        int n = 0;
        check(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
        orphan_.resize(static_cast<std::size_t>(n));
        check(MPI_Recv(orphan_.data(), n, MPI_BYTE, r, st.MPI_TAG, comm(), MPI_STATUS_IGNORE), "MPI_Recv");
        any = true;
      }
    }
    return any;
  }
  // 4. Periodic snapshots: rank 0 reports its own and the latest of the others.
  bool send_periodic_report(loop_state& s) {
    const auto every = profile_.interval();
    if (every.count() <= 0 || state_.finish_requested() || clock::now() < s.next_report) return false;
    s.next_report += every;
    profile_.periodic(rank(), [&](std::vector<std::uint64_t> words) {
      owned_.post_message(profile_message{std::move(words)}, 0, tag_profile, comm());
    });
    return false;
  }
  // 5. Rank 0: the others' periodic snapshots.
  bool receive_reports() {
    bool any = false;
    while (auto m = try_receive(comm(), MPI_ANY_SOURCE, tag_profile)) {
      const auto r = static_cast<std::size_t>(m->source);
      try {
        profile_.latest_from(r, m->as<profile_message>().snapshot);
      } catch (const std::exception& e) {
        state_.fail("from rank " + std::to_string(r) + ": " + e.what());
      }
      any = true;
    }
    return any;
  }
  // 6. FINAL (status + snapshot) once finish() was called and every send of ours completed.
  // A stop requested here (a stage that threw just before finish(), ~job's fail()) goes
  // out before FINAL: after FINAL no STOP is sent (see send_stop).
  bool send_final(loop_state& s) {
    const bool stop_pending = !s.stop_sent && state_.stop_requested();
    if (!state_.finish_requested() || s.final_sent || stop_pending) return false;
    if (!owned_.empty() || !links_.quiescent()) return false;
    std::string err = state_.error();
    std::optional<profile_snapshot> snap = profile_.final_snapshot();
    const bool stopped = state_.ended_by_stop();
    if (rank() == 0) {
      profile_.own_final(std::move(snap), std::move(err));
      stopped_any_ = stopped_any_ || stopped;
      ++s.finals;
    } else {
      final_message m{{err.begin(), err.end()}, snap ? encode_snapshot(*snap) : std::vector<std::uint64_t>{},
                      static_cast<std::uint8_t>(stopped)};
      owned_.post_message(std::move(m), 0, tag_final, comm());
    }
    s.final_sent = true;
    return true;
  }
  // 7a. Rank 0: every rank's FINAL, then BYE to all; done once the BYEs are matched.
  bool collect_finals_and_bye(loop_state& s) {
    bool any = false;
    while (auto m = try_receive(comm(), MPI_ANY_SOURCE, tag_final)) {
      ++s.finals;  // counted whatever it holds: rank m->source has ended its part
      any = true;
      std::optional<final_message> f;
      try {
        f = m->as<final_message>();
      } catch (const std::exception&) {
      }
      stopped_any_ = stopped_any_ || (f && f->stopped != 0);
      profile_.final_from(static_cast<std::size_t>(m->source), f ? &*f : nullptr);
    }
    if (s.finals == size() && !s.bye_sent) {
      bye_ok_ = profile_.clean();
      for (int r = 1; r < size(); ++r)
        owned_.post_message(bye_message{static_cast<std::uint8_t>(bye_ok_), static_cast<std::uint8_t>(stopped_any_)}, r,
                            tag_bye, comm());
      s.bye_sent = true;
    }
    s.done = s.bye_sent && owned_.empty();
    return any;
  }
  // 7b. Other ranks: BYE from rank 0 once our FINAL is matched.
  bool await_bye(loop_state& s) {
    if (!s.final_sent || !owned_.empty()) return false;
    const auto m = try_receive(comm(), 0, tag_bye);
    if (!m) return false;
    try {
      const auto bye = m->as<bye_message>();
      bye_ok_ = bye.ok != 0;
      stopped_any_ = bye.stopped != 0;
    } catch (const std::exception&) {
      bye_ok_ = false;
    }
    s.done = true;
    return true;
  }

  const runtime& rt_;
  mpi_calls& mpi_;
  job_state& state_;
  link_registry& links_;
  profile_collector& profile_;
  std::thread thread_;
  owned_sends owned_;              // with the MPI lock held
  std::vector<std::byte> orphan_;  // drop_orphans' scratch
  std::atomic<std::uint64_t> passes_{0};
  bool bye_ok_ = true;  // progress thread (read after join)
  bool stopped_any_ = false;
};

}  // namespace dflash::mpi::detail
