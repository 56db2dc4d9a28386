#pragma once
// dflash::mpi::job — one per process of an MPI job: MPI start-up, a progress
// thread, stop / error propagation to every rank, and one profile for the job.
//
//   dflash::mpi::job job(argc, argv);         // MPI_Init_thread(MPI_THREAD_SERIALIZED)
//   job.start(prof);                          // all ranks: same key set, or every rank throws
//   hs_link link(job, producers, consumers);  // mpi_link.hpp
//   job.run(pipeline);                        // run + join; an error or early stop stops every rank
//   auto r = job.finish();                    // rank 0: r.profile has every rank's snapshot
//
// The parts, one header each: runtime.hpp (MPI start-up, the communicator),
// key_agreement.hpp (start()'s collective), control_messages.hpp (STOP,
// PROFILE, FINAL, BYE), owned_sends.hpp, progress_waker.hpp, channel.hpp
// (what a link does on the progress thread). This header composes them and
// runs the progress loop as named phases (see loop()).
//
// Threading: after start(), the job's MPI calls are made by its progress
// thread, or by a stage thread that drives its own link (see drive()), one at
// a time under one lock; before start() / after finish() by the calling
// thread, never at once: MPI_THREAD_SERIALIZED is enough (see runtime.hpp).
// One thread polling with MPI_Iprobe/MPI_Test is also what lets a blocked
// rank notice a remote stop. If the program initialised MPI itself with
// MPI_THREAD_MULTIPLE it may keep making its own MPI calls concurrently;
// under MPI_THREAD_SERIALIZED it makes them holding lock_mpi().
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
// Lifetimes: the job takes snapshots of the profiler given to start() (and
// calls on_report) only while a run() or an explicit finish() is in progress,
// when the caller's scope, profiler included, is alive. An mpi_link destroyed
// before finish() leaves its MPI state to the job, which completes it. So an
// exception that leaves the scope of a running job is safe whatever order
// the profiler, the job and the links were declared in: ~job finishes with
// an error (without a snapshot), the other ranks end.
//
// start() is collective and so is leaving before it: a rank whose job is
// destroyed before start() (an exception, an early return) joins start()'s
// collective saying so, and start() on the other ranks throws naming it.
//
// Clean shutdown: every message is sent with MPI_Issend (complete = matched by
// the receiver), or, for a link's batch headers and credits, with MPI_Isend in
// a stream that the link ends with an MPI_Issend on the same tag before FINAL
// (MPI keeps one source's messages on one tag in order: its match proves
// theirs); a rank sends its FINAL message to rank 0 only after all its sends
// completed; rank 0 answers every FINAL with BYE. So no message is left
// unmatched at MPI_Finalize.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/mpi/channel.hpp"
#include "dflash/mpi/clock_offset.hpp"
#include "dflash/mpi/control_messages.hpp"
#include "dflash/mpi/job_profile.hpp"
#include "dflash/mpi/key_agreement.hpp"
#include "dflash/mpi/owned_sends.hpp"
#include "dflash/mpi/progress_waker.hpp"
#include "dflash/mpi/runtime.hpp"
#include "dflash/pipeline/item.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash::mpi {

struct job_options {
  /// Every rank sends its snapshot to rank 0 this often (0: only the final one),
  /// while a run() or finish() is in progress on it (its profiler is alive then).
  std::chrono::milliseconds report_interval{0};
  /// Rank 0, on the progress thread, with the latest snapshot of every rank,
  /// while a run() or finish() is in progress on rank 0; an exception it
  /// throws fails the job. Default: print format_job_table to stdout.
  std::function<void(const job_profile&)> on_report;
  /// The start-up clock exchange, made when a rank's profiler stamps items
  /// (FlowPolicy): its offsets convert stamps that cross a net_link.
  clock_offset_options clock;
};

struct job_result {
  bool ok = true;             ///< every rank finished without an error (the same on every rank)
  std::string error;          ///< rank 0: every failed rank's error; others: their own
  std::optional<job_profile> profile;  ///< rank 0 only: every rank's final snapshot
};

class job {
 public:
  /// Initialises MPI (MPI_THREAD_SERIALIZED), or checks the level of an MPI
  /// the program initialised already (then the program finalises it).
  job(int& argc, char**& argv) : rt_(argc, argv) {
    job* none = nullptr;
    current_.compare_exchange_strong(none, this, std::memory_order_acq_rel);
  }
  job(const job&) = delete;
  job& operator=(const job&) = delete;

  /// Before start(): joins start()'s collective as "left before start" (the
  /// other ranks' start() throws naming this rank; error text from fail() if
  /// any). After start(), if finish() was not called (an exception unwinds
  /// past the job), finishes with an error so that the other ranks stop and do
  /// not wait for this one; no snapshot is taken (the profiler may be gone).
  ~job() {
    if (!voted_) {
      try {
        std::string why;
        {
          std::lock_guard lk(state_m_);
          why = error_;
        }
        if (why.empty()) why = "its job was destroyed before start() (an exception, or it returned early)";
        vote({true, std::move(why), 0});
      } catch (...) {
      }
    } else if (thread_.joinable() && !finished_) {
      try {
        fail("rank exited without calling finish() (an exception left the job's scope?)");
        (void)finish_impl();
      } catch (...) {
      }
    }
    if (thread_.joinable()) thread_.join();
    channels_.clear();  // before rt_ frees the communicator and finalises MPI
    job* self = this;
    current_.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
  }

  /// The job of this process (MPI is one per process), or null: what a
  /// pipeline's net_link (net_link.hpp) joins. The first job constructed
  /// while none exists.
  [[nodiscard]] static job* current() noexcept { return current_.load(std::memory_order_acquire); }

  [[nodiscard]] int rank() const noexcept { return rt_.rank(); }
  [[nodiscard]] int size() const noexcept { return rt_.size(); }
  [[nodiscard]] MPI_Comm comm() const noexcept { return rt_.comm(); }

  /// Collective: checks that every rank's profiler has the same key set (else
  /// every rank throws std::runtime_error naming the first differing key),
  /// estimates every rank's clock offset to rank 0 when a profiler stamps
  /// items (clock_offset.hpp), then starts the progress thread. prof is read (snapshots) only while a
  /// run() or finish() call is in progress, so it may be declared before or
  /// after the job.
  template <class Profiler>
  void start(const Profiler& prof, job_options opt = {}) {
    std::vector<std::string> names;
    if constexpr (requires { prof.snapshot(); Profiler::keys::names; }) {
      for (auto n : Profiler::keys::names) names.emplace_back(n);
      snap_ = [&prof] { return prof.snapshot(); };
    }
    if constexpr (FlowPolicy<Profiler>)
      clock_now_ = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Profiler::clock::now().time_since_epoch()).count();
      };
    start_impl(std::move(names), std::move(opt));
  }
  /// Without a profiler (every rank must then start this way).
  void start(job_options opt = {}) { start_impl({}, std::move(opt)); }

  /// Runs a dflash::Pipeline to the end on this rank: run() + join(). A local
  /// error or early stop stops every rank; a remote one stops this pipeline.
  /// Returns false if a stage threw (its error goes to rank 0 at finish()).
  template <class Pipe>
  bool run(Pipe& p) {
    const profiler_window w(*this);  // prof is alive while run() runs
    {
      std::lock_guard lk(hook_m_);
      cancelled_hook_ = [&p] { return p.cancelled(); };
      stop_hook_ = [&p] { p.stop(); };
    }
    std::exception_ptr err;
    try {
      p.run();
      if (stopped_.load(std::memory_order_acquire)) p.stop();  // a STOP that came before run()
      p.join();
    } catch (...) {
      err = std::current_exception();
    }
    const bool cancelled = p.cancelled();
    {
      std::lock_guard lk(hook_m_);
      cancelled_hook_ = nullptr;
      stop_hook_ = nullptr;
    }
    if (err) {
      try {
        std::rethrow_exception(err);
      } catch (const std::exception& e) {
        fail(e.what());
      } catch (...) {
        fail("unknown exception");
      }
      return false;
    }
    if (cancelled) stop_all();
    else runs_ended_.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }

  /// Records this rank's error (reported by rank 0) and stops every rank.
  void fail(std::string what) {
    {
      std::lock_guard lk(state_m_);
      if (error_.empty()) error_ = std::move(what);
    }
    stop_all();
  }
  /// Stops every rank's pipeline (no error). Thread-safe, non-blocking.
  void stop_all() noexcept { stop_requested_.store(true, std::memory_order_release); }
  /// Periodic snapshots this rank has sent to rank 0 (rank 0: reports made).
  [[nodiscard]] std::uint64_t periodic_reports() const noexcept { return periodic_.load(std::memory_order_acquire); }
  /// Passes the progress thread made over its phases (an idle job makes few:
  /// see progress_waker).
  [[nodiscard]] std::uint64_t progress_passes() const noexcept { return passes_.load(std::memory_order_relaxed); }
  /// Every rank's profiler-clock offset to rank 0, estimated at start() (empty
  /// when no rank's profiler stamps items).
  [[nodiscard]] const clock_offsets& clocks() const noexcept { return clocks_; }
  /// A flow stamp's time taken on rank `from`, on this rank's clock.
  [[nodiscard]] std::int64_t to_local_clock(std::int64_t t_ns, int from) const noexcept {
    return clocks_.to_local(t_ns, from);
  }
  /// A STOP was seen (from this rank or another).
  [[nodiscard]] bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }

  /// The program's own MPI calls between start() and finish() under
  /// MPI_THREAD_SERIALIZED: while the returned lock is held, neither the
  /// progress thread nor a link makes an MPI call. Links make no progress
  /// meanwhile either, so hold it only around calls that complete without
  /// them (a collective on the program's own communicator, a raw send), never
  /// while waiting for an item or a credit, and take it once the links it
  /// could stall are settled (mpi_link::settled() on both sides) — a snapshot
  /// that lasts only while no stage thread uses them: between runs, or on the
  /// thread that is a link's only user. Not needed where the program
  /// initialised MPI with MPI_THREAD_MULTIPLE, which OpenMPI pays for with
  /// locks inside every MPI call, the job's included.
  [[nodiscard]] std::unique_lock<std::mutex> lock_mpi() { return std::unique_lock(mpi_m_); }

  /// Collective end: waits until this rank's sends completed, sends its final
  /// snapshot and status to rank 0, and returns once rank 0 has everyone's.
  job_result finish() {
    if (!thread_.joinable()) throw std::logic_error("dflash::mpi::job::finish(): start() was not called");
    if (finished_) throw std::logic_error("dflash::mpi::job::finish(): called twice");
    const profiler_window w(*this);  // the caller's profiler is alive: the final snapshot may be taken
    return finish_impl();
  }

  // ---- for links ------------------------------------------------------------
  /// A link has work for the progress thread (an item to send, a credit to
  /// return): wake it now rather than at its next poll.
  void wake() noexcept { waker_.wake(); }
  /// A stage thread makes a link's MPI calls itself (`work`: a pass over the
  /// link, or only the post it is handing over), so an item or credit needs
  /// no hand-off to the progress thread: a thread switch costs more than the
  /// calls when cores are shared. Only while the job runs and no other
  /// thread of it is making MPI calls (never waits for that); false if it
  /// did not.
  template <class Work>
  bool drive(Work&& work) {
    std::unique_lock lk(mpi_m_, std::try_to_lock);
    if (!lk.owns_lock() || !driving_allowed_) return false;
    try {
      work();
    } catch (const std::exception& e) {  // as on the progress thread: the link's state is unknown
      fatal(e.what());
    } catch (...) {
      fatal("unknown exception");
    }
    ++drives_;
    return true;
  }
  /// While one exists, a stage thread is blocked on a link and drives it
  /// (drive()) in a loop; the progress thread naps meanwhile (and while stage
  /// threads keep driving), so the two do not share a core.
  class driver_scope {
   public:
    explicit driver_scope(job& j) noexcept : j_(&j) { j.drivers_.fetch_add(1, std::memory_order_relaxed); }
    ~driver_scope() { end(); }
    /// The stage thread stops driving (a thread about to sleep then wakes the progress thread).
    void end() noexcept {
      if (!j_) return;
      j_->drivers_.fetch_sub(1, std::memory_order_relaxed);
      j_ = nullptr;
    }
    driver_scope(const driver_scope&) = delete;
    driver_scope& operator=(const driver_scope&) = delete;

   private:
    job* j_;
  };
  /// The job co-owns every link's MPI state (a link destroyed before finish()
  /// leaves it to the job, which completes its requests).
  /// A link made after a STOP is stopped at once (its blocked calls would
  /// otherwise wait for a stop that was already delivered). A link is told
  /// this rank's end (FIN) when the first run() that ends after it was made
  /// ends: build each pipeline after the previous run() returned.
  void attach(std::shared_ptr<channel> c) {
    std::lock_guard lk(ch_m_);
    for (const auto& o : channels_)
      if (o.link->tag_base() == c->tag_base())
        throw std::invalid_argument("dflash::mpi: two links with the same tags (same name twice, or a hash clash)");
    channels_.push_back({std::move(c), runs_ended_.load(std::memory_order_acquire)});
    // enter_stop() sets stopped_ before it takes ch_m_: it sees this link, or this sees stopped_.
    if (stopped_.load(std::memory_order_acquire)) channels_.back().link->on_stop();
  }
  /// A link's handle is going away. Before start() or after finish() its state
  /// is dropped. While the job runs the job keeps driving it to the end; if
  /// this rank's pipeline had not ended (normally or by a stop), that is an
  /// error that stops every rank (the link's peers would wait for it forever).
  void release(const channel* c, std::string_view link_name) noexcept {
    const bool running = thread_.joinable() && !finish_requested_.load(std::memory_order_acquire);
    if (running) {
      bool ended = false;
      try {
        std::lock_guard lk(ch_m_);
        for (const auto& o : channels_)
          if (o.link.get() == c) ended = run_ended(o);
      } catch (...) {
      }
      if (!ended && !stopped_.load(std::memory_order_acquire) && !stop_requested_.load(std::memory_order_acquire)) {
        try {
          fail(std::string("dflash::mpi::mpi_link \"") + std::string(link_name) +
               "\" destroyed before this rank's pipeline ended and before finish() (an exception left its "
               "scope?)");
        } catch (...) {
          stop_all();
        }
      }
      return;
    }
    if (thread_.joinable() && !finished_) return;  // finishing: the progress thread still completes it
    std::lock_guard lk(ch_m_);
    std::erase_if(channels_, [c](const auto& o) { return o.link.get() == c; });
  }

 private:
  using clock = std::chrono::steady_clock;

  // While one exists, the progress thread may snapshot the profiler and call on_report.
  struct profiler_window {
    job& j;
    explicit profiler_window(job& jj) : j(jj) {
      std::lock_guard lk(j.window_m_);
      ++j.window_users_;
    }
    ~profiler_window() {
      std::lock_guard lk(j.window_m_);  // waits for a snapshot or report in progress
      --j.window_users_;
    }
    profiler_window(const profiler_window&) = delete;
    profiler_window& operator=(const profiler_window&) = delete;
  };

  job_result finish_impl() {
    finished_ = true;
    finish_requested_.store(true, std::memory_order_release);
    thread_.join();
    job_result r;
    r.ok = bye_ok_;
    if (rank() == 0) {
      for (int i = 0; i < size(); ++i)
        if (!final_.errors[static_cast<std::size_t>(i)].empty())
          r.error += (r.error.empty() ? "" : "; ") + std::string("rank ") + std::to_string(i) + ": " +
                     final_.errors[static_cast<std::size_t>(i)];
      r.profile = std::move(final_);
    } else {
      std::lock_guard lk(state_m_);
      r.error = error_;
    }
    return r;
  }

  start_agreement vote(const start_vote& v) {
    voted_ = true;
    return agree_to_start(comm(), size(), v);
  }

  void start_impl(std::vector<std::string> names, job_options opt) {
    if (voted_) throw std::logic_error("dflash::mpi::job::start(): called twice");
    std::string bad;
    if (opt.report_interval.count() < 0) bad = "job_options::report_interval must not be negative";
    else if (opt.clock.rounds < 1) bad = "job_options::clock.rounds must be at least 1";
    else if (opt.clock.max_error.count() < 0) bad = "job_options::clock.max_error must not be negative";
    if (!bad.empty()) {
      // Local bad input: the other ranks are entering the collective; fail start() there too.
      (void)vote({true, bad, 0});
      throw std::invalid_argument("dflash::mpi::job: " + bad);
    }
    const auto agreed = vote({false, {}, key_set_hash(names), static_cast<bool>(clock_now_)});
    check_key_sets(comm(), size(), names, agreed.key_hashes);
    if (agreed.clocks) {
      // A rank whose profiler stamps nothing still answers on a clock: steady_clock.
      const std::function<std::int64_t()> steady = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
      };
      clocks_ = exchange_clock_offsets(comm(), rank(), size(), clock_now_ ? clock_now_ : steady, opt.clock);
    }
    names_ = std::move(names);
    opt_ = std::move(opt);
    if (!opt_.on_report) opt_.on_report = [](const job_profile& j) {
      std::fputs(format_job_table(j).c_str(), stdout);
      std::fflush(stdout);
    };
    const auto n = static_cast<std::size_t>(size());
    latest_.ranks.assign(n, {});
    latest_.heard.assign(n, false);
    latest_.errors.assign(n, {});
    latest_.clocks = clocks_.ranks;
    final_ = latest_;
    {
      std::lock_guard mpi(mpi_m_);
      driving_allowed_ = true;  // this thread makes no MPI call until finish()
    }
    thread_ = std::thread([this] {
      try {
        loop();
      } catch (const std::exception& e) {
        fatal(e.what());
      } catch (...) {
        fatal("unknown exception");
      }
    });
  }

  // Only with the window lock held and a window open (see profiler_window).
  profile_snapshot snapshot() const {
    if (snap_) return snap_();
    return {};
  }
  // Something escaped the progress thread: its links' and the job's state is
  // unknown, so no orderly end is possible. Every rank must still end: abort.
  [[noreturn]] void fatal(const char* what) noexcept {
    std::fprintf(stderr,
                 "dflash::mpi: rank %d: the MPI progress thread failed: %s; aborting the job (MPI_Abort) so that no "
                 "rank waits for this one\n",
                 rank(), what);
    std::fflush(stderr);
    MPI_Abort(comm(), 1);
    std::abort();
  }
  void enter_stop() {
    if (stopped_.exchange(true, std::memory_order_acq_rel)) return;
    std::lock_guard lk(ch_m_);
    for (const auto& c : channels_) c.link->on_stop();
    std::lock_guard hk(hook_m_);
    if (stop_hook_) stop_hook_();
  }

  // ---- the progress thread: one pass = every phase once ---------------------
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
    loop_state s{clock::now() + opt_.report_interval};
    for (;;) {
      bool busy = false, requests = false, driven = false;
      {
        std::lock_guard mpi(mpi_m_);  // a stage thread driving its link waits for the pass (drive())
        busy = receive_stops();
        busy |= send_stop(s);
        busy |= drive_links();
        busy |= drop_orphans();
        busy |= send_periodic_report(s);
        if (rank() == 0) busy |= receive_reports();
        busy |= send_final(s);
        busy |= rank() == 0 ? collect_finals_and_bye(s) : await_bye(s);
        if (s.done) {
          retire_links();
          driving_allowed_ = false;  // finish() and ~job make MPI calls on their own thread next
          return;
        }
        requests = in_flight();
        driven = std::exchange(drives_, 0) > 0;  // stage threads drove since the last pass
        passes_.fetch_add(1, std::memory_order_relaxed);  // counted under the lock: lock_mpi() holders see no pass
      }
      waker_.after_pass(busy, requests, driven || drivers_.load(std::memory_order_relaxed) > 0);
    }
  }

  bool in_flight() {
    if (!owned_.empty()) return true;
    std::lock_guard lk(ch_m_);
    return std::any_of(channels_.begin(), channels_.end(), [](const auto& c) { return c.link->in_flight(); });
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
    bool local = stop_requested_.load(std::memory_order_acquire) || stopped_.load(std::memory_order_acquire);
    if (!local) {
      std::lock_guard lk(hook_m_);
      local = cancelled_hook_ && cancelled_hook_();
    }
    if (!local) return false;
    // A rank that saw STOP sends it again: harmless, and covers a stop raised here at the same time.
    for (int r = 0; r < size(); ++r)
      if (r != rank()) owned_.post_message(stop_message{}, r, tag_stop, comm());
    s.stop_sent = true;
    enter_stop();
    return true;
  }
  // 3. The links' sends and receives, and FIN once the run a link belongs to
  // ended normally: the first run() that ends after the link was made (so a
  // pipeline is built after the previous run() returned).
  bool drive_links() {
    bool busy = false;
    {
      std::lock_guard lk(ch_m_);
      for (auto& c : channels_)
        if (!c.told && run_ended(c)) {
          c.told = true;
          if (c.link->finish_sending()) stop_requested_.store(true, std::memory_order_release);
        }
      for (const auto& c : channels_) busy |= c.link->progress();
    }
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
    if (!stopped_.load(std::memory_order_acquire) || !finish_requested_.load(std::memory_order_acquire)) return false;
    std::lock_guard lk(ch_m_);
    bool any = false;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      for (;;) {
        int flag = 0;
        MPI_Status st;
        check(MPI_Iprobe(r, MPI_ANY_TAG, comm(), &flag, &st), "MPI_Iprobe");
        if (!flag || st.MPI_TAG < tag_links) break;
        const int base = link_tag_base(st.MPI_TAG);
        if (std::any_of(channels_.begin(), channels_.end(), [base](const auto& c) { return c.link->tag_base() == base; }))
          break;
        int n = 0;
        check(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
        orphan_.resize(static_cast<std::size_t>(n));
        check(MPI_Recv(orphan_.data(), n, MPI_BYTE, r, st.MPI_TAG, comm(), MPI_STATUS_IGNORE), "MPI_Recv");
        any = true;
      }
    }
    return any;
  }
  // Every rank said FINAL: the links' posted receives can go.
  void retire_links() {
    std::lock_guard lk(ch_m_);
    for (const auto& c : channels_) c.link->retire();
  }
  // 4. Periodic snapshots: rank 0 reports its own and the latest of the others.
  bool send_periodic_report(loop_state& s) {
    if (opt_.report_interval.count() <= 0 || finish_requested_.load(std::memory_order_acquire) ||
        clock::now() < s.next_report)
      return false;
    s.next_report += opt_.report_interval;
    std::unique_lock wl(window_m_, std::try_to_lock);  // a run() or finish() ending: skip this one
    if (!wl.owns_lock() || window_users_ == 0) return false;
    if (rank() == 0) {
      latest_.ranks[0] = snapshot();
      latest_.heard[0] = true;
      try {
        opt_.on_report(latest_);
      } catch (const std::exception& e) {
        fail(std::string("job_options::on_report threw: ") + e.what());
      } catch (...) {
        fail("job_options::on_report threw");
      }
    } else {
      owned_.post_message(profile_message{encode_snapshot(snapshot())}, 0, tag_profile, comm());
    }
    periodic_.fetch_add(1, std::memory_order_acq_rel);
    return false;
  }
  // 5. Rank 0: the others' periodic snapshots.
  bool receive_reports() {
    bool any = false;
    while (auto m = try_receive(comm(), MPI_ANY_SOURCE, tag_profile)) {
      const auto r = static_cast<std::size_t>(m->source);
      try {
        const auto p = m->as<profile_message>();
        latest_.ranks[r] = decode_snapshot(p.snapshot.data(), p.snapshot.size(), names_);
        latest_.heard[r] = true;
      } catch (const std::exception& e) {
        fail("from rank " + std::to_string(r) + ": " + e.what());
      }
      any = true;
    }
    return any;
  }
  // 6. FINAL (status + snapshot) once finish() was called and every send of ours completed.
  // A stop requested here (a stage that threw just before finish(), ~job's fail()) goes
  // out before FINAL: after FINAL no STOP is sent (see send_stop).
  bool send_final(loop_state& s) {
    const bool stop_pending = !s.stop_sent && stop_requested_.load(std::memory_order_acquire);
    if (!finish_requested_.load(std::memory_order_acquire) || s.final_sent || stop_pending) return false;
    if (!owned_.empty()) return false;
    {
      std::lock_guard lk(ch_m_);
      for (const auto& c : channels_)
        if (!c.link->quiescent()) return false;
    }
    std::string err;
    {
      std::lock_guard lk(state_m_);
      err = error_;
    }
    // The final snapshot only from an explicit finish(): in ~job the profiler may be gone.
    std::optional<profile_snapshot> snap;
    {
      std::lock_guard wl(window_m_);
      if (window_users_ > 0) snap = snapshot();
    }
    if (rank() == 0) {
      if (snap) final_.ranks[0] = std::move(*snap);
      final_.heard[0] = snap.has_value();
      final_.errors[0] = err;
      ++s.finals;
    } else {
      final_message m{{err.begin(), err.end()}, snap ? encode_snapshot(*snap) : std::vector<std::uint64_t>{}};
      owned_.post_message(std::move(m), 0, tag_final, comm());
    }
    s.final_sent = true;
    return true;
  }
  // 7a. Rank 0: every rank's FINAL, then BYE to all; done once the BYEs are matched.
  bool collect_finals_and_bye(loop_state& s) {
    bool any = false;
    while (auto m = try_receive(comm(), MPI_ANY_SOURCE, tag_final)) {
      const auto r = static_cast<std::size_t>(m->source);
      ++s.finals;  // counted whatever it holds: rank r has ended its part
      any = true;
      final_message f;
      try {
        f = m->as<final_message>();
      } catch (const std::exception&) {
        final_.errors[r] = "malformed FINAL message";
        continue;
      }
      final_.errors[r].assign(f.error.begin(), f.error.end());
      if (f.snapshot.empty()) continue;  // no snapshot (that rank's ~job finished it)
      try {
        final_.ranks[r] = decode_snapshot(f.snapshot.data(), f.snapshot.size(), names_);
        final_.heard[r] = true;
      } catch (const std::exception& e) {
        final_.errors[r] += std::string(final_.errors[r].empty() ? "" : "; ") + e.what();
      }
    }
    if (s.finals == size() && !s.bye_sent) {
      bye_ok_ = std::all_of(final_.errors.begin(), final_.errors.end(), [](const auto& e) { return e.empty(); });
      for (int r = 1; r < size(); ++r)
        owned_.post_message(bye_message{static_cast<std::uint8_t>(bye_ok_)}, r, tag_bye, comm());
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
      bye_ok_ = m->as<bye_message>().ok != 0;
    } catch (const std::exception&) {
      bye_ok_ = false;
    }
    s.done = true;
    return true;
  }

  runtime rt_;
  std::vector<std::string> names_;
  std::function<profile_snapshot()> snap_;
  std::function<std::int64_t()> clock_now_;  // the profiler's clock in ns, when it stamps items
  clock_offsets clocks_;                      // written by start() before the progress thread, then read-only
  job_options opt_;
  std::thread thread_;
  bool finished_ = false;
  bool voted_ = false;  // this rank made start()'s collective (starting or leaving)

  std::mutex window_m_;
  int window_users_ = 0;  // run() / finish() calls in progress

  // A link and the run it belongs to: it is told this rank's end (FIN) once
  // runs_ended_ passes `run`, the normal ends counted when it was attached.
  struct attached {
    std::shared_ptr<channel> link;
    std::uint64_t run = 0;
    bool told = false;  // progress thread only
  };
  // The run `a` belongs to has ended normally.
  [[nodiscard]] bool run_ended(const attached& a) const noexcept {
    return runs_ended_.load(std::memory_order_acquire) > a.run;
  }
  std::mutex ch_m_;
  std::vector<attached> channels_;
  // Held by whichever thread makes the job's MPI calls after start(): the
  // progress thread for a pass, or a stage thread in drive().
  std::mutex mpi_m_;
  bool driving_allowed_ = false;  // guarded by mpi_m_: between start() and the loop's end
  std::atomic<int> drivers_{0};   // stage threads in a driver_scope
  std::uint64_t drives_ = 0;      // guarded by mpi_m_: drive() calls since the progress thread's last pass
  owned_sends owned_;  // with mpi_m_ held
  std::vector<std::byte> orphan_;  // progress thread: drop_orphans' scratch

  std::mutex hook_m_;
  std::function<bool()> cancelled_hook_;
  std::function<void()> stop_hook_;

  std::mutex state_m_;
  std::string error_;
  std::atomic<bool> stop_requested_{false}, stopped_{false}, finish_requested_{false};
  std::atomic<std::uint64_t> runs_ended_{0};  // run() calls whose pipeline ended normally
  std::atomic<std::uint64_t> periodic_{0}, passes_{0};

  progress_waker waker_;

  job_profile latest_, final_;  // progress thread only (final_ read after join)
  bool bye_ok_ = true;
  inline static std::atomic<job*> current_{nullptr};
};

}  // namespace dflash::mpi
