#pragma once
// Checks for MPI test programs (one process per rank, no Catch): a failed
// check names the rank, the line and the expression, and is counted; main
// returns rank_failures() so mpirun reports the rank that failed.
#include <cstdio>

namespace dflash_test {

inline int this_rank = -1;  // set once the job knows it
inline int failures = 0;

inline void rank_check(bool ok, int line, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: check failed at line %d: %s\n", this_rank, line, what);
  ++failures;
}

}  // namespace dflash_test

#define RANK_CHECK(cond) ::dflash_test::rank_check(static_cast<bool>(cond), __LINE__, #cond)
