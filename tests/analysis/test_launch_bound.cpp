// A device stage built to be launch-bound, on the asynchronous host twin: its call (the host's
// enqueueing) takes 5 ms per item, the work it enqueues 0.05 ms. The pipeline records
// "<stage>.launch" beside "<stage>.gpu", and the bottleneck report names the stage launch-bound;
// a control stage with the proportions reversed is not.
#include <catch2/catch.hpp>
#include <dflash/analysis.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "numbers_source.hpp"
#include "watchdog.hpp"

using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;

namespace {
struct slot : dflash::device_item<B> {
  int value = -1;
  dflash::device_buffer<int, B> data;
};

struct launcher {  // host -> device link: `host` of host time per item, `device` of enqueued work
  static constexpr dflash::fixed_string name{"launcher"};
  using input_type = int;
  using output_type = slot;
  std::chrono::microseconds host, device;
  void operator()(int&& x, slot& out, const DS& s) const {
    out.value = x;
    int* d = out.data.ensure(1, s);
    std::this_thread::sleep_for(host);  // stands for many small launches
    s.enqueue([d, x, t = device] {
      std::this_thread::sleep_for(t);
      *d = x;
    });
  }
};

struct reader {  // device link -> host value
  static constexpr dflash::fixed_string name{"reader"};
  using input_type = slot;
  using output_type = int;
  int operator()(slot& in, const DS&) const { return in.value; }
};

struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  int* n;
  void operator()(int&&) const { ++*n; }
};

template <class P>
using pipe = dflash::Pipeline<P, dflash_test::numbers, dflash::queue_link<"in_q", 4>, launcher,
                              dflash::device_link<"hs", 4>, reader, dflash::queue_link<"out_q", 4>, sink>;
using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<pipe<dflash::NullProfiler>>>;

dflash::analysis::bottleneck_report run(std::chrono::microseconds host, std::chrono::microseconds device,
                                        prof_t& prof, dflash::analysis::advice* advised = nullptr) {
  int n = 0;
  pipe<prof_t> p(prof, dflash_test::numbers{40}, launcher{host, device}, reader{}, sink{&n});
  p.run_to_completion();
  REQUIRE(n == 40);
  if (advised) *advised = dflash::analysis::advise(prof.snapshot(), p.layout());
  return dflash::analysis::find_bottleneck(prof.snapshot(), p.layout());
}
}  // namespace

TEST_CASE("a device stage whose launches outlast its device work: .launch recorded, named launch-bound",
          "[analysis][launch]") {
  watchdog wd("launch-bound");
  using namespace std::chrono_literals;
  prof_t prof;
  const auto r = run(5000us, 50us, prof);
  const auto snap = prof.snapshot();
  REQUIRE(snap.find("launcher.launch")->count == 40);
  CHECK(snap.find("launcher.launch")->min_ns >= 5'000'000u);  // at least the call
  CHECK(snap.find("reader.launch")->count == 40);
  REQUIRE(r.ok);
  REQUIRE(r.limiting == 1);
  CHECK(r.stages[1].launch_bound);
  CHECK_FALSE(r.stages[2].launch_bound);  // the reader enqueues next to nothing, but its launches cost nothing either
  CHECK(r.evidence.find("launch-bound: the host enqueues") != std::string::npos);
  CHECK(dflash::analysis::format_bottleneck(r).find("(launch-bound)") != std::string::npos);
  const auto j = nlohmann::json::parse(dflash::analysis::format_bottleneck(r, dflash::report_format::json));
  CHECK(j["stages"][1]["launch_bound"] == true);
}

TEST_CASE("graph <stage>: the advisor bounds what graphing a launch-bound stage gains", "[analysis][launch]") {
  watchdog wd("graph what-if");
  using namespace std::chrono_literals;
  prof_t prof;
  dflash::analysis::advice a;
  (void)run(5000us, 50us, prof, &a);
  REQUIRE(a.model.ok);
  REQUIRE(a.graphs.size() == 1);  // the launcher only
  const auto& g = a.graphs[0];
  CHECK(g.stage == "launcher");
  // Its call is all launches: the device busy all of .gpu (5 ms, its wait for them) leaves the stage
  // as slow as it is; its 50 us of work negligible takes it off the critical path (the reader and
  // source then bind, at well over twice the rate).
  CHECK(std::abs(g.low.gain) < 0.1);
  CHECK(g.high.gain > 1.0);
  CHECK(g.low.gain <= g.high.gain);
  const std::string text = dflash::analysis::format_advice(a, {});
  CHECK(text.find("graph launcher (launch-bound): ") != std::string::npos);
  dflash::analysis::advice_options as_json;
  as_json.format = dflash::report_format::json;
  const auto j = nlohmann::json::parse(dflash::analysis::format_advice(a, as_json));
  REQUIRE(j["model"]["ok"] == true);
  REQUIRE(j["graph"].size() == 1);
  CHECK(j["graph"][0]["stage"] == "launcher");
  CHECK(j["graph"][0]["high"]["gain"].get<double>() > 1.0);

  // The control (device work outlasting its launches) is not launch-bound: no graph line.
  prof_t control;
  (void)run(100us, 2000us, control, &a);
  CHECK(a.graphs.empty());
  CHECK(dflash::analysis::format_advice(a, {}).find("graph ") == std::string::npos);
}

TEST_CASE("the control: device work that outlasts its launches is not launch-bound", "[analysis][launch]") {
  watchdog wd("launch-bound control");
  using namespace std::chrono_literals;
  prof_t prof;
  const auto r = run(100us, 2000us, prof);
  REQUIRE(r.ok);
  REQUIRE(r.limiting == 1);
  CHECK(r.stages[1].gpu_binds);
  CHECK_FALSE(r.stages[1].launch_bound);
  CHECK(r.evidence.find("launch-bound") == std::string::npos);
}
