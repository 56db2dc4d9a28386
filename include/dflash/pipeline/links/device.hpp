#pragma once
// dflash::device_link<"hs_device", 4>: Depth slots of device-resident items (a
// dflash::device_item<B>) moving between two GPU stages' streams in stream
// order, with no host synchronisation per item (device/device_channel.hpp).
// The stages on either side get a stream per worker (agents/device_worker.hpp)
// and call shapes with a slot; records "<Name>.push_wait" (producer waiting
// for a free slot) and "<Name>.pop_wait".

#include <cstddef>
#include <memory>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/device/backend.hpp"
#include "dflash/device/device_channel.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

template <fixed_string Name, std::size_t Depth>
struct device_link : link_answers<Name, Depth, consumer_on_own_threads, carries_device_slots,
                                  /*crosses_processes=*/false, analysis::model_kind::device> {
  static_assert(Depth > 0, "dflash::device_link<Name, Depth>: Depth must be at least 1");

  template <class Item, class P>
  using endpoint = device_channel<Item, P, Name>;

  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    return std::make_unique<endpoint<Item, P>>(*c.backend, c.depth, c.prof);
  }
  // The backend a slot of T lives on; the first use checks that T is a device item
  // (so that check() needs nothing more).
  template <class T>
  struct item_check {
    static_assert(DeviceItem<T>,
                  "dflash::Pipeline: the type crossing a device_link must be a device item: derive it from "
                  "dflash::device_item<B> (B = dflash::cuda_backend or dflash::host_stream_backend) and keep it "
                  "default-constructible (T is the stage's output_type)");
    using backend = typename T::backend_type;
  };
  template <class T>
  using item_backend = typename item_check<T>::backend;
};

}  // namespace dflash
