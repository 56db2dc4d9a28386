#pragma once
// host_stream_backend: the asynchronous host twin of cuda_backend.
//
//   stream  an in-order executor: work enqueued on it runs later, on the
//           stream's own thread, in enqueue order (like a CUDA stream);
//   event   a completion marker: record(e, s) enqueues "e reached" on s;
//           wait(s, e) enqueues, on s, "block until the marker captured now
//           has run" (the host thread that called wait() never blocks);
//   memory  host memory; deallocate is stream-ordered (runs after prior work).
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
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "dflash/device/backend.hpp"

namespace dflash {

class host_stream_backend {
 public:
  static constexpr const char* name = "host twin";
  static constexpr bool work_on_host_cores = true;  // each stream is an executor thread

  class stream_state;
  class event_state;
  using stream_type = stream_state*;
  using event_type = event_state*;

  host_stream_backend() = default;
  host_stream_backend(const host_stream_backend&) = delete;
  host_stream_backend& operator=(const host_stream_backend&) = delete;

  // ---- streams -------------------------------------------------------------
  [[nodiscard]] stream_type create_stream() { return new stream_state(); }
  /// Runs what is still enqueued, then ends the executor thread.
  void destroy_stream(stream_type s) noexcept { delete s; }

  /// Work for the stream's thread (the twin's "kernel launch").
  template <class F>
  void enqueue(stream_type s, F&& f) {
    s->push(std::function<void()>(std::forward<F>(f)), false);
  }

  // ---- events --------------------------------------------------------------
  [[nodiscard]] event_type create_event(bool timing) {
    if (timing) stats_.bump(stats_.timing_events);
    return new event_state();
  }
  void destroy_event(event_type e) noexcept { delete e; }

  void record(event_type e, stream_type s) {
    stats_.bump(stats_.records);
    s->push([m = e->begin_record(), s] { m->complete(s->error()); }, true);
  }

  void wait(stream_type s, event_type e) {
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
    stats_.bump(stats_.host_waits);
    if (auto m = e->latest())
      if (auto err = m->await()) std::rethrow_exception(err);
  }

  void synchronize(stream_type s) {
    stats_.bump(stats_.synchronizes);
    auto m = std::make_shared<marker>();
    s->push([m, s] { m->complete(s->error()); }, true);
    if (auto err = m->await()) std::rethrow_exception(err);
  }

  // ---- memory --------------------------------------------------------------
  [[nodiscard]] void* allocate(std::size_t bytes, stream_type) {
    return ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t{256});
  }
  /// s == nullptr: now (the caller knows no work on p is in flight).
  void deallocate(void* p, stream_type s) {
    if (!p) return;
    if (!s) ::operator delete(p, std::align_val_t{256});
    else s->push([p] { ::operator delete(p, std::align_val_t{256}); }, true);
  }
  [[nodiscard]] void* allocate_host(std::size_t bytes) { return ::operator new(bytes == 0 ? 1 : bytes); }
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
    enqueue(s, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }

  void check(stream_type s) const {
    if (auto err = s->error()) std::rethrow_exception(err);
  }

  [[nodiscard]] backend_stats stats() const noexcept { return stats_.snapshot(); }

  // ---- the executor and the marker -------------------------------------------
  class stream_state {
   public:
    stream_state() : thread_([this] { run(); }) {}
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
        tasks_.push_back({std::move(f), control});
      }
      cv_.notify_one();
    }
    [[nodiscard]] std::exception_ptr error() const {
      std::lock_guard lk(err_m_);
      return error_;
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
      for (;;) {
        task t;
        {
          std::unique_lock lk(m_);
          cv_.wait(lk, [&] { return stopping_ || !tasks_.empty(); });
          if (tasks_.empty()) return;  // stopping, and everything enqueued has run
          t = std::move(tasks_.front());
          tasks_.pop_front();
        }
        if (!t.control && error()) continue;  // poisoned: skip work, keep markers
        try {
          t.fn();
        } catch (...) {
          fail(std::current_exception());
        }
      }
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<task> tasks_;
    bool stopping_ = false;
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
    mutable std::mutex m_;
    std::shared_ptr<marker> latest_;
  };

 private:
  detail::backend_counters stats_;
};

static_assert(DeviceBackend<host_stream_backend>);

}  // namespace dflash
