#pragma once
// The GPU forward's algorithm, on the CPU, in accumulator type T: from
// plan_target_forward's packed rows and stacked_layer_weights, exactly the
// operands target_forward_gpu.cu uploads, it computes what its kernels do
// (running sums per document over packed rows, one depth-2H product with the
// stacked [A; C], taps scattered to the dst rows). With T = float it checks
// the plan and layouts against TargetModel::forward_padded; with T = double it
// is the near-exact forward both fp32 implementations are measured against.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model.hpp"
#include "target_forward_gpu.hpp"

namespace dflash_example::testing {

template <class T>
std::vector<float> forward_by_plan(const TargetModel& m, const target_forward_plan& p) {
  const auto H = static_cast<std::size_t>(m.config().hidden), F = static_cast<std::size_t>(m.feature_dim());
  const auto S = static_cast<std::size_t>(p.size());
  std::vector<float> out(p.padded_rows() * F, 0.0f);
  std::vector<T> x(S * H), z(S * 2 * H), run(H);
  const std::span<const float> e = m.embedding();
  for (std::size_t s = 0; s < S; ++s)
    for (std::size_t h = 0; h < H; ++h) x[s * H + h] = static_cast<T>(e[static_cast<std::size_t>(p.tokens[s]) * H + h]);
  for (std::size_t l = 0; l < static_cast<std::size_t>(m.config().layers); ++l) {
    const std::vector<float> w = stacked_layer_weights(m, l);
    const std::span<const float> b = m.layer_b(l);
    for (std::size_t s = 0; s < S; ++s) {  // z = [rms(x) | rms(running mean)], from the layer's input x
      if (s == 0 || p.doc[s] != p.doc[s - 1]) std::fill(run.begin(), run.end(), T(0));
      T sx = 0, sm = 0;
      for (std::size_t h = 0; h < H; ++h) {
        run[h] += x[s * H + h];
        const T mean = run[h] / static_cast<T>(p.pos[s] + 1);
        sx += x[s * H + h] * x[s * H + h];
        sm += mean * mean;
      }
      const T rx = T(1) / std::sqrt(sx / static_cast<T>(H) + static_cast<T>(detail::kRmsEps));
      const T rm = T(1) / std::sqrt(sm / static_cast<T>(H) + static_cast<T>(detail::kRmsEps));
      for (std::size_t h = 0; h < H; ++h) {
        z[s * 2 * H + h] = x[s * H + h] * rx;
        z[s * 2 * H + H + h] = run[h] / static_cast<T>(p.pos[s] + 1) * rm;
      }
    }
    for (std::size_t s = 0; s < S; ++s)
      for (std::size_t o = 0; o < H; ++o) {
        T u = 0;
        for (std::size_t i = 0; i < 2 * H; ++i) u += z[s * 2 * H + i] * static_cast<T>(w[i * H + o]);
        x[s * H + o] += std::tanh(u + static_cast<T>(b[o]));
      }
    for (std::size_t k = 0; k < m.taps().size(); ++k)
      if (static_cast<std::size_t>(m.taps()[k]) == l)
        for (std::size_t s = 0; s < S; ++s)
          for (std::size_t h = 0; h < H; ++h)
            if (p.dst[s] >= 0)  // a padding row of the graphed forward's plan is written nowhere
              out[static_cast<std::size_t>(p.dst[s]) * F + k * H + h] = static_cast<float>(x[s * H + h]);
  }
  return out;
}

/// Largest |a - b| over two equally long arrays (infinity when the sizes differ or a value is not finite).
inline double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!std::isfinite(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace dflash_example::testing
