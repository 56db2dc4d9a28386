// Device links on a real GPU (cuda_backend); kernels in test_device_channel_gpu.cu: producer kernels fill slots on
// one stream per worker, consumer kernels check them on others; the pipeline
// only records events and makes streams wait. Some producer kernels spin
// first, so a consumer that did not wait would read unwritten data. Without a
// device the shared main reports "skipped" (exit 77).
#include <catch2/catch.hpp>
#include <dflash/device/cuda_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <cuda_runtime.h>

#include "device_channel_kernels.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include "numbers_source.hpp"

using B = dflash::cuda_backend;
using DS = dflash::device_stream<B>;
using dflash::NullProfiler;

namespace {
using gpu_test::words;

struct gslot : dflash::device_item<B> {
  int value = -1;
  dflash::device_buffer<int, B> data;
};

template <class P>
using numbers = dflash_test::numbers;

template <class P>
struct gfill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = gslot;
  void operator()(int&& x, gslot& out, const DS& s) const {
    out.value = x;
    int* d = out.data.ensure(words, s);
    gpu_test::launch_fill(d, x, x % 5 == 0 ? 2'000'000 : 0, s.native());  // ~1 ms spin on some items
  }
};

struct gresult {
  int value;
};

template <class P>
struct gcheck {  // device -> host: writes its verdict into pinned host memory
  static constexpr dflash::fixed_string name{"check"};
  using input_type = gslot;
  using output_type = gresult;
  int* pinned_ok;
  gresult operator()(gslot& in, const DS& s) const {
    gpu_test::launch_check(in.data.data(), in.value, pinned_ok + in.value, s.native());
    return {in.value};
  }
};

template <class P>
struct gcollect {
  static constexpr dflash::fixed_string name{"collect"};
  using input_type = gresult;
  using output_type = void;
  const int* pinned_ok;
  std::vector<int>* verdicts;  // read after the pipeline waited for the check kernel
  void operator()(gresult&& r) { verdicts->push_back(pinned_ok[r.value] * 1000000 + r.value); }
};

template <class P>
using gpu_pipeline = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in_q", 4>, dflash::workers<gfill<P>, 2>,
                                      dflash::device_link<"hs_device", 3>, dflash::workers<gcheck<P>, 2>,
                                      dflash::queue_link<"out_q", 8>, gcollect<P>>;

struct pinned {
  int* p = nullptr;
  explicit pinned(std::size_t n) {
    REQUIRE(cudaMallocHost(&p, n * sizeof(int)) == cudaSuccess);
    for (std::size_t i = 0; i < n; ++i) p[i] = -1;  // poison: an unwritten verdict fails
  }
  ~pinned() { cudaFreeHost(p); }
};

template <class P>
void run_and_check(const P& prof, int n) {
  pinned ok(static_cast<std::size_t>(n));
  std::vector<int> verdicts;
  gpu_pipeline<P> p(prof, numbers<P>{n}, gfill<P>{}, gcheck<P>{ok.p}, gcollect<P>{ok.p, &verdicts});
  p.run();
  p.join();
  REQUIRE(verdicts.size() == static_cast<std::size_t>(n));
  std::map<int, int> seen;
  for (int v : verdicts) {
    CHECK(v / 1000000 == 1);  // intact (1), not unwritten (-1) or wrong (0)
    ++seen[v % 1000000];
  }
  REQUIRE(seen.size() == static_cast<std::size_t>(n));
  const auto st = p.backend().stats();
  CHECK(st.synchronizes == 4);  // one per device-stage worker, at its exit
  CHECK(st.host_waits == static_cast<std::uint64_t>(n));  // the sink's, one per item
}
}  // namespace

TEST_CASE("cuda_backend: a device link carries slots between streams, exactly once, intact", "[gpu][device]") {
  run_and_check(NullProfiler{}, 500);
}

TEST_CASE("cuda_backend: profiled device stages record .gpu from their events", "[gpu][device]") {
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<gpu_pipeline<dflash::NullProfiler>>>;
  prof_t prof;
  run_and_check(prof, 200);
  const auto snap = prof.snapshot();
  CHECK(snap.find("fill.gpu")->count == 200);
  CHECK(snap.find("check.gpu")->count == 200);
  CHECK(snap.find("fill.gpu")->max_ns > 100'000u);  // the spinning items
}

TEST_CASE("cuda_backend: the allocation pool keeps freed memory (release threshold)", "[gpu][device]") {
  B b;
  const auto s = b.create_stream();
  int dev = 0;
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  cudaMemPool_t pool{};
  REQUIRE(cudaDeviceGetMemPool(&pool, dev) == cudaSuccess);
  std::uint64_t threshold = 0;
  REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
  CHECK(threshold == UINT64_MAX);
  void* p = b.allocate(1 << 20, s);  // freed and allocated again: served by the pool, which keeps it
  b.deallocate(p, s);
  b.synchronize(s);
  std::uint64_t reserved = 0;
  REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess);
  CHECK(reserved >= (1u << 20));
  b.destroy_stream(s);
}

TEST_CASE("cuda_backend: a standalone channel between two streams for many laps", "[gpu][device]") {
  B b;
  constexpr int n = 300;
  {
    dflash::device_channel<gslot> ch(b, 2);
    auto ps = b.create_stream(), cs = b.create_stream();
    const DS prod(b, ps), cons(b, cs);
    int* dev_ok = nullptr;
    REQUIRE(cudaMalloc(&dev_ok, n * sizeof(int)) == cudaSuccess);
    REQUIRE(cudaMemset(dev_ok, 0xff, n * sizeof(int)) == cudaSuccess);  // poison
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // set-up: the non-blocking streams do not wait for it
    std::string consumer_error;  // a consumer that throws says so here, not through std::terminate
    std::thread consumer([&] {
      try {
        while (auto r = ch.pop(cons)) {
          gpu_test::launch_check(r->item().data.data(), r->item().value, dev_ok + r->item().value, cs);
          ch.release(std::move(*r), cons);
        }
      } catch (const std::exception& e) {
        consumer_error = e.what();
        ch.close();
      }
    });
    // A failing REQUIRE below throws: the channel is closed and the consumer
    // joined on the way out, or the joinable thread's destructor terminates the
    // run before Catch can report the failure.
    struct join_on_exit {
      dflash::device_channel<gslot>& ch;
      std::thread& t;
      ~join_on_exit() {
        ch.close();
        if (t.joinable()) t.join();
      }
    } joined{ch, consumer};
    for (int x = 0; x < n; ++x) {
      auto r = ch.acquire(prod);
      REQUIRE(r);
      r->item().value = x;
      gpu_test::launch_fill(r->item().data.ensure(words, prod), x, x % 7 == 0 ? 1'000'000 : 0, ps);
      ch.publish(std::move(*r), prod);
    }
    ch.close();
    consumer.join();
    INFO(consumer_error);
    REQUIRE(consumer_error.empty());
    b.synchronize(cs);
    b.synchronize(ps);
    std::vector<int> ok(n);
    REQUIRE(cudaMemcpy(ok.data(), dev_ok, n * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int x = 0; x < n; ++x) CHECK(ok[static_cast<std::size_t>(x)] == 1);
    cudaFree(dev_ok);
    b.destroy_stream(ps);
    b.destroy_stream(cs);
  }
  CHECK(b.stats().host_waits == 4);  // the channel's teardown only (2 slots x 2 events)
  CHECK(b.stats().synchronizes == 2);
}

// ---- variable-size items: a CUB-aggregated device_queue inside each slot -----------
namespace {
struct ring_slot : dflash::device_item<B> {
  int value = -1;
  gpu_test::ring* rows = nullptr;  // made on first use; drained every lap
  ring_slot() = default;
  ring_slot(const ring_slot&) = delete;
  ring_slot& operator=(const ring_slot&) = delete;
  ~ring_slot() { gpu_test::destroy_ring(rows); }
};
int expected_rows(int x) {
  int n = 0;
  for (int l = 0; l < 32; ++l) n += (x + l) % 3;
  return n;
}
long long expected_sum(int x) {
  long long s = 0;
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < (x + l) % 3; ++j) s += x * 1000 + l * 10 + j;
  return s;
}

template <class P>
struct push_rows {
  static constexpr dflash::fixed_string name{"push_rows"};
  using input_type = int;
  using output_type = ring_slot;
  int* status;  // device: one status per item
  void operator()(int&& x, ring_slot& out, const DS& s) const {
    out.value = x;
    if (!out.rows) out.rows = gpu_test::make_ring(64, s.native());
    gpu_test::launch_ring_fill(out.rows, x, status + x, s.native());
  }
};
template <class P>
struct drain_rows {  // device sink: per item, rows and sum into pinned memory
  static constexpr dflash::fixed_string name{"drain_rows"};
  using input_type = ring_slot;
  using output_type = void;
  long long* pinned_out;
  void operator()(ring_slot& in, const DS& s) const {
    gpu_test::launch_ring_drain(in.rows, pinned_out + 2 * in.value, s.native());
  }
};
template <class P>
using ring_pipeline = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in_q", 4>, dflash::workers<push_rows<P>, 2>,
                                       dflash::device_link<"rows_dev", 3>, drain_rows<P>>;
}  // namespace

TEST_CASE("cuda_backend: variable-size items through a device_queue in the slot; counts never reach the host",
          "[gpu][device]") {
  constexpr int n = 200;
  int* status = nullptr;
  long long* out = nullptr;
  REQUIRE(cudaMalloc(&status, n * sizeof(int)) == cudaSuccess);
  REQUIRE(cudaMemset(status, 0xff, n * sizeof(int)) == cudaSuccess);  // poison
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // set-up: the non-blocking streams do not wait for it
  REQUIRE(cudaMallocHost(&out, 2 * n * sizeof(long long)) == cudaSuccess);
  for (int i = 0; i < 2 * n; ++i) out[i] = -1;  // poison
  {
    ring_pipeline<NullProfiler> p(numbers<NullProfiler>{n}, push_rows<NullProfiler>{status},
                                  drain_rows<NullProfiler>{out});
    p.run_to_completion();  // each worker waited for its stream at exit
  }
  std::vector<int> st(n);
  REQUIRE(cudaMemcpy(st.data(), status, n * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int x = 0; x < n; ++x) {
    CHECK(st[static_cast<std::size_t>(x)] == 0);  // ring_status::ok
    CHECK(out[2 * x] == expected_rows(x));
    CHECK(out[2 * x + 1] == expected_sum(x));
  }
  cudaFree(status);
  cudaFreeHost(out);
}
