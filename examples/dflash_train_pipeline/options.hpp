#pragma once
// Settings of one training run (filled by cli.hpp, or directly by the
// benchmark). Plain data: no parser here, so the benchmark needs no CLI11.

#include <cstdint>
#include <string>
#include <vector>

namespace dflash_example {

enum class device_kind { cpu, cuda };
/// How hidden states cross from the target workers to the postprocess.
enum class hs_link_kind {
  slots,  ///< hs_device, a dflash::device_link: one step's padded states per slot
  rows,   ///< hs_rows, a dflash::device_queue_link: valid tokens' rows, --seq-len per batch
};
enum class output_format { table, json };

/// The valid values of an integer option, inclusive: the CLI (cli.hpp) and the Python module
/// (examples/python) check the same ranges.
struct int_range {
  std::int64_t lo, hi;
};
namespace limits {
inline constexpr int_range steps{1, std::int64_t{1} << 40};
inline constexpr int_range target_workers{1, 256};
inline constexpr int_range depth{1, 1 << 20};  ///< every link's depth
inline constexpr int_range hidden{1, 4096};
inline constexpr int_range seq_len{48, 1 << 16};
inline constexpr int_range block_size{2, 32};
inline constexpr int_range anchors{1, 512};
inline constexpr int_range window{0, 1 << 20};
inline constexpr int_range validate_rounds{1, 1000};
}  // namespace limits

struct Options {
  std::int64_t steps = 200;             ///< batches the source produces (= drafter steps, minus dropped samples)
  std::int32_t target_workers = 2;      ///< threads running the target forward
  std::int32_t batch_queue_depth = 8;   ///< source -> target workers
  std::int32_t post_link_depth = 4;     ///< slots of the hs_device link (target workers -> postprocess);
                                        ///< --hs-link rows: the hs_rows ring holds this many batches more than one
  hs_link_kind hs_link = hs_link_kind::slots;
  bool cuda_graphs = false;             ///< --cuda-graphs: the target forward replays a captured graph per step
  std::int32_t hs_queue_depth = 60;     ///< postprocess -> drafter (the HS queue)
  std::int32_t hidden = 64;             ///< target hidden width; the drafter sees taps * hidden features
  std::int32_t seq_len = 384;           ///< packed tokens per batch (whole documents, at most this many)
  std::int32_t block_size = 16;         ///< DFlash block size
  std::int32_t anchors = 24;            ///< anchors (blocks) per sequence
  std::int32_t window = 0;              ///< drafter context window; 0 = full attention
  std::uint64_t seed = 1;
  double profile_interval = 5.0;        ///< seconds between profile tables; 0 = off
  output_format profile_format = output_format::table;
  bool profile_all_keys = false;        ///< tables also list keys never recorded (hidden by default)
  std::string trace;                    ///< Chrome trace JSON path; empty = none
  std::string results;                  ///< --results: per-step digests and losses; empty = none
  device_kind device = device_kind::cpu;
  double progress_interval = 1.0;       ///< seconds between progress lines; 0 = only the last
  bool quiet = false;                   ///< no progress lines (benchmarks)
  std::int32_t target_ranks = 0;        ///< --ranks target=T,drafter=D under mpirun; 0 = one process
  std::int32_t drafter_ranks = 0;
  bool advice = false;                  ///< --advice: the periodic profile tables carry the bottleneck and what-ifs too
  std::vector<std::string> what_if;     ///< --what-if: configurations to predict from this run's profile
  double slow_drafter = 1;              ///< --slow-drafter F: each drafter step takes F times as long (CPU spin)
  bool validate = false;                ///< --validate: run the advisor's predictions for real and compare
  std::int32_t validate_rounds = 5;     ///< --validate-rounds: interleaved rounds of those runs
  std::vector<int> gpus;                ///< --gpus: devices of the target workers (worker w on gpus[w % n]),
                                        ///< postprocess on gpus[0]; empty = the current device. With --device
                                        ///< cpu the host twin simulates gpus.size() devices (ids 0..n-1)
};

}  // namespace dflash_example
