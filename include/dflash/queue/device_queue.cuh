#pragma once
// device_queue: a queue of GPU-resident items (hidden-state rows, tokens, ...)
// in a ring of slots in device memory. CUDA only (include from .cu files).
//
//   dflash::device_queue<Row> q(1 << 16);            // cudaMalloc'd ring
//   auto v = q.view();                                // trivially copyable, pass to kernels
//   // in a kernel, every lane of a full warp:
//   v.warp_try_push(my_rows, my_count);               // one atomic for the whole warp
//   v.block_try_push<256>(my_rows, my_count);         // one atomic for the whole block
//   // from the host, on the producer stream (no host sync):
//   dflash::enqueue_padded(v, d_rows, max_len, d_lengths, n, d_offsets, d_ticket, d_temp, temp_bytes, s);
//   // (lengths checked on the device: a bad batch reserves nothing, ticket says invalid/too_large)
//   // hand one item from the producer stream to the consumer stream, one (pooled) event per item:
//   auto tok = dflash::stream_token::record(producer);  // move it along with the item
//   tok.wait(consumer);
//
// Reservation, wrap-around, full/empty and close are ring_control's (shared
// with the host twin host_ring and stress-tested on host threads); this file
// adds only the aggregation (cub::WarpScan / cub::BlockScan offsets), the
// packed enqueue (cub::DeviceScan on the caller's stream and temp storage; its
// reserve/copy steps are packed_reserve.hpp, shared with a host twin) and the
// per-item stream-ordered hand-off (stream_token: one pooled event per item).

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/warp/warp_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "dflash/detail/cuda_check.hpp"
#include "dflash/queue/packed_reserve.hpp"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

namespace detail {
template <class = void>
__global__ void ring_init_kernel(ring_control ctl) {
  const unsigned long long n = ctl.capacity();
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n; i += 1ull * gridDim.x * blockDim.x)
    ctl.init_slot(i);
  if (blockIdx.x == 0 && threadIdx.x == 0) ctl.init_header();
}

template <class = void>
__global__ void ring_close_kernel(ring_control ctl) { ctl.close(); }
}  // namespace detail

/// What kernels use: the control view plus the slot array. Trivially copyable.
template <class T>
struct device_queue_view {
  ring_control ctl;
  T* data;

  static constexpr unsigned full_mask = 0xffffffffu;
  static constexpr unsigned long long max_batch = 0xffffffffull;  ///< a ticket counts in 32 bits

  /// All 32 lanes of a warp call this with their own n items (n may be 0).
  /// One CAS for the warp; all lanes' items go in, or none. Same status on
  /// every lane. The warp's total is summed in 64 bits: past 2^32 - 1 (or past
  /// the capacity) it is too_large, never wrapped. The lanes need not arrive
  /// converged (the full-mask scan and __syncwarp converge them); a lane that
  /// never calls is undefined behaviour. Not asserted: __activemask() says
  /// which lanes run together at this instant, not which will call, so it
  /// would fire for a correct caller whose lanes arrive apart.
  __device__ ring_status warp_try_push(const T* items, std::uint32_t n) const {
    using scan = cub::WarpScan<unsigned long long>;
    __shared__ typename scan::TempStorage tmp[32];  // one per warp of a <= 1024-thread block
    const unsigned tid = linear_tid(), warp = tid / 32, lane = tid % 32;
    unsigned long long offset = 0, total = 0;
    scan(tmp[warp]).ExclusiveSum(static_cast<unsigned long long>(n), offset, total);
    ring_ticket t{ring_status::ok, 0, 0};
    if (lane == 0) t = reserve(total);
    __syncwarp(full_mask);  // memory order: lane 0 acquired the slots; every lane writes them (shfl alone orders nothing)
    const auto status = static_cast<ring_status>(__shfl_sync(full_mask, static_cast<int>(t.status), 0));
    const unsigned long long first = __shfl_sync(full_mask, t.first, 0);
    if (status == ring_status::ok) write(first + offset, items, n);
    return status;
  }

  /// Every thread of a 1-D block of exactly BlockThreads threads calls this
  /// (asserted in debug builds). One CAS for the block; all items or none.
  /// Same status on every thread; 64-bit total as in warp_try_push.
  template <int BlockThreads>
  __device__ ring_status block_try_push(const T* items, std::uint32_t n) const {
    assert(blockDim.x == BlockThreads && blockDim.y == 1 && blockDim.z == 1 &&
           "block_try_push<BlockThreads>: needs a 1-D block of exactly BlockThreads threads");
    using scan = cub::BlockScan<unsigned long long, BlockThreads>;
    __shared__ typename scan::TempStorage tmp;
    __shared__ ring_ticket ticket;
    unsigned long long offset = 0, total = 0;
    scan(tmp).ExclusiveSum(static_cast<unsigned long long>(n), offset, total);
    if (threadIdx.x == 0) ticket = reserve(total);
    __syncthreads();
    const ring_ticket t = ticket;
    __syncthreads();  // ticket may be reused by the next call
    if (t.status == ring_status::ok) write(t.first + offset, items, n);
    return t.status;
  }

  /// All 32 lanes of a warp call this (as for warp_try_push); up to 32 items
  /// are reserved with one CAS, lane i gets item i. Returns true on the lanes
  /// that got an item; `status` (same on every lane) is ok, empty or closed.
  __device__ bool warp_try_pop(T& out, ring_status& status) const {
    const unsigned lane = linear_tid() % 32;
    ring_ticket t{ring_status::ok, 0, 0};
    if (lane == 0) t = ctl.try_reserve_pop(32);
    __syncwarp(full_mask);  // memory order: lane 0 acquired the published slots; every lane reads them
    status = static_cast<ring_status>(__shfl_sync(full_mask, static_cast<int>(t.status), 0));
    const std::uint32_t count = __shfl_sync(full_mask, t.count, 0);
    const unsigned long long first = __shfl_sync(full_mask, t.first, 0);
    if (lane >= count) return false;
    out = data[ctl.slot(first + lane)];
    ctl.release(first + lane);
    return true;
  }

  /// Store one already-reserved position (for kernels that reserved by other means).
  __device__ void put(unsigned long long pos, const T& v) const {
    data[ctl.slot(pos)] = v;
    ctl.publish(pos);  // release: the store above is visible before the slot is
  }

 private:
  __device__ static unsigned linear_tid() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }
  __device__ ring_ticket reserve(unsigned long long total) const {
    if (total > max_batch) return {ring_status::too_large, 0, 0};
    return ctl.try_reserve_push(static_cast<std::uint32_t>(total));
  }
  __device__ void write(unsigned long long first, const T* items, std::uint32_t n) const {
    for (std::uint32_t j = 0; j < n; ++j) put(first + j, items[j]);
  }
};

/// Owns the ring in device memory. Construction initialises it on `stream`
/// and waits once (set-up, not the hot path). It also loads the ring's own
/// kernels (close, packed reserve and copy): CUDA loads a kernel lazily at its
/// first launch and may wait for the device to go idle to do so, so a first
/// close() while a consumer kernel spins until it sees "closed" could hang.
/// enqueue_padded's cub::DeviceScan kernels are CUB's: run it once before a
/// consumer spins, or set CUDA_MODULE_LOADING=EAGER.
template <class T>
class device_queue {
  // Slots are raw device memory written and read by plain copies on the device.
  static_assert(std::is_trivially_copyable_v<T>,
                "dflash::device_queue<T>: T must be trivially copyable (its slots are raw device memory)");

 public:
  /// Throws std::invalid_argument for capacity 0 or > ring_control::max_capacity,
  /// std::length_error when the ring's bytes overflow std::size_t (both before
  /// any CUDA call), std::runtime_error for a CUDA error.
  explicit device_queue(std::size_t capacity, cudaStream_t stream = nullptr) : cap_(capacity) {
    const auto bytes = ring_control::storage_for(capacity, sizeof(T), "dflash::device_queue");
    try {
      detail::cuda_check(cudaMalloc(&header_, sizeof(ring_header)), "dflash::device_queue: cudaMalloc(ring header)");
      detail::cuda_check(cudaMalloc(&seq_, bytes.sequence), "dflash::device_queue: cudaMalloc(ring sequence words)");
      detail::cuda_check(cudaMalloc(&data_, bytes.slots), "dflash::device_queue: cudaMalloc(ring slots)");
      const ring_control ctl(header_, seq_, cap_);
      const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((capacity + 255) / 256, 1024));
      detail::ring_init_kernel<> <<<blocks, 256, 0, stream>>>(ctl);
      detail::cuda_check_launch("dflash::device_queue: ring init launch");
      detail::cuda_check(cudaStreamSynchronize(stream), "dflash::device_queue: ring init");
      preload_kernels();
    } catch (...) {  // no destructor runs for a throwing constructor
      free_all();
      throw;
    }
  }
  device_queue(const device_queue&) = delete;
  device_queue& operator=(const device_queue&) = delete;
  /// No kernel may still use a view() when the queue is destroyed: cudaFree
  /// need not wait for work in flight (synchronize the streams that use it first).
  ~device_queue() { free_all(); }

  [[nodiscard]] device_queue_view<T> view() const noexcept { return {ring_control(header_, seq_, cap_), data_}; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }

  /// Stream-ordered close: takes effect after the work already on `stream`.
  void close(cudaStream_t stream) const {
    detail::ring_close_kernel<> <<<1, 1, 0, stream>>>(ring_control(header_, seq_, cap_));
    detail::cuda_check_launch("dflash::device_queue: ring close launch");
  }

 private:
  static void preload_kernels();  // after the kernels it names (below)
  void free_all() noexcept {
    cudaFree(data_);  // cudaFree(nullptr) is a no-op
    cudaFree(seq_);
    cudaFree(header_);
  }

  std::size_t cap_;
  ring_header* header_ = nullptr;
  unsigned long long* seq_ = nullptr;
  T* data_ = nullptr;
};

namespace detail {
inline constexpr int packed_reserve_threads = 256;

// The reserve step (packed_reserve.hpp): one block folds the lengths
// (0 <= len <= max_len, 64-bit sum), reduces, and thread 0 reserves the total
// with one CAS, or reserves nothing and writes why into the ticket.
template <class T>
__global__ void __launch_bounds__(packed_reserve_threads)
    packed_reserve_kernel(device_queue_view<T> q, const int* lengths, int n, int max_len, ring_ticket* ticket) {
  using reduce = cub::BlockReduce<packed_summary, packed_reserve_threads>;
  __shared__ typename reduce::TempStorage tmp;
  packed_summary s{};
  for (long long b = threadIdx.x; b < n; b += packed_reserve_threads) s = packed_check(s, lengths[b], max_len);
  s = reduce(tmp).Reduce(s, packed_summary_sum{});
  if (threadIdx.x == 0) *ticket = packed_reserve_total(q.ctl, s);
}

// The copy step. Grid (x: tokens, y: sequences), grid-stride both ways:
// element i of sequence b goes to position first + offsets[b] + i. With an ok
// ticket every length was checked (0..max_len) and the offsets fit int, so
// the writes cover [first, first + total) exactly once: nothing stays unpublished.
template <class T>
__global__ void packed_copy_kernel(device_queue_view<T> q, const T* values, int max_len, const int* lengths,
                                   const int* offsets, int n, const ring_ticket* ticket) {
  const ring_ticket t = *ticket;
  if (t.status != ring_status::ok) return;
  for (long long b = blockIdx.y; b < n; b += gridDim.y) {
    const long long len = lengths[b];
    for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < len; i += 1ll * gridDim.x * blockDim.x) {
      const int bi = static_cast<int>(b), ii = static_cast<int>(i);
      q.put(packed_position(t, offsets, bi, ii), values[packed_source(max_len, bi, ii)]);
    }
  }
}
}  // namespace detail

template <class T>
void device_queue<T>::preload_kernels() {
  cudaFuncAttributes attr{};  // cudaFuncGetAttributes loads a kernel without launching it
  detail::cuda_check(cudaFuncGetAttributes(&attr, detail::ring_close_kernel<>), "dflash::device_queue: load ring_close_kernel");
  detail::cuda_check(cudaFuncGetAttributes(&attr, detail::packed_reserve_kernel<T>),
                     "dflash::device_queue: load packed_reserve_kernel");
  detail::cuda_check(cudaFuncGetAttributes(&attr, detail::packed_copy_kernel<T>),
                     "dflash::device_queue: load packed_copy_kernel");
}

/// Enqueue n variable-length sequences from a padded [n, max_len] device array
/// as one packed run: sequence b lands at ring position ticket.first +
/// offsets[b]. Everything runs on `stream`; the host never waits.
/// CUB convention: call first with d_temp == nullptr to get temp_bytes.
/// `d_offsets` (n ints) and `d_ticket` are caller-owned device outputs.
///
/// The lengths are checked on the device, in the reserve step: if one is < 0
/// or > max_len, (*d_ticket).status is `invalid`; if their sum exceeds INT_MAX
/// or the ring, `too_large`; if the ring has no room now, `full`; if closed,
/// `closed`. In each of those cases nothing is reserved and nothing written.
/// The host-side checks (n, max_len, pending errors, CUB's temp size) all
/// happen before the first kernel is queued, and once the reserve kernel is
/// queued the copy kernel is always queued after it, so a reservation is never
/// left unpublished (which would block every later pop and hide `closed`).
template <class T>
void enqueue_padded(device_queue_view<T> q, const T* d_values, int max_len, const int* d_lengths, int n,
                    int* d_offsets, ring_ticket* d_ticket, void* d_temp, std::size_t& temp_bytes,
                    cudaStream_t stream) {
  if (n < 0 || max_len < 0) throw std::invalid_argument("dflash::enqueue_padded: n and max_len must be >= 0");
  if (d_temp == nullptr) {  // size query only
    detail::cuda_check(cub::DeviceScan::ExclusiveSum(d_temp, temp_bytes, d_lengths, d_offsets, n, stream),
                       "dflash::enqueue_padded: cub::DeviceScan::ExclusiveSum (size query)");
    return;
  }
  if (d_ticket == nullptr) throw std::invalid_argument("dflash::enqueue_padded: d_ticket must not be null");
  // Everything that can throw happens before the reserve kernel is queued:
  // the launch shapes, an error left pending by earlier work (which the launch
  // checks below would otherwise report after a reservation), the scan.
  const dim3 copy_grid(static_cast<unsigned>(std::clamp((max_len + 255ll) / 256, 1ll, 1024ll)),
                       static_cast<unsigned>(std::clamp(n, 1, 65535)));
  detail::cuda_check_launch("dflash::enqueue_padded: CUDA error pending before the call");
  detail::cuda_check(cub::DeviceScan::ExclusiveSum(d_temp, temp_bytes, d_lengths, d_offsets, n, stream),
                     "dflash::enqueue_padded: cub::DeviceScan::ExclusiveSum");
  detail::packed_reserve_kernel<<<1, detail::packed_reserve_threads, 0, stream>>>(q, d_lengths, n, max_len, d_ticket);
  detail::cuda_check_launch("dflash::enqueue_padded: packed reserve launch (nothing reserved)");
  // From here on the ring may hold a reservation: the copy kernel must follow.
  detail::packed_copy_kernel<<<copy_grid, 256, 0, stream>>>(q, d_values, max_len, d_lengths, d_offsets, n, d_ticket);
  detail::cuda_check_launch("dflash::enqueue_padded: packed copy launch (the ring may now hold an unpublished reservation)");
}

namespace detail {
/// The events of stream_tokens, reused: creating and destroying a CUDA event
/// per item costs two driver calls on the hot path. A token's event goes back
/// here when the token dies; recording it again for a later token is safe
/// even if that record or a wait on it is still pending: cudaStreamWaitEvent
/// captures the record it waits for when it is called, and a later
/// cudaEventRecord does not change what an earlier wait waits for. One free
/// list per device (an event belongs to the device current at its creation).
/// Process-wide and never destroyed: its events outlive every token, also
/// tokens in static objects, and CUDA frees them with the context at exit.
class token_event_pool {
 public:
  static token_event_pool& instance() {
    static token_event_pool* const pool = new token_event_pool();  // deliberately never deleted (see above)
    return *pool;
  }
  [[nodiscard]] cudaEvent_t acquire(int device) {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<std::size_t>(device) < free_.size() && !free_[static_cast<std::size_t>(device)].empty()) {
        const cudaEvent_t e = free_[static_cast<std::size_t>(device)].back();
        free_[static_cast<std::size_t>(device)].pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "dflash::stream_token: cudaEventCreate");
    return e;
  }
  void release(int device, cudaEvent_t e) noexcept {
    try {
      const std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<std::size_t>(device) >= free_.size()) free_.resize(static_cast<std::size_t>(device) + 1);
      auto& list = free_[static_cast<std::size_t>(device)];
      if (list.size() < max_free) {
        list.push_back(e);
        return;
      }
    } catch (...) {  // no memory for the list: destroy it instead
    }
    (void)cudaEventDestroy(e);
  }
  static constexpr std::size_t max_free = 4096;  ///< per device; more at once are destroyed

 private:
  token_event_pool() = default;
  std::mutex mu_;
  std::vector<std::vector<cudaEvent_t>> free_;  // [device]
};
}  // namespace detail

/// A stream-ordered hand-off of ONE item: work queued on a consumer stream
/// after wait() starts only once the producer stream reached record(). Each
/// token holds its own event, recorded exactly once while the token lives, so
/// it travels with its item: two items in flight, or a producer and a consumer
/// on different host threads, each wait on their own record (one shared,
/// re-recorded event would make the consumer wait on whatever record came
/// last). Events come from a pool (detail::token_event_pool): no event is
/// created per item in the steady state. Move-only; the host never blocks.
/// Destroying a token whose record has not completed is fine (waits already
/// queued keep waiting for that record).
///
///   auto tok = dflash::stream_token::record(producer);   // after the item's work
///   ... move tok along with the item (queue, slot, other thread) ...
///   tok.wait(consumer);                                    // before the consumer's work
class stream_token {
 public:
  stream_token() noexcept = default;  ///< empty: holds no record; wait() throws
  [[nodiscard]] static stream_token record(cudaStream_t producer) {
    int device = 0;
    detail::cuda_check(cudaGetDevice(&device), "dflash::stream_token: cudaGetDevice");
    stream_token t;
    t.ev_ = detail::token_event_pool::instance().acquire(device);
    t.device_ = device;  // from here t owns the event, also if the record throws
    // The event is made on the current device, and CUDA records an event only
    // on a stream of its device: a failure here names that precondition.
    detail::cuda_check(cudaEventRecord(t.ev_, producer),
                       "dflash::stream_token: cudaEventRecord (is `producer` a stream of the current device?)");
    return t;
  }
  stream_token(stream_token&& o) noexcept : ev_(o.ev_), device_(o.device_) { o.ev_ = nullptr; }
  stream_token& operator=(stream_token&& o) noexcept {
    if (this != &o) {
      reset();
      ev_ = o.ev_;
      device_ = o.device_;
      o.ev_ = nullptr;
    }
    return *this;
  }
  stream_token(const stream_token&) = delete;
  stream_token& operator=(const stream_token&) = delete;
  ~stream_token() { reset(); }

  /// Queue a wait for this token's record on `consumer` (may be called more than once).
  void wait(cudaStream_t consumer) const {
    if (ev_ == nullptr) throw std::logic_error("dflash::stream_token::wait: empty token (never recorded or moved from)");
    detail::cuda_check(cudaStreamWaitEvent(consumer, ev_, 0), "dflash::stream_token: cudaStreamWaitEvent");
  }
  [[nodiscard]] bool valid() const noexcept { return ev_ != nullptr; }
  [[nodiscard]] cudaEvent_t event() const noexcept { return ev_; }

 private:
  void reset() noexcept {
    if (ev_ != nullptr) detail::token_event_pool::instance().release(device_, ev_);
    ev_ = nullptr;
  }
  cudaEvent_t ev_ = nullptr;
  int device_ = 0;
};

}  // namespace dflash
