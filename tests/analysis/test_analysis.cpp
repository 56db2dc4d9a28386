#include <catch2/catch.hpp>
#include <dflash/analysis.hpp>
#include <dflash/pipeline.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <string>

namespace da = dflash::analysis;
using da::model_kind;
using da::service_distribution;

namespace {
constexpr double ms = 1e6;  // ns

da::sim_model tandem(std::vector<double> service_ms, std::vector<std::size_t> depth, double cores = 0,
                     model_kind kind = model_kind::queue) {
  da::sim_model m;
  for (double s : service_ms) m.stages.push_back({1, service_distribution::deterministic(s * ms), true});
  for (std::size_t d : depth) m.links.push_back({kind, d});
  m.cores = cores;
  return m;
}

/// A key recorded `count` times with exactly `ns` each.
dflash::key_stats key(std::string name, std::uint64_t count, std::uint64_t ns) {
  dflash::key_stats k;
  k.name = std::move(name);
  k.count = count;
  k.total_ns = count * ns;
  k.min_ns = k.max_ns = count ? ns : 0;
  if (count) k.buckets[dflash::histogram::bucket_of(ns)] = count;
  return k;
}
/// A key with `count` records summing to total_ns (all in the bucket of the mean).
dflash::key_stats total(std::string name, std::uint64_t count, std::uint64_t total_ns) {
  return key(std::move(name), count, count ? total_ns / count : 0);
}

// src -q(8)-> mid x2 -r(4)-> sink, one second; the sink is busy 90 %.
da::pipeline_layout three_stages() {
  da::pipeline_layout l;
  l.stages = {{"src", 1}, {"mid", 2}, {"sink", 1}};
  l.links = {{"q", model_kind::queue, 8}, {"r", model_kind::queue, 4}};
  return l;
}
dflash::profile_snapshot sink_bound() {
  dflash::profile_snapshot s;
  s.window_ns = 1'000'000'000;
  s.keys = {key("src.work", 100, 1'000'000),       total("src.wait", 100, 900'000'000),
            total("q.push_wait", 100, 880'000'000), total("q.pop_wait", 100, 10'000'000),
            key("mid.work", 100, 6'000'000),        total("mid.wait", 200, 1'350'000'000),
            total("r.push_wait", 100, 1'300'000'000), total("r.pop_wait", 100, 0),
            key("sink.work", 100, 9'000'000),       total("sink.wait", 100, 50'000'000)};
  return s;
}
}  // namespace

// ---------------------------------------------------------------- simulator ---

TEST_CASE("simulate: deterministic tandem runs at 1 / max(service)", "[analysis][sim]") {
  for (std::size_t depth : {1u, 2u, 8u}) {
    const auto r = da::simulate(tandem({1, 2}, {depth}), {.items = 1000});
    // makespan = the first item's 1 ms + 1000 x 2 ms
    CHECK(r.items_per_s == Approx(1000.0 / 2.001).epsilon(1e-9));
    CHECK(r.busy[1] == Approx(2000.0 / 2001.0).epsilon(1e-9));
  }
  const auto r3 = da::simulate(tandem({1, 3, 2}, {1, 1}), {.items = 3000});
  CHECK(r3.items_per_s == Approx(1000.0 / 3).epsilon(0.002));
  CHECK(r3.blocked[0] == Approx(2.0 / 3).epsilon(0.01));  // the source finishes in 1 ms, waits 2 ms for room
  CHECK(r3.idle[2] == Approx(1.0 / 3).epsilon(0.01));     // the sink waits 1 ms of every 3
}

TEST_CASE("simulate: M workers divide the stage's service time", "[analysis][sim]") {
  for (std::size_t m : {1u, 2u, 4u}) {
    auto model = tandem({1, 8}, {4});
    model.stages[1].workers = m;
    const auto r = da::simulate(model, {.items = 4000});
    CHECK(r.items_per_s == Approx(std::min(1000.0, 1000.0 * static_cast<double>(m) / 8)).epsilon(0.01));
  }
}

TEST_CASE("simulate: two exponential stations with a buffer of b reach mu (b+2)/(b+3)", "[analysis][sim]") {
  // Blocking after service: the states "items past station 1" 0..b+2 are
  // equally likely with equal rates, so station 2 works (b+2)/(b+3) of the time.
  for (std::size_t b : {1u, 3u}) {
    da::sim_model m;
    m.stages = {{1, service_distribution::exponential(1 * ms), true}, {1, service_distribution::exponential(1 * ms), true}};
    m.links = {{model_kind::queue, b}};
    const auto r = da::simulate(m, {.items = 200000, .seed = 7});
    CHECK(r.items_per_s == Approx(1000.0 * static_cast<double>(b + 2) / static_cast<double>(b + 3)).epsilon(0.01));
  }
}

TEST_CASE("simulate: CPU is shared by the stages that use it", "[analysis][sim]") {
  // Each item needs 1 ms of CPU in each of two stages: 2 ms per item on one core.
  CHECK(da::simulate(tandem({1, 1}, {4}, 1), {.items = 2000}).items_per_s == Approx(500).epsilon(0.005));
  CHECK(da::simulate(tandem({1, 1}, {4}, 2), {.items = 2000}).items_per_s == Approx(1000).epsilon(0.005));
  // A second worker on a stage cannot beat the cores: 2 cores, 1 + 2 ms per item -> 1.5 ms.
  auto m = tandem({1, 2}, {4}, 2);
  m.stages[1].workers = 4;
  CHECK(da::simulate(m, {.items = 3000}).items_per_s == Approx(2000.0 / 3).epsilon(0.01));
  // Work that is not on a CPU (a GPU kernel) is not shared.
  m.stages[1].uses_cpu = false;
  CHECK(da::simulate(m, {.items = 3000}).items_per_s == Approx(1000).epsilon(0.01));
}

TEST_CASE("simulate: a device link's K slots cover the producer's call, the wait and the consumer's call",
          "[analysis][sim]") {
  // K = 1: one item at a time through both calls (1 + 1 ms); K = 2 pipelines them.
  CHECK(da::simulate(tandem({1, 1}, {1}, 0, model_kind::device), {.items = 1000}).items_per_s == Approx(500).epsilon(0.002));
  CHECK(da::simulate(tandem({1, 1}, {2}, 0, model_kind::device), {.items = 1000}).items_per_s == Approx(1000).epsilon(0.002));
  // Four producers of 4 ms each behind 2 slots: at most 2 items in the producers' calls.
  auto m = tandem({4, 1}, {2}, 0, model_kind::device);
  m.stages[0].workers = 4;
  CHECK(da::simulate(m, {.items = 2000}).items_per_s == Approx(2000.0 / 5).epsilon(0.01));
}

TEST_CASE("simulate: seeded and deterministic; malformed models are rejected", "[analysis][sim]") {
  da::sim_model m;
  m.stages = {{2, service_distribution::exponential(1 * ms), true}, {1, service_distribution::exponential(0.6 * ms), true}};
  m.links = {{model_kind::queue, 2}};
  m.cores = 1.5;
  const auto a = da::simulate(m, {.items = 500, .seed = 3, .replications = 2});
  const auto b = da::simulate(m, {.items = 500, .seed = 3, .replications = 2});
  const auto c = da::simulate(m, {.items = 500, .seed = 4, .replications = 2});
  CHECK(a.items_per_s == b.items_per_s);
  CHECK(a.busy == b.busy);
  CHECK(a.items_per_s != c.items_per_s);
  CHECK_THROWS_AS(da::simulate(tandem({1}, {})), std::invalid_argument);
  CHECK_THROWS_AS(da::simulate(tandem({1, 1}, {0})), std::invalid_argument);
  auto empty = tandem({1, 1}, {1});
  empty.stages[1].service = {};
  CHECK_THROWS_AS(da::simulate(empty), std::invalid_argument);
}

TEST_CASE("service_distribution: histogram draws keep the exact recorded mean", "[analysis][sim]") {
  dflash::key_stats k;
  for (std::uint64_t v : {1000u, 1200u, 5000u, 5100u, 90000u}) {
    k.buckets[dflash::histogram::bucket_of(v)] += 1;
    k.total_ns += v;
    ++k.count;
  }
  k.min_ns = 1000;
  k.max_ns = 90000;
  const auto d = service_distribution::from_stats(k);
  da::sim_rng rng(1);
  double sum = 0, lo = 1e18, hi = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double v = d.sample(rng);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  CHECK(sum / n == Approx(k.mean_ns()).epsilon(0.01));
  CHECK(lo >= 900);  // within the recorded range, up to the mean correction
  CHECK(hi <= 95000);
  CHECK(service_distribution::from_stats(dflash::key_stats{}).empty());
}

// --------------------------------------------------------------- bottleneck ---

TEST_CASE("find_bottleneck: the busiest stage, with its blocked producer as evidence", "[analysis][bottleneck]") {
  const auto r = da::find_bottleneck(sink_bound(), three_stages());
  REQUIRE(r.ok);
  REQUIRE(r.limiting == 2);
  CHECK(r.items == 100);
  CHECK(r.items_per_s == Approx(100));
  CHECK(r.stages[2].utilisation == Approx(0.9));
  CHECK(r.stages[2].state == "limiting");
  CHECK(r.stages[1].utilisation == Approx(0.3));  // 0.6 s over 2 workers
  CHECK(r.stages[1].blocked == Approx(0.65));
  CHECK(r.stages[1].starved == Approx(0.025));
  CHECK(r.stages[1].state == "blocked");
  CHECK(r.stages[0].state == "blocked");
  CHECK(r.evidence.find("sink busy 90% of 1 worker") == 0);
  CHECK(r.evidence.find("mid before it blocked 65% on r") != std::string::npos);
  const std::string table = da::format_bottleneck(r);
  CHECK(table.find("limiting stage: sink busy 90%") != std::string::npos);
  const auto j = nlohmann::json::parse(da::format_bottleneck(r, dflash::report_format::json));
  CHECK(j["limiting"] == "sink");
  CHECK(j["stages"][1]["state"] == "blocked");
}

TEST_CASE("find_bottleneck: a starved sink behind a slow middle stage", "[analysis][bottleneck]") {
  dflash::profile_snapshot s;
  s.window_ns = 1'000'000'000;
  s.keys = {key("src.work", 100, 100'000),     total("src.wait", 100, 980'000'000), total("q.push_wait", 100, 980'000'000),
            key("mid.work", 100, 19'000'000),  total("mid.wait", 200, 50'000'000),  total("r.push_wait", 100, 0),
            key("sink.work", 100, 1'000'000),  total("sink.wait", 100, 890'000'000)};
  const auto r = da::find_bottleneck(s, three_stages());
  REQUIRE(r.ok);
  CHECK(r.limiting == 1);
  CHECK(r.stages[2].state == "starved");
  CHECK(r.stages[2].starved == Approx(0.89));
  CHECK(r.evidence.find("sink after it starved 89%") != std::string::npos);
}

TEST_CASE("find_bottleneck: a device stage is judged by its device time when that binds", "[analysis][bottleneck]") {
  auto l = three_stages();
  l.stages[1].device = true;
  auto s = sink_bound();
  s.keys.push_back(key("mid.gpu", 100, 19'000'000));  // 1.9 s of device time over 2 workers: 95 %
  const auto r = da::find_bottleneck(s, l);
  REQUIRE(r.ok);
  CHECK(r.limiting == 1);
  CHECK(r.stages[1].gpu_binds);
  CHECK(r.stages[1].utilisation == Approx(0.95));
}

TEST_CASE("find_bottleneck: a device stage whose host launches outlast its device work is launch-bound",
          "[analysis][bottleneck]") {
  auto l = three_stages();
  l.stages[1].device = true;
  // mid: the host spends 19 ms per item enqueueing, and the device's span per item, its wait for
  // those launches included, is 19.5 ms; 2 workers, 100 items in 1 s.
  dflash::profile_snapshot s;
  s.window_ns = 1'000'000'000;
  s.keys = {key("src.work", 100, 100'000),    total("src.wait", 100, 980'000'000), total("q.push_wait", 100, 980'000'000),
            key("mid.work", 100, 19'000'000), key("mid.launch", 100, 19'000'000), key("mid.gpu", 100, 19'500'000),
            total("mid.wait", 200, 50'000'000), total("r.push_wait", 100, 0), key("sink.work", 100, 1'000'000),
            total("sink.wait", 100, 890'000'000)};
  const auto r = da::find_bottleneck(s, l);
  REQUIRE(r.ok);
  CHECK(r.limiting == 1);
  CHECK(r.stages[1].launch_bound);
  CHECK(r.stages[1].stream_busy == Approx(0.975));
  CHECK(r.evidence.find("(launches bind)") != std::string::npos);
  CHECK(r.evidence.find("launch-bound: the host enqueues 19.000 ms per item, the device's time per item is "
                        "19.500 ms") != std::string::npos);
  CHECK(da::format_bottleneck(r).find("limiting (launch-bound)") != std::string::npos);
  const auto j = nlohmann::json::parse(da::format_bottleneck(r, dflash::report_format::json));
  CHECK(j["stages"][1]["launch_bound"] == true);
  CHECK(j["stages"][1]["launch_ns"] == Approx(19e6));

  SECTION("the same stage with device work that outlasts its launches is not") {
    for (auto& k : s.keys)
      if (k.name == "mid.launch") k = key("mid.launch", 100, 2'000'000);  // 2 ms of launches, 19.5 ms on the device
    const auto q = da::find_bottleneck(s, l);
    REQUIRE(q.ok);
    CHECK_FALSE(q.stages[1].launch_bound);
    CHECK(q.stages[1].gpu_binds);
    CHECK(q.evidence.find("launch-bound") == std::string::npos);
  }
  SECTION("at the stated ratio: launch >= 0.8 x device time") {
    for (auto& k : s.keys)
      if (k.name == "mid.launch") k = key("mid.launch", 100, 15'500'000);  // 0.795 x 19.5 ms: not yet
    CHECK_FALSE(da::find_bottleneck(s, l).stages[1].launch_bound);
    for (auto& k : s.keys)
      if (k.name == "mid.launch") k = key("mid.launch", 100, 15'700'000);  // 0.805 x
    CHECK(da::find_bottleneck(s, l).stages[1].launch_bound);
  }
  SECTION("a stage whose launches fill under 5 % of its workers x window is not named") {
    for (auto& k : s.keys) {
      if (k.name == "mid.launch") k = key("mid.launch", 100, 900'000);  // 90 ms of 2 s: 4.5 %
      if (k.name == "mid.gpu") k = key("mid.gpu", 100, 1'000'000);
    }
    CHECK_FALSE(da::find_bottleneck(s, l).stages[1].launch_bound);
    for (auto& k : s.keys)
      if (k.name == "mid.launch") k = key("mid.launch", 100, 1'000'000);  // 5 %
    CHECK(da::find_bottleneck(s, l).stages[1].launch_bound);
  }
  SECTION("a launch-bound stage that is not the limiting one gets its own line") {
    for (auto& k : s.keys) {
      if (k.name == "mid.work") k = key("mid.work", 100, 5'000'000);
      if (k.name == "mid.launch") k = key("mid.launch", 100, 5'000'000);
      if (k.name == "mid.gpu") k = key("mid.gpu", 100, 5'200'000);
      if (k.name == "sink.work") k = key("sink.work", 100, 9'000'000);
      if (k.name == "sink.wait") k = total("sink.wait", 100, 50'000'000);
    }
    const auto q = da::find_bottleneck(s, l);
    REQUIRE(q.ok);
    CHECK(q.limiting == 2);
    CHECK(q.stages[1].launch_bound);
    CHECK(da::format_bottleneck(q).find("launch-bound: mid enqueues 5.000 ms per item; its device time per item is "
                                        "5.200 ms") != std::string::npos);
  }
}

TEST_CASE("find_bottleneck: thin or impossible data says 'not enough data'", "[analysis][bottleneck]") {
  const auto l = three_stages();
  SECTION("a handful of items") {
    auto s = sink_bound();
    for (auto& k : s.keys)
      if (k.name == "sink.work") k = key("sink.work", 5, 9'000'000);
    const auto r = da::find_bottleneck(s, l);
    CHECK_FALSE(r.ok);
    CHECK(r.why_not.find("only 5 item(s)") != std::string::npos);
    CHECK(da::format_bottleneck(r).find("not enough data") != std::string::npos);
    CHECK(nlohmann::json::parse(da::format_bottleneck(r, dflash::report_format::json))["ok"] == false);
  }
  SECTION("a stage never recorded") {
    auto s = sink_bound();
    for (auto& k : s.keys)
      if (k.name == "mid.work") k = key("mid.work", 0, 0);
    const auto r = da::find_bottleneck(s, l);
    CHECK_FALSE(r.ok);
    CHECK(r.why_not.find("stage mid never recorded") != std::string::npos);
  }
  SECTION("a clock anomaly: more busy time than workers x window") {
    auto s = sink_bound();
    for (auto& k : s.keys)
      if (k.name == "sink.work") k = key("sink.work", 100, 15'000'000);
    const auto r = da::find_bottleneck(s, l);
    CHECK_FALSE(r.ok);
    CHECK(r.why_not.find("clock anomaly") != std::string::npos);
  }
  SECTION("a window too short, a malformed layout") {
    auto s = sink_bound();
    s.window_ns = 1000;
    CHECK_FALSE(da::find_bottleneck(s, l).ok);
    auto bad = l;
    bad.links.pop_back();
    CHECK_FALSE(da::find_bottleneck(sink_bound(), bad).ok);
  }
  SECTION("no stage saturated: no stage is named") {
    dflash::profile_snapshot s;
    s.window_ns = 1'000'000'000;
    s.keys = {key("src.work", 100, 1'000'000), key("mid.work", 100, 2'000'000), key("sink.work", 100, 3'000'000)};
    const auto r = da::find_bottleneck(s, l);
    REQUIRE(r.ok);
    CHECK(r.limiting == da::pipeline_layout::npos);
    CHECK(r.evidence.find("no stage is saturated") == 0);
  }
}

TEST_CASE("find_bottleneck: a serial stage on a direct segment's threads is judged against those threads",
          "[analysis][bottleneck]") {
  // src -direct-> mid x4 -direct-> sink: src and sink run one call at a time on mid's 4 threads,
  // which queue for their turn (3.2 s of src.wait over 4 threads is no anomaly).
  da::pipeline_layout l;
  l.stages = {{"src", 1}, {"mid", 4}, {"sink", 1}};
  l.links = {{"q", model_kind::direct, 8}, {"r", model_kind::direct, 8}};
  dflash::profile_snapshot s;
  s.window_ns = 1'000'000'000;
  s.keys = {key("src.work", 100, 2'000'000), total("src.wait", 100, 3'200'000'000),
            key("mid.work", 100, 20'000'000), key("sink.work", 100, 1'000'000), total("r.push_wait", 100, 400'000'000)};
  const auto r = da::find_bottleneck(s, l);
  REQUIRE(r.ok);
  CHECK(r.stages[0].starved == Approx(0.8));  // over 4 threads
  CHECK(r.stages[1].blocked == Approx(0.1));
  CHECK(r.limiting == da::pipeline_layout::npos);  // mid 50 %, src 20 %: nobody saturated
}

// ------------------------------------------------------------------ what-if ---

TEST_CASE("what-if: predictions on a profile of deterministic stages", "[analysis][what_if]") {
  // src 1 ms -> q(4) -> sink 2 ms, 1000 items over 2.001 s, plenty of cores.
  da::pipeline_layout l;
  l.stages = {{"src", 1}, {"sink", 1}};
  l.links = {{"q", model_kind::queue, 4}};
  dflash::profile_snapshot s;
  s.window_ns = 2'001'000'000;
  s.keys = {key("src.work", 1000, 1'000'000), total("src.wait", 1000, 1'000'000'000),
            total("q.push_wait", 1000, 1'000'000'000), key("sink.work", 1000, 2'000'000), total("sink.wait", 1000, 1'000'000)};
  da::model_options many;
  many.cores = 64;
  const auto cm = da::calibrate(s, l, many);
  REQUIRE(cm.ok);
  CHECK(cm.cpu_stretch == 1);
  CHECK(std::abs(cm.fit) < 0.01);
  auto gain = [&](const char* what) { return da::predict(cm, da::parse_scenario(what, l)).gain; };
  CHECK(gain("sink.speed=2") == Approx(1.0).epsilon(0.01));     // 2 ms -> 1 ms: twice the throughput
  CHECK(gain("sink.workers=2") == Approx(1.0).epsilon(0.01));
  CHECK(gain("sink.workers=3") == Approx(1.0).epsilon(0.01));   // then the 1 ms source binds
  CHECK(std::abs(gain("src.speed=2")) < 0.01);                  // not the bottleneck: nothing
  CHECK(gain("sink.speed=0.5") == Approx(-0.5).epsilon(0.01));  // twice as slow
  const auto ranked = da::standard_what_ifs(cm);
  REQUIRE(ranked.size() >= 3);
  CHECK(ranked[0].gain == Approx(1.0).epsilon(0.01));

  // The same profile on one core: 3 ms of CPU per item, so a second sink worker buys nothing.
  da::model_options single;
  single.cores = 1;
  const auto one = da::calibrate(s, l, single);
  REQUIRE(one.ok);
  CHECK(one.cpu_stretch == Approx(1.5).epsilon(0.01));  // 3 s of stage work in 2 s on one core
  CHECK(std::abs(da::predict(one, da::parse_scenario("sink.workers=2", l)).gain) < 0.02);
}

TEST_CASE("what-if: scenarios are parsed strictly; advice names the flag", "[analysis][what_if]") {
  const auto l = three_stages();
  const auto sc = da::parse_scenario("mid.workers=3,r.depth=16,sink.speed=1.5", l);
  REQUIRE(sc.changes.size() == 3);
  CHECK(sc.text() == "mid.workers=3,r.depth=16,sink.speed=1.5");
  for (const char* bad : {"mid.workers=0", "mid.workers=2.5", "nope.workers=2", "q.workers=2", "mid.depth=3",
                          "r.depth=x", "sink.speed=0", "sink.speed=inf", "mid.threads=2", "mid", ""})
    CHECK_THROWS_AS(da::parse_scenario(bad, l), std::invalid_argument);

  da::advice_options o;
  o.knobs = {{"mid.workers", "--mid-workers"}};
  o.model.cores = 64;
  o.requested = {da::parse_scenario("mid.workers=3", l)};
  const auto a = da::advise(sink_bound(), l, o);
  REQUIRE(a.model.ok);
  const std::string t = da::format_advice(a, o);
  CHECK(t.find("limiting stage: sink") != std::string::npos);
  CHECK(t.find("sink 2x faster") != std::string::npos);
  CHECK(t.find("--mid-workers 3") != std::string::npos);
  o.format = dflash::report_format::json;
  const auto j = nlohmann::json::parse(da::format_advice(a, o));
  CHECK(j["bottleneck"]["limiting"] == "sink");
  CHECK(j["what_if"][0]["change"] == "sink.speed=2");
  CHECK(j["requested"][0]["how"] == "--mid-workers 3");
  // The top three are speedups (no flag): the best change a flag makes is listed after them.
  REQUIRE(j["best_with_flag"].size() == 1);
  CHECK(j["best_with_flag"][0]["how"].get<std::string>().rfind("--mid-workers", 0) == 0);
  o.format = dflash::report_format::table;
  CHECK(da::format_advice(a, o).find("best change a flag makes:") != std::string::npos);
  o.knobs = {{"mid.workers", "mid_workers="}};  // a keyword argument: no space before the value
  CHECK(da::format_advice(a, o).find("mid_workers=3") != std::string::npos);
  o.format = dflash::report_format::json;

  // Not enough data reaches the advice too.
  auto thin = sink_bound();
  thin.window_ns = 5;
  const auto none = da::advise(thin, l, o);
  CHECK_FALSE(none.model.ok);
  CHECK(nlohmann::json::parse(da::format_advice(none, o))["model"]["ok"] == false);
}

// ------------------------------------------------------------------- layout ---

namespace {
struct Src {
  static constexpr dflash::fixed_string name{"src"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};
struct Mid {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) { return x; }
};
struct Sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};
}  // namespace

TEST_CASE("Pipeline::layout: the compile-time topology with the run-time shape", "[analysis][layout]") {
  using pipe = dflash::Pipeline<dflash::NullProfiler, Src, dflash::queue_link<"q", 8>, dflash::workers<Mid, 3>,
                                dflash::queue_link<"r", 4>, dflash::in_order<Sink>>;
  auto shape = pipe::default_shape();
  shape.depths[1] = 16;
  const auto l = pipe::layout(shape);
  REQUIRE(l.well_formed());
  REQUIRE(l.stages.size() == 3);
  CHECK(l.stages[0].name == "src");
  CHECK(l.stages[1].workers == 3);
  CHECK(l.stages[2].in_order);
  CHECK_FALSE(l.stages[1].device);
  CHECK(l.links[0].name == "q");
  CHECK(l.links[0].depth == 8);
  CHECK(l.links[1].depth == 16);
  CHECK(l.links[1].kind == model_kind::queue);
  CHECK_FALSE(l.device_work_on_cpu);
  pipe p(shape);
  CHECK(p.layout().links[1].depth == 16);
}
