#pragma once
// device_rows<Row, B>: what crosses a dflash::device_queue_link — rows in a
// ring in device memory, not whole items. A producer call gets a row_pusher
// (push up to the link's MaxRowsPerPush rows from device code); a consumer
// call gets a row_batch (up to the link's BatchRows rows, popped on its
// stream). Neither count is ever read by the host on the per-item path: the
// pusher counts into device memory, the batch's count lives in device memory
// for the consumer's kernels (row_batch::count()).
//
//   producer:  rows.pusher()  -> row_pusher<Row>  push(row) / push(rows, n), device or host twin code
//   consumer:  rows.batch()   -> row_batch<Row>   count(), operator[](i), in work on the consumer's stream
//
// Both views are trivially copyable: pass them to a kernel by value (or
// capture them in the host twin's enqueued work). Warp- and block-aggregated
// pushes (cub::WarpReduce / BlockReduce, one reservation per group) are in
// device/device_rows.cuh.

#include "dflash/detail/require_cccl.hpp"  // first: ring_control needs libcu++

#include <cstdint>
#include <type_traits>

#include <cuda/atomic>

#include "dflash/config.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

/// Where a producer call pushes its rows. Every push counts the rows it was
/// asked for, so a call that exceeds the link's bound is reported (the link
/// reserved room for `bound` rows, and no more); a push that did not fit
/// also marks the count failed, so that its lost rows fail the run.
template <class Row>
struct row_pusher {
  ring_control ctl;
  Row* data = nullptr;
  unsigned long long* pushed = nullptr;  ///< rows this call asked to push (device memory), | failed_bit
  std::uint32_t bound = 0;               ///< the most rows this call may push

  static constexpr unsigned long long failed_bit = 1ull << 63;

  /// One row; false if it did not fit (only past the bound: the run fails).
  DFLASH_HOST_DEVICE bool push(const Row& r) const noexcept { return push(&r, 1); }
  /// n consecutive rows, all or none; false if they did not fit (only past the bound: the run fails).
  DFLASH_HOST_DEVICE bool push(const Row* rows, std::uint32_t n) const noexcept {
    count(n);
    const ring_ticket t = ctl.try_reserve_push(n);
    if (t.status != ring_status::ok) {
      fail();
      return false;
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      data[ctl.slot(t.first + i)] = rows[i];
      ctl.publish(t.first + i);
    }
    return true;
  }
  /// For aggregated pushes (device_rows.cuh): count n rows a group asked to push.
  DFLASH_HOST_DEVICE void count(std::uint64_t n) const noexcept {
    counter().fetch_add(n, cuda::std::memory_order_relaxed);
  }
  /// For aggregated pushes: the group's rows did not fit.
  DFLASH_HOST_DEVICE void fail() const noexcept { counter().fetch_or(failed_bit, cuda::std::memory_order_relaxed); }

 private:
  DFLASH_HOST_DEVICE cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> counter() const noexcept {
    return cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(*pushed);
  }
};

/// The rows one consumer call got: `count()` of them, read on the
/// consumer's stream (its kernels, or the twin's enqueued work) — never on
/// the host thread, which does not know the count.
template <class Row>
struct row_batch {
  const Row* data = nullptr;
  unsigned long long capacity = 0;
  const ring_ticket* ticket = nullptr;  ///< written by the pop, in device memory

  DFLASH_HOST_DEVICE std::uint32_t count() const noexcept { return ticket->count; }
  DFLASH_HOST_DEVICE const Row& operator[](std::uint32_t i) const noexcept {
    return data[(ticket->first + i) % capacity];
  }
};

/// The item type of a device_queue_link: a stage's output_type (producer) and
/// the next stage's input_type (consumer). The link fills it per call.
template <class Row, DeviceBackend B>
struct device_rows : device_item<B> {
  static_assert(std::is_trivially_copyable_v<Row>,
                "dflash::device_rows<Row, B>: Row must be trivially copyable (rows are copied into and out of a "
                "ring in device memory)");
  using row_type = Row;

  [[nodiscard]] const row_pusher<Row>& pusher() const noexcept { return push_; }
  [[nodiscard]] const row_batch<Row>& batch() const noexcept { return batch_; }

  row_pusher<Row> push_{};
  row_batch<Row> batch_{};
};

}  // namespace dflash
