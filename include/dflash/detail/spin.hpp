#pragma once
// Spin-then-block helpers shared by the queue and the pipeline's direct
// segments: a short spin wins when the wait is shorter than a futex round trip.

#include <mutex>
#include <thread>

namespace dflash::detail {

/// One step of a spin-wait: the pause hint on x86 (the sibling hyperthread
/// runs on), a yield elsewhere.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

/// Locks `lk`, spinning briefly first: a serial stage's lock is held for one
/// call, and sleeping on it (a futex round trip) costs more than a cheap call.
inline void lock_spinning(std::unique_lock<std::mutex>& lk) {
  for (int i = 0; i < 128; ++i) {
    if (lk.try_lock()) return;
    cpu_relax();
  }
  lk.lock();
}

}  // namespace dflash::detail
