#pragma once
// The links of a dflash::mpi::job (job.hpp): every attached job_link
// (job_link.hpp), the run each belongs to, and the tags they own. The job
// co-owns every link's MPI state (a link destroyed before finish() leaves it
// to the job, which completes its requests).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dflash/mpi/job_link.hpp"
#include "dflash/mpi/job_state.hpp"

namespace dflash::mpi::detail {

class link_registry {
 public:
  /// A link made after a STOP is stopped at once (its blocked calls would
  /// otherwise wait for a stop that was already delivered). A link is told
  /// this rank's end (FIN) when the first run() that ends after it was made
  /// ends, unless its owner ends it itself (own_end: a net_link's pipeline).
  void attach(std::shared_ptr<job_link> c, const job_state& state) {
    std::lock_guard lk(m_);
    for (const auto& o : channels_)
      if (o.link->tag_base() == c->tag_base())
        throw std::invalid_argument("dflash::mpi: two links with the same tags (same name twice, or a hash clash)");
    channels_.push_back({std::move(c), runs_ended_.load(std::memory_order_acquire)});
    // The progress thread marks the job stopped before stop_all() takes m_: it
    // sees this link, or this sees the stop.
    if (state.stopped()) channels_.back().link->on_stop();
  }
  /// Link c's end is told by its owner (mpi_link::close from the producing
  /// stage), never by a run() that ends: a link made while an earlier run was
  /// going on is not ended by that run.
  void own_end(const job_link* c) {
    std::lock_guard lk(m_);
    for (auto& o : channels_)
      if (o.link.get() == c) o.owned = true;
  }
  /// The link goes (its requests are complete, or MPI is about to end).
  void erase(const job_link* c) {
    std::lock_guard lk(m_);
    std::erase_if(channels_, [c](const auto& o) { return o.link.get() == c; });
  }
  void clear() {
    std::lock_guard lk(m_);
    channels_.clear();
  }

  /// A run() of this rank ended normally.
  void end_run() noexcept { runs_ended_.fetch_add(1, std::memory_order_acq_rel); }
  /// The run link c belongs to has ended normally.
  [[nodiscard]] bool ended(const job_link* c) {
    std::lock_guard lk(m_);
    bool ended = false;
    for (const auto& o : channels_)
      if (o.link.get() == c) ended = run_ended(o);
    return ended;
  }

  // ---- the progress thread (with the job's MPI lock) ---------------------------
  /// The job stopped: every link wakes its blocked calls.
  void stop_all() {
    std::lock_guard lk(m_);
    for (const auto& c : channels_) c.link->on_stop();
  }
  /// The links' sends and receives, and FIN once the run a link belongs to
  /// ended normally: the first run() that ends after the link was made (links
  /// whose owner ends them are left to it). A link for which that end is
  /// premature asks state for a stop.
  bool progress(job_state& state) {
    bool busy = false;
    std::lock_guard lk(m_);
    for (auto& c : channels_)
      if (!c.told && !c.owned && run_ended(c)) {
        c.told = true;
        if (c.link->finish_sending()) state.request_stop();
      }
    for (const auto& c : channels_) busy |= c.link->progress();
    return busy;
  }
  /// Some link has MPI requests in flight here.
  [[nodiscard]] bool in_flight() {
    std::lock_guard lk(m_);
    return std::any_of(channels_.begin(), channels_.end(), [](const auto& c) { return c.link->in_flight(); });
  }
  /// Every link's sends completed (job_link::quiescent).
  [[nodiscard]] bool quiescent() {
    std::lock_guard lk(m_);
    for (const auto& c : channels_)
      if (!c.link->quiescent()) return false;
    return true;
  }
  /// A link of this rank uses the tags from `base`.
  [[nodiscard]] bool owns(int base) {
    std::lock_guard lk(m_);
    return std::any_of(channels_.begin(), channels_.end(),
                       [base](const auto& c) { return c.link->tag_base() == base; });
  }
  /// Every rank said FINAL: the links' posted receives can go.
  void retire() {
    std::lock_guard lk(m_);
    for (const auto& c : channels_) c.link->retire();
  }

 private:
  // A link and the run it belongs to: it is told this rank's end (FIN) once
  // runs_ended_ passes `run`, the normal ends counted when it was attached.
  struct attached {
    std::shared_ptr<job_link> link;
    std::uint64_t run = 0;
    bool told = false;   // progress thread only
    bool owned = false;  // ended by its owner, not by a run's end
  };
  [[nodiscard]] bool run_ended(const attached& a) const noexcept {
    return runs_ended_.load(std::memory_order_acquire) > a.run;
  }

  std::mutex m_;
  std::vector<attached> channels_;
  std::atomic<std::uint64_t> runs_ended_{0};  // run() calls whose pipeline ended normally
};

}  // namespace dflash::mpi::detail
