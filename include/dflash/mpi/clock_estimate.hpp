#pragma once
// One rank's clock against rank 0's, estimated from timed round trips as NTP
// does. Pure arithmetic, no MPI: the exchange that takes the readings is in
// clock_offset.hpp, the job table that reports them in job_profile.hpp.
//
// A round: this rank reads its clock (t0), sends to rank 0, which reads its
// clock on receipt (t1) and before replying (t2); this rank reads t3 when the
// reply arrives. Causality alone bounds this rank's offset (its clock minus
// rank 0's) to [t0 - t1, t3 - t2], whatever the network's asymmetry: the
// bound's half width is half the round trip, (t3 - t0 - (t2 - t1)) / 2. With
// a fixed offset every round's interval holds it, so the estimate is the
// midpoint of their intersection (never wider than the best round's); an
// empty intersection means a clock stepped or went backwards during the
// exchange, and the estimate is then only a guess.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>

namespace dflash::mpi {

/// One rank's profiler clock against rank 0's.
struct clock_estimate {
  std::int64_t offset_ns = 0;  ///< this rank's clock minus rank 0's
  std::int64_t error_ns = 0;   ///< the true offset lies within offset_ns ± error_ns (when ok)
  bool ok = true;              ///< false: offset_ns is a guess; `why` says why
  std::string why;
};

/// One timed round trip: t0, t3 on this rank's clock, t1, t2 on rank 0's.
struct clock_round {
  std::int64_t t0 = 0, t1 = 0, t2 = 0, t3 = 0;
};

namespace detail {
inline std::string micros(std::int64_t ns) {
  char b[40];
  std::snprintf(b, sizeof b, "%.1f us", static_cast<double>(ns) / 1e3);
  return b;
}
}  // namespace detail

/// The offset from a set of rounds (see the file comment). Not ok when no
/// round is usable (a clock read backwards within it), when the rounds
/// contradict each other (no offset fits them all), or when the bound is
/// wider than max_error_ns (the exchange was too slow to say much).
inline clock_estimate estimate_clock_offset(std::span<const clock_round> rounds, std::int64_t max_error_ns) {
  clock_estimate e;
  std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  std::int64_t best_rtt = std::numeric_limits<std::int64_t>::max(), best_mid = 0;
  std::size_t usable = 0, backwards = 0;
  for (const auto& r : rounds) {
    const std::int64_t rtt = (r.t3 - r.t0) - (r.t2 - r.t1);
    if (r.t3 < r.t0 || r.t2 < r.t1 || rtt < 0) {  // a clock went backwards, or ran faster than the other one
      ++backwards;
      continue;
    }
    ++usable;
    lo = std::max(lo, r.t0 - r.t1);
    hi = std::min(hi, r.t3 - r.t2);
    if (rtt < best_rtt) {
      best_rtt = rtt;
      best_mid = (r.t0 - r.t1) + ((r.t3 - r.t2) - (r.t0 - r.t1)) / 2;
    }
  }
  const std::string of = " (" + std::to_string(rounds.size()) + " round trips)";
  if (usable == 0) {
    e.ok = false;
    e.why = rounds.empty() ? "no round trip was made" : "a clock read backwards in every round trip" + of;
    return e;
  }
  if (lo > hi) {
    e.ok = false;
    e.offset_ns = best_mid;
    e.error_ns = best_rtt / 2;
    e.why = "the round trips contradict each other (a clock stepped or went backwards during the exchange): "
            "the offset lies in none of their common bounds" + of;
    return e;
  }
  e.offset_ns = lo + (hi - lo) / 2;
  e.error_ns = (hi - lo + 1) / 2;
  if (backwards > 0) {
    e.ok = false;
    e.why = "a clock read backwards in " + std::to_string(backwards) + " of the round trips" + of;
  } else if (e.error_ns > max_error_ns) {
    e.ok = false;
    e.why = "the round trips were too slow: the bound ±" + detail::micros(e.error_ns) + " is over the limit ±" +
            detail::micros(max_error_ns);
  }
  return e;
}

}  // namespace dflash::mpi
