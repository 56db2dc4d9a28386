// Placement over every visible CUDA device (cuda_backend): fill workers spread
// over the devices, check workers over them in reverse, so most items cross
// devices through the hs_device link — read in place where the devices have
// peer access, and through the peer-copy path (forced) as well. Kernels are
// those of test_device_channel_gpu.cu. Fewer than 2 devices: "skipped" (exit
// 77) from the shared main (MIN_DEVICES 2).
#include <catch2/catch.hpp>
#include <dflash/device/cuda_backend.hpp>
#include <dflash/pipeline.hpp>

#include <cuda_runtime.h>

#include "device_channel_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <vector>
#include "numbers_source.hpp"

using B = dflash::cuda_backend;
using DS = dflash::device_stream<B>;
using dflash::NullProfiler;

namespace {
using gpu_test::words;

struct gslot : dflash::device_item<B> {
  int value = -1;
  int device = -1;
  dflash::device_buffer<int, B> data;
  void mirror_from(const gslot& src, const DS& s) {
    value = src.value;
    device = src.device;
    data.copy_from(src.data, s);
  }
};

using dflash_test::numbers;

struct gfill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = gslot;
  void operator()(int&& x, gslot& out, const DS& s) const {
    out.value = x;
    out.device = s.device();
    int* d = out.data.ensure(words, s);
    gpu_test::launch_fill(d, x, x % 5 == 0 ? 1'000'000 : 0, s.native());  // some items spin first
  }
};

struct gresult {
  int value, from, on;
};

struct gcheck {  // writes its verdict into pinned host memory (portable under UVA)
  static constexpr dflash::fixed_string name{"check"};
  using input_type = gslot;
  using output_type = gresult;
  int* pinned_ok;
  gresult operator()(gslot& in, const DS& s) const {
    gpu_test::launch_check(in.data.data(), in.value, pinned_ok + in.value, s.native());
    return {in.value, in.device, s.device()};
  }
};

struct gcollect {
  static constexpr dflash::fixed_string name{"collect"};
  using input_type = gresult;
  using output_type = void;
  std::vector<gresult>* out;
  void operator()(gresult&& r) { out->push_back(r); }
};

using placed = dflash::Pipeline<NullProfiler, numbers, dflash::queue_link<"in_q", 4>, dflash::workers<gfill, 2>,
                                dflash::device_link<"hs_device", 3>, dflash::workers<gcheck, 2>,
                                dflash::queue_link<"out_q", 8>, gcollect>;

int device_count() {
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  return n;
}

void run_placed(bool force_copy) {
  const int devs = device_count();
  constexpr int n = 400;
  int* ok = nullptr;
  REQUIRE(cudaMallocHost(&ok, n * sizeof(int)) == cudaSuccess);
  std::fill(ok, ok + n, -1);  // an unwritten verdict fails
  std::vector<gresult> got;
  {
    auto shape = placed::default_shape();
    shape.workers[1] = shape.workers[2] = static_cast<std::size_t>(2 * devs);
    shape.devices[1].resize(static_cast<std::size_t>(devs));
    std::iota(shape.devices[1].begin(), shape.devices[1].end(), 0);
    shape.devices[2].assign(shape.devices[1].rbegin(), shape.devices[1].rend());
    placed p(shape, numbers{n}, gfill{}, gcheck{ok}, gcollect{&got});
    if (force_copy) p.link<1>().force_peer_copy_for_testing();
    p.run();
    p.join();
    const auto st = p.backend().stats();
    CHECK(st.synchronizes == static_cast<std::uint64_t>(4 * devs));  // at worker exit only
    CHECK(st.host_waits == static_cast<std::uint64_t>(n));           // the sink's, one per item
  }
  REQUIRE(got.size() == static_cast<std::size_t>(n));
  std::map<int, int> seen;
  int crossed = 0;
  for (const gresult& r : got) {
    CHECK(ok[r.value] == 1);  // intact, not unwritten (-1) or wrong (0)
    ++seen[r.value];
    crossed += r.from != r.on ? 1 : 0;
  }
  CHECK(seen.size() == static_cast<std::size_t>(n));
  CHECK(crossed > 0);
  cudaFreeHost(ok);
}
}  // namespace

TEST_CASE("placement over every visible device: items cross devices through the link, exactly once, intact",
          "[gpu][device][placement]") {
  B b;
  const int devs = device_count();
  int peers = 0;
  for (int a = 0; a < devs; ++a)
    for (int c = 0; c < devs; ++c) peers += b.can_access_peer(a, c) ? 1 : 0;
  WARN(devs << " devices, " << peers << " ordered pairs with peer access");
  SECTION("in place where peer access exists, else copied") { run_placed(false); }
  SECTION("always through the peer copy") { run_placed(true); }
}

TEST_CASE("cuda_backend: enabling peer access twice is no error and leaves no error behind", "[gpu][device][placement]") {
  B b;
  if (!b.can_access_peer(0, 1)) {
    WARN("devices 0 and 1 have no peer access: nothing to enable");
    return;
  }
  b.set_device(0);
  b.enable_peer_access(1);
  b.enable_peer_access(1);  // cudaErrorPeerAccessAlreadyEnabled, read and cleared
  CHECK(cudaGetLastError() == cudaSuccess);
}
