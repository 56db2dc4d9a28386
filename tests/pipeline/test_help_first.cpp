// Help-first hand-on over queue links (pipeline/agents/host_worker.hpp): a
// producer's thread calls a cheap host stage after a queue itself instead of
// pushing; a slow stage, and one that asks for its own threads only, keeps
// its own threads; the profile rows count every item as a push and a pop.
#include <catch2/catch.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>

using namespace std::chrono_literals;
using dflash::NullProfiler;

namespace {
// Thread ids the stages see; each field has one writer at a time (the source's
// one thread; a stage's one seat), handed on with the item.
struct seen {
  std::thread::id source;
  int mid_on_source = 0, sink_on_source = 0, sink_calls = 0;
  long long sum = 0;
};

struct paced_source {  // 0..n-1, a pause before each so the other threads wait parked
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  seen* s;
  int n;
  int next = 0;
  std::chrono::microseconds pause{200};
  std::optional<int> operator()() {
    if (next == 0) s->source = std::this_thread::get_id();
    if (next >= n) return std::nullopt;
    std::this_thread::sleep_for(pause);
    return next++;
  }
};
template <bool Slow, bool OwnThreadsOnly = false>
struct mid_stage {
  static constexpr dflash::fixed_string name{"mid"};
  static constexpr bool own_threads_only = OwnThreadsOnly;
  using input_type = int;
  using output_type = int;
  seen* s;
  int operator()(int&& x) const {
    if (std::this_thread::get_id() == s->source) ++s->mid_on_source;
    if constexpr (Slow) std::this_thread::sleep_for(2ms);
    return x;
  }
};
struct sink_stage {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  seen* s;
  void operator()(int&& x) const {
    if (std::this_thread::get_id() == s->source) ++s->sink_on_source;
    ++s->sink_calls;
    s->sum += x;
  }
};
template <class P, class Mid>
using chain = dflash::Pipeline<P, paced_source, dflash::queue_link<"q1", 4>, Mid, dflash::queue_link<"q2", 4>, sink_stage>;
}  // namespace

TEST_CASE("help-first: cheap stages after queues run on their producer's thread; rows count every item",
          "[pipeline][help]") {
  watchdog wd("help-first, cheap stages");
  using pipe = chain<NullProfiler, mid_stage<false>>;
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<pipe>>;
  constexpr int n = 100;
  prof_t prof;
  seen s;
  chain<prof_t, mid_stage<false>> p(prof, paced_source{&s, n}, mid_stage<false>{&s}, sink_stage{&s});
  p.run_to_completion();
  CHECK(s.sink_calls == n);
  CHECK(s.sum == 1LL * n * (n - 1) / 2);
  // Each stage's first call runs on its own thread (its cost is unknown until
  // then); once sampled cheap, the source's thread calls it. Checked without a
  // profiler: a sanitizer build's profiled call (the zone's clock reads and
  // record included) may sample above 1 us, and then is rightly not helped.
  {
    seen plain;
    chain<NullProfiler, mid_stage<false>> q(paced_source{&plain, n}, mid_stage<false>{&plain}, sink_stage{&plain});
    q.run_to_completion();
    CHECK(plain.sink_calls == n);
    CHECK(plain.mid_on_source > 0);
    CHECK(plain.sink_on_source > 0);
  }
  // Whoever called, the rows read as if every item crossed each queue.
  const auto snap = prof.snapshot();
  auto count = [&](const char* k) { return snap.find(k)->count; };
  CHECK(count("source.work") == n + 1);  // + the call that said "done"
  CHECK(count("source.wait") == n);      // one push (or hand-over) each
  CHECK(count("q1.push_wait") == n);
  CHECK(count("q1.pop_wait") == n + 1);  // + the final empty pop
  CHECK(count("mid.wait") == 2 * n + 1);
  CHECK(count("mid.work") == n);
  CHECK(count("q2.push_wait") == n);
  CHECK(count("q2.pop_wait") == n + 1);
  CHECK(count("sink.wait") == n + 1);
  CHECK(count("sink.work") == n);
  if constexpr (dflash::FlowPolicy<prof_t>) {
    CHECK(count("mid.age") == n);
    CHECK(count("sink.e2e") == n);
  }
}

TEST_CASE("help-first: a slow stage stays on its own threads; its cheap successor is still helped",
          "[pipeline][help]") {
  watchdog wd("help-first, slow stage");
  constexpr int n = 30;
  seen s;
  chain<NullProfiler, mid_stage<true>> p(paced_source{&s, n}, mid_stage<true>{&s}, sink_stage{&s});
  p.run_to_completion();
  CHECK(s.sink_calls == n);
  CHECK(s.mid_on_source == 0);  // its first call sampled slow on its own thread: never helped
}

TEST_CASE("help-first: a stage with own_threads_only is called by its own threads only", "[pipeline][help]") {
  watchdog wd("help-first, own threads only");
  STATIC_REQUIRE(dflash::OwnThreadsOnlyStage<mid_stage<false, true>>);
  STATIC_REQUIRE_FALSE(dflash::OwnThreadsOnlyStage<mid_stage<false>>);
  constexpr int n = 100;
  seen s;
  chain<NullProfiler, mid_stage<false, true>> p(paced_source{&s, n}, mid_stage<false, true>{&s}, sink_stage{&s});
  p.run_to_completion();
  CHECK(s.sink_calls == n);
  CHECK(s.mid_on_source == 0);
  CHECK(s.sink_on_source == 0);  // the sink's producer is mid's thread, never the source's
}

TEST_CASE("stage seats: while a stage's own thread waits for a seat, helpers take none", "[pipeline][help]") {
  watchdog wd("stage seats");
  dflash::detail::stage_seats seats(1);
  const std::size_t held = seats.try_take();
  REQUIRE(held == 0);
  std::atomic<bool> got{false};
  std::thread own([&] {
    seats.take(0);
    got = true;
  });
  while (seats.waiting() == 0) std::this_thread::yield();
  std::this_thread::sleep_for(5ms);  // well into its wait
  seats.give(held);
  // A helper arriving now must leave the freed seat to the waiting thread.
  const std::size_t helper = seats.try_take();
  CHECK(helper == dflash::detail::stage_seats::none);
  if (helper != dflash::detail::stage_seats::none) seats.give(helper);
  own.join();
  CHECK(got.load());
  CHECK(seats.waiting() == 0);
  seats.give(0);
  CHECK(seats.try_take() == 0);
}

// The FIFO guard against a queue whose push count is read while another
// producer's item is pushed and seated: producer P pushed A (position 0),
// A's own thread popped it but has not taken its seat; P reads the push count
// (1), and before it reads the seated count, producer Q pushes C and C's own
// thread seats it (pushes 2, seated 1). The one seated item is C, not A: P's
// next item must not be helped, or worker index 0 gets it before A.
TEST_CASE("stage seats: an item seated after the push count was read does not stand in for an earlier one",
          "[pipeline][help]") {
  dflash::detail::stage_seats seats(2);
  struct racing_queue {
    dflash::detail::stage_seats* seats;
    mutable std::uint64_t claimed = 1;  // A
    std::uint64_t pushes() const noexcept {
      const std::uint64_t seen = claimed;
      ++claimed;           // Q pushes C ...
      seats->seated_one(); // ... and C's own thread seats it, before P reads on
      return seen;
    }
  } q{&seats};
  CHECK_FALSE(seats.all_seated(q));
  CHECK(seats.seated() == 1);

  struct still_queue {
    std::uint64_t n;
    std::uint64_t pushes() const noexcept { return n; }
  };
  seats.seated_one();  // A seated too: both pushed items are
  CHECK(seats.all_seated(still_queue{2}));
  CHECK_FALSE(seats.all_seated(still_queue{3}));
}
