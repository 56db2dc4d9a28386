#pragma once
// The steps of dflash::enqueue_padded (device_queue.cuh), written once for host
// and device: the kernels call these functions, and the host twins below run
// them on a ring_control in host memory, so the validation and "every reserved
// position is published" rules are tested by ctest without a GPU.
//
//   1. offsets = exclusive sum of lengths       (cub::DeviceScan; int, may wrap)
//   2. reserve: validate every length, sum in 64 bits, reserve the total with
//      one CAS, or reserve NOTHING and say why (invalid / too_large / full / closed)
//   3. copy: element i of sequence b -> position first + offsets[b] + i, then
//      publish it. Runs whenever step 2 ran; writes only for an ok ticket,
//      and an ok ticket means every reserved position gets exactly one write.

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "dflash/config.hpp"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

/// What the reserve step learns from the lengths. Combinable (+), so a block
/// can reduce it; the total is 64-bit, so n <= INT_MAX lengths <= INT_MAX cannot wrap.
struct packed_summary {
  unsigned long long total = 0;  ///< sum of the lengths
  unsigned bad = 0;              ///< non-zero: some length < 0 or > max_len
};

/// Fold one length into a summary.
DFLASH_HOST_DEVICE inline packed_summary packed_check(packed_summary s, int len, int max_len) noexcept {
  if (len < 0 || len > max_len) s.bad = 1;
  else s.total += static_cast<unsigned long long>(len);
  return s;
}

/// Combine two partial summaries (cub::BlockReduce operator).
struct packed_summary_sum {
  DFLASH_HOST_DEVICE packed_summary operator()(const packed_summary& a, const packed_summary& b) const noexcept {
    return {a.total + b.total, a.bad | b.bad};
  }
};

/// Decide: invalid if any length was bad; too_large if the total does not fit
/// the int offsets DeviceScan writes (or the ring); else one CAS for the total.
/// Nothing is reserved unless the status is ok.
DFLASH_HOST_DEVICE inline ring_ticket packed_reserve_total(const ring_control& ctl, packed_summary s) noexcept {
  if (s.bad != 0) return {ring_status::invalid, 0, 0};
  if (s.total > static_cast<unsigned long long>(INT_MAX)) return {ring_status::too_large, 0, 0};
  return ctl.try_reserve_push(static_cast<std::uint32_t>(s.total));
}

/// The whole reserve step on one thread (the host twin; the kernel does the
/// same fold with a block reduction, then packed_reserve_total).
DFLASH_HOST_DEVICE inline ring_ticket packed_reserve(const ring_control& ctl, const int* lengths, int n,
                                                     int max_len) noexcept {
  packed_summary s{};
  for (int b = 0; b < n; ++b) s = packed_check(s, lengths[b], max_len);
  return packed_reserve_total(ctl, s);
}

/// Ring position of element i of sequence b (valid ticket: 0 <= offsets[b], i < lengths[b]).
DFLASH_HOST_DEVICE inline unsigned long long packed_position(const ring_ticket& t, const int* offsets, int b,
                                                             int i) noexcept {
  return t.first + static_cast<unsigned long long>(offsets[b]) + static_cast<unsigned long long>(i);
}
/// Index of element i of sequence b in the padded [n, max_len] input.
DFLASH_HOST_DEVICE inline std::size_t packed_source(int max_len, int b, int i) noexcept {
  return static_cast<std::size_t>(b) * static_cast<std::size_t>(max_len) + static_cast<std::size_t>(i);
}

// ---- host twins ------------------------------------------------------------

/// Step 1 as cub::DeviceScan::ExclusiveSum computes it for int (wrapping).
inline void host_exclusive_scan(const int* lengths, int n, int* offsets) noexcept {
  std::uint32_t run = 0;
  for (int b = 0; b < n; ++b) {
    offsets[b] = static_cast<int>(run);
    run += static_cast<std::uint32_t>(lengths[b]);
  }
}

/// Step 3 (the copy kernel's loop, on one thread): slots is the ring's slot array.
template <class T>
void host_packed_copy(const ring_control& ctl, T* slots, const T* values, int max_len, const int* lengths,
                      const int* offsets, int n, const ring_ticket& t) {
  if (t.status != ring_status::ok) return;
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < lengths[b]; ++i) {
      const unsigned long long pos = packed_position(t, offsets, b, i);
      slots[ctl.slot(pos)] = values[packed_source(max_len, b, i)];
      ctl.publish(pos);
    }
}

/// enqueue_padded on the host: the same checks, then steps 1-3, all of them
/// whenever the reserve step runs.
template <class T>
ring_ticket host_enqueue_padded(const ring_control& ctl, T* slots, const T* values, int max_len, const int* lengths,
                                int n, int* offsets) {
  if (n < 0 || max_len < 0) throw std::invalid_argument("dflash::host_enqueue_padded: n and max_len must be >= 0");
  host_exclusive_scan(lengths, n, offsets);
  const ring_ticket t = packed_reserve(ctl, lengths, n, max_len);
  host_packed_copy(ctl, slots, values, max_len, lengths, offsets, n, t);
  return t;
}

}  // namespace dflash
