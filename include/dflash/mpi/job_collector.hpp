#pragma once
// The profile of a dflash::mpi::job (job.hpp): this rank's snapshots of the
// profiler given to start(), and on rank 0 every rank's latest periodic and
// final snapshot and error (job_profile.hpp), what finish() returns there.
//
// The profiler is snapshotted (and on_report called) only while a window is
// open: while a run() or an explicit finish() is in progress, when the
// caller's scope, profiler included, is alive.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/mpi/control_messages.hpp"
#include "dflash/mpi/job_profile.hpp"
#include "dflash/mpi/job_state.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash::mpi::detail {

class profile_collector {
 public:
  explicit profile_collector(job_state& state) : state_(state) {}

  /// How to snapshot the profiler given to start() (none: no profiler).
  void snapshot_with(std::function<profile_snapshot()> snap) { snap_ = std::move(snap); }
  /// Before the progress thread starts: the agreed key names, the report
  /// interval and rank 0's callback (none: print format_job_table to
  /// stdout), every rank's clock estimate.
  void begin(std::vector<std::string> names, std::size_t ranks, std::chrono::milliseconds interval,
             std::function<void(const job_profile&)> on_report, std::vector<clock_estimate> clocks) {
    names_ = std::move(names);
    interval_ = interval;
    on_report_ = std::move(on_report);
    if (!on_report_) on_report_ = [](const job_profile& j) {
      std::fputs(format_job_table(j).c_str(), stdout);
      std::fflush(stdout);
    };
    latest_.ranks.assign(ranks, {});
    latest_.heard.assign(ranks, false);
    latest_.errors.assign(ranks, {});
    latest_.clocks = std::move(clocks);
    final_ = latest_;
  }

  // While one exists, the progress thread may snapshot the profiler and call on_report.
  class window {
   public:
    explicit window(profile_collector& c) : c_(c) {
      std::lock_guard lk(c_.window_m_);
      ++c_.window_users_;
    }
    ~window() {
      std::lock_guard lk(c_.window_m_);  // waits for a snapshot or report in progress
      --c_.window_users_;
    }
    window(const window&) = delete;
    window& operator=(const window&) = delete;

   private:
    profile_collector& c_;
  };

  [[nodiscard]] std::chrono::milliseconds interval() const noexcept { return interval_; }
  /// Periodic snapshots this rank has sent to rank 0 (rank 0: reports made).
  [[nodiscard]] std::uint64_t periodic_reports() const noexcept { return periodic_.load(std::memory_order_acquire); }

  // ---- the progress thread --------------------------------------------------
  /// A periodic snapshot, if a window is open: rank 0 reports its own and the
  /// latest of the others (an exception from on_report fails the job); other
  /// ranks send(words) theirs to rank 0.
  template <class Send>
  void periodic(int rank, Send&& send) {
    std::unique_lock wl(window_m_, std::try_to_lock);  // a run() or finish() ending: skip this one
    if (!wl.owns_lock() || window_users_ == 0) return;
    if (rank == 0) {
      latest_.ranks[0] = snapshot();
      latest_.heard[0] = true;
      try {
        on_report_(latest_);
      } catch (const std::exception& e) {
        state_.fail(std::string("job_options::on_report threw: ") + e.what());
      } catch (...) {
        state_.fail("job_options::on_report threw");
      }
    } else {
      send(encode_snapshot(snapshot()));
    }
    periodic_.fetch_add(1, std::memory_order_acq_rel);
  }
  /// Rank 0: rank r's periodic snapshot (throws if it does not decode).
  void latest_from(std::size_t r, const std::vector<std::uint64_t>& words) {
    latest_.ranks[r] = decode_snapshot(words.data(), words.size(), names_);
    latest_.heard[r] = true;
  }
  /// The final snapshot, only from an explicit finish(): in ~job the profiler may be gone.
  [[nodiscard]] std::optional<profile_snapshot> final_snapshot() {
    std::lock_guard wl(window_m_);
    if (window_users_ > 0) return snapshot();
    return std::nullopt;
  }
  /// Rank 0: its own FINAL.
  void own_final(std::optional<profile_snapshot> snap, std::string error) {
    if (snap) final_.ranks[0] = std::move(*snap);
    final_.heard[0] = snap.has_value();
    final_.errors[0] = std::move(error);
  }
  /// Rank 0: rank r's FINAL, or (null) one that did not decode.
  void final_from(std::size_t r, const final_message* f) {
    if (!f) {
      final_.errors[r] = "malformed FINAL message";
      return;
    }
    final_.errors[r].assign(f->error.begin(), f->error.end());
    if (f->snapshot.empty()) return;  // no snapshot (that rank's ~job finished it)
    try {
      final_.ranks[r] = decode_snapshot(f->snapshot.data(), f->snapshot.size(), names_);
      final_.heard[r] = true;
    } catch (const std::exception& e) {
      final_.errors[r] += std::string(final_.errors[r].empty() ? "" : "; ") + e.what();
    }
  }
  /// Rank 0: no rank's FINAL carried an error.
  [[nodiscard]] bool clean() const {
    return std::all_of(final_.errors.begin(), final_.errors.end(), [](const auto& e) { return e.empty(); });
  }

  // ---- after the progress thread ended ---------------------------------------
  /// Rank 0: every failed rank's error, "rank i: ..." joined by "; ".
  [[nodiscard]] std::string errors() const {
    std::string out;
    for (std::size_t i = 0; i < final_.errors.size(); ++i)
      if (!final_.errors[i].empty())
        out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(i) + ": " + final_.errors[i];
    return out;
  }
  [[nodiscard]] job_profile take_final() { return std::move(final_); }

 private:
  // Only with window_m_ held and a window open.
  profile_snapshot snapshot() const {
    if (snap_) return snap_();
    return {};
  }

  job_state& state_;
  std::function<profile_snapshot()> snap_;
  std::vector<std::string> names_;
  std::chrono::milliseconds interval_{0};
  std::function<void(const job_profile&)> on_report_;
  std::mutex window_m_;
  int window_users_ = 0;  // run() / finish() calls in progress
  std::atomic<std::uint64_t> periodic_{0};
  job_profile latest_, final_;  // progress thread only (final_ read after join)
};

}  // namespace dflash::mpi::detail
