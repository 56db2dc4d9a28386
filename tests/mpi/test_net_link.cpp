// dflash::mpi::net_link: one pipeline type on every rank, its stages placed on
// ranks by the shape, joined across processes by a net_link. One mode per
// ctest entry (tests/mpi/CMakeLists.txt runs each under mpirun). Exit 0 only
// if every check held on this rank.

#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>
#include <dflash/mpi.hpp>
#include <dflash/mpi/net_link.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rank_check.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;

namespace {

using dflash_test::failures;

constexpr int items_per_rank = 400;

struct tick {  // trivially copyable: crosses as its bytes
  std::int32_t rank = -1;
  std::int32_t seq = -1;
  std::int64_t value = 0;
};

// Producer ranks make items_per_rank items each, tagged with their rank.
struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = tick;
  int rank = 0, next = 0;
  std::optional<tick> operator()() {
    if (next >= items_per_rank) return std::nullopt;
    const int s = next++;
    return tick{rank, s, 0};
  }
};
struct square {
  static constexpr dflash::fixed_string name{"square"};
  using input_type = tick;
  using output_type = tick;
  tick operator()(tick&& t) const {
    t.value = static_cast<std::int64_t>(t.seq) * t.seq + t.rank;
    return t;
  }
};
struct collect {
  static constexpr dflash::fixed_string name{"collect"};
  using input_type = tick;
  using output_type = void;
  std::vector<tick>* got;
  int throw_after = -1;  // >= 0: throws on that item
  void operator()(tick&& t) {
    if (throw_after >= 0 && static_cast<int>(got->size()) == throw_after)
      throw std::runtime_error("collect failed on purpose");
    got->push_back(t);
  }
};

template <class P>
using net_pipeline = dflash::Pipeline<P, numbers, dflash::queue_link<"in", 4>, dflash::workers<square, 2>,
                                      dflash::mpi::net_link<"net", 3>, collect>;

// On the host twin: a device stage's output crosses once its work completed.
using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;
struct slot : dflash::device_item<B> {
  tick t;
};
struct fill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = tick;
  using output_type = slot;
  void operator()(tick&& in, slot& s, DS ds) {
    tick* dst = &s.t;
    ds.enqueue([dst, in] {  // written later, on the stream's executor thread
      *dst = in;
      dst->value = static_cast<std::int64_t>(in.seq) * in.seq + in.rank;
    });
  }
};
// Returns a box the enqueued work fills later (the device -> host call shape):
// a net_link must not send it before that work is done.
struct read {
  static constexpr dflash::fixed_string name{"read"};
  using input_type = slot;
  using output_type = std::unique_ptr<tick>;
  std::unique_ptr<tick> operator()(slot& s, DS ds) {
    auto out = std::make_unique<tick>();
    ds.enqueue([src = &s.t, dst = out.get()] {
      if (src->seq % 8 == 0) std::this_thread::sleep_for(1ms);  // late, so a send that did not wait sees -1
      *dst = *src;
    });
    return out;
  }
};
struct collect_boxed {
  static constexpr dflash::fixed_string name{"collect"};
  using input_type = std::unique_ptr<tick>;
  using output_type = void;
  std::vector<tick>* got;
  int throw_after = -1;
  void operator()(std::unique_ptr<tick>&& t) { got->push_back(*t); }
};
template <class P>
using device_net_pipeline = dflash::Pipeline<P, numbers, dflash::queue_link<"in", 4>, fill, dflash::device_link<"dev", 2>,
                                             read, dflash::mpi::net_link<"net", 3>, collect_boxed>;

// Stages 0..n-2 on ranks 0..size-2, the sink on the last rank.
template <class Shape>
void place(Shape& s, int rank, int size) {
  std::vector<int> producers;
  for (int r = 0; r + 1 < size; ++r) producers.push_back(r);
  for (std::size_t i = 0; i + 1 < s.ranks.size(); ++i) s.ranks[i] = producers;
  s.ranks.back() = {size - 1};
  s.rank = rank;
}

template <template <class> class Pipe, class Sink = collect>
int exactly_once(int argc, char** argv, bool throw_in_sink) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<Pipe<dflash::NullProfiler>>>;
  prof_t prof;
  job.start(prof);
  auto shape = Pipe<prof_t>::default_shape();
  place(shape, job.rank(), job.size());
  std::vector<tick> got;
  const int producers = job.size() - 1;
  const int total = producers * items_per_rank;
  const int stop_at = total / 3;
  {
    Pipe<prof_t> p(prof, shape);
    p.template stage<0>() = numbers{job.rank(), 0};
    p.template stage<Pipe<prof_t>::stage_count - 1>() = Sink{&got, throw_in_sink ? stop_at : -1};
    RANK_CHECK(p.layout().links.back().name == "net");
    job.run(p);
  }
  const auto res = job.finish();
  const bool consumer = job.rank() == job.size() - 1;
  RANK_CHECK(res.stopped_early == throw_in_sink);  // a complete run says so; a failed one ended early
  if (!throw_in_sink) {
    RANK_CHECK(res.ok);
    if (consumer) {
      RANK_CHECK(static_cast<int>(got.size()) == total);
      std::set<std::pair<int, int>> seen;
      for (const auto& t : got) {
        RANK_CHECK(seen.insert({t.rank, t.seq}).second);  // once
        RANK_CHECK(t.value == static_cast<std::int64_t>(t.seq) * t.seq + t.rank);
        RANK_CHECK(t.rank >= 0 && t.rank < producers && t.seq >= 0 && t.seq < items_per_rank);
      }
      RANK_CHECK(static_cast<int>(seen.size()) == total);
      const auto s = prof.snapshot();
      RANK_CHECK(s.find("net.pop_wait") != nullptr);  // recorded when a pop had to wait
      RANK_CHECK(s.find("collect.work")->count == static_cast<std::uint64_t>(total));
      RANK_CHECK(s.find("numbers.work")->count == 0);  // the source ran on the other ranks
      // flow stamps crossed the net_link: every item has an age and an end-to-end time here (the
      // ranks share one machine's steady clock, so none reads behind its birth stamp)
      RANK_CHECK(s.find("collect.age")->count == static_cast<std::uint64_t>(total));
      RANK_CHECK(s.find("collect.e2e")->count == static_cast<std::uint64_t>(total));
      RANK_CHECK(s.find("collect.age_clock_backwards")->count == 0);
    } else {
      RANK_CHECK(got.empty());
      const auto s = prof.snapshot();
      RANK_CHECK(s.find("net.push_wait")->count <= static_cast<std::uint64_t>(items_per_rank));  // when out of credits
      RANK_CHECK(s.find("numbers.work")->count == static_cast<std::uint64_t>(items_per_rank) + 1);  // + "done"
      RANK_CHECK(s.find("collect.work")->count == 0);
    }
  } else {
    RANK_CHECK(!res.ok);  // every rank learns of the failure
    if (job.rank() == 0) RANK_CHECK(res.error.find("collect failed on purpose") != std::string::npos);
    if (consumer) RANK_CHECK(static_cast<int>(got.size()) == stop_at);
  }
  return failures == 0 ? 0 : 1;
}

// A queue_link between stages placed on different ranks cannot carry items: a clear error, before anything runs.
int placement_error(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  using wrong = dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"in", 4>, square,
                                 dflash::queue_link<"net", 3>, collect>;
  auto shape = wrong::default_shape();
  place(shape, job.rank(), job.size());
  bool threw = false;
  try {
    wrong p(shape, numbers{job.rank(), 0}, square{}, collect{nullptr});
    p.stop();
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("link 1 ('net') cannot cross processes: make it a dflash::mpi::net_link") !=
            std::string::npos;
    if (!threw) std::fprintf(stderr, "rank %d: unexpected message: %s\n", dflash_test::this_rank, e.what());
  }
  RANK_CHECK(threw);
  RANK_CHECK(job.finish().ok);
  return failures == 0 ? 0 : 1;
}

// Items that leave a rank and come back: source and sink on rank 0, the middle
// stage on rank 1. Each link ends when its producing stage has ended, so
// rank 0's "there" ends before its sink waits for "back": every item arrives
// once and the job ends normally.
int round_trip(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  using there_and_back = dflash::Pipeline<dflash::NullProfiler, numbers, dflash::mpi::net_link<"there", 3>, square,
                                          dflash::mpi::net_link<"back", 3>, collect>;
  auto shape = there_and_back::default_shape();
  shape.ranks[0] = {0};
  shape.ranks[1] = {1};
  shape.ranks[2] = {0};
  shape.rank = job.rank();
  std::vector<tick> got;
  {
    there_and_back p(shape, numbers{job.rank(), 0}, square{}, collect{&got});
    RANK_CHECK(job.run(p));
  }
  const auto res = job.finish();
  RANK_CHECK(res.ok);
  RANK_CHECK(!res.stopped_early);
  if (job.rank() == 0) {
    RANK_CHECK(static_cast<int>(got.size()) == items_per_rank);
    std::set<int> seen;
    for (const auto& t : got) {
      RANK_CHECK(t.rank == 0 && seen.insert(t.seq).second);
      RANK_CHECK(t.value == static_cast<std::int64_t>(t.seq) * t.seq);
    }
  } else {
    RANK_CHECK(got.empty());
  }
  return failures == 0 ? 0 : 1;
}

// One rank fails while setting up, before it makes its side of the link; the
// other ends with the first one's error, never waiting for it:
//  stop_before_build  rank 0 fails; rank 1 builds once the STOP arrived (its
//                     link is stopped when it is made)
//  peer_never_built   rank 1 (the consumer) builds and runs at once; rank 0
//                     fails 200 ms later (rank 1 must not wait at finish() for
//                     rank 0 to match messages of a link it never made)
//  consumer_never_built  rank 0 (the producer) builds, runs and sends on its
//                     first credits; rank 1 fails 200 ms later (its job drops
//                     those messages, so rank 0's sends complete)
enum class late_failure { stop_before_build, peer_never_built, consumer_never_built };
int one_rank_fails_early(int argc, char** argv, late_failure how) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  const int failing = how == late_failure::consumer_never_built ? 1 : 0;
  if (job.rank() == failing) {
    if (how != late_failure::stop_before_build) std::this_thread::sleep_for(200ms);
    job.fail("setup failed on purpose");
  } else {
    if (how == late_failure::stop_before_build)
      while (!job.stopped()) std::this_thread::sleep_for(1ms);  // rank 0's STOP has arrived
    using pipe = net_pipeline<dflash::NullProfiler>;
    auto shape = pipe::default_shape();
    place(shape, job.rank(), job.size());
    std::vector<tick> got;
    {
      pipe p(shape, numbers{job.rank(), 0}, square{}, collect{&got});
      (void)job.run(p);  // returns: the link was stopped (when it was made, or by the STOP)
    }
    RANK_CHECK(got.empty());
  }
  const auto res = job.finish();
  RANK_CHECK(!res.ok);
  if (job.rank() == 0) RANK_CHECK(res.error.find("setup failed on purpose") != std::string::npos);
  return failures == 0 ? 0 : 1;
}

// Two runs in one job, each over its own net_link: the second link is told
// this rank's end when the second run ends, so its consumer ends too.
// The consumer rank drains its pipeline (stop(drain)) after some items: the
// documented early stop, not an error — and job_result says it was early on
// every rank, so a program tells it from a complete run.
int drain_consumer(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  using pipe = net_pipeline<dflash::NullProfiler>;
  auto shape = pipe::default_shape();
  place(shape, job.rank(), job.size());
  std::vector<tick> got;
  const bool consumer = job.rank() == job.size() - 1;
  constexpr int stop_after = 50;
  {
    std::atomic<int> taken{0};
    struct counted : collect {
      std::atomic<int>* n;
      void operator()(tick&& t) {
        collect::operator()(std::move(t));
        n->fetch_add(1);
      }
    };
    dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"in", 4>, dflash::workers<square, 2>,
                     dflash::mpi::net_link<"net", 3>, counted>
        p(shape, numbers{job.rank(), 0}, square{}, counted{{&got}, &taken});
    std::thread stopper;
    if (consumer)
      stopper = std::thread([&] {
        while (taken.load() < stop_after && !p.cancelled()) std::this_thread::sleep_for(1ms);
        p.stop(dflash::stop_mode::drain);
      });
    job.run(p);
    if (stopper.joinable()) stopper.join();
  }
  const auto res = job.finish();
  RANK_CHECK(res.ok);             // a drain is no error
  RANK_CHECK(res.stopped_early);  // but the run did not complete, and every rank learns it
  if (consumer) RANK_CHECK(static_cast<int>(got.size()) >= stop_after);
  return failures == 0 ? 0 : 1;
}

// Two runs of two pipelines, one after the other. built_early: both pipelines are built before
// either runs, and the second one's link is not ended by the first run's end (each link's end
// is its own pipeline's), so both runs deliver every item.
int two_runs(int argc, char** argv, bool built_early) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  using first = net_pipeline<dflash::NullProfiler>;
  using second = dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"in", 4>,
                                  dflash::workers<square, 2>, dflash::mpi::net_link<"net_again", 3>, collect>;
  std::vector<tick> got1, got2;
  {
    auto shape1 = first::default_shape();
    place(shape1, job.rank(), job.size());
    auto shape2 = second::default_shape();
    place(shape2, job.rank(), job.size());
    std::optional<first> p1(std::in_place, shape1, numbers{job.rank(), 0}, square{}, collect{&got1});
    std::optional<second> p2;
    if (built_early) p2.emplace(shape2, numbers{job.rank(), 0}, square{}, collect{&got2});
    RANK_CHECK(job.run(*p1));
    if (!built_early) {
      p1.reset();
      p2.emplace(shape2, numbers{job.rank(), 0}, square{}, collect{&got2});
    }
    RANK_CHECK(job.run(*p2));
  }
  const auto res = job.finish();
  RANK_CHECK(res.ok);
  if (!res.ok && job.rank() == 0) std::fprintf(stderr, "rank 0: %s\n", res.error.c_str());
  RANK_CHECK(!res.stopped_early);
  const bool consumer = job.rank() == job.size() - 1;
  const std::size_t expect = consumer ? static_cast<std::size_t>((job.size() - 1) * items_per_rank) : 0;
  RANK_CHECK(got1.size() == expect);
  RANK_CHECK(got2.size() == expect);
  return failures == 0 ? 0 : 1;
}

}  // namespace

template <>
struct dflash::mpi::wire<std::unique_ptr<tick>> {
  static void for_each_field(std::unique_ptr<tick>& p, auto&& f) {
    if (!p) p = std::make_unique<tick>();  // receiving: a fresh box
    f(p->rank), f(p->seq), f(p->value);
  }
};

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  watchdog wd("test_net_link " + mode, 20s);
  try {
    if (mode == "exactly_once") return exactly_once<net_pipeline>(argc, argv, false);
    if (mode == "device") return exactly_once<device_net_pipeline, collect_boxed>(argc, argv, false);
    if (mode == "throw_consumer") return exactly_once<net_pipeline>(argc, argv, true);
    if (mode == "placement") return placement_error(argc, argv);
    if (mode == "round_trip") return round_trip(argc, argv);
    if (mode == "stop_before_build") return one_rank_fails_early(argc, argv, late_failure::stop_before_build);
    if (mode == "peer_never_built") return one_rank_fails_early(argc, argv, late_failure::peer_never_built);
    if (mode == "consumer_never_built")
      return one_rank_fails_early(argc, argv, late_failure::consumer_never_built);
    if (mode == "two_runs") return two_runs(argc, argv, false);
    if (mode == "built_early") return two_runs(argc, argv, true);
    if (mode == "drain_consumer") return drain_consumer(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", dflash_test::this_rank, e.what());
    return 1;
  }
  std::fprintf(stderr, "test_net_link: unknown mode '%s' (exactly_once, device, throw_consumer, placement, "
               "round_trip, stop_before_build, peer_never_built, consumer_never_built, two_runs, built_early, drain_consumer)\n",
               mode.c_str());
  return 2;
}
