// Device queue on a real GPU: warp- and block-aggregated pushes, warp pops on
// another stream after a stream_token hand-off, packed enqueue via
// cub::DeviceScan (including the lengths it must reject), 64-bit batch totals,
// producer and consumer kernels running concurrently over a small ring for
// hundreds of laps, and per-item hand-offs with two items in flight.
// Without a device the shared main reports "skipped" (exit 77).
//
// No kernel here may spin forever: every retry loop has a time budget and,
// when it runs out, sets a flag the test checks (and prints "TIMED OUT: <step>").
// Tests tagged [concurrent] need two kernels resident at once (exclude them
// with "~[concurrent]" under a tool that serialises kernels), and load both
// kernels before launching the first (load_kernels).
//
// Set-up (dev_buf) runs on the legacy default stream, which the tests'
// non-blocking streams do not wait for: every set-up call waits for it.
#include <catch2/catch.hpp>
#include <dflash/queue/device_queue.cuh>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using dflash::ring_status;

namespace {
void ok(cudaError_t e) {
  INFO("CUDA: " << cudaGetErrorString(e));
  REQUIRE(e == cudaSuccess);
}

// cudaMemset and a cudaMemcpy from pageable memory are queued on the legacy
// default stream (the copy may return before its DMA is done), and a
// cudaStreamNonBlocking stream does not wait for that stream: without this, a
// kernel on a test stream could run before its buffer was poisoned, zeroed or filled.
void setup_done() { ok(cudaStreamSynchronize(cudaStreamLegacy)); }

template <class T>
struct dev_buf {
  T* p = nullptr;
  std::size_t n;
  explicit dev_buf(std::size_t count) : n(std::max<std::size_t>(count, 1)) {
    ok(cudaMalloc(&p, n * sizeof(T)));
    ok(cudaMemset(p, 0xff, n * sizeof(T)));  // poison: an element nothing wrote reads as all ones
    setup_done();
  }
  dev_buf(const dev_buf&) = delete;
  dev_buf& operator=(const dev_buf&) = delete;
  ~dev_buf() { cudaFree(p); }
  void zero() {
    ok(cudaMemset(p, 0, n * sizeof(T)));
    setup_done();
  }
  void put(const std::vector<T>& h) {
    ok(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    setup_done();
  }
  std::vector<T> get(std::size_t count) const {
    std::vector<T> h(count);
    ok(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

struct stream {
  cudaStream_t s{};
  stream() { ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { cudaStreamDestroy(s); }
};

// ---- bounded spins -----------------------------------------------------------
// Flag values a kernel leaves for the host.
enum : int { flag_ok = 0, flag_timeout = 1, flag_aborted = 2, flag_bad_status = 3 };
// Budget: wall-clock time without progress (%globaltimer, ns), so it means the
// same under a slow tool (compute-sanitizer) as on a bare GPU.
constexpr unsigned long long spin_budget_ns = 2000000000ull;  // 2 s without progress, then give up
constexpr unsigned full_mask = 0xffffffffu;

__device__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Called by a whole warp after a fruitless try; warp-uniform (lane 0 decides,
// `since` is lane 0's start of the current fruitless streak, 0 = none; reset
// it to 0 after progress). True: stop (out of budget, or another kernel
// already gave up and raised `stop_all`).
__device__ bool warp_give_up(unsigned long long& since, int* flag, int* stop_all) {
  const unsigned lane = threadIdx.x % 32;
  int verdict = 0;  // 0: keep trying, 1: someone else gave up, 2: out of budget
  if (lane == 0) {
    if (cuda::atomic_ref<int, cuda::thread_scope_device>(*stop_all).load(cuda::std::memory_order_relaxed) != 0) {
      verdict = 1;
    } else {
      const unsigned long long now = globaltimer_ns();
      if (since == 0) since = now;
      else if (now - since > spin_budget_ns) verdict = 2;
    }
  }
  verdict = __shfl_sync(full_mask, verdict, 0);
  if (verdict == 1) {
    if (lane == 0) atomicCAS(flag, flag_ok, flag_aborted);
    return true;
  }
  if (verdict == 2) {
    if (lane == 0) {
      atomicExch(flag, flag_timeout);
      atomicExch(stop_all, 1);
    }
    return true;
  }
  __nanosleep(100);
  return false;
}

// CUDA 13 loads a kernel lazily, at its first launch, and loading can wait for
// the device to be idle. A kernel first launched while another kernel spins
// waiting for it may then wait for the spinner: the spin runs out of budget and
// the test fails (or, unbounded, hangs). cudaFuncGetAttributes loads a kernel
// without launching it: call this for every kernel of a concurrent pair before
// the first of them is launched. (run.sh also runs the GPU tests with
// CUDA_MODULE_LOADING=EAGER; this keeps the tests right without it.)
template <class... Kernels>
void load_kernels(Kernels*... kernels) {
  cudaFuncAttributes attr{};
  (ok(cudaFuncGetAttributes(&attr, kernels)), ...);
}

const char* flag_name(int f) {
  switch (f) {
    case flag_ok: return "ok";
    case flag_timeout: return "TIMED OUT";
    case flag_aborted: return "aborted (another kernel timed out)";
    case flag_bad_status: return "unexpected ring status";
    default: return "flag never written (kernel did not run?)";
  }
}

// Reads a kernel's flag; a timeout is printed loudly, whatever the reporter shows.
void check_flag(const dev_buf<int>& flag, const std::string& step) {
  const int f = flag.get(1)[0];
  if (f == flag_timeout) std::printf("TIMED OUT: %s (a bounded spin ran out of budget; the kernel gave up)\n", step.c_str());
  else if (f != flag_ok) std::printf("FAILED: %s: %s\n", step.c_str(), flag_name(f));
  std::fflush(stdout);
  INFO("step: " << step << ": " << flag_name(f));
  CHECK(f == flag_ok);
}

// ---- kernels -----------------------------------------------------------------

// Lane l of global warp w pushes l % 3 items valued w * 1000 + l * 10 + j.
__global__ void warp_push_kernel(dflash::device_queue_view<int> q, int* status) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int mine[2];
  const unsigned n = lane % 3;
  for (unsigned j = 0; j < n; ++j) mine[j] = static_cast<int>(warp * 1000 + lane * 10 + j);
  const ring_status s = q.warp_try_push(mine, n);
  if (lane == 0) status[warp] = static_cast<int>(s);
}

// Every thread pushes one item valued 100000 + its global id.
__global__ void block_push_kernel(dflash::device_queue_view<int> q, int* status) {
  const int v = 100000 + static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const ring_status s = q.block_try_push<128>(&v, 1);
  if (threadIdx.x == 0) status[blockIdx.x] = static_cast<int>(s);
}

// Every lane / thread asks for `n` items: the 32-bit sum would wrap to 0.
// The items pointer is null: it must never be read.
__global__ void huge_warp_push_kernel(dflash::device_queue_view<int> q, std::uint32_t n, int* status) {
  const ring_status s = q.warp_try_push(nullptr, n);
  if (threadIdx.x == 0) *status = static_cast<int>(s);
}
__global__ void huge_block_push_kernel(dflash::device_queue_view<int> q, std::uint32_t n, int* status) {
  const ring_status s = q.block_try_push<128>(nullptr, n);
  if (threadIdx.x == 0) *status = static_cast<int>(s);
}

template <class T>
__global__ void size_kernel(dflash::device_queue_view<T> q, unsigned long long* out) {
  *out = q.ctl.size_approx();
}

// One warp drains what is there now (after a hand-off), stopping at the first non-ok status.
__global__ void warp_drain_kernel(dflash::device_queue_view<int> q, int* out, unsigned* count, int* last_status) {
  for (;;) {
    int v;
    ring_status s;
    const bool got = q.warp_try_pop(v, s);
    if (got) out[atomicAdd(count, 1u)] = v;
    if (s != ring_status::ok) {
      if (threadIdx.x == 0) *last_status = static_cast<int>(s);
      return;
    }
  }
}

// Warps pop until `closed`, retrying `empty` within the spin budget. Each
// warp's batch lands contiguously in pop order (lane i holds position first + i),
// so with ONE consumer warp, out[] is the ring's order.
template <class T>
__global__ void drain_until_closed_kernel(dflash::device_queue_view<T> q, T* out, unsigned out_cap, unsigned* count,
                                          int* last_status, int* flag, int* stop_all) {
  const unsigned lane = threadIdx.x % 32;
  unsigned long long since = 0;
  for (;;) {
    T v{};
    ring_status s;
    const bool got = q.warp_try_pop(v, s);
    const unsigned mask = __ballot_sync(full_mask, got);
    unsigned base = 0;
    if (lane == 0 && mask != 0) base = atomicAdd(count, static_cast<unsigned>(__popc(mask)));
    base = __shfl_sync(full_mask, base, 0);
    if (got && base + lane < out_cap) out[base + lane] = v;
    if (s == ring_status::ok) {
      since = 0;
      continue;
    }
    if (s == ring_status::closed || warp_give_up(since, flag, stop_all)) {
      if (lane == 0) atomicExch(last_status, static_cast<int>(s));
      return;
    }
  }
}

// Lane p (global thread id) is producer p: it sends per_lane values
// (p << 16) | seq, seq = 0, 1, ..., in warp-aggregated batches of 1..3 items
// per lane, retrying `full` within the spin budget. The last warp to finish
// closes the ring.
__global__ void lap_producer_kernel(dflash::device_queue_view<unsigned> q, unsigned per_lane, unsigned* done,
                                    unsigned warps_total, int* flag, int* stop_all) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned sent = 0, round = 0;
  unsigned long long since = 0;
  unsigned mine[3];
  while (__any_sync(full_mask, sent < per_lane)) {
    const unsigned n = min(1 + (lane + round) % 3, per_lane - sent);
    for (unsigned j = 0; j < n; ++j) mine[j] = (p << 16) | (sent + j);
    const ring_status s = q.warp_try_push(mine, n);
    if (s == ring_status::ok) {
      sent += n;
      ++round;
      since = 0;
      continue;
    }
    if (s != ring_status::full) {
      if (lane == 0) {
        atomicExch(flag, flag_bad_status);
        atomicExch(stop_all, 1);
      }
      break;
    }
    if (warp_give_up(since, flag, stop_all)) break;
  }
  if (lane == 0 && atomicAdd(done, 1u) + 1 == warps_total) q.ctl.close();
}

// Hand-off kernels: fill writes base + i; gated_fill first waits (bounded) for
// *gate != 0; copy_and_open copies and then opens the gate.
__global__ void fill_kernel(int* buf, int n, int base) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = base + i;
}
__global__ void gated_fill_kernel(int* buf, int n, int base, const int* gate, int* flag) {
  __shared__ int open;
  if (threadIdx.x == 0) {
    open = 0;
    for (const unsigned long long start = globaltimer_ns(); globaltimer_ns() - start < spin_budget_ns;) {
      if (cuda::atomic_ref<const int, cuda::thread_scope_device>(*gate).load(cuda::std::memory_order_acquire) != 0) {
        open = 1;
        break;
      }
      __nanosleep(100);
    }
    if (open == 0) *flag = flag_timeout;
  }
  __syncthreads();
  if (open == 0) return;  // leaves buf poisoned: the test sees that too
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = base + i;
}
__global__ void copy_kernel(const int* from, int* to, int n, int* gate) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) to[i] = from[i];
  __syncthreads();
  if (gate != nullptr && threadIdx.x == 0)
    cuda::atomic_ref<int, cuda::thread_scope_device>(*gate).store(1, cuda::std::memory_order_release);
}
// Busy for a while (bounded), so a missing wait would let the consumer read early.
__global__ void slow_fill_kernel(int* buf, int n, int base) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < 200000) {
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = base + i;
}

std::vector<int> iota_from(int base, int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = base + i;
  return v;
}

// Packed enqueue on `s`, both CUB phases; returns the ticket (after a sync).
dflash::ring_ticket enqueue_lengths(dflash::device_queue<int>& q, const std::vector<int>& lengths, int max_len,
                                    const dev_buf<int>& values, cudaStream_t s) {
  const int n = static_cast<int>(lengths.size());
  dev_buf<int> d_len(lengths.size()), d_off(lengths.size());
  dev_buf<dflash::ring_ticket> d_ticket(1);
  d_len.put(lengths);
  std::size_t temp_bytes = 0;
  dflash::enqueue_padded(q.view(), values.p, max_len, d_len.p, n, d_off.p, d_ticket.p, nullptr, temp_bytes, s);
  dev_buf<unsigned char> temp(temp_bytes);
  dflash::enqueue_padded(q.view(), values.p, max_len, d_len.p, n, d_off.p, d_ticket.p, temp.p, temp_bytes, s);
  ok(cudaStreamSynchronize(s));
  return d_ticket.get(1)[0];
}

template <class T>
unsigned long long ring_size(dflash::device_queue<T>& q) {
  dev_buf<unsigned long long> out(1);
  size_kernel<<<1, 1>>>(q.view(), out.p);
  ok(cudaGetLastError());
  ok(cudaDeviceSynchronize());
  return out.get(1)[0];
}
}  // namespace

TEST_CASE("warp- and block-aggregated pushes, drained on another stream", "[device_queue][gpu]") {
  constexpr int blocks = 4, threads = 128, warps = blocks * threads / 32;
  dflash::device_queue<int> q(1024);
  stream prod, cons;
  dev_buf<int> wstatus(warps), bstatus(blocks), out(1024), last(1);
  dev_buf<unsigned> count(1);
  count.zero();

  warp_push_kernel<<<blocks, threads, 0, prod.s>>>(q.view(), wstatus.p);
  block_push_kernel<<<blocks, threads, 0, prod.s>>>(q.view(), bstatus.p);
  ok(cudaGetLastError());
  const auto tok = dflash::stream_token::record(prod.s);
  tok.wait(cons.s);  // the host does not wait here
  warp_drain_kernel<<<1, 32, 0, cons.s>>>(q.view(), out.p, count.p, last.p);
  ok(cudaGetLastError());
  ok(cudaStreamSynchronize(cons.s));

  for (int s : wstatus.get(warps)) CHECK(s == static_cast<int>(ring_status::ok));
  for (int s : bstatus.get(blocks)) CHECK(s == static_cast<int>(ring_status::ok));
  std::vector<int> want;
  for (int w = 0; w < warps; ++w)
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < l % 3; ++j) want.push_back(w * 1000 + l * 10 + j);
  for (int t = 0; t < blocks * threads; ++t) want.push_back(100000 + t);
  const unsigned n = count.get(1)[0];
  REQUIRE(n == want.size());
  auto got = out.get(n);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  CHECK(got == want);
  CHECK(last.get(1)[0] == static_cast<int>(ring_status::empty));

  q.close(prod.s);
  warp_push_kernel<<<1, 32, 0, prod.s>>>(q.view(), wstatus.p);
  ok(cudaStreamSynchronize(prod.s));
  CHECK(wstatus.get(1)[0] == static_cast<int>(ring_status::closed));
}

TEST_CASE("device_queue rejects a capacity whose bytes overflow, before any CUDA call", "[device_queue][gpu]") {
  // 2^61 slots are within ring_control::max_capacity, but 2^61 * 8 bytes wrap to 0.
  CHECK_THROWS_AS(dflash::device_queue<unsigned long long>(std::size_t{1} << 61), std::length_error);
  CHECK_THROWS_AS(dflash::device_queue<int>(0), std::invalid_argument);
  ok(cudaGetLastError());  // and nothing was left behind
}

TEST_CASE("stream_token: events are reused, one per token alive", "[device_queue][gpu]") {
  stream s;
  cudaEvent_t first = nullptr;
  {
    const auto t = dflash::stream_token::record(s.s);
    first = t.event();
  }
  const auto again = dflash::stream_token::record(s.s);  // the pool hands back the event the first token held
  CHECK(again.event() == first);
  const auto other = dflash::stream_token::record(s.s);  // two alive: two events
  CHECK(other.event() != again.event());
  ok(cudaStreamSynchronize(s.s));
}

TEST_CASE("a push larger than the free space fails whole", "[device_queue][gpu]") {
  dflash::device_queue<int> q(40);  // one warp pushes 0+1+2+0+... = 31 items
  dev_buf<int> status(1);
  warp_push_kernel<<<1, 32, 0, nullptr>>>(q.view(), status.p);
  warp_push_kernel<<<1, 32, 0, nullptr>>>(q.view(), status.p);  // 31 more do not fit
  ok(cudaDeviceSynchronize());
  CHECK(status.get(1)[0] == static_cast<int>(ring_status::full));
}

TEST_CASE("warp and block totals past 32 bits are too_large, not wrapped", "[device_queue][gpu]") {
  dflash::device_queue<int> q(64);
  dev_buf<int> status(1);
  huge_warp_push_kernel<<<1, 32>>>(q.view(), 1u << 27, status.p);  // 32 * 2^27 == 2^32
  ok(cudaGetLastError());
  ok(cudaDeviceSynchronize());
  CHECK(status.get(1)[0] == static_cast<int>(ring_status::too_large));
  huge_block_push_kernel<<<1, 128>>>(q.view(), 1u << 25, status.p);  // 128 * 2^25 == 2^32
  ok(cudaGetLastError());
  ok(cudaDeviceSynchronize());
  CHECK(status.get(1)[0] == static_cast<int>(ring_status::too_large));
  CHECK(ring_size(q) == 0);
  warp_push_kernel<<<1, 32>>>(q.view(), status.p);  // the ring is still usable
  ok(cudaDeviceSynchronize());
  CHECK(status.get(1)[0] == static_cast<int>(ring_status::ok));
  CHECK(ring_size(q) == 31);
}

TEST_CASE("packed enqueue of variable-length sequences (cub::DeviceScan)", "[device_queue][gpu]") {
  constexpr int n = 3, max_len = 5;
  const std::vector<int> lengths = {3, 0, 5};
  std::vector<int> padded(n * max_len, -1);
  for (int b = 0; b < n; ++b)
    for (int t = 0; t < lengths[b]; ++t) padded[b * max_len + t] = b * 100 + t;
  dflash::device_queue<int> q(16);
  dev_buf<int> d_vals(padded.size()), d_len(n), d_off(n), out(16), last(1);
  dev_buf<dflash::ring_ticket> d_ticket(1);
  dev_buf<unsigned> count(1);
  d_vals.put(padded);
  d_len.put(lengths);
  count.zero();
  stream s;
  std::size_t temp_bytes = 0;
  dflash::enqueue_padded(q.view(), d_vals.p, max_len, d_len.p, n, d_off.p, d_ticket.p, nullptr, temp_bytes, s.s);
  REQUIRE(temp_bytes > 0);
  dev_buf<unsigned char> temp(temp_bytes);
  dflash::enqueue_padded(q.view(), d_vals.p, max_len, d_len.p, n, d_off.p, d_ticket.p, temp.p, temp_bytes, s.s);
  warp_drain_kernel<<<1, 32, 0, s.s>>>(q.view(), out.p, count.p, last.p);
  ok(cudaStreamSynchronize(s.s));
  const auto ticket = d_ticket.get(1)[0];
  CHECK(ticket.status == ring_status::ok);
  CHECK(ticket.count == 8);
  CHECK(d_off.get(n) == std::vector<int>{0, 3, 3});
  REQUIRE(count.get(1)[0] == 8);
  auto got = out.get(8);  // lanes append through an atomic: compare as a set
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<int>{0, 1, 2, 200, 201, 202, 203, 204});
}

TEST_CASE("packed enqueue rejects bad lengths on the device, reserves nothing, and the ring still closes",
          "[device_queue][gpu]") {
  dflash::device_queue<int> q(16);
  stream s;
  dev_buf<int> values(64);
  values.put(iota_from(0, 64));  // row b of a [n, 4] array: 4b .. 4b+3
  struct bad_case {
    std::vector<int> lengths;
    int max_len;
    ring_status want;
    const char* what;
  };
  const bad_case cases[] = {
      {{2, -3, 2}, 4, ring_status::invalid, "negative length"},
      {{1, 5}, 4, ring_status::invalid, "length > max_len"},
      {{0, 2}, 0, ring_status::invalid, "max_len 0 with a non-zero length"},
      {{INT_MAX, INT_MAX, 3}, INT_MAX, ring_status::too_large, "sum past 32 bits"},
      {{INT_MAX, 1}, INT_MAX, ring_status::too_large, "sum past the int offsets"},
      {{4, 4, 4, 4, 1}, 4, ring_status::too_large, "sum past the capacity"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto t = enqueue_lengths(q, c.lengths, c.max_len, values, s.s);
    CHECK(static_cast<int>(t.status) == static_cast<int>(c.want));
    CHECK(t.count == 0);
    CHECK(ring_size(q) == 0);
  }
  const auto good = enqueue_lengths(q, {2, 0, 3}, 4, values, s.s);  // 0 1 | - | 8 9 10
  CHECK(good.status == ring_status::ok);
  CHECK(good.count == 5);
  q.close(s.s);
  dev_buf<int> out(16), last(1), flag(1), stop_all(1);
  dev_buf<unsigned> count(1);
  count.zero();
  flag.zero();
  stop_all.zero();
  drain_until_closed_kernel<<<1, 32, 0, s.s>>>(q.view(), out.p, 16u, count.p, last.p, flag.p, stop_all.p);
  ok(cudaGetLastError());
  ok(cudaStreamSynchronize(s.s));
  check_flag(flag, "drain after rejected packed batches (an unpublished reservation would hide `closed`)");
  CHECK(last.get(1)[0] == static_cast<int>(ring_status::closed));
  REQUIRE(count.get(1)[0] == 5);
  CHECK(out.get(5) == std::vector<int>{0, 1, 8, 9, 10});  // one warp: ring order
}

// [concurrent]: needs two kernels resident at once; a tool that serialises
// kernels makes it fail with "TIMED OUT" (never hang).
TEST_CASE("producer and consumer kernels run concurrently for hundreds of laps: FIFO per producer, then closed",
          "[device_queue][gpu][concurrent]") {
  constexpr unsigned blocks = 2, threads = 64, producers = blocks * threads, per_lane = 300;
  constexpr unsigned total = producers * per_lane;  // 38400 items through 100 slots: 384 laps
  for (unsigned consumer_warps : {1u, 4u}) {
    DYNAMIC_SECTION("consumer warps: " << consumer_warps) {
      dflash::device_queue<unsigned> q(100);  // not a power of two; a warp's batch is <= 96
      stream prod, cons;
      dev_buf<unsigned> out(total), count(1), done(1);
      dev_buf<int> last(1), pflag(1), cflag(1), stop_all(1);
      count.zero();
      done.zero();
      pflag.zero();
      cflag.zero();
      stop_all.zero();
      load_kernels(drain_until_closed_kernel<unsigned>, lap_producer_kernel);  // the consumer spins until the producer runs
      drain_until_closed_kernel<<<1, 32 * consumer_warps, 0, cons.s>>>(q.view(), out.p, total, count.p, last.p,
                                                                        cflag.p, stop_all.p);
      lap_producer_kernel<<<blocks, threads, 0, prod.s>>>(q.view(), per_lane, done.p, producers / 32, pflag.p,
                                                          stop_all.p);
      ok(cudaGetLastError());
      ok(cudaStreamSynchronize(prod.s));
      ok(cudaStreamSynchronize(cons.s));
      check_flag(pflag, "producers (ring full for the whole spin budget: is the consumer running concurrently?)");
      check_flag(cflag, "consumer (ring empty for the whole spin budget before `closed`)");
      CHECK(last.get(1)[0] == static_cast<int>(ring_status::closed));
      const unsigned n = count.get(1)[0];
      REQUIRE(n == total);
      const auto got = out.get(n);
      std::vector<unsigned> next(producers, 0);
      unsigned bad_producer = 0, out_of_order = 0;
      for (unsigned v : got) {
        const unsigned p = v >> 16, seq = v & 0xffffu;
        if (p >= producers) {
          ++bad_producer;
          continue;
        }
        if (consumer_warps == 1 && seq != next[p]) ++out_of_order;  // one consumer warp: out[] is ring order
        ++next[p];
      }
      CHECK(bad_producer == 0);
      CHECK(out_of_order == 0);
      if (consumer_warps > 1) {  // exactly once, in any order
        auto sorted = got;
        std::sort(sorted.begin(), sorted.end());
        std::vector<unsigned> want;
        for (unsigned p = 0; p < producers; ++p)
          for (unsigned k = 0; k < per_lane; ++k) want.push_back((p << 16) | k);
        CHECK(sorted == want);
      }
      CHECK(std::all_of(next.begin(), next.end(), [](unsigned c) { return c == per_lane; }));
    }
  }
}

TEST_CASE("stream_token: two items in flight each wait on their own record", "[device_queue][gpu][concurrent]") {
  // Producer: item 1, token 1, then item 2 -- which is only written after the
  // consumer has read item 1 (a gate) -- then token 2. A consumer that waited on
  // a later record than item 1's (one shared, re-recorded event) would never
  // open the gate: the producer's bounded spin runs out and the test says so.
  constexpr int n = 256;
  stream prod, cons;
  dev_buf<int> item1(n), item2(n), out1(n), out2(n), gate(1), flag(1);
  gate.zero();
  flag.zero();
  load_kernels(fill_kernel, gated_fill_kernel, copy_kernel);  // gated_fill spins until copy_kernel runs
  fill_kernel<<<1, 128, 0, prod.s>>>(item1.p, n, 1000);
  auto tok1 = dflash::stream_token::record(prod.s);
  gated_fill_kernel<<<1, 128, 0, prod.s>>>(item2.p, n, 2000, gate.p, flag.p);
  auto tok2 = dflash::stream_token::record(prod.s);
  ok(cudaGetLastError());
  CHECK(tok1.event() != tok2.event());

  tok1.wait(cons.s);
  copy_kernel<<<1, 128, 0, cons.s>>>(item1.p, out1.p, n, gate.p);
  tok2.wait(cons.s);
  copy_kernel<<<1, 128, 0, cons.s>>>(item2.p, out2.p, n, nullptr);
  ok(cudaGetLastError());
  ok(cudaStreamSynchronize(cons.s));
  ok(cudaStreamSynchronize(prod.s));
  check_flag(flag, "item 2's producer waiting for the consumer of item 1");
  CHECK(out1.get(n) == iota_from(1000, n));
  CHECK(out2.get(n) == iota_from(2000, n));

  dflash::stream_token moved = std::move(tok1);
  CHECK(moved.valid());
  CHECK_FALSE(tok1.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  CHECK_THROWS_AS(tok1.wait(cons.s), std::logic_error);
}

TEST_CASE("stream_token: producer and consumer on different host threads", "[device_queue][gpu]") {
  constexpr int items = 16, n = 512;
  stream prod, cons;
  std::vector<std::unique_ptr<dev_buf<int>>> bufs, outs;
  for (int i = 0; i < items; ++i) {
    bufs.push_back(std::make_unique<dev_buf<int>>(n));
    outs.push_back(std::make_unique<dev_buf<int>>(n));
  }
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::pair<int, dflash::stream_token>> handed;  // the item's index travels with its token
  std::thread producer([&] {
    for (int i = 0; i < items; ++i) {
      slow_fill_kernel<<<1, 128, 0, prod.s>>>(bufs[i]->p, n, i * 10000);
      auto tok = dflash::stream_token::record(prod.s);
      std::lock_guard<std::mutex> lk(m);
      handed.emplace_back(i, std::move(tok));
      cv.notify_one();
    }
  });
  for (int k = 0; k < items; ++k) {
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return !handed.empty(); });
    auto [i, tok] = std::move(handed.front());
    handed.pop_front();
    lk.unlock();
    tok.wait(cons.s);
    copy_kernel<<<1, 128, 0, cons.s>>>(bufs[i]->p, outs[i]->p, n, nullptr);
  }
  producer.join();
  ok(cudaGetLastError());
  ok(cudaStreamSynchronize(cons.s));
  ok(cudaStreamSynchronize(prod.s));
  for (int i = 0; i < items; ++i) {
    INFO("item " << i);
    CHECK(outs[i]->get(n) == iota_from(i * 10000, n));
  }
}
