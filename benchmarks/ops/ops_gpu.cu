// GPU ops: effective bandwidth (bytes moved / time, from CUDA events) next to
// the device's copy peak (cudaMemcpy D2D) measured first in the same run;
// each op also reports frac_of_d2d_peak. The GPU bundle's run.sh
// (scripts/gpu-bundle.sh) runs it and reports every op against BM_d2d_peak.
//   ops_gpu --benchmark_counters_tabular=true
// No device: exit 77 (skipped), never 0; DFLASH_REQUIRE_GPU=1: exit 1.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <dflash/ops.hpp>
#include <dflash/ops/anchors.cuh>
#include <dflash/ops/batched_readback.cuh>
#include <dflash/ops/block_mask.cuh>
#include <dflash/ops/doc_ids.cuh>
#include <dflash/ops/pack_hidden_states.cuh>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gpu_probe.hpp"

using namespace dflash::ops;

namespace {
void ok(cudaError_t e) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
}

double g_peak_bytes_per_s = 0;  // set by BM_d2d_peak, which runs first

/// Times `f` (enqueueing work on `s`) per iteration with events; bytes = bytes moved per call.
template <class F>
void run_timed(benchmark::State& st, cudaStream_t s, double bytes, F&& f) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a));
  ok(cudaEventCreate(&b));
  f();  // warm-up
  ok(cudaStreamSynchronize(s));
  double total_s = 0;
  for (auto _ : st) {
    ok(cudaEventRecord(a, s));
    f();
    ok(cudaEventRecord(b, s));
    ok(cudaEventSynchronize(b));
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b));
    st.SetIterationTime(ms / 1e3);
    total_s += ms / 1e3;
  }
  const double bw = bytes * static_cast<double>(st.iterations()) / total_s;
  st.counters["bytes_per_second"] = benchmark::Counter(bw);
  if (g_peak_bytes_per_s > 0) st.counters["frac_of_d2d_peak"] = bw / g_peak_bytes_per_s;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

struct dmem {
  void* p = nullptr;
  explicit dmem(std::size_t n) { ok(cudaMalloc(&p, n ? n : 1)); }
  ~dmem() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

struct stream {
  cudaStream_t s{};
  stream() { ok(cudaStreamCreate(&s)); }
  ~stream() { cudaStreamDestroy(s); }
};

void BM_d2d_peak(benchmark::State& st) {
  const std::size_t n = std::size_t{1} << 30;  // 1 GiB: read 1 + write 1
  dmem a(n), b(n);
  stream s;
  run_timed(st, s.s, 2.0 * n, [&] { ok(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice, s.s)); });
  g_peak_bytes_per_s = st.counters["bytes_per_second"];
}

template <class T>
void BM_pack(benchmark::State& st) {
  const hidden_shape shape{8, 3072, static_cast<std::int32_t>(st.range(0))};
  std::vector<std::int32_t> lengths{3072, 3000, 2048, 1024, 3072, 17, 2500, 1};
  std::vector<std::int32_t> cu(9);
  const std::int32_t total = cu_seqlens(lengths, shape.seq, cu);
  const std::size_t bytes = shape.padded_elements() * sizeof(T);
  dmem padded(bytes), packed(bytes), d_cu(cu.size() * 4);
  ok(cudaMemcpy(d_cu.p, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  stream s;
  const double moved = 2.0 * total * shape.hidden * sizeof(T);
  run_timed(st, s.s, moved, [&] { gpu::pack_hidden_states<T>(padded.as<T>(), shape, d_cu.as<std::int32_t>(), packed.as<T>(), s.s); });
}

void BM_unpack_bf16(benchmark::State& st) {
  const hidden_shape shape{8, 3072, 4096};
  std::vector<std::int32_t> lengths{3072, 3000, 2048, 1024, 3072, 17, 2500, 1};
  std::vector<std::int32_t> cu(9);
  const std::int32_t total = cu_seqlens(lengths, shape.seq, cu);
  const std::size_t bytes = shape.padded_elements() * 2;
  dmem padded(bytes), packed(bytes), d_cu(cu.size() * 4);
  ok(cudaMemcpy(d_cu.p, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  stream s;
  const double moved = static_cast<double>(total) * shape.hidden * 2 + static_cast<double>(bytes);  // read packed, write padded
  run_timed(st, s.s, moved, [&] {
    gpu::unpack_hidden_states<__nv_bfloat16>(packed.as<__nv_bfloat16>(), d_cu.as<std::int32_t>(), shape,
                                             padded.as<__nv_bfloat16>(), s.s);
  });
}

void BM_doc_ids(benchmark::State& st) {
  const std::int32_t tokens = static_cast<std::int32_t>(st.range(0)), docs = static_cast<std::int32_t>(st.range(1));
  std::vector<std::int32_t> lengths(static_cast<std::size_t>(docs), tokens / docs);
  lengths.back() += tokens - tokens / docs * docs;
  dmem d_len(lengths.size() * 4), doc(static_cast<std::size_t>(tokens) * 4), pos(static_cast<std::size_t>(tokens) * 4);
  ok(cudaMemcpy(d_len.p, lengths.data(), lengths.size() * 4, cudaMemcpyHostToDevice));
  const std::size_t tb = gpu::doc_ids_temp_bytes(docs, tokens);
  dmem temp(tb);
  stream s;
  // Minimum traffic: write doc and pos (4 B each per token).
  run_timed(st, s.s, 8.0 * tokens, [&] {
    gpu::doc_ids(d_len.as<std::int32_t>(), docs, doc.as<std::int32_t>(), pos.as<std::int32_t>(), tokens, temp.p, tb, s.s);
  });
}

void BM_anchors(benchmark::State& st) {
  const std::int32_t batch = 1, seq = 3072;
  std::vector<std::uint8_t> mask(seq, 1);
  std::vector<std::int32_t> lens{seq};
  dmem d_mask(seq), d_lens(4), anchors(512 * 4), keep(512);
  ok(cudaMemcpy(d_mask.p, mask.data(), seq, cudaMemcpyHostToDevice));
  ok(cudaMemcpy(d_lens.p, lens.data(), 4, cudaMemcpyHostToDevice));
  const std::size_t tb = gpu::anchors_temp_bytes(batch, seq);
  dmem temp(tb);
  stream s;
  run_timed(st, s.s, static_cast<double>(seq), [&] {
    gpu::select_anchors({16, 512, 1}, batch, seq, d_lens.as<std::int32_t>(), d_mask.as<std::uint8_t>(), nullptr,
                        anchors.as<std::int32_t>(), keep.as<std::uint8_t>(), temp.p, tb, s.s);
  });
}

void BM_block_mask(benchmark::State& st) {
  const block_mask_params p{3072, 512, 16, 2048};
  const tile_shape t{128, 128};
  std::vector<std::int32_t> pos(3072), anchors(512);
  for (int i = 0; i < 3072; ++i) pos[static_cast<std::size_t>(i)] = i;
  for (int i = 0; i < 512; ++i) anchors[static_cast<std::size_t>(i)] = i * 6;
  std::vector<std::uint8_t> keep(512, 1);
  const auto nqt = tiles_for(p.num_queries(), t.q), nkt = tiles_for(p.num_kv(), t.kv);
  dmem d_pos(3072 * 4), d_anchors(512 * 4), d_keep(512), nb(nqt * 4), ix(std::size_t(nqt) * nkt * 4), fnb(nqt * 4),
      fix(std::size_t(nqt) * nkt * 4);
  ok(cudaMemcpy(d_pos.p, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice));
  ok(cudaMemcpy(d_anchors.p, anchors.data(), anchors.size() * 4, cudaMemcpyHostToDevice));
  ok(cudaMemcpy(d_keep.p, keep.data(), keep.size(), cudaMemcpyHostToDevice));
  stream s;
  const block_sparse_view v{nb.as<std::int32_t>(), ix.as<std::int32_t>(), fnb.as<std::int32_t>(), fix.as<std::int32_t>()};
  run_timed(st, s.s, 2.0 * nqt * nkt * 4 + 8.0 * nqt, [&] {
    gpu::build_block_mask(p, t, d_pos.as<std::int32_t>(), d_anchors.as<std::int32_t>(), d_keep.as<std::uint8_t>(), v, s.s);
  });
}

/// 16 scalars: one batched submit + wait vs 16 synchronous cudaMemcpy reads (the `.item()` pattern).
void BM_readback_batched(benchmark::State& st) {
  stream s;
  gpu::cuda_batched_readback rb(16);
  dmem src(16 * 4);
  for (std::size_t i = 0; i < 16; ++i) rb.stage(i, src.as<float>() + i);
  for (auto _ : st) benchmark::DoNotOptimize(rb.submit(s.s).get<float>(15));
}

void BM_readback_per_scalar(benchmark::State& st) {
  stream s;
  dmem src(16 * 4);
  float v = 0;
  for (auto _ : st)
    for (int i = 0; i < 16; ++i) {
      ok(cudaMemcpyAsync(&v, src.as<float>() + i, 4, cudaMemcpyDeviceToHost, s.s));
      ok(cudaStreamSynchronize(s.s));
      benchmark::DoNotOptimize(v);
    }
}
}  // namespace

BENCHMARK(BM_d2d_peak)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pack<float>)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pack<__nv_bfloat16>)->Arg(4096)->Arg(4100)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_unpack_bf16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_doc_ids)->Args({3072, 8})->Args({1 << 24, 4096})->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_anchors)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_block_mask)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_readback_batched)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_readback_per_scalar)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  if (const auto code = dflash_test::check_gpu("ops_gpu")) return *code;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
