#pragma once
// pipeline_layout: a pipeline's shape as plain run-time data — its stages (name,
// workers, device or host, in_order) and the links between them (name, kind,
// depth). Pipeline::layout() fills it from the compile-time topology and the
// run-time shape; the analysis (bottleneck.hpp, what_if.hpp) reads nothing
// else about the pipeline, so it can be built by hand in tests, from a config
// file or from an MPI rank's pipeline.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dflash::analysis {

enum class link_kind {
  queue,   ///< bounded_queue: `depth` items wait between the stages
  device,  ///< device_link: `depth` slots, each held from the producer's call until the consumer's call ends
  direct,  ///< direct_link: the consumer runs on the producer's threads (no queue)
  rows,    ///< device_queue_link: rows of several items share a batch; no model (the analysis refuses)
};

inline constexpr std::string_view to_string(link_kind k) noexcept {
  return k == link_kind::queue    ? "queue"
         : k == link_kind::device ? "device"
         : k == link_kind::direct ? "direct"
                                  : "rows";
}

struct stage_layout {
  std::string name;
  std::size_t workers = 1;
  bool device = false;    ///< next to a device_link: records <name>.gpu
  bool in_order = false;  ///< exactly one worker, items in source order
};

struct link_layout {
  std::string name;
  link_kind kind = link_kind::queue;
  std::size_t depth = 1;
};

struct pipeline_layout {
  std::vector<stage_layout> stages;  ///< source first, sink last
  std::vector<link_layout> links;    ///< links[i] joins stages[i] and stages[i + 1]
  /// Device work runs on host cores (the host twin backend): it competes with
  /// the host stages for CPU. False with a real GPU.
  bool device_work_on_cpu = false;

  /// Index of the stage or link with this name, or npos.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  [[nodiscard]] std::size_t stage_index(std::string_view n) const noexcept {
    for (std::size_t i = 0; i < stages.size(); ++i)
      if (stages[i].name == n) return i;
    return npos;
  }
  [[nodiscard]] std::size_t link_index(std::string_view n) const noexcept {
    for (std::size_t i = 0; i < links.size(); ++i)
      if (links[i].name == n) return i;
    return npos;
  }
  [[nodiscard]] bool well_formed() const noexcept {
    if (stages.size() < 2 || links.size() + 1 != stages.size()) return false;
    for (const auto& s : stages)
      if (s.workers == 0 || s.name.empty()) return false;
    for (const auto& l : links)
      if (l.depth == 0 || l.name.empty()) return false;
    return true;
  }
};

}  // namespace dflash::analysis
