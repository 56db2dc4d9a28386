// --device cuda: the postprocess ops on the GPU (dflash::ops::gpu), enqueued on
// the caller's stream; the host never waits for the device here. One step:
//   1. this thread: the job's host inputs -> the step's pinned staging block
//   2. one H2D copy: the block's inputs -> the stream's device arena
//   3. doc ids, cu_seqlens, packing (from the slot's device buffer), anchors,
//      block mask: kernels and CUB scans into the arena
//   4. one D2H copy: every result (and cu_seqlens) -> the same block
// and the block travels with the item as a device_result: the consumer's host
// stage unpacks it (pinned -> the item's vectors, token-count check) after the
// pipeline made it wait for the item's event. No CUDA host functions: CUDA runs
// them on one thread with the stream stalled behind them, and the stage's
// device time (postprocess.gpu) would count their CPU time.
// Pinned blocks come from a bounded dflash::pinned_pool: a block is the step's
// own from its inputs to its unpacking, so neither the host thread nor a later
// step can overwrite what a copy still reads; the block is marked used on the
// stream after its step's last copy, and the pool hands it out again only once
// that copy completed. No cudaMallocHost / cudaFreeHost per step once warm.
// enqueue_rows (--hs-link rows) reads a batch of the hs_rows ring instead: a
// gather kernel copies its rows (the count read on the device) into the fixed
// --seq-len layout, padding the rest; document ids and positions come from two
// CUB scans over the rows' document boundaries (no lengths: the host never
// knew them); anchors among the counted tokens and the block mask as above;
// tokens, loss mask and the count travel back with the results.
// Built when DFLASH_ENABLE_CUDA is ON, with target_forward_gpu.cu (the target model's forward).
#include "device_postprocess.hpp"
#include "hs_staging.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dflash/device/cuda_backend.hpp>
#include <dflash/device/cuda_check.hpp>
#include <dflash/device/pinned_pool.hpp>
#include <dflash/ops/anchors.cuh>
#include <dflash/ops/block_mask.cuh>
#include <dflash/ops/doc_ids.cuh>
#include <dflash/ops/pack_hidden_states.cuh>

#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

namespace dflash_example {

namespace gpu = dflash::ops::gpu;
using gpu::detail::align_up;
using gpu::detail::check;
using gpu::detail::temp_alignment;

namespace postprocess_detail {  // named: device_result::state holds these

/// Element counts of one step (or of its upper bound, to size buffers once).
struct dims {
  std::size_t docs, tokens, feature, anchors, nq, nidx;
};

dims dims_for(const device_job& job, std::int32_t tokens) {
  dflash::ops::block_mask_params p = job.mask;
  p.context_len = tokens;
  const std::int32_t nqt = dflash::ops::tiles_for(p.num_queries(), job.tile.q);
  const std::int32_t nkt = dflash::ops::tiles_for(p.num_kv(), job.tile.kv);
  const auto nq = static_cast<std::size_t>(nqt);
  return {static_cast<std::size_t>(job.docs), static_cast<std::size_t>(tokens), static_cast<std::size_t>(job.feature),
          static_cast<std::size_t>(job.anchors.num_anchors), nq, nq * static_cast<std::size_t>(nkt)};
}

/// Byte offsets. Results sit at the same offsets in the device arena and the
/// pinned result staging (one D2H copy of [0, out_bytes)); inputs sit at
/// `in + x` in the arena and at `x` in the pinned input staging (one H2D copy).
/// Every piece is 256-byte aligned (the ops' temp storage requires it).
struct layout {
  std::size_t packed, doc, pos, anchors, kv_num, kv_idx, full_num, full_idx, cu, keep, out_bytes;
  std::size_t seq_len, lengths, loss, in_bytes;
  std::size_t in, temp, temp_bytes, total;
  // rows_layout_for only: results (tokens, loss mask, the count) and scratch (flags, starts)
  std::size_t tokens = 0, loss_out = 0, count = 0, flags = 0, start_at = 0, start = 0;
};

class carve {
 public:
  std::size_t take(std::size_t bytes) noexcept {
    const std::size_t at = used;
    used += align_up(bytes);
    return at;
  }
  std::size_t used = 0;
};

/// The results both kinds of step have: hidden states, documents, positions, anchors, the mask's arrays.
void carve_results(carve& out, const dims& n, layout& l) {
  constexpr std::size_t i32 = sizeof(std::int32_t);
  l.packed = out.take(n.tokens * n.feature * sizeof(float));
  l.doc = out.take(n.tokens * i32);
  l.pos = out.take(n.tokens * i32);
  l.anchors = out.take(n.anchors * i32);
  l.kv_num = out.take(n.nq * i32);
  l.kv_idx = out.take(n.nidx * i32);
  l.full_num = out.take(n.nq * i32);
  l.full_idx = out.take(n.nidx * i32);
}

layout layout_for(const dims& n) {
  constexpr std::size_t i32 = sizeof(std::int32_t);
  layout l{};
  carve out;
  carve_results(out, n, l);
  l.cu = out.take((n.docs + 1) * i32);  // read back for cu[docs], the packed token count
  l.keep = out.take(n.anchors);
  l.out_bytes = out.used;
  carve in;
  l.seq_len = in.take(i32);
  l.lengths = in.take(n.docs * i32);
  l.loss = in.take(n.tokens);
  l.in_bytes = in.used;
  const auto docs = static_cast<std::int32_t>(n.docs), tokens = static_cast<std::int32_t>(n.tokens);
  // One temp allocation, reused by each op in turn: the stream orders them.
  l.temp_bytes = std::max({gpu::doc_ids_temp_bytes(docs, tokens), gpu::cu_seqlens_temp_bytes(docs),
                           gpu::anchors_temp_bytes(1, tokens), std::size_t{1}});
  l.in = out.take(l.in_bytes);
  l.temp = out.take(l.temp_bytes);
  l.total = out.used;
  return l;
}

/// A rows job's layout: S = seq_len tokens, no documents known ahead, no
/// inputs (the rows are on the device already).
layout rows_layout_for(const rows_job& job, dims& n) {
  constexpr std::size_t i32 = sizeof(std::int32_t);
  const std::int32_t nqt = dflash::ops::tiles_for(job.mask.num_queries(), job.tile.q);
  const std::int32_t nkt = dflash::ops::tiles_for(job.mask.num_kv(), job.tile.kv);
  n = {0, static_cast<std::size_t>(job.seq_len), static_cast<std::size_t>(job.feature),
       static_cast<std::size_t>(job.anchors.num_anchors), static_cast<std::size_t>(nqt),
       static_cast<std::size_t>(nqt) * static_cast<std::size_t>(nkt)};
  layout l{};
  carve out;
  carve_results(out, n, l);
  l.keep = out.take(n.anchors);
  l.tokens = out.take(n.tokens * i32);
  l.loss_out = out.take(n.tokens);
  l.count = out.take(i32);  // also the anchors' seq_lens: {count}
  l.out_bytes = out.used;
  l.flags = out.take(n.tokens * i32);
  l.start_at = out.take(n.tokens * i32);
  l.start = out.take(n.tokens * i32);
  const auto S = static_cast<int>(job.seq_len);
  std::size_t sum_bytes = 0, max_bytes = 0;
  check(cub::DeviceScan::InclusiveSum(nullptr, sum_bytes, static_cast<const std::int32_t*>(nullptr),
                                      static_cast<std::int32_t*>(nullptr), S),
        "device_postprocess: InclusiveSum (size query)");
  check(cub::DeviceScan::InclusiveScan(nullptr, max_bytes, static_cast<const std::int32_t*>(nullptr),
                                       static_cast<std::int32_t*>(nullptr), cuda::maximum<std::int32_t>{}, S),
        "device_postprocess: InclusiveScan (size query)");
  l.temp_bytes = std::max({sum_bytes, max_bytes, gpu::anchors_temp_bytes(1, job.seq_len), std::size_t{1}});
  l.in = l.in_bytes = 0;
  l.temp = out.take(l.temp_bytes);
  l.total = out.used;
  return l;
}

template <class T>
T* at(std::byte* base, std::size_t offset) noexcept {
  return reinterpret_cast<T*>(base + offset);
}

// A step's pinned block: results at [0, out_bytes) (the D2H copy's layout), inputs from
// inputs_at(l) on (the H2D copy's source).
[[nodiscard]] inline std::size_t inputs_at(const layout& l) noexcept { return align_up(l.out_bytes); }
[[nodiscard]] inline std::size_t block_bytes(const layout& l) noexcept { return inputs_at(l) + l.in_bytes; }

using pinned_pool = dflash::pinned_pool<dflash::cuda_backend>;

/// The postprocessor's pinned blocks (hs_staging.hpp: one bounded pool, one block size per
/// run) over a backend of its own. A block's event is made on the device current when it is
/// allocated: the postprocess worker's (one device per postprocessor).
struct staging {
  explicit staging(std::size_t blocks) : blocks(blocks) {}
  dflash::cuda_backend backend;  // before `blocks`: the pool is destroyed first
  hs_staging<dflash::cuda_backend> blocks;
  [[nodiscard]] pinned_pool::block take(std::size_t bytes) { return blocks.take(backend, bytes); }
  [[nodiscard]] std::optional<dflash::pinned_pool_stats> stats() const { return blocks.stats(); }
};

}  // namespace postprocess_detail

using namespace postprocess_detail;

namespace {

/// The device arena one stream's steps reuse. Only that stream touches it
/// (one thread enqueues per stream), so reuse is ordered by the stream.
struct stream_state {
  std::byte* arena_raw = nullptr;  // cudaMallocAsync on the stream; grown with cudaFreeAsync + cudaMallocAsync
  std::byte* arena = nullptr;      // arena_raw rounded up to 256 bytes
  std::size_t arena_cap = 0;
  cudaEvent_t done = nullptr;  // recorded after each step: what the destructor waits for

  stream_state() { check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "device_postprocess: cudaEventCreate"); }
  stream_state(const stream_state&) = delete;
  stream_state& operator=(const stream_state&) = delete;
  ~stream_state() {
    (void)cudaEventSynchronize(done);  // the last step's work (the pipeline already synced)
    if (arena_raw) (void)cudaFree(arena_raw);  // async-allocated: no implicit sync, its work is done
    (void)cudaEventDestroy(done);
  }

  void ensure_arena(std::size_t need, std::size_t want, cudaStream_t s) {
    if (need <= arena_cap && arena_raw) return;
    if (arena_raw) check(cudaFreeAsync(arena_raw, s), "device_postprocess: cudaFreeAsync");
    arena_raw = arena = nullptr;
    arena_cap = 0;
    void* p = nullptr;
    check(cudaMallocAsync(&p, want + temp_alignment, s), "device_postprocess: cudaMallocAsync");
    arena_raw = static_cast<std::byte*>(p);
    arena = arena_raw + (align_up(reinterpret_cast<std::uintptr_t>(p)) - reinterpret_cast<std::uintptr_t>(p));
    arena_cap = want;
  }
};

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("device_postprocess: " + what);
}

constexpr unsigned kThreads = 256;

/// Row i < count of the batch, or padding: token, loss, and where a document
/// piece starts (flags[i] = 1 at i == 0, at a row whose document differs from
/// the row before it, and where the padding begins; start_at[i] = i there, else 0).
__global__ void gather_rows_kernel(dflash::row_batch<hs_token, float> b, std::int32_t S, std::int32_t* tokens,
                                   std::uint8_t* loss, std::int32_t* flags, std::int32_t* start_at, std::int32_t* count) {
  const auto n = static_cast<std::int32_t>(b.count());
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < S; i += std::int64_t{gridDim.x} * blockDim.x) {
    const auto u = static_cast<std::uint32_t>(i);
    bool starts = i == 0;
    if (i < n) {
      const hs_token r = b[u];
      tokens[i] = r.token;
      loss[i] = static_cast<std::uint8_t>(r.loss);
      starts = starts || r.doc != b[u - 1].doc;
    } else {
      tokens[i] = 0;
      loss[i] = 0;
      starts = starts || i == n;
    }
    flags[i] = starts ? 1 : 0;
    start_at[i] = starts ? static_cast<std::int32_t>(i) : 0;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *count = n;
}

/// hidden[i * F + k] = row i's payload, 0 past the count.
__global__ void gather_hidden_kernel(dflash::row_batch<hs_token, float> b, std::int32_t S, std::int32_t F,
                                     float* hidden) {
  const auto n = static_cast<std::int64_t>(b.count());
  const std::int64_t total = std::int64_t{S} * F;
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < total;
       e += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t i = e / F, k = e % F;
    hidden[e] = i < n ? b.payload(static_cast<std::uint32_t>(i))[k] : 0.0f;
  }
}

/// doc = (starts so far) - 1, pos = i - the piece's start: doc_ids' numbering over the pieces.
__global__ void doc_pos_kernel(std::int32_t S, const std::int32_t* start, std::int32_t* doc, std::int32_t* pos) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < S; i += std::int64_t{gridDim.x} * blockDim.x) {
    doc[i] -= 1;
    pos[i] = static_cast<std::int32_t>(i) - start[i];
  }
}

unsigned blocks_for(std::int64_t items) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((items + kThreads - 1) / kThreads, 1, 1 << 16));
}

/// Host-side checks: a bad job would make the kernels read or write out of bounds.
void validate(const device_job& job) {
  constexpr std::string_view op = "device_postprocess";
  require(job.docs >= 0 && job.seq >= 0 && job.feature >= 0 && job.tokens >= 0, "negative size");
  require(job.padded != nullptr || job.tokens == 0, "padded is null");
  require(job.tile.q > 0 && job.tile.kv > 0, "tile sizes must be positive");
  dflash::ops::detail::check_mask_params(job.mask, op);
  dflash::ops::detail::check_anchor_args(job.anchors, 1, job.tokens, op);
  require(job.lengths.size() == static_cast<std::size_t>(job.docs),
          "lengths has " + std::to_string(job.lengths.size()) + " entries, docs = " + std::to_string(job.docs));
  std::int64_t sum = 0;
  for (const std::int32_t len : job.lengths) {
    require(len >= 0 && len <= job.seq, "a document length is outside [0, seq]");
    sum += len;
  }
  require(sum == job.tokens, "sum(lengths) = " + std::to_string(sum) + " but tokens = " + std::to_string(job.tokens));
  require(job.loss_mask.size() == static_cast<std::size_t>(job.tokens), "loss_mask size != tokens");
  require(job.mask.context_len == job.tokens, "mask.context_len != tokens");
  require(job.anchors.num_anchors == job.mask.num_blocks, "anchors.num_anchors != mask.num_blocks");
}

void validate(const device_output& out, const dims& n) {
  require(out.hidden.size() == n.tokens * n.feature, "out.hidden size != tokens * feature");
  require(out.doc_ids.size() == n.tokens && out.pos.size() == n.tokens, "out.doc_ids / out.pos size != tokens");
  require(out.anchors.size() == n.anchors && out.keep.size() == n.anchors, "out.anchors / out.keep size != num_anchors");
  require(n.nq == 0 || (out.mask.kv_num_blocks && out.mask.kv_indices && out.mask.full_kv_num_blocks &&
                        out.mask.full_kv_indices),
          "out.mask has a null array");
}

}  // namespace

struct device_result::state {
  std::shared_ptr<staging> pool;  // keeps the pool alive while the block is out (declared first: freed last)
  pinned_pool::block block;       // goes back when the state is destroyed, reused after its marked copy
  layout l{};
  dims n{};
  std::int32_t expected_tokens = 0;
  bool rows = false;  // a rows_job's results: tokens, loss mask and count too, no packing check
  state() = default;
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  [[nodiscard]] std::byte* bytes() const noexcept { return static_cast<std::byte*>(block.data()); }
};

device_result::device_result() noexcept = default;
device_result::device_result(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
device_result::device_result(device_result&&) noexcept = default;
device_result& device_result::operator=(device_result&&) noexcept = default;
device_result::~device_result() = default;

void device_result::unpack(const device_output& out) const {
  if (!s_) throw std::logic_error("device_result::unpack: empty result");
  const dims& n = s_->n;
  const layout& l = s_->l;
  validate(out, n);
  const std::byte* staged = s_->bytes();
  auto copy = [staged](auto* dst, std::size_t offset, std::size_t count) {
    if (count) std::memcpy(dst, staged + offset, count * sizeof(*dst));
  };
  copy(out.hidden.data(), l.packed, n.tokens * n.feature);
  copy(out.doc_ids.data(), l.doc, n.tokens);
  copy(out.pos.data(), l.pos, n.tokens);
  copy(out.anchors.data(), l.anchors, n.anchors);
  copy(out.keep.data(), l.keep, n.anchors);
  copy(out.mask.kv_num_blocks, l.kv_num, n.nq);
  copy(out.mask.kv_indices, l.kv_idx, n.nidx);
  copy(out.mask.full_kv_num_blocks, l.full_num, n.nq);
  copy(out.mask.full_kv_indices, l.full_idx, n.nidx);
  if (s_->rows) {
    require(out.tokens.size() == n.tokens && out.loss_mask.size() == n.tokens && out.count,
            "a rows result needs tokens and loss_mask of seq_len entries and a count");
    copy(out.tokens.data(), l.tokens, n.tokens);
    copy(out.loss_mask.data(), l.loss_out, n.tokens);
    copy(out.count, l.count, 1);
    if (*out.count < 0 || static_cast<std::size_t>(*out.count) > n.tokens)
      throw std::runtime_error("device_postprocess: a batch of " + std::to_string(*out.count) + " rows, for a layout of " +
                               std::to_string(n.tokens));
    return;
  }
  std::int32_t packed = 0;
  std::memcpy(&packed, staged + l.cu + n.docs * sizeof(std::int32_t), sizeof packed);
  if (packed != s_->expected_tokens)
    throw std::runtime_error("device_postprocess: packing produced " + std::to_string(packed) + " tokens, expected " +
                             std::to_string(s_->expected_tokens));
}

struct device_postprocessor::impl {
  impl(std::size_t staging_blocks, std::int32_t max_tokens)
      : pool(std::make_shared<staging>(staging_blocks)), max_tokens(max_tokens) {}
  std::shared_ptr<staging> pool;  // results in flight share it
  std::int32_t max_tokens;        // the most packed tokens a step has: sizes every block
  std::mutex mu;  // guards `streams` (the map, not the states: one thread per stream)
  std::unordered_map<cudaStream_t, std::unique_ptr<stream_state>> streams;

  stream_state& state(cudaStream_t s) {
    const std::lock_guard lock(mu);
    auto& st = streams[s];
    if (!st) st = std::make_unique<stream_state>();
    return *st;
  }

  /// A step's results: its layout and a pinned block from the pool.
  std::unique_ptr<device_result::state> new_result(const layout& l, const dims& n, std::size_t block) {
    auto r = std::make_unique<device_result::state>();
    r->pool = pool;
    r->l = l;
    r->n = n;
    r->block = pool->take(block);
    return r;
  }

  /// One step on stream s: `enqueue(arena)` enqueues its work into the
  /// stream's arena (grown to `want` bytes if smaller than the layout), then
  /// every result is copied into the block, once. Whatever was enqueued is
  /// waited for before the block is reused or the arena freed, also when a
  /// call throws.
  template <class Enqueue>
  device_result run_step(std::unique_ptr<device_result::state> result, cudaStream_t s, std::size_t want,
                         Enqueue&& enqueue) {
    stream_state& st = state(s);
    const layout& l = result->l;
    // A recycled stream handle must not overtake the previous owner's last step.
    check(cudaStreamWaitEvent(s, st.done, 0), "device_postprocess: cudaStreamWaitEvent");
    try {
      if (l.total > st.arena_cap) st.ensure_arena(l.total, std::max(want, l.total), s);
      enqueue(st.arena);
      // Every result -> the block, one copy; the block is free again once it completed.
      check(cudaMemcpyAsync(result->bytes(), st.arena, l.out_bytes, cudaMemcpyDeviceToHost, s),
            "device_postprocess: copy back");
      result->block.used_on(s);  // the block's last device use: reused only after this copy
    } catch (...) {
      try {
        result->block.used_on(s);
      } catch (...) {  // the stream failed; used_on waited for what it still ran
      }
      (void)cudaEventRecord(st.done, s);
      throw;
    }
    check(cudaEventRecord(st.done, s), "device_postprocess: cudaEventRecord");
    return device_result(std::move(result));
  }
};

namespace {
/// The block mask into the arena (build_block_mask writes every index entry:
/// unused ones as 0, as the host form has them).
void build_mask(const dflash::ops::block_mask_params& p, dflash::ops::tile_shape t, std::byte* a, const layout& l,
                const std::int32_t* pos, const std::int32_t* anchors, const std::uint8_t* keep, cudaStream_t s) {
  const dflash::ops::block_sparse_view mask{at<std::int32_t>(a, l.kv_num), at<std::int32_t>(a, l.kv_idx),
                                            at<std::int32_t>(a, l.full_num), at<std::int32_t>(a, l.full_idx)};
  gpu::build_block_mask(p, t, pos, anchors, keep, mask, s);
}
}  // namespace

std::string device_postprocessor::probe() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return dflash::no_cuda_device_reason(e);
  if (n == 0) return "no CUDA device found";
  int dev = 0, pools = 0;  // enqueue() grows its buffers with cudaMallocAsync
  e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev);
  if (e != cudaSuccess) return std::string("CUDA device query failed: ") + cudaGetErrorString(e);
  if (!pools) return "the CUDA device does not support stream-ordered allocation (cudaMallocAsync)";
  return {};
}

device_postprocessor::device_postprocessor(std::size_t staging_blocks, std::int32_t max_tokens) {
  if (max_tokens < 1) throw std::invalid_argument("device_postprocessor: max_tokens must be positive");
  if (const std::string why = probe(); !why.empty()) throw std::runtime_error(why);
  impl_ = std::make_unique<impl>(staging_blocks, max_tokens);
}

std::optional<dflash::pinned_pool_stats> device_postprocessor::staging_stats() const {
  return impl_->pool->stats();
}
device_postprocessor::~device_postprocessor() = default;

device_result device_postprocessor::enqueue(const device_job& job, void* stream) {
  impl& d = *impl_;
  const auto s = static_cast<cudaStream_t>(stream);
  validate(job);
  const dims n = dims_for(job, job.tokens);
  const layout l = layout_for(n);
  // Buffers are sized for the largest step these shapes allow (all of
  // docs * seq packed), so varying token counts do not reallocate.
  const std::int64_t most = std::min<std::int64_t>(std::int64_t{job.docs} * job.seq, dflash::ops::anchor_max_seq);
  const layout big = layout_for(dims_for(job, static_cast<std::int32_t>(std::max<std::int64_t>(most, job.tokens))));

  // The block: one size for every step of the run, that of a step of max_tokens tokens in as
  // many documents (a document has a token at least), so the pool reuses every block.
  dims largest = dims_for(job, std::max(job.tokens, d.max_tokens));
  largest.docs = std::max(largest.docs, largest.tokens);
  const std::size_t block = block_bytes(layout_for(largest));
  require(block_bytes(l) <= block, "a step of " + std::to_string(job.tokens) + " tokens in " +
                                       std::to_string(job.docs) + " documents outgrows the staging block");
  auto result = d.new_result(l, n, block);
  result->expected_tokens = job.tokens;

  // 1. Inputs, written by this thread into the step's own block (no copy reads
  //    it yet): seq_lens = {tokens}, lengths, the packed loss mask.
  std::byte* const in = result->bytes() + inputs_at(l);
  std::memcpy(in + l.seq_len, &job.tokens, sizeof(std::int32_t));
  if (n.docs) std::memcpy(in + l.lengths, job.lengths.data(), n.docs * sizeof(std::int32_t));
  if (n.tokens) std::memcpy(in + l.loss, job.loss_mask.data(), n.tokens);

  return d.run_step(std::move(result), s, std::max(big.total, l.total), [&](std::byte* a) {
    // 2. One upload of the inputs.
    check(cudaMemcpyAsync(a + l.in, in, l.in_bytes, cudaMemcpyHostToDevice, s), "device_postprocess: upload");
    const auto* lengths = at<const std::int32_t>(a, l.in + l.lengths);

    // 3. The ops, as the host path runs them.
    void* temp = a + l.temp;
    auto* doc = at<std::int32_t>(a, l.doc);
    auto* pos = at<std::int32_t>(a, l.pos);
    auto* cu = at<std::int32_t>(a, l.cu);
    auto* anchors = at<std::int32_t>(a, l.anchors);
    auto* keep = at<std::uint8_t>(a, l.keep);
    gpu::doc_ids(lengths, job.docs, doc, pos, job.tokens, temp, l.temp_bytes, s);
    gpu::cu_seqlens(lengths, job.docs, cu, temp, l.temp_bytes, s);
    gpu::pack_hidden_states(job.padded, dflash::ops::hidden_shape{job.docs, job.seq, job.feature}, cu,
                            at<float>(a, l.packed), s);
    gpu::select_anchors(job.anchors, 1, job.tokens, at<const std::int32_t>(a, l.in + l.seq_len),
                        at<const std::uint8_t>(a, l.in + l.loss), doc, anchors, keep, temp, l.temp_bytes, s);
    build_mask(job.mask, job.tile, a, l, pos, anchors, keep, s);
  });
}

device_result device_postprocessor::enqueue_rows(const rows_job& job, void* stream) {
  impl& d = *impl_;
  const auto s = static_cast<cudaStream_t>(stream);
  constexpr std::string_view op = "device_postprocess";
  require(job.seq_len >= 1 && job.feature >= 1, "seq_len and feature must be positive");
  require(job.batch.width == static_cast<std::uint32_t>(job.feature),
          "the ring's rows carry " + std::to_string(job.batch.width) + " floats, feature = " + std::to_string(job.feature));
  require(job.batch.data && job.batch.payloads && job.batch.ticket, "the batch has a null array");
  require(job.tile.q > 0 && job.tile.kv > 0, "tile sizes must be positive");
  dflash::ops::detail::check_mask_params(job.mask, op);
  dflash::ops::detail::check_anchor_args(job.anchors, 1, job.seq_len, op);
  require(job.mask.context_len == job.seq_len, "mask.context_len != seq_len");
  require(job.anchors.num_anchors == job.mask.num_blocks, "anchors.num_anchors != mask.num_blocks");
  dims n{};
  const layout l = rows_layout_for(job, n);  // one shape per run: buffers are reused as they are
  auto result = d.new_result(l, n, block_bytes(l));
  result->rows = true;
  return d.run_step(std::move(result), s, l.total, [&](std::byte* a) {
    const std::int32_t S = job.seq_len, F = job.feature;
    auto* doc = at<std::int32_t>(a, l.doc);
    auto* pos = at<std::int32_t>(a, l.pos);
    auto* flags = at<std::int32_t>(a, l.flags);
    auto* start_at = at<std::int32_t>(a, l.start_at);
    auto* start = at<std::int32_t>(a, l.start);
    auto* count = at<std::int32_t>(a, l.count);
    auto* loss = at<std::uint8_t>(a, l.loss_out);
    auto* anchors = at<std::int32_t>(a, l.anchors);
    auto* keep = at<std::uint8_t>(a, l.keep);
    void* temp = a + l.temp;

    // 1. The batch's rows into the layout (the count read here, on the device).
    gather_rows_kernel<<<blocks_for(S), kThreads, 0, s>>>(job.batch, S, at<std::int32_t>(a, l.tokens), loss, flags,
                                                          start_at, count);
    gpu::detail::check_launch("device_postprocess: gather rows");
    gather_hidden_kernel<<<blocks_for(std::int64_t{S} * F), kThreads, 0, s>>>(job.batch, S, F, at<float>(a, l.packed));
    gpu::detail::check_launch("device_postprocess: gather hidden states");
    // 2. Document pieces: their count so far (ids) and where each began (positions).
    std::size_t bytes = l.temp_bytes;
    check(cub::DeviceScan::InclusiveSum(temp, bytes, flags, doc, S, s), "device_postprocess: InclusiveSum");
    bytes = l.temp_bytes;
    check(cub::DeviceScan::InclusiveScan(temp, bytes, start_at, start, cuda::maximum<std::int32_t>{}, S, s),
          "device_postprocess: InclusiveScan");
    doc_pos_kernel<<<blocks_for(S), kThreads, 0, s>>>(S, start, doc, pos);
    gpu::detail::check_launch("device_postprocess: doc ids");
    // 3. Anchors among the counted tokens, the block mask.
    gpu::select_anchors(job.anchors, 1, S, count, loss, doc, anchors, keep, temp, l.temp_bytes, s);
    build_mask(job.mask, job.tile, a, l, pos, anchors, keep, s);
  });
}

}  // namespace dflash_example
