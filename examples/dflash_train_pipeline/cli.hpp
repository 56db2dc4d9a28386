#pragma once
// Command line of the example (CLI11). Every value is checked here, before
// any work: integers are decimal only and range-checked, seconds are finite
// and in range, --trace must be writable, --gpus distinct existing ids; nothing is clamped. parse_cli() returns the exit code to stop with (0 after --help,
// 2 for a usage error) or nothing to go on.

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>

#include "options.hpp"

namespace dflash_example {

inline constexpr int exit_usage = 2;               ///< unknown flag, bad value
inline constexpr int exit_device_unavailable = 3;  ///< --device cuda without a usable GPU (or CUDA build)
inline constexpr int exit_failure = 1;             ///< the run itself failed

inline constexpr double min_interval_s = 1e-3;           ///< shortest report / progress interval
inline constexpr double max_profile_interval_s = 86400;  ///< one day
inline constexpr double max_progress_interval_s = 3600;

/// The whole of `s` as a base-10 number of type T, or nothing: no base
/// prefixes, no leading '+', no spaces, no hex floats, no inf/nan, and no
/// value outside T's range (never clamped). Leading zeros are decimal ("010" = 10).
template <class T>
std::optional<T> parse_decimal(const std::string& s) {
  if (s.empty() || s.front() == '+') return std::nullopt;
  T v{};
  const char* end = s.data() + s.size();
  std::from_chars_result r{};
  if constexpr (std::is_floating_point_v<T>) {
    if (s.find_first_not_of("0123456789.eE+-") != std::string::npos) return std::nullopt;  // no inf/nan/hex
    r = std::from_chars(s.data(), end, v, std::chars_format::general);
    if (r.ec == std::errc{} && !std::isfinite(v)) return std::nullopt;
  } else {
    r = std::from_chars(s.data(), end, v, 10);
  }
  if (r.ec != std::errc{} || r.ptr != end) return std::nullopt;
  return v;
}

inline std::string format_seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

/// `--trace FILE` can be written, checked before any work without touching
/// an existing FILE (opened for appending, nothing written); a FILE this
/// check creates is removed again. Empty: writable; otherwise why not.
inline std::string trace_not_writable(const std::string& path) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  if (existed && std::filesystem::is_directory(path, ec)) return "'" + path + "' is a directory";
  {
    std::ofstream f(path, std::ios::app);
    if (!f) return "cannot write '" + path + "'";
  }
  if (!existed) std::filesystem::remove(path, ec);
  return {};
}

/// profiled: the AccumulatingProfiler build; the plain build rejects the profiling flags.
/// --gpus "0,1": distinct device ids (decimal, at most 4 digits each) into
/// `out`; empty when they parse, else what is wrong.
inline std::string parse_gpus(const std::string& text, std::vector<int>& out) {
  out.clear();
  if (text.empty()) return "the list is empty (give device ids, e.g. 0,1)";
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string id = text.substr(at, comma - at);
    if (id.empty() || id.size() > 4 || id.find_first_not_of("0123456789") != std::string::npos)
      return "expected comma-separated device ids (non-negative integers), got '" + text + "'";
    const int g = std::stoi(id);
    for (const int seen : out)
      if (seen == g) return "device " + id + " is listed twice in '" + text + "'";
    out.push_back(g);
    at = comma + 1;
  }
  return {};
}

inline std::optional<int> parse_cli(int argc, char** argv, Options& o, bool profiled, std::ostream& out,
                                    std::ostream& err) {
  const std::string self = profiled ? "dflash_train_pipeline_profiled" : "dflash_train_pipeline";
  CLI::App app{
      "DFlash drafter training pipeline on dflash::Pipeline: a batch source -> N target-forward workers -> "
      "postprocess (doc ids, packing, copy, anchors, block mask) -> bounded HS queue -> drafter train loop. "
      "The target model and the drafter are small synthetic models (with --device cuda the target runs on the "
      "GPU); the drafter runs on the CPU and really trains (its loss goes down). " +
          std::string(profiled ? "This build records every stage with dflash::AccumulatingProfiler."
                               : "This build uses dflash::NullProfiler: instrumentation compiles to nothing; "
                                 "run dflash_train_pipeline_profiled for per-stage tables."),
      self};
  app.footer(
      "Exit codes: 0 ok, 1 the run failed, 2 usage error (unknown flag, bad value), 3 --device cuda but no "
      "usable CUDA device (or a build without CUDA).");

  // Integers: decimal only (CLI11 would read "010" as 8 and "0x10" as 16),
  // range-checked with a message that says which rule failed. The checked
  // string is rewritten (transform, not check: a check cannot modify it) to
  // its canonical decimal form, so CLI11's own
  // conversion into the variable sees exactly the value that was checked.
  auto in_range = [](int_range r) {
    const std::int64_t lo = r.lo, hi = r.hi;
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
          const auto v = parse_decimal<std::int64_t>(s);
          if (!v) return "'" + s + "' is not a decimal integer";
          if (*v < lo || *v > hi)
            return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s;
          s = std::to_string(*v);
          return {};
        },
        "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  app.add_option("--steps", o.steps, "batches to train on")->transform(in_range(limits::steps))->capture_default_str();
  app.add_option("--target-workers", o.target_workers, "target-forward threads")->transform(in_range(limits::target_workers))->capture_default_str();
  app.add_option("--batch-queue-depth", o.batch_queue_depth, "capacity of the source -> target queue")
      ->transform(in_range(limits::depth))->capture_default_str();
  app.add_option("--post-link-depth", o.post_link_depth,
                 "slots of the hs_device link (target workers -> postprocess, device-resident)")
      ->transform(in_range(limits::depth))->capture_default_str();
  app.add_option("--hs-queue-depth", o.hs_queue_depth, "capacity of the HS queue (postprocess -> drafter)")
      ->transform(in_range(limits::depth))->capture_default_str();
  app.add_option("--hidden", o.hidden, "target hidden width (the drafter reads 3 tapped layers: 3 x hidden features)")
      ->transform(in_range(limits::hidden))->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "packed tokens per batch (whole documents of 48..192 tokens)")
      ->transform(in_range(limits::seq_len))->capture_default_str();
  app.add_option("--block-size", o.block_size, "DFlash block size (anchor + block_size-1 masked slots)")
      ->transform(in_range(limits::block_size))->capture_default_str();
  app.add_option("--anchors", o.anchors, "anchors (blocks) per sequence")->transform(in_range(limits::anchors))->capture_default_str();
  app.add_option("--window", o.window, "drafter context window in tokens (0 = full attention)")
      ->transform(in_range(limits::window))->capture_default_str();
  app.add_option("--seed", o.seed, "seed of data, anchors and the drafter's init")
      ->transform(CLI::Validator(
          [](std::string& s) -> std::string {
            const auto v = parse_decimal<std::uint64_t>(s);
            if (!v) return "'" + s + "' is not a decimal integer in [0, " +
                           std::to_string(std::numeric_limits<std::uint64_t>::max()) + "]";
            s = std::to_string(*v);
            return {};
          },
          "UINT64"))
      ->capture_default_str();

  // Seconds: a finite decimal number, 0 (off) or in [lo, hi].
  auto seconds = [](double lo, double hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
          const auto v = parse_decimal<double>(s);
          if (!v) return "'" + s + "' is not a number of seconds";
          if (*v != 0 && !(*v >= lo && *v <= hi))
            return "must be 0 (off) or in [" + format_seconds(lo) + ", " + format_seconds(hi) + "] seconds, got " + s;
          return {};
        },
        "SECONDS: 0 or [" + format_seconds(lo) + ", " + format_seconds(hi) + "]");
  };

  std::string format = "table", device = "cpu", hs_link = "slots";
  if (!profiled) o.profile_interval = 0;  // the plain build reports nothing; its default says so
  app.add_option("--profile-interval", o.profile_interval,
                 "seconds between per-stage profile tables (0 = off; profiled build)")
      ->check(seconds(min_interval_s, max_profile_interval_s))
      ->capture_default_str();
  auto* fmt = app.add_option("--profile-format", format, "profile output: table or json (profiled build)")
                  ->check(CLI::IsMember({"table", "json"}))
                  ->capture_default_str();
  auto* all_keys = app.add_flag("--profile-all-keys", o.profile_all_keys,
                                "profile tables also list keys never recorded (hidden by default; profiled build)");
  auto* trace = app.add_option("--trace", o.trace,
                               "write a Chrome/Perfetto trace of every stage to this JSON file (profiled build; "
                               "dflash::TraceProfiler composed with the accumulating profiler)");
  auto* results = app.add_option("--results", o.results,
                                 "write what the postprocess produced per step (bit-exact digests; layouts and hidden-state "
                                 "sums that compare across backends) and the loss curve to this file, as `name value` "
                                 "lines (scripts/bundle/compare_results.py --across-backends compares a cuda and a cpu "
                                 "run of the same seed)");
  app.add_option("--device", device,
                 "the backend of the target forward, the hs_device link and the postprocess. cpu: the asynchronous "
                 "host twin (device work on executor threads, host memory). cuda: the target model on the GPU "
                 "(cuBLAS, CUB) straight into GPU slots, the postprocess ops (doc ids, packing, anchors, block "
                 "mask) as dflash::ops::gpu kernels on the postprocess stream, copied into pinned memory "
                 "asynchronously; the drafter runs on the CPU")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--hs-link", hs_link,
                     "how hidden states reach the postprocess. slots: hs_device, a dflash::device_link of "
                     "--post-link-depth device slots, one step's padded states each, packed by the postprocess. "
                     "rows: hs_rows, a dflash::device_queue_link: the target workers push only their valid tokens' "
                     "rows into a ring in device memory, and the postprocess pops exactly --seq-len of them per "
                     "batch, across steps and documents (the ring holds --post-link-depth + 1 batches)")
          ->check(CLI::IsMember({"slots", "rows"}))
          ->capture_default_str();
  auto* graphs = app.add_flag("--cuda-graphs", o.cuda_graphs,
                              "the target forward as a dflash::graphed stage: its work for a step is captured once "
                              "per worker and slot into a CUDA graph and replayed with one launch per step (the host "
                              "twin records and replays its enqueued work the same way). With --hs-link slots");
  app.add_option("--progress-interval", o.progress_interval, "seconds between progress lines (0 = only the last)")
      ->check(seconds(min_interval_s, max_progress_interval_s))
      ->capture_default_str();
  app.add_flag("--quiet", o.quiet, "no progress lines");
  auto* advice = app.add_flag("--advice", o.advice,
                              "periodic profile tables also name the limiting stage and the changes with the largest "
                              "predicted gain (the final report always does; profiled build)");
  auto* what_if = app.add_option("--what-if", o.what_if,
                                 "predict throughput for a change from this run's profile, e.g. "
                                 "target_forward.workers=3, hs_queue.depth=8, drafter.speed=2 (comma-joined changes "
                                 "form one configuration; repeatable; profiled build)");
  auto* validate = app.add_flag("--validate", o.validate,
                                "after the run, make the advisor's best changes that have a flag (and every --what-if) "
                                "for real: each configuration runs under NullProfiler, rounds interleaved with the "
                                "configuration as measured, and a table sets predicted beside measured (profiled build)");
  auto* validate_rounds =
      app.add_option("--validate-rounds", o.validate_rounds, "interleaved rounds of the --validate runs")
          ->transform(in_range(limits::validate_rounds))
          ->capture_default_str();
  app.add_option("--slow-drafter", o.slow_drafter,
                 "each drafter step takes this many times as long (the extra time spins on the CPU): a known "
                 "slowdown to check predictions against")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const auto v = parse_decimal<double>(s);
            if (!v || !(*v >= 1 && *v <= 100)) return "must be a number in [1, 100], got " + s;
            return {};
          },
          "FACTOR in [1, 100]"))
      ->capture_default_str();
  std::string gpus;
  auto* gpus_opt = app.add_option("--gpus", gpus,
                                  "devices for the target-forward workers, e.g. 0,1 (worker w on the (w mod n)-th); "
                                  "the postprocess runs on the first. Distinct ids, no more than --target-workers. "
                                  "--device cuda: ids of visible GPUs; --device cpu: the host twin simulates as many "
                                  "devices as listed, without peer access (ids 0..n-1; hidden states cross devices "
                                  "by peer copy)");
  std::string ranks;
  auto* ranks_opt = app.add_option("--ranks", ranks,
                                   "run as an MPI job (under mpirun, builds with MPI): target=T,drafter=1 — ranks "
                                   "0..T-1 run source, target forward and postprocess, rank T trains the drafter; "
                                   "hidden states cross ranks over a dflash::mpi::net_link; rank 0 prints the job's "
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
    if (all_keys->count() > 0) return usage(std::string("--profile-all-keys") + needs);
    if (o.profile_interval != 0) return usage(std::string("--profile-interval") + needs);
    if (advice->count() > 0) return usage(std::string("--advice") + needs);
    if (what_if->count() > 0) return usage(std::string("--what-if") + needs);
    if (validate->count() > 0) return usage(std::string("--validate") + needs);
  }
  if (validate_rounds->count() > 0 && validate->count() == 0) return usage("--validate-rounds needs --validate");
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
    if (hs_link == "rows") return usage("--ranks: the MPI job carries whole steps over hs_device: use --hs-link slots");
    if (trace->count() > 0) return usage("--ranks: --trace is per process and not supported in an MPI job");
    if (results->count() > 0) return usage("--ranks: --results is not supported in an MPI job");
    if (validate->count() > 0) return usage("--ranks: --validate runs configurations in one process, not an MPI job");
    o.target_ranks = t;
    o.drafter_ranks = d;
  }
  if (graphs->count() > 0) {
    if (hs_link == "rows")
      return usage("--cuda-graphs: the graphed target forward writes hs_device slots: use --hs-link slots");
    if (ranks_opt->count() > 0) return usage("--cuda-graphs: not supported in an MPI job (--ranks)");
  }
  if (gpus_opt->count() > 0) {
    if (const std::string why = parse_gpus(gpus, o.gpus); !why.empty()) return usage("--gpus: " + why);
    if (o.gpus.size() > static_cast<std::size_t>(o.target_workers))
      return usage("--gpus: " + std::to_string(o.gpus.size()) + " devices listed but --target-workers is " +
                   std::to_string(o.target_workers) + ": some devices would get no worker");
    if (device == "cpu")  // the twin simulates one device per listed id
      for (const int g : o.gpus)
        if (g >= static_cast<int>(o.gpus.size()))
          return usage("--gpus: device " + std::to_string(g) + " does not exist: --device cpu simulates " +
                       std::to_string(o.gpus.size()) + " device(s), one per listed id (ids 0.." +
                       std::to_string(o.gpus.size() - 1) + ")");
    if (ranks_opt->count() > 0) return usage("--gpus: not supported in an MPI job (--ranks)");
    if (hs_link == "rows" && o.gpus.size() > 1)
      return usage("--gpus: --hs-link rows keeps its ring on one device: list one device, or use --hs-link slots");
  }
  if (!o.trace.empty())  // before any work, and an existing file stays as it is until the run writes it
    if (const std::string why = trace_not_writable(o.trace); !why.empty()) return usage("--trace: " + why);
  o.profile_format = format == "json" ? output_format::json : output_format::table;
  o.device = device == "cuda" ? device_kind::cuda : device_kind::cpu;
  o.hs_link = hs_link == "rows" ? hs_link_kind::rows : hs_link_kind::slots;
  return std::nullopt;
}

}  // namespace dflash_example
