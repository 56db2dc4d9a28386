// dflash::bounded_queue (NullProfiler) against the
// mutex + condition_variable + deque queue, moodycamel's
// BlockingConcurrentQueue and tbb::concurrent_bounded_queue, same workload,
// interleaved rounds in one process. Items/s; ratio = dflash / anchor.
//   compare_queue [--rounds=N] [--pin=apart|together]
// --pin fixes where the threads run: producers on CPU 0 and consumers on CPU 1
// (apart), or all on CPU 0 (together). Unpinned, the scheduler picks per round,
// and a 1P1C round reads very differently in the two placements.
// moodycamel's queue is unbounded (pre-sized to the capacity; enqueue may grow
// it); the others block at the capacity.
#include <dflash/queue/bounded_queue.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "../compare.hpp"

#if DFLASH_BENCH_HAVE_MOODYCAMEL
#include <concurrentqueue/blockingconcurrentqueue.h>
#endif
#if DFLASH_BENCH_HAVE_TBB
#include <tbb/concurrent_queue.h>
#endif

#include <pthread.h>
#include <sched.h>

namespace {
using item = std::int64_t;

// CPUs for producers and consumers; -1 = unpinned.
struct placement {
  int producer_cpu = -1, consumer_cpu = -1;
  const char* label = "";
};

placement placement_arg(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.rfind("--pin=", 0) != 0) continue;
    const std::string_view v = a.substr(6);
    if (v == "together") return {0, 0, ", one core"};
    if (v == "apart") {
      if (std::thread::hardware_concurrency() < 2) {
        std::fprintf(stderr, "compare_queue: --pin=apart needs two CPUs\n");
        std::exit(2);
      }
      return {0, 1, ", cores apart"};
    }
    std::fprintf(stderr, "compare_queue: --pin takes 'apart' or 'together', not '%.*s'\n", static_cast<int>(v.size()),
                 v.data());
    std::exit(2);
  }
  return {};
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
    std::fprintf(stderr, "compare_queue: cannot pin a thread to CPU %d (error %d)\n", cpu, rc);
    std::exit(2);
  }
}

placement where;  // set once in main, before any round

class mutex_deque_queue {
 public:
  explicit mutex_deque_queue(std::size_t cap) : cap_(cap) {}
  void push(item v) {
    std::unique_lock lk(m_);
    not_full_.wait(lk, [&] { return q_.size() < cap_; });
    q_.push_back(v);
    lk.unlock();
    not_empty_.notify_one();
  }
  item pop() {
    std::unique_lock lk(m_);
    not_empty_.wait(lk, [&] { return !q_.empty(); });
    const item v = q_.front();
    q_.pop_front();
    lk.unlock();
    not_full_.notify_one();
    return v;
  }

 private:
  std::size_t cap_;
  std::mutex m_;
  std::condition_variable not_full_, not_empty_;
  std::deque<item> q_;
};

// P producers push `per` items each; consumers claim a ticket per pop until
// all items are claimed (no sentinels: moodycamel does not order items across
// producers). Same overhead for every queue. Returns million items per second.
template <class Push, class Pop>
double run(int producers, int consumers, std::int64_t per, Push push, Pop pop) {
  std::atomic<std::int64_t> sum{0}, claimed{0};
  const std::int64_t total = producers * per;
  std::vector<std::thread> ps, cs;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < consumers; ++c)
    cs.emplace_back([&] {
      pin_to(where.consumer_cpu);
      std::int64_t s = 0;
      while (claimed.fetch_add(1, std::memory_order_relaxed) < total) s += pop();
      sum += s;
    });
  for (int p = 0; p < producers; ++p)
    ps.emplace_back([&] {
      pin_to(where.producer_cpu);
      for (std::int64_t i = 0; i < per; ++i) push(i);
    });
  for (auto& t : ps) t.join();
  for (auto& t : cs) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sum.load() != producers * (per * (per - 1) / 2)) {  // lost or duplicated items
    std::fprintf(stderr, "checksum mismatch: %lld != %lld\n", static_cast<long long>(sum.load()),
                 static_cast<long long>(producers * (per * (per - 1) / 2)));
    std::abort();
  }
  return static_cast<double>(producers * per) / s / 1e6;
}
}  // namespace

int main(int argc, char** argv) {
  dflash_bench::comparison cmp{"queue", "M items/s", {}, {}};
#if !DFLASH_BENCH_HAVE_MOODYCAMEL
  cmp.skipped.push_back("moodycamel BlockingConcurrentQueue (libconcurrentqueue-dev not found at build time)");
#endif
#if !DFLASH_BENCH_HAVE_TBB
  cmp.skipped.push_back("tbb::concurrent_bounded_queue (oneTBB not found at build time)");
#endif
  const int rounds = dflash_bench::rounds_arg(argc, argv, 7);
  where = placement_arg(argc, argv);
  struct shape {
    int p, c;
    std::size_t cap;
    std::int64_t per;
  };
  for (const shape sh : {shape{1, 1, 1024, 400'000}, shape{1, 1, 64, 400'000}, shape{4, 4, 1024, 100'000}}) {
    std::vector<dflash_bench::subject> subjects;
    subjects.push_back({"dflash::bounded_queue", [sh] {
                          dflash::bounded_queue<item> q(sh.cap);
                          return run(sh.p, sh.c, sh.per, [&](item v) { (void)q.push(v); }, [&] { return *q.pop(); });
                        }});
    subjects.push_back({"mutex+condvar+deque", [sh] {
                          mutex_deque_queue q(sh.cap);
                          return run(sh.p, sh.c, sh.per, [&](item v) { q.push(v); }, [&] { return q.pop(); });
                        }});
#if DFLASH_BENCH_HAVE_MOODYCAMEL
    subjects.push_back({"moodycamel::BlockingConcurrentQueue", [sh] {
                          moodycamel::BlockingConcurrentQueue<item> q(sh.cap);
                          return run(sh.p, sh.c, sh.per, [&](item v) { q.enqueue(v); }, [&] {
                            item v;
                            q.wait_dequeue(v);
                            return v;
                          });
                        }});
#endif
#if DFLASH_BENCH_HAVE_TBB
    subjects.push_back({"tbb::concurrent_bounded_queue", [sh] {
                          tbb::concurrent_bounded_queue<item> q;
                          q.set_capacity(static_cast<std::ptrdiff_t>(sh.cap));
                          return run(sh.p, sh.c, sh.per, [&](item v) { q.push(v); }, [&] {
                            item v;
                            q.pop(v);
                            return v;
                          });
                        }});
#endif
    cmp.run(std::to_string(sh.p) + "P" + std::to_string(sh.c) + "C cap " + std::to_string(sh.cap) + where.label,
            subjects, rounds);
  }
  cmp.write(argc, argv);
}
