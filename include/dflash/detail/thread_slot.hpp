#pragma once
// detail::thread_slot: a small exclusive index per live thread (profiler shards).

#include <atomic>
#include <bit>
#include <cstdint>

namespace dflash::detail {

/// The calling thread's slot: the lowest slot no live thread holds, claimed at
/// the thread's first record and released when it exits. So up to `Shards`
/// concurrent threads never share a shard, however many threads come and go
/// (a round-robin counter would collide once thread ids wrap).
class thread_slot {
 public:
  static constexpr unsigned slots = 64;
  /// The calling thread's exclusive slot in [0, slots), or `slots` if none is free.
  static unsigned get() noexcept {
    const unsigned c = cached;  // constant-initialised TLS: no init guard on the hot path
    return c != unclaimed ? c : claim();
  }

 private:
  static constexpr unsigned unclaimed = ~0u;
  static inline thread_local unsigned cached = unclaimed;
  [[gnu::noinline]] static unsigned claim() noexcept {
    thread_local const thread_slot mine;  // released by its destructor at thread exit
    cached = mine.index_;
    return mine.index_;
  }
  static std::atomic<std::uint64_t>& used() noexcept {
    static std::atomic<std::uint64_t> mask{0};
    return mask;
  }
  thread_slot() noexcept {
    auto& m = used();
    for (auto cur = m.load(std::memory_order_relaxed); ~cur != 0;) {
      const unsigned i = static_cast<unsigned>(std::countr_one(cur));
      // acquire/release: a thread taking a freed slot sees its last owner's writes.
      if (m.compare_exchange_weak(cur, cur | (std::uint64_t{1} << i), std::memory_order_acquire,
                                  std::memory_order_relaxed)) {
        index_ = i;
        return;
      }
    }
    index_ = slots;  // more than 64 live recording threads: no exclusive slot
  }
  ~thread_slot() {
    // A thread_local destroyed after ours may still record: it then uses the
    // overflow shard rather than a slot another thread may own by now.
    cached = slots;
    if (index_ < slots) used().fetch_and(~(std::uint64_t{1} << index_), std::memory_order_release);
  }
  unsigned index_ = slots;
};

}  // namespace dflash::detail
