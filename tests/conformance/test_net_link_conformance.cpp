// The link-kind conformance cases for dflash::mpi::net_link, under mpirun with
// two ranks: the same harness as test_link_conformance.cpp (source, a queue,
// three producer workers, the link, two consumer workers), with the producer
// side on rank 1 and the consumer on rank 0 — rank 0 receives every rank's
// final profile from job::finish(), so it knows how many items rank 1 sent.
// One mode per ctest entry; exit 0 only if every check held on this rank.
#include <dflash/analysis.hpp>
#include <dflash/mpi.hpp>
#include <dflash/mpi/net_link.hpp>
#include <dflash/profile.hpp>

#include "link_conformance.hpp"
#include "rank_check.hpp"
#include "watchdog.hpp"

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using conformance::run_state;
using dflash_test::failures;

namespace {

using L = dflash::mpi::net_link<"link", 4>;
template <class P>
using pipe = conformance::pipeline_for<P, L>;
using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<pipe<dflash::NullProfiler>>>;

enum class ending { complete, drain, cancel, consumer_throws };

// What arrived on the consumer rank: none twice, FIFO per (producer thread, consumer) pair.
std::size_t check_no_duplicates_fifo(const run_state& st) {
  std::set<int> seen;
  std::map<std::pair<std::size_t, std::size_t>, int> last;
  for (const auto& u : st.got) {
    RANK_CHECK(u.value >= 0);
    RANK_CHECK(seen.insert(u.value).second);
    auto [it, fresh] = last.try_emplace({u.producer, u.consumer}, u.value);
    if (!fresh) {
      RANK_CHECK(u.value > it->second);
      it->second = u.value;
    }
  }
  return seen.size();
}

int run(int argc, char** argv, ending how) {
  dflash::mpi::job job(argc, argv);
  dflash_test::this_rank = job.rank();
  prof_t prof;
  job.start(prof);
  auto shape = pipe<prof_t>::default_shape();
  shape.ranks = {std::vector<int>{1}, std::vector<int>{1}, std::vector<int>{0}};
  shape.rank = job.rank();
  run_state st;
  st.items = how == ending::complete || how == ending::consumer_throws ? 600 : -1;
  if (how == ending::consumer_throws) st.throw_at = 100;
  {
    auto p = conformance::make<prof_t, L>(prof, st, shape);
    // The layout the analysis sees: the kind's model (credits of Depth per producer rank).
    const auto lay = p.layout();
    const auto m = dflash::link_model_of<L>({4, 1, 1});
    RANK_CHECK(lay.links.size() == 2 && lay.links[1].name == "link");
    RANK_CHECK(lay.links[1].kind == m.kind && lay.links[1].depth == m.depth && m.depth == 4);
    RANK_CHECK(lay.links[1].crosses_processes && lay.links[1].no_model.empty());
    if (job.rank() == 1 && (how == ending::drain || how == ending::cancel)) {
      // The producer rank ends its own run once 200 items were made.
      std::thread stopper([&] {
        const auto until = std::chrono::steady_clock::now() + 15s;
        while (st.produced.load() < 200 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
        p.stop(how == ending::drain ? dflash::stop_mode::drain : dflash::stop_mode::cancel);
      });
      job.run(p);
      stopper.join();
    } else {
      job.run(p);
    }
  }
  const auto res = job.finish();
  if (how == ending::consumer_throws) {
    RANK_CHECK(!res.ok);
    if (job.rank() == 0) RANK_CHECK(res.error.find("consumer failed at item") != std::string::npos);
  } else {
    RANK_CHECK(res.ok);
  }
  if (job.rank() == 0) {
    const std::size_t n = check_no_duplicates_fifo(st);
    RANK_CHECK(res.profile.has_value());
    if (res.profile && res.profile->ranks.size() == 2) {
      // Every item rank 1's producer stage handed to the link ("mark.work") arrived, after a normal end or a drain.
      const auto* sent = res.profile->ranks[1].find("mark.work");
      RANK_CHECK(sent != nullptr);
      if (sent && (how == ending::complete || how == ending::drain)) RANK_CHECK(n == sent->count);
      if (sent && how == ending::complete) RANK_CHECK(n == 600);
      if (sent && how != ending::complete) RANK_CHECK(n <= sent->count);
      if (how == ending::complete) {
        // The keys the kind declares are recorded (push_wait by the producer rank, pop_wait here).
        const auto all = res.profile->merged();
        for (const std::string_view k : L::keys::names) {
          const auto* s = all.find(std::string(k));
          RANK_CHECK(s != nullptr && s->count > 0);
          if (!s || s->count == 0) std::fprintf(stderr, "rank 0: key %.*s not recorded\n", int(k.size()), k.data());
        }
      }
    }
  } else {
    RANK_CHECK(st.got.empty());
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  watchdog wd("test_net_link_conformance " + mode, 20s);
  try {
    if (mode == "complete") return run(argc, argv, ending::complete);
    if (mode == "drain") return run(argc, argv, ending::drain);
    if (mode == "cancel") return run(argc, argv, ending::cancel);
    if (mode == "consumer_throws") return run(argc, argv, ending::consumer_throws);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", dflash_test::this_rank, e.what());
    return 1;
  }
  std::fprintf(stderr, "test_net_link_conformance: unknown mode '%s' (complete, drain, cancel, consumer_throws)\n",
               mode.c_str());
  return 2;
}
