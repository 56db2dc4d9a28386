// The example's compute core: synthetic data, target model, drafter
// (gradients, learning, mask, determinism, bad input).
#include <catch2/catch.hpp>

#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <vector>

using namespace dflash_example;

namespace {

// Anchors as the reference draws them: loss-bearing positions <= S - B, up to
// `n` without replacement, sorted; missing slots padded with keep = 0.
struct Anchors {
  std::vector<std::int32_t> anchors;
  std::vector<std::uint8_t> keep;
};
Anchors pick_anchors(const std::vector<std::uint8_t>& loss_mask, std::int32_t block, std::int32_t n, std::uint64_t seed) {
  std::vector<std::int32_t> cand;
  const auto S = static_cast<std::int32_t>(loss_mask.size());
  for (std::int32_t s = 0; s + block <= S; ++s)
    if (loss_mask[static_cast<std::size_t>(s)]) cand.push_back(s);
  SplitMix64 r(seed);
  const auto take = std::min<std::size_t>(cand.size(), static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < take; ++i)
    std::swap(cand[i], cand[i + static_cast<std::size_t>(r.next() % (cand.size() - i))]);
  cand.resize(take);
  std::sort(cand.begin(), cand.end());
  Anchors a{cand, std::vector<std::uint8_t>(take, 1)};
  a.anchors.resize(static_cast<std::size_t>(n), 0);
  a.keep.resize(static_cast<std::size_t>(n), 0);
  return a;
}

// The reference dense mask, written from the definition.
std::vector<std::uint8_t> dense_mask(const std::vector<std::int32_t>& doc_ids, const Anchors& a, std::int32_t B,
                                     std::int32_t window) {
  const auto S = static_cast<std::int32_t>(doc_ids.size()), N = static_cast<std::int32_t>(a.anchors.size());
  const std::int32_t Q = N * B, KV = S + Q;
  std::vector<std::uint8_t> m(static_cast<std::size_t>(Q) * static_cast<std::size_t>(KV), 0);
  for (std::int32_t q = 0; q < Q; ++q) {
    const auto i = static_cast<std::size_t>(q / B);
    if (!a.keep[i]) continue;
    const std::int32_t an = a.anchors[i];
    for (std::int32_t kv = 0; kv < KV; ++kv) {
      const bool ok = kv < S ? kv < an && doc_ids[static_cast<std::size_t>(kv)] == doc_ids[static_cast<std::size_t>(an)] &&
                                   (window == 0 || kv >= an - window)
                             : static_cast<std::size_t>((kv - S) / B) == i;
      m[static_cast<std::size_t>(q) * static_cast<std::size_t>(KV) + static_cast<std::size_t>(kv)] = ok;
    }
  }
  return m;
}

// One packed example end to end: data -> target forward -> anchors -> mask.
struct Example {
  std::vector<std::int32_t> tokens, doc_ids, lengths;
  std::vector<std::uint8_t> loss_mask;
  std::vector<float> hidden;
  Anchors anchors;
  AttentionMask mask;

  DrafterBatch batch() const { return {hidden, tokens, loss_mask, doc_ids, anchors.anchors, anchors.keep, &mask}; }
};

Example make_example(const MarkovSource& src, const TargetModel& target, std::uint64_t step, std::int32_t max_len,
                     std::int32_t block, std::int32_t num_anchors, std::int32_t window = 0) {
  Example e;
  const TokenBatch tb = src.make_batch(/*seed=*/42, step, max_len);
  e.tokens = tb.packed_tokens();
  e.loss_mask = tb.packed_loss_mask();
  e.doc_ids = tb.packed_doc_ids();
  e.lengths = tb.lengths;
  e.hidden = target.forward_packed(e.tokens, e.lengths);
  e.anchors = pick_anchors(e.loss_mask, block, num_anchors, 1000 + step);
  const auto S = static_cast<std::int32_t>(e.tokens.size());
  const std::int32_t rows = num_anchors * block;
  e.mask = AttentionMask::from_dense(rows, S + rows, dense_mask(e.doc_ids, e.anchors, block, window));
  return e;
}

// The example's defaults, or a narrower model (hidden 32, vocab 64) that
// learns the same task at a third of the cost, for the sanitizer builds.
struct Setup {
  DataConfig data;
  TargetConfig tcfg;
  DrafterConfig dcfg;
  MarkovSource src;
  TargetModel target;

  explicit Setup(bool narrow = false)
      : data(narrow ? DataConfig{.vocab = 64} : DataConfig{}),
        tcfg(narrow ? TargetConfig{.vocab = 64, .hidden = 32} : TargetConfig{}),
        src(data),
        target(tcfg) {
    dcfg.vocab = data.vocab;
    dcfg.feature_dim = target.feature_dim();
    if (narrow) {
      dcfg.hidden = 32;
      dcfg.heads = 2;
      dcfg.ffn = 64;
    }
  }
};

}  // namespace

TEST_CASE("tap layers follow the reference rule", "[model]") {
  CHECK(tap_layers(6, 1) == std::vector<std::int32_t>{3});
  CHECK(tap_layers(36, 1) == std::vector<std::int32_t>{18});
  CHECK(tap_layers(6, 3) == std::vector<std::int32_t>{1, 2, 3});
  CHECK(tap_layers(32, 5) == std::vector<std::int32_t>{1, 8, 15, 22, 29});
  CHECK(tap_layers(36, 2) == std::vector<std::int32_t>{1, 33});
  CHECK_THROWS_AS(tap_layers(3, 2), std::invalid_argument);
  CHECK_THROWS_AS(tap_layers(6, 0), std::invalid_argument);
  CHECK(TargetModel(TargetConfig{}).feature_dim() == 3 * 64);
}

TEST_CASE("synthetic batches: whole documents, prompt tokens without loss, learnable structure", "[model][data]") {
  const DataConfig cfg{};
  const MarkovSource src(cfg);
  const TokenBatch b = src.make_batch(3, 9, 512);
  REQUIRE(b.num_docs() >= 2);
  CHECK(b.seq == cfg.max_doc_len);
  CHECK(b.total_tokens() <= 512);
  CHECK(512 - b.total_tokens() < cfg.min_doc_len);  // filled until no further document fits
  for (std::int32_t d = 0; d < b.num_docs(); ++d) {
    const auto len = b.lengths[static_cast<std::size_t>(d)];
    CHECK(len >= cfg.min_doc_len);
    CHECK(len <= cfg.max_doc_len);
    for (std::int32_t t = 0; t < b.seq; ++t) {
      const auto i = static_cast<std::size_t>(d * b.seq + t);
      CHECK(b.loss_mask[i] == (t >= cfg.prompt_len && t < len ? 1 : 0));
      if (t >= len) CHECK(b.tokens[i] == 0);
    }
  }
  // Over many documents: a token repeats the one motif_len back with p_repeat,
  // plus when the chain happens to make the same step (at most p_main of the
  // rest); the first motif follows the document's topic chain with p_main.
  std::int64_t repeats = 0, later = 0, chain = 0, first = 0;
  for (std::uint64_t step = 0; step < 40; ++step) {
    const TokenBatch x = src.make_batch(3, step, 512);
    for (std::int32_t d = 0; d < x.num_docs(); ++d) {
      const auto* tok = &x.tokens[static_cast<std::size_t>(d * x.seq)];
      const auto len = x.lengths[static_cast<std::size_t>(d)];
      for (std::int32_t t = cfg.motif_len; t < len; ++t, ++later) repeats += tok[t] == tok[t - cfg.motif_len];
      std::int64_t best = 0;
      for (std::int32_t topic = 0; topic < cfg.topics; ++topic) {
        std::int64_t hits = 0;
        for (std::int32_t t = 1; t < cfg.motif_len; ++t) hits += src.main_successor(topic, tok[t - 1]) == tok[t];
        best = std::max(best, hits);
      }
      chain += best;
      first += cfg.motif_len - 1;
    }
  }
  const double rep = static_cast<double>(repeats) / static_cast<double>(later);
  const double main = static_cast<double>(chain) / static_cast<double>(first);
  INFO("repeat fraction " << rep << ", main-successor fraction " << main);
  CHECK(rep > cfg.p_repeat);
  CHECK(rep < cfg.p_repeat + (1 - cfg.p_repeat) * cfg.p_main);
  CHECK(main > cfg.p_main - 0.05);
  CHECK(main < cfg.p_main + 0.08);  // best-of-topics picks up some chance hits
  // Packed views agree with the padded one.
  const auto packed = b.packed_tokens();
  const auto ids = b.packed_doc_ids();
  REQUIRE(packed.size() == static_cast<std::size_t>(b.total_tokens()));
  REQUIRE(ids.size() == packed.size());
  CHECK(packed[static_cast<std::size_t>(b.lengths[0])] == b.tokens[static_cast<std::size_t>(b.seq)]);
  CHECK(ids.front() == 0);
  CHECK(ids.back() == b.num_docs() - 1);
  // Pure function of (seed, step).
  CHECK(src.make_batch(3, 9, 512).tokens == b.tokens);
  CHECK(src.make_batch(3, 10, 512).tokens != b.tokens);
  CHECK(src.make_batch(4, 9, 512).tokens != b.tokens);
  CHECK_THROWS_AS(src.make_batch(3, 9, cfg.min_doc_len - 1), std::invalid_argument);
  DataConfig bad = cfg;
  bad.prompt_len = bad.min_doc_len;
  CHECK_THROWS_AS(MarkovSource(bad), std::invalid_argument);
  bad = cfg;
  bad.p_repeat = 1.5;
  CHECK_THROWS_AS(MarkovSource(bad), std::invalid_argument);
}

TEST_CASE("target forward: padded equals packed, documents isolated, causal", "[model][target]") {
  TargetConfig tc;
  tc.vocab = 20;
  tc.hidden = 8;
  const TargetModel target(tc);
  const std::int32_t D = target.feature_dim(), seq = 10;
  std::vector<std::int32_t> lengths{7, 10, 3};
  std::vector<std::int32_t> padded(lengths.size() * seq, 0), packed;
  SplitMix64 r(5);
  for (std::size_t d = 0; d < lengths.size(); ++d)
    for (std::int32_t t = 0; t < lengths[d]; ++t) {
      const std::int32_t tok = r.range(0, tc.vocab - 1);
      padded[d * seq + static_cast<std::size_t>(t)] = tok;
      packed.push_back(tok);
    }
  const auto hp = target.forward_padded(padded, lengths, seq);
  const auto hk = target.forward_packed(packed, lengths);
  REQUIRE(hp.size() == lengths.size() * seq * static_cast<std::size_t>(D));
  REQUIRE(hk.size() == packed.size() * static_cast<std::size_t>(D));
  std::size_t at = 0;
  for (std::size_t d = 0; d < lengths.size(); ++d)
    for (std::int32_t t = 0; t < seq; ++t)
      for (std::int32_t j = 0; j < D; ++j) {
        const float v = hp[(d * seq + static_cast<std::size_t>(t)) * static_cast<std::size_t>(D) + static_cast<std::size_t>(j)];
        if (t < lengths[d])
          REQUIRE(v == hk[(at + static_cast<std::size_t>(t)) * static_cast<std::size_t>(D) + static_cast<std::size_t>(j)]);
        else
          REQUIRE(v == 0.0f);
        if (j == D - 1 && t == seq - 1) at += static_cast<std::size_t>(lengths[d]);
      }
  // Changing token 4 of document 1 changes its rows >= 4 only, and nothing in other documents.
  auto p2 = packed;
  const std::size_t changed = 7 + 4;
  p2[changed] = (p2[changed] + 1) % tc.vocab;
  const auto h2 = target.forward_packed(p2, lengths);
  for (std::size_t s = 0; s < packed.size(); ++s) {
    bool same = true;
    for (std::int32_t j = 0; j < D; ++j)
      same = same && h2[s * static_cast<std::size_t>(D) + static_cast<std::size_t>(j)] ==
                         hk[s * static_cast<std::size_t>(D) + static_cast<std::size_t>(j)];
    INFO("row " << s);
    CHECK(same == (s < changed || s >= 17));
  }
  CHECK_THROWS_AS(target.forward_padded(padded, std::vector<std::int32_t>{7, 11, 3}, seq), std::invalid_argument);
  CHECK_THROWS_AS(target.forward_padded(padded, lengths, seq + 1), std::invalid_argument);
  CHECK_THROWS_AS(target.forward_packed(packed, std::vector<std::int32_t>{7, 10}), std::invalid_argument);
  p2[0] = tc.vocab;
  CHECK_THROWS_AS(target.forward_packed(p2, lengths), std::invalid_argument);
}

TEST_CASE("attention mask forms agree", "[model][mask]") {
  const std::vector<std::int32_t> doc_ids{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
  const Anchors a{{2, 7, 0}, {1, 1, 0}};
  const std::int32_t B = 3, S = 12, Q = 9, window = 2;
  const auto dense = dense_mask(doc_ids, a, B, window);
  const auto m = AttentionMask::from_dense(Q, S + Q, dense);
  const auto p = AttentionMask::from_predicate(Q, S + Q, [&](std::int32_t q, std::int32_t kv) {
    return dense[static_cast<std::size_t>(q) * (S + Q) + static_cast<std::size_t>(kv)] != 0;
  });
  const std::vector<KvRange> ctx{{0, 2}, {5, 7}, {0, 0}}, own{{12, 15}, {15, 18}, {18, 18}};
  const auto r = AttentionMask::from_block_ranges(S, B, ctx, own);
  CHECK(m == p);
  CHECK(m == r);
  CHECK(std::vector<std::int32_t>(m.row(4).begin(), m.row(4).end()) == std::vector<std::int32_t>{5, 6, 15, 16, 17});
  CHECK(m.row(7).empty());
  CHECK_THROWS_AS(AttentionMask::from_dense(Q, S + Q, std::span(dense).first(dense.size() - 1)), std::invalid_argument);
  const std::vector<KvRange> bad_ctx{{0, 2}, {5, 13}, {0, 0}};
  CHECK_THROWS_AS(AttentionMask::from_block_ranges(S, B, bad_ctx, own), std::invalid_argument);
  const std::vector<KvRange> bad_own{{12, 15}, {3, 6}, {18, 18}};
  CHECK_THROWS_AS(AttentionMask::from_block_ranges(S, B, ctx, bad_own), std::invalid_argument);
}

namespace {
// A tiny instance with two documents, a sliding window and a dropped block.
struct Tiny {
  DrafterConfig cfg = [] {
    DrafterConfig c;
    c.vocab = 7;
    c.hidden = 8;
    c.heads = 2;
    c.feature_dim = 6;
    c.ffn = 6;
    c.block_size = 4;
    c.loss_gamma = 2.0;
    c.seed = 3;
    return c;
  }();
  std::vector<std::int32_t> tokens, doc_ids;
  std::vector<std::uint8_t> loss_mask;
  std::vector<float> hidden;
  Anchors anchors{{2, 6, 9, 13, 0}, {1, 1, 1, 1, 0}};
  AttentionMask mask;

  Tiny() {
    const std::int32_t S = 20;
    SplitMix64 r(17);
    for (std::int32_t s = 0; s < S; ++s) {
      tokens.push_back(r.range(0, cfg.vocab - 1));
      doc_ids.push_back(s < 11 ? 0 : 1);
      loss_mask.push_back(s == 4 || s == 11 || s == 12 ? 0 : 1);
    }
    for (std::int32_t i = 0; i < S * cfg.feature_dim; ++i) hidden.push_back(static_cast<float>(2 * r.uniform() - 1));
    const std::int32_t rows = 5 * cfg.block_size;
    mask = AttentionMask::from_dense(rows, S + rows, dense_mask(doc_ids, anchors, cfg.block_size, 5));
  }
  DrafterBatch batch() const { return {hidden, tokens, loss_mask, doc_ids, anchors.anchors, anchors.keep, &mask}; }
};
}  // namespace

TEST_CASE("drafter gradients match finite differences for every parameter", "[model][drafter]") {
  const Tiny t;
  BasicDrafter<double> d(t.cfg);
  // Move off the special init (unit gains, zero biases) so every term is exercised.
  SplitMix64 r(99);
  for (auto& p : d.parameters())
    for (double& v : p.value) v += 0.3 * (2 * r.uniform() - 1);
  const auto b = t.batch();
  const StepStats s = d.compute_gradients(b);
  REQUIRE(s.labels > 0);
  CHECK(s.loss == Approx(d.evaluate(b).loss).epsilon(1e-12));
  auto params = d.parameters();
  REQUIRE(params.size() == 18);
  std::vector<std::vector<double>> analytic;
  for (auto& p : params) analytic.emplace_back(p.grad.begin(), p.grad.end());
  const double eps = 1e-5;
  for (std::size_t pi = 0; pi < params.size(); ++pi) {
    auto& p = params[pi];
    INFO("parameter " << p.name);
    double num_norm = 0, diff_norm = 0, ana_norm = 0;
    for (std::size_t i = 0; i < p.value.size(); ++i) {
      const double keep = p.value[i];
      p.value[i] = keep + eps;
      const double up = d.evaluate(b).loss;
      p.value[i] = keep - eps;
      const double down = d.evaluate(b).loss;
      p.value[i] = keep;
      const double num = (up - down) / (2 * eps), ana = analytic[pi][i];
      INFO("element " << i << ": numeric " << num << ", analytic " << ana);
      CHECK(std::abs(num - ana) <= 1e-2 * std::max(std::abs(num), std::abs(ana)) + 1e-7);
      num_norm += num * num;
      ana_norm += ana * ana;
      diff_norm += (num - ana) * (num - ana);
    }
    CHECK(ana_norm > 0);  // every tensor is reached by the loss
    CHECK(std::sqrt(diff_norm) < 1e-5 * std::sqrt(num_norm));
  }
  // The float model computes the same loss.
  BasicDrafter<float> f(t.cfg);
  BasicDrafter<double> d0(t.cfg);
  CHECK(f.evaluate(b).loss == Approx(d0.evaluate(b).loss).epsilon(1e-4));
}

TEST_CASE("drafter learns: loss of the last 20 of 150 steps < 0.8 x the first 20", "[model][drafter]") {
  const Setup su(/*narrow=*/true);
  Drafter d(su.dcfg);
  const std::int32_t steps = 150;
  std::vector<double> loss, acc;
  for (std::int32_t step = 0; step < steps; ++step) {
    const Example e = make_example(su.src, su.target, static_cast<std::uint64_t>(step), 256, su.dcfg.block_size, 16);
    const StepStats s = d.train_step(e.batch());
    REQUIRE(s.labels > 0);
    REQUIRE(std::isfinite(s.loss));
    loss.push_back(s.loss);
    acc.push_back(s.accuracy);
  }
  auto mean = [](const std::vector<double>& v, std::size_t from, std::size_t n) {
    return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(from + n), 0.0) /
           static_cast<double>(n);
  };
  const double first = mean(loss, 0, 20), last = mean(loss, steps - 20, 20);
  // It learned from the target's hidden states: without them it is much worse.
  const Example e = make_example(su.src, su.target, 10'000, 256, su.dcfg.block_size, 16);
  Example blind = e;
  std::fill(blind.hidden.begin(), blind.hidden.end(), 0.0f);
  const double seen = d.evaluate(e.batch()).loss, unseen = d.evaluate(blind.batch()).loss;
  INFO("held-out loss " << seen << ", with the hidden states zeroed " << unseen);
  CHECK(unseen > 2 * seen);
  INFO("loss first 20 " << first << ", last 20 " << last << "; accuracy " << mean(acc, 0, 20) << " -> "
                        << mean(acc, steps - 20, 20));
  CHECK(last < 0.8 * first);
  CHECK(mean(acc, steps - 20, 20) > mean(acc, 0, 20) + 0.1);
  // Acceptance length, recomputed from the logits.
  const StepStats es = d.evaluate(e.batch());
  const auto lg = d.logits(e.batch());
  const auto V = static_cast<std::size_t>(su.dcfg.vocab), B = static_cast<std::size_t>(su.dcfg.block_size);
  double accepted = 0, kept = 0;
  for (std::size_t i = 0; i < e.anchors.anchors.size(); ++i) {
    if (!e.anchors.keep[i]) continue;
    ++kept;
    const auto a = static_cast<std::size_t>(e.anchors.anchors[i]);
    for (std::size_t k = 1; k < B; ++k) {
      const auto row = lg.begin() + static_cast<std::ptrdiff_t>((i * B + k) * V);
      const bool labelled = e.loss_mask[a + k] && e.doc_ids[a + k] == e.doc_ids[a];
      if (!labelled || std::max_element(row, row + static_cast<std::ptrdiff_t>(V)) - row != e.tokens[a + k]) break;
      ++accepted;
    }
  }
  INFO("acceptance length " << es.accept_len);
  CHECK(es.accept_len == accepted / kept);
  CHECK(es.accept_len > 1.0);
  CHECK(d.steps() == steps);
}

TEST_CASE("drafter respects the mask: only allowed context moves a block", "[model][drafter][mask]") {
  const Tiny t;
  const Drafter d(t.cfg);
  const std::int32_t B = t.cfg.block_size, V = t.cfg.vocab, D = t.cfg.feature_dim;
  const auto base = d.logits(t.batch());
  // Block 2: anchor 9 in document 0 (tokens 0..10), window 5 -> context 4..8.
  const std::size_t blk = 2;
  auto block_logits = [&](const std::vector<float>& lg) {
    return std::vector<float>(lg.begin() + static_cast<std::ptrdiff_t>(blk * static_cast<std::size_t>(B * V)),
                              lg.begin() + static_cast<std::ptrdiff_t>((blk + 1) * static_cast<std::size_t>(B * V)));
  };
  auto perturbed = [&](std::int32_t pos) {
    Tiny u = t;
    for (std::int32_t j = 0; j < D; ++j) u.hidden[static_cast<std::size_t>(pos * D + j)] += 0.5f;
    return d.logits(u.batch());
  };
  for (std::int32_t pos = 0; pos < 20; ++pos) {
    const bool allowed = pos >= 4 && pos < 9;
    INFO("perturbed context position " << pos);
    CHECK((block_logits(perturbed(pos)) == block_logits(base)) == !allowed);
  }
  // Blocks never see other blocks: block 1's anchor token changes block 1 only.
  Tiny u = t;
  u.tokens[6] = (u.tokens[6] + 1) % V;
  const auto lg = d.logits(u.batch());
  for (std::size_t i = 0; i < 5; ++i) {
    const auto row = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(B * V)),
                                v.begin() + static_cast<std::ptrdiff_t>((i + 1) * static_cast<std::size_t>(B * V)));
    };
    INFO("block " << i);
    CHECK((row(lg) == row(base)) == (i != 1));
  }
  // The dropped block's logits are zero; the anchor slot still has logits.
  CHECK(std::all_of(base.begin() + 4 * B * V, base.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::any_of(base.begin(), base.begin() + V, [](float v) { return v != 0.0f; }));
  // The loss also ignores a forbidden perturbation and sees an allowed one.
  Tiny far = t, near = t;
  for (std::int32_t j = 0; j < D; ++j) {
    far.hidden[static_cast<std::size_t>(19 * D + j)] += 0.5f;   // after every anchor of document 1
    near.hidden[static_cast<std::size_t>(12 * D + j)] += 0.5f;  // before anchor 13, same document
  }
  CHECK(d.evaluate(far.batch()).loss == d.evaluate(t.batch()).loss);
  CHECK(d.evaluate(near.batch()).loss != d.evaluate(t.batch()).loss);
}

TEST_CASE("drafter training is deterministic given the seeds", "[model][drafter]") {
  Setup su;
  su.dcfg.seed = 5;
  auto run = [&](std::uint64_t seed) {
    DrafterConfig c = su.dcfg;
    c.seed = seed;
    Drafter d(c);
    std::vector<double> out;
    for (std::uint64_t step = 0; step < 4; ++step) {
      const Example e = make_example(su.src, su.target, step, 256, c.block_size, 8);
      const StepStats s = d.train_step(e.batch());
      out.push_back(s.loss);
      out.push_back(s.accuracy);
    }
    return out;
  };
  const auto a = run(5), b = run(5), c = run(6);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a[0] != a[2]);  // parameters moved between steps
}

TEST_CASE("drafter rejects bad input", "[model][drafter]") {
  const Tiny t;
  Drafter d(t.cfg);
  const auto ok = t.batch();
  REQUIRE_NOTHROW(d.evaluate(ok));
  const auto B = t.cfg.block_size;

  Tiny beyond = t;
  beyond.anchors.anchors[3] = 17;  // 17 + 4 > 20
  CHECK_THROWS_AS(d.train_step(beyond.batch()), std::invalid_argument);
  beyond.anchors.anchors[3] = -1;
  CHECK_THROWS_AS(d.train_step(beyond.batch()), std::invalid_argument);
  Tiny dropped = t;  // a dropped block's anchor is ignored
  dropped.anchors.anchors[4] = 1000;
  CHECK_NOTHROW(d.evaluate(dropped.batch()));

  DrafterBatch b = ok;
  b.hidden = b.hidden.first(b.hidden.size() - 1);
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  b = ok;
  b.loss_mask = b.loss_mask.first(19);
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  b = ok;
  b.doc_ids = b.doc_ids.first(19);
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  b = ok;
  b.keep = b.keep.first(4);
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  b = ok;
  b.mask = nullptr;
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  b = ok;
  const auto small = AttentionMask::from_predicate(4 * B, 20 + 4 * B, [](std::int32_t, std::int32_t) { return false; });
  b.mask = &small;
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  b = ok;
  const auto into_dropped = AttentionMask::from_predicate(5 * B, 20 + 5 * B, [&](std::int32_t q, std::int32_t kv) {
    return q < B && kv == 20 + 4 * B;  // block 0 attends a row of dropped block 4
  });
  b.mask = &into_dropped;
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  const auto from_dropped = AttentionMask::from_predicate(5 * B, 20 + 5 * B, [&](std::int32_t q, std::int32_t kv) {
    return q >= 4 * B && kv == 0;  // dropped block 4 attends something
  });
  b.mask = &from_dropped;
  CHECK_THROWS_AS(d.train_step(b), std::invalid_argument);
  Tiny tok = t;
  tok.tokens[3] = t.cfg.vocab;
  CHECK_THROWS_AS(d.train_step(tok.batch()), std::invalid_argument);
  CHECK(d.steps() == 0);  // nothing was applied

  DrafterConfig c = t.cfg;
  c.heads = 3;
  CHECK_THROWS_AS(Drafter(c), std::invalid_argument);
  c = t.cfg;
  c.block_size = 1;
  CHECK_THROWS_AS(Drafter(c), std::invalid_argument);
  CHECK(recommended_gamma(16) == 7.0);
  CHECK(recommended_gamma(10) == 5.0);
  CHECK(recommended_gamma(8) == 4.0);
  CHECK_THROWS_AS(recommended_gamma(12), std::invalid_argument);
}
