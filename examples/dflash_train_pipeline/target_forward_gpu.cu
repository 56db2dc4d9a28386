// --device cuda: the target model's forward on the GPU (target_forward_gpu.hpp).
// One step, all on the worker's stream, S packed tokens, H = hidden, F = taps * H:
//   1. this thread: plan_target_forward (checks, packing) -> the worker's pinned
//      block [tokens | doc | pos | dst]; one H2D copy of it
//   2. the slot zeroed (padding rows stay 0); scan keys; x[S, H] = embedding rows
//   3. per layer l:
//        xT[H, S]   = x transposed (a column's tokens contiguous for the scan)
//        runT       = InclusiveSumByKey(keys, xT): per (h, document) running sums
//        z[S, 2H]   = [ rms(x[s]) | rms(runT[:, s] / (pos[s] + 1)) ]
//        u[S, H]    = z W_l               (cuBLAS; W_l = [A_l; C_l], [2H, H])
//        x         += tanh(u + b_l)
//        tapped l:  x -> the slot's rows dst[s], columns [k H, (k + 1) H)
// enqueue_rows (--hs-link rows) runs the same forward with dst[s] = s into the
// worker's packed [S, F] scratch (no padded buffer, no memset), then
//   4. one thread reserves S rows of the ring (row_pusher::reserve: counted on
//      the device), and a warp per row writes {document, token, loss} and its
//      F taps and publishes it (dflash::warp_put).
// This file also holds the device_queue_link's ring kernels
// (row_ring_kernels.cuh: one .cu file of a program includes them).
// Memory: everything is allocated once, at construction: the weights, and per
// worker a cuBLAS handle and workspace, scratch for max_tokens tokens, the
// CUB scan's temp storage (sized for the largest scan), two pinned token blocks.
// Plain cudaMalloc rather than a stream-ordered pool: the largest step is
// known up front (--seq-len), so a fixed arena gives a steady state with no
// allocator call at all, and no pool release threshold to tune (a pool
// trimmed at every synchronisation would allocate again each step).
#include "target_forward_gpu.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <dflash/device/cuda_check.hpp>
#include <dflash/device/device_rows.cuh>
#include <dflash/device/row_ring_kernels.cuh>

namespace dflash_example {

namespace {

using dflash::cuda_check;
using dflash::cuda_check_launch;

void cublas_check(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error("target_forward_gpu: " + std::string(what) + ": " + cublasGetStatusName(s) + ": " +
                           cublasGetStatusString(s));
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("target_forward_gpu: " + what);
}

constexpr int kThreads = 256;     // elementwise kernels: grid-stride loops
constexpr int kNormThreads = 128;  // one block per token for the two rms norms

unsigned grid_for(std::size_t items) {
  const std::size_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::size_t>(blocks, 1, 1u << 16));
}

// ---- kernels (n = S * H elements; index i = s * H + h unless said otherwise) ----

/// keys[h * S + s] = scan_key(h, doc[s]) (target_forward_gpu.hpp).
__global__ void scan_keys_kernel(const std::int32_t* doc, std::int32_t S, std::int32_t H, std::int32_t* keys) {
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(H);
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const auto h = static_cast<std::int32_t>(i / static_cast<std::size_t>(S));
    const auto s = static_cast<std::int32_t>(i % static_cast<std::size_t>(S));
    keys[i] = scan_key(h, doc[s]);
  }
}

__global__ void embed_kernel(const float* embedding, const std::int32_t* tokens, std::int32_t S, std::int32_t H,
                             float* x) {
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(H);
  const auto hs = static_cast<std::size_t>(H);
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    x[i] = embedding[static_cast<std::size_t>(tokens[i / hs]) * hs + i % hs];
}

/// xT[h * S + s] = x[s * H + h].
__global__ void transpose_kernel(const float* x, std::int32_t S, std::int32_t H, float* xT) {
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(H);
  const auto hs = static_cast<std::size_t>(H), ss = static_cast<std::size_t>(S);
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    xT[(i % hs) * ss + i / hs] = x[i];
}

/// One block per token s: z[s, 0:H] = rms(x[s]), z[s, H:2H] = rms(runT[:, s] / (pos[s] + 1)),
/// rms(v) = v / sqrt(mean(v^2) + eps), no gain: TargetModel's rms_norm with g = nullptr.
__global__ void norm_inputs_kernel(const float* x, const float* runT, const std::int32_t* pos, std::int32_t S,
                                   std::int32_t H, float eps, float* z) {
  using reduce = cub::BlockReduce<float, kNormThreads>;
  __shared__ typename reduce::TempStorage temp;
  __shared__ float scale[2];
  const auto s = static_cast<std::size_t>(blockIdx.x);
  const auto hs = static_cast<std::size_t>(H), ss = static_cast<std::size_t>(S);
  const float count = static_cast<float>(pos[s] + 1);
  const float* xs = x + s * hs;
  float sx = 0, sm = 0;
  for (std::size_t h = threadIdx.x; h < hs; h += kNormThreads) {
    const float m = runT[h * ss + s] / count;
    sx += xs[h] * xs[h];
    sm += m * m;
  }
  const float tx = reduce(temp).Sum(sx);
  __syncthreads();  // temp is reused by the second reduction
  const float tm = reduce(temp).Sum(sm);
  if (threadIdx.x == 0) {
    scale[0] = 1.0f / sqrtf(tx / static_cast<float>(H) + eps);
    scale[1] = 1.0f / sqrtf(tm / static_cast<float>(H) + eps);
  }
  __syncthreads();
  float* zs = z + s * 2 * hs;
  for (std::size_t h = threadIdx.x; h < hs; h += kNormThreads) {
    zs[h] = xs[h] * scale[0];
    zs[hs + h] = runT[h * ss + s] / count * scale[1];
  }
}

/// x += tanh(u + b).
__global__ void residual_kernel(const float* u, const float* b, std::int32_t S, std::int32_t H, float* x) {
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(H);
  const auto hs = static_cast<std::size_t>(H);
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    x[i] += tanhf(u[i] + b[i % hs]);
}

/// out[dst[s] * F + column + h] = x[s * H + h]: tap k's columns of the slot's rows (dst -1: a
/// padding row of the graphed forward, written nowhere).
__global__ void tap_kernel(const float* x, const std::int32_t* dst, std::int32_t S, std::int32_t H, std::int32_t F,
                           std::int32_t column, float* out) {
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(H);
  const auto hs = static_cast<std::size_t>(H);
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const std::int32_t row = dst[i / hs];
    if (row >= 0)
      out[static_cast<std::size_t>(row) * static_cast<std::size_t>(F) + static_cast<std::size_t>(column) + i % hs] = x[i];
  }
}

/// One thread: S rows of the ring for this call (counted; a failure marks the count).
__global__ void reserve_rows_kernel(dflash::row_pusher<hs_token, float> push, std::uint32_t rows,
                                    dflash::ring_ticket* ticket) {
  *ticket = push.reserve(rows);
}

constexpr int kRowWarps = 8;  // rows written per block of the push, one per warp

/// A warp per packed row s: {doc_base + doc[s], tok[s], loss[s]} and its F
/// taps from packed[s * F], then the row is published. A reservation that
/// failed writes nothing (its count says so and the run fails).
__global__ void push_rows_kernel(dflash::row_pusher<hs_token, float> push, const dflash::ring_ticket* ticket,
                                 const float* packed, const std::int32_t* tok, const std::int32_t* doc,
                                 const std::int32_t* loss, std::int64_t doc_base, std::int32_t S, std::int32_t F) {
  const dflash::ring_ticket t = *ticket;
  if (t.status != dflash::ring_status::ok) return;
  const unsigned warp = threadIdx.x / 32;
  for (std::size_t r = std::size_t{blockIdx.x} * kRowWarps + warp; r < static_cast<std::size_t>(S);
       r += std::size_t{gridDim.x} * kRowWarps) {
    const hs_token row{doc_base + doc[r], tok[r], loss[r]};
    dflash::warp_put(push, t, static_cast<std::uint32_t>(r), row, packed + r * static_cast<std::size_t>(F));
  }
}

template <class T>
T* device_alloc(std::size_t count, std::string_view what) {
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)), std::string("target_forward_gpu: cudaMalloc ") += what);
  return static_cast<T*>(p);
}

/// Scratch, zeroed once: it is sized for max_tokens and a step writes S rows
/// of it; a library kernel (cuBLAS's tiles, CUB's vector loads) may read past
/// S, and initcheck must not take those bytes for the forward's own reads. On
/// the legacy stream: the constructor waits for it before the first step.
template <class T>
T* device_scratch(std::size_t count, std::string_view what) {
  T* p = device_alloc<T>(count, what);
  cuda_check(cudaMemset(p, 0, std::max<std::size_t>(count, 1) * sizeof(T)), std::string("target_forward_gpu: cudaMemset ") += what);
  return p;
}

/// cuBLAS workspace: what the cuBLAS guide recommends per architecture
/// (cublasSetWorkspace: 32 MiB on Hopper and newer, 4 MiB before).
std::size_t workspace_bytes(int device) {
  int major = 0;
  cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "target_forward_gpu: cudaDeviceGetAttribute");
  return major >= 9 ? std::size_t{32} << 20 : std::size_t{4} << 20;
}

std::size_t scan_temp_bytes(std::int32_t items) {
  std::size_t bytes = 0;
  cuda_check(cub::DeviceScan::InclusiveSumByKey(nullptr, bytes, static_cast<const std::int32_t*>(nullptr),
                                                static_cast<const float*>(nullptr), static_cast<float*>(nullptr), items,
                                                cuda::std::equal_to<>{}, cudaStream_t{}),
             "target_forward_gpu: InclusiveSumByKey (size query)");
  return bytes;
}

}  // namespace

/// One worker's state: only its thread enqueues with it, on its stream, so
/// its scratch is reused in stream order.
struct worker_state {
  cublasHandle_t blas = nullptr;
  cudaStream_t bound = nullptr;  // the stream blas runs on (setting one resets the workspace: both are set together)
  bool bound_once = false;
  void* workspace = nullptr;
  std::size_t workspace_size = 0;
  float *x = nullptr, *xT = nullptr, *runT = nullptr, *z = nullptr, *u = nullptr;
  float* packed = nullptr;  // [max_tokens, F]: the taps of enqueue_rows, before the push
  dflash::ring_ticket* ticket = nullptr;  // enqueue_rows: this call's reservation
  std::int32_t *keys = nullptr, *ints = nullptr;  // ints: [tokens | doc | pos | dst | loss], max_tokens each
  void* scan_temp = nullptr;
  std::size_t scan_temp_size = 0;
  // The host side of `ints`, two blocks used in turn: a step waits for the copy from its block two
  // steps ago, not the last one, so the host may run a step ahead of a busy device.
  std::int32_t* pinned[2] = {nullptr, nullptr};
  cudaEvent_t inputs_copied[2] = {nullptr, nullptr};  // the last H2D copy from each block
  bool in_flight[2] = {false, false};
  unsigned next_pinned = 0;
  cudaEvent_t done = nullptr;           // the last step's last work
  bool warmed = false;                  // --cuda-graphs: every kernel has run once outside a capture
  target_forward_plan plan;              // host side of a step, its capacity reused
  std::vector<std::int32_t> loss;        // enqueue_rows: the packed rows' loss mask, its capacity reused

  worker_state() = default;
  worker_state(const worker_state&) = delete;
  worker_state& operator=(const worker_state&) = delete;
  ~worker_state() {
    if (done) (void)cudaEventSynchronize(done);
    for (cudaEvent_t e : inputs_copied)
      if (e) (void)cudaEventSynchronize(e);
    if (blas) (void)cublasDestroy(blas);
    for (void* p : {workspace, static_cast<void*>(x), static_cast<void*>(xT), static_cast<void*>(runT),
                    static_cast<void*>(z), static_cast<void*>(u), static_cast<void*>(packed), static_cast<void*>(ticket),
                    static_cast<void*>(keys), static_cast<void*>(ints), scan_temp})
      if (p) (void)cudaFree(p);
    for (std::int32_t* p : pinned)
      if (p) (void)cudaFreeHost(p);
    if (done) (void)cudaEventDestroy(done);
    for (cudaEvent_t e : inputs_copied)
      if (e) (void)cudaEventDestroy(e);
  }
};

struct target_forward_gpu::impl {
  std::int32_t vocab = 0, hidden = 0, layers = 0, feature = 0, max_tokens = 0;
  std::vector<std::vector<std::int32_t>> taps_of_layer;  // [layers]: the tap columns it fills (a layer may be tapped twice)
  int device = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  float* embedding = nullptr;  // [vocab, H]
  float* weights = nullptr;    // [layers][2H, H]
  float* bias = nullptr;       // [layers][H]
  std::vector<std::unique_ptr<worker_state>> workers;

  void check_step(const target_forward_plan& plan) const;
  /// Worker w's state with its plan for this step, checked (check_step).
  worker_state& planned(std::size_t w, std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths,
                        std::int32_t seq) {
    worker_state& st = worker(w);
    plan_target_forward(st.plan, tokens, lengths, seq, vocab);
    check_step(st.plan);
    return st;
  }
  void run_forward(worker_state& st, const target_forward_plan& plan, std::span<const std::int32_t> loss, float* out,
                   std::size_t zero_elems, void* stream,
                   const std::function<void(const std::int32_t* ints, cudaStream_t)>& after);
  /// Step 1: the plan's arrays (and `loss`) into the worker's device block, cuBLAS on `s`.
  void upload_inputs(worker_state& st, const target_forward_plan& plan, std::span<const std::int32_t> loss,
                     cudaStream_t s);
  /// Steps 2-3 over S rows of the worker's block: launches only (no event, no wait, no allocation).
  void launch_forward(worker_state& st, std::int32_t S, float* out, std::size_t zero_elems, std::size_t scan_bytes,
                      cudaStream_t s);
  worker_state& worker(std::size_t w) {
    require(w < workers.size(),
            "worker " + std::to_string(w) + " out of range (" + std::to_string(workers.size()) + " workers)");
    return *workers[w];
  }

  impl() = default;
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  // Torn down on the device it was built on: a cuBLAS handle assumes its
  // device is unchanged from cublasCreate to cublasDestroy, and the frees and
  // syncs belong there too (the destroying thread may have another current device).
  ~impl() {
    int before = 0;
    const bool switched = cudaGetDevice(&before) == cudaSuccess && before != device && cudaSetDevice(device) == cudaSuccess;
    workers.clear();  // waits for their last steps before the weights go
    for (float* p : {embedding, weights, bias})
      if (p) (void)cudaFree(p);
    if (switched) (void)cudaSetDevice(before);
  }
};

/// Checks common to both outputs, after the plan: the step fits what was
/// sized at construction, on the device the weights are on.
void target_forward_gpu::impl::check_step(const target_forward_plan& plan) const {
  const impl& d = *this;
  require(plan.size() <= d.max_tokens, "the step has " + std::to_string(plan.size()) + " tokens, more than max_tokens = " +
                                           std::to_string(d.max_tokens) + " this forward was sized for");
  require(plan.docs < (std::int32_t{1} << 29), "2^29 documents or more (the scan keys are 32-bit)");
  int dev = -1;
  cuda_check(cudaGetDevice(&dev), "target_forward_gpu: cudaGetDevice");
  require(dev == d.device, "called on device " + std::to_string(dev) + ", the weights are on device " +
                               std::to_string(d.device));
}

/// The forward of `plan` on stream s, its taps written to out[dst[s] * F + ...];
/// `loss` (rows only: [S], else empty) travels in the token block too. With
/// zero_elems the first zero_elems floats of out are zeroed first (padding).
/// The worker's done event is recorded after the step, also when it throws.
void target_forward_gpu::impl::run_forward(worker_state& st, const target_forward_plan& plan,
                                           std::span<const std::int32_t> loss, float* out, std::size_t zero_elems,
                                           void* stream, const std::function<void(const std::int32_t*, cudaStream_t)>& after) {
  const std::int32_t S = plan.size();
  const auto s = static_cast<cudaStream_t>(stream);
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(hidden);
  std::size_t scan_bytes = 0;  // a host-side query: what this step's scans need of the storage sized at construction
  if (S) {
    cuda_check(cub::DeviceScan::InclusiveSumByKey(nullptr, scan_bytes, st.keys, st.xT, st.runT,
                                                  static_cast<std::int32_t>(n), cuda::std::equal_to<>{}, s),
               "target_forward_gpu: InclusiveSumByKey (size query)");
    if (scan_bytes > st.scan_temp_size)
      throw std::logic_error("target_forward_gpu: the scan needs " + std::to_string(scan_bytes) +
                             " bytes of temp storage, more than the " + std::to_string(st.scan_temp_size) +
                             " sized for max_tokens");
  }
  upload_inputs(st, plan, loss, s);
  try {
    launch_forward(st, S, out, zero_elems, scan_bytes, s);
    if (after) after(st.ints, s);
  } catch (...) {
    // Whatever was enqueued: the next step on this worker (and the destructor) waits for it.
    (void)cudaEventRecord(st.done, s);
    throw;
  }
  cuda_check(cudaEventRecord(st.done, s), "target_forward_gpu: cudaEventRecord");
}

void target_forward_gpu::impl::upload_inputs(worker_state& st, const target_forward_plan& plan,
                                             std::span<const std::int32_t> loss, cudaStream_t s) {
  const auto toks = static_cast<std::size_t>(plan.size());
  const std::size_t arrays = loss.empty() ? 4 : 5;
  // 1. The pinned block: its previous copy (two steps ago) must have left it.
  const unsigned b = st.next_pinned;
  st.next_pinned ^= 1u;
  if (st.in_flight[b]) cuda_check(cudaEventSynchronize(st.inputs_copied[b]), "target_forward_gpu: cudaEventSynchronize");
  std::int32_t* const pin = st.pinned[b];
  if (toks) {
    std::memcpy(pin, plan.tokens.data(), toks * sizeof(std::int32_t));
    std::memcpy(pin + toks, plan.doc.data(), toks * sizeof(std::int32_t));
    std::memcpy(pin + 2 * toks, plan.pos.data(), toks * sizeof(std::int32_t));
    std::memcpy(pin + 3 * toks, plan.dst.data(), toks * sizeof(std::int32_t));
    if (!loss.empty()) std::memcpy(pin + 4 * toks, loss.data(), toks * sizeof(std::int32_t));
  }
  // A different stream than last time must not overtake this worker's last step on its scratch.
  cuda_check(cudaStreamWaitEvent(s, st.done, 0), "target_forward_gpu: cudaStreamWaitEvent");
  if (!st.bound_once || st.bound != s) {
    // cublasSetStream resets the workspace to cuBLAS's default pool: ours is set after it, every time.
    // (A graph capture needs it too: cuBLAS allocates nothing while capturing only with its own workspace.)
    cublas_check(cublasSetStream(st.blas, s), "cublasSetStream");
    cublas_check(cublasSetWorkspace(st.blas, st.workspace, st.workspace_size), "cublasSetWorkspace");
    st.bound = s;
    st.bound_once = true;
  }
  if (toks) {
    cuda_check(cudaMemcpyAsync(st.ints, pin, arrays * toks * sizeof(std::int32_t), cudaMemcpyHostToDevice, s),
               "target_forward_gpu: token upload");
    cuda_check(cudaEventRecord(st.inputs_copied[b], s), "target_forward_gpu: cudaEventRecord");
    st.in_flight[b] = true;
  }
}

void target_forward_gpu::impl::launch_forward(worker_state& st, std::int32_t S, float* out, std::size_t zero_elems,
                                              std::size_t scan_bytes, cudaStream_t s) {
  impl& d = *this;
  const std::int32_t H = d.hidden;
  const auto toks = static_cast<std::size_t>(S);
  const std::size_t n = toks * static_cast<std::size_t>(H);
  // 2. Padding rows are 0; every real row is written by the taps below.
  if (zero_elems) cuda_check(cudaMemsetAsync(out, 0, zero_elems * sizeof(float), s), "target_forward_gpu: cudaMemsetAsync");
  if (!toks) return;
  const std::int32_t* tok = st.ints;
  const std::int32_t* doc = st.ints + toks;
  const std::int32_t* pos = st.ints + 2 * toks;
  const std::int32_t* dst = st.ints + 3 * toks;
  const unsigned grid = grid_for(n);
  scan_keys_kernel<<<grid, kThreads, 0, s>>>(doc, S, H, st.keys);
  cuda_check_launch("target_forward_gpu: scan keys");
  embed_kernel<<<grid, kThreads, 0, s>>>(d.embedding, tok, S, H, st.x);
  cuda_check_launch("target_forward_gpu: embedding");
  const auto Hs = static_cast<std::size_t>(H);
  for (std::int32_t l = 0; l < d.layers; ++l) {
    const auto ls = static_cast<std::size_t>(l);
    transpose_kernel<<<grid, kThreads, 0, s>>>(st.x, S, H, st.xT);
    cuda_check_launch("target_forward_gpu: transpose");
    cuda_check(cub::DeviceScan::InclusiveSumByKey(st.scan_temp, scan_bytes, st.keys, st.xT, st.runT,
                                                  static_cast<std::int32_t>(n), cuda::std::equal_to<>{}, s),
               "target_forward_gpu: InclusiveSumByKey");
    norm_inputs_kernel<<<static_cast<unsigned>(S), kNormThreads, 0, s>>>(st.x, st.runT, pos, S, H,
                                                                          static_cast<float>(detail::kRmsEps), st.z);
    cuda_check_launch("target_forward_gpu: rms norms");
    // u = z W_l, row-major: u [S, H], z [S, 2H], W_l [2H, H]. cuBLAS is
    // column-major, and a row-major [r, c] matrix is the column-major
    // [c, r] one (its transpose) with leading dimension c. So we ask for
    // u^T = W_l^T z^T, every operand as stored (CUBLAS_OP_N twice):
    //   m = H (rows of u^T), n = S (its columns), k = 2H (the shared dimension);
    //   A = W_l read column-major: H x 2H, lda = H;
    //   B = z   read column-major: 2H x S, ldb = 2H;
    //   C = u   read column-major: H x S,  ldc = H.
    const float one = 1.0f, zero = 0.0f;  // host pointer mode: the values are read at the call (and baked into a capture)
    cublas_check(cublasSgemm(st.blas, CUBLAS_OP_N, CUBLAS_OP_N, H, S, 2 * H, &one, d.weights + ls * 2 * Hs * Hs, H,
                             st.z, 2 * H, &zero, st.u, H),
                 "cublasSgemm");
    residual_kernel<<<grid, kThreads, 0, s>>>(st.u, d.bias + ls * Hs, S, H, st.x);
    cuda_check_launch("target_forward_gpu: residual");
    for (const std::int32_t k : d.taps_of_layer[ls]) {  // every column the CPU model copies this layer into
      tap_kernel<<<grid, kThreads, 0, s>>>(st.x, dst, S, H, d.feature, k * H, out);
      cuda_check_launch("target_forward_gpu: tap");
    }
  }
}

std::string target_forward_gpu::probe() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return dflash::no_cuda_device_reason(e);
  if (n == 0) return "no CUDA device found";
  return {};
}

target_forward_gpu::target_forward_gpu(const TargetModel& model, std::int32_t max_tokens, std::size_t workers,
                                       target_forward_gpu_options options) {
  if (const std::string why = probe(); !why.empty()) throw std::runtime_error("target_forward_gpu: " + why);
  require(max_tokens >= 1, "max_tokens = " + std::to_string(max_tokens) + " must be positive");
  require(workers >= 1, "needs at least one worker");
  const TargetConfig& cfg = model.config();
  const std::int64_t items = std::int64_t{max_tokens} * cfg.hidden;
  require(items <= std::numeric_limits<std::int32_t>::max() &&
              std::int64_t{cfg.hidden} * (std::int64_t{max_tokens} + 1) <= std::numeric_limits<std::int32_t>::max(),
          "max_tokens * hidden must stay below 2^31 (scan keys and sizes are 32-bit)");
  auto d = std::make_unique<impl>();
  d->vocab = cfg.vocab;
  d->hidden = cfg.hidden;
  d->layers = cfg.layers;
  d->feature = model.feature_dim();
  d->max_tokens = max_tokens;
  d->math = options.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  d->taps_of_layer.assign(static_cast<std::size_t>(cfg.layers), {});
  for (std::size_t k = 0; k < model.taps().size(); ++k)
    d->taps_of_layer.at(static_cast<std::size_t>(model.taps()[k])).push_back(static_cast<std::int32_t>(k));
  cuda_check(cudaGetDevice(&d->device), "target_forward_gpu: cudaGetDevice");

  // The weights, once (synchronous copies: construction precedes every step).
  const auto H = static_cast<std::size_t>(cfg.hidden), L = static_cast<std::size_t>(cfg.layers);
  d->embedding = device_alloc<float>(model.embedding().size(), "embedding");
  cuda_check(cudaMemcpy(d->embedding, model.embedding().data(), model.embedding().size_bytes(), cudaMemcpyHostToDevice),
             "target_forward_gpu: upload embedding");
  std::vector<float> w, b;
  w.reserve(L * 2 * H * H);
  b.reserve(L * H);
  for (std::size_t l = 0; l < L; ++l) {
    const std::vector<float> wl = stacked_layer_weights(model, l);
    w.insert(w.end(), wl.begin(), wl.end());
    b.insert(b.end(), model.layer_b(l).begin(), model.layer_b(l).end());
  }
  d->weights = device_alloc<float>(w.size(), "weights");
  d->bias = device_alloc<float>(b.size(), "bias");
  cuda_check(cudaMemcpy(d->weights, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice),
             "target_forward_gpu: upload weights");
  cuda_check(cudaMemcpy(d->bias, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice),
             "target_forward_gpu: upload bias");

  const std::size_t ws = workspace_bytes(d->device);
  const auto n = static_cast<std::size_t>(items), toks = static_cast<std::size_t>(max_tokens);
  const std::size_t scan_bytes = scan_temp_bytes(static_cast<std::int32_t>(items));
  for (std::size_t i = 0; i < workers; ++i) {
    auto st = std::make_unique<worker_state>();
    cublas_check(cublasCreate(&st->blas), "cublasCreate");
    cublas_check(cublasSetMathMode(st->blas, d->math), "cublasSetMathMode");
    st->workspace = device_scratch<std::byte>(ws, "cuBLAS workspace");
    st->workspace_size = ws;
    st->x = device_scratch<float>(n, "x");
    st->xT = device_scratch<float>(n, "xT");
    st->runT = device_scratch<float>(n, "runT");
    st->z = device_scratch<float>(2 * n, "z");
    st->u = device_scratch<float>(n, "u");
    st->keys = device_scratch<std::int32_t>(n, "keys");
    st->packed = device_scratch<float>(toks * static_cast<std::size_t>(d->feature), "packed taps");
    st->ticket = device_scratch<dflash::ring_ticket>(1, "ring ticket");
    st->ints = device_scratch<std::int32_t>(5 * toks, "token block");
    st->scan_temp = device_scratch<std::byte>(scan_bytes, "scan temp");
    st->scan_temp_size = scan_bytes;
    for (int k = 0; k < 2; ++k) {
      void* p = nullptr;
      cuda_check(cudaMallocHost(&p, 5 * toks * sizeof(std::int32_t)), "target_forward_gpu: cudaMallocHost");
      st->pinned[k] = static_cast<std::int32_t*>(p);
      cuda_check(cudaEventCreateWithFlags(&st->inputs_copied[k], cudaEventDisableTiming),
                 "target_forward_gpu: cudaEventCreate");
    }
    cuda_check(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming), "target_forward_gpu: cudaEventCreate");
    d->workers.push_back(std::move(st));
  }
  // The zero fills ran on the legacy stream; a step may run on a non-blocking
  // stream, which would not wait for them.
  cuda_check(cudaStreamSynchronize(cudaStreamLegacy), "target_forward_gpu: finish the zero fills");
  impl_ = std::move(d);
}

target_forward_gpu::~target_forward_gpu() = default;

std::int32_t target_forward_gpu::max_tokens() const noexcept { return impl_->max_tokens; }
std::size_t target_forward_gpu::workers() const noexcept { return impl_->workers.size(); }

void target_forward_gpu::enqueue(std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths,
                                 std::int32_t seq, float* out, std::size_t out_elems, void* stream, std::size_t worker) {
  impl& d = *impl_;
  worker_state& st = d.planned(worker, tokens, lengths, seq);
  const std::size_t want = st.plan.padded_rows() * static_cast<std::size_t>(d.feature);
  require(out_elems == want, "out has " + std::to_string(out_elems) + " floats, expected docs * seq * feature = " +
                                 std::to_string(want));
  require(out != nullptr || want == 0, "out is null");
  d.run_forward(st, st.plan, {}, out, want, stream, {});
}

void target_forward_gpu::prepare_graphed(std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths,
                                         std::int32_t seq, std::size_t out_elems, void* stream, std::size_t worker) {
  impl& d = *impl_;
  worker_state& st = d.planned(worker, tokens, lengths, seq);
  const std::size_t want = st.plan.padded_rows() * static_cast<std::size_t>(d.feature);
  require(out_elems == want, "out has " + std::to_string(out_elems) + " floats, expected docs * seq * feature = " +
                                 std::to_string(want));
  const auto s = static_cast<cudaStream_t>(stream);
  if (!st.warmed) {
    // Every kernel's first run (module loading, cuBLAS's first-call setup, CUB's scan instances)
    // outside the capture: a step of padding only, which writes nowhere.
    target_forward_plan warm;
    pad_plan_for_graph(warm, d.max_tokens);
    d.upload_inputs(st, warm, {}, s);
    d.launch_forward(st, d.max_tokens, st.packed, 0, st.scan_temp_size, s);
    cuda_check(cudaEventRecord(st.done, s), "target_forward_gpu: cudaEventRecord");
    st.warmed = true;
  }
  pad_plan_for_graph(st.plan, d.max_tokens);
  d.upload_inputs(st, st.plan, {}, s);
}

void target_forward_gpu::launch_graphed(float* out, std::size_t out_capacity, void* stream, std::size_t worker) {
  impl& d = *impl_;
  worker_state& st = d.worker(worker);
  require(out != nullptr, "out is null");
  // cuBLAS runs on the stream its handle is bound to: captured on another, the GEMM would run once,
  // now, outside the graph, and every replay would leave its result stale.
  require(st.bound_once && st.bound == static_cast<cudaStream_t>(stream),
          "launch_graphed on a stream prepare_graphed did not prepare (call prepare_graphed on it first)");
  // The scan's storage was sized at construction for max_tokens rows: the size every replay scans.
  // (Over [H, max_tokens] rather than the step's [H, S], the scan's tiles and the GEMM's heuristic
  // differ from enqueue()'s: graphed and plain CUDA results agree within tolerance, not bit for bit.)
  d.launch_forward(st, d.max_tokens, out, out_capacity, st.scan_temp_size, static_cast<cudaStream_t>(stream));
}

void target_forward_gpu::after_graphed(void* stream, std::size_t worker) {
  impl& d = *impl_;
  cuda_check(cudaEventRecord(d.worker(worker).done, static_cast<cudaStream_t>(stream)),
             "target_forward_gpu: cudaEventRecord");
}

void target_forward_gpu::enqueue_rows(std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths,
                                      std::span<const std::uint8_t> loss_mask, std::int32_t seq, std::int64_t doc_base,
                                      const dflash::row_pusher<hs_token, float>& out, void* stream, std::size_t worker) {
  impl& d = *impl_;
  worker_state& st = d.planned(worker, tokens, lengths, seq);
  target_forward_plan& plan = st.plan;
  require(loss_mask.size() == tokens.size(), "loss_mask has " + std::to_string(loss_mask.size()) +
                                                 " entries, tokens " + std::to_string(tokens.size()));
  require(out.data && out.payloads && out.pushed, "the ring's pusher has a null array");
  require(out.width == static_cast<std::uint32_t>(d.feature),
          "the ring's rows carry " + std::to_string(out.width) + " floats, the forward " + std::to_string(d.feature));
  require(static_cast<std::uint32_t>(plan.size()) <= out.bound,
          "the step has " + std::to_string(plan.size()) + " tokens, more than the link's " + std::to_string(out.bound) +
              " rows per call");
  // Packed rows: tap s goes to row s of the scratch; each row's loss beside it.
  st.loss.resize(plan.tokens.size());
  for (std::size_t i = 0; i < plan.dst.size(); ++i) {
    st.loss[i] = loss_mask[static_cast<std::size_t>(plan.dst[i])];
    plan.dst[i] = static_cast<std::int32_t>(i);
  }
  const std::int32_t S = plan.size(), F = d.feature;
  d.run_forward(st, plan, st.loss, st.packed, 0, stream, [&](const std::int32_t* ints, cudaStream_t s) {
    // 4. The rows: one reservation (it may fail only past the link's bound: counted, and the run fails), then a warp each.
    // If the push cannot be launched after the reservation ran, its rows are never published: the launch
    // error fails the run (its stream's error), and the ring is cancelled with it.
    reserve_rows_kernel<<<1, 1, 0, s>>>(out, static_cast<std::uint32_t>(S), st.ticket);
    cuda_check_launch("target_forward_gpu: reserve rows");
    if (S == 0) return;
    const auto toks = static_cast<std::size_t>(S);
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((toks + kRowWarps - 1) / kRowWarps, 4096));
    push_rows_kernel<<<blocks, 32 * kRowWarps, 0, s>>>(out, st.ticket, st.packed, ints, ints + toks, ints + 4 * toks,
                                                       doc_base, S, F);
    cuda_check_launch("target_forward_gpu: push rows");
  });
}

}  // namespace dflash_example
