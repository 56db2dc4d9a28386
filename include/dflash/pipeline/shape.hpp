#pragma once
// dflash::pipeline_shape: the run-time sizes and placement of a pipeline —
// threads per stage, depth per link, and which processes run which stages.
// Pipeline::default_shape() fills it from the compile-time workers<S, N> and
// link depths; checks.hpp validates it before anything is made.

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace dflash {

template <std::size_t Stages, std::size_t Links>
struct pipeline_shape {
  std::array<std::size_t, Stages> workers{};
  std::array<std::size_t, Links> depths{};
  /// Placement over processes (MPI ranks): the ranks that run stage I, or
  /// empty for "every process runs it" (a single-process pipeline). A link
  /// between a stage that runs here and one that does not must be a link kind
  /// that crosses processes (dflash::mpi::net_link).
  std::array<std::vector<int>, Stages> ranks{};
  /// This process's rank in `ranks`.
  int rank = 0;

  /// Stage I runs in this process.
  [[nodiscard]] bool here(std::size_t i) const noexcept {
    return ranks[i].empty() || std::find(ranks[i].begin(), ranks[i].end(), rank) != ranks[i].end();
  }
};

}  // namespace dflash
