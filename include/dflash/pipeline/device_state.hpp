#pragma once
// detail::device_state<Topo>: what a Pipeline with device links owns on the
// device side — the backend, one stream per worker of each device stage (on
// the device its placement names), and an event pool per link whose consumer
// waits for pending device work. A pipeline without device links holds an
// empty one.

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "dflash/device/backend.hpp"
#include "dflash/device/event_pool.hpp"
#include "dflash/pipeline/checks.hpp"
#include "dflash/pipeline/topology.hpp"

namespace dflash::detail {

template <class Topo, bool = Topo::has_device_links>
class device_state {  // no device links
 public:
  static constexpr bool present = false;
  template <class Shape>
  void make_streams(const Shape&, const std::array<std::size_t, Topo::stage_count>&) {}
  void destroy_streams() noexcept {}
  [[nodiscard]] no_backend* backend_ptr() noexcept { return nullptr; }
};

template <class Topo>
class device_state<Topo, true> {
  using B = typename Topo::backend_type;
  static constexpr std::size_t stages = Topo::stage_count;

 public:
  static constexpr bool present = true;

  [[nodiscard]] B& backend() noexcept { return backend_; }
  [[nodiscard]] B* backend_ptr() noexcept { return &backend_; }
  [[nodiscard]] auto& streams(std::size_t i) noexcept { return streams_[i]; }
  /// The device of worker w of device stage i (its stream's).
  [[nodiscard]] int device(std::size_t i, std::size_t w) const noexcept { return devices_[i][w]; }
  [[nodiscard]] event_pool<B>& pool(std::size_t l) noexcept { return *pools_[l]; }
  void open_pool(std::size_t l) { pools_[l] = std::make_unique<event_pool<B>>(backend_); }

  /// One stream per worker of each device stage (`threads[i]` of them), each
  /// on its worker's device (shape.devices), checked against the backend's
  /// device count first; the calling thread's current device is left as it was.
  template <class Shape>
  void make_streams(const Shape& shape, const std::array<std::size_t, stages>& threads) {
    check_devices<Topo>(shape, [&] {
      if constexpr (MultiDeviceBackend<B>) return backend_.device_count();
      else return 1;
    });
    [[maybe_unused]] int was = 0;
    if constexpr (MultiDeviceBackend<B>) was = std::min(backend_.current_device(), backend_.device_count() - 1);
    try {
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (([&] {
           if constexpr (Topo::template device_stage<I>)
             for (std::size_t w = 0; w < threads[I]; ++w) {
               const int placed = shape.device_of(I, w);
               const int d = placed < 0 ? was : placed;
               if constexpr (MultiDeviceBackend<B>) backend_.set_device(d);
               streams_[I].push_back(backend_.create_stream());
               devices_[I].push_back(d);
             }
         }()),
         ...);
      }(std::make_index_sequence<stages>{});
    } catch (...) {
      if constexpr (MultiDeviceBackend<B>) backend_.set_device(was);
      throw;
    }
    if constexpr (MultiDeviceBackend<B>) backend_.set_device(was);
  }
  void destroy_streams() noexcept {
    for (auto& v : streams_) {
      for (auto st : v) backend_.destroy_stream(st);
      v.clear();
    }
    for (auto& v : devices_) v.clear();
  }

 private:
  B backend_;
  std::array<std::vector<typename B::stream_type>, stages> streams_{};
  std::array<std::vector<int>, stages> devices_{};  // the device of each stream (placement)
  std::array<std::unique_ptr<event_pool<B>>, Topo::link_count> pools_{};
};

}  // namespace dflash::detail
