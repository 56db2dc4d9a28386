#pragma once
// Compute core of the DFlash example (CPU, deterministic given seeds; the
// library serves only its argument checks).
//
// TargetModel: frozen, random. Embedding [V,H] + L layers
//   h += tanh(rms(h) A_l + rms(causal_mean_in_doc(h)) C_l + b_l).
//   Taps tap_layers(L, num_taps) (tap l = output of layer l), concatenated per token:
//   forward_padded(tokens [docs*seq], lengths [docs], seq) -> [docs, seq, taps*H]
//   (padding rows 0; pack with ops::pack_hidden_states); forward_packed(tokens [S],
//   lengths) -> [S, taps*H].
// BasicDrafter<T> (Drafter = float): one pre-norm transformer layer over
//   kv = [ctx (S) | blocks (N*B)], queries = N*B block slots:
//   ctx[s] = rms(hidden[s] Wfc)*g;  slot k of block i: x0 = (k ? mask_emb :
//   E[tokens[anchor_i]]) + pos_emb[k];  multi-head attention (Wk/Wv shared by ctx
//   and block rows, learned relative-position bias) over the kv that
//   DrafterBatch::mask allows (AttentionMask [N*B, S+N*B] from the ops' dense mask,
//   mask_mod or block views);  SiLU MLP;  norm;  vocab head.
//   Slot k >= 1 predicts tokens[anchor_i + k] where loss_mask is set and it is in
//   the anchor's document, weight exp(-(k-1)/gamma). Kept anchors need anchor+B <= S.
//   train_step(DrafterBatch) -> StepStats{loss, accuracy, labels}: manual backprop +
//   clipped Adam. evaluate(), logits() [N*B, V], parameters() for gradient checks.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <dflash/argument_checks.hpp>

#include "synthetic_data.hpp"

namespace dflash_example {

/// The library's argument checks; messages are "<op>: <what>" (the example's ops name themselves).
inline constexpr dflash::argument_checks checks{""};

namespace detail {
inline std::size_t sz(std::int64_t v) noexcept { return static_cast<std::size_t>(v); }

// Row-vector kernels over row-major matrices W[in, out]. Inner loops run over
// `out`, contiguous, so they vectorise without -ffast-math; four rows of W
// share each pass, which quarters the loads and stores of y / dy (and the
// sanitizers' per-access cost).
template <class T>
void vec_mat(const T* x, const T* w, int in, int out, T* y) noexcept {  // y = x W
  std::fill(y, y + out, T(0));
  const std::size_t n = sz(out);
  int i = 0;
  for (; i + 4 <= in; i += 4) {
    const T x0 = x[i], x1 = x[i + 1], x2 = x[i + 2], x3 = x[i + 3];
    const T *w0 = w + sz(i) * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    for (std::size_t o = 0; o < n; ++o) y[o] += x0 * w0[o] + x1 * w1[o] + x2 * w2[o] + x3 * w3[o];
  }
  for (; i < in; ++i) {
    const T xi = x[i];
    const T* wr = w + sz(i) * n;
    for (std::size_t o = 0; o < n; ++o) y[o] += xi * wr[o];
  }
}
template <class T>
void vec_matT_acc(const T* dy, const T* w, int in, int out, T* dx) noexcept {  // dx += dy W^T
  const std::size_t n = sz(out);
  int i = 0;
  for (; i + 4 <= in; i += 4) {
    const T *w0 = w + sz(i) * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (std::size_t o = 0; o < n; ++o) {
      const T d = dy[o];
      s0 += w0[o] * d;
      s1 += w1[o] * d;
      s2 += w2[o] * d;
      s3 += w3[o] * d;
    }
    dx[i] += s0;
    dx[i + 1] += s1;
    dx[i + 2] += s2;
    dx[i + 3] += s3;
  }
  for (; i < in; ++i) {
    const T* wr = w + sz(i) * n;
    T s = 0;
    for (std::size_t o = 0; o < n; ++o) s += wr[o] * dy[o];
    dx[i] += s;
  }
}
template <class T>
void outer_acc(const T* x, const T* dy, int in, int out, T* dw) noexcept {  // dW += x^T dy
  const std::size_t n = sz(out);
  int i = 0;
  for (; i + 4 <= in; i += 4) {
    const T x0 = x[i], x1 = x[i + 1], x2 = x[i + 2], x3 = x[i + 3];
    T *w0 = dw + sz(i) * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    for (std::size_t o = 0; o < n; ++o) {
      const T d = dy[o];
      w0[o] += x0 * d;
      w1[o] += x1 * d;
      w2[o] += x2 * d;
      w3[o] += x3 * d;
    }
  }
  for (; i < in; ++i) {
    const T xi = x[i];
    T* wr = dw + sz(i) * n;
    for (std::size_t o = 0; o < n; ++o) wr[o] += xi * dy[o];
  }
}

constexpr double kRmsEps = 1e-6;

// y = x * r * g with r = 1/sqrt(mean(x^2) + eps); returns r.
template <class T>
T rms_norm(const T* x, const T* g, int n, T* y) noexcept {
  T ms = 0;
  for (int i = 0; i < n; ++i) ms += x[i] * x[i];
  const T r = T(1) / std::sqrt(ms / T(n) + T(kRmsEps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * r * (g ? g[i] : T(1));
  return r;
}
// Backward of rms_norm: dg += dy * xhat; dx += r * (dxhat - xhat * mean(dxhat * xhat)).
template <class T>
void rms_norm_backward(const T* x, T r, const T* g, const T* dy, int n, T* dg, T* dx) noexcept {
  T dot = 0;
  for (int i = 0; i < n; ++i) {
    const T xhat = x[i] * r;
    dg[i] += dy[i] * xhat;
    dot += dy[i] * g[i] * xhat;
  }
  dot /= T(n);
  for (int i = 0; i < n; ++i) dx[i] += r * (dy[i] * g[i] - x[i] * r * dot);
}

// Uniform init with the given standard deviation.
template <class T>
void init_uniform(SplitMix64& r, std::span<T> w, double stddev) noexcept {
  const double a = std::sqrt(3.0) * stddev;
  for (T& v : w) v = static_cast<T>((2 * r.uniform() - 1) * a);
}
}  // namespace detail

/// Target layers to tap (0-based; tap l = output of layer l). As in the public
/// DFlash recipes: one tap at n/2, otherwise taps spread evenly over layers
/// 1 .. n-3 (rounded). The recipes tie num_taps to the drafter depth; here it is free.
[[nodiscard]] inline std::vector<std::int32_t> tap_layers(std::int32_t num_layers, std::int32_t num_taps) {
  constexpr std::string_view op = "tap_layers";
  checks.require(num_layers >= 1, op, "num_layers = " + std::to_string(num_layers) + " must be positive");
  checks.require(num_taps >= 1, op, "num_taps = " + std::to_string(num_taps) + " must be positive");
  if (num_taps == 1) return {num_layers / 2};
  checks.require(num_layers >= 4, op,
                  "spreading " + std::to_string(num_taps) + " taps over layers 1..n-3 needs n >= 4 (got " +
                      std::to_string(num_layers) + ")");
  const double start = 1, span = num_layers - 3 - start;
  std::vector<std::int32_t> ids;
  for (std::int32_t i = 0; i < num_taps; ++i)
    ids.push_back(static_cast<std::int32_t>(std::lround(start + i * span / (num_taps - 1))));
  return ids;
}

// ---------------------------------------------------------------- target ---

struct TargetConfig {
  std::int32_t vocab = 96;
  std::int32_t hidden = 64;
  std::int32_t layers = 6;
  std::int32_t num_taps = 3;  ///< tap_layers(6, 3) = {1, 2, 3}
  std::uint64_t seed = 11;
};

class TargetModel {
 public:
  explicit TargetModel(const TargetConfig& cfg) : cfg_(cfg) {
    constexpr std::string_view op = "TargetModel";
    checks.require(cfg.vocab >= 1 && cfg.hidden >= 1 && cfg.layers >= 1, op,
                    "vocab, hidden and layers must be positive");
    taps_ = tap_layers(cfg.layers, cfg.num_taps);
    const auto h = detail::sz(cfg.hidden);
    SplitMix64 r(cfg.seed);
    embed_.resize(detail::sz(cfg.vocab) * h);
    detail::init_uniform<float>(r, embed_, 1.0);
    layers_.resize(detail::sz(cfg.layers));
    for (auto& l : layers_) {
      l.a.resize(h * h);
      l.c.resize(h * h);
      l.b.resize(h);
      detail::init_uniform<float>(r, l.a, 1.0 / std::sqrt(static_cast<double>(h)));
      detail::init_uniform<float>(r, l.c, 1.0 / std::sqrt(static_cast<double>(h)));
      detail::init_uniform<float>(r, l.b, 0.1);
    }
  }

  [[nodiscard]] const TargetConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] const std::vector<std::int32_t>& taps() const noexcept { return taps_; }
  // -- the frozen weights, row-major as forward_document reads them (target_forward_gpu uploads them)
  [[nodiscard]] std::span<const float> embedding() const noexcept { return embed_; }                   ///< [vocab, hidden]
  [[nodiscard]] std::span<const float> layer_a(std::size_t l) const { return layers_.at(l).a; }  ///< [hidden, hidden]
  [[nodiscard]] std::span<const float> layer_c(std::size_t l) const { return layers_.at(l).c; }  ///< [hidden, hidden]
  [[nodiscard]] std::span<const float> layer_b(std::size_t l) const { return layers_.at(l).b; }  ///< [hidden]
  // --
  /// Width of one token's hidden-state row: taps * hidden.
  [[nodiscard]] std::int32_t feature_dim() const noexcept {
    return static_cast<std::int32_t>(taps_.size()) * cfg_.hidden;
  }

  /// tokens [docs * seq] right-padded, lengths [docs] each in [0, seq];
  /// out [docs * seq * feature_dim]: row (d, t) is document d's token t, padding rows 0.
  void forward_padded(std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths,
                      std::int32_t seq, std::span<float> out) const {
    constexpr std::string_view op = "TargetModel::forward_padded";
    checks.require(seq >= 0, op, "seq = " + std::to_string(seq) + " is negative");
    const std::size_t docs = lengths.size(), d = detail::sz(feature_dim());
    checks.require_size(tokens.size(), docs * detail::sz(seq), op, "tokens");
    checks.require_size(out.size(), docs * detail::sz(seq) * d, op, "out");
    for (std::size_t b = 0; b < docs; ++b) {
      checks.require(lengths[b] >= 0 && lengths[b] <= seq, op,
                      "lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) + " is not in [0, seq = " +
                          std::to_string(seq) + "]");
      auto row = out.subspan(b * detail::sz(seq) * d, detail::sz(seq) * d);
      forward_document(tokens.subspan(b * detail::sz(seq), detail::sz(lengths[b])), row);
      std::fill(row.begin() + static_cast<std::ptrdiff_t>(detail::sz(lengths[b]) * d), row.end(), 0.0f);
    }
  }
  [[nodiscard]] std::vector<float> forward_padded(std::span<const std::int32_t> tokens,
                                                  std::span<const std::int32_t> lengths, std::int32_t seq) const {
    std::vector<float> out(lengths.size() * detail::sz(seq) * detail::sz(feature_dim()));
    forward_padded(tokens, lengths, seq, out);
    return out;
  }
  [[nodiscard]] std::vector<float> forward_padded(const TokenBatch& b) const {
    return forward_padded(b.tokens, b.lengths, b.seq);
  }

  /// Packed tokens [S] with document lengths (sum S) -> [S, feature_dim].
  [[nodiscard]] std::vector<float> forward_packed(std::span<const std::int32_t> tokens,
                                                  std::span<const std::int32_t> lengths) const {
    constexpr std::string_view op = "TargetModel::forward_packed";
    std::size_t total = 0;
    for (auto l : lengths) {
      checks.require(l >= 0, op, "negative document length " + std::to_string(l));
      total += detail::sz(l);
    }
    checks.require_size(tokens.size(), total, op, "tokens (sum of lengths)");
    const std::size_t d = detail::sz(feature_dim());
    std::vector<float> out(total * d);
    std::size_t at = 0;
    for (auto l : lengths) {
      forward_document(tokens.subspan(at, detail::sz(l)), std::span<float>(out).subspan(at * d, detail::sz(l) * d));
      at += detail::sz(l);
    }
    return out;
  }

 private:
  struct Layer {
    std::vector<float> a, c, b;  // [H,H], [H,H], [H]
  };

  // One document (positions 0..len-1; nothing crosses its boundary).
  void forward_document(std::span<const std::int32_t> tokens, std::span<float> out) const {
    const int h = cfg_.hidden;
    const std::size_t len = tokens.size(), hs = detail::sz(h), d = detail::sz(feature_dim());
    std::vector<float> x(len * hs), run(hs), nx(hs), nm(hs), u(hs), v(hs);
    for (std::size_t t = 0; t < len; ++t) {
      const std::int32_t tok = tokens[t];
      if (tok < 0 || tok >= cfg_.vocab)
        checks.fail("TargetModel::forward", "token " + std::to_string(tok) + " is outside [0, vocab = " +
                                                 std::to_string(cfg_.vocab) + ")");
      std::copy_n(embed_.begin() + static_cast<std::ptrdiff_t>(detail::sz(tok) * hs), hs, x.begin() + static_cast<std::ptrdiff_t>(t * hs));
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      std::fill(run.begin(), run.end(), 0.0f);
      for (std::size_t t = 0; t < len; ++t) {  // causal: the mean includes t, uses the old h
        float* xt = x.data() + t * hs;
        for (std::size_t i = 0; i < hs; ++i) run[i] += xt[i];
        for (std::size_t i = 0; i < hs; ++i) v[i] = run[i] / static_cast<float>(t + 1);
        detail::rms_norm<float>(xt, nullptr, h, nx.data());
        detail::rms_norm<float>(v.data(), nullptr, h, nm.data());
        detail::vec_mat(nx.data(), L.a.data(), h, h, u.data());
        detail::vec_mat(nm.data(), L.c.data(), h, h, v.data());
        for (std::size_t i = 0; i < hs; ++i) xt[i] += std::tanh(u[i] + v[i] + L.b[i]);
      }
      for (std::size_t k = 0; k < taps_.size(); ++k)
        if (detail::sz(taps_[k]) == l)
          for (std::size_t t = 0; t < len; ++t)
            std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(t * hs), hs,
                        out.begin() + static_cast<std::ptrdiff_t>(t * d + k * hs));
    }
  }

  TargetConfig cfg_;
  std::vector<std::int32_t> taps_;
  std::vector<float> embed_;
  std::vector<Layer> layers_;
};

// ------------------------------------------------------------------ mask ---

/// Half-open kv interval [lo, hi).
struct KvRange {
  std::int32_t lo = 0;
  std::int32_t hi = 0;
};

/// Which kv rows each query may attend: CSR rows of ascending kv indices.
/// Queries are N*B block slots; kv = [context (S) | blocks (N*B)].
class AttentionMask {
 public:
  AttentionMask() = default;

  /// allowed[q * cols + kv] != 0 (the layout of ops::dense_mask::allowed).
  [[nodiscard]] static AttentionMask from_dense(std::int32_t rows, std::int32_t cols, std::span<const std::uint8_t> allowed) {
    check_dims(rows, cols, "AttentionMask::from_dense");
    checks.require_size(allowed.size(), detail::sz(rows) * detail::sz(cols), "AttentionMask::from_dense", "allowed");
    return from_predicate(rows, cols, [&](std::int32_t q, std::int32_t kv) {
      return allowed[detail::sz(q) * detail::sz(cols) + detail::sz(kv)] != 0;
    });
  }

  /// allowed(q, kv) -> bool for every pair (e.g. ops::block_mask_mod, ops::dense_mask).
  template <class Pred>
  [[nodiscard]] static AttentionMask from_predicate(std::int32_t rows, std::int32_t cols, Pred&& allowed) {
    check_dims(rows, cols, "AttentionMask::from_predicate");
    AttentionMask m(rows, cols);
    for (std::int32_t q = 0; q < rows; ++q) {
      for (std::int32_t kv = 0; kv < cols; ++kv)
        if (allowed(q, kv)) m.indices_.push_back(kv);
      m.offsets_.push_back(static_cast<std::int64_t>(m.indices_.size()));
    }
    return m;
  }

  /// Per block i: context range and own-block range (ops::block_view_of's
  /// .context / .own); every slot of block i gets both. Empty ranges for dropped blocks.
  [[nodiscard]] static AttentionMask from_block_ranges(std::int32_t context_len, std::int32_t block_size,
                                                       std::span<const KvRange> context, std::span<const KvRange> own) {
    constexpr std::string_view op = "AttentionMask::from_block_ranges";
    checks.require(context_len >= 0 && block_size >= 1, op, "need context_len >= 0 and block_size >= 1");
    checks.require_size(own.size(), context.size(), op, "own");
    const auto rows64 = static_cast<std::int64_t>(context.size()) * block_size;
    checks.require(context_len + rows64 <= std::numeric_limits<std::int32_t>::max(), op, "mask too large");
    const auto rows = static_cast<std::int32_t>(rows64), cols = context_len + rows;
    AttentionMask m(rows, cols);
    for (std::size_t i = 0; i < context.size(); ++i) {
      const KvRange c = context[i], o = own[i];
      checks.require(0 <= c.lo && c.lo <= c.hi && c.hi <= context_len, op,
                      "context[" + std::to_string(i) + "] = [" + std::to_string(c.lo) + ", " + std::to_string(c.hi) +
                          ") is not inside the context [0, " + std::to_string(context_len) + ")");
      checks.require(context_len <= o.lo && o.lo <= o.hi && o.hi <= cols, op,
                      "own[" + std::to_string(i) + "] = [" + std::to_string(o.lo) + ", " + std::to_string(o.hi) +
                          ") is not inside the block rows [" + std::to_string(context_len) + ", " +
                          std::to_string(cols) + ")");
      for (std::int32_t k = 0; k < block_size; ++k) {
        for (std::int32_t kv = c.lo; kv < c.hi; ++kv) m.indices_.push_back(kv);
        for (std::int32_t kv = o.lo; kv < o.hi; ++kv) m.indices_.push_back(kv);
        m.offsets_.push_back(static_cast<std::int64_t>(m.indices_.size()));
      }
    }
    return m;
  }

  [[nodiscard]] std::int32_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::int32_t cols() const noexcept { return cols_; }
  [[nodiscard]] std::size_t nnz() const noexcept { return indices_.size(); }
  [[nodiscard]] std::int64_t offset(std::int32_t q) const noexcept { return offsets_[detail::sz(q)]; }
  [[nodiscard]] std::span<const std::int32_t> row(std::int32_t q) const noexcept {
    const auto b = offsets_[detail::sz(q)], e = offsets_[detail::sz(q) + 1];
    return {indices_.data() + b, detail::sz(e - b)};
  }
  friend bool operator==(const AttentionMask&, const AttentionMask&) = default;

 private:
  AttentionMask(std::int32_t rows, std::int32_t cols) : rows_(rows), cols_(cols), offsets_{0} {
    offsets_.reserve(detail::sz(rows) + 1);
  }
  static void check_dims(std::int32_t rows, std::int32_t cols, std::string_view op) {
    checks.require(rows >= 0 && cols >= 0, op, "rows and cols must be non-negative");
  }

  std::int32_t rows_ = 0;
  std::int32_t cols_ = 0;
  std::vector<std::int64_t> offsets_{0};  // [rows + 1]
  std::vector<std::int32_t> indices_;
};

// --------------------------------------------------------------- drafter ---

struct DrafterConfig {
  std::int32_t vocab = 96;
  std::int32_t hidden = 64;
  std::int32_t feature_dim = 192;  ///< target taps * target hidden
  std::int32_t heads = 4;          ///< must divide hidden
  std::int32_t ffn = 128;
  std::int32_t block_size = 16;
  /// Learned per-head score bias by distance d = query pos - kv pos, d clamped
  /// to [-(block_size-1), rel_distances-1]: our stand-in for the recipes' RoPE.
  std::int32_t rel_distances = 64;
  double loss_gamma = 7.0;  ///< slot weight exp(-(k-1)/gamma); 0 = uniform
  double lr = 3e-3;                ///< Adam
  /// Step multiplier for the relative-position bias: Adam moves an entry by
  /// about lr per step, and a bias must reach ~log(#kv) to focus attention on
  /// one distance; at 1x that takes ~1000 steps, at 20x under 100.
  double rel_bias_lr_scale = 20.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;          ///< global L2 norm; 0 = off
  std::uint64_t seed = 1;
};

/// Recommended decay gamma per block size (public DFlash recipes).
[[nodiscard]] inline double recommended_gamma(std::int32_t block_size) {
  switch (block_size) {
    case 16: return 7.0;
    case 10: return 5.0;
    case 8: return 4.0;
    default: checks.fail("recommended_gamma", "no recommendation for block size " + std::to_string(block_size));
  }
}

/// One packed sequence for the drafter; views, the caller owns the data.
struct DrafterBatch {
  std::span<const float> hidden;           ///< [S, feature_dim] packed target hidden states
  std::span<const std::int32_t> tokens;    ///< [S]
  std::span<const std::uint8_t> loss_mask; ///< [S]
  std::span<const std::int32_t> doc_ids;   ///< [S]
  std::span<const std::int32_t> anchors;   ///< [N]
  std::span<const std::uint8_t> keep;      ///< [N]; 0 = padding block
  const AttentionMask* mask = nullptr;     ///< [N*B, S+N*B]
};

struct StepStats {
  double loss = 0;          ///< sum(w * CE) / sum(w) over labelled slots
  double accuracy = 0;      ///< labelled slots whose argmax is the label / labels
  std::int64_t labels = 0;  ///< labelled slots (0: nothing to learn, no update)
  /// Mean over kept blocks of the run of correct argmaxes from slot 1 on (stops
  /// at the first wrong or unlabelled slot): DFlash's acceptance length minus
  /// the bonus token.
  double accept_len = 0;
};

template <class T>
struct ParamView {
  std::string_view name;
  std::int32_t rows, cols;
  std::span<T> value;
  std::span<T> grad;
};

template <class T = float>
class BasicDrafter {
 public:
  explicit BasicDrafter(const DrafterConfig& cfg) : cfg_(cfg) {
    constexpr std::string_view op = "Drafter";
    checks.require(cfg.vocab >= 1 && cfg.hidden >= 1 && cfg.feature_dim >= 1 && cfg.ffn >= 1, op,
                    "vocab, hidden, feature_dim and ffn must be positive");
    checks.require(cfg.heads >= 1 && cfg.hidden % cfg.heads == 0, op,
                    "heads = " + std::to_string(cfg.heads) + " must divide hidden = " + std::to_string(cfg.hidden));
    checks.require(cfg.block_size >= 2, op, "block_size = " + std::to_string(cfg.block_size) + " must be >= 2");
    checks.require(cfg.rel_distances >= 1, op, "rel_distances = " + std::to_string(cfg.rel_distances) + " must be positive");
    checks.require(cfg.loss_gamma >= 0, op, "loss_gamma must be >= 0");
    checks.require(cfg.lr > 0 && cfg.rel_bias_lr_scale > 0 && cfg.grad_clip >= 0, op,
                    "need lr > 0, rel_bias_lr_scale > 0 and grad_clip >= 0");
    const int H = cfg.hidden, D = cfg.feature_dim, V = cfg.vocab, F = cfg.ffn, B = cfg.block_size;
    const int R = cfg.heads, C = cfg.block_size - 1 + cfg.rel_distances;
    const int shapes[kCount][2] = {{D, H}, {1, H}, {V, H}, {1, H}, {B, H}, {1, H}, {H, H}, {H, H}, {H, H}, {R, C},
                                   {H, H}, {1, H}, {H, F}, {1, F}, {F, H}, {1, H}, {H, V}, {1, V}};
    std::size_t at = 0;
    for (int p = 0; p < kCount; ++p) {
      rows_[p] = shapes[p][0];
      cols_[p] = shapes[p][1];
      off_[p] = at;
      at += detail::sz(rows_[p]) * detail::sz(cols_[p]);
    }
    off_[kCount] = at;
    theta_.assign(at, T(0));
    grad_.assign(at, T(0));
    m_.assign(at, T(0));
    v_.assign(at, T(0));
    SplitMix64 r(cfg.seed);
    auto fan = [](int in) { return 1.0 / std::sqrt(static_cast<double>(in)); };
    detail::init_uniform<T>(r, param(kWfc), fan(D));
    detail::init_uniform<T>(r, param(kEmb), 1.0);
    detail::init_uniform<T>(r, param(kMaskEmb), 1.0);
    detail::init_uniform<T>(r, param(kPos), 0.5);
    for (int p : {kWq, kWk, kWv}) detail::init_uniform<T>(r, param(p), fan(H));
    detail::init_uniform<T>(r, param(kWo), 0.5 * fan(H));
    detail::init_uniform<T>(r, param(kW1), fan(H));
    detail::init_uniform<T>(r, param(kW2), 0.5 * fan(F));
    detail::init_uniform<T>(r, param(kWlm), fan(H));
    for (int p : {kGctx, kG1, kG2, kGf}) std::fill(param(p).begin(), param(p).end(), T(1));
  }

  [[nodiscard]] const DrafterConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t num_parameters() const noexcept { return theta_.size(); }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }

  /// Forward, backward and one Adam step; returns the stats before the update.
  StepStats train_step(const DrafterBatch& b) {
    const StepStats s = compute_gradients(b);
    if (s.labels > 0) apply_gradients();
    return s;
  }

  /// Forward + backward into the gradients (zeroed first); no update.
  StepStats compute_gradients(const DrafterBatch& b) {
    std::fill(grad_.begin(), grad_.end(), T(0));
    Workspace& w = ws_;
    const StepStats s = forward(b, w, Mode::train);
    if (s.labels > 0) backward(b, w);
    return s;
  }

  /// Clipped Adam on the current gradients.
  void apply_gradients() noexcept {
    ++steps_;
    double norm2 = 0;
    for (T g : grad_) norm2 += static_cast<double>(g) * static_cast<double>(g);
    const double norm = std::sqrt(norm2);
    const double scale = cfg_.grad_clip > 0 && norm > cfg_.grad_clip ? cfg_.grad_clip / norm : 1.0;
    const double c1 = 1 - std::pow(cfg_.beta1, static_cast<double>(steps_));
    const double c2 = 1 - std::pow(cfg_.beta2, static_cast<double>(steps_));
    const T b1 = T(cfg_.beta1), b2 = T(cfg_.beta2), lr = T(cfg_.lr / c1), eps = T(cfg_.adam_eps);
    const T ic2 = T(1.0 / c2), sc = T(scale);
    const T rel_lr = lr * T(cfg_.rel_bias_lr_scale);
    for (std::size_t i = 0; i < theta_.size(); ++i) {
      const T g = grad_[i] * sc;
      m_[i] = b1 * m_[i] + (T(1) - b1) * g;
      v_[i] = b2 * v_[i] + (T(1) - b2) * g * g;
      theta_[i] -= (i >= off_[kRel] && i < off_[kRel + 1] ? rel_lr : lr) * m_[i] / (std::sqrt(v_[i] * ic2) + eps);
    }
  }

  /// Loss and accuracy without touching gradients or parameters.
  [[nodiscard]] StepStats evaluate(const DrafterBatch& b) const {
    Workspace w;
    return forward(b, w, Mode::train);
  }

  /// Logits [N*B, vocab] of every slot of every kept block (rows of dropped blocks are 0).
  [[nodiscard]] std::vector<T> logits(const DrafterBatch& b) const {
    Workspace w;
    forward(b, w, Mode::all_logits);
    return std::move(w.logits);
  }

  /// Every parameter tensor with its gradient (for inspection and gradient checks).
  [[nodiscard]] std::vector<ParamView<T>> parameters() {
    static constexpr std::string_view names[kCount] = {
        "fc", "ctx_norm", "embed", "mask_embed", "pos_embed", "attn_norm", "wq", "wk", "wv", "rel_bias",
        "wo", "mlp_norm", "w1", "b1", "w2", "final_norm", "lm_head", "lm_bias"};
    std::vector<ParamView<T>> out;
    for (int p = 0; p < kCount; ++p) out.push_back({names[p], rows_[p], cols_[p], param(p), grad(p)});
    return out;
  }

 private:
  enum : int { kWfc, kGctx, kEmb, kMaskEmb, kPos, kG1, kWq, kWk, kWv, kRel, kWo, kG2, kW1, kB1, kW2, kGf, kWlm, kBlm, kCount };
  enum class Mode { train, all_logits };

  struct Workspace {
    std::int32_t S = 0, N = 0, Q = 0;
    std::vector<std::uint8_t> ctx_used;     // [S]
    std::vector<std::int32_t> label;        // [Q], -1 = none
    std::vector<T> weight;                  // [Q]
    std::vector<std::uint8_t> out_row;      // [Q]: attention output needed
    std::vector<T> fc, c, rc;               // [S,H], [S,H], [S]
    std::vector<T> x0, xn, r1, qv;          // [Q,H], [Q,H], [Q], [Q,H]
    std::vector<T> K, V;                    // [S+Q, H]
    std::vector<T> probs;                   // [nnz * heads]
    std::vector<T> o, x1, x1n, r2, a1, h1, x2, z, rf;
    std::vector<T> logits;                  // [Q, V]
    T weight_sum = 0;
  };

  std::span<T> param(int p) noexcept { return {theta_.data() + off_[p], off_[p + 1] - off_[p]}; }
  std::span<T> grad(int p) noexcept { return {grad_.data() + off_[p], off_[p + 1] - off_[p]}; }
  const T* P(int p) const noexcept { return theta_.data() + off_[p]; }
  T* G(int p) noexcept { return grad_.data() + off_[p]; }

  // Sequence position of kv row kv (context: its index; block slot j of block i: anchor_i + j).
  std::int32_t kv_position(const DrafterBatch& b, std::int32_t S, std::int32_t kv) const noexcept {
    if (kv < S) return kv;
    const std::int32_t q = kv - S;
    return b.anchors[detail::sz(q / cfg_.block_size)] + q % cfg_.block_size;
  }
  // Column of the relative bias for query position qp attending kv position kp.
  std::size_t rel_column(std::int32_t qp, std::int32_t kp) const noexcept {
    const std::int32_t lo = -(cfg_.block_size - 1), hi = cfg_.rel_distances - 1;
    return detail::sz(std::clamp(qp - kp, lo, hi) - lo);
  }

  void validate(const DrafterBatch& b) const {
    constexpr std::string_view op = "Drafter";
    const std::size_t S = b.tokens.size(), N = b.anchors.size(), B = detail::sz(cfg_.block_size);
    checks.require(S <= detail::sz(std::numeric_limits<std::int32_t>::max() / 2), op, "sequence too long");
    checks.require_size(b.hidden.size(), S * detail::sz(cfg_.feature_dim), op, "hidden (S * feature_dim)");
    checks.require_size(b.loss_mask.size(), S, op, "loss_mask");
    checks.require_size(b.doc_ids.size(), S, op, "doc_ids");
    checks.require_size(b.keep.size(), N, op, "keep");
    for (std::size_t s = 0; s < S; ++s)
      if (b.tokens[s] < 0 || b.tokens[s] >= cfg_.vocab)
        checks.fail(op, "tokens[" + std::to_string(s) + "] = " + std::to_string(b.tokens[s]) +
                             " is outside [0, vocab = " + std::to_string(cfg_.vocab) + ")");
    for (std::size_t i = 0; i < N; ++i)
      if (b.keep[i] && (b.anchors[i] < 0 || detail::sz(b.anchors[i]) + B > S))
        checks.fail(op, "anchors[" + std::to_string(i) + "] = " + std::to_string(b.anchors[i]) +
                             " is outside [0, S - block_size] = [0, " + std::to_string(static_cast<std::int64_t>(S) - static_cast<std::int64_t>(B)) + "]");
    checks.require(b.mask != nullptr, op, "mask is null");
    const AttentionMask& m = *b.mask;
    checks.require(detail::sz(m.rows()) == N * B && detail::sz(m.cols()) == S + N * B, op,
                    "mask is " + std::to_string(m.rows()) + " x " + std::to_string(m.cols()) + ", expected " +
                        std::to_string(N * B) + " x " + std::to_string(S + N * B));
    for (std::int32_t q = 0; q < m.rows(); ++q) {
      const std::size_t i = detail::sz(q) / B;
      auto r = m.row(q);
      if (!b.keep[i] && !r.empty())
        checks.fail(op, "mask row " + std::to_string(q) + " belongs to dropped block " + std::to_string(i) +
                             " but attends to something");
      for (auto kv : r)
        if (detail::sz(kv) >= S && !b.keep[(detail::sz(kv) - S) / B])
          checks.fail(op, "mask row " + std::to_string(q) + " attends to kv " + std::to_string(kv) +
                               " of dropped block " + std::to_string((detail::sz(kv) - S) / B));
    }
  }

  StepStats forward(const DrafterBatch& b, Workspace& w, Mode mode) const {
    validate(b);
    const int H = cfg_.hidden, D = cfg_.feature_dim, F = cfg_.ffn, Vc = cfg_.vocab, B = cfg_.block_size;
    const int nh = cfg_.heads, dh = H / nh;
    const std::int32_t S = static_cast<std::int32_t>(b.tokens.size()), N = static_cast<std::int32_t>(b.anchors.size());
    const std::int32_t Q = N * B;
    const std::size_t h = detail::sz(H);
    w.S = S;
    w.N = N;
    w.Q = Q;
    const AttentionMask& m = *b.mask;

    // Labels and which rows need an output.
    w.label.assign(detail::sz(Q), -1);
    w.weight.assign(detail::sz(Q), T(0));
    w.out_row.assign(detail::sz(Q), 0);
    w.weight_sum = 0;
    for (std::int32_t q = 0; q < Q; ++q) {
      const std::int32_t i = q / B, k = q % B;
      if (!b.keep[detail::sz(i)]) continue;
      const std::int32_t a = b.anchors[detail::sz(i)], pos = a + k;
      if (k > 0 && b.loss_mask[detail::sz(pos)] && b.doc_ids[detail::sz(pos)] == b.doc_ids[detail::sz(a)]) {
        w.label[detail::sz(q)] = b.tokens[detail::sz(pos)];
        w.weight[detail::sz(q)] = cfg_.loss_gamma > 0 ? T(std::exp(-(k - 1) / cfg_.loss_gamma)) : T(1);
        w.weight_sum += w.weight[detail::sz(q)];
      }
      w.out_row[detail::sz(q)] = mode == Mode::all_logits || w.label[detail::sz(q)] >= 0;
    }

    // Context features and their keys/values, only for rows some query reads.
    w.ctx_used.assign(detail::sz(S), 0);
    for (std::int32_t q = 0; q < Q; ++q)
      if (w.out_row[detail::sz(q)])
        for (auto kv : m.row(q))
          if (kv < S) w.ctx_used[detail::sz(kv)] = 1;
    w.fc.assign(detail::sz(S) * h, T(0));
    w.c.assign(detail::sz(S) * h, T(0));
    w.rc.assign(detail::sz(S), T(0));
    w.K.assign(detail::sz(S + Q) * h, T(0));
    w.V.assign(detail::sz(S + Q) * h, T(0));
    std::vector<T> hrow(detail::sz(D));
    for (std::int32_t s = 0; s < S; ++s) {
      if (!w.ctx_used[detail::sz(s)]) continue;
      const float* src = b.hidden.data() + detail::sz(s) * detail::sz(D);
      for (int j = 0; j < D; ++j) hrow[detail::sz(j)] = static_cast<T>(src[j]);
      T* fc = &w.fc[detail::sz(s) * h];
      T* c = &w.c[detail::sz(s) * h];
      detail::vec_mat(hrow.data(), P(kWfc), D, H, fc);
      w.rc[detail::sz(s)] = detail::rms_norm(fc, P(kGctx), H, c);
      detail::vec_mat(c, P(kWk), H, H, &w.K[detail::sz(s) * h]);
      detail::vec_mat(c, P(kWv), H, H, &w.V[detail::sz(s) * h]);
    }

    // Block inputs, queries and block keys/values.
    w.x0.assign(detail::sz(Q) * h, T(0));
    w.xn.assign(detail::sz(Q) * h, T(0));
    w.r1.assign(detail::sz(Q), T(0));
    w.qv.assign(detail::sz(Q) * h, T(0));
    for (std::int32_t q = 0; q < Q; ++q) {
      const std::int32_t i = q / B, k = q % B;
      if (!b.keep[detail::sz(i)]) continue;
      T* x0 = &w.x0[detail::sz(q) * h];
      const T* src = k == 0 ? P(kEmb) + detail::sz(b.tokens[detail::sz(b.anchors[detail::sz(i)])]) * h : P(kMaskEmb);
      const T* pe = P(kPos) + detail::sz(k) * h;
      for (std::size_t j = 0; j < h; ++j) x0[j] = src[j] + pe[j];
      T* xn = &w.xn[detail::sz(q) * h];
      w.r1[detail::sz(q)] = detail::rms_norm(x0, P(kG1), H, xn);
      detail::vec_mat(xn, P(kWq), H, H, &w.qv[detail::sz(q) * h]);
      detail::vec_mat(xn, P(kWk), H, H, &w.K[detail::sz(S + q) * h]);
      detail::vec_mat(xn, P(kWv), H, H, &w.V[detail::sz(S + q) * h]);
    }

    // Attention, MLP, head for the rows that need an output.
    const T scale = T(1) / std::sqrt(T(dh));
    w.probs.assign(m.nnz() * detail::sz(nh), T(0));
    for (auto* v : {&w.o, &w.x1, &w.x1n, &w.x2, &w.z}) v->assign(detail::sz(Q) * h, T(0));
    w.r2.assign(detail::sz(Q), T(0));
    w.rf.assign(detail::sz(Q), T(0));
    w.a1.assign(detail::sz(Q) * detail::sz(F), T(0));
    w.h1.assign(detail::sz(Q) * detail::sz(F), T(0));
    w.logits.assign(detail::sz(Q) * detail::sz(Vc), T(0));
    StepStats st;
    double loss = 0;
    std::int64_t hits = 0;
    std::vector<std::int8_t> correct(detail::sz(Q), -1);
    std::vector<T> tmp(h);
    for (std::int32_t q = 0; q < Q; ++q) {
      if (!w.out_row[detail::sz(q)]) continue;
      const auto row = m.row(q);
      const std::size_t n = row.size();
      const T* qq = &w.qv[detail::sz(q) * h];
      T* o = &w.o[detail::sz(q) * h];
      const std::int32_t qp = b.anchors[detail::sz(q / B)] + q % B;
      for (int hd = 0; hd < nh; ++hd) {
        const T* rel = P(kRel) + detail::sz(hd) * detail::sz(cols_[kRel]);
        T* p = &w.probs[(detail::sz(m.offset(q)) + 0) * detail::sz(nh) + detail::sz(hd) * n];
        const std::size_t ho = detail::sz(hd) * detail::sz(dh);
        T mx = -std::numeric_limits<T>::infinity();
        for (std::size_t j = 0; j < n; ++j) {
          const T* kk = &w.K[detail::sz(row[j]) * h + ho];
          T s = 0;
          for (int e = 0; e < dh; ++e) s += qq[ho + detail::sz(e)] * kk[e];
          p[j] = s * scale + rel[rel_column(qp, kv_position(b, S, row[j]))];
          mx = std::max(mx, p[j]);
        }
        T sum = 0;
        for (std::size_t j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (std::size_t j = 0; j < n; ++j) {
          p[j] /= sum;
          const T* vv = &w.V[detail::sz(row[j]) * h + ho];
          for (int e = 0; e < dh; ++e) o[ho + detail::sz(e)] += p[j] * vv[e];
        }
      }
      T* x1 = &w.x1[detail::sz(q) * h];
      detail::vec_mat(o, P(kWo), H, H, x1);
      const T* x0 = &w.x0[detail::sz(q) * h];
      for (std::size_t j = 0; j < h; ++j) x1[j] += x0[j];
      T* x1n = &w.x1n[detail::sz(q) * h];
      w.r2[detail::sz(q)] = detail::rms_norm(x1, P(kG2), H, x1n);
      T* a1 = &w.a1[detail::sz(q) * detail::sz(F)];
      T* h1 = &w.h1[detail::sz(q) * detail::sz(F)];
      detail::vec_mat(x1n, P(kW1), H, F, a1);
      for (int j = 0; j < F; ++j) {
        a1[j] += P(kB1)[j];
        h1[j] = a1[j] / (T(1) + std::exp(-a1[j]));
      }
      T* x2 = &w.x2[detail::sz(q) * h];
      detail::vec_mat(h1, P(kW2), F, H, x2);
      for (std::size_t j = 0; j < h; ++j) x2[j] += x1[j];
      T* z = &w.z[detail::sz(q) * h];
      w.rf[detail::sz(q)] = detail::rms_norm(x2, P(kGf), H, z);
      T* lg = &w.logits[detail::sz(q) * detail::sz(Vc)];
      detail::vec_mat(z, P(kWlm), H, Vc, lg);
      for (int j = 0; j < Vc; ++j) lg[j] += P(kBlm)[j];
      const std::int32_t y = w.label[detail::sz(q)];
      if (y < 0) continue;
      int arg = 0;
      T mx = lg[0];
      for (int j = 1; j < Vc; ++j)
        if (lg[j] > mx) mx = lg[arg = j];
      T se = 0;
      for (int j = 0; j < Vc; ++j) se += std::exp(lg[j] - mx);
      const T ce = mx + std::log(se) - lg[y];
      loss += static_cast<double>(w.weight[detail::sz(q)] * ce);
      hits += arg == y;
      correct[detail::sz(q)] = arg == y;
      ++st.labels;
    }
    std::int64_t kept = 0, accepted = 0;
    for (std::int32_t i = 0; i < N; ++i) {
      if (!b.keep[detail::sz(i)]) continue;
      ++kept;
      for (std::int32_t k = 1; k < B && correct[detail::sz(i * B + k)] == 1; ++k) ++accepted;
    }
    if (kept > 0) st.accept_len = static_cast<double>(accepted) / static_cast<double>(kept);
    if (st.labels > 0) {
      st.loss = loss / static_cast<double>(w.weight_sum);
      st.accuracy = static_cast<double>(hits) / static_cast<double>(st.labels);
    }
    return st;
  }

  void backward(const DrafterBatch& b, Workspace& w) {
    const int H = cfg_.hidden, D = cfg_.feature_dim, F = cfg_.ffn, Vc = cfg_.vocab, B = cfg_.block_size;
    const int nh = cfg_.heads, dh = H / nh;
    const std::int32_t S = w.S, Q = w.Q;
    const std::size_t h = detail::sz(H), f = detail::sz(F);
    const AttentionMask& m = *b.mask;
    const T scale = T(1) / std::sqrt(T(dh));
    std::vector<T> dQ(detail::sz(Q) * h, T(0)), dK(detail::sz(S + Q) * h, T(0)), dV(detail::sz(S + Q) * h, T(0));
    std::vector<T> dlg(detail::sz(Vc)), dz(h), dx2(h), dh1(f), da1(f), dx1n(h), dx1(h), dO(h), dp;
    std::vector<T> dx0(detail::sz(Q) * h, T(0));

    for (std::int32_t q = 0; q < Q; ++q) {
      const std::int32_t y = w.label[detail::sz(q)];
      if (y < 0) continue;
      const T wq = w.weight[detail::sz(q)] / w.weight_sum;
      const T* lg = &w.logits[detail::sz(q) * detail::sz(Vc)];
      T mx = lg[0];
      for (int j = 1; j < Vc; ++j) mx = std::max(mx, lg[j]);
      T se = 0;
      for (int j = 0; j < Vc; ++j) se += (dlg[detail::sz(j)] = std::exp(lg[j] - mx));
      for (int j = 0; j < Vc; ++j) dlg[detail::sz(j)] = dlg[detail::sz(j)] / se * wq;
      dlg[detail::sz(y)] -= wq;
      // Head.
      const T* z = &w.z[detail::sz(q) * h];
      detail::outer_acc(z, dlg.data(), H, Vc, G(kWlm));
      for (int j = 0; j < Vc; ++j) G(kBlm)[j] += dlg[detail::sz(j)];
      std::fill(dz.begin(), dz.end(), T(0));
      detail::vec_matT_acc(dlg.data(), P(kWlm), H, Vc, dz.data());
      std::fill(dx2.begin(), dx2.end(), T(0));
      const T* x2 = &w.x2[detail::sz(q) * h];
      detail::rms_norm_backward(x2, w.rf[detail::sz(q)], P(kGf), dz.data(), H, G(kGf), dx2.data());
      // MLP.
      const T* h1 = &w.h1[detail::sz(q) * f];
      const T* a1 = &w.a1[detail::sz(q) * f];
      detail::outer_acc(h1, dx2.data(), F, H, G(kW2));
      std::fill(dh1.begin(), dh1.end(), T(0));
      detail::vec_matT_acc(dx2.data(), P(kW2), F, H, dh1.data());
      for (std::size_t j = 0; j < f; ++j) {
        const T sg = T(1) / (T(1) + std::exp(-a1[j]));
        da1[j] = dh1[j] * sg * (T(1) + a1[j] * (T(1) - sg));
        G(kB1)[j] += da1[j];
      }
      const T* x1n = &w.x1n[detail::sz(q) * h];
      detail::outer_acc(x1n, da1.data(), H, F, G(kW1));
      std::fill(dx1n.begin(), dx1n.end(), T(0));
      detail::vec_matT_acc(da1.data(), P(kW1), H, F, dx1n.data());
      dx1 = dx2;
      detail::rms_norm_backward(&w.x1[detail::sz(q) * h], w.r2[detail::sz(q)], P(kG2), dx1n.data(), H, G(kG2), dx1.data());
      // Output projection and residual.
      T* dx0q = &dx0[detail::sz(q) * h];
      for (std::size_t j = 0; j < h; ++j) dx0q[j] += dx1[j];
      detail::outer_acc(&w.o[detail::sz(q) * h], dx1.data(), H, H, G(kWo));
      std::fill(dO.begin(), dO.end(), T(0));
      detail::vec_matT_acc(dx1.data(), P(kWo), H, H, dO.data());
      // Attention.
      const auto row = m.row(q);
      const std::size_t n = row.size();
      dp.resize(n);
      const T* qq = &w.qv[detail::sz(q) * h];
      T* dq = &dQ[detail::sz(q) * h];
      const std::int32_t qp = b.anchors[detail::sz(q / B)] + q % B;
      for (int hd = 0; hd < nh; ++hd) {
        T* drel = G(kRel) + detail::sz(hd) * detail::sz(cols_[kRel]);
        const T* p = &w.probs[detail::sz(m.offset(q)) * detail::sz(nh) + detail::sz(hd) * n];
        const std::size_t ho = detail::sz(hd) * detail::sz(dh);
        T sum = 0;
        for (std::size_t j = 0; j < n; ++j) {
          const std::size_t r = detail::sz(row[j]) * h + ho;
          T s = 0;
          for (int e = 0; e < dh; ++e) {
            s += dO[ho + detail::sz(e)] * w.V[r + detail::sz(e)];
            dV[r + detail::sz(e)] += p[j] * dO[ho + detail::sz(e)];
          }
          dp[j] = s;
          sum += p[j] * s;
        }
        for (std::size_t j = 0; j < n; ++j) {
          const T dsc = p[j] * (dp[j] - sum);  // d loss / d score
          drel[rel_column(qp, kv_position(b, S, row[j]))] += dsc;
          const T ds = dsc * scale;
          const std::size_t r = detail::sz(row[j]) * h + ho;
          for (int e = 0; e < dh; ++e) {
            dq[ho + detail::sz(e)] += ds * w.K[r + detail::sz(e)];
            dK[r + detail::sz(e)] += ds * qq[ho + detail::sz(e)];
          }
        }
      }
    }

    // Block rows: queries, keys, values -> normed input -> embeddings.
    std::vector<T> dxn(h);
    for (std::int32_t q = 0; q < Q; ++q) {
      const std::int32_t i = q / B, k = q % B;
      if (!b.keep[detail::sz(i)]) continue;
      const T* xn = &w.xn[detail::sz(q) * h];
      const T* gq = &dQ[detail::sz(q) * h];
      const T* gk = &dK[detail::sz(S + q) * h];
      const T* gv = &dV[detail::sz(S + q) * h];
      std::fill(dxn.begin(), dxn.end(), T(0));
      detail::outer_acc(xn, gq, H, H, G(kWq));
      detail::outer_acc(xn, gk, H, H, G(kWk));
      detail::outer_acc(xn, gv, H, H, G(kWv));
      detail::vec_matT_acc(gq, P(kWq), H, H, dxn.data());
      detail::vec_matT_acc(gk, P(kWk), H, H, dxn.data());
      detail::vec_matT_acc(gv, P(kWv), H, H, dxn.data());
      T* dx0q = &dx0[detail::sz(q) * h];
      detail::rms_norm_backward(&w.x0[detail::sz(q) * h], w.r1[detail::sz(q)], P(kG1), dxn.data(), H, G(kG1), dx0q);
      T* dsrc = k == 0 ? G(kEmb) + detail::sz(b.tokens[detail::sz(b.anchors[detail::sz(i)])]) * h : G(kMaskEmb);
      T* dpe = G(kPos) + detail::sz(k) * h;
      for (std::size_t j = 0; j < h; ++j) {
        dsrc[j] += dx0q[j];
        dpe[j] += dx0q[j];
      }
    }

    // Context rows: keys, values -> norm -> fc.
    std::vector<T> dc(h), dfc(h), hrow(detail::sz(D));
    for (std::int32_t s = 0; s < S; ++s) {
      if (!w.ctx_used[detail::sz(s)]) continue;
      const T* c = &w.c[detail::sz(s) * h];
      const T* gk = &dK[detail::sz(s) * h];
      const T* gv = &dV[detail::sz(s) * h];
      detail::outer_acc(c, gk, H, H, G(kWk));
      detail::outer_acc(c, gv, H, H, G(kWv));
      std::fill(dc.begin(), dc.end(), T(0));
      detail::vec_matT_acc(gk, P(kWk), H, H, dc.data());
      detail::vec_matT_acc(gv, P(kWv), H, H, dc.data());
      std::fill(dfc.begin(), dfc.end(), T(0));
      detail::rms_norm_backward(&w.fc[detail::sz(s) * h], w.rc[detail::sz(s)], P(kGctx), dc.data(), H, G(kGctx), dfc.data());
      const float* src = b.hidden.data() + detail::sz(s) * detail::sz(D);
      for (int j = 0; j < D; ++j) hrow[detail::sz(j)] = static_cast<T>(src[j]);
      detail::outer_acc(hrow.data(), dfc.data(), D, H, G(kWfc));
    }
  }

  DrafterConfig cfg_;
  int rows_[kCount]{}, cols_[kCount]{};
  std::size_t off_[kCount + 1]{};
  std::vector<T> theta_, grad_, m_, v_;
  std::int64_t steps_ = 0;
  Workspace ws_;
};

using Drafter = BasicDrafter<float>;

}  // namespace dflash_example
