#pragma once
// event_pool<B>: events for values that device work is still writing when they
// cross a host link (pending<T, B> in pipeline/item.hpp). An event goes back
// once its waiter has captured it; release() never allocates, so it is safe
// on the path that cannot fail.

#include <mutex>
#include <vector>

#include "dflash/device/backend.hpp"

namespace dflash::detail {

template <class B>
class event_pool {
 public:
  explicit event_pool(B& b) : b_(b) {}
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;
  ~event_pool() {
    for (auto e : all_) b_.destroy_event(e);
  }
  typename B::event_type acquire() {
    std::lock_guard lk(m_);
    if (!free_.empty()) {
      auto e = free_.back();
      free_.pop_back();
      return e;
    }
    all_.reserve(all_.size() + 1);
    free_.reserve(all_.size() + 1);  // release() never allocates
    auto e = b_.create_event(false);
    all_.push_back(e);
    return e;
  }
  void release(typename B::event_type e) noexcept {
    std::lock_guard lk(m_);
    free_.push_back(e);
  }

 private:
  B& b_;
  std::mutex m_;
  std::vector<typename B::event_type> all_, free_;
};

}  // namespace dflash::detail
