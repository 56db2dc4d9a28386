// graphed<S> on a real GPU (cuda_backend): the stage's launches (stream-ordered memsets and
// copies, which stream capture records as graph nodes) captured once per slot with
// cudaStreamBeginCapture and replayed with cudaGraphLaunch; each item's value reaches the
// replay through slot memory. A stage that synchronises inside launch() fails the run with the
// stage's name (the capture is invalidated, as CUDA documents). Without a device the shared main
// reports "skipped" (exit 77).
#include <catch2/catch.hpp>
#include <dflash/device/cuda_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/graphed.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "collect_sink.hpp"
#include "numbers_source.hpp"
#include "watchdog.hpp"

using B = dflash::cuda_backend;
using DS = dflash::device_stream<B>;

namespace {
constexpr std::size_t words = 1024;

struct slot : dflash::device_item<B> {
  int value = -1;
  dflash::device_buffer<std::uint8_t, B> param;  // the item's value, one byte
  dflash::device_buffer<std::uint8_t, B> data;
};

struct fill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = slot;
  bool sync_in_launch = false;
  void prepare(int& x, slot& out, const DS& s) const {
    out.value = x;
    out.param.ensure(1, s);
    out.data.ensure(words, s);
    // Not captured: the item's value into slot memory (a memset carries it by value).
    dflash::detail::cuda_check(cudaMemsetAsync(out.param.data(), x & 0xFF, 1, s.native()), "cudaMemsetAsync");
  }
  void launch(const int&, slot& out, const DS& s) const {
    if (sync_in_launch) dflash::detail::cuda_check(cudaStreamSynchronize(s.native()), "cudaStreamSynchronize");
    // Captured: every byte of data = param, by doubling copies (1, 2, 4, ... bytes).
    dflash::detail::cuda_check(cudaMemcpyAsync(out.data.data(), out.param.data(), 1, cudaMemcpyDeviceToDevice, s.native()),
             "cudaMemcpyAsync");
    for (std::size_t have = 1; have < words; have *= 2)
      dflash::detail::cuda_check(cudaMemcpyAsync(out.data.data() + have, out.data.data(), std::min(have, words - have),
                               cudaMemcpyDeviceToDevice, s.native()),
               "cudaMemcpyAsync");
  }
  auto graph_key(const int&, const slot& out) const {
    return std::tuple(out.param.data(), out.data.data(), out.data.size());
  }
};

struct result {
  int value = -1;
  int bad = -1;
};

struct check {  // device link -> host value: reads the slot back (a test's shortcut: a host wait)
  static constexpr dflash::fixed_string name{"check"};
  using input_type = slot;
  using output_type = result;
  result operator()(slot& in, const DS& s) const {
    std::vector<std::uint8_t> host(words);
    // Worker threads: errors as exceptions (the run rethrows them), not Catch assertions.
    dflash::detail::cuda_check(cudaMemcpyAsync(host.data(), in.data.data(), words, cudaMemcpyDeviceToHost, s.native()),
                               "cudaMemcpyAsync");
    dflash::detail::cuda_check(cudaStreamSynchronize(s.native()), "cudaStreamSynchronize");
    result r{in.value, 0};
    for (const std::uint8_t b : host) r.bad += b != static_cast<std::uint8_t>(in.value & 0xFF);
    return r;
  }
};

using collect = dflash_test::collect<result>;

using graphed_pipe = dflash::Pipeline<dflash::NullProfiler, dflash_test::numbers, dflash::queue_link<"in", 4>,
                              dflash::workers<dflash::graphed<fill>, 2>, dflash::device_link<"hs", 3>, check,
                              dflash::queue_link<"out", 8>, collect>;
}  // namespace

TEST_CASE("graphed on CUDA: one graph per slot, one cudaGraphLaunch per item, each item's own bytes",
          "[graphed][gpu]") {
  watchdog wd("graphed gpu");
  static_assert(dflash::GraphBackend<B>);
  std::vector<result> got;
  graphed_pipe p(dflash_test::numbers{300}, dflash::graphed<fill>{fill{}}, check{}, collect{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 300);
  std::vector<int> seen(300, 0);
  for (const auto& r : got) {
    CHECK(r.bad == 0);
    ++seen[static_cast<std::size_t>(r.value)];
  }
  for (const int k : seen) CHECK(k == 1);
  const auto st = p.stage<graphed_pipe::stage_index<"fill">>().stats();
  CHECK(st.launches == 300);
  CHECK(st.captures >= 1);
  CHECK(st.captures <= 3);  // the link's slots
}

TEST_CASE("graphed on CUDA: a synchronisation inside launch() fails the run naming the stage", "[graphed][gpu]") {
  watchdog wd("graphed gpu error");
  std::vector<result> got;
  graphed_pipe p(dflash_test::numbers{5}, dflash::graphed<fill>{fill{true}}, check{}, collect{&got});
  CHECK_THROWS_WITH(p.run_to_completion(),
                    Catch::Contains("dflash::graphed: stage 'fill': its launch() could not be captured"));
}
