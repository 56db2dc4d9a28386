// The host half of the GPU target forward (target_forward_gpu.hpp): the packed
// plan of a step, its checks, and the stacked weights. forward_by_plan runs the
// GPU's algorithm on those operands on the CPU: in float it must match
// TargetModel::forward_padded, so a wrong row map, tap column or weight stack
// fails here, without a GPU.
#include <catch2/catch.hpp>

#include "model.hpp"
#include "target_forward_gpu.hpp"
#include "target_forward_reference.hpp"

#include <cstdint>
#include <stdexcept>
#include <vector>

using namespace dflash_example;
using dflash_example::testing::forward_by_plan;
using dflash_example::testing::max_abs_diff;

TEST_CASE("plan_target_forward packs documents in order and maps each row to its padded slot row") {
  // docs of 3, 0 and 2 tokens, seq 4
  const std::vector<std::int32_t> tokens{5, 6, 7, 0, 0, 0, 0, 0, 8, 9, 0, 0};
  const std::vector<std::int32_t> lengths{3, 0, 2};
  const target_forward_plan p = plan_target_forward(tokens, lengths, 4, 10);
  CHECK(p.docs == 3);
  CHECK(p.seq == 4);
  CHECK(p.padded_rows() == 12);
  CHECK(p.tokens == std::vector<std::int32_t>{5, 6, 7, 8, 9});
  CHECK(p.doc == std::vector<std::int32_t>{0, 0, 0, 2, 2});
  CHECK(p.pos == std::vector<std::int32_t>{0, 1, 2, 0, 1});
  CHECK(p.dst == std::vector<std::int32_t>{0, 1, 2, 8, 9});
  // A reused plan (a worker's) holds the new step only.
  target_forward_plan reused = p;
  plan_target_forward(reused, std::vector<std::int32_t>{4, 0, 0}, std::vector<std::int32_t>{1}, 3, 10);
  CHECK(reused.docs == 1);
  CHECK(reused.seq == 3);
  CHECK(reused.tokens == std::vector<std::int32_t>{4});
  CHECK(reused.doc == std::vector<std::int32_t>{0});
  CHECK(reused.pos == std::vector<std::int32_t>{0});
  CHECK(reused.dst == std::vector<std::int32_t>{0});
}

TEST_CASE("plan_target_forward rejects what forward_padded rejects, naming it") {
  const std::vector<std::int32_t> tokens{1, 2, 3, 4};
  const std::vector<std::int32_t> one{2}, two{2, 2};
  CHECK_NOTHROW(plan_target_forward(tokens, one, 4, 10));
  CHECK_THROWS_AS(plan_target_forward(tokens, two, 4, 10), std::invalid_argument);
  CHECK_THROWS_WITH(plan_target_forward(tokens, two, 4, 10), Catch::Contains("tokens has 4 elements, expected 8"));
  CHECK_THROWS_WITH(plan_target_forward(tokens, std::vector<std::int32_t>{5}, 4, 10),
                    Catch::Contains("lengths[0] = 5 is not in [0, seq = 4]"));
  CHECK_THROWS_WITH(plan_target_forward(tokens, std::vector<std::int32_t>{-1}, 4, 10),
                    Catch::Contains("lengths[0] = -1"));
  CHECK_THROWS_WITH(plan_target_forward(std::vector<std::int32_t>{1, 10, 0, 0}, one, 4, 10),
                    Catch::Contains("token 10 is outside [0, vocab = 10)"));
  CHECK_THROWS_WITH(plan_target_forward(std::vector<std::int32_t>{-3, 1, 0, 0}, one, 4, 10),
                    Catch::Contains("token -3 is outside"));
  // Padding is never read: any value there is fine, as in forward_padded.
  CHECK_NOTHROW(plan_target_forward(std::vector<std::int32_t>{1, 2, 99, -7}, one, 4, 10));
  CHECK_THROWS_WITH(plan_target_forward({}, {}, -1, 10), Catch::Contains("seq = -1 is negative"));
}

TEST_CASE("a by-key scan over the transposed layout, keyed by scan_key, gives each document's running sums") {
  // H = 3 columns, values x[s][h] = 10 s + h; several documents, and one document alone
  // (then only the column tells one segment from the next)
  for (const std::vector<std::int32_t>& lengths : {std::vector<std::int32_t>{3, 0, 1, 2}, std::vector<std::int32_t>{0, 3}}) {
  const std::int32_t seq = 3, H = 3;
  const std::vector<std::int32_t> tokens(lengths.size() * static_cast<std::size_t>(seq), 1);
  const target_forward_plan p = plan_target_forward(tokens, lengths, seq, 10);
  const auto S = static_cast<std::size_t>(p.size()), hs = static_cast<std::size_t>(H);
  std::vector<std::int32_t> keys(hs * S);
  std::vector<double> xT(hs * S), scan(hs * S);
  for (std::size_t h = 0; h < hs; ++h)
    for (std::size_t s = 0; s < S; ++s) {
      keys[h * S + s] = scan_key(static_cast<std::int32_t>(h), p.doc[s]);
      xT[h * S + s] = 10.0 * static_cast<double>(s) + static_cast<double>(h);
    }
  for (std::size_t i = 0; i < keys.size(); ++i)  // InclusiveSumByKey: restart where the key changes
    scan[i] = xT[i] + (i > 0 && keys[i] == keys[i - 1] ? scan[i - 1] : 0.0);
  for (std::size_t h = 0; h < hs; ++h) {
    double run = 0;
    for (std::size_t s = 0; s < S; ++s) {
      run = (p.pos[s] == 0 ? 0.0 : run) + xT[h * S + s];
      INFO("h " << h << " s " << s);
      CHECK(scan[h * S + s] == run);
    }
  }
  }
}

TEST_CASE("the graphed forward's padded plan computes the same rows, its padding written nowhere") {
  const TargetModel m(TargetConfig{.vocab = 40, .hidden = 16, .layers = 5, .num_taps = 2, .seed = 9});
  const MarkovSource src(DataConfig{.vocab = 40});
  for (std::uint64_t step = 0; step < 4; ++step) {
    const TokenBatch b = src.make_batch(5, step, 96);
    const target_forward_plan p = plan_target_forward(b.tokens, b.lengths, b.seq, 40);
    target_forward_plan padded = p;
    pad_plan_for_graph(padded, 96);
    REQUIRE(padded.size() == 96);
    CHECK(padded.docs == p.docs);
    CHECK(padded.doc.back() == p.docs);  // one more document: its own scan segment
    // Each row alone but for its document's running sums: the padded plan's valid rows are bit for bit
    // the plain plan's (on the GPU a GEMM over more columns may sum in another order: tolerance there).
    CHECK(forward_by_plan<float>(m, padded) == forward_by_plan<float>(m, p));
  }
  target_forward_plan p = plan_target_forward(std::vector<std::int32_t>{1, 2, 3, 0}, std::vector<std::int32_t>{3}, 4, 10);
  CHECK_THROWS_WITH(pad_plan_for_graph(p, 2), Catch::Contains("the step has 3 tokens, more than the 2 rows of the graph"));
}

TEST_CASE("stacked_layer_weights puts A above C, row-major [2H, H]") {
  const TargetModel m(TargetConfig{.vocab = 11, .hidden = 5, .layers = 4, .num_taps = 2, .seed = 3});
  for (std::size_t l = 0; l < 4; ++l) {
    const std::vector<float> w = stacked_layer_weights(m, l);
    REQUIRE(w.size() == 2 * 5 * 5);
    CHECK(std::vector<float>(w.begin(), w.begin() + 25) == std::vector<float>(m.layer_a(l).begin(), m.layer_a(l).end()));
    CHECK(std::vector<float>(w.begin() + 25, w.end()) == std::vector<float>(m.layer_c(l).begin(), m.layer_c(l).end()));
  }
}

TEST_CASE("the GPU algorithm on the plan's operands computes TargetModel::forward_padded") {
  // The example's shapes (hidden 64, 6 layers, taps 1..3) and an odd one.
  for (const TargetConfig cfg : {TargetConfig{.vocab = 96, .hidden = 64}, TargetConfig{.vocab = 40, .hidden = 37, .layers = 7, .num_taps = 4, .seed = 5}}) {
    const TargetModel m(cfg);
    const MarkovSource src(DataConfig{.vocab = cfg.vocab});
    for (std::uint64_t step = 0; step < 3; ++step) {
      TokenBatch b = src.make_batch(7, step, 384);
      b.lengths.push_back(0);  // an empty document: all padding
      b.tokens.resize(b.tokens.size() + static_cast<std::size_t>(b.seq), 0);
      b.loss_mask.resize(b.tokens.size(), 0);
      const std::vector<float> want = m.forward_padded(b);
      const target_forward_plan p = plan_target_forward(b.tokens, b.lengths, b.seq, cfg.vocab);
      const std::vector<float> got = forward_by_plan<float>(m, p);
      // Float, the same operations in another order (one depth-2H sum for
      // A and C): a few ulp of values of magnitude ~1..5 after every layer.
      const double d = max_abs_diff(got, want);
      INFO("hidden " << cfg.hidden << " step " << step << ": max |by plan - model| = " << d);
      CHECK(d <= 1e-5);
      // Padding rows: exactly 0 in both.
      const auto F = static_cast<std::size_t>(m.feature_dim());
      for (std::size_t doc = 0; doc < b.lengths.size(); ++doc)
        for (std::size_t t = static_cast<std::size_t>(b.lengths[doc]); t < static_cast<std::size_t>(b.seq); ++t)
          for (std::size_t j = 0; j < F; ++j) REQUIRE(got[(doc * static_cast<std::size_t>(b.seq) + t) * F + j] == 0.0f);
    }
  }
}
