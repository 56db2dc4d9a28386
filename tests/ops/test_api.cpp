// The ops' argument forms and document layouts: every host op takes spans and
// anything contiguous without explicit template arguments; the three doc-id layouts convert by
// named functions; every mask function takes the packed layout; the mask carries its element rule.
#include <catch2/catch.hpp>
#include <dflash/ops.hpp>

#include <algorithm>
#include <array>
#include <random>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops_test_util.hpp"

using namespace dflash::ops;
using ivec = std::vector<std::int32_t>;
using bvec = std::vector<std::uint8_t>;

namespace {
template <class Out>
concept can_pack_into = requires(const std::vector<float>& in, Out&& out, ivec& cu) {
  pack_hidden_states(in, hidden_shape{}, std::span<const std::int32_t>{}, std::forward<Out>(out),
                     std::span<std::int32_t>(cu));
};
template <class Out>
concept can_unpack_into = requires(const std::vector<float>& in, Out&& out) {
  unpack_hidden_states(in, std::span<const std::int32_t>{}, hidden_shape{}, std::forward<Out>(out));
};
/// The mask builder's context argument: one layout (packed_docs), never its arrays passed apart.
template <class... Context>
concept can_build_mask_from = requires(Context&&... context, const ivec& anchors, const bvec& keep) {
  build_block_mask(block_mask_params{}, tile_shape{}, std::forward<Context>(context)..., anchors, keep);
};
}  // namespace

TEST_CASE("pack/unpack take vectors, arrays and spans with the element type deduced", "[api][pack]") {
  const hidden_shape s{2, 3, 2};
  const std::vector<float> padded{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const ivec lengths{2, 1};
  std::vector<float> packed(6);
  ivec cu(3);
  CHECK(pack_hidden_states(padded, s, lengths, packed, cu) == 3);  // no pack_hidden_states<float> needed
  CHECK(packed == std::vector<float>{1, 2, 3, 4, 7, 8});
  CHECK(cu == ivec{0, 2, 3});
  std::array<float, 6> packed_a{};
  std::array<std::int32_t, 3> cu_a{};
  CHECK(pack_hidden_states(std::span(padded), s, lengths, packed_a, cu_a) == 3);
  CHECK(std::vector<float>(packed_a.begin(), packed_a.end()) == packed);
  std::vector<float> back(12, -1.0f);
  unpack_hidden_states(packed, cu, s, back);
  CHECK(back == std::vector<float>{1, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 0});
  float back_c[12];
  unpack_hidden_states(packed_a, cu_a, s, back_c);
  CHECK(std::vector<float>(back_c, back_c + 12) == back);
  unpack_hidden_states(std::span<const float>(packed), cu, s, std::span(back));  // spans still work
  // bf16 deduced too; an explicit element type still compiles (callers may still name it).
  const std::vector<dflash::bf16> hb(padded.size(), dflash::bf16(1.5f));
  std::vector<dflash::bf16> pb(6);
  CHECK(pack_hidden_states(hb, s, lengths, pb, cu) == 3);
  CHECK(pack_hidden_states<dflash::bf16>(hb, s, lengths, pb, cu) == 3);
  // Outputs must be writable and outlive the call; the element types must agree.
  STATIC_REQUIRE(can_pack_into<std::vector<float>&>);
  STATIC_REQUIRE(can_pack_into<std::span<float>>);
  STATIC_REQUIRE_FALSE(can_pack_into<const std::vector<float>&>);
  STATIC_REQUIRE_FALSE(can_pack_into<std::vector<float>&&>);
  STATIC_REQUIRE_FALSE(can_pack_into<std::vector<double>&>);
  STATIC_REQUIRE(can_unpack_into<std::vector<float>&>);
  STATIC_REQUIRE_FALSE(can_unpack_into<std::span<const float>>);
}

TEST_CASE("doc_ids, select_anchors and the mask builders take vectors, arrays and spans alike", "[api]") {
  const std::array<std::int32_t, 2> lengths{3, 5};
  std::array<std::int32_t, 8> doc{}, pos{};
  doc_ids(lengths, doc, pos);
  CHECK(ivec(doc.begin(), doc.end()) == ivec{0, 0, 0, 1, 1, 1, 1, 1});
  const auto d = doc_ids(std::span(lengths));
  CHECK(d.pos == ivec(pos.begin(), pos.end()));
  const bvec mask(8, 1);
  ivec anchors(2);
  std::array<std::uint8_t, 2> keep{};
  select_anchors({2, 2, 5}, 1, 8, std::array<std::int32_t, 1>{8}, mask, doc, anchors, keep);
  ivec anchors2(2);
  bvec keep2(2);
  select_anchors({2, 2, 5}, 1, 8, ivec{8}, std::span(mask), std::span(d.doc_id), std::span(anchors2), keep2);
  CHECK(anchors2 == anchors);
  const block_mask_params p{8, 2, 2, 0};
  const auto m1 = build_block_mask(p, {2, 4}, d, anchors, keep);  // doc_ids_result is a packed_docs
  const auto m2 = build_block_mask(p, {2, 4}, packed_docs{doc, pos}, std::span(anchors), keep);
  CHECK(m1.kv_indices == m2.kv_indices);
  CHECK(m1.full_kv_indices == m2.full_kv_indices);
  STATIC_REQUIRE(can_build_mask_from<packed_docs>);
  STATIC_REQUIRE(can_build_mask_from<const doc_ids_result&>);
  STATIC_REQUIRE_FALSE(can_build_mask_from<const ivec&, const ivec&>);  // doc ids and positions apart: one form only
}

TEST_CASE("doc-id layouts convert by named functions, and round-trip", "[api][doc_ids]") {
  std::mt19937 rng(3);
  for (int iter = 0; iter < 200; ++iter) {
    const ivec lengths = ops_test::random_lengths(rng, std::uniform_int_distribution<std::size_t>(0, 12)(rng), 30);
    const doc_ids_result d = doc_ids(lengths);
    // ids -> packed: the positions doc_ids computes.
    const doc_ids_result from_ids = packed_docs_from_ids(d.doc_id);
    REQUIRE(from_ids.doc_id == d.doc_id);
    REQUIRE(from_ids.pos == d.pos);
    // packed -> lengths -> packed is the identity on the ids (trailing empty documents own no id).
    REQUIRE(doc_ids(document_lengths(d.doc_id)).doc_id == d.doc_id);
    ivec trimmed = lengths;
    while (!trimmed.empty() && trimmed.back() == 0) trimmed.pop_back();
    REQUIRE(document_lengths(d.doc_id) == trimmed);
  }
  CHECK_THROWS_WITH(packed_docs_from_ids(ivec{0, 1, 0}), Catch::Contains("positions_from_doc_ids") &&
                                                              Catch::Contains("non-decreasing"));
  CHECK_THROWS_WITH(document_lengths(ivec{-1, 0}), Catch::Contains("doc_ids[0] = -1 is negative"));
  STATIC_REQUIRE(std::is_convertible_v<const doc_ids_result&, packed_docs>);
  STATIC_REQUIRE_FALSE(std::is_convertible_v<doc_ids_result&&, packed_docs>);  // would dangle
}

TEST_CASE("select_anchors on the packed and padded layouts equals the batch form", "[api][anchors]") {
  std::mt19937 rng(4);
  for (int iter = 0; iter < 100; ++iter) {
    const std::int32_t batch = std::uniform_int_distribution<int>(1, 3)(rng), seq = 60;
    std::vector<doc_ids_result> rows;
    for (int b = 0; b < batch; ++b) {
      ivec l = ops_test::random_lengths(rng, 4, 15);
      rows.push_back(doc_ids(l));
    }
    std::vector<packed_docs> views(rows.begin(), rows.end());
    const padded_doc_ids padded = pad_doc_ids(views, seq);
    REQUIRE(padded.batch == batch);
    REQUIRE(padded.doc_id.size() == static_cast<std::size_t>(batch * seq));
    bvec mask(padded.doc_id.size());
    for (auto& x : mask) x = std::bernoulli_distribution(0.8)(rng);
    const anchor_params a{std::uniform_int_distribution<int>(1, 6)(rng), 5, rng()};
    ivec want(static_cast<std::size_t>(batch * 5)), got(want.size());
    bvec want_keep(want.size()), got_keep(want.size());
    select_anchors(a, batch, seq, padded.seq_lens, mask, padded.doc_id, want, want_keep);
    select_anchors(a, padded, mask, got, got_keep);
    REQUIRE(got == want);
    REQUIRE(got_keep == want_keep);
    for (std::int32_t b = 0; b < batch; ++b) {  // each row alone, as one packed context
      const auto ub = static_cast<std::size_t>(b);
      REQUIRE(ivec(padded.row(b).begin(), padded.row(b).end()) == rows[ub].doc_id);
      ivec one(5);
      bvec one_keep(5);
      select_anchors(anchor_params{a.block_size, 5, a.seed}, rows[ub],
                     std::span<const std::uint8_t>(mask).subspan(ub * seq, rows[ub].doc_id.size()), one, one_keep);
      ivec ref(5);
      bvec ref_keep(5);
      select_anchors(anchor_params{a.block_size, 5, a.seed}, 1, static_cast<std::int32_t>(rows[ub].doc_id.size()),
                     ivec{static_cast<std::int32_t>(rows[ub].doc_id.size())},
                     std::span<const std::uint8_t>(mask).subspan(ub * seq, rows[ub].doc_id.size()), rows[ub].doc_id,
                     ref, ref_keep);
      REQUIRE(one == ref);
      REQUIRE(one_keep == ref_keep);
    }
  }
  CHECK_THROWS_WITH(pad_doc_ids(std::vector<packed_docs>{packed_docs{}}, -1), Catch::Contains("seq = -1 is negative"));
  const doc_ids_result long_row = doc_ids(ivec{5});
  CHECK_THROWS_WITH(pad_doc_ids(std::vector<packed_docs>{long_row}, 4), Catch::Contains("more than seq = 4"));
  const ivec bad_pos{0, 2};
  ivec a1(1);
  bvec k1(1);
  CHECK_THROWS_WITH(select_anchors({1, 1, 0}, packed_docs{ivec{0, 0}, bad_pos}, bvec{1, 1}, a1, k1),
                    Catch::Contains("pos[1] = 2"));
}

TEST_CASE("every mask function takes the packed layout", "[api][block_mask]") {
  const block_mask_params p{8, 2, 2, 3};
  const doc_ids_result d = doc_ids(ivec{3, 5});
  const ivec anchors{2, 6};
  const bvec keep{1, 1};
  CHECK(dense_block_mask(p, d, anchors, keep) == dense_block_mask(p, d.doc_id, anchors, keep));
  CHECK(dense_block_mask(p, packed_docs{d.doc_id, d.pos}, anchors, keep) == dense_block_mask(p, d.doc_id, anchors, keep));
  const ivec bad_pos{0, 1, 2, 3, 4, 5, 6, 7};  // ignores the document boundary
  CHECK_THROWS_WITH(dense_block_mask(p, packed_docs{d.doc_id, bad_pos}, anchors, keep),
                    Catch::Contains("pos[3] = 3 is not the position"));
  block_sparse_mask m = block_sparse_mask::allocate(p, {4, 4});
  build_block_mask(p, {4, 4}, d, anchors, keep, m.view());
  CHECK(m.kv_indices == build_block_mask(p, {4, 4}, d, anchors, keep).kv_indices);
}

TEST_CASE("the mask carries its element rule: expand_block_mask needs no hand-built mod", "[api][block_mask]") {
  const block_mask_params p{8, 2, 2, 2};
  const doc_ids_result d = doc_ids(ivec{3, 5});
  const ivec anchors{2, 6};
  const bvec keep{1, 1};
  const dense_mask want = dense_block_mask(p, d, anchors, keep);
  block_sparse_mask m = build_block_mask(p, {2, 4}, d, anchors, keep);
  REQUIRE(m.has_rule());
  CHECK(expand_block_mask(m) == want);
  const block_sparse_mask copy = m;  // the rule travels with copies
  m = block_sparse_mask{};
  CHECK(expand_block_mask(copy) == want);
  CHECK(copy.mod()(0, 1));
  // A mask whose tiles were written elsewhere (as the GPU builder does) gets its rule bound.
  block_sparse_mask hand = block_sparse_mask::allocate(p, {2, 4});
  build_block_mask(p, {2, 4}, d, anchors, keep, hand.view());
  CHECK_THROWS_WITH(expand_block_mask(hand), Catch::Contains("no element rule"));
  CHECK_THROWS_WITH((void)hand.mod(), Catch::Contains("no element rule"));
  CHECK_THROWS_WITH(hand.bind_rule(anchors, keep, ivec{0, 1}), Catch::Contains("pos has 2 elements, expected 8"));
  CHECK_THROWS_WITH(hand.bind_rule(ivec{2, 9}, keep, d), Catch::Contains("anchors[1] = 9 is outside the context"));
  hand.bind_rule(anchors, keep, d);
  CHECK(expand_block_mask(hand) == want);
  CHECK_NOTHROW(hand.check_mod(block_mask_mod{p, anchors.data(), keep.data(), d.pos.data()}));
}

TEST_CASE("the guide's ops snippet compiles and agrees with the oracle", "[api]") {
  namespace ops = dflash::ops;
  const ivec lengths{40, 30};
  const std::int32_t S = 70, N = 8;
  const std::uint64_t seed = 9;
  const bvec loss_mask(70, 1);
  ivec anchors(8);
  bvec keep(8);
  // --- as in docs/guide.md, section 4 ---
  const ops::doc_ids_result docs = ops::doc_ids(lengths);                 // packed layout
  ops::select_anchors({16, N, seed}, docs, loss_mask, anchors, keep);     // one packed context
  const ops::block_sparse_mask mask = ops::build_block_mask({S, N, 16, 0}, {128, 128}, docs, anchors, keep);
  const ops::dense_mask dense = ops::expand_block_mask(mask);             // no hand-built mod
  // ---
  CHECK(dense == ops::dense_block_mask({S, N, 16, 0}, docs, anchors, keep));
  CHECK(std::count(keep.begin(), keep.end(), 1) == 8);
}
