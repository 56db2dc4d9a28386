// --device cuda: the postprocess ops on the GPU (dflash::ops::gpu), enqueued on
// the caller's stream; the host never waits for the device here. One step, in
// stream order on that stream:
//   1. host function: the job's host inputs -> pinned input staging
//   2. one H2D copy: pinned input staging -> the stream's device arena
//   3. doc ids, cu_seqlens, packing (from the slot's device buffer), anchors,
//      block mask: kernels and CUB scans into the arena
//   4. one D2H copy: every result (and cu_seqlens) -> pinned result staging
//   5. host function: pinned -> the caller's spans, token-count check, then(error)
// Why host functions around pinned staging: cudaMemcpyAsync from pageable
// memory waits for the stream, and the host thread may not overwrite pinned
// staging an earlier step's copy may still read; a host function runs exactly
// when the stream reaches it. Errors cannot be thrown there: a token-count
// mismatch goes to then(error), so it travels with the item; an exception
// from then() itself is stored and rethrown by the next enqueue() call.
// The only CUDA TU of the example (built when DFLASH_ENABLE_CUDA is ON).
#include "device_postprocess.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dflash/device/cuda_backend.hpp>  // the one wording of "no usable CUDA device"
#include <dflash/ops/anchors.cuh>
#include <dflash/ops/block_mask.cuh>
#include <dflash/ops/doc_ids.cuh>
#include <dflash/ops/pack_hidden_states.cuh>

namespace dflash_example {

namespace gpu = dflash::ops::gpu;
using gpu::detail::align_up;
using gpu::detail::check;
using gpu::detail::temp_alignment;

namespace {

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

layout layout_for(const dims& n) {
  constexpr std::size_t i32 = sizeof(std::int32_t);
  layout l{};
  carve out;
  l.packed = out.take(n.tokens * n.feature * sizeof(float));
  l.doc = out.take(n.tokens * i32);
  l.pos = out.take(n.tokens * i32);
  l.anchors = out.take(n.anchors * i32);
  l.kv_num = out.take(n.nq * i32);
  l.kv_idx = out.take(n.nidx * i32);
  l.full_num = out.take(n.nq * i32);
  l.full_idx = out.take(n.nidx * i32);
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

template <class T>
T* at(std::byte* base, std::size_t offset) noexcept {
  return reinterpret_cast<T*>(base + offset);
}

/// Errors from host functions, rethrown on the host by the next enqueue().
class error_sink {
 public:
  void fail(std::exception_ptr e) noexcept {
    const std::lock_guard lock(mu_);
    if (!first_) first_ = std::move(e);  // the first one is the cause; later ones are usually its echoes
  }
  void rethrow() {
    std::exception_ptr e;
    {
      const std::lock_guard lock(mu_);
      e = std::exchange(first_, nullptr);
    }
    if (e) std::rethrow_exception(e);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
};

/// Enqueues f (moved to the heap) as a host function; the host function deletes it.
/// Note: CUDA skips host functions once the context has a sticky error, so then
/// the closure leaks; the pipeline reports that error from the stream itself.
template <class F>
void CUDART_CB run_closure(void* p) noexcept {
  const std::unique_ptr<F> f(static_cast<F*>(p));
  (*f)();
}
template <class F>
void launch_host(cudaStream_t s, F f) {
  auto owned = std::make_unique<F>(std::move(f));
  check(cudaLaunchHostFunc(s, &run_closure<F>, owned.get()), "device_postprocess: cudaLaunchHostFunc");
  (void)owned.release();
}

/// Step 1: the host inputs, packed on the host thread, written to pinned
/// staging when the stream gets here (after the previous step's H2D copy).
struct fill_inputs {
  std::byte* staging;
  std::vector<std::byte> bytes;
  void operator()() noexcept { std::memcpy(staging, bytes.data(), bytes.size()); }
};

/// Step 5: pinned results -> the caller's spans, then `then`. Runs before the
/// next step's D2H copy (stream order), so the staging is not yet reused.
struct deliver {
  const std::byte* staged;
  layout l;
  dims n;
  device_output out;
  std::function<void(std::exception_ptr)> then;
  std::int32_t expected_tokens;
  error_sink* errors;

  template <class T>
  void copy(T* dst, std::size_t offset, std::size_t count) const noexcept {
    if (count) std::memcpy(dst, staged + offset, count * sizeof(T));
  }
  void operator()() noexcept {
    try {
      copy(out.hidden.data(), l.packed, n.tokens * n.feature);
      copy(out.doc_ids.data(), l.doc, n.tokens);
      copy(out.pos.data(), l.pos, n.tokens);
      copy(out.anchors.data(), l.anchors, n.anchors);
      copy(out.keep.data(), l.keep, n.anchors);
      copy(out.mask.kv_num_blocks, l.kv_num, n.nq);
      copy(out.mask.kv_indices, l.kv_idx, n.nidx);
      copy(out.mask.full_kv_num_blocks, l.full_num, n.nq);
      copy(out.mask.full_kv_indices, l.full_idx, n.nidx);
      std::int32_t packed = 0;
      std::memcpy(&packed, staged + l.cu + n.docs * sizeof(std::int32_t), sizeof packed);
      std::exception_ptr wrong;  // the item is wrong: its consumer is told, with the item
      if (packed != expected_tokens)
        wrong = std::make_exception_ptr(std::runtime_error("device_postprocess: packing produced " +
                                                           std::to_string(packed) + " tokens, expected " +
                                                           std::to_string(expected_tokens)));
      if (then) then(wrong);
    } catch (...) {
      errors->fail(std::current_exception());
    }
  }
};

/// Pinned host memory that only grows. cudaFreeHost may synchronise the
/// device, so outgrown buffers are kept (earlier steps may still use them)
/// and freed with the rest in the destructor; sizing by the step's upper
/// bound makes growth rare.
struct pinned {
  std::byte* p = nullptr;
  std::size_t cap = 0;
  void ensure(std::size_t need, std::size_t want, std::vector<void*>& retired) {
    if (need <= cap && p) return;
    void* q = nullptr;
    check(cudaMallocHost(&q, std::max<std::size_t>(want, 1)), "device_postprocess: cudaMallocHost");
    if (p) retired.push_back(p);
    p = static_cast<std::byte*>(q);
    cap = std::max<std::size_t>(want, 1);
  }
};

/// Everything one stream's steps reuse. Only that stream touches it (one
/// thread enqueues per stream), so reuse is ordered by the stream.
struct stream_state {
  std::byte* arena_raw = nullptr;  // cudaMallocAsync on the stream; grown with cudaFreeAsync + cudaMallocAsync
  std::byte* arena = nullptr;      // arena_raw rounded up to 256 bytes
  std::size_t arena_cap = 0;
  pinned in, out;
  std::vector<void*> retired;
  cudaEvent_t done = nullptr;  // recorded after each step: what the destructor waits for

  stream_state() { check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "device_postprocess: cudaEventCreate"); }
  stream_state(const stream_state&) = delete;
  stream_state& operator=(const stream_state&) = delete;
  ~stream_state() {
    (void)cudaEventSynchronize(done);  // the last step's work and host functions (the pipeline already synced)
    if (arena_raw) (void)cudaFree(arena_raw);  // async-allocated: no implicit sync, its work is done
    for (void* p : retired) (void)cudaFreeHost(p);
    if (in.p) (void)cudaFreeHost(in.p);
    if (out.p) (void)cudaFreeHost(out.p);
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

struct device_postprocessor::impl {
  error_sink errors;  // declared first, destroyed last: ~stream_state waits for the host functions using it
  std::mutex mu;      // guards `streams` (the map, not the states: one thread per stream)
  std::unordered_map<cudaStream_t, std::unique_ptr<stream_state>> streams;

  stream_state& state(cudaStream_t s) {
    const std::lock_guard lock(mu);
    auto& st = streams[s];
    if (!st) st = std::make_unique<stream_state>();
    return *st;
  }
};

std::string device_postprocessor::probe() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return dflash::detail::no_cuda_device_reason(e);
  if (n == 0) return "no CUDA device found";
  int dev = 0, pools = 0;  // enqueue() grows its buffers with cudaMallocAsync
  e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev);
  if (e != cudaSuccess) return std::string("CUDA device query failed: ") + cudaGetErrorString(e);
  if (!pools) return "the CUDA device does not support stream-ordered allocation (cudaMallocAsync)";
  return {};
}

device_postprocessor::device_postprocessor() {
  if (const std::string why = probe(); !why.empty()) throw std::runtime_error(why);
  impl_ = std::make_unique<impl>();
}
device_postprocessor::~device_postprocessor() = default;

void device_postprocessor::rethrow_pending() { impl_->errors.rethrow(); }

void device_postprocessor::enqueue(const device_job& job, const device_output& out,
                                   std::function<void(std::exception_ptr)> then,
                                   void* stream) {
  impl& d = *impl_;
  d.errors.rethrow();  // an earlier step's host function failed
  const auto s = static_cast<cudaStream_t>(stream);
  validate(job);
  const dims n = dims_for(job, job.tokens);
  validate(out, n);
  const layout l = layout_for(n);
  stream_state& st = d.state(s);

  // A recycled stream handle must not overtake the previous owner's last step.
  check(cudaStreamWaitEvent(s, st.done, 0), "device_postprocess: cudaStreamWaitEvent");
  try {
    // Buffers only grow, sized for the largest step these shapes allow (all
    // of docs * seq packed), so varying token counts do not reallocate.
    if (l.total > st.arena_cap || l.in_bytes > st.in.cap || l.out_bytes > st.out.cap) {
      const std::int64_t most = std::min<std::int64_t>(std::int64_t{job.docs} * job.seq, dflash::ops::anchor_max_seq);
      const layout big = layout_for(dims_for(job, static_cast<std::int32_t>(std::max<std::int64_t>(most, job.tokens))));
      st.ensure_arena(l.total, std::max(big.total, l.total), s);
      st.in.ensure(l.in_bytes, std::max(big.in_bytes, l.in_bytes), st.retired);
      st.out.ensure(l.out_bytes, std::max(big.out_bytes, l.out_bytes), st.retired);
    }
    std::byte* const a = st.arena;

    // 1-2. Inputs: seq_lens = {tokens}, lengths, the packed loss mask.
    std::vector<std::byte> in(l.in_bytes);
    std::memcpy(in.data() + l.seq_len, &job.tokens, sizeof(std::int32_t));
    if (n.docs) std::memcpy(in.data() + l.lengths, job.lengths.data(), n.docs * sizeof(std::int32_t));
    if (n.tokens) std::memcpy(in.data() + l.loss, job.loss_mask.data(), n.tokens);
    launch_host(s, fill_inputs{st.in.p, std::move(in)});
    check(cudaMemcpyAsync(a + l.in, st.in.p, l.in_bytes, cudaMemcpyHostToDevice, s), "device_postprocess: upload");
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
    const dflash::ops::block_sparse_view mask{at<std::int32_t>(a, l.kv_num), at<std::int32_t>(a, l.kv_idx),
                                              at<std::int32_t>(a, l.full_num), at<std::int32_t>(a, l.full_idx)};
    if (n.nidx) {  // unused index entries are 0, as in the host form
      check(cudaMemsetAsync(mask.kv_indices, 0, n.nidx * sizeof(std::int32_t), s), "device_postprocess: memset");
      check(cudaMemsetAsync(mask.full_kv_indices, 0, n.nidx * sizeof(std::int32_t), s), "device_postprocess: memset");
    }
    gpu::build_block_mask(job.mask, job.tile, pos, anchors, keep, mask, s);

    // 4-5. Results -> pinned (one copy), then -> the caller's spans and `then`.
    check(cudaMemcpyAsync(st.out.p, a, l.out_bytes, cudaMemcpyDeviceToHost, s), "device_postprocess: copy back");
    launch_host(s, deliver{st.out.p, l, n, out, std::move(then), job.tokens, &d.errors});
  } catch (...) {
    (void)cudaEventRecord(st.done, s);  // whatever was enqueued: the destructor still waits for it
    throw;
  }
  check(cudaEventRecord(st.done, s), "device_postprocess: cudaEventRecord");
}

}  // namespace dflash_example
