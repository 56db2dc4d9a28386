#pragma once
// gpu_timer<B>: the device time of a device stage's work per item, from a
// start/end timing-event pair recorded around the call on the worker's
// stream and resolved once the end event has completed — never blocking.
// One per device-stage worker, stateful profiler policies only (with
// NullProfiler no timing event is ever created).

#include <deque>
#include <utility>
#include <vector>

#include "dflash/device/backend.hpp"

namespace dflash::detail {

template <class B>
class gpu_timer {
 public:
  using event = typename B::event_type;
  explicit gpu_timer(B& b) : b_(b) {}
  gpu_timer(const gpu_timer&) = delete;
  gpu_timer& operator=(const gpu_timer&) = delete;
  ~gpu_timer() {
    for (auto& [a, z] : all_) {
      b_.destroy_event(a);
      b_.destroy_event(z);
    }
  }
  void start(typename B::stream_type s) {
    if (free_.empty()) {
      all_.reserve(all_.size() + 1);
      free_.reserve(all_.size() + 1);
      all_.emplace_back(b_.create_event(true), b_.create_event(true));
      free_.push_back(all_.back());
    }
    cur_ = free_.back();
    free_.pop_back();
    b_.record(cur_.first, s);
  }
  void stop(typename B::stream_type s) {
    b_.record(cur_.second, s);
    pending_.push_back(cur_);
  }
  /// Adds every completed measurement to `prof` under K.
  template <class P, class K>
  void resolve(const P& prof, K k) {
    while (!pending_.empty() && b_.query(pending_.front().second)) {
      prof.add(k, b_.elapsed(pending_.front().first, pending_.front().second));
      free_.push_back(pending_.front());
      pending_.pop_front();
    }
  }

 private:
  B& b_;
  std::vector<std::pair<event, event>> all_, free_;
  std::deque<std::pair<event, event>> pending_;
  std::pair<event, event> cur_{};
};

}  // namespace dflash::detail
