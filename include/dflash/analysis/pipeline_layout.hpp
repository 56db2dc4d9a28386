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

/// How the analysis holds items between two stages.
enum class model_kind {
  queue,   ///< `depth` items wait between the stages (bounded_queue, net_link's credits)
  device,  ///< `depth` slots, each held from the producer's call until the consumer's call ends
  direct,  ///< the consumer runs on the producer's threads (no queue)
};

inline constexpr std::string_view to_string(model_kind k) noexcept {
  return k == model_kind::queue ? "queue" : k == model_kind::device ? "device" : "direct";
}

/// What a link kind's model() is told about one link of a pipeline.
struct link_facts {
  std::size_t depth = 1;               ///< the shape's depth of the link
  std::size_t producer_processes = 0;  ///< ranks its producer stage runs on (0: this process only)
  std::size_t consumer_processes = 0;
};

/// A link kind's answer to "how does the analysis model you" (PipelineLink's
/// optional `model(link_facts)`). A kind that cannot be modelled says why
/// (none(...)); a kind that does not answer gets none as well: the what-if
/// analysis then refuses to predict, naming the link, instead of modelling it
/// as something it is not.
struct link_model {
  model_kind kind = model_kind::queue;
  std::size_t depth = 1;      ///< items (or slots) the link holds between the stages
  std::size_t items_out = 1;  ///< items_out leave for every items_in that enter
  std::size_t items_in = 1;
  bool crosses_processes = false;
  std::string_view no_model{};  ///< non-empty: not modelled, and why

  [[nodiscard]] static constexpr link_model none(std::string_view why) noexcept {
    link_model m;
    m.no_model = why;
    return m;
  }
  [[nodiscard]] constexpr bool modelled() const noexcept { return no_model.empty(); }
};

struct stage_layout {
  std::string name;
  std::size_t workers = 1;
  bool device = false;    ///< next to a device_link: records <name>.gpu
  bool in_order = false;  ///< exactly one worker, items in source order
};

struct link_layout {
  std::string name;
  model_kind kind = model_kind::queue;
  std::size_t depth = 1;
  std::size_t items_out = 1;  ///< items leaving per items_in entering (1 / 1: each item once)
  std::size_t items_in = 1;
  bool crosses_processes = false;
  std::string no_model{};  ///< non-empty: the link kind has no model, and why (what_if refuses)
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
      if (l.depth == 0 || l.name.empty() || l.items_in == 0) return false;
    return true;
  }
};

}  // namespace dflash::analysis
