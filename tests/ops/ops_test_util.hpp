#pragma once
// Random inputs shared by the ops tests (deterministic: fixed seeds).
#include <cstdint>
#include <random>
#include <vector>

namespace ops_test {

/// Random document lengths of the kinds that break things: empty, length 1, short, long.
inline std::vector<std::int32_t> random_lengths(std::mt19937& rng, std::size_t n, std::int32_t max_len) {
  std::vector<std::int32_t> l(n);
  std::uniform_int_distribution<int> kind(0, 3);
  for (auto& x : l) {
    switch (kind(rng)) {
      case 0: x = 0; break;
      case 1: x = 1; break;
      case 2: x = std::uniform_int_distribution<std::int32_t>(0, max_len < 8 ? max_len : 8)(rng); break;
      default: x = std::uniform_int_distribution<std::int32_t>(0, max_len)(rng); break;
    }
    if (x > max_len) x = max_len;
  }
  return l;
}

/// Reference repeat_interleave: doc id and position per token.
inline void naive_doc_ids(const std::vector<std::int32_t>& lengths, std::vector<std::int32_t>& doc,
                          std::vector<std::int32_t>& pos) {
  doc.clear();
  pos.clear();
  for (std::size_t d = 0; d < lengths.size(); ++d)
    for (std::int32_t i = 0; i < lengths[d]; ++i) {
      doc.push_back(static_cast<std::int32_t>(d));
      pos.push_back(i);
    }
}

}  // namespace ops_test
