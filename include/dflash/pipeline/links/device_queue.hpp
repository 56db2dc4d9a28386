#pragma once
// dflash::device_queue_link<"hs_rows", Capacity, MaxRowsPerPush, BatchRows>:
// rows, not items, between two GPU stages — a ring of `Capacity` rows in
// device memory (CUB's and ring_control's device queue; device/row_queue.hpp)
// where only the device knows how many rows a call pushed or popped.
//
//   producer  void operator()(In&&, dflash::device_rows<Row, B>& out, DS)   pushes 0..MaxRowsPerPush
//             rows through out.pusher() from its work on the stream
//   consumer  void operator()(dflash::device_rows<Row, B>& in, DS)          reads in.batch(): up to
//             BatchRows rows, count() on the device, across producer calls
//
// The host reserves room for MaxRowsPerPush rows per producer call and blocks
// only when that does not fit (backpressure, "<Name>.push_wait"); counts come
// back through events it polls, never waits on, on the per-item path. Every
// row pushed is popped exactly once before the consumer's input ends, FIFO per
// producer call; a call that pushes more than MaxRowsPerPush fails the run.
// The shape's depth of the link is its capacity in rows. With cuda_backend,
// include <dflash/device/row_ring_kernels.cuh> in one .cu file of the program.
//
// Items do not cross it (rows of several calls share a batch: its delivery is
// delivers_rows_once), so the analysis has no model for it and says so
// instead of predicting.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/device/device_rows.hpp"
#include "dflash/device/row_queue.hpp"
#include "dflash/pipeline/link.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

namespace detail {
template <class T>
struct is_device_rows : std::false_type {};
template <class Row, class B>
struct is_device_rows<device_rows<Row, B>> : std::true_type {};
}  // namespace detail

template <fixed_string Name, std::size_t Capacity, std::uint32_t MaxRowsPerPush, std::uint32_t BatchRows>
struct device_queue_link : link_answers<Name, Capacity, consumer_on_own_threads, carries_device_slots,
                                        /*crosses_processes=*/false, analysis::link_kind::device> {
  static_assert(Capacity >= 1 && Capacity <= ring_control::max_capacity,
                "dflash::device_queue_link<Name, Capacity, MaxRowsPerPush, BatchRows>: Capacity (rows) must be "
                "between 1 and ring_control::max_capacity");
  // (MaxRowsPerPush >= 1 and BatchRows >= 1: row_queue, the endpoint, asserts them)
  static_assert(MaxRowsPerPush <= Capacity,
                "dflash::device_queue_link: MaxRowsPerPush must not exceed Capacity (one producer call's rows must "
                "fit the ring)");
  static constexpr std::uint32_t max_rows_per_push = MaxRowsPerPush;
  static constexpr std::uint32_t batch_rows = BatchRows;
  using delivery = delivers_rows_once;
  static constexpr analysis::link_model model(const analysis::link_facts&) noexcept {
    return analysis::link_model::none(
        "a device_queue_link: its batches hold rows of several items, and the model follows items");
  }

  template <class T>
  struct item_check {
    static_assert(detail::is_device_rows<T>::value,
                  "dflash::Pipeline: the type crossing a device_queue_link must be dflash::device_rows<Row, B> "
                  "(the producer's output_type and the consumer's input_type)");
    using backend = typename T::backend_type;
    using row = typename T::row_type;
  };
  template <class T>
  using item_backend = typename item_check<T>::backend;

  template <class Item, class P>
  using endpoint = row_queue<typename item_check<Item>::row, typename item_check<Item>::backend, P, Name,
                             MaxRowsPerPush, BatchRows>;

  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    return std::make_unique<endpoint<Item, P>>(*c.backend, c.depth, c.prof);
  }
};

}  // namespace dflash
