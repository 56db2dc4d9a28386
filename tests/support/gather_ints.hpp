#pragma once
// Every rank's ints, concatenated in rank order at rank 0 (empty elsewhere): how MPI test
// programs bring each rank's account to the one that checks it.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace dflash_test {

inline std::vector<int> gather_ints(const std::vector<int>& mine) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), offs(static_cast<std::size_t>(size));
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < size; ++i) offs[static_cast<std::size_t>(i)] = std::exchange(total, total + counts[static_cast<std::size_t>(i)]);
  std::vector<int> all(static_cast<std::size_t>(std::max(total, 1)));
  MPI_Gatherv(mine.data(), n, MPI_INT, all.data(), counts.data(), offs.data(), MPI_INT, 0, MPI_COMM_WORLD);
  all.resize(static_cast<std::size_t>(total));
  return all;
}

}  // namespace dflash_test
