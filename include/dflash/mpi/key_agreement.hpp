#pragma once
// Start-up agreement across the ranks of a job, before its progress thread
// exists: every rank starts, and every rank's profiler has the same key set
// (snapshots cross as bare numbers, so the layouts must match).
//
// agree_to_start() is the one collective every rank makes exactly once: a
// starting rank with its key-set hash, or a rank leaving before start() (its
// job destroyed by an exception or an early return) with its reason. If any
// rank leaves, every starting rank throws naming the ranks that left and why.
// check_key_sets() then compares the hashes, and only when they differ
// gathers the names so that the message can name the first differing key.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/mpi/runtime.hpp"

namespace dflash::mpi {

/// Collective: every rank's string, in rank order.
inline std::vector<std::string> gather_strings(MPI_Comm comm, int size, const std::string& s) {
  const auto n = static_cast<std::size_t>(size);
  const int len = static_cast<int>(s.size());
  std::vector<int> lens(n), offs(n);
  check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm), "MPI_Allgather");
  int total = 0;
  for (std::size_t i = 0; i < n; ++i) offs[i] = std::exchange(total, total + lens[i]);
  std::string every(static_cast<std::size_t>(total), '\0');
  check(MPI_Allgatherv(s.data(), len, MPI_CHAR, every.data(), lens.data(), offs.data(), MPI_CHAR, comm),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (std::size_t r = 0; r < n; ++r)
    out.push_back(every.substr(static_cast<std::size_t>(offs[r]), static_cast<std::size_t>(lens[r])));
  return out;
}

/// What a rank brings to start()'s collective.
struct start_vote {
  bool leaving = false;      ///< this rank's job goes before start()
  std::string reason;        ///< why, when leaving
  std::uint64_t key_hash = 0;  ///< key_set_hash of its profiler, when starting
  bool clocks = false;         ///< its profiler stamps items: the job estimates clock offsets
};

/// What every starting rank learns from start()'s collective.
struct start_agreement {
  std::vector<std::uint64_t> key_hashes;  ///< per rank
  bool clocks = false;                    ///< some rank's profiler stamps items (clock_offset.hpp)
};

/// Collective (see the file comment). Returns every rank's key-set hash (and
/// whether any rank's profiler stamps items) when all start; returns empty on
/// a leaving rank; throws on a starting rank when any rank leaves.
inline start_agreement agree_to_start(MPI_Comm comm, int size, const start_vote& v) {
  constexpr std::size_t words = 3;
  const auto n = static_cast<std::size_t>(size);
  const std::uint64_t mine[words] = {v.leaving ? 1u : 0u, v.leaving ? 0u : v.key_hash, v.clocks ? 1u : 0u};
  std::vector<std::uint64_t> all(words * n);
  check(MPI_Allgather(mine, static_cast<int>(words), MPI_UINT64_T, all.data(), static_cast<int>(words), MPI_UINT64_T, comm),
        "MPI_Allgather");
  bool any = false;
  start_agreement a;
  a.key_hashes.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    any |= all[words * r] != 0;
    a.key_hashes[r] = all[words * r + 1];
    a.clocks |= all[words * r + 2] != 0;
  }
  if (!any) return a;
  const auto why = gather_strings(comm, size, v.leaving ? v.reason : std::string());
  if (v.leaving) return {};
  std::string msg = "dflash::mpi::job::start(): the job cannot start:";
  for (std::size_t r = 0; r < n; ++r)
    if (all[words * r] != 0) msg += " rank " + std::to_string(r) + " left before start(): " + why[r] + ".";
  throw std::runtime_error(msg);
}

/// Collective when the hashes differ (then every rank throws, naming the first
/// differing key of each rank that differs from rank 0); otherwise local.
inline void check_key_sets(MPI_Comm comm, int size, const std::vector<std::string>& names,
                           const std::vector<std::uint64_t>& hashes) {
  if (std::all_of(hashes.begin(), hashes.end(), [&](auto x) { return x == hashes[0]; })) return;
  std::string joined;
  for (const auto& k : names) joined += k + '\n';
  const auto every = gather_strings(comm, size, joined);
  auto split = [&](std::size_t r) {
    std::vector<std::string> v;
    std::string cur;
    for (char c : every[r]) {
      if (c == '\n') v.push_back(std::exchange(cur, {}));
      else cur += c;
    }
    return v;
  };
  const auto ref = split(0);
  std::string msg = "dflash::mpi::job: the ranks' profilers have different key sets (every rank must use the "
                    "same profiler type; use one key set covering every rank's pipeline):";
  for (std::size_t r = 1; r < static_cast<std::size_t>(size); ++r) {
    if (hashes[r] == hashes[0]) continue;
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

}  // namespace dflash::mpi
