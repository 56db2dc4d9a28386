#pragma once
// What a dflash::mpi::job (job.hpp) takes at start() and returns from finish().

#include <functional>
#include <optional>
#include <string>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/mpi/clock_offset.hpp"
#include "dflash/mpi/job_profile.hpp"

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
  /// A stop ended the job's run early on some rank — a user's stop() (drain or
  /// cancel), a stage's dflash::pipeline_stop, or a failure — so items may
  /// have been left untaken: ok && !stopped_early is a complete run. The same
  /// on every rank.
  bool stopped_early = false;
  std::string error;          ///< rank 0: every failed rank's error; others: their own
  std::optional<job_profile> profile;  ///< rank 0 only: every rank's final snapshot
};

namespace detail {
// Why start() refuses opt (empty: it does not).
inline std::string invalid_options(const job_options& opt) {
  if (opt.report_interval.count() < 0) return "job_options::report_interval must not be negative";
  if (opt.clock.rounds < 1) return "job_options::clock.rounds must be at least 1";
  if (opt.clock.max_error.count() < 0) return "job_options::clock.max_error must not be negative";
  return {};
}
}  // namespace detail

}  // namespace dflash::mpi
