#pragma once
// Document layouts and the named conversions between them.
//
// The ops see documents in three layouts:
//   lengths  per-document token counts L[0..D) (empty documents allowed): the input of doc_ids.
//   packed   one packed context of S tokens: doc_id[t] (non-decreasing) and pos[t], the position
//            within its document (0 exactly where the id changes): doc_ids' output, and the one
//            layout every mask function takes, as a `packed_docs` view.
//   padded   [batch, seq] ids, row b valid for its first seq_lens[b] tokens: select_anchors' batch
//            form, as `padded_doc_ids`. A packed context is the padded layout with batch 1 and
//            seq_lens = {S}; select_anchors takes a packed_docs for exactly that case.
//
// Conversions (all checked; a bad layout is a std::invalid_argument naming the op):
//   lengths -> packed   doc_ids(lengths)                     (doc_ids.hpp)
//   ids     -> packed   packed_docs_from_ids(doc_id)         (derives pos)
//   packed  -> lengths  document_lengths(doc_id)             (doc_ids(document_lengths(x)).doc_id == x)
//   packed  -> padded   pad_doc_ids(rows, seq)               (one packed context per row)
//   padded  -> packed   padded.row(b) + packed_docs_from_ids

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "dflash/ops/validate.hpp"

namespace dflash::ops {

/// A packed context's documents (non-owning): doc_id[t] and pos[t] for t < size().
struct packed_docs {
  std::span<const std::int32_t> doc_id;
  std::span<const std::int32_t> pos;

  [[nodiscard]] std::size_t size() const noexcept { return doc_id.size(); }
};

/// Owning packed layout (what doc_ids and packed_docs_from_ids return).
struct doc_ids_result {
  std::vector<std::int32_t> doc_id;
  std::vector<std::int32_t> pos;

  [[nodiscard]] packed_docs view() const& noexcept { return {doc_id, pos}; }
  /// Lets an lvalue result go wherever a packed_docs is taken; a temporary would dangle, so it is refused.
  operator packed_docs() const& noexcept { return view(); }  // NOLINT(google-explicit-constructor)
  operator packed_docs() const&& = delete;
};

/// Padded layout: doc_id is [batch, seq] (row-major), row b valid for seq_lens[b] tokens.
struct padded_doc_ids {
  std::int32_t batch = 0;
  std::int32_t seq = 0;
  std::vector<std::int32_t> doc_id;
  std::vector<std::int32_t> seq_lens;

  /// The valid prefix of row b (a packed context's ids).
  [[nodiscard]] std::span<const std::int32_t> row(std::int32_t b) const {
    detail::require(b >= 0 && b < batch, "padded_doc_ids::row",
                    "row " + std::to_string(b) + " out of range (batch " + std::to_string(batch) + ")");
    const auto ub = static_cast<std::size_t>(b);
    return std::span<const std::int32_t>(doc_id).subspan(ub * static_cast<std::size_t>(seq),
                                                         static_cast<std::size_t>(seq_lens[ub]));
  }
};

namespace detail {
/// ids non-decreasing.
inline void check_doc_id_order(std::span<const std::int32_t> doc_id, std::string_view op) {
  for (std::size_t s = 1; s < doc_id.size(); ++s) {
    if (doc_id[s] < doc_id[s - 1])
      fail(op, "doc_ids must be non-decreasing (doc_ids[" + std::to_string(s) + "] < doc_ids[" + std::to_string(s - 1) +
                   "])");
  }
}

/// A packed_docs as doc_ids produces it: equal sizes, ids non-decreasing, pos restarting at 0
/// exactly where the id changes. `context_len` < 0: any size.
inline void check_packed_docs(const packed_docs& d, std::int64_t context_len, std::string_view op) {
  if (context_len >= 0) require_size(d.doc_id.size(), static_cast<std::size_t>(context_len), op, "doc_ids");
  require_size(d.pos.size(), d.doc_id.size(), op, "pos");
  check_doc_id_order(d.doc_id, op);
  for (std::size_t s = 0; s < d.doc_id.size(); ++s) {
    const bool starts = s == 0 || d.doc_id[s] != d.doc_id[s - 1];
    if (d.pos[s] != (starts ? 0 : d.pos[s - 1] + 1))
      fail(op, "pos[" + std::to_string(s) + "] = " + std::to_string(d.pos[s]) + " is not the position within its document");
  }
}
}  // namespace detail

/// ids -> packed: pos[t] = t - (first token of doc_id[t]). ids must be non-decreasing.
inline void positions_from_doc_ids(std::span<const std::int32_t> doc_id, std::span<std::int32_t> pos) {
  constexpr std::string_view op = "positions_from_doc_ids";
  detail::require_size(pos.size(), doc_id.size(), op, "pos");
  detail::check_doc_id_order(doc_id, op);
  for (std::size_t s = 0; s < doc_id.size(); ++s) pos[s] = s == 0 || doc_id[s] != doc_id[s - 1] ? 0 : pos[s - 1] + 1;
}

/// ids -> packed, allocating.
[[nodiscard]] inline doc_ids_result packed_docs_from_ids(std::span<const std::int32_t> doc_id) {
  doc_ids_result r{std::vector<std::int32_t>(doc_id.begin(), doc_id.end()), std::vector<std::int32_t>(doc_id.size())};
  positions_from_doc_ids(doc_id, r.pos);
  return r;
}

/// packed -> lengths: L[d] = tokens with id d, for d = 0 .. last id (ids that own no token get 0),
/// so doc_ids(document_lengths(ids)).doc_id == ids.
[[nodiscard]] inline std::vector<std::int32_t> document_lengths(std::span<const std::int32_t> doc_id) {
  constexpr std::string_view op = "document_lengths";
  detail::check_doc_id_order(doc_id, op);
  if (!doc_id.empty() && doc_id.front() < 0)
    detail::fail(op, "doc_ids[0] = " + std::to_string(doc_id.front()) + " is negative");
  std::vector<std::int32_t> l(doc_id.empty() ? 0 : static_cast<std::size_t>(doc_id.back()) + 1, 0);
  for (const std::int32_t d : doc_id) ++l[static_cast<std::size_t>(d)];
  return l;
}

/// packed -> padded: row b is rows[b] (ids only; checked like a packed_docs) followed by padding
/// (the row's last id, so rows stay non-decreasing); seq_lens[b] = rows[b].size() <= seq.
[[nodiscard]] inline padded_doc_ids pad_doc_ids(std::span<const packed_docs> rows, std::int32_t seq) {
  constexpr std::string_view op = "pad_doc_ids";
  detail::require_non_negative(seq, op, "seq");
  detail::require(rows.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), op,
                  "too many rows (" + std::to_string(rows.size()) + ")");
  padded_doc_ids p{static_cast<std::int32_t>(rows.size()), seq, {}, {}};
  p.doc_id.reserve(rows.size() * static_cast<std::size_t>(seq));
  for (std::size_t b = 0; b < rows.size(); ++b) {
    detail::check_packed_docs(rows[b], -1, op);
    if (rows[b].size() > static_cast<std::size_t>(seq))
      detail::fail(op, "row " + std::to_string(b) + " has " + std::to_string(rows[b].size()) + " tokens, more than seq = " +
                           std::to_string(seq));
    p.doc_id.insert(p.doc_id.end(), rows[b].doc_id.begin(), rows[b].doc_id.end());
    p.doc_id.resize((b + 1) * static_cast<std::size_t>(seq), rows[b].doc_id.empty() ? 0 : rows[b].doc_id.back());
    p.seq_lens.push_back(static_cast<std::int32_t>(rows[b].size()));
  }
  return p;
}

}  // namespace dflash::ops
