#pragma once
// An asymmetric memory barrier: a free light side for the hot path and a heavy
// side for the rare one (as folly's asymmetricLightBarrier/HeavyBarrier and
// liburcu do). Between a light barrier on thread A and a heavy barrier on
// thread B the pair acts as a full (StoreLoad) fence: a store A made before its
// light barrier is visible to loads B makes after its heavy barrier, or else A's
// loads after its light barrier see B's stores before the heavy one.
//
// On Linux the heavy side is membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED),
// which makes every running thread of the process execute a full fence; the
// light side is then only a compiler barrier. Where membarrier is missing or
// refused, both sides fall back to a seq_cst fence (correct, slower hot path).

#include <atomic>

#include "dflash/detail/os.hpp"  // membarrier's numbers, without <unistd.h> in users' code

namespace dflash::detail {

#if defined(__SANITIZE_THREAD__)
#define DFLASH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DFLASH_TSAN 1
#endif
#endif

/// A full fence. TSan does not model atomic_thread_fence (g++ rejects it under
/// -fsanitize=thread), so there it is a seq_cst RMW on a dummy word (a full
/// fence on x86 too, and one TSan understands).
inline void full_fence() noexcept {
#ifdef DFLASH_TSAN
  static std::atomic<int> dummy{0};
  dummy.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

struct asymmetric_barrier_state {
  static bool register_once() noexcept {
#if DFLASH_HAS_MEMBARRIER
    const long q = os::syscall(os::nr_membarrier, os::membarrier_cmd_query, 0, 0);
    if (q < 0 || !(q & os::membarrier_cmd_private_expedited)) return false;
    return os::syscall(os::nr_membarrier, os::membarrier_cmd_register_private_expedited, 0, 0) == 0;
#else
    return false;
#endif
  }
  /// Whether membarrier is registered. A function-local static, so a profiler
  /// constructed during static initialisation still sees it initialised.
  static bool fast() noexcept {
    static const bool f = register_once();
    return f;
  }
};

/// Hot side: a compiler barrier when membarrier works, else a full fence.
inline void light_barrier() noexcept {
  if (asymmetric_barrier_state::fast()) [[likely]]
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    full_fence();
}

/// Rare side: every thread of the process passes a full fence before it returns.
inline void heavy_barrier() noexcept {
#if DFLASH_HAS_MEMBARRIER
  if (asymmetric_barrier_state::fast() &&
      os::syscall(os::nr_membarrier, os::membarrier_cmd_private_expedited, 0, 0) == 0)
    return;
#endif
  // Without membarrier the light side is a full fence too: this pairs with it.
  full_fence();
}

}  // namespace dflash::detail
