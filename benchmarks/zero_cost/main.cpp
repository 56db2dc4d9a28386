// Drives dflash_hot_loop on a fixed, deterministic input and prints a checksum
// (so the work cannot be optimised away and variants can be checked equal).
#include "hot_loop.hpp"

#include <cstdio>
#include <vector>

int main() {
  constexpr int batch = 8, seq = 64, hidden = 64, reps = 20;
  std::vector<float> src(static_cast<std::size_t>(batch) * seq * hidden);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 97) / 97.0f;
  std::vector<std::int32_t> len(batch);
  for (int b = 0; b < batch; ++b) len[b] = 1 + (b * 37) % seq;
  std::vector<float> dst(src.size());
  const zero_cost::pack_input in{src.data(), dst.data(), len.data(), batch, seq, hidden};
  std::uint64_t sum = 0;
  for (int r = 0; r < reps; ++r) sum += dflash_hot_loop(in);
  std::printf("checksum %llu\n", static_cast<unsigned long long>(sum));
}
