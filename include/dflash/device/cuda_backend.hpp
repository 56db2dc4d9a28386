#pragma once
// cuda_backend: the DeviceBackend of a real GPU. Only the CUDA runtime API is
// used (no kernels), so host C++ TUs compiled by g++ or clang can include it
// too (link CUDA::cudart); kernels stay in the stages' own .cu files.
//
//   stream  cudaStream_t (non-blocking: never serialised with the legacy default stream)
//   event   cudaEvent_t, created with cudaEventDisableTiming unless timing is asked for
//   memory  cudaMallocAsync / cudaFreeAsync: stream-ordered, no device-wide sync;
//           the device's current pool keeps what is freed (see keep_pool_memory)
//   devices cudaSetDevice is per host thread; a stream (and an event) belongs to
//           the device current when it is made, and cudaEventRecord needs the
//           event and the stream on the same device (cudaStreamWaitEvent does not)
//
// Every call checks its cudaError_t and throws std::runtime_error naming the
// call (dflash/detail/cuda_check.hpp); check(s) reports, without blocking, a
// failed launch (once: it is cleared) and an asynchronous error of the stream
// (a faulting kernel; sticky, so every later check reports it too).

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "dflash/detail/cuda_check.hpp"
#include "dflash/detail/std_chrono.hpp"
#include "dflash/device/backend.hpp"

namespace dflash {

class cuda_backend {
 public:
  static constexpr const char* name = "cuda";
  static constexpr bool work_on_host_cores = false;  // kernels run on the GPU
  using stream_type = cudaStream_t;
  using event_type = cudaEvent_t;

  cuda_backend() = default;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  /// Empty when a CUDA device is usable, else why not.
  [[nodiscard]] static std::string probe() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return detail::no_cuda_device_reason(e);
    if (n == 0) return "no CUDA device found";
    int dev = 0, pools = 0;  // allocate() is cudaMallocAsync
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess || !pools)
      return "the CUDA device does not support stream-ordered allocation (cudaMallocAsync)";
    return {};
  }

  // ---- devices -------------------------------------------------------------
  /// Visible devices (cudaGetDeviceCount); std::runtime_error naming why when none is usable.
  [[nodiscard]] int device_count() const {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: later calls must not report it again
      throw std::runtime_error("dflash::cuda_backend: " + detail::no_cuda_device_reason(e));
    }
    return n;
  }
  /// The calling thread's current device (cudaSetDevice is per host thread).
  void set_device(int d) { check(cudaSetDevice(d), "cudaSetDevice"); }
  [[nodiscard]] int current_device() const {
    int d = 0;
    check(cudaGetDevice(&d), "cudaGetDevice");
    return d;
  }
  [[nodiscard]] bool can_access_peer(int d, int peer) const {
    if (d == peer) return false;
    int ok = 0;
    check(cudaDeviceCanAccessPeer(&ok, d, peer), "cudaDeviceCanAccessPeer");
    return ok != 0;
  }
  /// The current device may access `peer`'s memory, both kinds of it:
  /// cudaDeviceEnablePeerAccess covers cudaMalloc memory only; what allocate()
  /// returns comes from peer's memory pool, whose accessibility is set apart
  /// (cudaMemPoolSetAccess). Enabling twice is cudaErrorPeerAccessAlreadyEnabled,
  /// no failure here: it is read and cleared so the next launch check does not report it.
  void enable_peer_access(int peer) {
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) detail::forget(e);
    else check(e, "cudaDeviceEnablePeerAccess");
    cudaMemPool_t pool{};
    check(cudaDeviceGetMemPool(&pool, peer), "cudaDeviceGetMemPool");
    cudaMemAccessDesc desc{};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = current_device();
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    check(cudaMemPoolSetAccess(pool, &desc, 1), "cudaMemPoolSetAccess");
  }
  /// Stream-ordered copy between two devices' memory; needs no peer access.
  void copy_peer(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes, stream_type s) {
    if (bytes) check(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s), "cudaMemcpyPeerAsync");
  }

  // ---- streams -------------------------------------------------------------
  /// A stream of the calling thread's current device.
  [[nodiscard]] stream_type create_stream() {
    keep_pool_memory_once();
    cudaStream_t s{};
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void destroy_stream(stream_type s) noexcept { (void)cudaStreamDestroy(s); }

  [[nodiscard]] event_type create_event(bool timing) {
    cudaEvent_t e{};
    check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreateWithFlags");
    if (timing) stats_.bump(stats_.timing_events);
    return e;
  }
  void destroy_event(event_type e) noexcept { (void)cudaEventDestroy(e); }

  // ---- graphs: stream capture, one launch per replay ------------------------------------
  using graph_type = cudaGraphExec_t;
  /// Thread-local mode: an unsafe call this thread makes while capturing (a synchronisation,
  /// cudaMalloc) fails and invalidates the capture instead of running; other threads' calls
  /// are not refused. Graphs must be destroyed before a cudaDeviceReset.
  void begin_capture(stream_type s) {
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  }
  [[nodiscard]] graph_type end_capture(stream_type s) {
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture (the captured work was invalid)");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, g, 0);
    (void)cudaGraphDestroy(g);
    check(made, "cudaGraphInstantiate");
    return exec;
  }
  void abort_capture(stream_type s) noexcept {
    cudaStreamCaptureStatus status{};
    if (cudaStreamIsCapturing(s, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t g = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(s, &g);  // an invalidated capture: an error, and no graph
      if (g) (void)cudaGraphDestroy(g);
      detail::forget(ended);
    }
    // The capture's own failure (errors 900-908, not sticky) is reported by the caller's throw;
    // any other pending error stays for whoever left it.
    const cudaError_t pending = cudaPeekAtLastError();
    if (pending >= cudaErrorStreamCaptureUnsupported && pending <= cudaErrorStreamCaptureWrongThread)
      detail::forget(pending);
  }
  /// Is s being captured? (Calls that may not be captured refuse to run then.)
  [[nodiscard]] static bool capturing(stream_type s) {
    cudaStreamCaptureStatus status{};
    check(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }
  void launch_graph(graph_type g, stream_type s) { check(cudaGraphLaunch(g, s), "cudaGraphLaunch"); }
  static void destroy_graph(graph_type g) noexcept {
    if (g) detail::forget(cudaGraphExecDestroy(g));
  }

  void record(event_type e, stream_type s) {
    stats_.bump(stats_.records);
    check(cudaEventRecord(e, s), "cudaEventRecord");
  }
  void wait(stream_type s, event_type e) {
    stats_.bump(stats_.waits);
    check(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
  }
  [[nodiscard]] bool query(event_type e) const {
    return detail::cuda_ready(cudaEventQuery(e), "dflash::cuda_backend: cudaEventQuery");
  }
  [[nodiscard]] std::chrono::nanoseconds elapsed(event_type from, event_type to) const {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime");
    return std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(ms) * 1e6));
  }
  void host_wait(event_type e) {
    stats_.bump(stats_.host_waits);
    check(cudaEventSynchronize(e), "cudaEventSynchronize");
  }
  void synchronize(stream_type s) {
    stats_.bump(stats_.synchronizes);
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

  [[nodiscard]] void* allocate(std::size_t bytes, stream_type s) {
    // Captured, it would become an allocation node that a second replay fails on; refused here,
    // before the graph exists, with a message that says where buffers are sized.
    if (s != nullptr && capturing(s))
      throw std::logic_error("dflash::cuda_backend::allocate: the stream is being captured into a graph: size "
                             "buffers before the capture (a graphed stage's prepare(), not its launch())");
    void* p = nullptr;
    check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, s), "cudaMallocAsync");
    return p;
  }
  /// s == nullptr: now (the caller knows no work on p is in flight).
  void deallocate(void* p, stream_type s) {
    if (!p) return;
    if (s == nullptr) (void)cudaFree(p);
    else check(cudaFreeAsync(p, s), "cudaFreeAsync");
  }
  /// Pinned host memory: device <-> host copies from it are truly asynchronous
  /// (from pageable memory cudaMemcpyAsync waits for the stream first).
  [[nodiscard]] void* allocate_host(std::size_t bytes) {
    stats_.bump(stats_.host_allocations);
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "cudaMallocHost");
    return p;
  }
  void deallocate_host(void* p) noexcept { (void)cudaFreeHost(p); }
  void copy(void* dst, const void* src, std::size_t bytes, stream_type s) {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
  }
  /// Throws for an error of the work on `s` (a faulting kernel: the query
  /// returns it, and every later check does too, as the context is lost) or,
  /// failing that, for a launch of this thread that failed (read and cleared:
  /// reported once, not again by the next check).
  void check(stream_type s) const {
    // Read before the query: a failing query would replace it.
    const cudaError_t launch = cudaGetLastError();
    (void)detail::cuda_ready(cudaStreamQuery(s), "dflash::cuda_backend: asynchronous work on the stream");
    if (launch != cudaErrorNotReady)
      detail::cuda_check(launch, "dflash::cuda_backend: a kernel launch (or another call) on this thread failed");
  }

  [[nodiscard]] backend_stats stats() const noexcept { return stats_.snapshot(); }

 private:
  // cudaFreeAsync gives memory back to the device's pool, and with the
  // default release threshold (0) the pool hands it back to the driver at the
  // next synchronisation, so the next cudaMallocAsync pays for a fresh
  // allocation. A pipeline frees and allocates the same sizes again and again
  // (device_buffer growth, per-item scratch): the pool keeps what it holds,
  // so steady-state allocation is served from it. Device-wide and for the
  // process: it sets the pool cudaMallocAsync uses (cudaDeviceGetMemPool) of
  // each device the first time a stream is made on it, and only ever raises
  // the threshold. The cost: memory freed into that pool stays reserved for it, so
  // a program that also allocates with plain cudaMalloc (or another library)
  // and runs short should call cudaMemPoolTrimTo(pool, 0) between phases.
  void keep_pool_memory_once() {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    std::lock_guard lk(pool_m_);
    const auto i = static_cast<std::size_t>(dev);
    if (i < pools_done_.size() && pools_done_[i]) return;
    keep_pool_memory(dev);
    if (i >= pools_done_.size()) pools_done_.resize(i + 1, false);
    pools_done_[i] = true;
  }
  static void keep_pool_memory(int dev) {
    cudaMemPool_t pool{};
    check(cudaDeviceGetMemPool(&pool, dev), "cudaDeviceGetMemPool");
    std::uint64_t threshold = 0;
    check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolGetAttribute");
    if (threshold == std::numeric_limits<std::uint64_t>::max()) return;
    threshold = std::numeric_limits<std::uint64_t>::max();
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
  }
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) detail::cuda_check(e, std::string("dflash::cuda_backend: ") + what);
  }
  detail::backend_counters stats_;
  std::mutex pool_m_;
  std::vector<bool> pools_done_;  // devices whose pool keep_pool_memory already set
};

static_assert(MultiDeviceBackend<cuda_backend>);

}  // namespace dflash
