#pragma once
// dflash::device_queue_link<"hs_rows", Capacity, MaxRowsPerPush, BatchRows, Fill>:
// rows, not items, between two GPU stages — a ring of `Capacity` rows in
// device memory (CUB's and ring_control's device queue; device/row_queue.hpp)
// where only the device knows how many rows a call pushed or popped.
//
//   producer  void operator()(In&&, dflash::device_rows<Row, B, Elem>& out, DS)  pushes 0..MaxRowsPerPush
//             rows through out.pusher() from its work on the stream
//   consumer  void operator()(dflash::device_rows<Row, B, Elem>& in, DS)         reads in.batch(): up to
//             BatchRows rows, count() on the device, across producer calls
//
// The host reserves room for MaxRowsPerPush rows per producer call and blocks
// only when that does not fit (backpressure, "<Name>.push_wait"); counts come
// back through events it polls, never waits on, on the per-item path. Every
// row pushed is popped exactly once before the consumer's input ends, FIFO per
// producer call; a call that pushes more than MaxRowsPerPush fails the run.
// Fill: partial_batches (a pop takes what is there: lowest latency) or
// full_batches (every batch has exactly BatchRows rows but the last, or none
// when a running call's rows are not yet written; row_queue.hpp says how).
//
// Run-time sizes: the shape's depth of the link is its capacity in rows, and
// shape.rows[link] = {max_per_push, batch, width} overrides MaxRowsPerPush and
// BatchRows (0 keeps them) and gives the payload's width, which rows of
// device_rows<Row, B, Elem> with Elem not void need (a hidden state of the
// model's width: known at run time). With cuda_backend, include
// <dflash/device/row_ring_kernels.cuh> in one .cu file of the program.
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
template <class Row, class B, class Elem>
struct is_device_rows<device_rows<Row, B, Elem>> : std::true_type {};
}  // namespace detail

template <fixed_string Name, std::size_t Capacity, std::uint32_t MaxRowsPerPush, std::uint32_t BatchRows,
          class Fill = partial_batches>
struct device_queue_link : link_answers<Name, Capacity, consumer_on_own_threads, carries_device_slots,
                                        /*crosses_processes=*/false, analysis::model_kind::device> {
  static_assert(Capacity >= 2 && Capacity <= ring_control::max_capacity,
                "dflash::device_queue_link<Name, Capacity, MaxRowsPerPush, BatchRows>: Capacity (rows) must be "
                "between 2 and ring_control::max_capacity");
  static_assert(MaxRowsPerPush >= 1, "dflash::device_queue_link: MaxRowsPerPush must be at least 1");
  static_assert(BatchRows >= 1, "dflash::device_queue_link: BatchRows must be at least 1");
  static_assert(MaxRowsPerPush <= Capacity,
                "dflash::device_queue_link: MaxRowsPerPush must not exceed Capacity (one producer call's rows must "
                "fit the ring)");
  static_assert(BatchFill<Fill>,
                "dflash::device_queue_link<Name, Capacity, MaxRowsPerPush, BatchRows, Fill>: Fill must be "
                "dflash::partial_batches or dflash::full_batches");
  static_assert(!std::is_same_v<Fill, full_batches> || BatchRows + MaxRowsPerPush - 1 <= Capacity,
                "dflash::device_queue_link with full_batches: Capacity must be at least BatchRows + MaxRowsPerPush - 1 "
                "(a pop waits for a whole batch and a producer for room for a whole call: a smaller ring could stop both)");
  static constexpr std::uint32_t max_rows_per_push = MaxRowsPerPush;
  static constexpr std::uint32_t batch_rows = BatchRows;
  using fill = Fill;
  using delivery = delivers_rows_once;
  static constexpr analysis::link_model model(const analysis::link_facts&) noexcept {
    return analysis::link_model::none(
        "a device_queue_link: its batches hold rows of several items, and the model follows items");
  }

  template <class T>
  struct item_check {
    static_assert(detail::is_device_rows<T>::value,
                  "dflash::Pipeline: the type crossing a device_queue_link must be dflash::device_rows<Row, B, Elem> "
                  "(the producer's output_type and the consumer's input_type)");
    using backend = typename T::backend_type;
    using row = typename T::row_type;
    using elem = typename T::elem_type;
  };
  template <class T>
  using item_backend = typename item_check<T>::backend;

  template <class Item, class P>
  using endpoint = row_queue<typename item_check<Item>::row, typename item_check<Item>::backend, P, Name,
                             typename item_check<Item>::elem, Fill>;

  /// The shape's row sizes over the compile-time ones (0 keeps them).
  static constexpr row_sizes sizes(const row_sizes& r) noexcept {
    return {r.max_per_push ? r.max_per_push : MaxRowsPerPush, r.batch ? r.batch : BatchRows, r.width};
  }

  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    return std::make_unique<endpoint<Item, P>>(*c.backend, c.depth, sizes(c.rows), c.prof);
  }
};

}  // namespace dflash
