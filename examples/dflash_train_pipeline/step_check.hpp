#pragma once
// --results lines that can be compared ACROSS backends. HsItem::digest()
// hashes the hidden states bit for bit, which holds between two runs of one
// backend but not between --device cpu (the CPU model) and --device cuda
// (cuBLAS sums in another order). So each item also records
//   step<N>_layout      FNV-1a over every integer field the postprocess wrote
//                       (tokens, loss mask, doc ids, positions, anchors, keep,
//                       mask arrays): these do not depend on the forward, equal exactly;
//   step<N>_hidden_abs_f, step<N>_hidden_sq_f
//                       sum |h| and sum h^2 of its packed hidden states: close;
// and every trained step its loss, loss<i>_f (the loss curve): close.
// scripts/bundle/compare_results.py --across-backends states the tolerances.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <vector>

namespace dflash_example {

struct step_check {
  std::int64_t step = 0;
  std::uint64_t layout = 0;
  double hidden_abs = 0, hidden_sq = 0;
};

/// The check of one HS-queue entry (an HsItem).
template <class Item>
[[nodiscard]] step_check step_check_of(const Item& it) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  auto vec = [&mix](const auto& v) { mix(v.data(), v.size() * sizeof(v[0])); };
  mix(&it.dropped, sizeof it.dropped);
  vec(it.tokens), vec(it.loss_mask), vec(it.doc_ids), vec(it.pos), vec(it.anchors), vec(it.keep);
  vec(it.mask.kv_num_blocks), vec(it.mask.kv_indices), vec(it.mask.full_kv_num_blocks), vec(it.mask.full_kv_indices);
  step_check c{it.step, h, 0, 0};
  for (const float v : it.hidden) {
    c.hidden_abs += std::fabs(static_cast<double>(v));
    c.hidden_sq += static_cast<double>(v) * static_cast<double>(v);
  }
  return c;
}

/// The lines described above, items by step.
inline void write_step_checks(std::ostream& f, std::vector<step_check> checks, const std::vector<double>& losses) {
  std::sort(checks.begin(), checks.end(), [](const step_check& a, const step_check& b) { return a.step < b.step; });
  char buf[64];
  for (const step_check& c : checks) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(c.layout));
    f << "step" << c.step << "_layout " << buf << "\n";
    std::snprintf(buf, sizeof buf, "%.9g", c.hidden_abs);
    f << "step" << c.step << "_hidden_abs_f " << buf << "\n";
    std::snprintf(buf, sizeof buf, "%.9g", c.hidden_sq);
    f << "step" << c.step << "_hidden_sq_f " << buf << "\n";
  }
  for (std::size_t i = 0; i < losses.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.9g", losses[i]);
    f << "loss" << i << "_f " << buf << "\n";
  }
}

}  // namespace dflash_example
