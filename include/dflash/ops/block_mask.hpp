#pragma once
// The drafter's attention mask, dense (test oracle) and block-sparse
// (flex-attention style BlockMask).
//
// Keys/values are [context (S tokens) | N blocks x block_size]; queries are
// N x block_size (block i = queries i*B .. i*B+B-1, KV rows S+i*B .. S+i*B+B-1).
// Query q of block i = q / B, anchored at a = anchors[i], may attend kv iff keep[i] and
//   * kv < S (context):   kv < a, doc_id[kv] == doc_id[a], and, if window > 0,
//                         kv >= a - window  (at most `window` context tokens:
//                         a-window .. a-1; window = 0 means full attention);
//   * kv >= S (blocks):   (kv - S) / B == i  (bidirectional inside its own block);
// blocks never see other blocks, and an invalid block (keep[i] == 0) sees nothing.
//
// Documents are contiguous runs in the packed context, so block i's context
// set is one interval [lo_i, a) with lo_i = max(a - pos[a], a - window) and
// its block set is another; tiles are classified from these two intervals in
// O(blocks per tile), never by materialising the mask.
//
// Block-sparse form, for tiles of tile.q x tile.kv (the last tiles may be
// ragged; only in-range elements count): a tile is empty (no allowed pair),
// full (every pair allowed) or partial. Per query tile qt, like
// torch.nn.attention.flex_attention.BlockMask:
//   kv_num_blocks[qt]                 number of partial kv tiles
//   kv_indices[qt*num_kv_tiles + j]   their kv tile indices, ascending, j < kv_num_blocks[qt]
//   full_kv_num_blocks / full_kv_indices   the same for full tiles
// Unused index entries are 0. Partial tiles need the element rule
// (block_mask_mod); full tiles need none. The GPU builder is block_mask.cuh.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "dflash/config.hpp"
#include "dflash/ops/doc_layout.hpp"
#include "dflash/ops/keys.hpp"
#include "dflash/ops/validate.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::ops {

struct block_mask_params {
  std::int32_t context_len = 0;  ///< S
  std::int32_t num_blocks = 0;   ///< N
  std::int32_t block_size = 0;   ///< B
  std::int32_t window = 0;       ///< 0 = full attention, else kv >= anchor - window

  [[nodiscard]] DFLASH_HOST_DEVICE constexpr std::int32_t num_queries() const noexcept { return num_blocks * block_size; }
  [[nodiscard]] DFLASH_HOST_DEVICE constexpr std::int32_t num_kv() const noexcept { return context_len + num_queries(); }
  friend constexpr bool operator==(const block_mask_params&, const block_mask_params&) = default;
};

struct tile_shape {
  std::int32_t q = 128;
  std::int32_t kv = 128;
  friend constexpr bool operator==(const tile_shape&, const tile_shape&) = default;
};

enum class tile_kind : std::uint8_t { empty, partial, full };

/// Half-open interval [lo, hi) of kv indices.
struct kv_interval {
  std::int32_t lo = 0;
  std::int32_t hi = 0;

  [[nodiscard]] DFLASH_HOST_DEVICE constexpr bool contains(std::int32_t kv) const noexcept { return lo <= kv && kv < hi; }
  [[nodiscard]] DFLASH_HOST_DEVICE constexpr std::int32_t overlap(std::int32_t a, std::int32_t b) const noexcept {
    const std::int32_t l = lo > a ? lo : a;
    const std::int32_t h = hi < b ? hi : b;
    return h > l ? h - l : 0;
  }
};

/// What block i may see: a context interval and its own block's interval.
struct block_view {
  kv_interval context;
  kv_interval own;
};

/// Block i's view from its anchor, keep flag and pos[anchor] (position within the document).
[[nodiscard]] DFLASH_HOST_DEVICE constexpr block_view block_view_of(const block_mask_params& p, std::int32_t i,
                                                                   std::int32_t anchor, bool keep,
                                                                   std::int32_t pos_at_anchor) noexcept {
  if (!keep) return {};
  std::int32_t lo = anchor - pos_at_anchor;  // document start
  if (p.window > 0 && anchor - p.window > lo) lo = anchor - p.window;
  const std::int32_t own = p.context_len + i * p.block_size;
  return {{lo, anchor}, {own, own + p.block_size}};
}

/// Element rule (flex-attention's mask_mod) over raw arrays; host and device.
struct block_mask_mod {
  block_mask_params params;
  const std::int32_t* anchors;  ///< [N]
  const std::uint8_t* keep;     ///< [N]
  const std::int32_t* pos;      ///< [S] position within document

  [[nodiscard]] DFLASH_HOST_DEVICE constexpr bool operator()(std::int32_t q, std::int32_t kv) const noexcept {
    const std::int32_t i = q / params.block_size;
    if (!keep[i]) return false;
    const block_view v = block_view_of(params, i, anchors[i], true, pos[anchors[i]]);
    return v.context.contains(kv) || v.own.contains(kv);
  }
};

/// Classifies tile (qt, kt). Shared by the host builder and the GPU kernel, so both agree bit for bit.
[[nodiscard]] DFLASH_HOST_DEVICE constexpr tile_kind classify_tile(const block_mask_params& p, tile_shape t,
                                                                  std::int32_t qt, std::int32_t kt,
                                                                  const std::int32_t* anchors, const std::uint8_t* keep,
                                                                  const std::int32_t* pos) noexcept {
  const std::int32_t nq = p.num_queries(), nkv = p.num_kv();
  // qt < tiles_for(nq, t.q) keeps q0 < nq; the tile's end is clipped without forming q0 + t.q,
  // which overflows int32 for tiles near INT32_MAX (likewise for kv).
  const std::int32_t q0 = qt * t.q, q1 = t.q < nq - q0 ? q0 + t.q : nq;
  const std::int32_t k0 = kt * t.kv, k1 = t.kv < nkv - k0 ? k0 + t.kv : nkv;
  std::int64_t allowed = 0;
  for (std::int32_t i = q0 / p.block_size; i * p.block_size < q1; ++i) {
    const std::int32_t r0 = i * p.block_size > q0 ? i * p.block_size : q0;
    const std::int32_t r1 = (i + 1) * p.block_size < q1 ? (i + 1) * p.block_size : q1;
    const bool k = keep[i] != 0;
    const block_view v = block_view_of(p, i, anchors[i], k, k ? pos[anchors[i]] : 0);
    allowed += static_cast<std::int64_t>(r1 - r0) * (v.context.overlap(k0, k1) + v.own.overlap(k0, k1));
  }
  if (allowed == 0) return tile_kind::empty;
  return allowed == static_cast<std::int64_t>(q1 - q0) * (k1 - k0) ? tile_kind::full : tile_kind::partial;
}

/// ceil(n / tile) for n >= 0, tile > 0, computed in 64 bits: (n + tile - 1) overflows int32 for
/// tiles near INT32_MAX. The result is at most n, so it fits int32.
[[nodiscard]] DFLASH_HOST_DEVICE constexpr std::int32_t tiles_for(std::int32_t n, std::int32_t tile) noexcept {
  return static_cast<std::int32_t>((static_cast<std::int64_t>(n) + tile - 1) / tile);
}

/// Caller-owned output arrays of the block-sparse form (host or device memory).
struct block_sparse_view {
  std::int32_t* kv_num_blocks;       ///< [num_q_tiles]
  std::int32_t* kv_indices;          ///< [num_q_tiles * num_kv_tiles]
  std::int32_t* full_kv_num_blocks;  ///< [num_q_tiles]
  std::int32_t* full_kv_indices;     ///< [num_q_tiles * num_kv_tiles]
};

/// Dense mask: allowed[q * cols + kv] is 1 where query q may attend kv.
struct dense_mask {
  std::int32_t rows = 0;
  std::int32_t cols = 0;
  std::vector<std::uint8_t> allowed;

  [[nodiscard]] bool operator()(std::int32_t q, std::int32_t kv) const {
    return allowed[static_cast<std::size_t>(q) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(kv)] != 0;
  }
  friend bool operator==(const dense_mask&, const dense_mask&) = default;
};

namespace detail {
inline void check_mask_params(const block_mask_params& p, std::string_view op) {
  require_non_negative(p.context_len, op, "context_len");
  require_non_negative(p.num_blocks, op, "num_blocks");
  require(p.block_size > 0, op, "block_size = " + std::to_string(p.block_size) + " must be positive");
  require_non_negative(p.window, op, "window");
  const std::int64_t kv = p.context_len + static_cast<std::int64_t>(p.num_blocks) * p.block_size;
  require(kv <= std::numeric_limits<std::int32_t>::max(), op, "context_len + num_blocks*block_size overflows int32");
}

inline void check_tiles(tile_shape t, std::string_view op) {
  require(t.q > 0 && t.kv > 0, op,
          "tile sizes must be positive (got " + std::to_string(t.q) + " x " + std::to_string(t.kv) + ")");
}

inline void check_anchors_in_context(const block_mask_params& p, std::span<const std::int32_t> anchors,
                                     std::span<const std::uint8_t> keep, std::string_view op) {
  require_size(anchors.size(), static_cast<std::size_t>(p.num_blocks), op, "anchors");
  require_size(keep.size(), static_cast<std::size_t>(p.num_blocks), op, "keep");
  for (std::size_t i = 0; i < anchors.size(); ++i)
    if (keep[i] && (anchors[i] < 0 || anchors[i] >= p.context_len))
      fail(op, "anchors[" + std::to_string(i) + "] = " + std::to_string(anchors[i]) + " is outside the context [0, " +
                   std::to_string(p.context_len) + ")");
}

/// pos is a sequence of positions within documents: 0 at the start, then +1 or a restart at 0.
inline void check_positions(std::span<const std::int32_t> pos, std::string_view op) {
  for (std::size_t s = 0; s < pos.size(); ++s)
    if (pos[s] != 0 && (s == 0 || pos[s] != pos[s - 1] + 1))
      fail(op, "pos[" + std::to_string(s) + "] = " + std::to_string(pos[s]) + " is not the position within its document");
}

[[nodiscard]] inline std::string params_string(const block_mask_params& p) {
  return "{S " + std::to_string(p.context_len) + ", N " + std::to_string(p.num_blocks) + ", B " +
         std::to_string(p.block_size) + ", window " + std::to_string(p.window) + "}";
}
}  // namespace detail

/// Owning block-sparse mask (host), with the element rule's inputs: partial tiles need the rule
/// (block_mask_mod), so the mask carries what the rule is built from. build_block_mask fills
/// everything; a mask whose tiles were written elsewhere (e.g. gpu::build_block_mask into view())
/// gets its rule with bind_rule(). mod() is the rule over the mask's own copy, and check_mod()
/// checks a hand-built mod against it.
struct block_sparse_mask {
  block_mask_params params;
  tile_shape tile;
  std::int32_t num_q_tiles = 0;
  std::int32_t num_kv_tiles = 0;
  std::vector<std::int32_t> kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices;

  /// What the element rule is built from (empty until bound).
  struct rule_inputs {
    std::vector<std::int32_t> anchors;  ///< [N]
    std::vector<std::uint8_t> keep;     ///< [N]
    std::vector<std::int32_t> pos;      ///< [S] position within document
    bool bound = false;
  } rule;

  /// Zeroed arrays sized for (p, t), no rule yet: the target of a builder writing through view().
  [[nodiscard]] static block_sparse_mask allocate(const block_mask_params& p, tile_shape t) {
    constexpr std::string_view op = "block_sparse_mask::allocate";
    detail::check_mask_params(p, op);
    detail::check_tiles(t, op);
    block_sparse_mask m;
    m.params = p;
    m.tile = t;
    m.num_q_tiles = tiles_for(p.num_queries(), t.q);
    m.num_kv_tiles = tiles_for(p.num_kv(), t.kv);
    const auto nq = static_cast<std::size_t>(m.num_q_tiles), nk = static_cast<std::size_t>(m.num_kv_tiles);
    m.kv_num_blocks.assign(nq, 0);
    m.full_kv_num_blocks.assign(nq, 0);
    m.kv_indices.assign(nq * nk, 0);
    m.full_kv_indices.assign(nq * nk, 0);
    return m;
  }

  /// Copies the rule's inputs into the mask (checked against params: sizes, valid anchors in [0, S),
  /// pos a sequence of positions within documents).
  void bind_rule(std::span<const std::int32_t> anchors_in, std::span<const std::uint8_t> keep_in,
                 std::span<const std::int32_t> pos_in) {
    constexpr std::string_view op = "block_sparse_mask::bind_rule";
    detail::check_anchors_in_context(params, anchors_in, keep_in, op);
    detail::require_size(pos_in.size(), static_cast<std::size_t>(params.context_len), op, "pos");
    detail::check_positions(pos_in, op);
    rule.anchors.assign(anchors_in.begin(), anchors_in.end());
    rule.keep.assign(keep_in.begin(), keep_in.end());
    rule.pos.assign(pos_in.begin(), pos_in.end());
    rule.bound = true;
  }
  void bind_rule(std::span<const std::int32_t> anchors_in, std::span<const std::uint8_t> keep_in, const packed_docs& docs) {
    bind_rule(anchors_in, keep_in, docs.pos);
  }
  [[nodiscard]] bool has_rule() const noexcept { return rule.bound; }

  /// The element rule over the mask's own inputs (valid while the mask lives and its rule is unchanged).
  [[nodiscard]] block_mask_mod mod() const {
    require_rule("block_sparse_mask::mod");
    return {params, rule.anchors.data(), rule.keep.data(), rule.pos.data()};
  }

  /// Throws std::invalid_argument unless `m` is this mask's rule: same params, same keep flags,
  /// same anchors where kept, same pos (the mod's arrays are read for N, N and S elements).
  void check_mod(const block_mask_mod& m, std::string_view op = "block_sparse_mask::check_mod") const {
    require_rule(op);
    if (!(m.params == params))
      detail::fail(op, "the mod's params " + detail::params_string(m.params) + " are not the mask's " +
                           detail::params_string(params));
    const auto n = static_cast<std::size_t>(params.num_blocks), s = static_cast<std::size_t>(params.context_len);
    detail::require((n == 0 || (m.anchors && m.keep)) && (s == 0 || m.pos), op, "the mod has a null array");
    for (std::size_t i = 0; i < n; ++i) {
      if ((m.keep[i] != 0) != (rule.keep[i] != 0))
        detail::fail(op, "the mod's keep[" + std::to_string(i) + "] = " + std::to_string(m.keep[i]) +
                             " differs from the mask's " + std::to_string(rule.keep[i]) + " (built from other inputs)");
      if (rule.keep[i] && m.anchors[i] != rule.anchors[i])
        detail::fail(op, "the mod's anchors[" + std::to_string(i) + "] = " + std::to_string(m.anchors[i]) +
                             " differs from the mask's " + std::to_string(rule.anchors[i]) + " (built from other inputs)");
    }
    for (std::size_t k = 0; k < s; ++k)
      if (m.pos[k] != rule.pos[k])
        detail::fail(op, "the mod's pos[" + std::to_string(k) + "] = " + std::to_string(m.pos[k]) +
                             " differs from the mask's " + std::to_string(rule.pos[k]) + " (built from other inputs)");
  }

  [[nodiscard]] std::span<const std::int32_t> partial(std::int32_t qt) const {
    return {kv_indices.data() + row_offset(qt), static_cast<std::size_t>(kv_num_blocks[static_cast<std::size_t>(qt)])};
  }
  [[nodiscard]] std::span<const std::int32_t> full(std::int32_t qt) const {
    return {full_kv_indices.data() + row_offset(qt),
            static_cast<std::size_t>(full_kv_num_blocks[static_cast<std::size_t>(qt)])};
  }
  [[nodiscard]] tile_kind kind(std::int32_t qt, std::int32_t kt) const {
    auto has = [kt](std::span<const std::int32_t> s) { return std::binary_search(s.begin(), s.end(), kt); };
    if (has(full(qt))) return tile_kind::full;
    if (has(partial(qt))) return tile_kind::partial;
    return tile_kind::empty;
  }
  [[nodiscard]] block_sparse_view view() noexcept {
    return {kv_num_blocks.data(), kv_indices.data(), full_kv_num_blocks.data(), full_kv_indices.data()};
  }

 private:
  [[nodiscard]] std::size_t row_offset(std::int32_t qt) const noexcept {
    return static_cast<std::size_t>(qt) * static_cast<std::size_t>(num_kv_tiles);
  }
  void require_rule(std::string_view op) const {
    if (!rule.bound)
      detail::fail(op, "the mask carries no element rule (build it with build_block_mask, or call bind_rule() with "
                       "the anchors, keep and pos its tiles were built from)");
  }
};

/// Reference dense mask, written from the definition (doc ids, not intervals): the test oracle.
/// Takes ids only (any ids; equal ids = same document); the packed_docs overload below is the
/// layout every other mask function takes.
[[nodiscard]] inline dense_mask dense_block_mask(const block_mask_params& p, std::span<const std::int32_t> doc_ids,
                                                 std::span<const std::int32_t> anchors,
                                                 std::span<const std::uint8_t> keep) {
  constexpr std::string_view op = "dense_block_mask";
  detail::check_mask_params(p, op);
  detail::require_size(doc_ids.size(), static_cast<std::size_t>(p.context_len), op, "doc_ids");
  detail::check_anchors_in_context(p, anchors, keep, op);
  dense_mask m{p.num_queries(), p.num_kv(), {}};
  m.allowed.assign(static_cast<std::size_t>(m.rows) * static_cast<std::size_t>(m.cols), 0);
  for (std::int32_t q = 0; q < m.rows; ++q) {
    const std::int32_t i = q / p.block_size;
    if (!keep[static_cast<std::size_t>(i)]) continue;
    const std::int32_t a = anchors[static_cast<std::size_t>(i)];
    for (std::int32_t kv = 0; kv < m.cols; ++kv) {
      bool ok;
      if (kv < p.context_len)
        ok = kv < a && doc_ids[static_cast<std::size_t>(kv)] == doc_ids[static_cast<std::size_t>(a)] &&
             (p.window == 0 || kv >= a - p.window);
      else
        ok = (kv - p.context_len) / p.block_size == i;
      m.allowed[static_cast<std::size_t>(q) * static_cast<std::size_t>(m.cols) + static_cast<std::size_t>(kv)] = ok;
    }
  }
  return m;
}

/// The dense oracle on the packed layout (checked like build_block_mask's input).
[[nodiscard]] inline dense_mask dense_block_mask(const block_mask_params& p, const packed_docs& docs,
                                                 std::span<const std::int32_t> anchors,
                                                 std::span<const std::uint8_t> keep) {
  detail::check_mask_params(p, "dense_block_mask");
  detail::check_packed_docs(docs, p.context_len, "dense_block_mask");
  return dense_block_mask(p, docs.doc_id, anchors, keep);
}

/// Host builder into caller-owned arrays. `docs` is the context's packed layout (ops::doc_ids
/// output): doc ids non-decreasing, pos restarting at 0 exactly where the id changes (checked).
/// Valid anchors must lie in [0, S); invalid slots' anchors are ignored.
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void build_block_mask(const block_mask_params& p, tile_shape t, const packed_docs& docs,
                      std::span<const std::int32_t> anchors, std::span<const std::uint8_t> keep, block_sparse_view out,
                      profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "build_block_mask";
  detail::check_mask_params(p, op);
  detail::check_tiles(t, op);
  detail::check_packed_docs(docs, p.context_len, op);
  detail::check_anchors_in_context(p, anchors, keep, op);
  auto timer = prof->scope("block_mask"_key);
  const std::int32_t nqt = tiles_for(p.num_queries(), t.q), nkt = tiles_for(p.num_kv(), t.kv);
  const auto unkt = static_cast<std::size_t>(nkt);
  for (std::int32_t qt = 0; qt < nqt; ++qt) {
    std::int32_t np = 0, nf = 0;
    std::int32_t* part = out.kv_indices + static_cast<std::size_t>(qt) * unkt;
    std::int32_t* full = out.full_kv_indices + static_cast<std::size_t>(qt) * unkt;
    for (std::int32_t kt = 0; kt < nkt; ++kt) {
      switch (classify_tile(p, t, qt, kt, anchors.data(), keep.data(), docs.pos.data())) {
        case tile_kind::partial: part[np++] = kt; break;
        case tile_kind::full: full[nf++] = kt; break;
        case tile_kind::empty: break;
      }
    }
    std::fill(part + np, part + nkt, 0);
    std::fill(full + nf, full + nkt, 0);
    out.kv_num_blocks[qt] = np;
    out.full_kv_num_blocks[qt] = nf;
  }
}

/// Host builder, allocating the result; the mask carries its element rule (mod()).
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
[[nodiscard]] block_sparse_mask build_block_mask(const block_mask_params& p, tile_shape t, const packed_docs& docs,
                                                 std::span<const std::int32_t> anchors,
                                                 std::span<const std::uint8_t> keep, profiler_ref<P, K> prof = {}) {
  detail::check_mask_params(p, "build_block_mask");
  detail::check_tiles(t, "build_block_mask");
  block_sparse_mask m = block_sparse_mask::allocate(p, t);
  build_block_mask(p, t, docs, anchors, keep, m.view(), prof);
  m.bind_rule(anchors, keep, docs.pos);
  return m;
}

/// Expands a block-sparse mask to dense with its own element rule: full tiles all allowed,
/// partial tiles by m.mod(), every other tile nothing. A mask without a rule is an error.
[[nodiscard]] inline dense_mask expand_block_mask(const block_sparse_mask& m) {
  const block_mask_mod mod = m.mod();
  dense_mask d{m.params.num_queries(), m.params.num_kv(), {}};
  d.allowed.assign(static_cast<std::size_t>(d.rows) * static_cast<std::size_t>(d.cols), 0);
  auto end = [](std::int32_t i, std::int32_t tile, std::int32_t n) {  // min(n, (i + 1) * tile) without overflow
    return static_cast<std::int32_t>(std::min<std::int64_t>(n, (static_cast<std::int64_t>(i) + 1) * tile));
  };
  auto fill = [&](std::int32_t qt, std::int32_t kt, bool partial) {
    for (std::int32_t q = qt * m.tile.q; q < end(qt, m.tile.q, d.rows); ++q)
      for (std::int32_t kv = kt * m.tile.kv; kv < end(kt, m.tile.kv, d.cols); ++kv)
        d.allowed[static_cast<std::size_t>(q) * static_cast<std::size_t>(d.cols) + static_cast<std::size_t>(kv)] =
            partial ? mod(q, kv) : true;
  };
  for (std::int32_t qt = 0; qt < m.num_q_tiles; ++qt) {
    for (std::int32_t kt : m.full(qt)) fill(qt, kt, false);
    for (std::int32_t kt : m.partial(qt)) fill(qt, kt, true);
  }
  return d;
}

}  // namespace dflash::ops
