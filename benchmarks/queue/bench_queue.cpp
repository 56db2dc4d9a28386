// Host queue throughput: dflash::bounded_queue (NullProfiler and
// AccumulatingProfiler) and host_ring (lock-free, the device queue's control
// logic) against a plain std::mutex + std::deque + condition-variable queue,
// all bounded to the same capacity, side by side in one run.
//   bench_queue --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <dflash/profile.hpp>
#include <dflash/queue.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <thread>
#include <vector>

namespace {
constexpr std::size_t capacity = 1024;
constexpr std::int64_t items_per_producer = 200'000;

// The baseline: the textbook bounded queue (notify on every op).
template <class T>
class mutex_deque_queue {
 public:
  explicit mutex_deque_queue(std::size_t cap) : cap_(cap) {}
  bool push(T v) {
    std::unique_lock lk(m_);
    not_full_.wait(lk, [&] { return closed_ || q_.size() < cap_; });
    if (closed_) return false;
    q_.push_back(std::move(v));
    lk.unlock();
    not_empty_.notify_one();
    return true;
  }
  std::optional<T> pop() {
    std::unique_lock lk(m_);
    not_empty_.wait(lk, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return std::nullopt;
    T v = std::move(q_.front());
    q_.pop_front();
    lk.unlock();
    not_full_.notify_one();
    return v;
  }
  void close() {
    {
      std::lock_guard lk(m_);
      closed_ = true;
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  std::size_t cap_;
  std::mutex m_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> q_;
  bool closed_ = false;
};

// Adapter: host_ring with spin-yield on full/empty, so it fits the same loop.
class ring_queue {
 public:
  explicit ring_queue(std::size_t cap) : r_(cap) {}
  bool push(std::int64_t v) {
    dflash::ring_status s;
    while ((s = r_.try_push(&v, 1)) == dflash::ring_status::full) std::this_thread::yield();
    return s == dflash::ring_status::ok;
  }
  std::optional<std::int64_t> pop() {
    std::int64_t v;
    for (;;) {
      const auto t = r_.try_pop(&v, 1);
      if (t.status == dflash::ring_status::ok) return v;
      if (t.status == dflash::ring_status::closed) return std::nullopt;
      std::this_thread::yield();
    }
  }
  void close() { r_.close(); }

 private:
  dflash::host_ring<std::int64_t> r_;
};

using acc_profiler = dflash::AccumulatingProfiler<dflash::queue_keys<"q">>;

template <class Q>
struct make {
  static std::unique_ptr<Q> queue() { return std::make_unique<Q>(capacity); }
};
template <>
struct make<dflash::bounded_queue<std::int64_t, acc_profiler, "q">> {
  static inline acc_profiler prof;
  static auto queue() { return std::make_unique<dflash::bounded_queue<std::int64_t, acc_profiler, "q">>(capacity, prof); }
};

// One iteration = P producers push items_per_producer each through the queue
// to C consumers; items/s counts every transferred item.
template <class Q>
void transfer(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  const int consumers = static_cast<int>(state.range(1));
  std::int64_t sum = 0;
  for (auto _ : state) {
    auto q = make<Q>::queue();
    std::vector<std::thread> ts;
    std::vector<std::int64_t> partial(static_cast<std::size_t>(consumers));
    for (int c = 0; c < consumers; ++c)
      ts.emplace_back([&, c] {
        std::int64_t s = 0;
        while (auto v = q->pop()) s += *v;
        partial[static_cast<std::size_t>(c)] = s;
      });
    std::vector<std::thread> ps;
    for (int p = 0; p < producers; ++p)
      ps.emplace_back([&] {
        for (std::int64_t i = 0; i < items_per_producer; ++i)
          if (!q->push(i)) return;
      });
    for (auto& t : ps) t.join();
    q->close();
    for (auto& t : ts) t.join();
    for (auto s : partial) sum += s;
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * producers * items_per_producer);
}

using acc_queue = dflash::bounded_queue<std::int64_t, acc_profiler, "q">;

template <class Q>
void add(const char* name) {
  for (auto [p, c] : {std::pair{1, 1}, std::pair{4, 4}})
    benchmark::RegisterBenchmark((std::string(name) + "/" + std::to_string(p) + "P" + std::to_string(c) + "C").c_str(),
                                 transfer<Q>)
        ->Args({p, c})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}
}  // namespace

int main(int argc, char** argv) {
  add<mutex_deque_queue<std::int64_t>>("mutex_deque");
  add<dflash::bounded_queue<std::int64_t>>("bounded_queue_null");
  add<acc_queue>("bounded_queue_accumulating");
  add<ring_queue>("host_ring");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
