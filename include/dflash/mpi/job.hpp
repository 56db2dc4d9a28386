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
// PROFILE, FINAL, BYE), owned_sends.hpp, progress_waker.hpp, job_link.hpp
// (what a link does on the progress thread), job_options.hpp (what start()
// takes and finish() returns), job_state.hpp (stop, finish, this rank's
// error), job_links.hpp (the attached links), job_collector.hpp (the
// profile), job_mpi_calls.hpp (who makes the MPI calls: threading),
// job_progress.hpp (the progress loop: stop, errors, clean shutdown). This
// header composes them; the job models ProcessGroup (process_group.hpp).
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

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/mpi/job_link.hpp"
#include "dflash/mpi/clock_offset.hpp"
#include "dflash/mpi/job_collector.hpp"
#include "dflash/mpi/job_links.hpp"
#include "dflash/mpi/job_mpi_calls.hpp"
#include "dflash/mpi/job_options.hpp"
#include "dflash/mpi/job_profile.hpp"
#include "dflash/mpi/job_progress.hpp"
#include "dflash/mpi/job_state.hpp"
#include "dflash/mpi/key_agreement.hpp"
#include "dflash/mpi/process_group.hpp"
#include "dflash/mpi/runtime.hpp"
#include "dflash/pipeline/item.hpp"

namespace dflash::mpi {

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
        std::string why = state_.error();
        if (why.empty()) why = "its job was destroyed before start() (an exception, or it returned early)";
        vote({true, std::move(why), 0});
      } catch (...) {
      }
    } else if (loop_.started() && !finished_) {
      try {
        fail("rank exited without calling finish() (an exception left the job's scope?)");
        (void)finish_impl();
      } catch (...) {
      }
    }
    if (loop_.started()) loop_.join();
    links_.clear();  // before rt_ frees the communicator and finalises MPI
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
      profile_.snapshot_with([&prof] { return prof.snapshot(); });
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
    const detail::profile_collector::window w(profile_);  // prof is alive while run() runs
    state_.watch(p);
    std::exception_ptr err;
    try {
      p.run();
      if (state_.stopped()) p.stop();  // a STOP that came before run()
      p.join();
    } catch (...) {
      err = std::current_exception();
    }
    const bool cancelled = p.cancelled();
    if (cancelled || p.stop_requested()) state_.note_stopped_run();  // a drain too: the source ended early
    state_.unwatch();
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
    else links_.end_run();
    return true;
  }

  /// Records this rank's error (reported by rank 0) and stops every rank.
  void fail(std::string what) { state_.fail(std::move(what)); }
  /// Stops every rank's pipeline (no error). Thread-safe, non-blocking.
  void stop_all() noexcept { state_.request_stop(); }
  /// Periodic snapshots this rank has sent to rank 0 (rank 0: reports made).
  [[nodiscard]] std::uint64_t periodic_reports() const noexcept { return profile_.periodic_reports(); }
  /// Passes the progress thread made over its phases (an idle job makes few:
  /// see progress_waker).
  [[nodiscard]] std::uint64_t progress_passes() const noexcept { return loop_.passes(); }
  /// Every rank's profiler-clock offset to rank 0, estimated at start() (empty
  /// when no rank's profiler stamps items).
  [[nodiscard]] const clock_offsets& clocks() const noexcept { return clocks_; }
  /// A flow stamp's time taken on rank `from`, on this rank's clock.
  [[nodiscard]] std::int64_t to_local_clock(std::int64_t t_ns, int from) const noexcept {
    return clocks_.to_local(t_ns, from);
  }
  /// A STOP was seen (from this rank or another).
  [[nodiscard]] bool stopped() const noexcept { return state_.stopped(); }

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
  [[nodiscard]] std::unique_lock<std::mutex> lock_mpi() { return mpi_.lock(); }

  /// Collective end: waits until this rank's sends completed, sends its final
  /// snapshot and status to rank 0, and returns once rank 0 has everyone's.
  job_result finish() {
    if (!loop_.started()) throw std::logic_error("dflash::mpi::job::finish(): start() was not called");
    if (finished_) throw std::logic_error("dflash::mpi::job::finish(): called twice");
    // the caller's profiler is alive: the final snapshot may be taken
    const detail::profile_collector::window w(profile_);
    return finish_impl();
  }

  // ---- for links (ProcessGroup) -----------------------------------------------
  /// A link has work for the progress thread: wake it now (job_mpi_calls.hpp).
  void wake() noexcept { mpi_.wake(); }
  /// A stage thread makes a link's MPI calls itself, if no other thread of
  /// the job is making MPI calls; false if it did not (job_mpi_calls.hpp).
  template <class Work>
  bool drive(Work&& work) {
    return mpi_.drive(std::forward<Work>(work));
  }
  /// While one exists, a stage thread is blocked on a link and drives it.
  class driver_scope : public detail::mpi_calls::driver_scope {
   public:
    explicit driver_scope(job& j) noexcept : detail::mpi_calls::driver_scope(j.mpi_) {}
  };
  /// The job co-owns every link's MPI state (job_links.hpp).
  void attach(std::shared_ptr<job_link> c) { links_.attach(std::move(c), state_); }
  /// Link c is ended by its owner (mpi_link::end_on_close), not by run()'s end.
  void own_end(const job_link* c) { links_.own_end(c); }
  /// A link's handle is going away. Before start() or after finish() its state
  /// is dropped. While the job runs the job keeps driving it to the end; if
  /// this rank's pipeline had not ended (normally or by a stop), that is an
  /// error that stops every rank (the link's peers would wait for it forever).
  void release(const job_link* c, std::string_view link_name) noexcept {
    if (loop_.started() && !state_.finish_requested()) {
      bool ended = false;
      try {
        ended = links_.ended(c);
      } catch (...) {
      }
      if (!ended && !state_.stopped() && !state_.stop_requested()) {
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
    if (loop_.started() && !finished_) return;  // finishing: the progress thread still completes it
    links_.erase(c);
  }

 private:
  job_result finish_impl() {
    finished_ = true;
    state_.request_finish();
    loop_.join();
    job_result r;
    r.ok = loop_.bye_ok();
    r.stopped_early = loop_.stopped_any();
    if (rank() == 0) {
      r.error = profile_.errors();
      r.profile = profile_.take_final();
    } else {
      r.error = state_.error();
    }
    return r;
  }

  start_agreement vote(const start_vote& v) {
    voted_ = true;
    return agree_to_start(comm(), size(), v);
  }

  void start_impl(std::vector<std::string> names, job_options opt) {
    if (voted_) throw std::logic_error("dflash::mpi::job::start(): called twice");
    if (const std::string bad = detail::invalid_options(opt); !bad.empty()) {
      // Local bad input: the other ranks are entering the collective; fail start() there too.
      (void)vote({true, bad, 0});
      throw std::invalid_argument("dflash::mpi::job: " + bad);
    }
    const auto agreed = vote({false, {}, key_set_hash(names), static_cast<bool>(clock_now_)});
    check_key_sets(comm(), size(), names, agreed.key_hashes);
    if (agreed.clocks) {
      // A rank whose profiler stamps nothing still answers on a clock: steady_clock.
      const std::function<std::int64_t()> steady = [] {
        const auto t = std::chrono::steady_clock::now().time_since_epoch();
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t).count();
      };
      clocks_ = exchange_clock_offsets(comm(), rank(), size(), clock_now_ ? clock_now_ : steady, opt.clock);
    }
    profile_.begin(std::move(names), static_cast<std::size_t>(size()), opt.report_interval, std::move(opt.on_report),
                   clocks_.ranks);
    loop_.start();
  }

  runtime rt_;  // first: the other parts' MPI state goes before it finalises MPI
  std::function<std::int64_t()> clock_now_;  // the profiler's clock in ns, when it stamps items
  clock_offsets clocks_;                      // written by start() before the progress thread, then read-only
  bool finished_ = false;
  bool voted_ = false;  // this rank made start()'s collective (starting or leaving)

  detail::job_state state_;
  detail::link_registry links_;
  detail::profile_collector profile_{state_};
  detail::mpi_calls mpi_{rt_};
  detail::progress_loop loop_{rt_, mpi_, state_, links_, profile_};
  inline static std::atomic<job*> current_{nullptr};
};

static_assert(ProcessGroup<job>, "dflash::mpi::job: a link's process group (process_group.hpp)");

}  // namespace dflash::mpi
