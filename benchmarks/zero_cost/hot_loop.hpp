#pragma once
// The representative hot loop of the zero-cost proof: a packing stage body
// (gather valid rows of a padded [batch, seq, hidden] buffer) with profiler
// calls around the stage, per sequence, and inside the per-row tight loop.
//
// `dflash_hot_loop` is defined once per variant TU (baseline / null /
// accumulating); scripts/zero_cost_check.sh counts its instructions with
// callgrind and compares its machine code.

#include <dflash/profile.hpp>

#include <cstdint>
#include <cstring>

namespace zero_cost {

struct pack_input {
  const float* src;         // [batch, seq, hidden]
  float* dst;               // [tokens, hidden]
  const std::int32_t* len;  // [batch]
  int batch, seq, hidden;
};

using keys = dflash::key_set<"stage", "sequence", "row">;

// The stage declares its keys (profiler_ref<P, keys>): with NullProfiler every
// key is checked at compile time, and the proof shows that costs nothing.
template <dflash::ProfilerPolicy P>
struct PackStage {
  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;

  std::uint64_t operator()(const pack_input& in) const {
    using namespace dflash::literals;
    auto stage = prof->scope("stage"_key);
    std::uint64_t checksum = 0;
    float* out = in.dst;
    for (int b = 0; b < in.batch; ++b) {
      auto seq_scope = prof->scope("sequence"_key);
      const float* row = in.src + static_cast<std::size_t>(b) * in.seq * in.hidden;
      for (int t = 0; t < in.len[b]; ++t) {
        auto tok = prof->begin("row"_key);
        for (int h = 0; h < in.hidden; ++h) {
          out[h] = row[h] * 0.5f;
          checksum += static_cast<std::uint64_t>(out[h] > 0.25f);
        }
        prof->end("row"_key, tok);
        out += in.hidden;
        row += in.hidden;
      }
    }
    return checksum;
  }
};

/// The same stage as PackStage, written by hand with no instrumentation.
struct PackStageUninstrumented {
  std::uint64_t operator()(const pack_input& in) const {
    std::uint64_t checksum = 0;
    float* out = in.dst;
    for (int b = 0; b < in.batch; ++b) {
      const float* row = in.src + static_cast<std::size_t>(b) * in.seq * in.hidden;
      for (int t = 0; t < in.len[b]; ++t) {
        for (int h = 0; h < in.hidden; ++h) {
          out[h] = row[h] * 0.5f;
          checksum += static_cast<std::uint64_t>(out[h] > 0.25f);
        }
        out += in.hidden;
        row += in.hidden;
      }
    }
    return checksum;
  }
};

}  // namespace zero_cost

extern "C" std::uint64_t dflash_hot_loop(const zero_cost::pack_input& in);
