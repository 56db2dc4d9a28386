// Flow stamps across ranks whose profiler clocks disagree: every rank's clock
// is skewed by a known amount (skewed_clock), job::start() must recover each
// offset within its error bound, and the ages after a net_link must be ages
// (small, none read backwards), not the skews. One mode per ctest entry.
//   skew    3 ranks, source (rank 0) -> net_link -> relay (rank 1) -> net_link -> sink (rank 2)
//   broken  2 ranks, rank 1's clock goes backwards during the exchange (and is
//           10 s behind): the estimate fails with a clear message, the job
//           table marks the age rows as estimates, and the items that read
//           behind their stamps are counted as such, never given a negative
//           (huge unsigned) age
//   null    2 ranks with NullProfiler: no clock exchange at all

#include <dflash/mpi.hpp>
#include <dflash/mpi/net_link.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "rank_check.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;

namespace {

using dflash_test::failures;

// steady_clock (one clock for every process on this machine) shifted by this
// rank's skew, so the true offset between two ranks is the skews' difference;
// `backwards`: each read is a second behind the previous one.
struct skewed_clock : dflash::detail::steady_ns_clock<skewed_clock> {
  static inline std::atomic<std::int64_t> skew_ns{0};
  static inline std::atomic<bool> backwards{false};
  static inline std::atomic<std::int64_t> reads{0};
  static time_point now() noexcept {
    std::int64_t t = std::chrono::duration_cast<duration>(std::chrono::steady_clock::now().time_since_epoch()).count() +
                     skew_ns.load(std::memory_order_relaxed);
    if (backwards.load(std::memory_order_relaxed)) t -= 1'000'000'000 * reads.fetch_add(1, std::memory_order_relaxed);
    return time_point{duration{t}};
  }
};

constexpr int items = 200;
constexpr std::int64_t skews_ns[] = {0, 40'000'000'000, -25'000'000'000};  // rank 1 ahead 40 s, rank 2 behind 25 s
constexpr std::uint64_t sane_age_ns = 5'000'000'000;  // far below every skew, far above any age on a loaded machine

struct tick {
  std::int64_t seq = 0;
};
struct src {
  static constexpr dflash::fixed_string name{"src"};
  using input_type = void;
  using output_type = tick;
  std::int64_t next = 0;
  std::optional<tick> operator()() {
    if (next >= items) return std::nullopt;
    return tick{next++};
  }
};
struct relay {
  static constexpr dflash::fixed_string name{"relay"};
  using input_type = tick;
  using output_type = tick;
  tick operator()(tick&& t) const { return t; }
};
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = tick;
  using output_type = void;
  std::int64_t* got = nullptr;
  void operator()(tick&&) { ++*got; }
};

template <class P>
using two_hops = dflash::Pipeline<P, src, dflash::mpi::net_link<"hop1", 4>, relay, dflash::mpi::net_link<"hop2", 4>, sink>;
template <class P>
using one_hop = dflash::Pipeline<P, src, dflash::mpi::net_link<"hop", 4>, sink>;

template <template <class> class Pipe>
using prof_of = dflash::AccumulatingProfiler<dflash::pipeline_keys<Pipe<dflash::NullProfiler>>, skewed_clock>;

// Runs the pipeline with stage i on rank i; returns the items the sink took (last rank).
template <template <class> class Pipe>
std::int64_t run_placed(dflash::mpi::job& job, const prof_of<Pipe>& prof) {
  using pipe = Pipe<prof_of<Pipe>>;
  auto shape = pipe::default_shape();
  for (std::size_t i = 0; i < shape.ranks.size(); ++i) shape.ranks[i] = {static_cast<int>(i)};
  shape.rank = job.rank();
  std::int64_t got = 0;
  pipe p(prof, shape);
  p.template stage<pipe::stage_count - 1>() = sink{&got};
  job.run(p);
  return got;
}

const dflash::key_stats& row(const dflash::profile_snapshot& s, const char* name) {
  const auto* k = s.find(name);
  if (!k) {
    std::fprintf(stderr, "rank %d: no row %s\n", dflash_test::this_rank, name);
    std::abort();
  }
  return *k;
}

int skew(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  RANK_CHECK(job.size() == 3);
  skewed_clock::skew_ns = skews_ns[job.rank()];
  prof_of<two_hops> prof;
  // 3 ranks on a shared 2-core machine: a round trip may wait for the scheduler (ms), so the
  // "too slow" limit is wide here; that each bound holds the true offset is checked below
  dflash::mpi::job_options opt;
  opt.clock.max_error = 100ms;
  job.start(prof, opt);
  // every rank knows every rank's offset, each within its bound of the injected skew
  const auto& c = job.clocks();
  RANK_CHECK(c.ranks.size() == 3);
  for (std::size_t r = 0; r < c.ranks.size(); ++r) {
    const auto& e = c.ranks[r];
    const std::int64_t miss = e.offset_ns - skews_ns[r];
    if (job.rank() == 0)
      std::printf("rank %zu: injected skew %+.3f us, estimated offset %+.3f us ± %.3f us (miss %+.3f us)%s%s\n", r,
                  static_cast<double>(skews_ns[r]) / 1e3, static_cast<double>(e.offset_ns) / 1e3,
                  static_cast<double>(e.error_ns) / 1e3, static_cast<double>(miss) / 1e3, e.ok ? "" : ", failed: ",
                  e.why.c_str());
    RANK_CHECK(e.ok);
    RANK_CHECK(miss <= e.error_ns && -miss <= e.error_ns);
  }
  const std::int64_t got = run_placed<two_hops>(job, prof);
  const auto res = job.finish();
  RANK_CHECK(res.ok);
  const auto s = prof.snapshot();
  // each hop converts the stamp: the ages on ranks 1 and 2 are ages, not the skews
  const char* age = job.rank() == 1 ? "relay.age" : "sink.age";
  const char* backwards = job.rank() == 1 ? "relay.age_clock_backwards" : "sink.age_clock_backwards";
  if (job.rank() > 0) {
    RANK_CHECK(row(s, age).count == items);
    RANK_CHECK(row(s, age).max_ns < sane_age_ns);
    RANK_CHECK(row(s, backwards).count == 0);
    std::printf("rank %d: %s max %.3f ms over %llu items\n", job.rank(), age, static_cast<double>(row(s, age).max_ns) / 1e6,
                static_cast<unsigned long long>(row(s, age).count));
  }
  if (job.rank() == 2) {
    RANK_CHECK(got == items);
    RANK_CHECK(row(s, "sink.e2e").count == items);
    RANK_CHECK(row(s, "sink.e2e").max_ns < sane_age_ns);
  }
  if (job.rank() == 0) {
    RANK_CHECK(res.profile && res.profile->clocks.size() == 3);
    const std::string t = dflash::mpi::format_job_table(*res.profile);
    std::fputs(t.c_str(), stdout);
    // (the values were checked above; here, that the table says them with their sign and bound)
    RANK_CHECK(t.find("rank 1: clock offset to rank 0: +") != std::string::npos);
    RANK_CHECK(t.find("rank 2: clock offset to rank 0: -") != std::string::npos);
    RANK_CHECK(t.find(" us ± ") != std::string::npos);
    RANK_CHECK(t.find("~ estimated") == std::string::npos);
    RANK_CHECK(dflash::mpi::format_job_json(*res.profile).find("\"clocks\":[{\"rank\":0,") != std::string::npos);
  }
  return failures == 0 ? 0 : 1;
}

int broken(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  RANK_CHECK(job.size() == 2);
  skewed_clock::skew_ns = job.rank() == 1 ? -10'000'000'000 : 0;
  skewed_clock::backwards = job.rank() == 1;
  prof_of<one_hop> prof;
  job.start(prof);
  skewed_clock::backwards = false;  // the pipeline's own timers run on a sane (if skewed) clock
  const auto& c = job.clocks();
  RANK_CHECK(c.ranks.size() == 2);
  RANK_CHECK(c.ranks[0].ok);
  RANK_CHECK(!c.ranks[1].ok);
  RANK_CHECK(c.ranks[1].why.find("backwards") != std::string::npos);
  const std::int64_t got = run_placed<one_hop>(job, prof);
  const auto res = job.finish();
  RANK_CHECK(res.ok);
  const auto s = prof.snapshot();
  if (job.rank() == 1) {
    RANK_CHECK(got == items);
    // no usable offset (the guess is 0) and this clock is 10 s behind: every item reads behind its
    // stamp and is counted as such (once for its age, once for its e2e), none gets an age (a
    // negative one would print as a huge number)
    RANK_CHECK(row(s, "sink.age_clock_backwards").count == 2 * items);
    RANK_CHECK(row(s, "sink.age").count == 0);
  }
  if (job.rank() == 0) {
    RANK_CHECK(res.profile && res.profile->clocks.size() == 2);
    const std::string t = dflash::mpi::format_job_table(*res.profile);
    std::fputs(t.c_str(), stdout);
    RANK_CHECK(t.find("rank 1: clock offset to rank 0 could not be estimated: a clock read backwards") !=
                std::string::npos);
    RANK_CHECK(t.find("\nsink.age~ ") != std::string::npos);
    RANK_CHECK(t.find("\nsink.e2e~ ") != std::string::npos);
    RANK_CHECK(t.find("\nsink.work ") != std::string::npos);  // not an age: unmarked
    RANK_CHECK(t.find("~ estimated: a clock offset could not be estimated") != std::string::npos);
    const std::string js = dflash::mpi::format_job_json(*res.profile);
    RANK_CHECK(js.find("\"name\":\"sink.age\",") != std::string::npos);
    RANK_CHECK(js.find("\"estimated\":true") != std::string::npos);
    RANK_CHECK(js.find("\"ok\":false") != std::string::npos);
  }
  return failures == 0 ? 0 : 1;
}

int null_profiler(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  dflash::NullProfiler prof;
  job.start(prof);
  RANK_CHECK(job.clocks().ranks.empty());  // nothing stamps items: no exchange was made
  RANK_CHECK(job.finish().ok);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  watchdog wd("test_clock_offset " + mode, 30s);
  try {
    if (mode == "skew") return skew(argc, argv);
    if (mode == "broken") return broken(argc, argv);
    if (mode == "null") return null_profiler(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", dflash_test::this_rank, e.what());
    return 1;
  }
  std::fprintf(stderr, "test_clock_offset: unknown mode '%s' (skew, broken, null)\n", mode.c_str());
  return 2;
}
