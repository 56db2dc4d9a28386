// The example's target forward on a GPU (target_forward_gpu, cuBLAS + CUB)
// against the CPU model (TargetModel::forward_padded) on the same weights and
// tokens. Without a device the shared main reports "skipped" (exit 77).
//
// Tolerance, fp32 with TF32 off: |gpu - cpu| <= 1e-4 for every element.
// Both sides compute in fp32 and differ only in the order of additions:
//  * each GEMM output sums k = 2H = 128 products of rms-normalised inputs
//    (|z| ~ 1) and weights of std 1/sqrt(H); a reordered fp32 sum of k terms
//    is off by at most ~k u sum|z w| (u = 2^-24): 128 * 6e-8 * ~10 ~ 8e-5 in
//    the worst case, ~1e-6 typically (errors of random sign grow like sqrt(k));
//  * the running sums of the causal mean add up to 192 values (~sqrt(192) u
//    relative), then the mean and the rms norm divide them: rounding of a
//    normalised value stays ~1e-6;
//  * tanh contracts (|tanh'| <= 1), so a layer passes its input's error on
//    (the residual) plus its own, and the next layer's rms normalisation
//    feeds the GEMM an input of norm ~1 whatever h's magnitude: over L = 6
//    layers the errors add, they do not compound.
// Measured on the CPU over 20 example batches (values up to |h| ~ 6): the
// fp32 model is within 2.7e-6 of an fp64 forward, and a reordered fp32
// forward (test_target_forward_plan's) within 2.4e-6 of the model; the GPU,
// another order, should be ~5e-6 off. 1e-4 leaves 20x for cuBLAS's kernel
// choice and tanhf (2 ulp) and still sits below one layer's worst-case GEMM
// rounding (~8e-5). A wrong row, column, transpose or document
// boundary is off by O(1), which no tolerance near this one hides.
// With TF32 the GEMM inputs are rounded to 10 mantissa bits (2^-11 relative
// each): a GEMM output is off by ~sqrt(128) 2^-11 |z w| ~ 5e-4, six layers
// ~1e-3, the worst of ~10^5 elements a few times that: 5e-2 is checked there.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include "model.hpp"
#include "target_forward_gpu.hpp"
#include "target_forward_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace dflash_example;
using dflash_example::testing::forward_by_plan;
using dflash_example::testing::max_abs_diff;

namespace {

constexpr double kTolFp32 = 1e-4;
constexpr double kTolTf32 = 5e-2;

void ok(cudaError_t e, const char* what) {  // throws: Catch reports it, from any thread
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device buffer of n floats, filled with NaN bytes (0xFF) so a row the
/// forward forgets to write (padding included) is caught.
struct device_floats {
  float* p = nullptr;
  std::size_t n = 0;
  explicit device_floats(std::size_t count) : n(count) {
    ok(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(float)), "cudaMalloc");
    ok(cudaMemset(p, 0xFF, std::max<std::size_t>(n, 1) * sizeof(float)), "cudaMemset");
    // cudaMemset runs on the legacy stream; the forward runs on a non-blocking
    // one, which does not wait for it: finish the fill before handing p out.
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the fill");
  }
  ~device_floats() { (void)cudaFree(p); }
  device_floats(const device_floats&) = delete;
  device_floats& operator=(const device_floats&) = delete;
  [[nodiscard]] std::vector<float> host() const {
    std::vector<float> h(n);
    if (n) ok(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }
};

struct stream {
  cudaStream_t s = nullptr;
  stream() { ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~stream() { (void)cudaStreamDestroy(s); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
};

/// A batch as the example makes it (seq_len 384), plus an empty document at the end.
TokenBatch batch(const TargetConfig& cfg, std::uint64_t step) {
  const MarkovSource src(DataConfig{.vocab = cfg.vocab});
  TokenBatch b = src.make_batch(7, step, 384);
  b.lengths.push_back(0);
  b.tokens.resize(b.tokens.size() + static_cast<std::size_t>(b.seq), 0);
  b.loss_mask.resize(b.tokens.size(), 0);
  return b;
}

std::vector<float> run_gpu(target_forward_gpu& f, const TargetModel& m, const TokenBatch& b, cudaStream_t s,
                           std::size_t worker = 0) {
  device_floats out(b.tokens.size() * static_cast<std::size_t>(m.feature_dim()));
  f.enqueue(b.tokens, b.lengths, b.seq, out.p, out.n, s, worker);
  ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return out.host();
}

const TargetConfig kExample{.vocab = 96, .hidden = 64};  // the example's target (6 layers, taps 1..3)
const TargetConfig kOdd{.vocab = 40, .hidden = 37, .layers = 7, .num_taps = 4, .seed = 5};  // H not a multiple of 32

}  // namespace

TEST_CASE("the GPU target forward matches the CPU model (fp32, TF32 off)") {
  for (const TargetConfig& cfg : {kExample, kOdd}) {
    const TargetModel m(cfg);
    target_forward_gpu f(m, 384, 1);
    const stream s;
    for (std::uint64_t step = 0; step < 4; ++step) {
      const TokenBatch b = batch(cfg, step);
      const std::vector<float> cpu = m.forward_padded(b);
      const std::vector<float> gpu = run_gpu(f, m, b, s.s);
      const std::vector<float> exact =
          forward_by_plan<double>(m, plan_target_forward(b.tokens, b.lengths, b.seq, cfg.vocab));
      const double d = max_abs_diff(gpu, cpu);
      INFO("hidden " << cfg.hidden << ", step " << step << ": max |gpu - cpu| = " << d
                     << ", |gpu - fp64| = " << max_abs_diff(gpu, exact) << ", |cpu - fp64| = " << max_abs_diff(cpu, exact));
      CHECK(d <= kTolFp32);
      // Padding rows (the empty document included) are exactly 0, not left as they were.
      const auto F = static_cast<std::size_t>(m.feature_dim()), seq = static_cast<std::size_t>(b.seq);
      for (std::size_t doc = 0; doc < b.lengths.size(); ++doc)
        for (std::size_t t = static_cast<std::size_t>(b.lengths[doc]); t < seq; ++t)
          for (std::size_t j = 0; j < F; ++j) REQUIRE(gpu[(doc * seq + t) * F + j] == 0.0f);
    }
  }
}

TEST_CASE("the graphed forward: one capture, replayed over steps of other sizes, matches enqueue()") {
  const TargetModel m(kExample);
  target_forward_gpu f(m, 384, 1);
  const stream s;
  const auto F = static_cast<std::size_t>(m.feature_dim());
  // Steps of 8, 3 and 1 documents, and one of two empty documents; the slot sized for the largest.
  std::vector<TokenBatch> steps{batch(kExample, 0), batch(kExample, 1)};
  const MarkovSource src(DataConfig{.vocab = kExample.vocab});
  steps.push_back(src.make_batch(3, 2, 384));
  steps.push_back(src.make_batch(1, 3, 384));
  TokenBatch empty;
  empty.seq = 384;
  empty.lengths = {0, 0};
  empty.tokens.assign(2 * 384, 0);
  empty.loss_mask.assign(2 * 384, 0);
  steps.push_back(empty);
  std::size_t cap = 0;
  for (const auto& b : steps) cap = std::max(cap, b.tokens.size() * F);
  device_floats out(cap);
  cudaGraphExec_t exec = nullptr;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const TokenBatch& b = steps[i];
    const std::size_t n = b.tokens.size() * F;
    f.prepare_graphed(b.tokens, b.lengths, b.seq, n, s.s, 0);
    if (!exec) {  // captured once, with the first step's inputs in place
      cudaGraph_t g = nullptr;
      ok(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      f.launch_graphed(out.p, cap, s.s, 0);
      ok(cudaStreamEndCapture(s.s, &g), "cudaStreamEndCapture");
      ok(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
      ok(cudaGraphDestroy(g), "cudaGraphDestroy");
    }
    ok(cudaGraphLaunch(exec, s.s), "cudaGraphLaunch");
    f.after_graphed(s.s, 0);
    ok(cudaStreamSynchronize(s.s), "cudaStreamSynchronize");
    const std::vector<float> got = out.host();
    const std::vector<float> want = run_gpu(f, m, b, s.s);
    const std::vector<float> head(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("step " << i << ": " << b.lengths.size() << " documents, max |graphed - enqueue| = " << max_abs_diff(head, want));
    CHECK(max_abs_diff(head, want) <= kTolFp32);
    // Past the step's rows the slot is zero (the replay clears its whole capacity), padding rows too.
    CHECK(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(n), got.end(), [](float v) { return v == 0.0f; }));
  }
  ok(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  // A replay captured on a stream prepare_graphed did not prepare is refused.
  const stream other;
  CHECK_THROWS_WITH(f.launch_graphed(out.p, cap, other.s, 0), Catch::Contains("did not prepare"));
}

TEST_CASE("the GPU target forward with TF32 allowed stays close to the CPU model") {
  const TargetModel m(kExample);
  target_forward_gpu f(m, 384, 1, target_forward_gpu_options{.allow_tf32 = true});
  const stream s;
  const TokenBatch b = batch(kExample, 0);
  const double d = max_abs_diff(run_gpu(f, m, b, s.s), m.forward_padded(b));
  INFO("max |gpu tf32 - cpu| = " << d);
  CHECK(d <= kTolTf32);
}

TEST_CASE("workers on their own streams run concurrently, each into its own slot") {
  const TargetModel m(kExample);
  target_forward_gpu f(m, 384, 2);
  const stream s0, s1;
  std::vector<float> got[2], want[2];
  std::string error[2];
  auto work = [&](std::size_t w, cudaStream_t s) {
    try {
      for (std::uint64_t step = w; step < 8; step += 2) {
        const TokenBatch b = batch(kExample, step);
        device_floats out(b.tokens.size() * static_cast<std::size_t>(m.feature_dim()));
        f.enqueue(b.tokens, b.lengths, b.seq, out.p, out.n, s, w);
        if (cudaStreamSynchronize(s) != cudaSuccess) throw std::runtime_error("cudaStreamSynchronize");
        const std::vector<float> g = out.host(), c = m.forward_padded(b);
        if (max_abs_diff(g, c) > kTolFp32) throw std::runtime_error("step " + std::to_string(step) + " differs");
      }
    } catch (const std::exception& e) {
      error[w] = e.what();
    }
  };
  std::thread t0(work, 0, s0.s), t1(work, 1, s1.s);
  t0.join();
  t1.join();
  INFO(error[0] << " / " << error[1]);
  CHECK(error[0].empty());
  CHECK(error[1].empty());
}

// [device_wide]: cudaMemGetInfo is the device's free memory, which any other
// process on the GPU changes (the bundle's parallel sanitizer jobs do): run.sh
// runs this case only in its serial test step, never under the sanitizers.
TEST_CASE("steady state: repeated steps take no more device memory", "[device_wide]") {
  const TargetModel m(kExample);
  target_forward_gpu f(m, 384, 1);
  const stream s;
  const auto F = static_cast<std::size_t>(m.feature_dim());
  std::vector<TokenBatch> batches;
  std::size_t most = 0;
  for (std::uint64_t step = 0; step < 20; ++step) {
    batches.push_back(batch(kExample, step));
    most = std::max(most, batches.back().tokens.size() * F);
  }
  device_floats out(most);
  auto pass = [&] {
    for (const TokenBatch& b : batches) f.enqueue(b.tokens, b.lengths, b.seq, out.p, b.tokens.size() * F, s.s, 0);
    ok(cudaStreamSynchronize(s.s), "cudaStreamSynchronize");
  };
  // The first pass loads every kernel these shapes use (lazy module loading
  // takes device memory) and initialises cuBLAS; the second must take nothing.
  pass();
  std::size_t free0 = 0, free1 = 0, total = 0;
  ok(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
  pass();
  ok(cudaMemGetInfo(&free1, &total), "cudaMemGetInfo");
  CHECK(free1 == free0);
}

TEST_CASE("bad input is refused before anything is enqueued") {
  const TargetModel m(kExample);
  target_forward_gpu f(m, 100, 1);  // sized for 100 tokens
  const stream s;
  const TokenBatch b = batch(kExample, 0);  // ~384 tokens
  const std::size_t n = b.tokens.size() * static_cast<std::size_t>(m.feature_dim());
  device_floats out(n);
  CHECK_THROWS_WITH(f.enqueue(b.tokens, b.lengths, b.seq, out.p, n, s.s, 0),
                    Catch::Contains("more than max_tokens = 100"));
  const std::vector<std::int32_t> tokens{1, 2, 0, 0}, lengths{2};
  CHECK_THROWS_WITH(f.enqueue(tokens, lengths, 4, out.p, 5, s.s, 0),
                    Catch::Contains("out has 5 floats, expected docs * seq * feature = 768"));
  CHECK_THROWS_WITH(f.enqueue(tokens, lengths, 4, out.p, 768, s.s, 1), Catch::Contains("worker 1 out of range"));
  CHECK_THROWS_WITH(f.enqueue(std::vector<std::int32_t>{1, 96, 0, 0}, lengths, 4, out.p, 768, s.s, 0),
                    Catch::Contains("token 96 is outside [0, vocab = 96)"));
  ok(cudaStreamSynchronize(s.s), "cudaStreamSynchronize");
  // Nothing was written: the buffer still holds its NaN fill.
  const std::vector<float> h = out.host();
  CHECK(std::isnan(h.front()));
  CHECK(std::isnan(h.back()));
}
