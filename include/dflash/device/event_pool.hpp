#pragma once
// event_pool<B>: events for values that device work is still writing when they
// cross a host link (pending<T, B> in pipeline/item.hpp). An event goes back
// once its waiter has captured it; release() never allocates, so it is safe
// on the path that cannot fail. Events are kept per device: a record needs
// an event of its stream's device.

#include <cstddef>
#include <mutex>
#include <utility>
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
    for (auto [e, d] : all_) b_.destroy_event(e);
  }
  /// An event of `device`, which must be the calling thread's current device
  /// (a record needs an event of its stream's device).
  typename B::event_type acquire(int device = 0) {
    std::lock_guard lk(m_);
    for (std::size_t k = 0; k < free_.size(); ++k)
      if (free_[k].second == device) {
        const auto e = free_[k].first;
        free_[k] = free_.back();
        free_.pop_back();
        return e;
      }
    all_.reserve(all_.size() + 1);
    free_.reserve(all_.size() + 1);  // release() never allocates
    auto e = b_.create_event(false);
    all_.emplace_back(e, device);
    return e;
  }
  void release(typename B::event_type e) noexcept {
    std::lock_guard lk(m_);
    for (auto [a, d] : all_)
      if (a == e) {
        free_.emplace_back(e, d);
        return;
      }
  }

 private:
  B& b_;
  std::mutex m_;
  std::vector<std::pair<typename B::event_type, int>> all_, free_;  // (event, its device)
};

}  // namespace dflash::detail
