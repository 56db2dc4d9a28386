#pragma once
// A discrete-event simulation of a pipeline as a tandem of multi-server
// stations with finite buffers — the model behind the what-if predictions.
//
// * Stage j has `workers` servers; each draws its per-item time from a
//   service_distribution. The source has `items` items; the run ends when the
//   sink has finished all of them (so start-up and drain count, as in a real run).
// * A queue link of depth K holds up to K waiting items. A server that finishes
//   while its output queue is full keeps the item and blocks (blocking after
//   service: a pipeline worker blocks in push()).
// * A device link of depth K is K slots: a producer takes a slot before its call
//   and the slot comes back when the consumer's call ends (device_channel's
//   acquire / release), so at most K items are in the producer's call, waiting,
//   or in the consumer's call.
// * A direct link is modelled as a queue of its depth (an approximation: the
//   next stage really runs on the producer's threads).
// * CPU as a shared resource: a stage that uses the CPU needs its service time
//   in CPU time; all such items in service share `cores` cores equally
//   (processor sharing: each progresses at min(1, cores / n) with n of them
//   running), as threads do under a fair scheduler. Work that is not on a CPU
//   (a GPU kernel) just takes its time. cores = 0: unlimited.
//
// Seeded and deterministic: the same model, items and seed give the same result.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/analysis/service_distribution.hpp"

namespace dflash::analysis {

struct sim_stage {
  std::size_t workers = 1;
  service_distribution service;
  bool uses_cpu = true;
};

struct sim_link {
  model_kind kind = model_kind::queue;
  std::size_t depth = 1;
};

struct sim_model {
  std::vector<sim_stage> stages;
  std::vector<sim_link> links;  ///< links[j] joins stages[j] and stages[j + 1]
  double cores = 0;             ///< CPU cores shared by the stages that use the CPU; 0 = unlimited
};

struct sim_options {
  std::uint64_t items = 1000;    ///< items the source produces per replication
  std::uint64_t seed = 1;
  unsigned replications = 1;     ///< independent runs (seeds seed, seed + 1, ...), pooled
};

struct sim_result {
  double items_per_s = 0;   ///< items finished by the sink / simulated time, over all replications
  double seconds = 0;       ///< simulated time of all replications
  std::uint64_t items = 0;
  /// Per stage, as a fraction of workers x time: in service, holding a finished item (blocked), idle.
  std::vector<double> busy, blocked, idle;
};

namespace detail {
class tandem_run {
 public:
  tandem_run(const sim_model& m, std::uint64_t items, std::uint64_t seed) : m_(m), n_(m.stages.size()), rng_(seed) {
    total_ = items;
    servers_.resize(n_);
    for (std::size_t j = 0; j < n_; ++j) servers_[j].resize(m.stages[j].workers);
    buffered_.assign(n_, 0);
    slots_used_.assign(n_, 0);
    busy_.assign(n_, 0);
    blocked_.assign(n_, 0);
  }

  double run() {
    progress();
    while (done_ < total_) {
      // The next completion: CPU items progress at `rate`, others end at their time.
      std::size_t n_cpu = 0;
      for (const auto& st : servers_)
        for (const auto& s : st)
          if (s.state == busy && s.cpu) ++n_cpu;
      const double rate = (m_.cores <= 0 || static_cast<double>(n_cpu) <= m_.cores) ? 1.0 : m_.cores / static_cast<double>(n_cpu);
      double dt = std::numeric_limits<double>::infinity();
      for (const auto& st : servers_)
        for (const auto& s : st)
          if (s.state == busy) dt = std::min(dt, s.cpu ? s.left / rate : s.left);
      if (!(dt < std::numeric_limits<double>::infinity()))
        throw std::logic_error("dflash::analysis::simulate: the model is stuck (no item in service, sink unfinished)");
      dt = std::max(dt, 0.0);
      for (std::size_t j = 0; j < n_; ++j) {
        for (auto& s : servers_[j]) {
          if (s.state == busy) {
            busy_[j] += dt;
            s.left -= s.cpu ? dt * rate : dt;
          } else if (s.state == held) {
            blocked_[j] += dt;
          }
        }
      }
      now_ += dt;
      // Finish every item whose time is up (ties finish together), downstream first.
      for (std::size_t j = n_; j-- > 0;)
        for (auto& s : servers_[j])
          if (s.state == busy && s.left <= 1e-9 * std::max(1.0, now_)) finish(j, s);
      progress();
    }
    return now_;
  }

  const std::vector<double>& busy_time() const noexcept { return busy_; }
  const std::vector<double>& blocked_time() const noexcept { return blocked_; }

 private:
  enum state_t : unsigned char { idle, busy, held };
  struct server {
    state_t state = idle;
    bool cpu = false;
    bool holds_slot = false;  // took a slot of its input device link's item
    double left = 0;          // CPU time still needed, or wall time for non-CPU work
  };

  void finish(std::size_t j, server& s) {
    if (s.holds_slot) --slots_used_[j - 1];  // the consumer's call ended: the slot goes back
    s.holds_slot = false;
    if (j + 1 == n_) {
      ++done_;
      s.state = idle;
    } else if (m_.links[j].kind == model_kind::device || buffered_[j] < m_.links[j].depth) {
      ++buffered_[j];  // a device link's item already holds its slot
      s.state = idle;
    } else {
      s.state = held;  // blocked after service until the queue has room
    }
  }

  bool can_start(std::size_t j) const noexcept {
    const bool input = j == 0 ? issued_ < total_ : buffered_[j - 1] > 0;
    const bool slot = j + 1 == n_ || m_.links[j].kind != model_kind::device || slots_used_[j] < m_.links[j].depth;
    return input && slot;
  }

  void start(std::size_t j, server& s) {
    if (j == 0) ++issued_;
    else --buffered_[j - 1];
    if (j + 1 < n_ && m_.links[j].kind == model_kind::device) ++slots_used_[j];
    s.holds_slot = j > 0 && m_.links[j - 1].kind == model_kind::device;
    s.cpu = m_.stages[j].uses_cpu && m_.cores > 0;
    s.left = m_.stages[j].service.sample(rng_);
    s.state = busy;
  }

  // Unblock and start until nothing changes, downstream first so room propagates upstream.
  void progress() {
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t j = n_; j-- > 0;) {
        for (auto& s : servers_[j]) {
          if (s.state == held && buffered_[j] < m_.links[j].depth) {
            ++buffered_[j];
            s.state = idle;
            changed = true;
          }
        }
        for (auto& s : servers_[j]) {
          if (s.state == idle && can_start(j)) {
            start(j, s);
            changed = true;
          }
        }
      }
    }
  }

  const sim_model& m_;
  std::size_t n_;
  sim_rng rng_;
  std::vector<std::vector<server>> servers_;
  std::vector<std::size_t> buffered_, slots_used_;
  std::vector<double> busy_, blocked_;
  std::uint64_t total_ = 0, issued_ = 0, done_ = 0;
  double now_ = 0;
};
}  // namespace detail

/// Simulates `opt.items` items through the model, `opt.replications` times.
/// Throws std::invalid_argument for a malformed model (no stages, a link count
/// that does not match, zero workers or depth, a stage with no service time).
inline sim_result simulate(const sim_model& m, const sim_options& opt = {}) {
  if (m.stages.size() < 2 || m.links.size() + 1 != m.stages.size())
    throw std::invalid_argument("dflash::analysis::simulate: a model needs at least two stages and one link between each pair");
  for (const auto& s : m.stages)
    if (s.workers == 0 || s.service.empty())
      throw std::invalid_argument("dflash::analysis::simulate: every stage needs at least one worker and a service time");
  for (const auto& l : m.links)
    if (l.depth == 0) throw std::invalid_argument("dflash::analysis::simulate: every link needs a depth of at least 1");
  if (opt.items == 0 || opt.replications == 0)
    throw std::invalid_argument("dflash::analysis::simulate: items and replications must be at least 1");
  sim_result r;
  const std::size_t n = m.stages.size();
  std::vector<double> busy(n, 0), blocked(n, 0);
  double ns = 0;
  for (unsigned k = 0; k < opt.replications; ++k) {
    detail::tandem_run run(m, opt.items, opt.seed + k);
    ns += run.run();
    for (std::size_t j = 0; j < n; ++j) {
      busy[j] += run.busy_time()[j];
      blocked[j] += run.blocked_time()[j];
    }
  }
  r.items = opt.items * opt.replications;
  r.seconds = ns / 1e9;
  r.items_per_s = ns > 0 ? static_cast<double>(r.items) / r.seconds : 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double cap = ns * static_cast<double>(m.stages[j].workers);
    r.busy.push_back(cap > 0 ? busy[j] / cap : 0);
    r.blocked.push_back(cap > 0 ? blocked[j] / cap : 0);
    r.idle.push_back(std::max(0.0, 1.0 - r.busy.back() - r.blocked.back()));
  }
  return r;
}

}  // namespace dflash::analysis
