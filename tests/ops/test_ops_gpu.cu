// Every op on the device against its host twin, bit for bit.
// Runs where a CUDA device exists; elsewhere gpu_test_main reports "skipped".
// Every output buffer (and every temp buffer) is poisoned with 0xAB bytes on the op's stream
// before the op runs, so an element a kernel fails to write cannot pass as a lucky zero from
// cudaMalloc: int32 0xABABABAB and uint8 0xAB are never valid outputs here.
#include <catch2/catch.hpp>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <dflash/ops.hpp>
#include <dflash/ops/anchors.cuh>
#include <dflash/ops/batched_readback.cuh>
#include <dflash/ops/block_mask.cuh>
#include <dflash/ops/doc_ids.cuh>
#include <dflash/ops/pack_hidden_states.cuh>
#include <dflash/device/cuda_backend.hpp>
#include <dflash/profile.hpp>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <random>
#include <vector>

#include "ops_test_util.hpp"

using namespace dflash::ops;
using ivec = std::vector<std::int32_t>;
using bvec = std::vector<std::uint8_t>;

namespace {
void ok(cudaError_t e) { REQUIRE(e == cudaSuccess); }

/// Device buffer of n T's (n may be 0), freed on scope exit.
template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) {
    if (n) ok(cudaMalloc(&p, n * sizeof(T)));
  }
  explicit dbuf(const std::vector<T>& v) : dbuf(v.size()) {
    if (n) ok(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  dbuf(const dbuf&) = delete;
  ~dbuf() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    if (n) ok(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

/// Fill with 0xAB bytes, stream-ordered before the op that follows on `s`.
template <class T>
void poison(const dbuf<T>& b, cudaStream_t s) {
  if (b.n) ok(cudaMemsetAsync(b.p, 0xAB, b.n * sizeof(T), s));
}

struct stream_guard {
  cudaStream_t s{};
  stream_guard() { ok(cudaStreamCreate(&s)); }
  ~stream_guard() { cudaStreamDestroy(s); }
};

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

__global__ void write_loss(float* slot, float v) { *slot = v; }

/// Busy for about `ns` nanoseconds of wall time (so event queries meanwhile say "not ready").
__global__ void busy_for(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

/// 4 bytes but 2-byte aligned: the element path must not copy it as a 4-byte word.
struct bf16_pair {
  dflash::bf16 lo, hi;
  bf16_pair() = default;
  explicit bf16_pair(float f) : lo(f), hi(-f) {}
};
static_assert(sizeof(bf16_pair) == 4 && alignof(bf16_pair) == 2);
}  // namespace

TEST_CASE("gpu doc_ids == host doc_ids", "[gpu][doc_ids]") {
  stream_guard st;
  std::mt19937 rng(11);
  std::vector<ivec> cases{{5}, {0, 0, 3, 0}, {1, 1, 1}, {0, 1 << 20, 0}};
  for (int i = 0; i < 30; ++i) cases.push_back(ops_test::random_lengths(rng, std::uniform_int_distribution<std::size_t>(1, 3000)(rng), 600));
  for (const ivec& lengths : cases) {
    const auto host = doc_ids(lengths);
    const auto n_docs = static_cast<std::int32_t>(lengths.size());
    const auto n_tokens = static_cast<std::int32_t>(host.doc_id.size());
    dbuf<std::int32_t> d_len(lengths), d_doc(host.doc_id.size()), d_pos(host.pos.size());
    const std::size_t bytes = gpu::doc_ids_temp_bytes(n_docs, n_tokens);
    dbuf<std::byte> temp(bytes);
    poison(d_doc, st.s);
    poison(d_pos, st.s);
    poison(temp, st.s);
    gpu::doc_ids(d_len.p, n_docs, d_doc.p, d_pos.p, n_tokens, temp.p, bytes, st.s);
    ok(cudaStreamSynchronize(st.s));
    REQUIRE(d_doc.get() == host.doc_id);
    REQUIRE(d_pos.get() == host.pos);
  }
  CHECK_THROWS_AS(gpu::doc_ids(nullptr, 2, nullptr, nullptr, 4, nullptr, 0, st.s), std::invalid_argument);
}

template <class Device, class Host>
void check_pack(hidden_shape s, std::size_t misalign, unsigned seed) {
  static_assert(sizeof(Device) == sizeof(Host));
  stream_guard st;
  std::mt19937 rng(seed);
  const ivec lengths = ops_test::random_lengths(rng, static_cast<std::size_t>(s.batch), s.seq);
  std::vector<Host> padded(s.padded_elements());
  for (auto& x : padded) x = Host(std::uniform_real_distribution<float>(-3, 3)(rng));
  ivec cu(static_cast<std::size_t>(s.batch) + 1);
  std::vector<Host> packed(padded.size());
  const auto total = pack_hidden_states<Host>(padded, s, lengths, packed, cu);
  packed.resize(static_cast<std::size_t>(total) * static_cast<std::size_t>(s.hidden));
  std::vector<Host> back(padded.size());
  unpack_hidden_states<Host>(packed, cu, s, back);

  // Offsetting both device pointers by `misalign` elements forces the element-wise path.
  dbuf<Host> d_padded(padded.size() + misalign), d_packed(padded.size() + misalign), d_back(padded.size() + misalign);
  if (!padded.empty())
    ok(cudaMemcpy(d_padded.p + misalign, padded.data(), padded.size() * sizeof(Host), cudaMemcpyHostToDevice));
  dbuf<std::int32_t> d_len(lengths), d_cu(cu.size());
  const std::size_t bytes = gpu::cu_seqlens_temp_bytes(s.batch);
  dbuf<std::byte> temp(bytes);
  poison(d_cu, st.s);
  poison(temp, st.s);
  poison(d_packed, st.s);
  poison(d_back, st.s);  // garbage: unpack must overwrite every element, padding included
  gpu::cu_seqlens(d_len.p, s.batch, d_cu.p, temp.p, bytes, st.s);
  auto* dp = reinterpret_cast<Device*>(d_padded.p + misalign);
  auto* dk = reinterpret_cast<Device*>(d_packed.p + misalign);
  auto* db = reinterpret_cast<Device*>(d_back.p + misalign);
  gpu::pack_hidden_states<Device>(dp, s, d_cu.p, dk, st.s);
  gpu::unpack_hidden_states<Device>(dk, d_cu.p, s, db, st.s);
  ok(cudaStreamSynchronize(st.s));
  REQUIRE(d_cu.get() == cu);
  std::vector<Host> got_packed(packed.size()), got_back(back.size());
  if (!packed.empty())
    ok(cudaMemcpy(got_packed.data(), d_packed.p + misalign, packed.size() * sizeof(Host), cudaMemcpyDeviceToHost));
  if (!back.empty())
    ok(cudaMemcpy(got_back.data(), d_back.p + misalign, back.size() * sizeof(Host), cudaMemcpyDeviceToHost));
  REQUIRE(same_bytes(got_packed, packed));
  REQUIRE(same_bytes(got_back, back));
}

TEST_CASE("gpu pack/unpack == host, vectorised and element-wise paths", "[gpu][pack]") {
  check_pack<float, float>({4, 300, 256}, 0, 1);               // 16-byte path
  check_pack<float, float>({3, 50, 7}, 0, 2);                  // odd row: element path
  check_pack<float, float>({2, 64, 64}, 1, 3);                 // misaligned: element path
  check_pack<__nv_bfloat16, dflash::bf16>({4, 128, 4096}, 0, 4);  // bf16 16-byte path
  check_pack<__nv_bfloat16, dflash::bf16>({5, 33, 13}, 0, 5);
  check_pack<dflash::bf16, dflash::bf16>({1, 3072, 64}, 3, 6);  // batch of 1, misaligned
  check_pack<float, float>({3, 0, 8}, 0, 7);                   // seq 0
}

TEST_CASE("gpu pack/unpack of an under-aligned 4-byte type at a 2 mod 4 address", "[gpu][pack]") {
  stream_guard st;
  const hidden_shape s{3, 40, 9};
  std::mt19937 rng(8);
  const ivec lengths = ops_test::random_lengths(rng, static_cast<std::size_t>(s.batch), s.seq);
  std::vector<bf16_pair> padded(s.padded_elements());
  for (auto& x : padded) x = bf16_pair(std::uniform_real_distribution<float>(-3, 3)(rng));
  ivec cu(static_cast<std::size_t>(s.batch) + 1);
  std::vector<bf16_pair> packed(padded.size());
  const auto total = pack_hidden_states<bf16_pair>(padded, s, lengths, packed, cu);
  REQUIRE(total > 0);
  packed.resize(static_cast<std::size_t>(total) * static_cast<std::size_t>(s.hidden));
  std::vector<bf16_pair> back(padded.size());
  unpack_hidden_states<bf16_pair>(packed, cu, s, back);

  // Buffers of bf16 (2-byte units): one unit in, the pairs sit at 2 mod 4 bytes.
  dbuf<dflash::bf16> d_padded(2 * padded.size() + 1), d_packed(2 * padded.size() + 1), d_back(2 * padded.size() + 1);
  auto* dp = reinterpret_cast<bf16_pair*>(d_padded.p + 1);
  auto* dk = reinterpret_cast<bf16_pair*>(d_packed.p + 1);
  auto* db = reinterpret_cast<bf16_pair*>(d_back.p + 1);
  REQUIRE(reinterpret_cast<std::uintptr_t>(dp) % 4 == 2);
  ok(cudaMemcpy(dp, padded.data(), padded.size() * sizeof(bf16_pair), cudaMemcpyHostToDevice));
  dbuf<std::int32_t> d_cu(cu);
  poison(d_packed, st.s);
  poison(d_back, st.s);
  gpu::pack_hidden_states<bf16_pair>(dp, s, d_cu.p, dk, st.s);
  gpu::unpack_hidden_states<bf16_pair>(dk, d_cu.p, s, db, st.s);
  ok(cudaStreamSynchronize(st.s));
  std::vector<bf16_pair> got_packed(packed.size()), got_back(back.size());
  ok(cudaMemcpy(got_packed.data(), dk, packed.size() * sizeof(bf16_pair), cudaMemcpyDeviceToHost));
  ok(cudaMemcpy(got_back.data(), db, back.size() * sizeof(bf16_pair), cudaMemcpyDeviceToHost));
  REQUIRE(same_bytes(got_packed, packed));
  REQUIRE(same_bytes(got_back, back));
}

TEST_CASE("gpu batched read-back: one copy brings slots and staged scalars", "[gpu][readback]") {
  stream_guard st;
  gpu::cuda_batched_readback rb(100);  // depth 2: two pinned host buffers
  // Poison the staging slots and, through two submits, both host buffers: the real submit below
  // reuses host buffer 0, so a slot it fails to copy would read back as 0xAB bytes.
  ok(cudaMemsetAsync(rb.slot<std::uint64_t>(0), 0xAB, rb.bytes(), st.s));
  const auto p0 = rb.submit(st.s);
  const auto p1 = rb.submit(st.s);
  CHECK(p0.get<std::uint64_t>(99) == 0xABABABABABABABABull);
  CHECK(p1.get<std::uint64_t>(0) == 0xABABABABABABABABull);
  write_loss<<<1, 1, 0, st.s>>>(rb.slot<float>(0), 2.5f);
  ivec counts(99);
  for (int i = 0; i < 99; ++i) counts[static_cast<std::size_t>(i)] = i * 7 - 3;
  dbuf<std::int32_t> d_counts(counts);
  for (std::size_t i = 0; i < 99; ++i) rb.stage(i + 1, d_counts.p + i);  // > 64: two gather launches
  auto h = rb.submit(st.s);
  h.wait();
  CHECK(h.ready());
  CHECK(h.get<float>(0) == 2.5f);
  bool all = true;
  for (std::size_t i = 0; i < 99; ++i) all = all && h.get<std::int32_t>(i + 1) == counts[i];
  CHECK(all);
  // Staging a slot again replaces its source: slot 1 reads the last one, whole (two
  // sources in one gather would race byte by byte).
  rb.stage(1, d_counts.p + 98);
  const auto h2 = rb.submit(st.s);
  CHECK(rb.staged() == 99);
  CHECK(h2.get<std::int32_t>(1) == counts[98]);
  // The host twin gives the same values through the same API.
  host_batched_readback hb(2);
  *hb.slot<float>(0) = 2.5f;
  hb.stage(1, &counts[5]);
  auto hh = hb.submit();
  CHECK(hh.get<float>(0) == h.get<float>(0));
  CHECK(hh.get<std::int32_t>(1) == h.get<std::int32_t>(6));
}

TEST_CASE("gpu block mask == host block mask", "[gpu][block_mask]") {
  stream_guard st;
  std::mt19937 rng(21);
  constexpr std::int32_t max = std::numeric_limits<std::int32_t>::max();
  const tile_shape tiles[] = {{128, 128}, {16, 64}, {1, 1}, {5, 300}, {max, max}, {max - 1, 7}};  // last two: one tile
  for (int iter = 0; iter < 60; ++iter) {
    const ivec lengths = ops_test::random_lengths(rng, std::uniform_int_distribution<std::size_t>(1, 12)(rng), 800);
    auto d = doc_ids(lengths);
    if (d.doc_id.empty()) d = doc_ids(ivec{1});
    block_mask_params p{static_cast<std::int32_t>(d.doc_id.size()), std::uniform_int_distribution<int>(0, 600)(rng),
                        std::uniform_int_distribution<int>(1, 16)(rng),
                        iter % 2 ? 0 : std::uniform_int_distribution<int>(1, 1000)(rng)};
    if (iter % 7 == 0) p.num_blocks = std::uniform_int_distribution<int>(0, 3)(rng);
    ivec anchors;
    bvec keep;
    for (int i = 0; i < p.num_blocks; ++i) {
      keep.push_back(std::uniform_int_distribution<int>(0, 5)(rng) != 0);
      anchors.push_back(keep.back() ? std::uniform_int_distribution<int>(0, p.context_len - 1)(rng) : 0);
    }
    const tile_shape t = tiles[iter % 6];
    const auto host = build_block_mask(p, t, d, anchors, keep);
    dbuf<std::int32_t> d_pos(d.pos), d_anchors(anchors);
    dbuf<std::uint8_t> d_keep(keep);
    dbuf<std::int32_t> nb(host.kv_num_blocks.size()), ix(host.kv_indices.size()), fnb(host.full_kv_num_blocks.size()),
        fix(host.full_kv_indices.size());
    poison(nb, st.s);
    poison(ix, st.s);
    poison(fnb, st.s);
    poison(fix, st.s);
    gpu::build_block_mask(p, t, d_pos.p, d_anchors.p, d_keep.p, block_sparse_view{nb.p, ix.p, fnb.p, fix.p}, st.s);
    ok(cudaStreamSynchronize(st.s));
    INFO("iter " << iter);
    REQUIRE(nb.get() == host.kv_num_blocks);
    REQUIRE(ix.get() == host.kv_indices);
    REQUIRE(fnb.get() == host.full_kv_num_blocks);
    REQUIRE(fix.get() == host.full_kv_indices);
  }
}

TEST_CASE("gpu anchors == host anchors for the same seed", "[gpu][anchors]") {
  stream_guard st;
  std::mt19937 rng(31);
  for (int iter = 0; iter < 40; ++iter) {
    const std::int32_t batch = std::uniform_int_distribution<int>(1, 4)(rng);
    const std::int32_t seq = iter == 0 ? 3072 : std::uniform_int_distribution<int>(0, 2000)(rng);
    ivec lens, docs;
    bvec mask;
    for (int b = 0; b < batch; ++b) {
      lens.push_back(std::uniform_int_distribution<int>(0, seq)(rng));
      int doc = 0;
      for (int s = 0; s < seq; ++s) {
        mask.push_back(std::bernoulli_distribution(0.7)(rng));
        doc += std::bernoulli_distribution(0.002)(rng);
        docs.push_back(doc);
      }
    }
    if (iter % 2) docs.clear();
    const anchor_params a{std::uniform_int_distribution<int>(1, 16)(rng), iter == 0 ? 512 : std::uniform_int_distribution<int>(0, 600)(rng), rng()};
    ivec h_anchors(static_cast<std::size_t>(batch * a.num_anchors));
    bvec h_keep(h_anchors.size());
    select_anchors(a, batch, seq, lens, mask, docs, h_anchors, h_keep);

    dbuf<std::int32_t> d_lens(lens), d_docs(docs), d_anchors(h_anchors.size());
    dbuf<std::uint8_t> d_mask(mask), d_keep(h_keep.size());
    const std::size_t bytes = gpu::anchors_temp_bytes(batch, seq);
    dbuf<std::byte> temp(bytes);
    poison(d_anchors, st.s);
    poison(d_keep, st.s);
    poison(temp, st.s);
    gpu::select_anchors(a, batch, seq, d_lens.p, d_mask.p, docs.empty() ? nullptr : d_docs.p, d_anchors.p, d_keep.p,
                        temp.p, bytes, st.s);
    ok(cudaStreamSynchronize(st.s));
    INFO("iter " << iter << " batch " << batch << " seq " << seq);
    REQUIRE(d_anchors.get() == h_anchors);
    REQUIRE(d_keep.get() == h_keep);
  }
}

TEST_CASE("gpu anchors with block_size near INT32_MAX: no block fits, as on the host", "[gpu][anchors][limits]") {
  stream_guard st;
  constexpr std::int32_t max = std::numeric_limits<std::int32_t>::max();
  const std::int32_t batch = 2, seq = 10;
  const ivec lens{10, 7}, docs{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const bvec mask(20, 1);
  for (const std::int32_t B : {max, max - 1, max - 9, 1 << 30, 5}) {
    INFO("block_size " << B);
    const anchor_params a{B, 4, 3};
    ivec h_anchors(8);
    bvec h_keep(8);
    select_anchors(a, batch, seq, lens, mask, docs, h_anchors, h_keep);
    dbuf<std::int32_t> d_lens(lens), d_docs(docs), d_anchors(8);
    dbuf<std::uint8_t> d_mask(mask), d_keep(8);
    const std::size_t bytes = gpu::anchors_temp_bytes(batch, seq);
    dbuf<std::byte> temp(bytes);
    poison(d_anchors, st.s);
    poison(d_keep, st.s);
    poison(temp, st.s);
    gpu::select_anchors(a, batch, seq, d_lens.p, d_mask.p, d_docs.p, d_anchors.p, d_keep.p, temp.p, bytes, st.s);
    ok(cudaStreamSynchronize(st.s));
    CHECK(d_anchors.get() == h_anchors);
    CHECK(d_keep.get() == h_keep);
    CHECK(h_keep[0] == (B == 5 ? 1 : 0));  // control: blocks of 5 fit (row 0 at 0 and 5)
  }
  CHECK_THROWS_AS(gpu::anchors_temp_bytes(1 << 12, anchor_max_seq), std::overflow_error);  // batch * seq > INT_MAX
}

TEST_CASE("gpu pack/unpack reject a shape whose size wraps size_t", "[gpu][pack][limits]") {
  stream_guard st;
  const hidden_shape huge{16, 1 << 30, 1 << 30};
  CHECK_THROWS_AS(gpu::pack_hidden_states<float>(nullptr, huge, nullptr, nullptr, st.s), std::overflow_error);
  CHECK_THROWS_AS(gpu::unpack_hidden_states<float>(nullptr, nullptr, huge, nullptr, st.s), std::overflow_error);
}

TEST_CASE("gpu ops record under the ops keys", "[gpu][profile]") {
  stream_guard st;
  dflash::AccumulatingProfiler<keys> prof;
  dbuf<std::int32_t> len(ivec{2}), doc(2), pos(2);
  const std::size_t bytes = gpu::doc_ids_temp_bytes(1, 2);
  dbuf<std::byte> temp(bytes);
  poison(doc, st.s);
  poison(pos, st.s);
  gpu::doc_ids(len.p, 1, doc.p, pos.p, 2, temp.p, bytes, st.s, dflash::profiler_ref(prof));
  ok(cudaStreamSynchronize(st.s));
  CHECK(prof.snapshot().find("doc_ids")->count == 1);
  CHECK(pos.get() == ivec{0, 1});
  CHECK(doc.get() == ivec{0, 0});
}

// Queries of busy events and streams answer cudaErrorNotReady; none may leave
// it as the thread's last error (the caller's next launch check would report a
// launch that did not fail), and a failed launch is reported once, not by
// every later check. (CudaEventProfiler's poll: test_cuda_event_profiler_gpu.)
TEST_CASE("busy queries leave no error behind; a failed launch is reported once", "[gpu][errors]") {
  ok(cudaGetLastError());
  dflash::cuda_backend cb;
  const cudaStream_t s = cb.create_stream();
  busy_for<<<1, 1, 0, s>>>(200000000ull);  // 200 ms
  ok(cudaGetLastError());

  gpu::cuda_readback_backend rb;
  const cudaEvent_t re = rb.create_event();
  rb.record(re, s);
  CHECK_FALSE(rb.query(re));
  CHECK(cudaPeekAtLastError() == cudaSuccess);

  const cudaEvent_t be = cb.create_event(false);
  cb.record(be, s);
  CHECK_FALSE(cb.query(be));
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK_NOTHROW(cb.check(s));  // busy is not an error
  CHECK(cudaPeekAtLastError() == cudaSuccess);

  // A caller's own busy query may leave cudaErrorNotReady behind; the ops that run CUB
  // (which checks cudaPeekAtLastError after its launches) must not report it as theirs.
  busy_for<<<1, 1, 0, s>>>(200000000ull);
  if (cudaStreamQuery(s) == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) {
    dbuf<std::int32_t> len(ivec{2, 1}), cu(ivec{0, 0, 0}), doc(ivec{0, 0, 0}), pos(ivec{0, 0, 0});
    dbuf<std::byte> t1(gpu::cu_seqlens_temp_bytes(2));
    CHECK_NOTHROW(gpu::cu_seqlens(len.p, 2, cu.p, t1.p, gpu::cu_seqlens_temp_bytes(2), s));
    (void)cudaStreamQuery(s);
    dbuf<std::byte> t2(gpu::doc_ids_temp_bytes(2, 3));
    CHECK_NOTHROW(gpu::doc_ids(len.p, 2, doc.p, pos.p, 3, t2.p, gpu::doc_ids_temp_bytes(2, 3), s));
    cb.synchronize(s);
    CHECK(cu.get() == ivec{0, 2, 3});
    CHECK(doc.get() == ivec{0, 0, 1});
  } else {
    WARN("this runtime kept no cudaErrorNotReady after a busy cudaStreamQuery: nothing to check");
    cb.synchronize(s);
  }
  (void)cudaGetLastError();

  busy_for<<<1, 2048, 0, s>>>(0);  // more threads per block than allowed: the launch fails (not sticky)
  CHECK_THROWS_WITH(cb.check(s), Catch::Matchers::Contains("launch"));
  CHECK_NOTHROW(cb.check(s));  // reported once
  cb.synchronize(s);
  rb.destroy_event(re);
  cb.destroy_event(be);
  cb.destroy_stream(s);
}
