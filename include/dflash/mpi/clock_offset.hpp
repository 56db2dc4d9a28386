#pragma once
// The start-up clock exchange of a profiled MPI job: every rank learns every
// rank's profiler-clock offset to rank 0 (clock_estimate.hpp), so that a flow
// stamp taken on one rank's clock can be read on another's. A net_link's
// receiving side converts each stamp with the offsets of its producer rank
// and its own (clock_offsets::to_local), so "<stage>.age" after a net_link is
// an age, not the difference between two processes' clocks.
//
// exchange_clock_offsets() is collective, made by job::start() before the
// progress thread exists, and only when some rank's profiler stamps items:
// rank 0 serves each other rank in turn (a zero-byte "your turn", then that
// rank's round trips), then every rank's estimate is allgathered.

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/mpi/clock_estimate.hpp"
#include "dflash/mpi/control_messages.hpp"
#include "dflash/mpi/key_agreement.hpp"
#include "dflash/mpi/runtime.hpp"

namespace dflash::mpi {

struct clock_offset_options {
  int rounds = 16;  ///< round trips per rank; the estimate uses them all
  /// An estimate whose bound is wider than this is reported as failed
  /// (ages after a net_link are then marked as estimates).
  std::chrono::nanoseconds max_error = std::chrono::milliseconds(1);
};

/// Every rank's offset to rank 0, and the conversion a receiving rank makes.
struct clock_offsets {
  std::vector<clock_estimate> ranks;  ///< by rank; empty when no exchange was made
  int me = 0;

  /// A time `t_ns` read on rank `from`'s clock, on this rank's clock.
  [[nodiscard]] std::int64_t to_local(std::int64_t t_ns, int from) const noexcept {
    const auto f = static_cast<std::size_t>(from), m = static_cast<std::size_t>(me);
    if (from < 0 || f >= ranks.size() || m >= ranks.size()) return t_ns;
    return t_ns - ranks[f].offset_ns + ranks[m].offset_ns;
  }
};

/// Collective (see the file comment). `now` reads this rank's profiler clock in ns.
inline clock_offsets exchange_clock_offsets(MPI_Comm comm, int rank, int size, const std::function<std::int64_t()>& now,
                                            const clock_offset_options& opt = {}) {
  const int k = opt.rounds > 0 ? opt.rounds : 1;
  clock_estimate mine;
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      check(MPI_Send(nullptr, 0, MPI_BYTE, r, tag_clock, comm), "MPI_Send");
      for (int i = 0; i < k; ++i) {
        check(MPI_Recv(nullptr, 0, MPI_BYTE, r, tag_clock, comm, MPI_STATUS_IGNORE), "MPI_Recv");
        std::array<std::int64_t, 2> t{};
        t[0] = now();
        t[1] = now();
        check(MPI_Send(t.data(), 2, MPI_INT64_T, r, tag_clock, comm), "MPI_Send");
      }
    }
  } else {
    check(MPI_Recv(nullptr, 0, MPI_BYTE, 0, tag_clock, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    std::vector<clock_round> rounds(static_cast<std::size_t>(k));
    for (auto& r : rounds) {
      std::array<std::int64_t, 2> t{};
      r.t0 = now();
      check(MPI_Send(nullptr, 0, MPI_BYTE, 0, tag_clock, comm), "MPI_Send");
      check(MPI_Recv(t.data(), 2, MPI_INT64_T, 0, tag_clock, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      r.t3 = now();
      r.t1 = t[0];
      r.t2 = t[1];
    }
    mine = estimate_clock_offset(rounds, opt.max_error.count());
  }
  const auto n = static_cast<std::size_t>(size);
  const std::array<std::int64_t, 3> w{mine.offset_ns, mine.error_ns, mine.ok ? 1 : 0};
  std::vector<std::int64_t> all(3 * n);
  check(MPI_Allgather(w.data(), 3, MPI_INT64_T, all.data(), 3, MPI_INT64_T, comm), "MPI_Allgather");
  clock_offsets out;
  out.me = rank;
  out.ranks.resize(n);
  bool any_failed = false;
  for (std::size_t r = 0; r < n; ++r) {
    out.ranks[r].offset_ns = all[3 * r];
    out.ranks[r].error_ns = all[3 * r + 1];
    out.ranks[r].ok = all[3 * r + 2] != 0;
    any_failed |= !out.ranks[r].ok;
  }
  if (any_failed) {  // collective too: every rank saw the same flags
    const auto why = gather_strings(comm, size, mine.why);
    for (std::size_t r = 0; r < n; ++r) out.ranks[r].why = why[r];
  }
  return out;
}

}  // namespace dflash::mpi
