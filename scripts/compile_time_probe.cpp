// A sizing probe for scripts/compile_time.py --probe, not library code: the
// compile-time pipeline TU (source -> 2 parallel workers -> in_order sum, a
// NullProfiler-like run and an AccumulatingProfiler run with summary()) on a
// minimal type-erased engine in oneTBB's style: stages behind a virtual call on
// heap items, one engine for every stage type and policy, profiling through a
// recorder interface. It answers one question: with the engine's code no longer
// instantiated per pipeline, how close does a TU come to tbb::parallel_pipeline's
// compile time, (a) with that engine compiled in every TU that includes it
// (header-only), (b) with it compiled once in a library (-DPROBE_ENGINE_COMPILED:
// the TU sees only its declaration, as a libtbb user does)?
//
// The engine does far less than dflash::Pipeline (no help-first hand-over,
// pulled source, direct or device links, flow tracking, names in errors or
// shape checks), so its compile time is a lower bound for a real erased engine.
// Built with (a) it also runs, and checks both sums.

#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

namespace probe {

struct token {
  std::uint64_t seq;
  void* item;
};
struct recorder {
  virtual void record(std::size_t key, std::uint64_t ns) const = 0;
  virtual ~recorder() = default;
};
enum class mode { source, parallel, in_order };
struct filter {
  mode m = mode::parallel;
  int workers = 1;
  std::size_t key = 0;
  virtual void* call(void* in) = 0;  // source: in is null; null back = no more items (or a sink)
  virtual void destroy(void* item) noexcept = 0;
  virtual ~filter() = default;
};

#ifndef PROBE_ENGINE_COMPILED
class engine {
 public:
  engine(std::vector<filter*> fs, std::size_t depth, const recorder* rec) : fs_(std::move(fs)), rec_(rec) {
    for (std::size_t i = 1; i < fs_.size(); ++i) qs_.push_back(std::make_unique<dflash::bounded_queue<token>>(depth));
  }
  void run() {
    std::vector<std::thread> ts;
    std::vector<std::atomic<int>> live(fs_.size());
    ts.emplace_back([this] {
      source_loop();
      qs_[0]->close();
    });
    for (std::size_t i = 1; i < fs_.size(); ++i) {
      live[i] = fs_[i]->workers;
      for (int w = 0; w < fs_[i]->workers; ++w)
        ts.emplace_back([this, i, &live] {
          stage_loop(i);
          if (--live[i] == 0 && i < qs_.size()) qs_[i]->close();
        });
    }
    for (auto& t : ts) t.join();
    if (err_) std::rethrow_exception(err_);
  }

 private:
  void fail(std::exception_ptr e) {
    {
      const std::lock_guard l(m_);
      if (!err_) err_ = e;
    }
    for (auto& q : qs_) q->close();
  }
  void* timed(filter* f, void* in) {
    if (!rec_) return f->call(in);
    const auto t0 = std::chrono::steady_clock::now();
    void* out = f->call(in);
    rec_->record(f->key, static_cast<std::uint64_t>((std::chrono::steady_clock::now() - t0).count()));
    return out;
  }
  bool hand_on(std::size_t i, token t) {
    if (i >= qs_.size() || t.item == nullptr) return true;
    if (qs_[i]->push(t)) return true;
    fs_[i]->destroy(t.item);
    return false;
  }
  void source_loop() {
    try {
      for (std::uint64_t s = 0;; ++s) {
        void* it = timed(fs_[0], nullptr);
        if (it == nullptr || !hand_on(0, token{s, it})) return;
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }
  void stage_loop(std::size_t i) {
    filter* f = fs_[i];
    std::map<std::uint64_t, void*> parked;  // in_order: items that came before their turn
    std::uint64_t next = 0;
    try {
      while (auto t = qs_[i - 1]->pop()) {
        if (f->m != mode::in_order) {
          if (!hand_on(i, token{t->seq, timed(f, t->item)})) return;
          continue;
        }
        parked.emplace(t->seq, t->item);
        for (auto it = parked.begin(); it != parked.end() && it->first == next; it = parked.erase(it), ++next)
          if (!hand_on(i, token{next, timed(f, it->second)})) return;
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  std::vector<filter*> fs_;
  const recorder* rec_;
  std::vector<std::unique_ptr<dflash::bounded_queue<token>>> qs_;
  std::mutex m_;
  std::exception_ptr err_;
};

[[gnu::noinline]] inline void run(std::vector<filter*> fs, std::size_t depth, const recorder* rec) {
  engine(std::move(fs), depth, rec).run();
}
#else
void run(std::vector<filter*> fs, std::size_t depth, const recorder* rec);
#endif

// The per-pipeline part: one small class per stage type.
template <class F, class In, class Out>
struct stage final : filter {
  F f;
  stage(mode m_, int w, std::size_t k, F g) : f(std::move(g)) {
    m = m_, workers = w, key = k;
  }
  void* call(void* in) override {
    if constexpr (std::is_void_v<In>) {
      auto o = f();
      return o ? new Out(std::move(*o)) : nullptr;
    } else {
      const std::unique_ptr<In> p(static_cast<In*>(in));
      if constexpr (std::is_void_v<Out>) {
        f(std::move(*p));
        return nullptr;
      } else {
        return new Out(f(std::move(*p)));
      }
    }
  }
  void destroy(void* item) noexcept override {
    if constexpr (!std::is_void_v<Out>) delete static_cast<Out*>(item);
  }
};

template <class P, class... K>
struct policy_recorder final : recorder {
  const P& p;
  explicit policy_recorder(const P& q) : p(q) {}
  void record(std::size_t key, std::uint64_t ns) const override {
    std::size_t i = 0;
    ((key == i++ ? (p.add(K{}, std::chrono::nanoseconds(ns)), 0) : 0), ...);
  }
};

}  // namespace probe

int main() {
  int next = 0;
  long long sum = 0;
  auto numbers = [&]() -> std::optional<int> { return next < 20000 ? std::optional(next++) : std::nullopt; };
  auto square = [](int x) { return 1LL * x * x; };
  auto add = [&](long long v) { sum += v; };
  auto build = [&](const probe::recorder* r) {
    probe::stage<decltype(numbers), void, int> f0(probe::mode::source, 1, 0, numbers);
    probe::stage<decltype(square), int, long long> f1(probe::mode::parallel, 2, 1, square);
    probe::stage<decltype(add), long long, void> f2(probe::mode::in_order, 1, 2, add);
    probe::run({&f0, &f1, &f2}, 64, r);
  };
  build(nullptr);
  const long long first = sum;
  next = 0, sum = 0;
  dflash::AccumulatingProfiler<dflash::key_set<"numbers", "square", "sum">> prof;
  const probe::policy_recorder<decltype(prof), dflash::key_t<"numbers">, dflash::key_t<"square">,
                               dflash::key_t<"sum">>
      rec(prof);
  build(&rec);
  std::printf("sum %lld\n%s", sum, prof.summary().c_str());
  const long long expect = 2666466670000LL;  // sum of x * x for x < 20000
  if (first != expect || sum != expect) {
    std::fprintf(stderr, "compile_time_probe: sums %lld, %lld, expected %lld\n", first, sum, expect);
    return 1;
  }
}
