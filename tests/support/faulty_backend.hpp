#pragma once
// The asynchronous host twin with one backend call that fails, as a CUDA call
// returns an error when its device fails: the n-th record, wait, copy,
// allocation or stream-ordered free made while the plan is armed throws and
// has no effect. It also keeps the books a leak check needs (allocations and
// events alive), so a test can ask, after the pipeline is gone, whether a
// failed call cost a slot, a buffer or an event.
//
// A pipeline constructs its backend itself, so the plan and the books live in
// one process-wide object (tests run one scenario at a time).
#include <dflash/device/host_stream_backend.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace dflash_test {

enum class backend_call { record, wait, copy, allocate, free, count };

inline const char* name_of(backend_call c) {
  switch (c) {
    case backend_call::record: return "record";
    case backend_call::wait: return "wait";
    case backend_call::copy: return "copy";
    case backend_call::allocate: return "allocate";
    case backend_call::free: return "free";
    case backend_call::count: break;
  }
  return "none";
}

struct fault_plan {
  backend_call call = backend_call::count;  // count: none fails
  int nth = 0;                              // the n-th call of that kind while armed fails
  std::atomic<bool> armed{false};
  std::array<std::atomic<int>, static_cast<std::size_t>(backend_call::count)> calls{};
  std::atomic<bool> fired{false};
  // The books, written by the backend's destructor.
  std::size_t leaked_allocations = 0;
  long long leaked_events = 0;

  void reset(backend_call c, int n) {
    call = c;
    nth = n;
    armed = false;
    for (auto& k : calls) k = 0;
    fired = false;
    leaked_allocations = 0;
    leaked_events = 0;
  }
  [[nodiscard]] std::string message() const { return std::string("injected: ") + name_of(call) + " failed"; }
};

inline fault_plan& faults() {
  static fault_plan p;
  return p;
}

class faulty_backend : public dflash::host_stream_backend {
  using base = dflash::host_stream_backend;

 public:
  faulty_backend() = default;
  ~faulty_backend() {
    std::lock_guard lk(m_);
    faults().leaked_allocations = live_.size() - unfreed_.size();
    faults().leaked_events = events_.load();
    for (void* p : unfreed_) base::deallocate(p, stream_type{});  // a failed free did not free it
  }

  [[nodiscard]] event_type create_event(bool timing) {
    events_.fetch_add(1);
    return base::create_event(timing);
  }
  void destroy_event(event_type e) noexcept {
    events_.fetch_sub(1);
    base::destroy_event(e);
  }
  void record(event_type e, stream_type s) {
    fail(backend_call::record);
    base::record(e, s);
  }
  void wait(stream_type s, event_type e) {
    fail(backend_call::wait);
    base::wait(s, e);
  }
  void copy(void* dst, const void* src, std::size_t bytes, stream_type s) {
    fail(backend_call::copy);
    base::copy(dst, src, bytes, s);
  }
  void copy_peer(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes, stream_type s) {
    fail(backend_call::copy);
    base::copy_peer(dst, dst_dev, src, src_dev, bytes, s);
  }
  [[nodiscard]] void* allocate(std::size_t bytes, stream_type s) {
    fail(backend_call::allocate);
    void* p = base::allocate(bytes, s);
    std::lock_guard lk(m_);
    live_.insert(p);
    return p;
  }
  /// A free now (null stream) is cudaFree, whose error cuda_backend ignores:
  /// only the stream-ordered free fails.
  void deallocate(void* p, stream_type s) {
    if (p && s) {
      try {
        fail(backend_call::free);
      } catch (...) {
        std::lock_guard lk(m_);
        unfreed_.insert(p);
        throw;
      }
    }
    if (p) {
      std::lock_guard lk(m_);
      live_.erase(p);
      unfreed_.erase(p);
    }
    base::deallocate(p, s);
  }

 private:
  static void fail(backend_call c) {
    fault_plan& f = faults();
    if (!f.armed.load()) return;
    const int n = f.calls[static_cast<std::size_t>(c)].fetch_add(1) + 1;
    if (c != f.call || n != f.nth) return;
    f.fired = true;
    throw std::runtime_error(f.message());
  }

  std::mutex m_;
  std::set<void*> live_, unfreed_;
  std::atomic<long long> events_{0};
};

}  // namespace dflash_test
