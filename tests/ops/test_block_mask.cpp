#include <catch2/catch.hpp>
#include <dflash/ops/block_mask.hpp>
#include <dflash/ops/doc_ids.hpp>
#include <dflash/profile.hpp>

#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops_test_util.hpp"

using namespace dflash::ops;
using ivec = std::vector<std::int32_t>;
using bvec = std::vector<std::uint8_t>;

namespace {
struct mask_case {
  block_mask_params p;
  ivec doc, pos, anchors;
  bvec keep;
};

mask_case random_case(std::mt19937& rng) {
  mask_case c;
  const ivec lengths = ops_test::random_lengths(rng, std::uniform_int_distribution<std::size_t>(1, 6)(rng), 40);
  auto d = doc_ids(lengths);
  c.doc = std::move(d.doc_id);
  c.pos = std::move(d.pos);
  if (c.doc.empty()) {  // keep at least one context token
    c.doc = {0};
    c.pos = {0};
  }
  c.p.context_len = static_cast<std::int32_t>(c.doc.size());
  c.p.block_size = std::uniform_int_distribution<int>(1, 8)(rng);
  c.p.num_blocks = std::uniform_int_distribution<int>(0, 12)(rng);
  c.p.window = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, 30)(rng);
  for (int i = 0; i < c.p.num_blocks; ++i) {
    const bool k = std::uniform_int_distribution<int>(0, 4)(rng) != 0;
    c.keep.push_back(k);
    // Invalid slots carry junk anchors on purpose: they must be ignored.
    c.anchors.push_back(k ? std::uniform_int_distribution<int>(0, c.p.context_len - 1)(rng) : -12345);
  }
  return c;
}

/// Tile kind from the dense oracle, counting in-range pairs only.
tile_kind dense_kind(const dense_mask& d, tile_shape t, int qt, int kt) {
  long n = 0, on = 0;
  for (int q = qt * t.q; q < std::min(d.rows, (qt + 1) * t.q); ++q)
    for (int kv = kt * t.kv; kv < std::min(d.cols, (kt + 1) * t.kv); ++kv) {
      ++n;
      on += d(q, kv);
    }
  return on == 0 ? tile_kind::empty : on == n ? tile_kind::full : tile_kind::partial;
}
}  // namespace

TEST_CASE("dense mask on a hand-written case", "[block_mask]") {
  // Context: doc 0 = tokens 0..2, doc 1 = tokens 3..7. Two blocks of 2, window 2.
  const block_mask_params p{8, 2, 2, 2};
  const ivec doc{0, 0, 0, 1, 1, 1, 1, 1};
  const auto m = dense_block_mask(p, doc, ivec{2, 6}, bvec{1, 1});
  REQUIRE(m.rows == 4);
  REQUIRE(m.cols == 12);
  auto row = [&](int q) {
    std::string s;
    for (int kv = 0; kv < m.cols; ++kv) s += m(q, kv) ? '1' : '.';
    return s;
  };
  //                ctx      | blk0 blk1
  CHECK(row(0) == "11......11..");  // anchor 2: tokens 0, 1 (doc 0, window 2), own block
  CHECK(row(1) == "11......11..");
  CHECK(row(2) == "....11....11");  // anchor 6: tokens 4, 5 (window cuts 3)
  CHECK(row(3) == "....11....11");
  const auto full = dense_block_mask({8, 2, 2, 0}, doc, ivec{2, 6}, bvec{1, 0});
  CHECK(full(2, 10) == false);  // invalid block sees nothing, not even itself
  int on = 0;
  for (int kv = 0; kv < 12; ++kv) on += full(0, kv);
  CHECK(on == 4);
  CHECK(full(0, 0));
  CHECK(full(0, 1));
  CHECK_FALSE(full(0, 2));  // strictly before the anchor
}

TEST_CASE("block-sparse form equals the dense oracle on random inputs", "[block_mask]") {
  std::mt19937 rng(99);
  const tile_shape tiles[] = {{1, 1}, {2, 3}, {4, 4}, {8, 16}, {16, 8}, {128, 128}, {5, 7}};
  for (int iter = 0; iter < 400; ++iter) {
    const mask_case c = random_case(rng);
    const tile_shape t = tiles[iter % 7];
    const dense_mask d = dense_block_mask(c.p, c.doc, c.anchors, c.keep);
    const block_sparse_mask m = build_block_mask(c.p, t, packed_docs{c.doc, c.pos}, c.anchors, c.keep);
    const block_mask_mod mod{c.p, c.anchors.data(), c.keep.data(), c.pos.data()};
    INFO("iter " << iter << " S=" << c.p.context_len << " N=" << c.p.num_blocks << " B=" << c.p.block_size
                 << " W=" << c.p.window << " tile " << t.q << "x" << t.kv);
    REQUIRE(m.num_q_tiles == tiles_for(d.rows, t.q));
    REQUIRE(m.num_kv_tiles == tiles_for(d.cols, t.kv));
    REQUIRE(expand_block_mask(m) == d);
    REQUIRE_NOTHROW(m.check_mod(mod));  // the hand-built rule is the mask's own
    bool kinds_ok = true, mod_ok = true, layout_ok = true;
    for (int qt = 0; qt < m.num_q_tiles; ++qt) {
      for (int kt = 0; kt < m.num_kv_tiles; ++kt) kinds_ok = kinds_ok && m.kind(qt, kt) == dense_kind(d, t, qt, kt);
      const auto part = m.partial(qt), full = m.full(qt);
      layout_ok = layout_ok && std::is_sorted(part.begin(), part.end()) && std::is_sorted(full.begin(), full.end());
      for (std::size_t j = part.size(); j < static_cast<std::size_t>(m.num_kv_tiles); ++j)
        layout_ok = layout_ok && m.kv_indices[static_cast<std::size_t>(qt * m.num_kv_tiles) + j] == 0;
      for (std::size_t j = full.size(); j < static_cast<std::size_t>(m.num_kv_tiles); ++j)
        layout_ok = layout_ok && m.full_kv_indices[static_cast<std::size_t>(qt * m.num_kv_tiles) + j] == 0;
    }
    for (int q = 0; q < d.rows; ++q)
      for (int kv = 0; kv < d.cols; ++kv) mod_ok = mod_ok && mod(q, kv) == d(q, kv);
    REQUIRE(kinds_ok);  // full is never reported as partial, nor partial as full
    REQUIRE(mod_ok);
    REQUIRE(layout_ok);
  }
}

TEST_CASE("one huge document with a sliding window gives a banded tile pattern", "[block_mask]") {
  const std::int32_t S = 4096, B = 16, N = 4;
  const ivec doc(S, 0);
  ivec pos(S);
  for (int i = 0; i < S; ++i) pos[static_cast<std::size_t>(i)] = i;
  const ivec anchors{1024, 2048, 3000, 4000};
  const bvec keep{1, 1, 1, 1};
  const block_mask_params p{S, N, B, 1024};
  const auto m = build_block_mask(p, {16, 128}, packed_docs{doc, pos}, anchors, keep);
  REQUIRE(m.num_q_tiles == 4);  // one query tile per block
  // Block 0: context 0..1023 = kv tiles 0..7, all full; own block kv 4096..4111 is partial tile 32.
  CHECK(std::vector<std::int32_t>(m.full(0).begin(), m.full(0).end()) == ivec{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(std::vector<std::int32_t>(m.partial(0).begin(), m.partial(0).end()) == ivec{32});
  // Block 2: context 1976..2999: tile 15 partial (1976..2047), tiles 16..22 full, tile 23 partial (2944..2999).
  CHECK(std::vector<std::int32_t>(m.full(2).begin(), m.full(2).end()) == ivec{16, 17, 18, 19, 20, 21, 22});
  CHECK(std::vector<std::int32_t>(m.partial(2).begin(), m.partial(2).end()) == ivec{15, 23, 32});
  CHECK(expand_block_mask(m) == dense_block_mask(p, doc, anchors, keep));
}

TEST_CASE("block mask rejects bad input with a clear message", "[block_mask]") {
  const ivec doc{0, 0, 1}, pos{0, 1, 0};
  const packed_docs docs{doc, pos};
  const ivec a{1};
  const bvec k{1};
  CHECK_THROWS_WITH(build_block_mask({3, 1, 0, 0}, {}, docs, a, k), Catch::Contains("block_size = 0 must be positive"));
  CHECK_THROWS_WITH(build_block_mask({3, 1, 2, -1}, {}, docs, a, k), Catch::Contains("window = -1 is negative"));
  CHECK_THROWS_WITH(build_block_mask({3, 1, 2, 0}, {0, 8}, docs, a, k), Catch::Contains("tile sizes must be positive"));
  CHECK_THROWS_WITH(build_block_mask({4, 1, 2, 0}, {}, docs, a, k), Catch::Contains("doc_ids has 3 elements, expected 4"));
  CHECK_THROWS_WITH(build_block_mask({3, 2, 2, 0}, {}, docs, a, k), Catch::Contains("anchors has 1 elements, expected 2"));
  CHECK_THROWS_WITH(build_block_mask({3, 1, 2, 0}, {}, docs, ivec{3}, k), Catch::Contains("anchors[0] = 3 is outside the context [0, 3)"));
  CHECK_NOTHROW(build_block_mask({3, 1, 2, 0}, {}, docs, ivec{-5}, bvec{0}));  // invalid slot: ignored
  CHECK_THROWS_WITH(build_block_mask({3, 1, 2, 0}, {}, packed_docs{ivec{0, 1, 0}, ivec{0, 0, 0}}, a, k), Catch::Contains("doc_ids must be non-decreasing"));
  CHECK_THROWS_WITH(build_block_mask({3, 1, 2, 0}, {}, packed_docs{doc, ivec{0, 1, 2}}, a, k), Catch::Contains("pos[2] = 2 is not the position"));
  CHECK_THROWS_AS(dense_block_mask({3, 1, 2, 0}, ivec{0}, a, k), std::invalid_argument);
}

TEST_CASE("build_block_mask records under the block_mask key", "[block_mask][profile]") {
  dflash::AccumulatingProfiler<dflash::ops::keys> prof;
  (void)build_block_mask({2, 1, 1, 0}, {}, packed_docs{ivec{0, 0}, ivec{0, 1}}, ivec{1}, bvec{1}, dflash::profiler_ref(prof));
  CHECK(prof.snapshot().find("block_mask")->count == 1);
}

TEST_CASE("tile sizes near INT32_MAX: one tile per axis, the same mask as the oracle", "[block_mask][limits]") {
  // (n + tile - 1) / tile in int32 overflows near INT32_MAX (0 x 0 tiles, everything masked, no error): tiles_for must not.
  constexpr std::int32_t max = std::numeric_limits<std::int32_t>::max();
  CHECK(tiles_for(1, max) == 1);
  CHECK(tiles_for(max, max) == 1);
  CHECK(tiles_for(max, 1) == max);
  CHECK(tiles_for(max, max - 1) == 2);
  CHECK(tiles_for(0, max) == 0);
  const block_mask_params p{8, 2, 2, 2};
  const ivec doc{0, 0, 0, 1, 1, 1, 1, 1}, pos{0, 1, 2, 0, 1, 2, 3, 4}, anchors{2, 6};
  const bvec keep{1, 1};
  const dense_mask want = dense_block_mask(p, doc, anchors, keep);
  const tile_shape shapes[] = {{max, max}, {max, 1}, {1, max}, {max - 1, 3}, {1 << 30, 1 << 30}, {3, max - 2}};
  for (const tile_shape t : shapes) {
    INFO("tile " << t.q << " x " << t.kv);
    const block_sparse_mask m = build_block_mask(p, t, packed_docs{doc, pos}, anchors, keep);
    CHECK(m.num_q_tiles == (4 + std::int64_t{t.q} - 1) / t.q);  // 4 queries
    CHECK(m.num_kv_tiles == (12 + std::int64_t{t.kv} - 1) / t.kv);  // 12 kv
    CHECK(expand_block_mask(m) == want);
  }
  // A context that needs two tiles of ~2^30 must not overflow the tile's end (q0 + tile).
  const std::int32_t big_s = (1 << 30) + 5;
  CHECK(tiles_for(big_s, 1 << 30) == 2);
  const std::int32_t a1[1] = {2}, pos3[3] = {0, 1, 2};
  const std::uint8_t k1[1] = {1};
  // One block of 1 anchored at 2: context [0, 2) in kv tile 0, its own kv S in kv tile 1 = [2^30, S + 1).
  CHECK(classify_tile({big_s, 1, 1, 0}, {1, 1 << 30}, 0, 0, a1, k1, pos3) == tile_kind::partial);
  CHECK(classify_tile({big_s, 1, 1, 0}, {1, 1 << 30}, 0, 1, a1, k1, pos3) == tile_kind::partial);
}

TEST_CASE("check_mod rejects a mod built from other inputs than the mask", "[block_mask][api]") {
  // A hand-built block_mask_mod (e.g. for a flex-attention kernel) must be the mask's own rule:
  // one built from other anchors / keep / pos / params would give a wrong mask with no error.
  const block_mask_params p{8, 2, 2, 2};
  const ivec doc{0, 0, 0, 1, 1, 1, 1, 1}, pos{0, 1, 2, 0, 1, 2, 3, 4}, anchors{2, 6};
  const bvec keep{1, 1};
  const block_sparse_mask m = build_block_mask(p, {2, 4}, packed_docs{doc, pos}, anchors, keep);
  const dense_mask want = dense_block_mask(p, doc, anchors, keep);
  CHECK(expand_block_mask(m) == want);
  CHECK_NOTHROW(m.check_mod(block_mask_mod{p, anchors.data(), keep.data(), pos.data()}));
  const ivec other_anchors{2, 7}, other_pos{0, 1, 2, 3, 4, 5, 6, 7}, junk_anchors{2, -9};
  const bvec other_keep{1, 0};
  CHECK_THROWS_WITH(m.check_mod(block_mask_mod{p, other_anchors.data(), keep.data(), pos.data()}),
                    Catch::Contains("anchors[1] = 7") && Catch::Contains("other inputs"));
  CHECK_THROWS_WITH(m.check_mod(block_mask_mod{p, anchors.data(), other_keep.data(), pos.data()}),
                    Catch::Contains("keep[1]"));
  CHECK_THROWS_WITH(m.check_mod(block_mask_mod{p, anchors.data(), keep.data(), other_pos.data()}),
                    Catch::Contains("pos[3] = 3"));
  CHECK_THROWS_WITH(m.check_mod(block_mask_mod{{8, 2, 2, 0}, anchors.data(), keep.data(), pos.data()}),
                    Catch::Contains("params"));
  CHECK_THROWS_AS(m.check_mod(block_mask_mod{p, nullptr, nullptr, nullptr}), std::invalid_argument);
  // An invalid slot's anchor is ignored by the rule, so a different junk value there is the same mask.
  const block_sparse_mask m2 = build_block_mask(p, {2, 4}, packed_docs{doc, pos}, anchors, other_keep);
  CHECK_NOTHROW(m2.check_mod(block_mask_mod{p, junk_anchors.data(), other_keep.data(), pos.data()}));
}
