#pragma once
// The DeviceBackend concept: what device links and device stages need from a
// GPU runtime, as a policy (like ProfilerPolicy). Two models ship:
//   cuda_backend         streams, events, cudaMallocAsync (cuda_backend.hpp)
//   host_stream_backend  the asynchronous host twin CI runs: every stream is an
//                        in-order executor thread, events are completion
//                        markers, device memory is host memory
// Pipeline code is written once against this concept, so a wait the code
// forgets is a wrong result (and a TSan report) on the twin too, not only on a GPU.
//
// Semantics are CUDA's: record(e, s) captures the work enqueued on s so far;
// wait(s, e) makes later work on s start after that captured work (the host
// does not block); re-recording e replaces what it captured. Only
// host_wait/synchronize block the host, and the backend counts them, so a test
// can assert that the per-item path never does.

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "dflash/detail/std_chrono.hpp"

namespace dflash {

/// Counters every backend keeps (for tests and diagnostics; relaxed atomics).
struct backend_stats {
  std::uint64_t host_waits = 0;     ///< host blocked on one event (host_wait)
  std::uint64_t synchronizes = 0;   ///< host blocked on a whole stream (synchronize)
  std::uint64_t records = 0;        ///< record() calls
  std::uint64_t waits = 0;          ///< wait() calls (stream waits on event; never blocks the host)
  std::uint64_t timing_events = 0;  ///< events created with timing enabled
  std::uint64_t host_allocations = 0;  ///< allocate_host() calls (cudaMallocHost synchronises the device)
};

namespace detail {
/// The counters behind backend_stats, shared by the backends (relaxed: diagnostics only).
struct backend_counters {
  std::atomic<std::uint64_t> host_waits{0}, synchronizes{0}, records{0}, waits{0}, timing_events{0},
      host_allocations{0};

  static void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] backend_stats snapshot() const noexcept {
    return {host_waits.load(std::memory_order_relaxed), synchronizes.load(std::memory_order_relaxed),
            records.load(std::memory_order_relaxed), waits.load(std::memory_order_relaxed),
            timing_events.load(std::memory_order_relaxed), host_allocations.load(std::memory_order_relaxed)};
  }
};
}  // namespace detail

template <class B>
concept DeviceBackend = requires(B& b, const B& cb, typename B::stream_type s, typename B::event_type e, void* p,
                                 const void* cp, std::size_t n) {
  typename B::stream_type;
  typename B::event_type;
  { B::name } -> std::convertible_to<const char*>;
  { B::work_on_host_cores } -> std::convertible_to<bool>;  // enqueued work competes with host threads for CPU
  { b.create_stream() } -> std::same_as<typename B::stream_type>;
  b.destroy_stream(s);
  { b.create_event(true) } -> std::same_as<typename B::event_type>;
  b.destroy_event(e);
  b.record(e, s);                                     // enqueue a completion marker
  b.wait(s, e);                                       // later work on s waits for e's marker
  { b.query(e) } -> std::same_as<bool>;               // e's marker reached? never blocks
  { b.elapsed(e, e) } -> std::same_as<std::chrono::nanoseconds>;  // both timing events complete
  b.host_wait(e);                                     // blocks the host (counted)
  b.synchronize(s);                                   // blocks the host (counted)
  { b.allocate(n, s) } -> std::same_as<void*>;        // stream-ordered
  b.deallocate(p, s);                                 // stream-ordered
  b.copy(p, cp, n, s);                                // stream-ordered memcpy
  { b.allocate_host(n) } -> std::same_as<void*>;      // host memory async copies can use (pinned)
  b.deallocate_host(p);
  b.check(s);                                         // throws the stream's first asynchronous error
  { cb.stats() } -> std::same_as<backend_stats>;
};

/// A backend that can capture what is enqueued on a stream into a graph and replay it with one
/// launch (CUDA graphs; the host twin's recorded closures): what dflash::graphed needs.
///   begin_capture(s)        later enqueues on s are recorded, not run
///   end_capture(s) -> g     stops recording; g replays them (throws if the capture failed)
///   abort_capture(s)        stops recording and drops it (an error path)
///   launch_graph(g, s)      enqueues one replay on s
///   B::destroy_graph(g)     after the last launch has completed
template <class B>
concept GraphBackend = DeviceBackend<B> && requires(B& b, typename B::stream_type s, typename B::graph_type g) {
  typename B::graph_type;
  b.begin_capture(s);
  { b.end_capture(s) } -> std::same_as<typename B::graph_type>;
  { b.abort_capture(s) } noexcept;
  b.launch_graph(g, s);
  { B::destroy_graph(g) } noexcept;
};

namespace detail {
/// Host waits on a path that already has an error to report or is tearing down: work that
/// fails ends either way, and its error is (or was) reported by the stage that owns the
/// stream, so a second one here would only hide the first.
template <DeviceBackend B>
void quiet_host_wait(B& b, typename B::event_type e) noexcept {
  try {
    b.host_wait(e);
  } catch (...) {
  }
}
template <DeviceBackend B>
void quiet_synchronize(B& b, typename B::stream_type s) noexcept {
  try {
    b.synchronize(s);
  } catch (...) {
  }
}
}  // namespace detail

/// A backend with several devices, for placing stages on them (shape.devices):
/// the current device is per thread, streams and events belong to the device
/// current when they are made, and memory is reachable from another device
/// only after enable_peer_access (or through copy_peer, which needs no peer access).
template <class B>
concept MultiDeviceBackend = DeviceBackend<B> && requires(B& b, const B& cb, typename B::stream_type s, void* p,
                                                          const void* cp, std::size_t n, int d) {
  { cb.device_count() } -> std::convertible_to<int>;
  b.set_device(d);                                  // this thread's current device
  { cb.current_device() } -> std::convertible_to<int>;
  { cb.can_access_peer(d, d) } -> std::same_as<bool>;  // can device a access device b's memory?
  b.enable_peer_access(d);                          // the current device may access d's memory (idempotent)
  b.copy_peer(p, d, cp, d, n, s);                   // stream-ordered copy between two devices' memory
};

}  // namespace dflash
