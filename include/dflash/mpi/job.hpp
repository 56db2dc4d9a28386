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
// Threading: after start(), every MPI call of this process is made by the
// job's progress thread (links hand items to it through mutex-guarded
// queues), and before start() / after finish() by the calling thread, never
// at once. So MPI_THREAD_SERIALIZED is enough. We do not ask for
// MPI_THREAD_MULTIPLE: many MPI builds (and network transports) lack it or
// serialise it with a global lock anyway, and one thread polling with
// MPI_Iprobe/MPI_Test is also what lets a blocked rank notice a remote stop.
// If the program initialised MPI itself with MPI_THREAD_MULTIPLE it may keep
// making its own MPI calls concurrently (the benchmark does).
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
// the receiver), and a rank sends its FINAL message to rank 0 only after all
// its sends completed; rank 0 answers every FINAL with BYE. So no message is
// left unmatched at MPI_Finalize.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/mpi/job_profile.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash::mpi {

inline void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, s, &n);
  throw std::runtime_error(std::string("dflash::mpi: ") + what + " failed: " + std::string(s, static_cast<std::size_t>(n)));
}

/// What a link does on the progress thread. Every member is called there only.
class channel {
 public:
  virtual ~channel() = default;
  /// Post / complete sends and receives; true if anything happened.
  virtual bool progress() = 0;
  /// The job stopped: wake blocked senders and receivers (they end their stage).
  virtual void on_stop() = 0;
  /// This rank's pipeline ended normally: producers tell consumers (FIN).
  /// Returns true if that end is premature for the link (a consumer that
  /// stopped taking items before every producer finished): the job then
  /// stops every rank, as producers would otherwise wait for credits forever.
  virtual bool finish_sending() = 0;
  /// Every send of this rank on the link has completed (matched).
  virtual bool quiescent() = 0;
  /// First tag of the three the link uses (must be equal on every rank).
  virtual int tag_base() const = 0;
};

struct job_options {
  /// Every rank sends its snapshot to rank 0 this often (0: only the final one),
  /// while a run() or finish() is in progress on it (its profiler is alive then).
  std::chrono::milliseconds report_interval{0};
  /// Rank 0, on the progress thread, with the latest snapshot of every rank,
  /// while a run() or finish() is in progress on rank 0; an exception it
  /// throws fails the job. Default: print format_job_table to stdout.
  std::function<void(const job_profile&)> on_report;
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
  job(int& argc, char**& argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    int provided = 0;
    if (!inited) {
      check(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      if (owns_mpi_) MPI_Finalize();
      throw std::runtime_error("dflash::mpi::job: MPI provides thread level " + std::to_string(provided) +
                               ", the job needs MPI_THREAD_SERIALIZED (its progress thread makes the MPI calls)");
    }
    multiple_ = provided >= MPI_THREAD_MULTIPLE;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");  // our tags never meet the program's
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
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
    if (!start_collective_done_) {
      try {
        std::string why;
        {
          std::lock_guard lk(state_m_);
          why = error_;
        }
        if (why.empty()) why = "its job was destroyed before start() (an exception, or it returned early)";
        (void)start_collective(std::move(why), true);
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
    channels_.clear();
    job* self = this;
    current_.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  /// The job of this process (MPI is one per process), or null: what a
  /// pipeline's net_link (net_link.hpp) joins. The first job constructed
  /// while none exists.
  [[nodiscard]] static job* current() noexcept { return current_.load(std::memory_order_acquire); }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }

  /// Collective: checks that every rank's profiler has the same key set (else
  /// every rank throws std::runtime_error naming the first differing key),
  /// then starts the progress thread. prof is read (snapshots) only while a
  /// run() or finish() call is in progress, so it may be declared before or
  /// after the job.
  template <class Profiler>
  void start(const Profiler& prof, job_options opt = {}) {
    std::vector<std::string> names;
    if constexpr (requires { prof.snapshot(); Profiler::keys::names; }) {
      for (auto n : Profiler::keys::names) names.emplace_back(n);
      snap_ = [&prof] { return prof.snapshot(); };
    }
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
    else finish_sending_.store(true, std::memory_order_release);
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
  /// A STOP was seen (from this rank or another).
  [[nodiscard]] bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }

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
  void wake() noexcept {
    wake_.store(true);  // seq_cst with sleeping_: the thread either sees wake_ or is told
    if (sleeping_.load()) {
      std::lock_guard lk(wake_m_);
      wake_cv_.notify_one();
    }
  }
  /// The job co-owns every link's MPI state (a link destroyed before finish()
  /// leaves it to the job, which completes its requests).
  void attach(std::shared_ptr<channel> c) {
    std::lock_guard lk(ch_m_);
    for (const auto& o : channels_)
      if (o->tag_base() == c->tag_base())
        throw std::invalid_argument("dflash::mpi: two links with the same tags (same name twice, or a hash clash)");
    channels_.push_back(std::move(c));
  }
  /// A link's handle is going away. Before start() or after finish() its state
  /// is dropped. While the job runs the job keeps driving it to the end; if
  /// this rank's pipeline had not ended (normally or by a stop), that is an
  /// error that stops every rank (the link's peers would wait for it forever).
  void release(const channel* c, std::string_view link_name) noexcept {
    const bool running = thread_.joinable() && !finish_requested_.load(std::memory_order_acquire);
    if (running) {
      if (!finish_sending_.load(std::memory_order_acquire) && !stopped_.load(std::memory_order_acquire) &&
          !stop_requested_.load(std::memory_order_acquire)) {
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
    std::erase_if(channels_, [c](const auto& o) { return o.get() == c; });
  }
  /// An MPI_Issend whose buffer the job keeps until it completes.
  void post_owned(std::vector<std::byte> bytes, int dest, int tag) {
    owned_.emplace_back();
    auto& o = owned_.back();
    o.bytes = std::move(bytes);
    check(MPI_Issend(o.bytes.data(), static_cast<int>(o.bytes.size()), MPI_BYTE, dest, tag, comm_, &o.req),
          "MPI_Issend");
  }

  static constexpr int tag_stop = 1, tag_profile = 2, tag_final = 3, tag_bye = 4, tag_links = 100;

 private:
  struct owned_send {
    std::vector<std::byte> bytes;
    MPI_Request req = MPI_REQUEST_NULL;
  };

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
    if (rank_ == 0) {
      for (int i = 0; i < size_; ++i)
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

  // The first collective of start(), also made by a rank leaving before start()
  // (~job): each rank says whether it starts, and its key-set hash. Returns the
  // hashes if every rank starts; otherwise every starting rank throws, naming
  // the ranks that left and why.
  std::vector<std::uint64_t> start_collective(std::string leaving_reason, bool leaving) {
    start_collective_done_ = true;
    const std::uint64_t mine[2] = {leaving ? 1u : 0u, leaving ? 0u : key_hash_};
    std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size_));
    check(MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm_), "MPI_Allgather");
    bool any = false;
    for (int r = 0; r < size_; ++r) any |= all[2 * static_cast<std::size_t>(r)] != 0;
    std::vector<std::uint64_t> hashes(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) hashes[static_cast<std::size_t>(r)] = all[2 * static_cast<std::size_t>(r) + 1];
    if (!any) return hashes;
    const auto why = gather_strings(leaving ? leaving_reason : std::string());
    if (leaving) return {};
    std::string msg = "dflash::mpi::job::start(): the job cannot start:";
    for (int r = 0; r < size_; ++r)
      if (all[2 * static_cast<std::size_t>(r)] != 0)
        msg += " rank " + std::to_string(r) + " left before start(): " + why[static_cast<std::size_t>(r)] + ".";
    throw std::runtime_error(msg);
  }
  // Collective: every rank's string.
  std::vector<std::string> gather_strings(const std::string& s) {
    const int len = static_cast<int>(s.size());
    std::vector<int> lens(static_cast<std::size_t>(size_)), offs(static_cast<std::size_t>(size_));
    check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    int total = 0;
    for (int i = 0; i < size_; ++i) offs[static_cast<std::size_t>(i)] = std::exchange(total, total + lens[static_cast<std::size_t>(i)]);
    std::string every(static_cast<std::size_t>(total), '\0');
    check(MPI_Allgatherv(s.data(), len, MPI_CHAR, every.data(), lens.data(), offs.data(), MPI_CHAR, comm_),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(every.substr(static_cast<std::size_t>(offs[static_cast<std::size_t>(r)]),
                                 static_cast<std::size_t>(lens[static_cast<std::size_t>(r)])));
    return out;
  }

  void start_impl(std::vector<std::string> names, job_options opt) {
    if (start_collective_done_) throw std::logic_error("dflash::mpi::job::start(): called twice");
    if (opt.report_interval.count() < 0) {
      // Local bad input: the other ranks are entering the collective; fail start() there too.
      const std::string why = "job_options::report_interval must not be negative";
      (void)start_collective(why, true);
      throw std::invalid_argument("dflash::mpi::job: " + why);
    }
    key_hash_ = key_set_hash(names);
    check_key_sets(names, start_collective({}, false));
    names_ = std::move(names);
    opt_ = std::move(opt);
    if (!opt_.on_report) opt_.on_report = [](const job_profile& j) {
      std::fputs(format_job_table(j).c_str(), stdout);
      std::fflush(stdout);
    };
    latest_.ranks.assign(static_cast<std::size_t>(size_), {});
    latest_.heard.assign(static_cast<std::size_t>(size_), false);
    latest_.errors.assign(static_cast<std::size_t>(size_), {});
    final_ = latest_;
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

  // Collective, before the progress thread exists: the hashes (from
  // start_collective), then the names of every rank when they differ (so the
  // message can name the key).
  void check_key_sets(const std::vector<std::string>& names, const std::vector<std::uint64_t>& all) {
    if (std::all_of(all.begin(), all.end(), [&](auto x) { return x == all[0]; })) return;
    std::string joined;
    for (const auto& n : names) joined += n + '\n';
    const auto every = gather_strings(joined);
    auto split = [&](int r) {
      std::vector<std::string> v;
      std::string cur;
      for (char c : every[static_cast<std::size_t>(r)]) {
        if (c == '\n') v.push_back(std::exchange(cur, {}));
        else cur += c;
      }
      return v;
    };
    const auto ref = split(0);
    std::string msg = "dflash::mpi::job: the ranks' profilers have different key sets (every rank must use the "
                      "same profiler type; use one key set covering every rank's pipeline):";
    for (int r = 1; r < size_; ++r) {
      if (all[static_cast<std::size_t>(r)] == all[0]) continue;
      const auto v = split(r);
      std::size_t i = 0;
      while (i < v.size() && i < ref.size() && v[i] == ref[i]) ++i;
      msg += " rank " + std::to_string(r) + " has " + std::to_string(v.size()) + " keys, rank 0 has " +
             std::to_string(ref.size()) + "; first difference at key " + std::to_string(i) + " (rank " +
             std::to_string(r) + ": '" + (i < v.size() ? v[i] : "<none>") + "', rank 0: '" +
             (i < ref.size() ? ref[i] : "<none>") + "').";
    }
    throw std::runtime_error(msg);
  }

  // ---- the progress thread ------------------------------------------------------
  bool probe(int source, int tag, MPI_Status& st) {
    int flag = 0;
    check(MPI_Iprobe(source, tag, comm_, &flag, &st), "MPI_Iprobe");
    return flag != 0;
  }
  std::vector<std::byte> recv_probed(const MPI_Status& st, int tag) {
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    std::vector<std::byte> b(static_cast<std::size_t>(n));
    check(MPI_Recv(b.data(), n, MPI_BYTE, st.MPI_SOURCE, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    return b;
  }
  bool complete_owned() {
    bool any = false;
    for (auto it = owned_.begin(); it != owned_.end();) {
      int done = 0;
      check(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) {
        it = owned_.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    return any;
  }
  static std::vector<std::byte> to_bytes(const std::vector<std::uint64_t>& w) {
    std::vector<std::byte> b(w.size() * sizeof(std::uint64_t));
    std::memcpy(b.data(), w.data(), b.size());
    return b;
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
                 rank_, what);
    std::fflush(stderr);
    MPI_Abort(comm_, 1);
    std::abort();
  }
  void enter_stop() {
    if (stopped_.exchange(true, std::memory_order_acq_rel)) return;
    std::lock_guard lk(ch_m_);
    for (const auto& c : channels_) c->on_stop();
    std::lock_guard hk(hook_m_);
    if (stop_hook_) stop_hook_();
  }

  void loop() {
    using clock = std::chrono::steady_clock;
    auto next_report = clock::now() + opt_.report_interval;
    bool stop_sent = false, final_sent = false, final_done = false, bye_sent = false;
    int finals = 0, idle = 0;
    bool fin_done = false;
    for (;;) {
      bool busy = false;
      MPI_Status st;
      // 1. STOP from another rank, or a local stop / cancelled pipeline
      while (probe(MPI_ANY_SOURCE, tag_stop, st)) {
        (void)recv_probed(st, tag_stop);
        enter_stop();
        busy = true;
      }
      // Never after our FINAL: a rank leaves once it has BYE, without draining STOPs, so a
      // STOP posted then might never be matched (and we would wait for it forever). One
      // posted before FINAL is matched before it (FINAL waits for every send of ours),
      // and the receiver is still in its loop then (BYE needs every FINAL).
      if (!stop_sent && !final_sent) {
        bool local = stop_requested_.load(std::memory_order_acquire);
        if (!local) {
          std::lock_guard lk(hook_m_);
          local = cancelled_hook_ && cancelled_hook_();
        }
        if (local || (stopped_.load(std::memory_order_acquire) && !stop_sent)) {
          // Tell everyone (a rank that saw STOP forwards nothing: it was told by the origin,
          // but sending again is harmless and covers a stop raised here at the same time).
          for (int r = 0; r < size_; ++r)
            if (r != rank_) post_owned(std::vector<std::byte>(1), r, tag_stop);
          stop_sent = true;
          enter_stop();
          busy = true;
        }
      }
      // 2. links
      {
        std::lock_guard lk(ch_m_);
        if (!fin_done && finish_sending_.load(std::memory_order_acquire)) {
          for (const auto& c : channels_)
            if (c->finish_sending()) stop_requested_.store(true, std::memory_order_release);
          fin_done = true;
        }
        for (const auto& c : channels_) busy |= c->progress();
      }
      busy |= complete_owned();
      // 3. profiles: periodic ones to rank 0, which reports them
      const bool finishing = finish_requested_.load(std::memory_order_acquire);
      if (opt_.report_interval.count() > 0 && !finishing && clock::now() >= next_report) {
        next_report += opt_.report_interval;
        std::unique_lock wl(window_m_, std::try_to_lock);  // a run() or finish() ending: skip this one
        if (wl.owns_lock() && window_users_ > 0) {
          if (rank_ == 0) {
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
            post_owned(to_bytes(encode_snapshot(snapshot())), 0, tag_profile);
          }
          periodic_.fetch_add(1, std::memory_order_acq_rel);
        }
      }
      if (rank_ == 0) {
        while (probe(MPI_ANY_SOURCE, tag_profile, st)) {
          const auto b = recv_probed(st, tag_profile);
          const auto r = static_cast<std::size_t>(st.MPI_SOURCE);
          try {
            latest_.ranks[r] = decode_snapshot(reinterpret_cast<const std::uint64_t*>(b.data()), b.size() / 8, names_);
            latest_.heard[r] = true;
          } catch (const std::exception& e) {
            fail("from rank " + std::to_string(r) + ": " + e.what());
          }
          busy = true;
        }
      }
      // 4. the end: FINAL (status + snapshot) once every send of ours completed
      // A stop requested here (a stage that threw just before finish(), ~job's fail()) goes
      // out before FINAL: after FINAL no STOP is sent (see 1.).
      const bool stop_pending = !stop_sent && stop_requested_.load(std::memory_order_acquire);
      if (finishing && !final_sent && !stop_pending) {
        bool quiet = owned_.empty();
        if (quiet) {
          std::lock_guard lk(ch_m_);
          for (const auto& c : channels_) quiet = quiet && c->quiescent();
        }
        if (quiet) {
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
          if (rank_ == 0) {
            if (snap) final_.ranks[0] = std::move(*snap);
            final_.heard[0] = snap.has_value();
            final_.errors[0] = err;
            ++finals;
          } else {
            const auto words = snap ? encode_snapshot(*snap) : std::vector<std::uint64_t>{};
            std::vector<std::byte> b(8 + err.size() + words.size() * 8);
            const std::uint64_t n = err.size();
            std::memcpy(b.data(), &n, 8);
            std::memcpy(b.data() + 8, err.data(), err.size());
            if (!words.empty()) std::memcpy(b.data() + 8 + err.size(), words.data(), words.size() * 8);
            post_owned(std::move(b), 0, tag_final);
          }
          final_sent = true;
          busy = true;
        }
      }
      if (rank_ == 0) {
        while (probe(MPI_ANY_SOURCE, tag_final, st)) {
          const auto b = recv_probed(st, tag_final);
          const auto r = static_cast<std::size_t>(st.MPI_SOURCE);
          ++finals;  // counted whatever it holds: rank r has ended its part
          busy = true;
          std::uint64_t n = 0;
          if (b.size() >= 8) std::memcpy(&n, b.data(), 8);
          if (b.size() < 8 || b.size() - 8 < n || (b.size() - 8 - n) % 8) {
            final_.errors[r] = "malformed FINAL message";
            continue;
          }
          final_.errors[r].assign(reinterpret_cast<const char*>(b.data() + 8), n);
          std::vector<std::uint64_t> w((b.size() - 8 - n) / 8);
          if (w.empty()) continue;  // no snapshot (that rank's ~job finished it)
          std::memcpy(w.data(), b.data() + 8 + n, w.size() * 8);
          try {
            final_.ranks[r] = decode_snapshot(w.data(), w.size(), names_);
            final_.heard[r] = true;
          } catch (const std::exception& e) {
            final_.errors[r] += std::string(final_.errors[r].empty() ? "" : "; ") + e.what();
          }
        }
        if (finals == size_ && !bye_sent) {
          bye_ok_ = std::all_of(final_.errors.begin(), final_.errors.end(), [](const auto& e) { return e.empty(); });
          for (int r = 1; r < size_; ++r) post_owned(std::vector<std::byte>(1, std::byte{bye_ok_}), r, tag_bye);
          bye_sent = true;
        }
        if (bye_sent && owned_.empty()) final_done = true;
      } else if (final_sent && owned_.empty() && probe(0, tag_bye, st)) {
        const auto b = recv_probed(st, tag_bye);
        bye_ok_ = !b.empty() && b[0] != std::byte{0};
        final_done = true;
      }
      if (final_done) return;
      // Idle: yield a while, then sleep until a link hands over work (wake()) or
      // 0.1 ms passed: incoming messages are only seen by polling, so the
      // sleep stays short (a remote STOP waits at most ~0.1 ms here).
      if (busy || wake_.exchange(false, std::memory_order_acq_rel)) {
        idle = 0;
      } else if (++idle > 200) {
        std::unique_lock lk(wake_m_);
        sleeping_.store(true);
        wake_cv_.wait_for(lk, std::chrono::microseconds(100), [&] { return wake_.load(); });
        sleeping_.store(false);
      } else {
        std::this_thread::yield();
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  inline static std::atomic<job*> current_{nullptr};
  bool owns_mpi_ = false, multiple_ = false;
  std::vector<std::string> names_;
  std::function<profile_snapshot()> snap_;
  job_options opt_;
  std::thread thread_;
  bool finished_ = false;
  bool start_collective_done_ = false;
  std::uint64_t key_hash_ = 0;

  std::mutex window_m_;
  int window_users_ = 0;  // run() / finish() calls in progress

  std::mutex ch_m_;
  std::vector<std::shared_ptr<channel>> channels_;
  std::list<owned_send> owned_;  // progress thread only

  std::mutex hook_m_;
  std::function<bool()> cancelled_hook_;
  std::function<void()> stop_hook_;

  std::mutex state_m_;
  std::string error_;
  std::atomic<bool> stop_requested_{false}, stopped_{false}, finish_sending_{false}, finish_requested_{false};
  std::atomic<std::uint64_t> periodic_{0};

  std::mutex wake_m_;
  std::condition_variable wake_cv_;
  std::atomic<bool> wake_{false}, sleeping_{false};

  job_profile latest_, final_;  // progress thread only (final_ read after join)
  bool bye_ok_ = true;
};

}  // namespace dflash::mpi
