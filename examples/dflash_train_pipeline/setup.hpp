#pragma once
// Setup: the models, data source and sizes every stage of a run shares,
// derived once from the options.

#include <cstdint>

#include <dflash/ops/anchors.hpp>

#include "model.hpp"
#include "options.hpp"
#include "synthetic_data.hpp"

namespace dflash_example {

struct Setup {
  explicit Setup(const Options& o)
      : opts(o),
        data(make_data()),
        source(data),
        target(TargetConfig{.vocab = data.vocab, .hidden = o.hidden}),
        drafter_cfg(make_drafter(o, target.feature_dim(), data.vocab)) {}

  Options opts;
  DataConfig data;
  MarkovSource source;
  TargetModel target;
  DrafterConfig drafter_cfg;

  [[nodiscard]] dflash::ops::anchor_params anchor_params(std::int64_t step) const noexcept {
    return {opts.block_size, opts.anchors, mix_seed(opts.seed ^ 0xA5C0u, static_cast<std::uint64_t>(step))};
  }

 private:
  static DataConfig make_data() { return DataConfig{}; }
  static DrafterConfig make_drafter(const Options& o, std::int32_t feature_dim, std::int32_t vocab) {
    DrafterConfig c;
    c.vocab = vocab;
    c.feature_dim = feature_dim;
    c.block_size = o.block_size;
    // DFlash recipes: gamma 7 / 5 / 4 for block sizes 16 / 10 / 8; elsewhere block_size / 2.
    c.loss_gamma = o.block_size == 16 || o.block_size == 10 || o.block_size == 8 ? recommended_gamma(o.block_size)
                                                                                  : o.block_size / 2.0;
    c.seed = o.seed;
    return c;
  }
};

}  // namespace dflash_example
