#pragma once
// GPU hidden-state packing (see pack_hidden_states.hpp for the layout).
//
//   gpu::cu_seqlens(d_lengths, batch, d_cu, temp, temp_bytes, stream);   // CUB inclusive sum
//   gpu::pack_hidden_states(d_padded, shape, d_cu, d_packed, stream);
//   gpu::unpack_hidden_states(d_packed, d_cu, shape, d_padded, stream);
//
// One CUDA block per padded token row (grid-stride), threads copy the row in
// 16-byte words when both buffers and the row size are 16-byte aligned, else
// in element-sized words. T is any trivially copyable type (float,
// __nv_bfloat16, dflash::bf16, ...): the copy is bytewise exact.
// Preconditions on device data: cu_seqlens starts at 0 and steps in [0, seq];
// d_packed holds cu_seqlens[batch] rows.

#include <cub/device/device_scan.cuh>

#include <type_traits>

#include "dflash/ops/cuda_support.cuh"
#include "dflash/ops/pack_hidden_states.hpp"

namespace dflash::ops::gpu {

namespace detail {
// Align = alignof(T): a word wider than T's alignment could be misaligned
// (e.g. a 4-byte struct of two bf16 at an odd element), so such T go bytewise.
template <std::size_t N, std::size_t Align = N>
struct word_for {
  using type = unsigned char;  // odd sizes or under-aligned types: bytes
  static constexpr std::size_t per_element = N;
};
template <>
struct word_for<2> {
  using type = std::uint16_t;
  static constexpr std::size_t per_element = 1;
};
template <>
struct word_for<4> {
  using type = std::uint32_t;
  static constexpr std::size_t per_element = 1;
};
template <>
struct word_for<8> {
  using type = std::uint64_t;
  static constexpr std::size_t per_element = 1;
};

/// Pack: padded row r -> packed row cu[b] + s for s < len. Unpack: the reverse, zero for s >= len.
template <class W, bool Pack>
__global__ void copy_rows_kernel(const W* __restrict__ src, W* __restrict__ dst, const std::int32_t* __restrict__ cu,
                                 std::int32_t batch, std::int32_t seq, std::size_t row_words) {
  const std::int64_t rows = static_cast<std::int64_t>(batch) * seq;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int32_t b = static_cast<std::int32_t>(r / seq), s = static_cast<std::int32_t>(r % seq);
    const std::int32_t start = cu[b], len = cu[b + 1] - start;
    const std::int64_t packed_row = static_cast<std::int64_t>(start) + s;
    if constexpr (Pack) {
      if (s >= len) continue;  // uniform per block: the whole row is padding
      const W* in = src + static_cast<std::size_t>(r) * row_words;
      W* out = dst + static_cast<std::size_t>(packed_row) * row_words;
      for (std::size_t i = threadIdx.x; i < row_words; i += blockDim.x) out[i] = in[i];
    } else {
      W* out = dst + static_cast<std::size_t>(r) * row_words;
      if (s >= len) {
        for (std::size_t i = threadIdx.x; i < row_words; i += blockDim.x) out[i] = W{};
      } else {
        const W* in = src + static_cast<std::size_t>(packed_row) * row_words;
        for (std::size_t i = threadIdx.x; i < row_words; i += blockDim.x) out[i] = in[i];
      }
    }
  }
}

template <bool Pack, class T>
void launch_copy_rows(const T* src, T* dst, const std::int32_t* cu, const hidden_shape& shape, cudaStream_t stream) {
  const std::size_t row_bytes = static_cast<std::size_t>(shape.hidden) * sizeof(T);
  const std::int64_t rows = static_cast<std::int64_t>(shape.batch) * shape.seq;
  if (rows == 0) return;
  const bool vec = row_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(dst) % 16 == 0;
  const unsigned grid = static_cast<unsigned>(rows < (1 << 20) ? rows : (1 << 20));
  if (vec) {
    const std::size_t words = row_bytes / 16;
    const unsigned threads = words >= 256 ? 256 : words >= 128 ? 128 : 64;
    copy_rows_kernel<uint4, Pack><<<grid, threads, 0, stream>>>(reinterpret_cast<const uint4*>(src),
                                                                reinterpret_cast<uint4*>(dst), cu, shape.batch,
                                                                shape.seq, words);
  } else {
    using wf = word_for<sizeof(T), alignof(T)>;
    using W = typename wf::type;
    const std::size_t words = static_cast<std::size_t>(shape.hidden) * wf::per_element;
    copy_rows_kernel<W, Pack><<<grid, 256, 0, stream>>>(reinterpret_cast<const W*>(src), reinterpret_cast<W*>(dst),
                                                        cu, shape.batch, shape.seq, words);
  }
  check_launch(Pack ? "pack_hidden_states launch" : "unpack_hidden_states launch");
}
}  // namespace detail

/// Temp bytes for cu_seqlens (CUB inclusive sum over batch lengths).
[[nodiscard]] inline std::size_t cu_seqlens_temp_bytes(std::int32_t batch) {
  ops::detail::require_non_negative(batch, "gpu::cu_seqlens", "batch");
  std::size_t bytes = 0;
  detail::check(cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const std::int32_t*>(nullptr),
                                              static_cast<std::int32_t*>(nullptr), batch),
                "cu_seqlens: size query");
  return detail::align_up(bytes);
}

/// d_cu[0] = 0, d_cu[b+1] = lengths[0] + ... + lengths[b]. d_cu has batch+1 entries.
inline void cu_seqlens(const std::int32_t* d_lengths, std::int32_t batch, std::int32_t* d_cu, void* d_temp,
                       std::size_t temp_bytes, cudaStream_t stream) {
  constexpr std::string_view op = "gpu::cu_seqlens";
  const std::size_t need = cu_seqlens_temp_bytes(batch);
  detail::check(cudaMemsetAsync(d_cu, 0, sizeof(std::int32_t), stream), "cu_seqlens: memset");
  if (batch == 0) return;
  detail::check_temp(d_temp, temp_bytes, need, op);
  std::size_t bytes = temp_bytes;
  dflash::detail::forget_not_ready();  // CUB checks the last error after its launch: a caller's "busy" is not it
  detail::check(cub::DeviceScan::InclusiveSum(d_temp, bytes, d_lengths, d_cu + 1, batch, stream), "cu_seqlens: scan");
}

template <class T, ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
  requires std::is_trivially_copyable_v<T>
void pack_hidden_states(const T* d_padded, const hidden_shape& shape, const std::int32_t* d_cu, T* d_packed,
                        cudaStream_t stream, profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  (void)ops::detail::check_shape_elements<T>(shape, "gpu::pack_hidden_states");
  auto timer = prof->scope("pack_hidden_states"_key);
  detail::launch_copy_rows<true>(d_padded, d_packed, d_cu, shape, stream);
}

template <class T, ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
  requires std::is_trivially_copyable_v<T>
void unpack_hidden_states(const T* d_packed, const std::int32_t* d_cu, const hidden_shape& shape, T* d_padded,
                          cudaStream_t stream, profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  (void)ops::detail::check_shape_elements<T>(shape, "gpu::unpack_hidden_states");
  auto timer = prof->scope("unpack_hidden_states"_key);
  detail::launch_copy_rows<false>(d_packed, d_padded, d_cu, shape, stream);
}

}  // namespace dflash::ops::gpu
