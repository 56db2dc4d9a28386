#pragma once
// Hidden-state packing: padded [batch, seq, hidden] <-> packed [tokens, hidden].
//
// Row b holds lengths[b] valid tokens at s = 0 .. lengths[b]-1 (right padding).
// pack copies them, in batch order, to packed rows cu_seqlens[b] ..
// cu_seqlens[b+1]-1, where cu_seqlens (int32, batch+1 entries) is the
// inclusive prefix sum of lengths with cu_seqlens[0] = 0 (flash-attention's
// varlen convention). unpack is the inverse scatter; padding rows become zero
// (all-zero bytes, i.e. +0.0 for fp32 and bf16).
//
// Element types are any trivially copyable T (fp32, dflash::bf16, ...): the
// ops copy bytes. The GPU path (pack_hidden_states.cuh) uses 16-byte vector
// copies when rows and pointers are 16-byte aligned.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <concepts>
#include <ranges>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "dflash/ops/keys.hpp"
#include "dflash/ops/validate.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::ops {

struct hidden_shape {
  std::int32_t batch = 0;
  std::int32_t seq = 0;
  std::int32_t hidden = 0;

  /// batch * seq * hidden. Throws std::invalid_argument for a negative extent and
  /// std::overflow_error when the product does not fit size_t (it never wraps).
  [[nodiscard]] std::size_t padded_elements() const { return checked_elements(1, "hidden_shape::padded_elements"); }

  /// batch * seq * hidden, checked so that the count times `element_bytes` fits size_t and ptrdiff_t
  /// (the largest object a span can describe); errors name `op`.
  [[nodiscard]] std::size_t checked_elements(std::size_t element_bytes, std::string_view op) const {
    detail::require_non_negative(batch, op, "batch");
    detail::require_non_negative(seq, op, "seq");
    detail::require_non_negative(hidden, op, "hidden");
    const std::string dims = std::to_string(batch) + " * " + std::to_string(seq) + " * " + std::to_string(hidden);
    const std::size_t bs = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);  // < 2^62: no wrap
    const std::size_t h = static_cast<std::size_t>(hidden);
    if (h != 0 && bs > std::numeric_limits<std::size_t>::max() / h)
      detail::fail_overflow(op, "batch * seq * hidden = " + dims + " overflows size_t");
    const std::size_t n = bs * h;
    constexpr auto max_bytes = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
    if (element_bytes != 0 && n > max_bytes / element_bytes)
      detail::fail_overflow(op, "batch * seq * hidden = " + dims + " elements of " + std::to_string(element_bytes) +
                                    " bytes overflow the largest object (" + std::to_string(max_bytes) + " bytes)");
    return n;
  }
};

namespace detail {
inline void check_shape(const hidden_shape& s, std::string_view op) {
  require_non_negative(s.batch, op, "batch");
  require_non_negative(s.seq, op, "seq");
  require(s.hidden > 0, op, "hidden = " + std::to_string(s.hidden) + " must be positive");
}

/// check_shape plus the element count of T's, which must not wrap: returns batch * seq * hidden.
template <class T>
[[nodiscard]] std::size_t check_shape_elements(const hidden_shape& s, std::string_view op) {
  check_shape(s, op);
  return s.checked_elements(sizeof(T), op);
}

/// Checks cu (batch+1 entries, starts at 0, steps in [0, seq]); returns the token count.
inline std::int32_t check_cu_seqlens(std::span<const std::int32_t> cu, const hidden_shape& s, std::string_view op) {
  require_size(cu.size(), static_cast<std::size_t>(s.batch) + 1, op, "cu_seqlens");
  require(cu[0] == 0, op, "cu_seqlens[0] = " + std::to_string(cu[0]) + " must be 0");
  for (std::size_t b = 0; b < static_cast<std::size_t>(s.batch); ++b) {
    const std::int64_t len = static_cast<std::int64_t>(cu[b + 1]) - cu[b];
    if (len < 0 || len > s.seq)
      fail(op, "cu_seqlens[" + std::to_string(b + 1) + "] - cu_seqlens[" + std::to_string(b) + "] = " +
                   std::to_string(len) + " is not a length in [0, seq = " + std::to_string(s.seq) + "]");
  }
  return cu[static_cast<std::size_t>(s.batch)];
}
}  // namespace detail

/// cu_seqlens from lengths (each in [0, seq]); cu.size() must be lengths.size() + 1.
inline std::int32_t cu_seqlens(std::span<const std::int32_t> lengths, std::int32_t seq, std::span<std::int32_t> cu) {
  constexpr std::string_view op = "cu_seqlens";
  detail::require_non_negative(seq, op, "seq");
  const std::int32_t total = detail::checked_total(lengths, seq, op);
  detail::require_size(cu.size(), lengths.size() + 1, op, "cu_seqlens");
  std::int32_t acc = 0;
  cu[0] = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) cu[b + 1] = acc += lengths[b];
  return total;
}

namespace detail {
template <class R>
using range_elem_t = std::remove_cv_t<std::ranges::range_value_t<R>>;
/// A contiguous, sized range of T's (std::vector, std::array, std::span, C array, ...).
template <class R, class T>
concept contiguous_of =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && std::same_as<range_elem_t<R>, T>;
/// ... that the op may write: non-const elements, and not a temporary container that would die with the call.
template <class R, class T>
concept writable_contiguous_of = contiguous_of<R, T> && std::ranges::borrowed_range<R> &&
                                 !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;
/// The element type: the explicit template argument if one is given, else the range's.
template <class Explicit, class R>
using element_or_t = typename std::conditional_t<std::is_void_v<Explicit>, std::type_identity<range_elem_t<R>>,
                                                 std::type_identity<Explicit>>::type;
}  // namespace detail

/// Gather valid tokens. padded.size() == batch*seq*hidden; lengths.size() == batch,
/// each in [0, seq]; packed.size() >= sum(lengths)*hidden (only that prefix is
/// written); cu_seqlens.size() == batch+1. Returns the token count.
/// padded and packed are any contiguous ranges of the same trivially copyable T (std::vector,
/// std::span, std::array, ...); T is deduced, or may be given: pack_hidden_states<bf16>(...).
template <class T = void, ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys, class Padded, class Packed,
          class E = detail::element_or_t<T, Padded>>
  requires std::is_trivially_copyable_v<E> && detail::contiguous_of<Padded, E> &&
           detail::writable_contiguous_of<Packed, E>
std::int32_t pack_hidden_states(Padded&& padded_in, const hidden_shape& shape, std::span<const std::int32_t> lengths,
                                Packed&& packed_out, std::span<std::int32_t> cu, profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "pack_hidden_states";
  const std::span<const E> padded(padded_in);
  const std::span<E> packed(packed_out);
  const std::size_t elements = detail::check_shape_elements<E>(shape, op);
  detail::require_size(padded.size(), elements, op, "padded");
  detail::require_size(lengths.size(), static_cast<std::size_t>(shape.batch), op, "lengths");
  const std::int32_t total = detail::checked_total(lengths, shape.seq, op);
  const std::size_t h = static_cast<std::size_t>(shape.hidden);
  detail::require(packed.size() >= static_cast<std::size_t>(total) * h, op,
                  "packed has " + std::to_string(packed.size()) + " elements, needs " +
                      std::to_string(static_cast<std::size_t>(total) * h));
  detail::require_size(cu.size(), lengths.size() + 1, op, "cu_seqlens");
  auto timer = prof->scope("pack_hidden_states"_key);
  cu_seqlens(lengths, shape.seq, cu);
  const std::size_t row = static_cast<std::size_t>(shape.seq) * h;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    // A row's valid tokens are contiguous: one copy per sequence.
    const std::size_t n = static_cast<std::size_t>(lengths[b]) * h;
    if (n != 0)
      std::memcpy(packed.data() + static_cast<std::size_t>(cu[b]) * h, padded.data() + b * row, n * sizeof(E));
  }
  return total;
}

/// Inverse scatter: padded.size() == batch*seq*hidden; cu_seqlens valid for
/// (batch, seq); packed.size() >= cu_seqlens[batch]*hidden. Padding is zeroed.
/// Ranges as for pack_hidden_states.
template <class T = void, ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys, class Packed, class Padded,
          class E = detail::element_or_t<T, Packed>>
  requires std::is_trivially_copyable_v<E> && detail::contiguous_of<Packed, E> &&
           detail::writable_contiguous_of<Padded, E>
void unpack_hidden_states(Packed&& packed_in, std::span<const std::int32_t> cu, const hidden_shape& shape,
                          Padded&& padded_out, profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "unpack_hidden_states";
  const std::span<const E> packed(packed_in);
  const std::span<E> padded(padded_out);
  const std::size_t elements = detail::check_shape_elements<E>(shape, op);
  detail::require_size(padded.size(), elements, op, "padded");
  const std::int32_t total = detail::check_cu_seqlens(cu, shape, op);
  const std::size_t h = static_cast<std::size_t>(shape.hidden);
  detail::require(packed.size() >= static_cast<std::size_t>(total) * h, op,
                  "packed has " + std::to_string(packed.size()) + " elements, needs " +
                      std::to_string(static_cast<std::size_t>(total) * h));
  auto timer = prof->scope("unpack_hidden_states"_key);
  const std::size_t row = static_cast<std::size_t>(shape.seq) * h;
  for (std::size_t b = 0; b < static_cast<std::size_t>(shape.batch); ++b) {
    const std::size_t n = static_cast<std::size_t>(cu[b + 1] - cu[b]) * h;
    E* dst = padded.data() + b * row;
    if (n != 0) std::memcpy(dst, packed.data() + static_cast<std::size_t>(cu[b]) * h, n * sizeof(E));
    if (row != n) std::memset(static_cast<void*>(dst + n), 0, (row - n) * sizeof(E));
  }
}

}  // namespace dflash::ops
