#pragma once
// host_stream_backend: the asynchronous host twin of cuda_backend.
//
//   stream  an in-order executor: work enqueued on it runs later, on the
//           stream's own thread, in enqueue order (like a CUDA stream);
//   event   a completion marker: record(e, s) enqueues "e reached" on s;
//           wait(s, e) enqueues, on s, "block until the marker captured now
//           has run" (the host thread that called wait() never blocks);
//   memory  host memory; deallocate is stream-ordered (runs after prior work).
//   devices simulated: host_stream_backend(n, peer_access) has n devices; the
//           current device is per thread (set_device), a stream and an event
//           belong to the device current when they were made, an allocation
//           to its stream's device. Work that touches another device's buffer
//           without peer access enabled (copy, or a kernel's check_access)
//           fails its stream, as the unreachable memory would on a GPU; so
//           does recording an event on another device's stream (CUDA rejects it).
//
// Because work really runs later on another thread, a stage that forgets a
// wait reads data that is not written yet: a wrong result, and a data race
// TSan reports — what a GPU would do, but on the machines CI has.
//
// Errors: work that throws poisons its stream (like a sticky CUDA error):
// later work on it is skipped, markers still run but carry the error, and a
// stream that waits on such a marker is poisoned too. check(s),
// synchronize(s) and host_wait(e) rethrow the first error.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/detail/thread_label.hpp"
#include "dflash/device/backend.hpp"

namespace dflash {

/// Which pairs of the twin's simulated devices can reach each other's memory.
enum class peer_access { all, none };

class host_stream_backend {
 public:
  static constexpr const char* name = "host twin";
  static constexpr bool work_on_host_cores = true;  // each stream is an executor thread

  class stream_state;
  class event_state;
  using stream_type = stream_state*;
  using event_type = event_state*;

  host_stream_backend() : host_stream_backend(1, peer_access::all) {}
  /// `devices` simulated devices (at least 1); `peers`: whether a device may enable access to another's memory.
  explicit host_stream_backend(int devices, peer_access peers = peer_access::all) { simulate(devices, peers); }
  host_stream_backend(const host_stream_backend&) = delete;
  host_stream_backend& operator=(const host_stream_backend&) = delete;

  /// Re-shapes the simulated devices; only before any stream exists
  /// (std::logic_error otherwise; std::invalid_argument for devices < 1).
  void simulate(int devices, peer_access peers) {
    if (devices < 1)
      throw std::invalid_argument("dflash::host_stream_backend: simulate at least 1 device (got " +
                                  std::to_string(devices) + ")");
    std::lock_guard lk(dev_m_);
    if (streams_.load(std::memory_order_relaxed) != 0)
      throw std::logic_error("dflash::host_stream_backend::simulate: streams exist; reshape the devices before any is made");
    devices_ = devices;
    peers_ = peers;
    enabled_.assign(static_cast<std::size_t>(devices) * static_cast<std::size_t>(devices), false);
  }

  // ---- devices -------------------------------------------------------------
  [[nodiscard]] int device_count() const noexcept { return devices_; }
  /// The calling thread's current device (like cudaSetDevice: per thread).
  void set_device(int d) {
    if (d < 0 || d >= devices_)
      throw std::invalid_argument("dflash::host_stream_backend::set_device: device " + std::to_string(d) +
                                  " does not exist (" + std::to_string(devices_) + " simulated)");
    current() = d;
  }
  [[nodiscard]] int current_device() const noexcept { return current(); }
  [[nodiscard]] bool can_access_peer(int d, int peer) const noexcept {
    return d != peer && peers_ == peer_access::all && valid(d) && valid(peer);
  }
  /// The current device may access `peer`'s memory from now on (idempotent).
  void enable_peer_access(int peer) {
    const int d = current();
    if (!can_access_peer(d, peer))
      throw std::runtime_error("dflash::host_stream_backend::enable_peer_access: device " + std::to_string(d) +
                               " cannot access device " + std::to_string(peer));
    std::lock_guard lk(dev_m_);
    enabled_[index(d, peer)] = true;
  }
  /// Stream-ordered copy from `src` on src_dev to `dst` on dst_dev: needs no
  /// peer access (the peer copy the link falls back on).
  void copy_peer(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes, stream_type s) {
    if (bytes == 0) return;
    enqueue(s, [this, dst, dst_dev, src, src_dev, bytes] {
      owned_by(dst, dst_dev, "destination");
      owned_by(src, src_dev, "source");
      std::memcpy(dst, src, bytes);
    });
  }
  /// A kernel's access check, called from work running on `s`: throws (and so
  /// fails the stream) if `p` is another device's memory this one cannot reach.
  void check_access(const void* p, stream_type s) const {
    const int owner = owner_of(p);
    if (owner < 0 || owner == s->device() || peer_enabled(s->device(), owner)) return;
    throw std::logic_error("dflash::host_stream_backend: work on device " + std::to_string(s->device()) +
                           " touches memory of device " + std::to_string(owner) +
                           " without peer access: the link must make the slot reachable (peer access or a peer copy)");
  }
  /// The device `p` was allocated on, or -1 for memory that is not device memory of this backend.
  [[nodiscard]] int owner_of(const void* p) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lk(dev_m_);
    auto it = allocs_.upper_bound(a);
    if (it == allocs_.begin()) return -1;
    --it;
    return a < it->first + it->second.bytes ? it->second.device : -1;
  }

  // ---- streams -------------------------------------------------------------
  /// A stream of the calling thread's current device.
  [[nodiscard]] stream_type create_stream() {
    streams_.fetch_add(1, std::memory_order_relaxed);
    return new stream_state(current());
  }
  /// Runs what is still enqueued, then ends the executor thread.
  void destroy_stream(stream_type s) noexcept {
    if (!s) return;
    delete s;
    streams_.fetch_sub(1, std::memory_order_relaxed);
  }

  /// Work for the stream's thread (the twin's "kernel launch").
  template <class F>
  void enqueue(stream_type s, F&& f) {
    s->push(std::function<void()>(std::forward<F>(f)), false);
  }

  // ---- graphs: capture records a stream's enqueued work, a launch replays it -------------
  /// The recorded work, in enqueue order. A closure runs again as it was recorded: values it
  /// holds are those of the capture (as a CUDA graph's kernel parameters); what changes per
  /// replay must be read from memory.
  using graph_type = std::shared_ptr<const std::vector<std::function<void()>>>;
  // While this thread captures, it may only launch: like CUDA's thread-local capture mode, a
  // host wait or an allocation by it fails (on any stream), and so does an event record, a
  // wait or a free on the capturing stream itself (stricter than CUDA, which would capture
  // those; a graphed stage's launch() has no use for them).
  void begin_capture(stream_type s) {
    s->begin_capture();
    ++capturing_here();
  }
  [[nodiscard]] graph_type end_capture(stream_type s) {
    graph_type g = s->end_capture();
    --capturing_here();
    return g;
  }
  void abort_capture(stream_type s) noexcept {
    if (s->capturing() && capturing_here() > 0) --capturing_here();
    s->abort_capture();
  }
  void launch_graph(const graph_type& g, stream_type s) {
    s->push([g] {
      for (const auto& f : *g) f();
    }, false);
  }
  static void destroy_graph(const graph_type&) noexcept {}

  // ---- events --------------------------------------------------------------
  [[nodiscard]] event_type create_event(bool timing) {
    if (timing) stats_.bump(stats_.timing_events);
    return new event_state(current());
  }
  void destroy_event(event_type e) noexcept { delete e; }

  void record(event_type e, stream_type s) {
    refuse_while_capturing(s, "record");  // before begin_record: a refused record leaves the event as it was
    if (e->device() != s->device())
      throw std::logic_error("dflash::host_stream_backend::record: an event of device " + std::to_string(e->device()) +
                             " recorded on a stream of device " + std::to_string(s->device()) +
                             " (CUDA requires both on the same device)");
    stats_.bump(stats_.records);
    s->push([m = e->begin_record(), s] { m->complete(s->error()); }, true);
  }

  void wait(stream_type s, event_type e) {
    refuse_while_capturing(s, "wait");
    stats_.bump(stats_.waits);
    auto m = e->latest();
    if (!m) return;  // never recorded: nothing to wait for (as in CUDA)
    s->push([m = std::move(m), s] { s->fail(m->await()); }, true);
  }

  [[nodiscard]] bool query(event_type e) const {
    const auto m = e->latest();
    return !m || m->done();
  }

  /// Time between the markers of two completed timing events.
  [[nodiscard]] std::chrono::nanoseconds elapsed(event_type from, event_type to) const {
    const auto a = from->latest(), b = to->latest();
    if (!a || !b || !a->done() || !b->done())
      throw std::logic_error("dflash::host_stream_backend::elapsed: both events must be recorded and complete");
    return std::chrono::duration_cast<std::chrono::nanoseconds>(b->when() - a->when());
  }

  void host_wait(event_type e) {
    refuse_while_capturing(nullptr, "host_wait");
    stats_.bump(stats_.host_waits);
    if (auto m = e->latest())
      if (auto err = m->await()) std::rethrow_exception(err);
  }

  void synchronize(stream_type s) {
    refuse_while_capturing(s, "synchronize");
    stats_.bump(stats_.synchronizes);
    auto m = std::make_shared<marker>();
    s->push([m, s] { m->complete(s->error()); }, true);
    if (auto err = m->await()) std::rethrow_exception(err);
  }

  // ---- memory --------------------------------------------------------------
  /// Memory of s's device (of the current device when s is null).
  [[nodiscard]] void* allocate(std::size_t bytes, stream_type s) {
    refuse_while_capturing(s, "allocate");
    const std::size_t n = bytes == 0 ? 1 : bytes;
    void* p = ::operator new(n, std::align_val_t{256});
    std::lock_guard lk(dev_m_);
    allocs_[reinterpret_cast<std::uintptr_t>(p)] = {n, s ? s->device() : current()};
    return p;
  }
  /// s == nullptr: now (the caller knows no work on p is in flight).
  void deallocate(void* p, stream_type s) {
    if (!p) return;
    if (s) refuse_while_capturing(s, "deallocate");
    if (!s) free_now(p);
    else s->push([this, p] { free_now(p); }, true);
  }
  [[nodiscard]] void* allocate_host(std::size_t bytes) {
    refuse_while_capturing(nullptr, "allocate_host");
    stats_.bump(stats_.host_allocations);
    return ::operator new(bytes == 0 ? 1 : bytes);
  }
  void deallocate_host(void* p) noexcept { ::operator delete(p); }
  /// A null pointer is what cudaMemcpyAsync rejects (cudaErrorInvalidValue):
  /// here it poisons the stream, so the error surfaces at the next check or
  /// wait instead of killing the stream's thread.
  void copy(void* dst, const void* src, std::size_t bytes, stream_type s) {
    if (bytes == 0) return;
    if (dst == nullptr || src == nullptr) {
      const char* which = dst == nullptr ? "destination" : "source";
      enqueue(s, [which, bytes] {
        throw std::invalid_argument(std::string("dflash::host_stream_backend::copy: invalid argument: ") + which +
                                    " is null (" + std::to_string(bytes) + " bytes)");
      });
      return;
    }
    enqueue(s, [this, dst, src, bytes, s] {
      check_access(dst, s);
      check_access(src, s);
      std::memcpy(dst, src, bytes);
    });
  }

  void check(stream_type s) const {
    if (auto err = s->error()) std::rethrow_exception(err);
  }

  [[nodiscard]] backend_stats stats() const noexcept { return stats_.snapshot(); }

  /// Graph captures this thread has open (begin_capture .. end/abort_capture).
  static int& capturing_here() noexcept {
    thread_local int n = 0;
    return n;
  }
  // `what` may not run while this thread captures, nor on a stream being captured.
  static void refuse_while_capturing(stream_type s, const char* what) {
    if (capturing_here() > 0 || (s && s->capturing())) refuse_capture(what);
  }
  [[noreturn]] static void refuse_capture(const char* what) {
    throw std::logic_error(std::string("dflash::host_stream_backend::") + what +
                           ": called while a stream is being captured into a graph (a host wait, an allocation, "
                           "or an event on the capturing stream cannot be captured: only launches can)");
  }

  // ---- the executor and the marker -------------------------------------------
  class stream_state {
   public:
    explicit stream_state(int device = 0) : device_(device), thread_([this] { run(); }) {}
    [[nodiscard]] int device() const noexcept { return device_; }
    stream_state(const stream_state&) = delete;
    stream_state& operator=(const stream_state&) = delete;
    ~stream_state() {
      {
        std::lock_guard lk(m_);
        stopping_ = true;
      }
      cv_.notify_one();
      thread_.join();
    }

    /// control = runs even after an error (markers, waits, frees).
    void push(std::function<void()> f, bool control) {
      {
        std::lock_guard lk(m_);
        if (capture_) {  // recorded for a graph, not run
          // Every operation that pushes control work refused a capturing stream before it
          // changed anything; one that did not would be replayed as a launch.
          if (control) refuse_capture("push");
          capture_->push_back(std::move(f));
          return;
        }
        if (label_.empty() && !detail::thread_label().empty()) label_ = detail::thread_label() + " work (host twin)";
        tasks_.push_back({std::move(f), control});
      }
      cv_.notify_one();
    }
    [[nodiscard]] std::exception_ptr error() const {
      std::lock_guard lk(err_m_);
      return error_;
    }
    void begin_capture() {
      std::lock_guard lk(m_);
      if (capture_) throw std::logic_error("dflash::host_stream_backend::begin_capture: the stream is already capturing");
      capture_ = std::make_shared<std::vector<std::function<void()>>>();
    }
    [[nodiscard]] std::shared_ptr<const std::vector<std::function<void()>>> end_capture() {
      std::lock_guard lk(m_);
      if (!capture_) throw std::logic_error("dflash::host_stream_backend::end_capture: the stream is not capturing");
      return std::exchange(capture_, nullptr);
    }
    void abort_capture() noexcept {
      std::lock_guard lk(m_);
      capture_.reset();
    }
    [[nodiscard]] bool capturing() const {
      std::lock_guard lk(m_);
      return capture_ != nullptr;
    }
    void fail(std::exception_ptr e) {
      if (!e) return;
      std::lock_guard lk(err_m_);
      if (!error_) error_ = std::move(e);
    }

   private:
    struct task {
      std::function<void()> fn;
      bool control;
    };
    void run() {
      current() = device_;  // work on this stream runs on its device
      for (;;) {
        task t;
        {
          std::unique_lock lk(m_);
          cv_.wait(lk, [&] { return stopping_ || !tasks_.empty(); });
          if (tasks_.empty()) return;  // stopping, and everything enqueued has run
          t = std::move(tasks_.front());
          tasks_.pop_front();
          if (detail::thread_label().size() != label_.size()) detail::thread_label() = label_;
        }
        if (!t.control && error()) continue;  // poisoned: skip work, keep markers
        try {
          t.fn();
        } catch (...) {
          fail(std::current_exception());
        }
      }
    }

    mutable std::mutex m_;
    std::condition_variable cv_;
    std::deque<task> tasks_;
    std::shared_ptr<std::vector<std::function<void()>>> capture_;  // non-null while capturing
    std::string label_;  // the first enqueuer's thread label, for a trace of what this thread runs
    bool stopping_ = false;
    const int device_;
    mutable std::mutex err_m_;
    std::exception_ptr error_;
    std::thread thread_;  // last: starts after every other member exists
  };

  /// One record(): what a wait() captures, exactly (re-recording the event
  /// later makes a new marker and leaves this one alone, as in CUDA).
  class marker {
   public:
    void complete(std::exception_ptr err) {
      {
        std::lock_guard lk(m_);
        done_ = true;
        when_ = std::chrono::steady_clock::now();
        error_ = std::move(err);
      }
      cv_.notify_all();
    }
    [[nodiscard]] bool done() const {
      std::lock_guard lk(m_);
      return done_;
    }
    std::exception_ptr await() {
      std::unique_lock lk(m_);
      cv_.wait(lk, [&] { return done_; });
      return error_;
    }
    [[nodiscard]] std::chrono::steady_clock::time_point when() const {
      std::lock_guard lk(m_);
      return when_;
    }

   private:
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::chrono::steady_clock::time_point when_{};
    std::exception_ptr error_;
  };

  class event_state {
   public:
    explicit event_state(int device = 0) noexcept : device_(device) {}
    [[nodiscard]] int device() const noexcept { return device_; }
    /// A fresh marker becomes the event's state (what later waits capture).
    std::shared_ptr<marker> begin_record() {
      auto m = std::make_shared<marker>();
      std::lock_guard lk(m_);
      latest_ = m;
      return m;
    }
    /// The marker of the latest record; null if never recorded.
    [[nodiscard]] std::shared_ptr<marker> latest() const {
      std::lock_guard lk(m_);
      return latest_;
    }

   private:
    const int device_;
    mutable std::mutex m_;
    std::shared_ptr<marker> latest_;
  };

 private:
  struct allocation {
    std::size_t bytes;
    int device;
  };
  static int& current() noexcept {
    thread_local int d = 0;
    return d;
  }
  [[nodiscard]] bool valid(int d) const noexcept { return d >= 0 && d < devices_; }
  [[nodiscard]] std::size_t index(int d, int peer) const noexcept {
    return static_cast<std::size_t>(d) * static_cast<std::size_t>(devices_) + static_cast<std::size_t>(peer);
  }
  [[nodiscard]] bool peer_enabled(int d, int peer) const {
    if (!valid(d) || !valid(peer)) return false;
    std::lock_guard lk(dev_m_);
    return enabled_[index(d, peer)];
  }
  void owned_by(const void* p, int d, const char* which) const {
    const int owner = owner_of(p);
    if (owner >= 0 && owner != d)
      throw std::logic_error(std::string("dflash::host_stream_backend::copy_peer: the ") + which + " is memory of device " +
                             std::to_string(owner) + ", not of device " + std::to_string(d));
  }
  void free_now(void* p) noexcept {
    {
      std::lock_guard lk(dev_m_);
      allocs_.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    ::operator delete(p, std::align_val_t{256});
  }

  int devices_ = 1;
  peer_access peers_ = peer_access::all;
  mutable std::mutex dev_m_;
  std::vector<bool> enabled_;                         // [device * n + peer]: device may access peer's memory
  std::map<std::uintptr_t, allocation> allocs_;        // live device memory, by start address
  std::atomic<std::size_t> streams_{0};
  detail::backend_counters stats_;
};

static_assert(MultiDeviceBackend<host_stream_backend>);

}  // namespace dflash
