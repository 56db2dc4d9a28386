// device_queue_link on a real GPU (cuda_backend); kernels in test_device_queue_link_gpu.cu:
// producer kernels push a data-dependent number of rows with one reservation
// per warp or per block (warp_push / block_push: cub::WarpReduce / BlockReduce
// + ring_control), some after a spin; consumer kernels tally their batch (count read on the device); at the
// end every row is there exactly once, and the host waited on no event. Without a
// device the shared main reports "skipped" (exit 77).
#include <catch2/catch.hpp>
#include <dflash/device/cuda_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/links/device_queue.hpp>

#include <cuda_runtime.h>

#include "device_queue_link_kernels.hpp"
#include "numbers_source.hpp"

#include <cstdint>
#include <vector>

using B = dflash::cuda_backend;
using DS = dflash::device_stream<B>;
using dflash::NullProfiler;
using namespace rows_gpu_test;

namespace {
using rows = dflash::device_rows<row, B>;
template <class P>
using numbers = dflash_test::numbers;
template <class P>
struct produce {
  static constexpr dflash::fixed_string name{"produce"};
  using input_type = int;
  using output_type = rows;
  void operator()(int&& x, rows& out, const DS& s) const { launch_produce(out.pusher(), x, x % 9 == 0 ? 200'000 : 0, s.native()); }
};
template <class P>
struct consume {
  static constexpr dflash::fixed_string name{"consume"};
  using input_type = rows;
  using output_type = void;
  int* tally;
  int* bad;
  void operator()(rows& in, const DS& s) const { launch_consume(in.batch(), tally, bad, s.native()); }
};
template <class P>
using gpu_rows_pipeline = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in", 4>, produce<P>,
                                           dflash::device_queue_link<"rows", 256, bound, 48>, consume<P>>;
}  // namespace

TEST_CASE("device_queue_link on cuda_backend: every row once, no host wait per item", "[gpu][rows]") {
  int *tally = nullptr, *bad = nullptr;
  REQUIRE(cudaMalloc(&tally, sizeof(int) * items * bound) == cudaSuccess);
  REQUIRE(cudaMalloc(&bad, sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemset(tally, 0, sizeof(int) * items * bound) == cudaSuccess);
  REQUIRE(cudaMemset(bad, 0, sizeof(int)) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  {
    auto shape = gpu_rows_pipeline<NullProfiler>::default_shape();
    shape.workers[1] = 3;
    shape.workers[2] = 2;
    gpu_rows_pipeline<NullProfiler> p(shape, numbers<NullProfiler>{items}, produce<NullProfiler>{},
                                      consume<NullProfiler>{tally, bad});
    p.run();
    p.join();
    CHECK(p.backend().stats().host_waits == 0);
    CHECK(p.link<1>().rows_pushed() == p.link<1>().rows_popped());
  }
  std::vector<int> got(static_cast<std::size_t>(items * bound));
  int nbad = -1;
  REQUIRE(cudaMemcpy(got.data(), tally, sizeof(int) * got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(&nbad, bad, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(nbad == 0);
  int wrong = 0;
  for (int x = 0; x < items; ++x)
    for (int j = 0; j < bound; ++j) wrong += got[static_cast<std::size_t>(x * bound + j)] != (j < rows_of(x) ? 1 : 0);
  CHECK(wrong == 0);
  cudaFree(tally);
  cudaFree(bad);
}
