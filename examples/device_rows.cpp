// Rows whose counts only the device knows: each producer call keeps the valid
// tokens of a padded sequence (0..16 of them), the consumer takes batches of
// 8 rows across sequences. On the host twin here: the enqueued lambdas are
// the device work; on a GPU they are kernels and B is dflash::cuda_backend.
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/links/device_queue.hpp>

#include <atomic>
#include <cstdio>
#include <optional>

using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;
struct token { int seq, pos; };
using tokens = dflash::device_rows<token, B>;
int valid_of(int seq) { return (seq * 7) % 17; }  // 0..16 valid tokens of a padded sequence

struct keep {  // one padded sequence in, its valid tokens out: only the device work knows how many
  static constexpr dflash::fixed_string name{"keep"};
  using input_type = int;
  using output_type = tokens;
  void operator()(int&& seq, tokens& out, const DS& s) const {
    s.enqueue([p = out.pusher(), seq] {
      for (int t = 0; t < valid_of(seq); ++t) p.push(token{seq, t});
    });
  }
};
struct train {  // up to 8 tokens per call, across sequences; the count is read on the device
  static constexpr dflash::fixed_string name{"train"};
  using input_type = tokens;
  using output_type = void;
  std::atomic<long>* rows;
  void operator()(tokens& in, const DS& s) const {
    s.enqueue([b = in.batch(), rows = rows] { *rows += b.count(); });
  }
};

int main() {
  std::atomic<long> rows{0};
  int next = 0;
  auto seqs = dflash::stage<"seqs">([&]() -> std::optional<int> { return next < 1000 ? std::optional(next++) : std::nullopt; });
  auto p = dflash::make_pipeline(dflash::NullProfiler{}, seqs, dflash::queue_link<"in", 8>{}, keep{},
                                 dflash::device_queue_link<"tokens", 256, 16, 8>{}, train{&rows});
  p.run_to_completion();
  long expected = 0;
  for (int s = 0; s < 1000; ++s) expected += valid_of(s);
  std::printf("rows %ld (expected %ld), host waits %llu\n", rows.load(), expected,
              static_cast<unsigned long long>(p.backend().stats().host_waits));
  return rows == expected ? 0 : 1;
}
