#pragma once
// batch_source: the pipeline's source of seeded synthetic batches (documents of
// 48..192 tokens packed up to seq_len). A process that trains alone makes steps
// 0, 1, 2, ...; target rank r of T in an MPI job makes r, r + T, r + 2T, ...:
// the same batches, split.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <dflash/profile/fixed_string.hpp>

#include "payloads.hpp"
#include "setup.hpp"

namespace dflash_example {

struct batch_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = Batch;

  /// Steps first, first + stride, ... below --steps.
  explicit batch_source(const Setup* s, std::int64_t first = 0, std::int64_t step_stride = 1)
      : setup(s), next(first), stride(step_stride) {
    if (first < 0 || step_stride < 1)
      throw std::invalid_argument("batch_source: need first >= 0 and stride >= 1 (got first " + std::to_string(first) +
                                  ", stride " + std::to_string(step_stride) + ")");
  }

  const Setup* setup;
  std::int64_t next;  // one worker
  std::int64_t stride;

  std::optional<Batch> operator()() {
    if (next >= setup->opts.steps) return std::nullopt;
    const std::int64_t step = std::exchange(next, next + stride);
    return Batch{step, setup->source.make_batch(setup->opts.seed, static_cast<std::uint64_t>(step), setup->opts.seq_len)};
  }
};

}  // namespace dflash_example
