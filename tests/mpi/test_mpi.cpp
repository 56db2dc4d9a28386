// MPI tests, one mode per ctest entry (tests/mpi/CMakeLists.txt runs each
// under mpirun). Every rank checks what it can; rank 0 checks the job-wide
// facts after gathering them. Exit 0 only if every check held on this rank.

#include <dflash/dflash.hpp>
#include <dflash/mpi.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <thread>
#include <type_traits>
#include <vector>

#include "gather_ints.hpp"
#include "rank_check.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;

namespace {

using dflash_test::failures;

// ---- items ----------------------------------------------------------------------
struct tick {  // trivially copyable: crosses as its bytes
  std::int32_t rank = -1;
  std::int32_t seq = -1;
  std::uint64_t check = 0;
};
std::uint64_t tick_check(int r, int s) { return (static_cast<std::uint64_t>(r) << 32) ^ (s * 2654435761u); }

struct blob {  // buffers by pointer and size, like the example's HS item
  std::int32_t rank = -1;
  std::int32_t seq = -1;
  std::vector<float> f;
  std::vector<std::uint8_t> u;
  double scale = 0;
};
blob make_blob(int r, int s) {
  blob b;
  b.rank = r;
  b.seq = s;
  b.f.resize(static_cast<std::size_t>((s * 37) % 300));  // 0 sometimes: an empty buffer is sent as none
  for (std::size_t i = 0; i < b.f.size(); ++i) b.f[i] = static_cast<float>(r * 1000 + s) + static_cast<float>(i) * 0.5f;
  b.u.resize(static_cast<std::size_t>((s * 13) % 7 + 1), static_cast<std::uint8_t>(s));
  b.scale = r + s * 0.25;
  return b;
}
bool blob_ok(const blob& b) {
  const blob want = make_blob(b.rank, b.seq);
  return b.f == want.f && b.u == want.u && b.scale == want.scale;
}
// A blob whose user-declared destructor suppresses the implicit move: every
// move copies it into new memory, so a link that kept pointers into an item
// it moved from would send freed memory.
struct blob_nomove : blob {
  ~blob_nomove() {}  // NOLINT: the point is that it suppresses the implicit move
};
static_assert(!std::is_nothrow_move_constructible_v<blob_nomove>);

}  // namespace

template <>
struct dflash::mpi::wire<blob> {
  static void for_each_field(blob& x, auto&& f) {
    f(x.rank);
    f(x.seq);
    f(x.f);
    f(x.u);
    f(x.scale);
  }
};

template <>
struct dflash::mpi::wire<blob_nomove> {
  static void for_each_field(blob_nomove& x, auto&& f) { dflash::mpi::wire<blob>::for_each_field(x, f); }
};

namespace {

// Same header length as blob (32 bytes), fields in another order: a consumer
// expecting it reads blob's rank and seq as a vector size.
struct blob_swapped {
  std::vector<float> f;
  std::int32_t rank = -1;
  std::int32_t seq = -1;
  std::vector<std::uint8_t> u;
  double scale = 0;
};

// An element whose default constructor writes nothing: a vector of 2 GiB of
// them is address space, not memory (pages are touched only if written).
struct lazy_byte {
  unsigned char b;
  lazy_byte() noexcept {}  // NOLINT: deliberately leaves b uninitialised
};
static_assert(std::is_trivially_copyable_v<lazy_byte>);
struct sized {
  std::int32_t rank = -1;
  std::int32_t seq = -1;
  std::vector<lazy_byte> v;
};
std::function<std::uint64_t()> g_link_received;  // the current run_link's consumer count
std::function<std::uint64_t()> g_link_queued;    // the current run_link's items not yet posted
std::size_t (*g_sized_bytes)(int rank, int seq) = [](int, int) -> std::size_t { return 0; };

}  // namespace

template <>
struct dflash::mpi::wire<blob_swapped> {
  static void for_each_field(blob_swapped& x, auto&& f) {
    f(x.f);
    f(x.rank);
    f(x.seq);
    f(x.u);
    f(x.scale);
  }
};
template <>
struct dflash::mpi::wire<sized> {
  static void for_each_field(sized& x, auto&& f) {
    f(x.rank);
    f(x.seq);
    f(x.v);
  }
};

namespace {

int ident(const blob_swapped& b) { return b.rank; }
int seq_of(const blob_swapped& b) { return b.seq; }
bool item_ok(const blob_swapped&) { return true; }
int ident(const sized& b) { return b.rank; }
int seq_of(const sized& b) { return b.seq; }
bool item_ok(const sized& b) { return b.v.size() == g_sized_bytes(b.rank, b.seq); }

int ident(const tick& t) { return t.rank; }
int ident(const blob& b) { return b.rank; }
int seq_of(const tick& t) { return t.seq; }
int seq_of(const blob& b) { return b.seq; }
template <class T>
T make(int r, int s) {
  if constexpr (std::is_same_v<T, tick>) {
    return tick{r, s, tick_check(r, s)};
  } else if constexpr (std::is_same_v<T, blob_swapped>) {
    blob_swapped x;
    x.rank = r;
    x.seq = s;
    return x;
  } else if constexpr (std::is_same_v<T, sized>) {
    sized x{r, s, {}};
    x.v.resize(g_sized_bytes(r, s));
    return x;
  } else if constexpr (std::is_same_v<T, blob_nomove>) {
    blob_nomove x;
    static_cast<blob&>(x) = make_blob(r, s);
    return x;
  } else {
    return make_blob(r, s);
  }
}
bool item_ok(const tick& t) { return t.check == tick_check(t.rank, t.seq); }
bool item_ok(const blob& b) { return blob_ok(b); }

// ---- stages -----------------------------------------------------------------
struct run_config {
  int items = 0;            // per producer; < 0: endless
  int throw_at = -1;        // the source (or the sink) throws at this item
  int slow_every = 0;       // the consumer sleeps 1 ms every this many items
  std::int64_t throw_ns = 0;  // steady_clock time of the throw
  int pause_every = 0;      // the producer sleeps pause_us every this many items
  int pause_us = 0;
};

template <dflash::ProfilerPolicy P, class T>
struct gen_source {
  static constexpr dflash::fixed_string name{"gen"};
  using input_type = void;
  using output_type = T;
  run_config* cfg;
  int rank;
  int next = 0;
  std::optional<T> operator()() {
    if (cfg->items >= 0 && next >= cfg->items) return std::nullopt;
    if (next == cfg->throw_at) {
      cfg->throw_ns = std::chrono::steady_clock::now().time_since_epoch().count();
      throw std::runtime_error("boom from rank " + std::to_string(rank));
    }
    if (cfg->pause_every && next % cfg->pause_every == cfg->pause_every - 1)
      std::this_thread::sleep_for(std::chrono::microseconds(cfg->pause_us));
    return make<T>(rank, next++);
  }
};

template <dflash::ProfilerPolicy P, class T>
struct collect_sink {
  static constexpr dflash::fixed_string name{"collect"};
  using input_type = T;
  using output_type = void;
  run_config* cfg;
  std::vector<std::pair<int, int>>* got;
  int* bad;
  void operator()(T&& x) {
    if (!item_ok(x)) ++*bad;
    got->emplace_back(ident(x), seq_of(x));
    if (static_cast<int>(got->size()) == cfg->throw_at) {
      cfg->throw_ns = std::chrono::steady_clock::now().time_since_epoch().count();
      throw std::runtime_error("boom from the consumer");
    }
    if (cfg->slow_every && got->size() % static_cast<std::size_t>(cfg->slow_every) == 0) std::this_thread::sleep_for(1ms);
  }
};

// After finish() nothing is received on the job's communicator any more: a
// message still there is one a link or the job left unmatched (its
// unsynchronised headers and credits must be ended by a synchronous one).
// Probes `tries` times (each probe also moves MPI's progress) and names the first.
bool left_unmatched(const dflash::mpi::job& job, int tries) {
  for (int k = 0; k < tries; ++k) {
    int pending = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, job.comm(), &pending, &st);
    if (!pending) continue;
    std::fprintf(stderr, "rank %d: a message from rank %d, tag %d, is left unmatched after finish()\n", job.rank(),
                 st.MPI_SOURCE, st.MPI_TAG);
    return true;
  }
  return false;
}

constexpr std::size_t depth = 4;
template <class T>
using link_t = dflash::mpi::mpi_link<T, "net", depth>;

template <class T>
struct pipes {
  template <class P>
  using producer = dflash::Pipeline<P, gen_source<P, T>, dflash::queue_link<"out_q", 4>, dflash::mpi::mpi_link_sink<P, link_t<T>>>;
  template <class P>
  using consumer = dflash::Pipeline<P, dflash::mpi::mpi_link_source<P, link_t<T>>, dflash::queue_link<"in_q", 4>, collect_sink<P, T>>;
  // One key set for every rank: both pipelines' keys.
  using keys = dflash::key_set_cat_t<dflash::pipeline_keys<producer<dflash::NullProfiler>>, dflash::pipeline_keys<consumer<dflash::NullProfiler>>>;
  using profiler = dflash::AccumulatingProfiler<keys>;
};

// Runs one link job: producers send cfg.items each, consumers collect.
// Returns what rank 0 needs: every (rank, seq) received anywhere.
template <class T>
struct link_run {
  std::vector<std::pair<int, int>> got;  // this rank's
  int bad = 0;
  bool ran_ok = false;
  dflash::mpi::job_result result;
  dflash::mpi::link_stats stats;
  std::int64_t end_ns = 0;
};

template <class T>
link_run<T> run_link(dflash::mpi::job& job, const std::vector<int>& producers, const std::vector<int>& consumers,
                     run_config& cfg, run_config& consumer_cfg, dflash::mpi::job_options opt = {}) {
  using S = pipes<T>;
  typename S::profiler prof;
  job.start(prof, std::move(opt));
  link_t<T> link(job, producers, consumers);
  g_link_received = [&link] { return link.stats().received; };
  g_link_queued = [&link] { return link.stats().queued; };
  link_run<T> out;
  if (link.is_producer()) {
    typename S::template producer<typename S::profiler> p(prof, gen_source<typename S::profiler, T>{&cfg, job.rank()},
                                                          dflash::mpi::mpi_link_sink<typename S::profiler, link_t<T>>{&link, prof});
    out.ran_ok = job.run(p);
  } else if (link.is_consumer()) {
    typename S::template consumer<typename S::profiler> p(
        prof, dflash::mpi::mpi_link_source<typename S::profiler, link_t<T>>{&link, prof},
        collect_sink<typename S::profiler, T>{&consumer_cfg, &out.got, &out.bad});
    out.ran_ok = job.run(p);
  }
  out.end_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  out.result = job.finish();
  out.stats = link.stats();
  g_link_received = nullptr;
  g_link_queued = nullptr;
  return out;
}

// Credits: for every producer p and consumer c, the credits p got back from c
// equal the items of p that c's source stage took (and c returned as many),
// and each producer handed `items` to MPI. After a clean finish() every credit
// has arrived (a consumer's FINAL waits for its credit sends to be matched).
template <class T>
void check_credits(const link_run<T>& r, const std::vector<int>& producers, const std::vector<int>& consumers,
                   int items) {
  const auto& st = r.stats;
  const std::size_t n = st.taken_from.size();
  std::vector<int> flat;
  for (auto* v : {&st.credits_from, &st.taken_from, &st.credits_to})
    for (auto x : *v) flat.push_back(static_cast<int>(x));
  flat.push_back(static_cast<int>(st.sent));
  const auto all = dflash_test::gather_ints(flat);
  if (dflash_test::this_rank != 0) return;
  const std::size_t per = 3 * n + 1;
  RANK_CHECK(all.size() == per * n);
  if (all.size() != per * n) return;
  auto credits_from = [&](int rank, int peer) { return all[static_cast<std::size_t>(rank) * per + static_cast<std::size_t>(peer)]; };
  auto taken_from = [&](int rank, int peer) { return all[static_cast<std::size_t>(rank) * per + n + static_cast<std::size_t>(peer)]; };
  auto credits_to = [&](int rank, int peer) { return all[static_cast<std::size_t>(rank) * per + 2 * n + static_cast<std::size_t>(peer)]; };
  for (int p : producers) {
    RANK_CHECK(all[static_cast<std::size_t>(p) * per + 3 * n] == items);
    int taken = 0;
    for (int c : consumers) {
      if (credits_from(p, c) != taken_from(c, p) || credits_to(c, p) != taken_from(c, p))
        std::fprintf(stderr, "producer %d, consumer %d: took %d items, returned %d credits, %d arrived\n", p, c,
                     taken_from(c, p), credits_to(c, p), credits_from(p, c));
      RANK_CHECK(credits_from(p, c) == taken_from(c, p));
      RANK_CHECK(credits_to(c, p) == taken_from(c, p));
      taken += taken_from(c, p);
    }
    RANK_CHECK(taken == items);
  }
}

// Every (p, s) for p in producers, s < items: exactly once over all consumers.
template <class T>
void check_exactly_once(link_run<T>& r, const std::vector<int>& producers, int items) {
  std::vector<int> flat;
  for (auto [p, s] : r.got) flat.insert(flat.end(), {p, s});
  const auto all = dflash_test::gather_ints(flat);
  if (dflash_test::this_rank != 0) return;
  std::map<std::pair<int, int>, int> seen;
  for (std::size_t i = 0; i + 1 < all.size(); i += 2) ++seen[{all[i], all[i + 1]}];
  std::size_t expected = 0;
  for (int p : producers)
    for (int s = 0; s < items; ++s) {
      ++expected;
      const auto it = seen.find({p, s});
      RANK_CHECK(it != seen.end() && it->second == 1);
    }
  RANK_CHECK(seen.size() == expected);       // nothing that was not sent
  RANK_CHECK(all.size() == 2 * expected);    // nothing twice
}

// ---- modes --------------------------------------------------------------------
struct wait_source {  // ends once *done says so
  static constexpr dflash::fixed_string name{"wait"};
  using input_type = void;
  using output_type = int;
  std::function<bool()>* done;
  std::optional<int> operator()() {
    while (!(*done)()) std::this_thread::sleep_for(1ms);
    return std::nullopt;
  }
};
struct drop_sink {
  static constexpr dflash::fixed_string name{"drop"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};
template <class P>
using wait_pipe = dflash::Pipeline<P, wait_source, dflash::queue_link<"wait_q", 1>, drop_sink>;

int aggregate(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  const int n = job.size();
  // Bad input: a link naming a rank outside the job is refused with a clear error.
  try {
    link_t<tick> bad(job, {0}, {n});
    RANK_CHECK(false);
  } catch (const std::invalid_argument& e) {
    RANK_CHECK(std::string(e.what()).find("not in the job") != std::string::npos);
  }
  using profiler = dflash::AccumulatingProfiler<dflash::key_set_cat_t<dflash::key_set<"a", "b">, dflash::pipeline_keys<wait_pipe<dflash::NullProfiler>>>>;
  profiler prof;
  // rank r: r + 1 records of "a" lasting (r + 1) ms each; rank r records "b" only if r is odd.
  const int r = job.rank();
  for (int i = 0; i <= r; ++i) prof.add(dflash::key<"a">, std::chrono::milliseconds(r + 1));
  if (r % 2) prof.add(dflash::key<"b">, 3ms);
  const auto mine = prof.snapshot();
  // Periodic reports: rank 0 waits for one that has heard every rank; its merged
  // count must then be the final one (nothing is recorded after this point).
  std::atomic<std::uint64_t> periodic_count{0};
  std::atomic<bool> heard_all{false};
  dflash::mpi::job_options opt;
  opt.report_interval = 5ms;
  opt.on_report = [&](const dflash::mpi::job_profile& j) {  // rank 0, progress thread
    RANK_CHECK(j.ranks.size() == static_cast<std::size_t>(n));
    if (heard_all.load()) return;
    if (std::all_of(j.heard.begin(), j.heard.end(), [](bool h) { return h; })) {
      periodic_count = j.merged().keys[0].count;
      heard_all = true;
    }
  };
  job.start(prof, opt);
  // Reports flow while a run() (or finish()) is in progress: a pipeline whose
  // source ends once they did. No timing bound: a hang fails the watchdog.
  std::function<bool()> done = [&] { return r == 0 ? heard_all.load() : job.periodic_reports() >= 1; };
  wait_pipe<profiler> p(prof, wait_source{&done}, drop_sink{});
  RANK_CHECK(job.run(p));
  auto res = job.finish();
  RANK_CHECK(res.ok);
  if (r == 0) {
    RANK_CHECK(res.profile.has_value());
    const auto& j = *res.profile;
    RANK_CHECK(j.ranks.size() == static_cast<std::size_t>(n));
    const auto m = j.merged();
    std::uint64_t count = 0, total = 0;
    for (int k = 0; k < n; ++k) {
      count += static_cast<std::uint64_t>(k + 1);
      total += static_cast<std::uint64_t>(k + 1) * static_cast<std::uint64_t>(k + 1) * 1'000'000;
    }
    RANK_CHECK(m.keys[0].name == "a");
    RANK_CHECK(m.keys[0].count == count);
    RANK_CHECK(m.keys[0].total_ns == total);
    RANK_CHECK(m.keys[0].min_ns == 1'000'000);
    RANK_CHECK(m.keys[0].max_ns == static_cast<std::uint64_t>(n) * 1'000'000);
    std::uint64_t hist = 0;
    for (auto b : m.keys[0].buckets) hist += b;
    RANK_CHECK(hist == count);
    for (int k = 0; k < n; ++k) RANK_CHECK(j.ranks[static_cast<std::size_t>(k)].keys[0].count == static_cast<std::uint64_t>(k + 1));
    RANK_CHECK(j.ranks[0].keys[0].total_ns == mine.keys[0].total_ns);
    RANK_CHECK(m.keys[1].count == static_cast<std::uint64_t>(n / 2));
    const auto sp = j.spread_of(0);
    RANK_CHECK(sp.slowest_rank == n - 1);
    RANK_CHECK(sp.ranks_with_key == static_cast<std::size_t>(n));
    RANK_CHECK(sp.min_mean_ns == 1e6 && sp.max_mean_ns == n * 1e6);
    RANK_CHECK(j.spread_of(1).ranks_with_key == static_cast<std::size_t>(n / 2));  // ranks without "b" left out
    const auto table = dflash::mpi::format_job_table(j);
    std::fputs(table.c_str(), stdout);
    RANK_CHECK(table.find(dflash::mpi::detail::rank_label(n - 1)) != std::string::npos);
    const auto js = nlohmann::json::parse(dflash::mpi::format_job_json(j));
    RANK_CHECK(js["ranks"] == n);
    RANK_CHECK(js["merged"]["keys"][0]["count"] == count);
    RANK_CHECK(js["keys"][0]["slowest_rank"] == n - 1);
    RANK_CHECK(js["keys"][0]["per_rank"].size() == static_cast<std::size_t>(n));
    RANK_CHECK(js["errors"].empty());
    RANK_CHECK(periodic_count.load() == count);
  }
  return failures;
}

template <class T>
int exactly_once(int argc, char** argv, bool multi) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  // several producers -> one consumer, or two producers -> two consumers
  const std::vector<int> producers = multi ? std::vector<int>{0, 1} : std::vector<int>{1, 2, 3};
  const std::vector<int> consumers = multi ? std::vector<int>{2, 3} : std::vector<int>{0};
  const int items = multi ? 600 : 2000;
  run_config cfg{items, -1, 0, 0}, ccfg{-1, -1, 25, 0};  // a slowish consumer: backpressure engages
  auto r = run_link<T>(job, producers, consumers, cfg, ccfg);
  RANK_CHECK(r.ran_ok);
  RANK_CHECK(r.result.ok);
  RANK_CHECK(r.bad == 0);
  // Measured on the receiving side: never more than depth items of one producer held here.
  RANK_CHECK(r.stats.max_buffered_per_producer <= depth);
  if (!multi && dflash_test::this_rank == 0) RANK_CHECK(r.stats.max_buffered_per_producer >= 1);
  check_exactly_once(r, producers, items);
  check_credits(r, producers, consumers, items);
  if (dflash_test::this_rank == 0) {
    const auto m = r.result.profile->merged();
    const auto* sent = m.find("net.send.work");
    RANK_CHECK(sent && sent->count == producers.size() * static_cast<std::size_t>(items));
    std::fputs(dflash::mpi::format_job_table(*r.result.profile).c_str(), stdout);
  }
  return failures;
}

// Credits in batches: fast producers, a consumer that is slow in bursts, and
// a progress thread on the consumer rank that stalls now and then (on_report
// runs there) until the source stage took two items, so their credits go back
// as one message. Every credit must still be counted: per producer, credits
// returned == items consumed (a consumer returning one credit per message
// starves the producers of credits and fails here or hangs the watchdog).
int credit_batches(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  const std::vector<int> producers{1, 2}, consumers{0};
  const int items = 200;
  run_config cfg{items, -1, 0, 0}, ccfg{-1, -1, 25, 0};
  dflash::mpi::job_options opt;
  if (dflash_test::this_rank == 0) {
    opt.report_interval = 5ms;
    opt.on_report = [&job](const dflash::mpi::job_profile&) {
      if (!g_link_received || job.stopped()) return;
      const auto from = g_link_received();
      // Bounded: near the end fewer than two items may be left to take.
      const auto until = std::chrono::steady_clock::now() + 3ms;
      while (g_link_received() < from + 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    };
  }
  auto r = run_link<tick>(job, producers, consumers, cfg, ccfg, std::move(opt));
  RANK_CHECK(r.ran_ok);
  RANK_CHECK(r.result.ok);
  RANK_CHECK(r.bad == 0);
  check_exactly_once(r, producers, items);
  check_credits(r, producers, consumers, items);
  if (dflash_test::this_rank == 0) {
    std::printf("largest credit batch: %llu\n", static_cast<unsigned long long>(r.stats.max_credit_batch));
    RANK_CHECK(r.stats.max_credit_batch >= 2);  // the test exercised batches
  }
  return failures;
}

// Aggregation: the producer's progress thread is held (rank 0's on_report runs
// there) until the sink has handed over at least two items; they must then go
// as one header message (one message per item fails here).
int batches(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  const int items = 400;
  run_config cfg{items, -1, 0, 0}, ccfg{-1, -1, 0, 0};
  dflash::mpi::job_options opt;
  if (dflash_test::this_rank == 0) {
    opt.report_interval = 2ms;
    opt.on_report = [&job](const dflash::mpi::job_profile&) {
      if (!g_link_queued || job.stopped()) return;
      const auto until = std::chrono::steady_clock::now() + 20ms;  // bounded: near the end fewer are left
      while (g_link_queued() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    };
  }
  auto r = run_link<tick>(job, {0}, {1}, cfg, ccfg, std::move(opt));
  RANK_CHECK(r.ran_ok);
  RANK_CHECK(r.result.ok);
  RANK_CHECK(r.bad == 0);
  check_exactly_once(r, {0}, items);
  check_credits(r, {0}, {1}, items);
  if (dflash_test::this_rank == 0) {
    std::printf("largest batch: %llu items\n", static_cast<unsigned long long>(r.stats.max_batch));
    RANK_CHECK(r.stats.max_batch >= 2);
    RANK_CHECK(r.stats.max_batch <= depth);  // never more than the credit window
  }
  return failures;
}

// Batch headers and credits go unsynchronised (MPI_Isend); the link ends each
// such stream with a synchronous message before its rank says FINAL. After
// finish() on every rank nothing of a link may be left unmatched on the job's
// communicator: neither with a producer that closed (FIN ends its headers)
// nor with one that only stopped sending (a marker ends them), nor for the
// consumer's credits. Endpoints used directly, as a benchmark or a custom
// loop does, without job::run.
int all_matched(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  dflash::mpi::mpi_link<tick, "am_open", depth> open(job, {0}, {1});
  dflash::mpi::mpi_link<tick, "am_closed", depth> closed(job, {0}, {1});
  const int items = 997;  // not a multiple of the credit batch: some credits are still due at the end
  dflash::NullProfiler np;
  if (job.rank() == 0) {
    for (int i = 0; i < items; ++i) {
      open.send(tick{0, i, 0}, np);
      closed.send(tick{0, i, 0}, np);
    }
    closed.close();
  } else {
    std::int32_t next_open = 0, next_closed = 0;
    for (int i = 0; i < items; ++i) {
      auto a = open.receive(np);
      RANK_CHECK(a && a->seq == next_open++);
      auto b = closed.receive(np);
      RANK_CHECK(b && b->seq == next_closed++);
    }
    RANK_CHECK(!closed.receive(np));  // FIN
  }
  (void)job.finish();
  MPI_Barrier(job.comm());  // every rank finished: whatever it sent is on its way
  RANK_CHECK(!left_unmatched(job, 2000));
  return failures;
}

// The program's own MPI calls under MPI_THREAD_SERIALIZED (the level the job
// asks for): while job.lock_mpi() is held the job makes no pass and no link
// drives itself, so a collective on the program's communicator cannot meet a
// call of the job's; once released, the job goes on and a link still carries
// every item. Each round waits for the link to settle (mpi_link::settled) first.
int lock_mpi(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  dflash::mpi::mpi_link<tick, "lm", depth> link(job, {0}, {1});
  dflash::NullProfiler np;
  for (int round = 0; round < 3; ++round) {
    int sum = 0, one = 1;
    // The previous round's traffic first: a rank that locks with its items or
    // credits pending stalls its peer (this rank knows it sent or received them all).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!link.settled() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    RANK_CHECK(link.settled());
    {
      auto lk = job.lock_mpi();
      const auto passes = job.progress_passes();
      job.wake();  // a pass is due at once: only the lock holds it back
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      RANK_CHECK(job.progress_passes() == passes);
      MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      RANK_CHECK(job.progress_passes() == passes);
    }
    RANK_CHECK(sum == job.size());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    const auto before = job.progress_passes();
    while (job.progress_passes() == before && std::chrono::steady_clock::now() < until) {
      job.wake();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    RANK_CHECK(job.progress_passes() > before);  // released: the job goes on
    const int items = 3 * static_cast<int>(depth);  // more than one credit window: credits must flow
    if (job.rank() == 0) {
      for (int i = 0; i < items; ++i) link.send(tick{0, round * items + i, 0}, np);
    } else {
      for (int i = 0; i < items; ++i) {
        auto x = link.receive(np);
        RANK_CHECK(x && x->seq == round * items + i);
      }
    }
  }
  if (job.rank() == 0) link.close();
  else RANK_CHECK(!link.receive(np));
  RANK_CHECK(job.finish().ok);
  return failures;
}

// Items of 200 KiB that cross as their bytes: a window of them is more than
// one header message may carry (1 MiB), so the producer splits what it posts,
// and the consumer (which keeps one header message's receive posted) gets
// every item once, in order and intact.
struct wide {
  std::int64_t seq = -1;
  std::array<std::uint64_t, 25599> fill{};  // 200 KiB in all
};
int wide_headers(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  constexpr std::size_t wide_depth = 8;  // 1.6 MiB of headers in a full window
  dflash::mpi::mpi_link<wide, "wide", wide_depth> link(job, {0}, {1});
  dflash::NullProfiler np;
  const int items = 40;
  auto expect = std::make_unique<wide>();
  auto fill = [](wide& w, std::int64_t seq) {
    w.seq = seq;
    for (std::size_t k = 0; k < w.fill.size(); ++k) w.fill[k] = static_cast<std::uint64_t>(seq) * 1000003u + k;
  };
  if (job.rank() == 0) {
    for (int i = 0; i < items; ++i) {
      auto w = std::make_unique<wide>();
      fill(*w, i);
      link.send(std::move(*w), np);
    }
    link.close();
  } else {
    for (int i = 0; i < items; ++i) {
      auto x = link.receive(np);
      fill(*expect, i);
      RANK_CHECK(x && x->seq == i);
      if (x) RANK_CHECK(std::memcmp(x->fill.data(), expect->fill.data(), sizeof x->fill) == 0);
    }
    RANK_CHECK(!link.receive(np));
  }
  const auto st = link.stats();
  if (job.rank() == 0) {
    std::printf("%llu header messages, the largest with %llu items of %zu bytes\n",
                static_cast<unsigned long long>(st.batches), static_cast<unsigned long long>(st.max_batch),
                sizeof(wide));
    RANK_CHECK(st.max_batch >= 1);
    RANK_CHECK(st.max_batch * (sizeof(wide) + 8) + 5 <= (std::size_t{1} << 20));
  }
  RANK_CHECK(job.finish().ok);
  return failures;
}

// An item type with a user-declared destructor has no move constructor: every
// "move" copies it, into new vector memory. The link must send each buffer
// from the item it keeps until the send completes, not from one it moved (or
// copied) elsewhere and let go: each item's values arrive intact.
struct copied_on_move {
  std::int64_t seq = -1;
  std::vector<std::uint64_t> v;
  ~copied_on_move() {}  // NOLINT: the point is that it suppresses the implicit move
};
}  // namespace
template <>
struct dflash::mpi::wire<copied_on_move> {
  static void for_each_field(copied_on_move& x, auto&& f) {
    f(x.seq);
    f(x.v);
  }
};
namespace {
int copied_items(int argc, char** argv) {
  static_assert(!std::is_nothrow_move_constructible_v<copied_on_move>, "the item must copy when moved");
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  dflash::mpi::mpi_link<copied_on_move, "copied", depth> link(job, {0}, {1});
  dflash::NullProfiler np;
  const int items = 400;
  const std::size_t n = 2048;  // 16 KiB a buffer: freed memory is soon handed out again
  auto value = [](std::int64_t seq, std::size_t k) { return static_cast<std::uint64_t>(seq) * 1000003u + k; };
  if (job.rank() == 0) {
    for (int i = 0; i < items; ++i) {
      copied_on_move x;
      x.seq = i;
      x.v.resize(n);
      for (std::size_t k = 0; k < n; ++k) x.v[k] = value(i, k);
      link.send(std::move(x), np);
    }
    link.close();
  } else {
    int bad = 0;
    for (int i = 0; i < items; ++i) {
      auto x = link.receive(np);
      RANK_CHECK(x && x->seq == i && x->v.size() == n);
      if (!x || x->v.size() != n) continue;
      for (std::size_t k = 0; k < n; ++k)
        if (x->v[k] != value(i, k)) {
          ++bad;
          break;
        }
    }
    std::printf("%d of %d items arrived with other values\n", bad, items);
    RANK_CHECK(bad == 0);
    RANK_CHECK(!link.receive(np));
  }
  RANK_CHECK(job.finish().ok);
  return failures;
}

// An item whose scalars alone are over what one header message carries (a
// trivially copyable one is refused at compile time): send() refuses it with
// the reason and the fix, before anything is posted, and the job ends normally.
struct huge {
  std::int64_t seq = -1;
  std::array<std::uint64_t, (std::size_t{1} << 17) + 1> a{};  // just over 1 MiB
  std::vector<std::uint8_t> tail;
};
}  // namespace
template <>
struct dflash::mpi::wire<huge> {
  static void for_each_field(huge& x, auto&& f) {
    f(x.seq);
    f(x.a);
    f(x.tail);
  }
};
namespace {
int header_limit(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  dflash::mpi::mpi_link<huge, "huge", depth> link(job, {0}, {1});
  dflash::NullProfiler np;
  if (job.rank() == 0) {
    auto big = std::make_unique<huge>();
    std::string what;
    try {
      link.send(std::move(*big), np);
    } catch (const std::length_error& e) {
      what = e.what();
    }
    std::printf("send refused: %s\n", what.c_str());
    RANK_CHECK(what.find("\"huge\": an item's header") != std::string::npos);
    RANK_CHECK(what.find("std::vector field") != std::string::npos);
    RANK_CHECK(link.stats().sent == 0);
    link.close();
  } else {
    RANK_CHECK(!link.receive(np));  // nothing arrives: the refused item never left
  }
  RANK_CHECK(job.finish().ok);
  return failures;
}

// A blocked send or receive makes its link's MPI calls itself (job::drive)
// rather than handing each item or credit to the progress thread: on both
// ranks stage threads drove the link, and every item still arrived once.
int driven(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  const int items = 600;  // a fraction of a second, also on a loaded machine (the watchdog allows 15 s)
  run_config cfg{items, -1, 0, 0, 0, 0}, ccfg{-1, -1, 0, 0, 0, 0};
  auto r = run_link<tick>(job, {0}, {1}, cfg, ccfg);
  RANK_CHECK(r.ran_ok);
  RANK_CHECK(r.result.ok);
  RANK_CHECK(r.bad == 0);
  check_exactly_once(r, {0}, items);
  check_credits(r, {0}, {1}, items);
  std::printf("rank %d: %llu passes driven by stage threads\n", dflash_test::this_rank, static_cast<unsigned long long>(r.stats.driven));
  RANK_CHECK(r.stats.driven > 0);
  return failures;
}

// close() while another thread's send() waits for a credit: that send throws,
// never returns as if its item went (FIN may be out before it, and the item
// would reach a consumer that has ended). The consumer takes nothing (so no
// credit comes back) until a token on a second link says close() was called.
int close_while_sending(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  dflash::mpi::mpi_link<tick, "close_race", 1> link(job, {0}, {1});
  dflash::mpi::mpi_link<tick, "closed_now", 1> token(job, {0}, {1});
  dflash::NullProfiler np;
  if (dflash_test::this_rank == 0) {
    link.send(tick{0, 0, tick_check(0, 0)}, np);  // takes the only credit
    std::atomic<int> outcome{0};                  // 1: returned, 2: threw logic_error
    std::thread blocked([&] {
      try {
        link.send(tick{0, 1, tick_check(0, 1)}, np);  // waits for the credit of item 0
        outcome = 1;
      } catch (const std::logic_error&) {
        outcome = 2;
      }
    });
    std::this_thread::sleep_for(100ms);  // most likely waiting by now (if not, it throws at once: also right)
    link.close();
    token.send(tick{0, 0, tick_check(0, 0)}, np);
    token.close();
    blocked.join();
    RANK_CHECK(outcome == 2);
  } else {
    RANK_CHECK(token.receive(np).has_value());  // close() was called
    int got = 0;
    while (auto t = link.receive(np)) {
      RANK_CHECK(t->seq == got && t->check == tick_check(0, t->seq));
      ++got;
    }
    RANK_CHECK(got == 1);  // the one send() that returned
    RANK_CHECK(!token.receive(np).has_value());
  }
  RANK_CHECK(job.finish().ok);
  return failures;
}

// Reuse and close without a pipeline: the producer refills the items whose
// send completed (take_sent) and closes; the consumer gives every item back
// (recycle), so the vectors it receives into come from a few allocations, not
// one per item. Contents and order are checked item by item.
int reuse(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  link_t<blob> link(job, {0}, {1});
  dflash::NullProfiler np;
  const int items = 300;
  if (dflash_test::this_rank == 0) {
    int reused = 0;
    for (int i = 0; i < items; ++i) {
      blob b = make_blob(0, i);
      if (auto old = link.take_sent()) {
        ++reused;
        RANK_CHECK(old->rank == 0 && old->seq < i && blob_ok(*old));  // a sent item, intact
        old->f.assign(b.f.begin(), b.f.end());  // refill the old vectors (sizes differ per item)
        old->u.assign(b.u.begin(), b.u.end());
        old->seq = b.seq;
        old->scale = b.scale;
        b = std::move(*old);
      }
      link.send(std::move(b), np);
    }
    std::printf("producer reused %d of %d items\n", reused, items);
    RANK_CHECK(reused > 0);
    link.close();
    bool threw = false;
    try {
      link.send(make_blob(0, items), np);
    } catch (const std::logic_error&) {
      threw = true;
    }
    RANK_CHECK(threw);  // send after close
  } else {
    int n = 0, roomy = 0;
    while (auto b = link.receive(np)) {
      RANK_CHECK(b->seq == n && blob_ok(*b));
      roomy += b->f.capacity() > b->f.size();  // a fresh vector sized on receipt has no spare room
      ++n;
      link.recycle(std::move(*b));
    }
    RANK_CHECK(n == items);
    std::printf("consumer: %d of %d items arrived in recycled vectors with room to spare\n", roomy, n);
    RANK_CHECK(roomy > 0);
  }
  RANK_CHECK(job.finish().ok);
  return failures;
}

// Close / drain: one producer finishes at once with nothing to send, another
// sends slowly; the consumer must not close before the last FIN and item.
int drain(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  const int items = job.rank() == 1 ? 0 : 400;
  run_config cfg{items, -1, 0, 0}, ccfg{-1, -1, 0, 0};
  auto r = run_link<blob>(job, {1, 2}, {0}, cfg, ccfg);
  RANK_CHECK(r.ran_ok);
  RANK_CHECK(r.result.ok);
  if (dflash_test::this_rank == 0) RANK_CHECK(r.got.size() == 400u);
  std::vector<int> flat;
  for (auto [p, s] : r.got) flat.insert(flat.end(), {p, s});
  const auto all = dflash_test::gather_ints(flat);
  if (dflash_test::this_rank == 0) {
    std::set<std::pair<int, int>> seen;
    for (std::size_t i = 0; i + 1 < all.size(); i += 2) seen.insert({all[i], all[i + 1]});
    RANK_CHECK(seen.size() == 400u);
    RANK_CHECK(!seen.empty() && seen.begin()->first == 2 && seen.rbegin()->second == 399);
  }
  check_credits(r, {2}, {0}, 400);
  return failures;
}

// A throwing rank stops every rank within 1 s (the bound; typically
// milliseconds), every rank learns the job failed, rank 0 names the error.
int throwing(int argc, char** argv, bool producer_throws) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  const std::vector<int> producers = producer_throws ? std::vector<int>{1, 2, 3} : std::vector<int>{1, 2};
  run_config cfg{-1, -1, 0, 0}, ccfg{-1, -1, 2, 0};  // endless sources: only a stop ends this job
  if (producer_throws && job.rank() == 2) cfg.throw_at = 200;
  if (!producer_throws) ccfg.throw_at = 300;
  auto r = run_link<tick>(job, producers, {0}, cfg, ccfg);
  const bool thrower = producer_throws ? job.rank() == 2 : job.rank() == 0;
  RANK_CHECK(r.ran_ok == !thrower);
  RANK_CHECK(!r.result.ok);  // on every rank
  RANK_CHECK(r.result.stopped_early);
  RANK_CHECK(r.stats.receiving == 0);  // nothing of the stopped run is still being received at MPI_Finalize
  const std::int64_t throw_ns = producer_throws ? cfg.throw_ns : ccfg.throw_ns;
  std::vector<std::int64_t> ends(static_cast<std::size_t>(job.size())), throws(static_cast<std::size_t>(job.size()));
  MPI_Gather(&r.end_ns, 1, MPI_INT64_T, ends.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  MPI_Gather(&throw_ns, 1, MPI_INT64_T, throws.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (dflash_test::this_rank == 0) {
    const std::int64_t t0 = *std::max_element(throws.begin(), throws.end());
    RANK_CHECK(t0 > 0);
    const std::int64_t last = *std::max_element(ends.begin(), ends.end());
    const double s = static_cast<double>(last - t0) / 1e9;
    std::printf("last rank stopped %.3f ms after the throw\n", s * 1e3);
    RANK_CHECK(s < 1.0);  // steady_clock is CLOCK_MONOTONIC, one clock for every process on this machine
    std::printf("rank 0 reports: %s\n", r.result.error.c_str());
    const std::string want = producer_throws ? "rank 2: boom from rank 2" : "rank 0: boom from the consumer";
    RANK_CHECK(r.result.error == want);  // only the thrower's error, none from the ranks it stopped
    RANK_CHECK(r.result.profile && !r.result.profile->errors[producer_throws ? 2 : 0].empty());
  }
  return failures;
}

// An item buffer over MPI's 2 GiB count limit: the producer's sink stage
// fails with the reason (not the progress thread, where it was swallowed and
// the job hung); every rank ends, rank 0 names the rank.
int oversize(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  g_sized_bytes = [](int, int seq) -> std::size_t { return seq == 3 ? (std::size_t{1} << 31) + 8 : 16; };
  run_config cfg{-1, -1, 0, 0}, ccfg{-1, -1, 0, 0};  // endless: only the error ends the job
  auto r = run_link<sized>(job, {1}, {0}, cfg, ccfg);
  RANK_CHECK(r.ran_ok == (dflash_test::this_rank != 1));
  RANK_CHECK(!r.result.ok);
  RANK_CHECK(r.bad == 0);
  if (dflash_test::this_rank == 0) {
    std::printf("rank 0 reports: %s\n", r.result.error.c_str());
    RANK_CHECK(r.result.error.find("rank 1: ") == 0);
    RANK_CHECK(r.result.error.find("2 GiB") != std::string::npos);
    RANK_CHECK(r.got.size() <= 3u);  // at most the items before the big one (the stop may drop some)
    for (auto [p, q] : r.got) RANK_CHECK(p == 1 && q < 3);
  }
  return failures;
}

// Producers send blob, the consumer expects blob_swapped (same header length,
// its first field a vector): the consumer rejects the items before it
// allocates anything, and the job ends with its reason.
int layout_mismatch(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  run_config cfg{50, -1, 0, 0}, ccfg{-1, -1, 0, 0};
  bool ran = false;
  dflash::mpi::job_result res;
  if (dflash_test::this_rank == 0) {
    auto r = run_link<blob_swapped>(job, {1, 2}, {0}, cfg, ccfg);
    ran = r.ran_ok;
    res = r.result;
  } else {
    auto r = run_link<blob>(job, {1, 2}, {0}, cfg, ccfg);
    ran = r.ran_ok;
    res = r.result;
  }
  RANK_CHECK(ran);  // no stage threw: the progress thread found the error
  RANK_CHECK(!res.ok);
  if (dflash_test::this_rank == 0) {
    std::printf("rank 0 reports: %s\n", res.error.c_str());
    RANK_CHECK(res.error.find("rank 0: ") == 0);
    RANK_CHECK(res.error.find("wire<T>") != std::string::npos);
  }
  return failures;
}

// An exception leaves the scope of a running job on rank 1 (the consumer,
// after its pipeline ended early): ~job must finish with an error so the other
// ranks end, with the profiler declared before the job or after it. AfterEnd:
// every pipeline ends normally and rank 1 throws only once the others are
// likely inside finish() with their FINAL sent, so its STOP comes late.
struct stop_early {  // the consumer's pipeline ends early (no error), then its rank throws
  static constexpr dflash::fixed_string name{"collect"};
  using input_type = tick;
  using output_type = void;
  int stop_at = 50;
  int n = 0;
  void operator()(tick&&) {
    if (++n == stop_at) throw dflash::pipeline_stop{};
  }
};
template <bool ProfFirst, bool AfterEnd = false>
void unwind_scope(int argc, char** argv, int& rank) {
  using S = pipes<tick>;
  using P = typename S::profiler;
  std::optional<P> early;
  if constexpr (ProfFirst) early.emplace();
  dflash::mpi::job job(argc, argv);
  std::optional<P> late;
  if constexpr (!ProfFirst) late.emplace();
  P& prof = ProfFirst ? *early : *late;
  rank = dflash_test::this_rank = job.rank();
  dflash::mpi::job_options opt;
  opt.report_interval = 1ms;  // periodic snapshots of prof keep coming
  opt.on_report = [](const dflash::mpi::job_profile&) {};
  job.start(prof, opt);
  std::vector<int> producers;
  for (int r = 0; r < job.size(); ++r)
    if (r != 1) producers.push_back(r);
  link_t<tick> link(job, producers, {1});
  run_config cfg{AfterEnd ? 100 : -1, -1, 0, 0};
  if (link.is_producer()) {
    S::producer<P> p(prof, gen_source<P, tick>{&cfg, job.rank()}, dflash::mpi::mpi_link_sink<P, link_t<tick>>{&link, prof});
    RANK_CHECK(job.run(p));
  } else {
    dflash::Pipeline<P, dflash::mpi::mpi_link_source<P, link_t<tick>>, dflash::queue_link<"in_q", 4>, stop_early> p(
        prof, dflash::mpi::mpi_link_source<P, link_t<tick>>{&link, prof}, stop_early{AfterEnd ? -1 : 50});
    RANK_CHECK(job.run(p));
    if (AfterEnd) std::this_thread::sleep_for(100ms);  // the others reach finish(); no bound is asserted
    throw std::runtime_error("rank 1 fails after its pipeline");
  }
  const auto res = job.finish();
  RANK_CHECK(!res.ok);
  if (rank == 0) {
    std::printf("rank 0 reports: %s\n", res.error.c_str());
    RANK_CHECK(res.error.find("rank 1: ") == 0);
    RANK_CHECK(res.error.find("finish()") != std::string::npos);
  }
}
template <bool ProfFirst, bool AfterEnd = false>
int unwind(int argc, char** argv) {
  int rank = -1;
  try {
    unwind_scope<ProfFirst, AfterEnd>(argc, argv, rank);
    RANK_CHECK(rank != 1);
  } catch (const std::runtime_error& e) {
    RANK_CHECK(rank == 1 && std::string(e.what()) == "rank 1 fails after its pipeline");
  }
  return failures;
}

// MPI initialised by the test with MPI_THREAD_MULTIPLE, for a rank that makes
// MPI calls of its own while its job runs; false (after a message) where MPI
// does not provide it.
bool init_thread_multiple(int& argc, char**& argv, const char* mode) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided >= MPI_THREAD_MULTIPLE) return true;
  std::fprintf(stderr, "%s: needs MPI_THREAD_MULTIPLE\n", mode);
  MPI_Finalize();
  return false;
}

// Something the progress thread cannot recover from (here a header on the
// link's tag that no mpi_link sent: the consumer cannot tell how many buffer
// messages follow): that rank names itself and the reason and aborts the job,
// so every rank ends (ctest expects MPI_Abort's exit code and the message).
int fatal_progress(int argc, char** argv) {
  if (!init_thread_multiple(argc, argv, "fatal_progress")) return 1;  // rank 1 sends while the job runs
  {
    dflash::mpi::job job(argc, argv);
    dflash_test::this_rank = job.rank();
    run_config cfg{-1, -1, 0, 0}, ccfg{-1, -1, 0, 0};
    if (dflash_test::this_rank == 1) {
      typename pipes<tick>::profiler prof;
      job.start(prof);  // no pipeline here: only the bad message
      const unsigned char garbage[2] = {7, 7};
      MPI_Send(garbage, 2, MPI_BYTE, 0, dflash::mpi::detail::link_core<tick, "net", depth>::tag_base_, job.comm());
      (void)job.finish();  // never returns: rank 0 aborts the job
    } else {
      (void)run_link<tick>(job, {1}, {0}, cfg, ccfg);
    }
  }
  MPI_Finalize();
  std::fprintf(stderr, "rank %d: the job was not aborted\n", dflash_test::this_rank);
  return 1;
}

// A producer built with another version of the link's frame (here rank 1
// posing as one: a batch header of the next version, one item with one
// buffer): the consumer cannot read the batch, so it fails the job naming
// both versions, and receives and drops the buffer (rank 1's synchronous send
// of it completes), so every rank ends.
int frame_version(int argc, char** argv) {
  if (!init_thread_multiple(argc, argv, "frame_version")) return 1;  // rank 1 sends while the job runs
  {
    using frame = dflash::mpi::detail::link_frame;
    using tags = dflash::mpi::detail::link_tags<"net">;
    constexpr unsigned other = frame::protocol_version + 1u;
    dflash::mpi::job job(argc, argv);
    dflash_test::this_rank = job.rank();
    run_config cfg{-1, -1, 0, 0}, ccfg{-1, -1, 0, 0};
    dflash::mpi::job_result res;
    if (dflash_test::this_rank == 1) {
      typename pipes<tick>::profiler prof;
      job.start(prof);  // no pipeline here: only the batch of another version
      std::vector<std::byte> h{std::byte{frame::batch_marker}, std::byte{static_cast<unsigned char>(other)}};
      for (std::uint32_t w : {1u, 1u, 8u}) {  // count, then the item's buffers and header length
        const auto* p = reinterpret_cast<const std::byte*>(&w);
        h.insert(h.end(), p, p + sizeof w);
      }
      h.resize(h.size() + 8);
      MPI_Send(h.data(), static_cast<int>(h.size()), MPI_BYTE, 0, tags::header, job.comm());
      const std::uint64_t buffer = 7;
      MPI_Ssend(&buffer, sizeof buffer, MPI_BYTE, 0, tags::buffer, job.comm());  // returns once rank 0 took it
      res = job.finish();
    } else {
      auto r = run_link<tick>(job, {1}, {0}, cfg, ccfg);
      RANK_CHECK(r.got.empty());
      res = r.result;
    }
    RANK_CHECK(!res.ok);
    if (dflash_test::this_rank == 0) {
      std::printf("rank 0 reports: %s\n", res.error.c_str());
      RANK_CHECK(res.error.find("rank 0: ") == 0);
      RANK_CHECK(res.error.find("rank 1 sends frames of protocol version " + std::to_string(other)) !=
                 std::string::npos);
      RANK_CHECK(res.error.find("this rank reads version " + std::to_string(unsigned{frame::protocol_version})) !=
                 std::string::npos);
    }
  }
  MPI_Finalize();
  return failures;
}

// A rank throws before job.start(): the others' start() fails with its rank
// and reason instead of waiting in the collective (and the thrower does not
// wait in MPI_Finalize).
int throw_before_start(int argc, char** argv) {
  int rank = -1;
  std::string caught;
  try {
    dflash::mpi::job job(argc, argv);
    rank = dflash_test::this_rank = job.rank();
    if (rank == 1) {
      job.fail("no GPU on this rank");  // optional: the reason the others report
      throw std::runtime_error("setup failed on rank 1");
    }
    dflash::AccumulatingProfiler<dflash::key_set<"a">> prof;
    job.start(prof);
    RANK_CHECK(false);  // start() must fail on the other ranks
  } catch (const std::runtime_error& e) {
    caught = e.what();
  }
  std::printf("rank %d: %s\n", rank, caught.c_str());
  if (rank == 1) {
    RANK_CHECK(caught == "setup failed on rank 1");
  } else {
    RANK_CHECK(caught.find("rank 1") != std::string::npos);
    RANK_CHECK(caught.find("no GPU on this rank") != std::string::npos);
  }
  return failures;
}

// ---- randomized fault scenarios (label stress) ---------------------------------
// `test_mpi stress [seed [first [count]]]`: scenarios first .. first+count-1 of
// `seed`, each one job over every rank (MPI initialised here, so a process
// runs many jobs). Each scenario draws roles, item kinds (one that copies
// when moved among them), counts and sizes
// (0 included; many small items, batched several to a message), producer
// pauses and consumer delays, and at most one fault: a stage throwing on a random rank, a rank
// leaving before start(), one failing between start() and building its link, an exception leaving a running job's scope (the
// profiler declared before or after the job), a consumer whose wire<T>
// layout does not match the producers'. Checked: every item arrives exactly
// once, or the job reports an error on every rank that finished, rank 0
// naming the faulty rank; no item twice or made up; each consumer gets each
// producer's items in order; no message left unmatched on a rank that
// finished; never a hang (watchdog).
// A failure prints the (seed, index) pair and the command that replays it.
struct scenario {
  std::uint64_t seed = 0;
  int index = 0;
  std::vector<int> producers, consumers;
  int items = 0;  // per producer
  enum kind { none, stage_throw, before_start, unwind, layout, before_build } fault = none;
  int fault_rank = -1;
  int throw_at = -1;
  bool prof_first = false;
  bool before_run = false;  // unwind: the exception comes before this rank's run(), not after
  // sized: random sizes, 0 included; nomove: blobs that copy when moved
  enum item_kind { blob_items, sized_items, tick_items, nomove_items } items_of = blob_items;
  int slow_every = 0;
  int pause_every = 0, pause_us = 0;  // producers
};
const char* kind_name(scenario::kind k) {
  static const char* n[] = {"none", "stage_throw", "before_start", "unwind", "layout", "before_build"};
  return n[k];
}

std::uint64_t g_scenario_salt = 0;
std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

scenario make_scenario(std::uint64_t seed, int index, int n) {
  scenario sc;
  sc.seed = seed;
  sc.index = index;
  std::uint64_t state = mix(seed ^ mix(static_cast<std::uint64_t>(index) + 1));
  auto next = [&](std::uint64_t bound) { return (state = mix(state)) % bound; };
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<std::size_t>(r)] = r;
  for (std::size_t i = ranks.size(); i > 1; --i) std::swap(ranks[i - 1], ranks[next(i)]);
  const int nc = n > 2 ? 1 + static_cast<int>(next(2)) : 1;
  sc.consumers.assign(ranks.begin(), ranks.begin() + nc);
  sc.producers.assign(ranks.begin() + nc, ranks.end());
  sc.items_of = static_cast<scenario::item_kind>(next(4));
  sc.items = static_cast<int>(next(sc.items_of == scenario::tick_items ? 601 : 61));
  sc.prof_first = next(2) == 0;
  sc.slow_every = next(4) == 0 ? 7 + static_cast<int>(next(40)) : 0;
  if (next(3) == 0) {
    sc.pause_every = 1 + static_cast<int>(next(20));
    sc.pause_us = static_cast<int>(next(300));
  }
  const int total = sc.items * static_cast<int>(sc.producers.size());
  switch (next(7)) {
    case 0: case 1: break;  // no fault
    case 2:
      if (total == 0) break;
      sc.fault = scenario::stage_throw;
      sc.fault_rank = static_cast<int>(next(static_cast<std::uint64_t>(n)));
      sc.throw_at = std::count(sc.consumers.begin(), sc.consumers.end(), sc.fault_rank)
                        ? 1 + static_cast<int>(next(static_cast<std::uint64_t>(total)))  // a consumer: its k-th item
                        : static_cast<int>(next(static_cast<std::uint64_t>(sc.items)));  // a producer: its k-th item
      break;
    case 3:
      sc.fault = scenario::before_start;
      sc.fault_rank = static_cast<int>(next(static_cast<std::uint64_t>(n)));
      break;
    case 4:
      sc.fault = scenario::unwind;
      sc.fault_rank = static_cast<int>(next(static_cast<std::uint64_t>(n)));
      sc.before_run = next(2) == 0;
      break;
    case 5:
      if (sc.items_of != scenario::blob_items) break;
      sc.fault = scenario::layout;
      sc.fault_rank = sc.consumers[next(sc.consumers.size())];
      break;
    case 6:
      sc.fault = scenario::before_build;
      sc.fault_rank = static_cast<int>(next(static_cast<std::uint64_t>(n)));
      break;
  }
  return sc;
}

std::string describe(const scenario& sc) {
  static const char* item_names[] = {"blob", "sized", "tick", "blob_nomove"};
  auto list = [](const std::vector<int>& v) {
    std::string out;
    for (int r : v) out += (out.empty() ? "" : ",") + std::to_string(r);
    return out;
  };
  return std::string("fault ") + kind_name(sc.fault) + " on rank " + std::to_string(sc.fault_rank) + " (throw_at " +
         std::to_string(sc.throw_at) + (sc.before_run ? ", before run" : "") + "), producers " + list(sc.producers) + ", consumers " + list(sc.consumers) +
         ", " + std::to_string(sc.items) + " items each, " + item_names[sc.items_of] +
         (sc.prof_first ? ", profiler first" : ", profiler after the job") +
         (sc.slow_every ? ", consumer sleeps 1 ms every " + std::to_string(sc.slow_every) + " items" : "") +
         (sc.pause_every ? ", producers pause " + std::to_string(sc.pause_us) + " us every " + std::to_string(sc.pause_every) + " items" : "");
}

struct scenario_throw {};  // the fault "an exception leaves the job's scope"
struct outcome {
  int status = 4;  // 0 ok, 1 job failed, 2 this rank threw out (the fault), 3 start() failed, 4 unexpected
  std::string error;
  std::vector<std::pair<int, int>> got;
  int bad = 0;
};

template <class T>
void scenario_rank(const scenario& sc, outcome& o) {
  using S = pipes<T>;
  using P = typename S::profiler;
  int argc = 0;
  char** argv = nullptr;
  std::optional<P> early;
  if (sc.prof_first) early.emplace();
  dflash::mpi::job job(argc, argv);  // MPI is initialised already: the job neither inits nor finalizes it
  std::optional<P> late;
  if (!sc.prof_first) late.emplace();
  P& prof = sc.prof_first ? *early : *late;
  const int me = job.rank();
  const bool faulty = me == sc.fault_rank;
  if (sc.fault == scenario::before_start && faulty) throw scenario_throw{};
  dflash::mpi::job_options opt;
  opt.report_interval = 2ms;  // snapshots flow while ranks run
  opt.on_report = [](const dflash::mpi::job_profile&) {};
  try {
    job.start(prof, opt);
  } catch (const std::runtime_error& e) {
    o.status = 3;
    o.error = e.what();
    return;
  }
  if (sc.fault == scenario::before_build && faulty) {  // fails after start(), before its link and pipeline exist
    job.fail("rank failed before building its pipeline");
    const auto res = job.finish();
    o.status = res.ok ? 0 : 1;
    o.error = res.error;
    if (left_unmatched(job, 200)) o.status = 4;
    return;
  }
  link_t<T> link(job, sc.producers, sc.consumers);
  run_config cfg{sc.items, -1, 0, 0, sc.pause_every, sc.pause_us}, ccfg{-1, -1, sc.slow_every, 0, 0, 0};
  if (sc.fault == scenario::stage_throw && faulty) (link.is_producer() ? cfg : ccfg).throw_at = sc.throw_at;
  if (sc.fault == scenario::unwind && sc.before_run && faulty) throw scenario_throw{};
  if (link.is_producer()) {
    typename S::template producer<P> p(prof, gen_source<P, T>{&cfg, me}, dflash::mpi::mpi_link_sink<P, link_t<T>>{&link, prof});
    (void)job.run(p);
  } else {
    typename S::template consumer<P> p(prof, dflash::mpi::mpi_link_source<P, link_t<T>>{&link, prof},
                                       collect_sink<P, T>{&ccfg, &o.got, &o.bad});
    (void)job.run(p);
  }
  if (sc.fault == scenario::unwind && faulty) throw scenario_throw{};
  const auto res = job.finish();
  o.status = res.ok ? 0 : 1;
  o.error = res.error;
  if (left_unmatched(job, 200)) o.status = 4;  // judged "failed unexpectedly"
}

// Rank 0's verdict on one scenario; the empty string if it holds.
std::string judge(const scenario& sc, const std::vector<int>& status, const std::string& error0,
                  const std::vector<int>& items, const std::vector<int>& got_per_rank, int bad_total) {
  const int n = static_cast<int>(status.size());
  std::map<std::pair<int, int>, int> seen;
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) ++seen[{items[i], items[i + 1]}];
  for (auto [k, c] : seen) {
    if (c != 1) return "item (" + std::to_string(k.first) + ", " + std::to_string(k.second) + ") arrived " + std::to_string(c) + " times";
    if (!std::count(sc.producers.begin(), sc.producers.end(), k.first) || k.second < 0 || k.second >= sc.items)
      return "an item that was never sent arrived";
  }
  if (bad_total) return std::to_string(bad_total) + " items arrived corrupted";
  // per consumer, each producer's items in the order it sent them
  for (std::size_t r = 0, at = 0; r < got_per_rank.size(); ++r) {
    std::map<int, int> last;
    for (int k = 0; k < got_per_rank[r]; ++k, at += 2) {
      const auto [it, fresh] = last.try_emplace(items[at], -1);
      if (items[at + 1] <= it->second)
        return "rank " + std::to_string(r) + " got item " + std::to_string(items[at + 1]) + " of rank " +
               std::to_string(items[at]) + " after item " + std::to_string(it->second);
      it->second = items[at + 1];
    }
  }
  for (int r = 0; r < n; ++r)
    if (status[static_cast<std::size_t>(r)] == 4) return "rank " + std::to_string(r) + " failed unexpectedly";
  const bool all_ok = std::all_of(status.begin(), status.end(), [](int x) { return x == 0; });
  const std::string names = "rank " + std::to_string(sc.fault_rank) + ": ";
  switch (sc.fault) {
    case scenario::before_start:
      for (int r = 0; r < n; ++r)
        if (status[static_cast<std::size_t>(r)] != (r == sc.fault_rank ? 2 : 3)) return "start() did not fail on rank " + std::to_string(r);
      return seen.empty() ? "" : "items moved in a job that never started";
    case scenario::before_build:
      for (int r = 0; r < n; ++r)
        if (status[static_cast<std::size_t>(r)] != 1) return "rank " + std::to_string(r) + " did not see the job fail";
      if (sc.fault_rank != 0 && error0.find(names) == std::string::npos) return "rank 0 does not name the rank: " + error0;
      return "";
    case scenario::unwind:
      for (int r = 0; r < n; ++r)
        if (status[static_cast<std::size_t>(r)] != (r == sc.fault_rank ? 2 : 1)) return "rank " + std::to_string(r) + " did not see the job fail";
      if (sc.fault_rank != 0 && error0.find(names) == std::string::npos) return "rank 0 does not name the rank: " + error0;
      return "";
    case scenario::stage_throw:
      if (all_ok) {  // only right if the throwing stage never saw its k-th item (a consumer sharing the items)
        if (std::count(sc.producers.begin(), sc.producers.end(), sc.fault_rank) ||
            got_per_rank[static_cast<std::size_t>(sc.fault_rank)] >= sc.throw_at)
          return "a stage threw and the job reported no error";
        break;
      }
      for (int r = 0; r < n; ++r)
        if (status[static_cast<std::size_t>(r)] != 1) return "rank " + std::to_string(r) + " did not see the job fail";
      if (error0.find(names) != 0) return "rank 0 does not name the rank first: " + error0;
      return "";
    case scenario::layout:
      if (all_ok) break;  // no item reached the mismatched consumer: then all must have arrived
      for (int r = 0; r < n; ++r)
        if (status[static_cast<std::size_t>(r)] != 1) return "rank " + std::to_string(r) + " did not see the job fail";
      if (error0.find(names) != 0 || error0.find("wire<T>") == std::string::npos) return "rank 0 does not name the rank and reason: " + error0;
      return "";
    case scenario::none:
      if (!all_ok) return "the job failed with no fault: " + error0;
      break;
  }
  const std::size_t want = sc.producers.size() * static_cast<std::size_t>(sc.items);
  if (seen.size() != want) return std::to_string(seen.size()) + " of " + std::to_string(want) + " items arrived and the job reported no error";
  return "";
}

int stress(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  dflash_test::this_rank = rank;
  unsigned long long seed = argc > 2 ? std::stoull(argv[2]) : std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  const int first = argc > 3 ? std::stoi(argv[3]) : 0;
  const int count = argc > 4 ? std::stoi(argv[4]) : 80;
  if (rank == 0) std::printf("stress: seed %llu, scenarios %d..%d, %d ranks\n", seed, first, first + count - 1, n);
  int failed = 0;
  std::map<std::string, int> kinds;
  for (int i = first; i < first + count && !failed; ++i) {
    const scenario sc = make_scenario(seed, i, n);
    const std::string replay = "seed " + std::to_string(seed) + ", index " + std::to_string(i) + " (replay: mpirun -np " +
                               std::to_string(n) + " test_mpi stress " + std::to_string(seed) + " " + std::to_string(i) + " 1)";
    watchdog wd("stress scenario " + replay + ": " + describe(sc), 10s);
    g_scenario_salt = mix(seed ^ static_cast<std::uint64_t>(i));
    g_sized_bytes = [](int r, int q) -> std::size_t {
      const std::uint64_t h = mix(g_scenario_salt ^ (static_cast<std::uint64_t>(r) << 32) ^ static_cast<std::uint64_t>(q));
      return h % 4 == 0 ? 0 : h % 3000;
    };
    outcome o;
    try {
      const bool mismatched = sc.fault == scenario::layout && rank == sc.fault_rank;
      if (sc.items_of == scenario::sized_items) scenario_rank<sized>(sc, o);
      else if (sc.items_of == scenario::tick_items) scenario_rank<tick>(sc, o);
      else if (sc.items_of == scenario::nomove_items) scenario_rank<blob_nomove>(sc, o);
      else if (mismatched) scenario_rank<blob_swapped>(sc, o);
      else scenario_rank<blob>(sc, o);
    } catch (const scenario_throw&) {
      o.status = 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s: unexpected exception: %s\n", rank, replay.c_str(), e.what());
      o.status = 4;
    }
    std::vector<int> flat;
    for (auto [p, q] : o.got) flat.insert(flat.end(), {p, q});
    const auto items = dflash_test::gather_ints(flat);
    const auto status = dflash_test::gather_ints({o.status});
    const auto bad = dflash_test::gather_ints({o.bad});
    const auto got_per_rank = dflash_test::gather_ints({static_cast<int>(o.got.size())});
    int verdict = 0;
    if (rank == 0) {
      ++kinds[kind_name(sc.fault)];
      const std::string why = judge(sc, status, o.error, items, got_per_rank, std::accumulate(bad.begin(), bad.end(), 0));
      if (!why.empty()) {
        std::fprintf(stderr, "stress FAILED at %s: %s: %s\n", replay.c_str(), describe(sc).c_str(), why.c_str());
        verdict = 1;
      }
    }
    MPI_Bcast(&verdict, 1, MPI_INT, 0, MPI_COMM_WORLD);
    failed += verdict;
  }
  if (rank == 0) {
    std::printf("stress: %s;", failed ? "FAILED" : "passed");
    for (auto [k, c] : kinds) std::printf(" %s %d", k.c_str(), c);
    std::printf("\n");
  }
  MPI_Finalize();
  return failed;
}

// wire<T> decoding validates every size before it allocates (no MPI needed).
int wire_checks() {
  dflash_test::this_rank = 0;
  std::vector<dflash::mpi::wire_buffer> bufs;
  // blob's header: rank, seq (4 + 4), f's and u's sizes (8 + 8), scale (8) = 32 bytes.
  auto header = [](std::size_t bytes, std::uint64_t f_count) {
    std::vector<std::byte> h(bytes);
    std::memcpy(h.data() + 8, &f_count, 8);
    return h;
  };
  auto rejects = [&](const std::vector<std::byte>& h, const char* what) {
    blob b;
    bool threw = false;
    try {
      dflash::mpi::wire_decode(b, h.data(), h.size(), bufs);
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()).find(what) != std::string::npos;
      if (!threw) std::fprintf(stderr, "unexpected message: %s\n", e.what());
    }
    RANK_CHECK(threw);
    RANK_CHECK(b.f.capacity() == 0);  // nothing allocated before the header was found bad
    RANK_CHECK(b.u.capacity() == 0);
  };
  blob probe;
  RANK_CHECK(dflash::mpi::wire_header_bytes(probe) == 32u);
  rejects(header(21, std::uint64_t{1} << 26), "layout needs 32");  // short header claiming 2^26 floats
  rejects(header(40, 3), "layout needs 32");                       // long header
  rejects(header(32, std::uint64_t{5} << 30), "over the limit");   // 20 GiB of floats
  rejects(header(32, std::uint64_t{1} << 62), "overflows");        // bytes overflow size_t
  // A valid header round-trips, buffers sized from it.
  blob src = make_blob(3, 7), dst;
  std::vector<std::byte> h;
  dflash::mpi::wire_encode(src, h, bufs);
  std::vector<dflash::mpi::wire_buffer> in;
  dflash::mpi::wire_decode(dst, h.data(), h.size(), in);
  RANK_CHECK(in.size() == bufs.size());
  for (std::size_t i = 0; i < in.size() && i < bufs.size(); ++i) {
    RANK_CHECK(in[i].bytes == bufs[i].bytes);
    std::memcpy(in[i].data, bufs[i].data, bufs[i].bytes);
  }
  RANK_CHECK(dst.rank == 3 && dst.seq == 7 && blob_ok(dst));
  // One message (the job's FINAL, PROFILE): round-trips; sizes that do not add up to the
  // bytes after the header are rejected before anything is allocated.
  const auto packed = dflash::mpi::wire_pack(src);
  RANK_CHECK(packed.size() == 32 + src.f.size() * sizeof(float) + src.u.size());
  blob one;
  dflash::mpi::wire_unpack(one, packed.data(), packed.size());
  RANK_CHECK(one.rank == 3 && one.seq == 7 && blob_ok(one));
  auto unpack_rejects = [&](std::size_t bytes, const char* what) {
    blob b;
    bool threw = false;
    try {
      dflash::mpi::wire_unpack(b, packed.data(), bytes);
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()).find(what) != std::string::npos;
      if (!threw) std::fprintf(stderr, "unexpected message: %s\n", e.what());
    }
    RANK_CHECK(threw);
    RANK_CHECK(b.f.capacity() == 0 && b.u.capacity() == 0);
  };
  unpack_rejects(packed.size() - 1, "shorter than its header says");
  unpack_rejects(31, "its header alone needs 32");
  {
    auto longer = packed;
    longer.push_back(std::byte{0});
    blob b;
    bool threw = false;
    try {
      dflash::mpi::wire_unpack(b, longer.data(), longer.size());
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()).find("1 bytes more than its header says") != std::string::npos;
    }
    RANK_CHECK(threw);
  }
  dflash::mpi::final_message fin{{'o', 'k'}, {1, 2, 3}}, fin2;
  const auto fb = dflash::mpi::wire_pack(fin);
  dflash::mpi::wire_unpack(fin2, fb.data(), fb.size());
  RANK_CHECK(fin2.error == fin.error && fin2.snapshot == fin.snapshot);
  return failures;
}

// An idle job does not spin: the progress thread's waits after idle passes
// grow to progress_waker::max_nap (unless MPI requests are in flight), and an
// idle 2-rank job with a link attached makes a few hundred passes a second,
// not thousands (a thread that yields or naps 0.1 ms per pass makes > 5000).
int idle(int argc, char** argv) {
  using w = dflash::mpi::progress_waker;
  using us = std::chrono::microseconds;
  RANK_CHECK(w::wait_after(1, false) == us{0});
  RANK_CHECK(w::wait_after(w::yield_passes, false) == us{0});
  RANK_CHECK(w::wait_after(w::yield_passes + 1, false) == w::min_nap);
  RANK_CHECK(w::wait_after(w::yield_passes + 2, false) == 2 * w::min_nap);
  RANK_CHECK(w::wait_after(w::yield_passes + 1000, false) == w::max_nap);
  RANK_CHECK(w::wait_after(w::yield_passes + 1000, true) == us{0});  // a transfer in flight: keep polling
  RANK_CHECK(w::max_nap >= us{5000});
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  job.start();
  dflash::mpi::mpi_link<tick, "net", depth> link(job, {0}, {1});
  std::this_thread::sleep_for(100ms);  // past the first ramp
  const auto p0 = job.progress_passes();
  std::this_thread::sleep_for(1s);
  const auto passes = job.progress_passes() - p0;
  std::printf("rank %d: %llu progress passes in 1 s idle\n", dflash_test::this_rank, static_cast<unsigned long long>(passes));
  RANK_CHECK(passes < 500);
  RANK_CHECK(passes > 0);  // it still polls (a remote STOP must be seen)
  RANK_CHECK(job.finish().ok);
  return failures;
}

int key_mismatch(int argc, char** argv) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  bool threw = false;
  try {
    if (job.rank() == 1) {
      dflash::AccumulatingProfiler<dflash::key_set<"a", "c">> prof;
      job.start(prof);
    } else {
      dflash::AccumulatingProfiler<dflash::key_set<"a", "b">> prof;
      job.start(prof);
    }
  } catch (const std::runtime_error& e) {
    threw = true;
    const std::string w = e.what();
    std::printf("rank %d: %s\n", job.rank(), w.c_str());
    RANK_CHECK(w.find("different key sets") != std::string::npos);
    RANK_CHECK(w.find("rank 1: 'c', rank 0: 'b'") != std::string::npos);
  }
  RANK_CHECK(threw);  // on every rank, so none waits for the others
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  // Every mode ends in a second or two; a hang fails here, with a message, long before ctest's timeout.
  watchdog wd("test_mpi " + mode, 15s);
  // One table: the dispatch and the usage line cannot disagree.
  using run_fn = int (*)(int, char**);
  static constexpr std::pair<std::string_view, run_fn> modes[] = {
      {"wire", [](int, char**) { return wire_checks(); }},
      {"idle", [](int c, char** v) { return idle(c, v); }},
      {"batches", [](int c, char** v) { return batches(c, v); }},
      {"driven", [](int c, char** v) { return driven(c, v); }},
      {"all_matched", [](int c, char** v) { return all_matched(c, v); }},
      {"lock_mpi", [](int c, char** v) { return lock_mpi(c, v); }},
      {"reuse", [](int c, char** v) { return reuse(c, v); }},
      {"close_while_sending", [](int c, char** v) { return close_while_sending(c, v); }},
      {"stress", [](int c, char** v) { return stress(c, v); }},
      {"oversize", [](int c, char** v) { return oversize(c, v); }},
      {"layout_mismatch", [](int c, char** v) { return layout_mismatch(c, v); }},
      {"unwind_prof_first", [](int c, char** v) { return unwind<true>(c, v); }},
      {"unwind_prof_after", [](int c, char** v) { return unwind<false>(c, v); }},
      {"unwind_after_end", [](int c, char** v) { return unwind<true, true>(c, v); }},
      {"throw_before_start", [](int c, char** v) { return throw_before_start(c, v); }},
      {"fatal_progress", [](int c, char** v) { return fatal_progress(c, v); }},
      {"frame_version", [](int c, char** v) { return frame_version(c, v); }},
      {"wide_headers", [](int c, char** v) { return wide_headers(c, v); }},
      {"header_limit", [](int c, char** v) { return header_limit(c, v); }},
      {"copied_items", [](int c, char** v) { return copied_items(c, v); }},
      {"aggregate", [](int c, char** v) { return aggregate(c, v); }},
      {"exactly_once", [](int c, char** v) { return exactly_once<tick>(c, v, false); }},
      {"exactly_once_multi", [](int c, char** v) { return exactly_once<blob>(c, v, true); }},
      {"drain", [](int c, char** v) { return drain(c, v); }},
      {"credit_batches", [](int c, char** v) { return credit_batches(c, v); }},
      {"throw_producer", [](int c, char** v) { return throwing(c, v, true); }},
      {"throw_consumer", [](int c, char** v) { return throwing(c, v, false); }},
      {"key_mismatch", [](int c, char** v) { return key_mismatch(c, v); }},
  };
  try {
    for (const auto& [name, run] : modes)
      if (mode == name) return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", dflash_test::this_rank, e.what());
    return 1;
  }
  std::string known;
  for (const auto& m : modes) known += (known.empty() ? "" : ", ") + std::string(m.first);
  std::fprintf(stderr, "test_mpi: unknown mode '%s' (%s)\n", mode.c_str(), known.c_str());
  return 2;
}
