// The ops driver on dflash::ops::gpu (see ops_driver.hpp): what the GPU bundle's
// torch step compares with PyTorch on the same GPU. Inputs go to the device, the
// ops run on one stream, outputs come back; every output buffer is poisoned with
// 0xAB bytes first, so an element an op fails to write cannot pass as a lucky
// zero. The scalars are reduced on the device and come back through ONE
// gpu::cuda_batched_readback submit per case. No device: gpu_probe.hpp's rule
// (exit 77 "skipped", or 1 in strict mode).
#include <cub/device/device_reduce.cuh>
#include <cuda_runtime_api.h>
#include <thrust/iterator/transform_iterator.h>

#include <deque>
#include <memory>

#include <dflash/ops/anchors.cuh>
#include <dflash/ops/batched_readback.cuh>
#include <dflash/ops/block_mask.cuh>
#include <dflash/ops/doc_ids.cuh>
#include <dflash/ops/pack_hidden_states.cuh>

#include "gpu_probe.hpp"
#include "ops_driver.hpp"

namespace {
using namespace dflash;
using ops_driver::bvec;
using ops_driver::ivec;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("ops_driver_gpu: ") + what + ": " + cudaGetErrorString(e));
}

/// n bytes of device memory (none for n == 0), freed on destruction.
struct dmem {
  void* p = nullptr;
  explicit dmem(std::size_t n) {
    if (n) ok(cudaMalloc(&p, n), "cudaMalloc");
  }
  dmem(const dmem&) = delete;
  ~dmem() { cudaFree(p); }
};

template <class T>
struct to_type {
  template <class U>
  __host__ __device__ T operator()(U v) const {
    return static_cast<T>(v);
  }
};
struct nonzero_i64 {
  __host__ __device__ std::int64_t operator()(std::uint8_t v) const { return v != 0 ? 1 : 0; }
};

struct gpu_impl {
  cudaStream_t s{};
  ops_driver::scalar_batch<ops::gpu::cuda_batched_readback> batch;
  std::deque<dmem> keep_alive;  // device scalars and temp storage, until the case is read back

  gpu_impl() { ok(cudaStreamCreate(&s), "cudaStreamCreate"); }
  ~gpu_impl() { cudaStreamDestroy(s); }
  static const char* name() { return "gpu"; }
  void reset() {
    batch.reset();
    ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    keep_alive.clear();
  }
  std::vector<ops_driver::scalar> read_back() { return batch.read(s); }

  template <class T>
  T* alloc(std::size_t n) {
    return static_cast<T*>(keep_alive.emplace_back(n * sizeof(T)).p);
  }
  template <class T>
  T* upload(const std::vector<T>& v) {
    T* p = alloc<T>(v.size());
    if (!v.empty()) ok(cudaMemcpyAsync(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s), "upload");
    return p;
  }
  template <class T>
  T* poisoned(std::size_t n) {
    T* p = alloc<T>(n);
    if (n) ok(cudaMemsetAsync(p, 0xAB, n * sizeof(T), s), "poison");
    return p;
  }
  template <class T>
  std::vector<T> download(const T* p, std::size_t n) {
    std::vector<T> v(n);
    if (n) ok(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, s), "download");
    ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return v;
  }
  /// Sum of n items into a device scalar, staged for the read-back under `name`.
  template <class Out, class It>
  void stage_sum(const char* name, It in, std::size_t n) {
    Out* out = alloc<Out>(1);
    ok(cudaMemsetAsync(out, 0, sizeof(Out), s), "memset");
    if (n) {
      std::size_t bytes = 0;
      ok(cub::DeviceReduce::Sum(nullptr, bytes, in, out, static_cast<int>(n), s), "DeviceReduce size");
      void* temp = alloc<std::byte>(bytes);
      ok(cub::DeviceReduce::Sum(temp, bytes, in, out, static_cast<int>(n), s), "DeviceReduce");
    }
    batch.stage(name, out);
  }

  void doc_ids(const ivec& lengths, ivec& doc, ivec& pos) {
    const auto n_docs = static_cast<std::int32_t>(lengths.size());
    const std::int32_t n = ops::detail::checked_total(lengths, -1, "ops_driver_gpu doc_ids");
    const std::int32_t* d_len = upload(lengths);
    std::int32_t* d_doc = poisoned<std::int32_t>(static_cast<std::size_t>(n));
    std::int32_t* d_pos = poisoned<std::int32_t>(static_cast<std::size_t>(n));
    const std::size_t bytes = ops::gpu::doc_ids_temp_bytes(n_docs, n);
    ops::gpu::doc_ids(d_len, n_docs, d_doc, d_pos, n, poisoned<std::byte>(bytes), bytes, s);
    doc = download(d_doc, static_cast<std::size_t>(n));
    pos = download(d_pos, static_cast<std::size_t>(n));
  }

  template <class T>
  void pack(const ops::hidden_shape& sh, const ivec& lengths, const std::vector<T>& padded, ivec& cu,
            std::vector<T>& packed, std::vector<T>& unpacked) {
    ops::detail::checked_total(lengths, sh.seq, "ops_driver_gpu pack");  // the device op trusts its lengths
    const std::int32_t* d_len = upload(lengths);
    std::int32_t* d_cu = poisoned<std::int32_t>(lengths.size() + 1);
    const std::size_t bytes = ops::gpu::cu_seqlens_temp_bytes(sh.batch);
    ops::gpu::cu_seqlens(d_len, sh.batch, d_cu, poisoned<std::byte>(bytes), bytes, s);
    const T* d_padded = upload(padded);
    T* d_packed = poisoned<T>(padded.size());
    T* d_back = poisoned<T>(padded.size());
    ops::gpu::pack_hidden_states<T>(d_padded, sh, d_cu, d_packed, s);
    ops::gpu::unpack_hidden_states<T>(d_packed, d_cu, sh, d_back, s);
    cu = download(d_cu, lengths.size() + 1);
    const std::size_t n = static_cast<std::size_t>(cu.back()) * static_cast<std::size_t>(sh.hidden);
    packed = download(d_packed, n);
    unpacked = download(d_back, padded.size());
    batch.stage("tokens", d_cu + sh.batch);
    if constexpr (std::is_same_v<T, float>) stage_sum<float>("packed_sum", static_cast<const float*>(d_packed), n);
  }

  void select_anchors(const ops::anchor_params& a, std::int32_t b, std::int32_t seq, const ivec& seq_lens,
                      const bvec& mask, const ivec& docs, ivec& anchors, bvec& keep) {
    ops::detail::checked_total(seq_lens, seq, "ops_driver_gpu select_anchors", "seq_lens");
    const std::size_t k = static_cast<std::size_t>(b) * static_cast<std::size_t>(a.num_anchors);
    const std::int32_t* d_lens = upload(seq_lens);
    const std::uint8_t* d_mask = upload(mask);
    const std::int32_t* d_docs = docs.empty() ? nullptr : upload(docs);
    std::int32_t* d_anchors = poisoned<std::int32_t>(k);
    std::uint8_t* d_keep = poisoned<std::uint8_t>(k);
    const std::size_t bytes = ops::gpu::anchors_temp_bytes(b, seq);
    ops::gpu::select_anchors(a, b, seq, d_lens, d_mask, d_docs, d_anchors, d_keep, poisoned<std::byte>(bytes), bytes, s);
    anchors = download(d_anchors, k);
    keep = download(d_keep, k);
    stage_sum<std::int32_t>("kept", thrust::make_transform_iterator(d_keep, to_type<std::int32_t>{}), k);
    stage_sum<std::int64_t>("loss_tokens", thrust::make_transform_iterator(d_mask, nonzero_i64{}), mask.size());
  }

  ops::block_sparse_mask build_block_mask(const ops::block_mask_params& p, ops::tile_shape t,
                                          const ops::doc_ids_result& d, const ivec& anchors, const bvec& keep) {
    ops::block_sparse_mask m = ops::block_sparse_mask::allocate(p, t);
    const std::int32_t* d_pos = upload(d.pos);
    const std::int32_t* d_anchors = upload(anchors);
    const std::uint8_t* d_keep = upload(keep);
    const ops::block_sparse_view v{poisoned<std::int32_t>(m.kv_num_blocks.size()),
                                   poisoned<std::int32_t>(m.kv_indices.size()),
                                   poisoned<std::int32_t>(m.full_kv_num_blocks.size()),
                                   poisoned<std::int32_t>(m.full_kv_indices.size())};
    ops::gpu::build_block_mask(p, t, d_pos, d_anchors, d_keep, v, s);
    m.kv_num_blocks = download(v.kv_num_blocks, m.kv_num_blocks.size());
    m.kv_indices = download(v.kv_indices, m.kv_indices.size());
    m.full_kv_num_blocks = download(v.full_kv_num_blocks, m.full_kv_num_blocks.size());
    m.full_kv_indices = download(v.full_kv_indices, m.full_kv_indices.size());
    m.bind_rule(anchors, keep, d.pos);
    stage_sum<std::int32_t>("partial_tiles", static_cast<const std::int32_t*>(v.kv_num_blocks),
                            m.kv_num_blocks.size());
    stage_sum<std::int32_t>("full_tiles", static_cast<const std::int32_t*>(v.full_kv_num_blocks),
                            m.full_kv_num_blocks.size());
    return m;
  }
};
}  // namespace

int main(int argc, char** argv) {
  if (const auto code = dflash_test::check_gpu(argc > 0 ? argv[0] : "ops_driver_gpu")) return *code;
  try {
    gpu_impl impl;
    return dflash::ops_driver::main_loop(impl);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_driver_gpu: FAIL: %s\n", e.what());
    return 1;
  }
}
