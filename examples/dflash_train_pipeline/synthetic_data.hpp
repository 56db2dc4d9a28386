#pragma once
// Synthetic token batches for the DFlash example: documents drawn from a fixed
// random "topic" Markov chain, so future tokens are predictable from the
// current token (k steps ahead through the chain) and from context (which
// topic's chain the document follows).
//
//   MarkovSource src{DataConfig{}};
//   TokenBatch b = src.make_batch(seed, step, max_len);
//   b.tokens     [num_docs, seq]  right-padded (pad = 0), seq = DataConfig::max_doc_len
//   b.loss_mask  [num_docs, seq]  0 on each document's first prompt_len tokens and on padding
//   b.lengths    [num_docs]       each in [min_doc_len, max_doc_len], sum <= max_len
//   b.packed_tokens() / b.packed_loss_mask()  the same, packed to [sum(lengths)]
//
// Everything is a pure function of (process_seed, seed, step): no global state,
// no std:: distributions (their output differs across standard libraries).

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dflash_example {

/// SplitMix64: tiny, portable, and good enough for weights and data.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}

  constexpr std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  constexpr double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi] (inclusive); lo <= hi.
  constexpr std::int32_t range(std::int32_t lo, std::int32_t hi) noexcept {
    const auto span = static_cast<std::uint64_t>(static_cast<std::int64_t>(hi) - lo + 1);
    return static_cast<std::int32_t>(lo + static_cast<std::int64_t>(next() % span));
  }

 private:
  std::uint64_t state_;
};

/// Mixes several values into one seed, so (seed, step) streams never overlap.
[[nodiscard]] constexpr std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) noexcept {
  SplitMix64 r(a ^ (b * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
  r.next();
  return r.next();
}

struct DataConfig {
  std::int32_t vocab = 96;
  std::int32_t topics = 4;          ///< chains; each document follows one
  std::int32_t min_doc_len = 48;
  std::int32_t max_doc_len = 192;   ///< also the padded width `seq`
  std::int32_t prompt_len = 4;      ///< leading tokens of a document without loss
  double p_main = 0.80;             ///< probability of the token's main successor
  double p_second = 0.15;           ///< ... of its second successor; the rest is uniform noise
  std::int32_t motif_len = 12;      ///< after its first motif_len tokens a document repeats itself
                                    ///< (token t = token t - motif_len) with probability p_repeat; 0 = off
  double p_repeat = 0.9;
  std::uint64_t process_seed = 7;   ///< fixes the chains
};

struct TokenBatch {
  std::int32_t seq = 0;                 ///< padded width
  std::vector<std::int32_t> lengths;    ///< [num_docs]
  std::vector<std::int32_t> tokens;     ///< [num_docs * seq], right-padded with 0
  std::vector<std::uint8_t> loss_mask;  ///< [num_docs * seq]

  [[nodiscard]] std::int32_t num_docs() const noexcept { return static_cast<std::int32_t>(lengths.size()); }
  [[nodiscard]] std::int32_t total_tokens() const noexcept {
    std::int32_t t = 0;
    for (auto l : lengths) t += l;
    return t;
  }
  [[nodiscard]] std::vector<std::int32_t> packed_tokens() const { return pack(tokens); }
  [[nodiscard]] std::vector<std::uint8_t> packed_loss_mask() const { return pack(loss_mask); }
  /// Document index of every packed token (repeat_interleave of 0..num_docs-1 by lengths).
  [[nodiscard]] std::vector<std::int32_t> packed_doc_ids() const {
    std::vector<std::int32_t> ids;
    ids.reserve(static_cast<std::size_t>(total_tokens()));
    for (std::int32_t d = 0; d < num_docs(); ++d) ids.insert(ids.end(), static_cast<std::size_t>(lengths[static_cast<std::size_t>(d)]), d);
    return ids;
  }

 private:
  template <class T>
  [[nodiscard]] std::vector<T> pack(const std::vector<T>& padded) const {
    std::vector<T> out;
    out.reserve(static_cast<std::size_t>(total_tokens()));
    for (std::size_t d = 0; d < lengths.size(); ++d) {
      const auto row = padded.begin() + static_cast<std::ptrdiff_t>(d * static_cast<std::size_t>(seq));
      out.insert(out.end(), row, row + lengths[d]);
    }
    return out;
  }
};

class MarkovSource {
 public:
  explicit MarkovSource(const DataConfig& cfg) : cfg_(cfg) {
    auto bad = [](const std::string& what) { throw std::invalid_argument("MarkovSource: " + what); };
    if (cfg.vocab < 3) bad("vocab = " + std::to_string(cfg.vocab) + " must be at least 3");
    if (cfg.topics < 1) bad("topics = " + std::to_string(cfg.topics) + " must be positive");
    if (cfg.min_doc_len < 1 || cfg.max_doc_len < cfg.min_doc_len)
      bad("need 1 <= min_doc_len <= max_doc_len (got " + std::to_string(cfg.min_doc_len) + ", " +
          std::to_string(cfg.max_doc_len) + ")");
    if (cfg.prompt_len < 0 || cfg.prompt_len >= cfg.min_doc_len)
      bad("prompt_len = " + std::to_string(cfg.prompt_len) + " must be in [0, min_doc_len)");
    if (!(cfg.p_main >= 0 && cfg.p_second >= 0 && cfg.p_main + cfg.p_second <= 1))
      bad("p_main and p_second must be probabilities with p_main + p_second <= 1");
    if (cfg.motif_len < 0) bad("motif_len = " + std::to_string(cfg.motif_len) + " is negative");
    if (!(cfg.p_repeat >= 0 && cfg.p_repeat <= 1)) bad("p_repeat must be a probability");
    SplitMix64 r(cfg.process_seed);
    const auto n = static_cast<std::size_t>(cfg.topics) * static_cast<std::size_t>(cfg.vocab);
    main_.resize(n);
    second_.resize(n);
    const auto v = static_cast<std::size_t>(cfg.vocab);
    for (std::size_t t = 0; t < static_cast<std::size_t>(cfg.topics); ++t) {
      // Main successors: one cycle through the whole vocabulary in a random
      // order, so a document does not collapse onto a few tokens and every
      // token's k-step continuation is distinct.
      std::vector<std::int32_t> perm(v);
      for (std::size_t i = 0; i < v; ++i) perm[i] = static_cast<std::int32_t>(i);
      for (std::size_t i = v - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<std::size_t>(r.next() % (i + 1))]);
      for (std::size_t i = 0; i < v; ++i) main_[t * v + static_cast<std::size_t>(perm[i])] = perm[(i + 1) % v];
      for (std::size_t a = 0; a < v; ++a) {  // second successor: neither the token nor its main successor
        std::int32_t s;
        do s = r.range(0, cfg.vocab - 1);
        while (static_cast<std::size_t>(s) == a || s == main_[t * v + a]);
        second_[t * v + a] = s;
      }
    }
  }

  [[nodiscard]] const DataConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] std::int32_t vocab() const noexcept { return cfg_.vocab; }

  /// Most likely next token after `token` under `topic` (for tests and diagnostics).
  [[nodiscard]] std::int32_t main_successor(std::int32_t topic, std::int32_t token) const {
    return main_.at(index(topic, token));
  }

  /// A packed sequence of whole documents with sum(lengths) <= max_len.
  [[nodiscard]] TokenBatch make_batch(std::uint64_t seed, std::uint64_t step, std::int32_t max_len) const {
    if (max_len < cfg_.min_doc_len)
      throw std::invalid_argument("MarkovSource::make_batch: max_len = " + std::to_string(max_len) +
                                  " is shorter than min_doc_len = " + std::to_string(cfg_.min_doc_len));
    SplitMix64 r(mix_seed(mix_seed(cfg_.process_seed, seed), step));
    TokenBatch b;
    b.seq = cfg_.max_doc_len;
    for (std::int32_t left = max_len; left >= cfg_.min_doc_len;) {
      const std::int32_t len = r.range(cfg_.min_doc_len, left < cfg_.max_doc_len ? left : cfg_.max_doc_len);
      b.lengths.push_back(len);
      left -= len;
    }
    const auto seq = static_cast<std::size_t>(b.seq);
    b.tokens.assign(b.lengths.size() * seq, 0);
    b.loss_mask.assign(b.lengths.size() * seq, 0);
    for (std::size_t d = 0; d < b.lengths.size(); ++d) {
      const std::int32_t topic = r.range(0, cfg_.topics - 1);
      std::int32_t tok = r.range(0, cfg_.vocab - 1);
      for (std::int32_t t = 0; t < b.lengths[d]; ++t) {
        const std::size_t at = d * seq + static_cast<std::size_t>(t);
        if (cfg_.motif_len > 0 && t >= cfg_.motif_len && r.uniform() < cfg_.p_repeat)
          tok = b.tokens[at - static_cast<std::size_t>(cfg_.motif_len)];
        else if (t > 0)
          tok = next_token(r, topic, tok);
        b.tokens[at] = tok;
        b.loss_mask[at] = t >= cfg_.prompt_len ? 1 : 0;
      }
    }
    return b;
  }

 private:
  [[nodiscard]] std::size_t index(std::int32_t topic, std::int32_t token) const {
    if (topic < 0 || topic >= cfg_.topics || token < 0 || token >= cfg_.vocab)
      throw std::invalid_argument("MarkovSource: topic or token out of range");
    return static_cast<std::size_t>(topic) * static_cast<std::size_t>(cfg_.vocab) + static_cast<std::size_t>(token);
  }
  std::int32_t next_token(SplitMix64& r, std::int32_t topic, std::int32_t tok) const {
    const double u = r.uniform();
    const std::size_t i = index(topic, tok);
    if (u < cfg_.p_main) return main_[i];
    if (u < cfg_.p_main + cfg_.p_second) return second_[i];
    return r.range(0, cfg_.vocab - 1);
  }

  DataConfig cfg_;
  std::vector<std::int32_t> main_, second_;  // [topics, vocab]
};

}  // namespace dflash_example
