// Randomized net_link scenarios under mpirun: one MPI job per scenario (MPI is
// initialised once, so a process runs many jobs), the same draw on every rank
// from (seed, index). A scenario places a pipeline
//     source -> queue -> mid (workers) ═net_link═> sink (workers)
// or one with a relay stage between two net_links
//     source -> queue -> mid ═net_link═> relay ═net_link═> sink
// over the ranks: producer ranks run source and mid, relay ranks the relay,
// consumer ranks the sink (producer ranks too, now and then: items leave a
// rank and come back), and a rank may take part in the job only (it builds no
// pipeline). It draws credits (Depth), items per producer
// rank, item sizes from 0 bytes to 1 MiB, workers, one or two runs in the job
// (each over its own link), and at most one fault in the last run: a stage
// that throws on any rank, a pipeline_stop from a sink, stop(cancel) or
// stop(drain) from outside on any rank at any time, a rank that leaves before
// start(), or one that fails between start() and building its pipeline.
// Rank 0 judges what every rank saw against the delivery table (guide 3c):
// every item once, intact, or the job says why on every rank; stopped_early
// the same on every rank; nothing left unmatched after finish(); no hang (a
// watchdog per scenario prints the replay command and every stack).
//
//   test_net_link_stress [seed [index]]   a fresh seed (printed), or replay one scenario
//   DFLASH_STRESS_SECONDS=<s>             budget for new scenarios (default 4)
#include <dflash/mpi.hpp>
#include <dflash/mpi/net_link.hpp>
#include <dflash/pipeline.hpp>

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gather_ints.hpp"
#include "rank_check.hpp"
#include "watchdog.hpp"

using namespace std::chrono_literals;
using dflash::NullProfiler;

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ---- what a scenario draws (identically on every rank) ----------------------------------
enum class fault { none, stage_throw, stop_in_sink, cancel, drain, before_start, before_build };
const char* name_of(fault f) {
  static const char* n[] = {"none", "stage_throw", "stop_in_sink", "cancel", "drain", "before_start", "before_build"};
  return n[static_cast<int>(f)];
}
enum class where { source, mid, sink };

struct scenario {
  std::uint64_t seed = 0, index = 0, salt = 0;
  std::vector<int> producers, consumers;  // disjoint unless relayed; ranks in none run nothing
  std::vector<int> relays;                // a relay stage's ranks (none: one net_link)
  int items = 0;                          // per producer rank and run
  int runs = 1;
  bool deep = false;  // credits 8, else 1
  std::size_t w_mid = 1, w_sink = 1, depth_in = 1;
  fault f = fault::none;
  int fault_rank = -1;
  where at = where::source;
  int fault_at = 0;   // the stage's k-th item (source, sink) or the item of that seq (mid)
  int delay_us = 0;   // cancel / drain after this long
  int slow_every = 0;  // the sink sleeps 300 us every k-th item
};

scenario draw(std::uint64_t seed, std::uint64_t index, int n) {
  scenario s;
  s.seed = seed;
  s.index = index;
  s.salt = mix(seed ^ mix(index + 1));
  std::uint64_t state = s.salt;
  auto next = [&](std::uint64_t bound) { return (state = mix(state)) % bound; };
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<std::size_t>(r)] = r;
  for (std::size_t i = ranks.size(); i > 1; --i) std::swap(ranks[i - 1], ranks[next(i)]);
  const int used = 2 + static_cast<int>(next(static_cast<std::uint64_t>(n - 1)));  // 2..n ranks take part
  const int np = 1 + static_cast<int>(next(static_cast<std::uint64_t>(used - 1)));
  s.producers.assign(ranks.begin(), ranks.begin() + np);
  if (next(3) == 0) {  // relayed: the relay on some of the other ranks, the sink on any rank but those
    const int nr = 1 + static_cast<int>(next(static_cast<std::uint64_t>(used - np)));
    s.relays.assign(ranks.begin() + np, ranks.begin() + np + nr);
    std::vector<int> rest(ranks.begin(), ranks.begin() + np);
    rest.insert(rest.end(), ranks.begin() + np + nr, ranks.begin() + used);
    for (std::size_t i = rest.size(); i > 1; --i) std::swap(rest[i - 1], rest[next(i)]);
    rest.resize(1 + next(rest.size()));
    std::sort(rest.begin(), rest.end());
    s.consumers = rest;
  } else {
    s.consumers.assign(ranks.begin() + np, ranks.begin() + used);
  }
  s.items = static_cast<int>(next(4) == 0 ? next(8) : next(301));
  s.runs = 1 + static_cast<int>(next(2));
  s.deep = next(2) == 0;
  s.w_mid = 1 + next(3);
  s.w_sink = 1 + next(2);
  s.depth_in = 1 + next(4);
  s.slow_every = next(4) == 0 ? 3 + static_cast<int>(next(20)) : 0;
  const int k = static_cast<int>(next(9));
  s.f = k < 3 ? fault::none : static_cast<fault>(k - 2);
  s.fault_rank = static_cast<int>(next(static_cast<std::uint64_t>(n)));
  if (s.f == fault::stage_throw || s.f == fault::stop_in_sink) {
    // A stage on a rank that runs it: a producer's source or mid, a consumer's sink.
    const bool on_consumer = s.f == fault::stop_in_sink || next(3) == 0;
    const auto& side = on_consumer ? s.consumers : s.producers;
    s.fault_rank = side[next(side.size())];
    s.at = on_consumer ? where::sink : next(2) == 0 ? where::source : where::mid;
    const int seen = on_consumer ? s.items * static_cast<int>(s.producers.size()) : s.items;
    s.fault_at = static_cast<int>(next(static_cast<std::uint64_t>(std::max(seen, 1))));
  }
  s.delay_us = static_cast<int>(next(4000));
  return s;
}

std::string describe(const scenario& s) {
  auto list = [](const std::vector<int>& v) {
    std::string out;
    for (int r : v) {
      if (!out.empty()) out += ',';
      out += std::to_string(r);
    }
    return out;
  };
  static const char* stage[] = {"source", "mid", "sink"};
  std::string d = "producers " + list(s.producers);
  if (!s.relays.empty()) d += ", relays " + list(s.relays);
  d += ", consumers " + list(s.consumers);
  d += ", " + std::to_string(s.items) + " items each, " + std::to_string(s.runs) + " run(s), credits ";
  d += s.deep ? "8" : "1";
  d += ", workers mid " + std::to_string(s.w_mid) + " sink " + std::to_string(s.w_sink) + ", depth " +
       std::to_string(s.depth_in);
  if (s.slow_every) d += ", sink slow every " + std::to_string(s.slow_every);
  d += "; fault ";
  d += name_of(s.f);
  d += " on rank " + std::to_string(s.fault_rank);
  if (s.f == fault::stage_throw || s.f == fault::stop_in_sink) {
    d += " in ";
    d += stage[static_cast<int>(s.at)];
    d += " at " + std::to_string(s.fault_at);
  }
  if (s.f == fault::cancel || s.f == fault::drain) d += " after " + std::to_string(s.delay_us) + " us";
  return d;
}

// ---- items: 0 bytes to 1 MiB, every byte checked where it arrives --------------------------
struct item {
  std::int32_t rank = -1, seq = -1;
  std::vector<std::uint8_t> bytes;
};
std::size_t bytes_of(const scenario& s, int rank, int seq) {
  const std::uint64_t h = mix(s.salt ^ (static_cast<std::uint64_t>(rank) << 32) ^ static_cast<std::uint64_t>(seq));
  if (h % 4 == 0) return 0;
  if (h % 151 == 0) return std::size_t{1} << 20;
  return h % 3000;
}
std::uint8_t byte_of(int rank, int seq, std::size_t k) { return static_cast<std::uint8_t>(rank * 31 + seq * 7 + k); }

// What one rank saw in one run.
struct seen_run {
  std::mutex m;
  std::vector<std::pair<int, int>> got;  // (rank, seq) the sink took
  std::atomic<int> produced{0}, bad{0}, sink_calls{0};
  std::atomic<bool> fired{false};  // this rank's fault triggered
};

struct scenario_fault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = item;
  const scenario* s = nullptr;
  seen_run* o = nullptr;
  int rank = 0;
  bool faulty = false;  // this run carries the fault and this rank is its rank
  int next = 0;
  std::optional<item> operator()() {
    if (next >= s->items) return std::nullopt;
    const int q = next++;
    if (faulty && s->at == where::source && q == s->fault_at) {
      o->fired = true;
      throw scenario_fault("source failed at " + std::to_string(q));
    }
    item x{rank, q, std::vector<std::uint8_t>(bytes_of(*s, rank, q))};
    for (std::size_t k = 0; k < x.bytes.size(); ++k) x.bytes[k] = byte_of(rank, q, k);
    o->produced.fetch_add(1);
    return x;
  }
};
struct mid {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = item;
  using output_type = item;
  const scenario* s = nullptr;
  seen_run* o = nullptr;
  bool faulty = false;
  item operator()(item&& x) const {
    if (faulty && s->at == where::mid && x.seq == s->fault_at) {
      o->fired = true;
      throw scenario_fault("mid failed at " + std::to_string(x.seq));
    }
    return std::move(x);
  }
};
struct relay {
  static constexpr dflash::fixed_string name{"relay"};
  using input_type = item;
  using output_type = item;
  item operator()(item&& x) const { return std::move(x); }
};
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = item;
  using output_type = void;
  const scenario* s = nullptr;
  seen_run* o = nullptr;
  bool faulty = false;
  void operator()(item&& x) const {
    const int k = o->sink_calls.fetch_add(1);
    if (s->slow_every && k % s->slow_every == 0) std::this_thread::sleep_for(300us);
    bool good = x.bytes.size() == bytes_of(*s, x.rank, x.seq);
    for (std::size_t i = 0; good && i < x.bytes.size(); ++i) good = x.bytes[i] == byte_of(x.rank, x.seq, i);
    if (!good) o->bad.fetch_add(1);
    {
      const std::lock_guard lk(o->m);
      o->got.emplace_back(x.rank, x.seq);
    }
    if (faulty && s->at == where::sink && k == s->fault_at) {
      o->fired = true;
      if (s->f == fault::stop_in_sink) throw dflash::pipeline_stop{};
      throw scenario_fault("sink failed at its item " + std::to_string(k));
    }
  }
};

}  // namespace

template <>
struct dflash::mpi::wire<item> {
  static void for_each_field(item& x, auto&& f) { f(x.rank), f(x.seq), f(x.bytes); }
};

namespace {

template <dflash::fixed_string Net, std::size_t Credits>
using pipe = dflash::Pipeline<NullProfiler, source, dflash::queue_link<"in", 4>, dflash::workers<mid, 1>,
                              dflash::mpi::net_link<Net, Credits>, dflash::workers<sink, 1>>;
template <dflash::fixed_string Net, std::size_t Credits>
using relayed_pipe =
    dflash::Pipeline<NullProfiler, source, dflash::queue_link<"in", 4>, dflash::workers<mid, 1>,
                     dflash::mpi::net_link<Net, Credits>, dflash::workers<relay, 1>,
                     dflash::mpi::net_link<dflash::name_cat<Net, "_back">, Credits>, dflash::workers<sink, 1>>;

// One run of the job on this rank.
template <class Pipe>
void run_once(dflash::mpi::job& job, const scenario& s, seen_run& o, bool last) {
  const int me = job.rank();
  const bool faulty = last && me == s.fault_rank;
  auto shape = Pipe::default_shape();
  shape.rank = me;
  shape.depths[0] = s.depth_in;
  const bool stage_fault = s.f == fault::stage_throw || s.f == fault::stop_in_sink;
  const source src{&s, &o, me, faulty && stage_fault};
  const mid m{&s, &o, faulty && stage_fault};
  const sink snk{&s, &o, faulty && stage_fault};
  std::optional<Pipe> built;
  if constexpr (Pipe::stage_count == 3) {
    shape.ranks = {s.producers, s.producers, s.consumers};
    shape.workers = {1, s.w_mid, s.w_sink};
    built.emplace(shape, src, m, snk);
  } else {
    shape.ranks = {s.producers, s.producers, s.relays, s.consumers};
    shape.workers = {1, s.w_mid, 1 + s.w_sink % 2, s.w_sink};
    built.emplace(shape, src, m, relay{}, snk);
  }
  Pipe& p = *built;
  std::thread stopper;
  if (faulty && (s.f == fault::cancel || s.f == fault::drain))
    stopper = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(s.delay_us));
      o.fired = true;
      p.stop(s.f == fault::drain ? dflash::stop_mode::drain : dflash::stop_mode::cancel);
    });
  try {
    (void)job.run(p);
  } catch (...) {
    if (stopper.joinable()) stopper.join();
    throw;
  }
  if (stopper.joinable()) stopper.join();
}

// This rank's account of a scenario, gathered on rank 0.
struct account {
  int status = 4;  // 0 finish ok, 1 finish not ok, 2 left before start (the fault), 3 start() threw, 4 unexpected
  int stopped_early = 0;
  std::string error;
  seen_run runs[2];
};

template <std::size_t Credits>
void scenario_rank(const scenario& s, account& a) {
  int argc = 0;
  char** argv = nullptr;
  dflash::mpi::job job(argc, argv);  // MPI is initialised already: the job neither inits nor finalizes it
  const int me = job.rank();
  if (s.f == fault::before_start && me == s.fault_rank) {
    a.status = 2;
    return;  // leaves without start(): the others' start() throws naming this rank
  }
  try {
    job.start();
  } catch (const std::runtime_error& e) {
    a.status = 3;
    a.error = e.what();
    return;
  }
  for (int r = 0; r < s.runs; ++r) {
    const bool last = r + 1 == s.runs;
    if (last && s.f == fault::before_build && me == s.fault_rank) {
      job.fail("rank failed before building its pipeline");
      break;
    }
    // A rank outside the placement builds no pipeline (one that runs no stage is an error) and
    // only takes part in the job: start(), finish(), and a stop or failure reaching it.
    if (!std::count(s.producers.begin(), s.producers.end(), me) && !std::count(s.consumers.begin(), s.consumers.end(), me) &&
        !std::count(s.relays.begin(), s.relays.end(), me))
      continue;
    if (s.relays.empty()) {
      if (r == 0) run_once<pipe<"net", Credits>>(job, s, a.runs[r], last);
      else run_once<pipe<"net_again", Credits>>(job, s, a.runs[r], last);
    } else {
      if (r == 0) run_once<relayed_pipe<"net", Credits>>(job, s, a.runs[r], last);
      else run_once<relayed_pipe<"net_again", Credits>>(job, s, a.runs[r], last);
    }
  }
  const auto res = job.finish();
  a.status = res.ok ? 0 : 1;
  a.stopped_early = res.stopped_early ? 1 : 0;
  a.error = res.error;
  // After finish() nothing is received on the job's communicator: a message there was left unmatched.
  for (int k = 0; k < 200; ++k) {
    int pending = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, job.comm(), &pending, &st);
    if (!pending) continue;
    std::fprintf(stderr, "rank %d: a message from rank %d, tag %d, is left unmatched after finish()\n", me,
                 st.MPI_SOURCE, st.MPI_TAG);
    a.status = 4;
    break;
  }
}

// Every rank's account, flattened: per rank [status, stopped_early, per run: produced, bad, fired, n, n pairs].
struct verdict_input {
  std::vector<int> status, stopped, produced[2], bad[2], fired[2];
  std::vector<std::pair<int, int>> got[2];
};

std::string judge(const scenario& s, const verdict_input& v, const std::string& error0) {
  const int n = static_cast<int>(v.status.size());
  const auto every = [&](auto pred) {
    for (int r = 0; r < n; ++r)
      if (!pred(r)) return false;
    return true;
  };
  for (int r = 0; r < n; ++r)
    if (v.status[static_cast<std::size_t>(r)] == 4) return "rank " + std::to_string(r) + " failed unexpectedly";
  if (s.f == fault::before_start) {
    for (int r = 0; r < n; ++r)
      if (v.status[static_cast<std::size_t>(r)] != (r == s.fault_rank ? 2 : 3))
        return "start() did not fail on rank " + std::to_string(r);
    return "";
  }
  // What arrived, per run: once, intact, only what a producer made.
  for (int run = 0; run < s.runs; ++run) {
    std::set<std::pair<int, int>> once;
    for (const auto& [rank, seq] : v.got[run]) {
      if (!std::count(s.producers.begin(), s.producers.end(), rank) || seq < 0 ||
          seq >= v.produced[run][static_cast<std::size_t>(rank)])
        return "run " + std::to_string(run) + ": item (" + std::to_string(rank) + ", " + std::to_string(seq) +
               ") arrived but was never produced";
      if (!once.insert({rank, seq}).second)
        return "run " + std::to_string(run) + ": item (" + std::to_string(rank) + ", " + std::to_string(seq) +
               ") arrived twice";
    }
    for (int r = 0; r < n; ++r)
      if (v.bad[run][static_cast<std::size_t>(r)])
        return "run " + std::to_string(run) + ": rank " + std::to_string(r) + " got " +
               std::to_string(v.bad[run][static_cast<std::size_t>(r)]) + " item(s) whose bytes were wrong";
  }
  const auto all_of_run = [&](int run) {
    std::size_t want = 0;
    for (int p : s.producers) want += static_cast<std::size_t>(v.produced[run][static_cast<std::size_t>(p)]);
    return v.got[run].size() == want;
  };
  const auto complete = [&](int run) {  // every producer made all its items and all arrived
    for (int p : s.producers)
      if (v.produced[run][static_cast<std::size_t>(p)] != s.items) return false;
    return all_of_run(run);
  };
  const int last = s.runs - 1;
  const bool fired = std::any_of(v.fired[last].begin(), v.fired[last].end(), [](int x) { return x != 0; });
  // Runs are not in step across ranks: a fault of the second run on a rank that got there first
  // may stop the first one elsewhere. Without one, the first run is complete.
  if (s.runs == 2 && !fired && s.f != fault::before_build && !complete(0))
    return "the first run did not deliver every item, and no fault fired";
  const bool early = v.stopped[0] != 0;
  if (!every([&](int r) { return v.stopped[static_cast<std::size_t>(r)] == v.stopped[0]; }))
    return "stopped_early differs between ranks";
  const bool all_ok = every([&](int r) { return v.status[static_cast<std::size_t>(r)] == 0; });
  const bool all_failed = every([&](int r) { return v.status[static_cast<std::size_t>(r)] == 1; });
  const std::string names = "rank " + std::to_string(s.fault_rank) + ": ";
  switch (s.f) {
    case fault::stage_throw:
    case fault::before_build:
      if (s.f == fault::stage_throw && !fired) break;  // the stage never saw that item: a clean run
      if (!all_failed) return "a rank failed and not every rank's finish() says so";
      if (!early) return "a failed run and stopped_early is false";
      if (error0.find(names) == std::string::npos) return "rank 0's error does not name rank " + std::to_string(s.fault_rank) + ": " + error0;
      return "";
    case fault::stop_in_sink:
      if (!fired) break;
      if (!all_ok) return "a pipeline_stop failed the job: " + error0;
      if (!early) return "a pipeline_stop and stopped_early is false";
      return "";
    case fault::cancel:
    case fault::drain:
      if (!all_ok) return "a stop() failed the job: " + error0;
      // A drain on a producer rank ends its source: what every producer made arrives.
      if (s.f == fault::drain && std::count(s.producers.begin(), s.producers.end(), s.fault_rank) && !all_of_run(last))
        return "a drain on producer rank " + std::to_string(s.fault_rank) + " lost items";
      if (early) return "";  // stopped early, on every rank: items may be missing
      break;                 // the stop came after the run ended: a complete run
    case fault::none:
    case fault::before_start: break;
  }
  if (!all_ok) return "the job failed with no fault in effect: " + error0;
  if (early) return "stopped_early with no stop in effect";
  if (!complete(last)) return "a normal end with items missing";
  return "";
}

int run(int argc, char** argv) {
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  dflash_test::this_rank = rank;
  if (n < 2) {
    std::fprintf(stderr, "test_net_link_stress: needs at least 2 ranks\n");
    return 2;
  }
  unsigned long long seed = argc > 1 ? std::stoull(argv[1])
                                     : (static_cast<unsigned long long>(std::random_device{}()) << 32) ^ std::random_device{}();
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  const bool one = argc > 2;
  const std::uint64_t first = one ? std::stoull(argv[2]) : 0;
  const char* budget_env = std::getenv("DFLASH_STRESS_SECONDS");
  const auto budget = std::chrono::seconds(budget_env && *budget_env ? std::atoi(budget_env) : 4);
  if (rank == 0) std::printf("net_link stress: seed %llu, %d ranks\n", seed, n);
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, int> kinds;
  int failed = 0, count = 0;
  for (std::uint64_t i = first;; ++i) {
    int go = one ? (i == first) : (std::chrono::steady_clock::now() - t0 < budget);
    MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);  // rank 0's clock decides for all
    if (!go) break;
    ++count;
    const scenario s = draw(seed, i, n);
    const std::string replay = "seed " + std::to_string(seed) + ", index " + std::to_string(i) +
                               " (replay: mpirun -np " + std::to_string(n) + " test_net_link_stress " +
                               std::to_string(seed) + " " + std::to_string(i) + ")";
    watchdog wd("net_link stress " + replay + ": " + describe(s), 30s);
    account a;
    try {
      if (s.deep) scenario_rank<8>(s, a);
      else scenario_rank<1>(s, a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s: unexpected exception: %s\n", rank, replay.c_str(), e.what());
      a.status = 4;
    }
    verdict_input v;
    v.status = dflash_test::gather_ints({a.status});
    v.stopped = dflash_test::gather_ints({a.stopped_early});
    for (int run = 0; run < 2; ++run) {
      seen_run& o = a.runs[run];
      v.produced[run] = dflash_test::gather_ints({o.produced.load()});
      v.bad[run] = dflash_test::gather_ints({o.bad.load()});
      v.fired[run] = dflash_test::gather_ints({o.fired.load() ? 1 : 0});
      std::vector<int> flat;
      for (auto [p, q] : o.got) flat.insert(flat.end(), {p, q});
      const auto all = dflash_test::gather_ints(flat);
      for (std::size_t k = 0; k + 1 < all.size(); k += 2) v.got[run].emplace_back(all[k], all[k + 1]);
    }
    int verdict = 0;
    if (rank == 0) {
      ++kinds[name_of(s.f)];
      const std::string why = judge(s, v, a.error);
      if (!why.empty()) {
        std::fprintf(stderr, "net_link stress FAILED at %s: %s: %s\n", replay.c_str(), describe(s).c_str(), why.c_str());
        verdict = 1;
      }
    }
    MPI_Bcast(&verdict, 1, MPI_INT, 0, MPI_COMM_WORLD);
    failed += verdict;
    if (failed) break;
  }
  if (rank == 0) {
    std::printf("net_link stress: %d scenarios %s;", count, failed ? "FAILED" : "passed");
    for (const auto& [k, c] : kinds) std::printf(" %s %d", k.c_str(), c);
    std::printf("\n");
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const int rc = run(argc, argv);
  MPI_Finalize();
  return rc;
}
