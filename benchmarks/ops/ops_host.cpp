// Host twins of the ops vs straightforward references, side by side.
//   build/<dir>/benchmarks/ops/ops_host --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <dflash/ops.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

using namespace dflash::ops;
using ivec = std::vector<std::int32_t>;
using bvec = std::vector<std::uint8_t>;

namespace {
ivec lengths_for(std::int64_t tokens, std::int32_t docs) {
  std::mt19937 rng(1);
  ivec l(static_cast<std::size_t>(docs));
  std::int64_t left = tokens;
  for (std::int32_t d = 0; d + 1 < docs; ++d) {
    const auto x = std::uniform_int_distribution<std::int64_t>(0, 2 * tokens / docs)(rng);
    l[static_cast<std::size_t>(d)] = static_cast<std::int32_t>(std::min(x, left));
    left -= l[static_cast<std::size_t>(d)];
  }
  l.back() = static_cast<std::int32_t>(left);
  return l;
}

void BM_doc_ids(benchmark::State& st) {
  const ivec l = lengths_for(st.range(0), static_cast<std::int32_t>(st.range(1)));
  ivec doc(static_cast<std::size_t>(st.range(0))), pos(doc.size());
  for (auto _ : st) {
    doc_ids(l, doc, pos);
    benchmark::DoNotOptimize(doc.data());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

void BM_doc_ids_naive(benchmark::State& st) {  // repeat_interleave with push_back
  const ivec l = lengths_for(st.range(0), static_cast<std::int32_t>(st.range(1)));
  ivec doc, pos;
  for (auto _ : st) {
    doc.clear();
    pos.clear();
    for (std::size_t d = 0; d < l.size(); ++d)
      for (std::int32_t i = 0; i < l[d]; ++i) {
        doc.push_back(static_cast<std::int32_t>(d));
        pos.push_back(i);
      }
    benchmark::DoNotOptimize(doc.data());
  }
  st.SetItemsProcessed(st.iterations() * st.range(0));
}

constexpr hidden_shape pack_shape{4, 2048, 1024};

template <class T>
struct pack_data {
  std::vector<T> padded = std::vector<T>(pack_shape.padded_elements());
  ivec lengths{2048, 1500, 700, 1};
  std::vector<T> packed = std::vector<T>(pack_shape.padded_elements());
  ivec cu = ivec(5);
  std::size_t moved() const {  // read + write of the valid rows
    return 2 * static_cast<std::size_t>(2048 + 1500 + 700 + 1) * pack_shape.hidden * sizeof(T);
  }
};

template <class T>
void BM_pack(benchmark::State& st) {
  pack_data<T> d;
  for (auto _ : st) {
    pack_hidden_states<T>(d.padded, pack_shape, d.lengths, d.packed, d.cu);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * d.moved()));
}

template <class T>
void BM_pack_naive(benchmark::State& st) {  // element-wise triple loop
  pack_data<T> d;
  for (auto _ : st) {
    std::size_t o = 0;
    for (int b = 0; b < pack_shape.batch; ++b)
      for (int t = 0; t < d.lengths[static_cast<std::size_t>(b)]; ++t)
        for (int h = 0; h < pack_shape.hidden; ++h)
          d.packed[o++] = d.padded[(static_cast<std::size_t>(b) * pack_shape.seq + t) * pack_shape.hidden + h];
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * d.moved()));
}

template <class T>
void BM_unpack(benchmark::State& st) {
  pack_data<T> d;
  pack_hidden_states<T>(d.padded, pack_shape, d.lengths, d.packed, d.cu);
  for (auto _ : st) {
    unpack_hidden_states<T>(d.packed, d.cu, pack_shape, d.padded);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * d.padded.size() * sizeof(T)));
}

struct mask_data {
  block_mask_params p{3072, static_cast<std::int32_t>(128), 16, 2048};
  doc_ids_result d = doc_ids(ivec{1000, 72, 2000});
  ivec anchors;
  bvec keep;
  mask_data() {
    std::mt19937 rng(3);
    for (int i = 0; i < p.num_blocks; ++i) anchors.push_back(std::uniform_int_distribution<int>(0, 3071)(rng));
    std::sort(anchors.begin(), anchors.end());
    keep.assign(anchors.size(), 1);
    keep.back() = 0;
  }
};

void BM_block_mask_sparse(benchmark::State& st) {
  mask_data m;
  for (auto _ : st) benchmark::DoNotOptimize(build_block_mask(m.p, {128, 128}, m.d, m.anchors, m.keep));
  st.SetItemsProcessed(st.iterations() * m.p.num_queries() * m.p.num_kv());
}

void BM_block_mask_dense_reference(benchmark::State& st) {
  mask_data m;
  for (auto _ : st) benchmark::DoNotOptimize(dense_block_mask(m.p, m.d.doc_id, m.anchors, m.keep));
  st.SetItemsProcessed(st.iterations() * m.p.num_queries() * m.p.num_kv());
}

struct anchor_data {
  std::int32_t seq = 3072;
  bvec mask = bvec(3072, 1);
  ivec lens{3072};
  ivec anchors = ivec(512);
  bvec keep = bvec(512);
  anchor_data() { std::fill(mask.begin(), mask.begin() + 300, std::uint8_t{0}); }
};

void BM_anchors(benchmark::State& st) {
  anchor_data a;
  std::uint64_t seed = 0;
  for (auto _ : st) {
    select_anchors({16, 512, seed++}, 1, a.seq, a.lens, a.mask, {}, a.anchors, a.keep);
    benchmark::DoNotOptimize(a.anchors.data());
  }
  st.SetItemsProcessed(st.iterations() * a.seq);
}

void BM_anchors_naive(benchmark::State& st) {  // full sort of (key, position) pairs
  anchor_data a;
  std::uint64_t seed = 0;
  for (auto _ : st) {
    std::vector<std::pair<std::uint64_t, int>> c;
    for (int p = 0; p + 16 <= a.seq; ++p)
      if (a.mask[static_cast<std::size_t>(p)]) c.emplace_back(anchor_key(seed, 0, static_cast<std::uint32_t>(p)), p);
    ++seed;
    std::sort(c.begin(), c.end());
    ivec chosen;
    for (std::size_t j = 0; j < std::min<std::size_t>(512, c.size()); ++j) chosen.push_back(c[j].second);
    std::sort(chosen.begin(), chosen.end());
    benchmark::DoNotOptimize(chosen.data());
  }
  st.SetItemsProcessed(st.iterations() * a.seq);
}

void BM_readback_host(benchmark::State& st) {  // the host twin's overhead per submit of 16 scalars
  host_batched_readback rb(16);
  float v[16] = {};
  for (std::size_t i = 0; i < 16; ++i) rb.stage(i, &v[i]);
  for (auto _ : st) {
    auto h = rb.submit();
    benchmark::DoNotOptimize(h.get<float>(15));
  }
}
}  // namespace

BENCHMARK(BM_doc_ids)->Args({3072, 64})->Args({1 << 20, 4096});
BENCHMARK(BM_doc_ids_naive)->Args({3072, 64})->Args({1 << 20, 4096});
BENCHMARK(BM_pack<float>);
BENCHMARK(BM_pack_naive<float>);
BENCHMARK(BM_pack<dflash::bf16>);
BENCHMARK(BM_pack_naive<dflash::bf16>);
BENCHMARK(BM_unpack<dflash::bf16>);
BENCHMARK(BM_block_mask_sparse);
BENCHMARK(BM_block_mask_dense_reference);
BENCHMARK(BM_anchors);
BENCHMARK(BM_anchors_naive);
BENCHMARK(BM_readback_host);
BENCHMARK_MAIN();
