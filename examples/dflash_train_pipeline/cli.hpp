#pragma once
// Command line of the example (CLI11). Every value is checked here; nothing
// is clamped. parse_cli() returns the exit code to stop with (0 after --help,
// 2 for a usage error) or nothing to go on.

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <string>

#include "options.hpp"

namespace dflash_example {

inline constexpr int exit_usage = 2;               ///< unknown flag, bad value
inline constexpr int exit_device_unavailable = 3;  ///< --device cuda without a usable GPU (or CUDA build)
inline constexpr int exit_failure = 1;             ///< the run itself failed

/// profiled: the AccumulatingProfiler build; the plain build rejects the profiling flags.
inline std::optional<int> parse_cli(int argc, char** argv, Options& o, bool profiled, std::ostream& out,
                                    std::ostream& err) {
  const std::string self = profiled ? "dflash_train_pipeline_profiled" : "dflash_train_pipeline";
  CLI::App app{
      "DFlash drafter training pipeline on dflash::Pipeline: a batch source -> N target-forward workers -> "
      "postprocess (doc ids, packing, copy, anchors, block mask) -> bounded HS queue -> drafter train loop. "
      "The target model and the drafter are small synthetic models that run on the CPU; the drafter really "
      "trains (its loss goes down). " +
          std::string(profiled ? "This build records every stage with dflash::AccumulatingProfiler."
                               : "This build uses dflash::NullProfiler: instrumentation compiles to nothing; "
                                 "run dflash_train_pipeline_profiled for per-stage tables."),
      self};
  app.footer(
      "Exit codes: 0 ok, 1 the run failed, 2 usage error (unknown flag, bad value), 3 --device cuda but no "
      "usable CUDA device (or a build without CUDA).");

  // Integers in [lo, hi], with a message that says which rule failed.
  auto at_least = [](std::int64_t lo, std::int64_t hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
          std::int64_t v = 0;
          if (s.empty() || !CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not an integer";
          if (v < lo || v > hi)
            return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s;
          return {};
        },
        "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  app.add_option("--steps", o.steps, "batches to train on")->check(at_least(1, std::int64_t{1} << 40))->capture_default_str();
  app.add_option("--target-workers", o.target_workers, "target-forward threads")->check(at_least(1, 256))->capture_default_str();
  app.add_option("--batch-queue-depth", o.batch_queue_depth, "capacity of the source -> target queue")
      ->check(at_least(1, 1 << 20))->capture_default_str();
  app.add_option("--post-queue-depth", o.post_queue_depth,
                 "slots of the hs_device link (target workers -> postprocess, device-resident)")
      ->check(at_least(1, 1 << 20))->capture_default_str();
  app.add_option("--hs-queue-depth", o.hs_queue_depth, "capacity of the HS queue (postprocess -> drafter)")
      ->check(at_least(1, 1 << 20))->capture_default_str();
  app.add_option("--hidden", o.hidden, "target hidden width (the drafter reads 3 tapped layers: 3 x hidden features)")
      ->check(at_least(1, 4096))->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "packed tokens per batch (whole documents of 48..192 tokens)")
      ->check(at_least(48, 1 << 16))->capture_default_str();
  app.add_option("--block-size", o.block_size, "DFlash block size (anchor + block_size-1 masked slots)")
      ->check(at_least(2, 32))->capture_default_str();
  app.add_option("--anchors", o.anchors, "anchors (blocks) per sequence")->check(at_least(1, 512))->capture_default_str();
  app.add_option("--window", o.window, "drafter context window in tokens (0 = full attention)")
      ->check(at_least(0, 1 << 20))->capture_default_str();
  app.add_option("--seed", o.seed, "seed of data, anchors and the drafter's init")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
              return "'" + s + "' is not a non-negative integer";
            return {};
          },
          "UINT64"))
      ->capture_default_str();

  std::string format = "table", device = "cpu";
  if (!profiled) o.profile_interval = 0;  // the plain build reports nothing; its default says so
  app.add_option("--profile-interval", o.profile_interval,
                                  "seconds between per-stage profile tables (0 = off; profiled build)")
                       ->check(CLI::Validator(
                           [](std::string& s) -> std::string {
                             double v = 0;
                             if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v))
                               return "'" + s + "' is not a number of seconds";
                             if (v < 0) return "must be >= 0 seconds (0 = off), got " + s;
                             return {};
                           },
                           "SECONDS>=0"))
                       ->capture_default_str();
  auto* fmt = app.add_option("--profile-format", format, "profile output: table or json (profiled build)")
                  ->check(CLI::IsMember({"table", "json"}))
                  ->capture_default_str();
  auto* trace = app.add_option("--trace", o.trace,
                               "write a Chrome/Perfetto trace of every stage to this JSON file (profiled build; "
                               "dflash::TraceProfiler composed with the accumulating profiler)");
  auto* results = app.add_option("--results", o.results,
                                 "write what the postprocess produced per step (bit-exact digests) and the loss curve "
                                 "to this file, as `name value` lines (compare a cuda and a cpu run of the same seed)");
  app.add_option("--device", device,
                 "the backend of the hs_device link and the postprocess. cpu: the asynchronous host twin (device "
                 "work on executor threads, host memory). cuda: hidden states in GPU slots, the postprocess ops "
                 "(doc ids, packing, anchors, block mask) as dflash::ops::gpu kernels on the postprocess stream, "
                 "copied into pinned memory asynchronously; the target model and the drafter run on the CPU")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--progress-interval", o.progress_interval, "seconds between progress lines (0 = only the last)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_flag("--quiet", o.quiet, "no progress lines");
  std::string ranks;
  auto* ranks_opt = app.add_option("--ranks", ranks,
                                   "run as an MPI job (under mpirun, builds with MPI): target=T,drafter=1 — ranks "
                                   "0..T-1 run source, target forward and postprocess, rank T trains the drafter; "
                                   "hidden states cross ranks over a dflash::mpi::mpi_link; rank 0 prints the job's "
                                   "profile with a column per rank");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    err << self << ": error: " << e.what() << "\nRun with --help for the options.\n";
    return exit_usage;
  }
  auto usage = [&](const std::string& what) {
    err << self << ": error: " << what << "\nRun with --help for the options.\n";
    return exit_usage;
  };
  if (!profiled) {
    const char* needs = " needs the profiled build (this one uses NullProfiler and records nothing): run "
                        "dflash_train_pipeline_profiled";
    if (trace->count() > 0) return usage(std::string("--trace") + needs);
    if (fmt->count() > 0) return usage(std::string("--profile-format") + needs);
    if (o.profile_interval != 0) return usage(std::string("--profile-interval") + needs);
  }
  if (trace->count() > 0 && o.trace.empty()) return usage("--trace: the file name is empty");
  if (results->count() > 0 && o.results.empty()) return usage("--results: the file name is empty");
  if (ranks_opt->count() > 0) {
    // "target=T,drafter=D", both keys once, in any order.
    int t = -1, d = -1;
    std::size_t at = 0;
    while (at <= ranks.size()) {
      const std::size_t comma = std::min(ranks.find(',', at), ranks.size());
      const std::string part = ranks.substr(at, comma - at);
      const std::size_t eq = part.find('=');
      const std::string key = part.substr(0, eq), val = eq == std::string::npos ? "" : part.substr(eq + 1);
      int* slot = key == "target" ? &t : key == "drafter" ? &d : nullptr;
      if (!slot || eq == std::string::npos || val.empty() || val.size() > 6 ||
          val.find_first_not_of("0123456789") != std::string::npos || *slot != -1)
        return usage("--ranks: expected target=T,drafter=D (each once, positive integers), got '" + ranks + "'");
      *slot = std::stoi(val);
      at = comma + 1;
    }
    if (t < 1 || d < 1) return usage("--ranks: needs target=T and drafter=D with T, D >= 1, got '" + ranks + "'");
    if (d != 1)
      return usage("--ranks: one drafter rank is supported (several would need a gradient all-reduce), got drafter=" +
                   std::to_string(d));
    if (device == "cuda") return usage("--ranks: the MPI job runs the hs_device link on the host twin: use --device cpu");
    if (trace->count() > 0) return usage("--ranks: --trace is per process and not supported in an MPI job");
    if (results->count() > 0) return usage("--ranks: --results is not supported in an MPI job");
    o.target_ranks = t;
    o.drafter_ranks = d;
  }
  o.profile_format = format == "json" ? output_format::json : output_format::table;
  o.device = device == "cuda" ? device_kind::cuda : device_kind::cpu;
  return std::nullopt;
}

}  // namespace dflash_example
