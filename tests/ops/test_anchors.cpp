#include <catch2/catch.hpp>
#include <dflash/ops/anchors.hpp>
#include <dflash/profile.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

using namespace dflash::ops;
using ivec = std::vector<std::int32_t>;
using bvec = std::vector<std::uint8_t>;

namespace {
struct anchor_case {
  std::int32_t batch, seq;
  ivec seq_lens, doc;
  bvec mask;
};

anchor_case random_case(std::mt19937& rng, bool with_docs) {
  anchor_case c;
  c.batch = std::uniform_int_distribution<int>(1, 4)(rng);
  c.seq = std::uniform_int_distribution<int>(0, 120)(rng);
  const double density = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  for (int b = 0; b < c.batch; ++b) {
    c.seq_lens.push_back(std::uniform_int_distribution<int>(0, c.seq)(rng));
    int d = 0;
    for (int s = 0; s < c.seq; ++s) {
      c.mask.push_back(std::bernoulli_distribution(density)(rng));
      if (std::bernoulli_distribution(0.05)(rng)) ++d;
      c.doc.push_back(d);
    }
  }
  if (!with_docs) c.doc.clear();
  return c;
}

/// Reference: list candidates from the rule in words, sort all keys, keep the first k, sort positions.
void naive_select(const anchor_params& a, const anchor_case& c, ivec& anchors, bvec& keep) {
  const auto k = static_cast<std::size_t>(a.num_anchors);
  anchors.assign(static_cast<std::size_t>(c.batch) * k, 0);
  keep.assign(anchors.size(), 0);
  for (int b = 0; b < c.batch; ++b) {
    std::vector<std::pair<std::uint64_t, int>> cand;
    for (int p = 0; p + a.block_size <= c.seq_lens[static_cast<std::size_t>(b)]; ++p) {
      const std::size_t at = static_cast<std::size_t>(b * c.seq + p);
      bool one_doc = true;
      for (int j = 1; j < a.block_size && !c.doc.empty(); ++j) one_doc = one_doc && c.doc[at + static_cast<std::size_t>(j)] == c.doc[at];
      if (c.mask[at] && one_doc) cand.emplace_back(anchor_key(a.seed, static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(p)), p);
    }
    std::sort(cand.begin(), cand.end());
    ivec chosen;
    for (std::size_t j = 0; j < std::min(k, cand.size()); ++j) chosen.push_back(cand[j].second);
    std::sort(chosen.begin(), chosen.end());
    for (std::size_t j = 0; j < chosen.size(); ++j) {
      anchors[static_cast<std::size_t>(b) * k + j] = chosen[j];
      keep[static_cast<std::size_t>(b) * k + j] = 1;
    }
  }
}
}  // namespace

TEST_CASE("anchor keys are unique per sequence and keep the position in their low bits", "[anchors]") {
  std::set<std::uint64_t> seen;
  for (std::uint32_t p = 0; p < 5000; ++p) {
    const auto k = anchor_key(42, 3, p);
    CHECK((k & 0xFFFFF) == p);
    seen.insert(k);
  }
  CHECK(seen.size() == 5000);
  CHECK(anchor_key(42, 3, 7) != anchor_key(43, 3, 7));
  CHECK(anchor_key(42, 3, 7) != anchor_key(42, 4, 7));
  STATIC_REQUIRE(splitmix64(0) == 0xE220A8397B1DCDAFull);  // the published splitmix64 sequence from state 0
}

TEST_CASE("select_anchors matches the reference on random inputs, with and without documents", "[anchors]") {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 300; ++iter) {
    const anchor_case c = random_case(rng, iter % 2 == 0);
    anchor_params a;
    a.block_size = std::uniform_int_distribution<int>(1, 16)(rng);
    a.num_anchors = std::uniform_int_distribution<int>(0, 40)(rng);
    a.seed = rng();
    ivec got(static_cast<std::size_t>(c.batch * a.num_anchors), -1), want;
    bvec keep(got.size(), 9), want_keep;
    select_anchors(a, c.batch, c.seq, c.seq_lens, c.mask, c.doc, got, keep);
    naive_select(a, c, want, want_keep);
    INFO("iter " << iter);
    REQUIRE(got == want);
    REQUIRE(keep == want_keep);
  }
}

TEST_CASE("anchors are sorted valid candidates, deterministic per seed", "[anchors]") {
  const std::int32_t seq = 200, B = 8;
  bvec mask(seq, 1);
  for (int s = 0; s < 50; ++s) mask[static_cast<std::size_t>(s)] = 0;  // prompt: no loss
  const ivec lens{seq};
  anchor_params a{B, 16, 7};
  ivec x(16), y(16), z(16);
  bvec kx(16), ky(16), kz(16);
  select_anchors(a, 1, seq, lens, mask, {}, x, kx);
  select_anchors(a, 1, seq, lens, mask, {}, y, ky);
  a.seed = 8;
  select_anchors(a, 1, seq, lens, mask, {}, z, kz);
  CHECK(x == y);
  CHECK(x != z);
  CHECK(std::is_sorted(x.begin(), x.end()));
  CHECK(std::adjacent_find(x.begin(), x.end()) == x.end());
  CHECK(std::all_of(kx.begin(), kx.end(), [](std::uint8_t k) { return k == 1; }));
  CHECK(std::all_of(x.begin(), x.end(), [&](int p) { return p >= 50 && p <= seq - B; }));
}

TEST_CASE("fewer candidates than slots: all are taken, the rest are invalid slots", "[anchors]") {
  // Loss on positions 2, 3, 9; block 4 in a row of 12: candidates 2, 3 (9 + 4 > 12).
  bvec mask(12, 0);
  mask[2] = mask[3] = mask[9] = 1;
  ivec anchors(5, -1);
  bvec keep(5, 9);
  select_anchors({4, 5, 1}, 1, 12, ivec{12}, mask, {}, anchors, keep);
  CHECK(anchors == ivec{2, 3, 0, 0, 0});
  CHECK(keep == bvec{1, 1, 0, 0, 0});
}

TEST_CASE("blocks never cross a document boundary", "[anchors]") {
  // Documents [0..5] and [6..11]; block 4: positions 3, 4, 5 would cross.
  const bvec mask(12, 1);
  const ivec doc{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  ivec anchors(12);
  bvec keep(12);
  select_anchors({4, 12, 3}, 1, 12, ivec{12}, mask, doc, anchors, keep);
  CHECK(anchors == ivec{0, 1, 2, 6, 7, 8, 0, 0, 0, 0, 0, 0});
  CHECK(keep == bvec{1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("the draw is close to uniform over candidates", "[anchors]") {
  // 100 candidates, 10 drawn, 2000 seeds: each candidate expected 200 times.
  const bvec mask(100, 1);
  std::vector<int> hits(100);
  ivec anchors(10);
  bvec keep(10);
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    select_anchors({1, 10, seed}, 1, 100, ivec{100}, mask, {}, anchors, keep);
    for (int p : anchors) ++hits[static_cast<std::size_t>(p)];
  }
  const auto [lo, hi] = std::minmax_element(hits.begin(), hits.end());
  CHECK(*lo > 140);  // ~4.5 sigma either side of 200 (binomial sd ~ 13.4)
  CHECK(*hi < 260);
}

TEST_CASE("select_anchors rejects bad input with a clear message", "[anchors]") {
  const bvec mask(8, 1);
  ivec anchors(2);
  bvec keep(2);
  CHECK_THROWS_WITH(select_anchors({0, 2, 0}, 1, 8, ivec{8}, mask, {}, anchors, keep), Catch::Contains("block_size = 0 must be positive"));
  CHECK_THROWS_WITH(select_anchors({2, -1, 0}, 1, 8, ivec{8}, mask, {}, anchors, keep), Catch::Contains("num_anchors = -1 is negative"));
  CHECK_THROWS_WITH(select_anchors({2, 2, 0}, 1, 8, ivec{9}, mask, {}, anchors, keep), Catch::Contains("seq_lens[0] = 9 exceeds seq = 8"));
  CHECK_THROWS_WITH(select_anchors({2, 2, 0}, 1, 8, ivec{-1}, mask, {}, anchors, keep), Catch::Contains("is negative"));
  CHECK_THROWS_WITH(select_anchors({2, 2, 0}, 2, 8, ivec{8}, mask, {}, anchors, keep), Catch::Contains("seq_lens has 1 elements, expected 2"));
  CHECK_THROWS_WITH(select_anchors({2, 2, 0}, 1, 8, ivec{8}, bvec(7), {}, anchors, keep), Catch::Contains("loss_mask has 7 elements"));
  CHECK_THROWS_WITH(select_anchors({2, 2, 0}, 1, 8, ivec{8}, mask, ivec(3), anchors, keep), Catch::Contains("doc_ids has 3 elements, expected 0 or 8"));
  CHECK_THROWS_WITH(select_anchors({2, 3, 0}, 1, 8, ivec{8}, mask, {}, anchors, keep), Catch::Contains("anchors has 2 elements, expected 3"));
  CHECK_THROWS_WITH(select_anchors({2, 2, 0}, 1, 8, ivec{8}, mask, ivec{0, 1, 1, 0, 1, 1, 1, 1}, anchors, keep),
                    Catch::Contains("decrease at position 3"));
  CHECK_THROWS_WITH(select_anchors({2, 2, 0}, 1, anchor_max_seq + 1, ivec{0}, bvec{}, {}, anchors, keep), Catch::Contains("exceeds"));
}

TEST_CASE("slot loss weights: slot 0 carries no loss, then exp(-(k-1)/gamma)", "[anchors]") {
  const auto w = slot_loss_weights(16, 7.0f);
  REQUIRE(w.size() == 16);
  CHECK(w[0] == 0.0f);
  CHECK(w[1] == 1.0f);
  CHECK(w[2] == static_cast<float>(std::exp(-1.0 / 7.0)));
  CHECK(w[15] == static_cast<float>(std::exp(-14.0 / 7.0)));
  CHECK(slot_loss_weights(4, 0.0f) == std::vector<float>{0.0f, 1.0f, 1.0f, 1.0f});
  CHECK_THROWS_WITH(slot_loss_weights(0, 7.0f), Catch::Contains("block_size = 0 must be positive"));
  CHECK_THROWS_WITH(slot_loss_weights(4, -1.0f), Catch::Contains("must be >= 0"));
}

TEST_CASE("samples with fewer than 2 x block_size loss tokens are dropped", "[anchors]") {
  bvec mask(100, 0);
  for (int i = 0; i < 31; ++i) mask[static_cast<std::size_t>(i * 3)] = 1;
  CHECK(count_loss_tokens(mask) == 31);
  CHECK(should_drop_sample(mask, 16));
  mask[1] = 1;
  CHECK_FALSE(should_drop_sample(mask, 16));  // exactly 32 kept
  CHECK(should_drop_sample(bvec{}, 1));
  CHECK_THROWS_AS(should_drop_sample(mask, 0), std::invalid_argument);
}

TEST_CASE("select_anchors records under the anchors key", "[anchors][profile]") {
  dflash::AccumulatingProfiler<dflash::ops::keys> prof;
  ivec anchors(1);
  bvec keep(1);
  select_anchors({1, 1, 0}, 1, 1, ivec{1}, bvec{1}, {}, anchors, keep, dflash::profiler_ref(prof));
  CHECK(prof.snapshot().find("anchors")->count == 1);
  CHECK(anchors == ivec{0});
  CHECK(keep == bvec{1});
}

TEST_CASE("select_anchors with block_size near INT32_MAX: no block fits, nothing overflows or reads past the row",
          "[anchors][limits]") {
  // `p + block_size <= seq_len` computed in int32 overflows for INT32_MAX (anchors {1, 2, 6, 7}, all kept,
  // and a document check reading doc_ids[p + block_size - 1] far outside the row): the op must not.
  const bvec mask(10, 1);
  const ivec doc{0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  constexpr std::int32_t max = std::numeric_limits<std::int32_t>::max();
  for (const std::int32_t B : {max, max - 1, max - 5, max - 10, 1 << 30, 11}) {
    INFO("block_size " << B);
    ivec anchors(4, -1);
    bvec keep(4, 9);
    select_anchors({B, 4, 3}, 1, 10, ivec{10}, mask, {}, anchors, keep);
    CHECK(anchors == ivec{0, 0, 0, 0});
    CHECK(keep == bvec{0, 0, 0, 0});
    std::fill(anchors.begin(), anchors.end(), -1);
    select_anchors({B, 4, 3}, 1, 10, ivec{10}, mask, doc, anchors, keep);
    CHECK(anchors == ivec{0, 0, 0, 0});
    CHECK(keep == bvec{0, 0, 0, 0});
  }
  // The predicate itself, at the edges: a block that exactly fits is a candidate.
  const std::uint8_t ones[4] = {1, 1, 1, 1};
  CHECK(is_anchor_candidate(0, 4, 4, ones, nullptr));
  CHECK_FALSE(is_anchor_candidate(1, 4, 4, ones, nullptr));
  CHECK_FALSE(is_anchor_candidate(3, 4, max, ones, nullptr));
  CHECK_FALSE(is_anchor_candidate(0, 0, max, ones, nullptr));
  ivec anchors(1);
  bvec keep(1);
  select_anchors({10, 1, 3}, 1, 10, ivec{10}, mask, {}, anchors, keep);
  CHECK(anchors == ivec{0});
  CHECK(keep == bvec{1});
}
