#pragma once
// dflash::pipeline_shape: the run-time sizes and placement of a pipeline —
// threads per stage, depth per link (and the row sizes of a rows link),
// which processes run which stages, and which devices a device stage's
// workers use.
// Pipeline::default_shape() fills it from the compile-time workers<S, N> and
// link depths; checks.hpp validates it before anything is made.

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace dflash {

/// The run-time row sizes of a link that carries rows (dflash::device_queue_link):
/// 0 keeps the kind's compile-time value. Other kinds take none (all 0).
struct row_sizes {
  std::size_t max_per_push = 0;  ///< the most rows one producer call pushes (MaxRowsPerPush)
  std::size_t batch = 0;         ///< the most rows one consumer call gets (BatchRows)
  std::size_t width = 0;         ///< payload elements per row (device_rows<Row, B, Elem>, Elem not void: required)
  friend bool operator==(const row_sizes&, const row_sizes&) = default;
};

template <std::size_t Stages, std::size_t Links>
struct pipeline_shape {
  std::array<std::size_t, Stages> workers{};
  std::array<std::size_t, Links> depths{};
  /// Row sizes per link, for a link that carries rows (its depth is then its
  /// capacity in rows); {} elsewhere.
  std::array<row_sizes, Links> rows{};
  /// Placement over processes (MPI ranks): the ranks that run stage I, or
  /// empty for "every process runs it" (a single-process pipeline). A link
  /// between a stage that runs here and one that does not must be a link kind
  /// that crosses processes (dflash::mpi::net_link).
  std::array<std::vector<int>, Stages> ranks{};
  /// This process's rank in `ranks`.
  int rank = 0;
  /// Placement over devices: worker w of device stage I runs on
  /// devices[I][w % size] (its stream, events and memory are that device's);
  /// empty = the device current on the thread that calls run() (device 0
  /// unless the program chose another). Checked at run(), when the backend's
  /// device count is known; only device stages (next to a device_link) may have devices.
  std::array<std::vector<int>, Stages> devices{};

  /// The device of worker w of stage I, or -1 for "the current one at run()".
  [[nodiscard]] int device_of(std::size_t i, std::size_t w) const noexcept {
    return devices[i].empty() ? -1 : devices[i][w % devices[i].size()];
  }

  /// Stage I runs in this process.
  [[nodiscard]] bool here(std::size_t i) const noexcept {
    return ranks[i].empty() || std::find(ranks[i].begin(), ranks[i].end(), rank) != ranks[i].end();
  }
};

}  // namespace dflash
