// --device cuda: the postprocess ops on the GPU with dflash::ops::gpu, on one
// stream, with caller-owned temp storage; results copied back to the host.
// The only CUDA TU of the example (built when DFLASH_ENABLE_CUDA is ON).
#include "device_postprocess.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include <dflash/ops/anchors.cuh>
#include <dflash/ops/batched_readback.cuh>
#include <dflash/ops/block_mask.cuh>
#include <dflash/ops/doc_ids.cuh>
#include <dflash/ops/pack_hidden_states.cuh>

namespace dflash_example {

namespace gpu = dflash::ops::gpu;
using gpu::detail::check;

namespace {

/// Device array that only grows (one allocation per size high-water mark).
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { cudaFree(p_); }
  T* ensure(std::size_t n) {
    if (n > n_ || p_ == nullptr) {
      cudaFree(p_);
      p_ = nullptr;
      const std::size_t k = std::max<std::size_t>(n, 1);
      check(cudaMalloc(reinterpret_cast<void**>(&p_), k * sizeof(T)), "device_postprocess: cudaMalloc");
      n_ = k;
    }
    return p_;
  }
  [[nodiscard]] std::size_t bytes() const noexcept { return n_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
void upload(T* dst, const T* src, std::size_t n, cudaStream_t s) {
  if (n) check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, s), "device_postprocess: upload");
}
template <class T>
void download(T* dst, const T* src, std::size_t n, cudaStream_t s) {
  if (n) check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, s), "device_postprocess: copy back");
}

using clock_type = std::chrono::steady_clock;
std::chrono::nanoseconds since(clock_type::time_point& t) {
  const auto now = clock_type::now();
  const auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(now - t);
  t = now;
  return d;
}

}  // namespace

struct device_postprocessor::impl {
  cudaStream_t stream = nullptr;
  device_buffer<float> padded, packed;
  device_buffer<std::int32_t> lengths, cu, doc, pos, seq_lens, anchors, kv_num, kv_idx, full_num, full_idx;
  device_buffer<std::uint8_t> loss, keep;
  device_buffer<std::byte> temp;
  gpu::cuda_batched_readback readback{1, 2};  // the packed token count, one batched read per step

  impl() { check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "device_postprocess: cudaStreamCreate"); }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  ~impl() { cudaStreamDestroy(stream); }
};

std::string device_postprocessor::probe() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
  if (n == 0) return "no CUDA device found";
  return {};
}

device_postprocessor::device_postprocessor() {
  if (const std::string why = probe(); !why.empty()) throw std::runtime_error(why);
  impl_ = std::make_unique<impl>();
}
device_postprocessor::~device_postprocessor() = default;

void device_postprocessor::run(const device_job& job, device_output& out, device_times& times) {
  impl& d = *impl_;
  const cudaStream_t s = d.stream;
  const auto docs = static_cast<std::size_t>(job.docs), S = static_cast<std::size_t>(job.tokens);
  const auto N = static_cast<std::size_t>(job.anchors.num_anchors), F = static_cast<std::size_t>(job.feature);
  const dflash::ops::hidden_shape shape{job.docs, job.seq, job.feature};
  const std::int32_t nqt = dflash::ops::tiles_for(job.mask.num_queries(), job.tile.q);
  const std::int32_t nkt = dflash::ops::tiles_for(job.mask.num_kv(), job.tile.kv);
  const auto nq = static_cast<std::size_t>(nqt), nidx = nq * static_cast<std::size_t>(nkt);
  auto t = clock_type::now();

  // Inputs: the target's padded hidden states, lengths, the packed loss mask.
  upload(d.padded.ensure(shape.padded_elements()), job.padded.data(), shape.padded_elements(), s);
  upload(d.lengths.ensure(docs), job.lengths.data(), docs, s);
  upload(d.loss.ensure(S), job.loss_mask.data(), S, s);
  upload(d.seq_lens.ensure(1), &job.tokens, 1, s);
  const std::size_t temp_bytes = std::max({gpu::doc_ids_temp_bytes(job.docs, job.tokens), gpu::cu_seqlens_temp_bytes(job.docs),
                                           gpu::anchors_temp_bytes(1, job.tokens)});
  void* temp = d.temp.ensure(temp_bytes);  // reused by each op in turn: one stream orders them
  times.upload = since(t);

  gpu::doc_ids(d.lengths.ensure(docs), job.docs, d.doc.ensure(S), d.pos.ensure(S), job.tokens, temp, temp_bytes, s);
  times.doc_ids = since(t);

  gpu::cu_seqlens(d.lengths.ensure(docs), job.docs, d.cu.ensure(docs + 1), temp, temp_bytes, s);
  gpu::pack_hidden_states(d.padded.ensure(0), shape, d.cu.ensure(docs + 1), d.packed.ensure(S * F), s);
  d.readback.clear_staged();
  d.readback.stage(0, d.cu.ensure(docs + 1) + docs);  // total tokens, read back with the copies below
  const auto tokens = d.readback.submit(s);
  times.pack = since(t);

  gpu::select_anchors(job.anchors, 1, job.tokens, d.seq_lens.ensure(1), d.loss.ensure(S), d.doc.ensure(S),
                      d.anchors.ensure(N), d.keep.ensure(N), temp, temp_bytes, s);
  times.anchors = since(t);

  const dflash::ops::block_sparse_view mask{d.kv_num.ensure(nq), d.kv_idx.ensure(nidx), d.full_num.ensure(nq),
                                            d.full_idx.ensure(nidx)};
  if (nidx) {  // unused index entries are 0, as in the host form
    check(cudaMemsetAsync(mask.kv_indices, 0, nidx * sizeof(std::int32_t), s), "device_postprocess: memset");
    check(cudaMemsetAsync(mask.full_kv_indices, 0, nidx * sizeof(std::int32_t), s), "device_postprocess: memset");
  }
  gpu::build_block_mask(job.mask, job.tile, d.pos.ensure(S), d.anchors.ensure(N), d.keep.ensure(N), mask, s);
  times.mask = since(t);

  download(out.hidden.data(), d.packed.ensure(S * F), S * F, s);
  download(out.doc_ids.data(), d.doc.ensure(S), S, s);
  download(out.pos.data(), d.pos.ensure(S), S, s);
  download(out.anchors.data(), d.anchors.ensure(N), N, s);
  download(out.keep.data(), d.keep.ensure(N), N, s);
  download(out.mask.kv_num_blocks, mask.kv_num_blocks, nq, s);
  download(out.mask.kv_indices, mask.kv_indices, nidx, s);
  download(out.mask.full_kv_num_blocks, mask.full_kv_num_blocks, nq, s);
  download(out.mask.full_kv_indices, mask.full_kv_indices, nidx, s);
  check(cudaStreamSynchronize(s), "device_postprocess: cudaStreamSynchronize");
  out.packed_tokens = tokens.get<std::int32_t>(0);
  times.copy = since(t);
}

}  // namespace dflash_example
