#pragma once
// The example's driver, written once for every profiler policy and backend:
//   run_training<P, B>(setup, prof, stats, console, device)  builds the pipeline, runs it, returns the log;
//   train_main<Stats>(argc, argv)                          the whole program (main.cpp / main_profiled.cpp).
// Stats is NullProfiler (plain build) or AccumulatingProfiler<train_keys>
// (profiled build); the choice is a type, made in each main TU.

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <numeric>
#include <string>
#include <type_traits>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include <dflash/dflash.hpp>
#if DFLASH_EXAMPLE_CUDA
#include <dflash/device/cuda_backend.hpp>
#endif

#include "advice.hpp"
#include "cli.hpp"
#include "signals.hpp"
#include "validate.hpp"
#include "train_pipeline.hpp"

namespace dflash_example {

struct RunResult {
  TrainLog log;
  double seconds = 0;
  std::string advice;  ///< profiled build: the bottleneck and what-if section of the whole run
  std::optional<advised> advice_data;  ///< profiled build: the same advice, as data (--validate)
  std::string link_counts;  ///< --hs-link rows: what the hs_rows link counted (rows, batches, fill)
  std::string staging;      ///< the pinned staging pool's counts (allocations, reuses, high water)
  std::string graphs;       ///< --cuda-graphs: the target forward's captures and graph launches
  [[nodiscard]] double tokens_per_second() const noexcept {
    return seconds > 0 ? static_cast<double>(log.tokens) / seconds : 0.0;
  }
  /// Mean loss over the first / last `window()` trained steps.
  [[nodiscard]] std::size_t window() const noexcept {
    const std::size_t n = log.losses.size();
    return n == 0 ? 0 : std::min<std::size_t>(20, std::max<std::size_t>(1, n / 10));
  }
  [[nodiscard]] double initial_loss() const {
    const std::size_t w = window();
    return w ? std::accumulate(log.losses.begin(), log.losses.begin() + static_cast<std::ptrdiff_t>(w), 0.0) /
                   static_cast<double>(w)
             : 0.0;
  }
  [[nodiscard]] double final_loss() const {
    const std::size_t w = window();
    return w ? std::accumulate(log.losses.end() - static_cast<std::ptrdiff_t>(w), log.losses.end(), 0.0) /
                   static_cast<double>(w)
             : 0.0;
  }
};

/// How this program's profile tables are laid out: keys never recorded are
/// hidden unless --profile-all-keys, and the footer names that flag.
inline dflash::report_options table_options(const Options& o) {
  dflash::report_options r;
  r.show_unrecorded = o.profile_all_keys;
  r.unrecorded_hint = "run with --profile-all-keys to list them";
  return r;
}

/// The hs_rows link's counts, one line (--hs-link rows).
inline std::string row_link_line(const dflash::row_queue_stats& st, std::size_t capacity) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "hs_rows: %llu rows in, %llu out, %llu batches (%llu short, %llu empty); rows in the ring at a pop: "
                "mean %.0f, max %llu of %zu\n",
                static_cast<unsigned long long>(st.rows_in), static_cast<unsigned long long>(st.rows_out),
                static_cast<unsigned long long>(st.batches), static_cast<unsigned long long>(st.short_batches),
                static_cast<unsigned long long>(st.empty_batches), st.mean_fill(),
                static_cast<unsigned long long>(st.fill_max), capacity);
  return buf;
}

/// Runs one training on pipeline type `pipeline` (train_pipeline or
/// train_rows_pipeline); P is what the stages record into (NullProfiler,
/// the accumulating profiler, or a Composite of it and a trace), `stats`
/// what the periodic reporter prints, B the device backend.
template <class pipeline, dflash::ProfilerPolicy P, dflash::DeviceBackend B, dflash::ProfilerPolicy Stats>
RunResult run_pipeline(const Setup& setup, const P& prof, Stats& stats, Console& console,
                       device_postprocessor* device) {
  const Options& o = setup.opts;
  constexpr bool rows = std::is_same_v<pipeline, train_rows_pipeline<P, B>>;
  constexpr bool graphed = std::is_same_v<pipeline, train_graphed_pipeline<P, B>>;
  auto shape = pipeline::default_shape();
  const auto targets = static_cast<std::size_t>(o.target_workers);
  shape.workers[pipeline::template stage_index<"target_forward">] = targets;
  shape.depths[pipeline::template link_index<"batch_queue">] = static_cast<std::size_t>(o.batch_queue_depth);
  if constexpr (rows) {  // batches of --seq-len rows; a call pushes at most --seq-len (whole documents)
    const auto S = static_cast<std::size_t>(o.seq_len);
    constexpr std::size_t hs = pipeline::template link_index<"hs_rows">;
    shape.depths[hs] = (static_cast<std::size_t>(o.post_link_depth) + 1) * S;
    shape.rows[hs] = {S, S, static_cast<std::size_t>(setup.target.feature_dim())};
  } else {
    shape.depths[pipeline::template link_index<"hs_device">] = static_cast<std::size_t>(o.post_link_depth);
  }
  shape.depths[pipeline::template link_index<"hs_queue">] = static_cast<std::size_t>(o.hs_queue_depth);
  if (!o.gpus.empty()) {  // --gpus: target workers spread over the devices, postprocess on the first
    shape.devices[pipeline::template stage_index<"target_forward">].assign(o.gpus.begin(), o.gpus.end());
    shape.devices[pipeline::template stage_index<"postprocess">] = {o.gpus.front()};
  }

  Drafter drafter(setup.drafter_cfg);
  RunResult r;
  // With rows the drafter's steps are the batches, a count no one knows ahead (0: unknown).
  drafter_train<P> sink(prof, &drafter, &r.log, &console, rows ? 0 : o.steps, o.progress_interval);
  sink.slowdown = o.slow_drafter;
  using target_stage = typename pipeline::template stage_type<pipeline::template stage_index<"target_forward">>;
  using post_stage = typename pipeline::template stage_type<pipeline::template stage_index<"postprocess">>;
  pipeline p(prof, shape, batch_source(&setup), target_stage(prof, &setup, targets), post_stage(prof, &setup, device),
             std::move(sink));
  if constexpr (std::is_same_v<B, dflash::host_stream_backend>)
    if (!o.gpus.empty()) p.backend().simulate(static_cast<int>(o.gpus.size()), dflash::peer_access::none);

  const dflash::reporter_options ropt{
      o.profile_format == output_format::json ? dflash::report_format::json : dflash::report_format::table,
      dflash::report_reset::keep, table_options(o)};
  double cpu0 = 0;  // the process's CPU time when the profile window starts (the what-if model's core count)
  dflash::periodic_reporter<Stats> reporter(
      stats, std::chrono::duration<double>(o.profile_interval),
      [&](std::string_view s) {
        if constexpr (Stats::enabled)  // --advice: the analysis of the same (kept) window follows the table
          if (o.advice) {
            console.block(std::string(s) + advice_text(stats.snapshot(), p.layout(), o, process_cpu_ns() - cpu0, 0));
            return;
          }
        console.block(s);
      },
      ropt);
  if constexpr (Stats::enabled) {
    stats.clear();  // the window starts with the run (nothing recorded yet)
    cpu0 = process_cpu_ns();
  }
  const auto t0 = std::chrono::steady_clock::now();
  reporter.start();
  p.run();
  const stop_on_signal on_signal([&p] { p.stop(); });  // [signals] SIGINT/SIGTERM stop the run (signals.hpp)
  try {
    p.join();
  } catch (...) {
    reporter.stop();
    throw;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  reporter.stop();
  r.staging = staging_line(p.template stage<pipeline::template stage_index<"postprocess">>().staging_stats());
  if constexpr (rows) {
    constexpr std::size_t hs = pipeline::template link_index<"hs_rows">;
    r.link_counts = row_link_line(p.template link<hs>().stats(), shape.depths[hs]);
  }
  if constexpr (graphed) {
    const dflash::graph_stats g = p.template stage<pipeline::template stage_index<"target_forward">>().stats();
    r.graphs = "target_forward (--cuda-graphs): " + std::to_string(g.captures) + " captures, " +
               std::to_string(g.launches) + " graph launches";
  }
  if constexpr (Stats::enabled) {
    const auto snap = stats.snapshot();
    const double steps = static_cast<double>(r.log.digests.size());
    r.advice_data = advise_on(snap, p.layout(), o, process_cpu_ns() - cpu0,
                              steps > 0 ? static_cast<double>(r.log.tokens) / steps : 0);
    r.advice = advice_text(*r.advice_data);
  }
  return r;
}

/// The same run over the link --hs-link chose.
template <dflash::ProfilerPolicy P, dflash::DeviceBackend B, dflash::ProfilerPolicy Stats>
RunResult run_training(const Setup& setup, const P& prof, Stats& stats, Console& console,
                       device_postprocessor* device) {
  if (setup.opts.hs_link == hs_link_kind::rows)
    return run_pipeline<train_rows_pipeline<P, B>, P, B>(setup, prof, stats, console, device);
  if (setup.opts.cuda_graphs) return run_pipeline<train_graphed_pipeline<P, B>, P, B>(setup, prof, stats, console, device);
  return run_pipeline<train_pipeline<P, B>, P, B>(setup, prof, stats, console, device);
}

/// The same run on the backend --device chose.
template <dflash::ProfilerPolicy P, dflash::ProfilerPolicy Stats>
RunResult run_training(const Setup& setup, const P& prof, Stats& stats, Console& console,
                       device_postprocessor* device) {
#if DFLASH_EXAMPLE_CUDA
  if (setup.opts.device == device_kind::cuda)
    return run_training<P, dflash::cuda_backend>(setup, prof, stats, console, device);
#endif
  return run_training<P, dflash::host_stream_backend>(setup, prof, stats, console, device);
}

/// --results: what the postprocess produced per step (digest of every field,
/// bit for bit) and the loss curve, as `name value` lines; names ending in _f
/// are floats. Two runs with the same seed and one target worker (so the
/// drafter sees the same order) must agree: integers exactly, floats closely.
inline void write_results(const std::string& path, const RunResult& r) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("--results: cannot write '" + path + "'");
  auto digests = r.log.digests;
  std::sort(digests.begin(), digests.end());
  f << "items " << digests.size() << "\n" << "trained " << r.log.losses.size() << "\n"
    << "dropped " << r.log.dropped << "\n" << "tokens " << r.log.tokens << "\n";
  char buf[64];
  for (const auto& [step, d] : digests) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(d));
    f << "step" << step << "_digest " << buf << "\n";
  }
  write_step_checks(f, r.log.checks, r.log.losses);  // step_check.hpp: comparable across backends
  std::snprintf(buf, sizeof buf, "%.9g", r.initial_loss());
  f << "initial_loss_f " << buf << "\n";
  std::snprintf(buf, sizeof buf, "%.9g", r.final_loss());
  f << "final_loss_f " << buf << "\n";
  if (!f.flush()) throw std::runtime_error("--results: write to '" + path + "' failed");
}

inline std::string describe(const Setup& s, bool profiled) {
  const Options& o = s.opts;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: %lld steps | %d target workers | target hidden %d x %zu taps = %d features | seq-len %d | "
                "block %d | %d anchors | window %d | depths: batch queue %d, %s %d, hs queue %d | device %s | %s\n"
                "drafter: %zu parameters, trained with clipped Adam on the CPU\n",
                profiled ? "dflash_train_pipeline_profiled" : "dflash_train_pipeline",
                static_cast<long long>(o.steps), o.target_workers, o.hidden, s.target.taps().size(),
                s.target.feature_dim(), o.seq_len, o.block_size, o.anchors, o.window, o.batch_queue_depth,
                o.hs_link == hs_link_kind::rows ? "hs_rows ring (batches of seq-len rows)" : "hs_device link",
                o.hs_link == hs_link_kind::rows ? o.post_link_depth + 1 : o.post_link_depth, o.hs_queue_depth,
                o.device == device_kind::cuda ? "cuda (target forward with cuBLAS/CUB into device slots, postprocess "
                                                "ops on the GPU, drafter on the CPU)"
                                              : "cpu (the asynchronous host twin: device work on executor threads)",
                profiled ? "profiler: AccumulatingProfiler" : "profiler: NullProfiler (nothing recorded)",
                Drafter(s.drafter_cfg).num_parameters());
  std::string text = buf;
  if (!o.gpus.empty()) {  // --gpus: where the target workers and the postprocess run
    std::string ids;
    for (const int g : o.gpus) ids += (ids.empty() ? "" : ",") + std::to_string(g);
    text += "placement: target workers on devices " + ids + " (worker w on the (w mod " +
            std::to_string(o.gpus.size()) + ")-th), postprocess on device " + std::to_string(o.gpus.front()) +
            (o.device == device_kind::cpu ? " (the twin simulates " + std::to_string(o.gpus.size()) +
                                                " devices without peer access: hidden states cross by peer copy)"
                                          : "") +
            "\n";
  }
  return text;
}

inline void print_result(Console& console, const RunResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "throughput: %.0f tokens/s (%zu steps trained, %lld dropped, %lld tokens in %.2f s)\n"
                "initial loss %.4f final loss %.4f (mean of the first / last %zu steps)\n",
                r.tokens_per_second(), r.log.losses.size(), static_cast<long long>(r.log.dropped),
                static_cast<long long>(r.log.tokens), r.seconds, r.initial_loss(), r.final_loss(), r.window());
  console.block(buf);
}

/// --ranks: the MPI job (mpi_train.hpp, in builds with MPI).
template <dflash::ProfilerPolicy Stats>
int mpi_train_main(const Options& o, int argc, char** argv);

/// The program. Stats = NullProfiler or AccumulatingProfiler<train_keys>.
template <dflash::ProfilerPolicy Stats>
int train_main(int argc, char** argv) {
  constexpr bool profiled = Stats::enabled;
  Options o;
  if (auto rc = parse_cli(argc, argv, o, profiled, std::cout, std::cerr)) return *rc;
  const char* self = profiled ? "dflash_train_pipeline_profiled" : "dflash_train_pipeline";
  if (o.target_ranks > 0) {
#if DFLASH_EXAMPLE_MPI
    return mpi_train_main<Stats>(o, argc, argv);
#else
    std::cerr << self << ": error: --ranks needs a build with MPI (DFLASH_ENABLE_MPI=ON)\n";
    return exit_usage;
#endif
  }
  if constexpr (profiled)  // a misspelt --what-if is a usage error before any work
    if (const std::string why = bad_what_if(o, train_pipeline_twin<dflash::NullProfiler>::layout(
            train_pipeline_twin<dflash::NullProfiler>::default_shape()));
        !why.empty()) {
      std::cerr << self << ": error: --" << why << "\nRun with --help for the options.\n";
      return exit_usage;
    }
  const signal_watch signals(self);  // before any thread starts; exit code below

  std::unique_ptr<device_postprocessor> device;
  if (o.device == device_kind::cuda) {
    if (const std::string why = device_postprocessor::probe(); !why.empty()) {
      std::cerr << self << ": error: --device cuda: " << why << "\n";
      return exit_device_unavailable;
    }
#if DFLASH_EXAMPLE_CUDA  // (without it, probe() above has already refused --device cuda)
    if (!o.gpus.empty()) {  // --gpus: ids of visible devices, checked before any work
      dflash::cuda_backend cuda;
      const int n = cuda.device_count();
      for (const int g : o.gpus)
        if (g >= n) {
          std::cerr << self << ": error: --gpus: device " << g << " does not exist (" << n
                    << " CUDA device(s) visible: ids 0.." << n - 1 << ")\nRun with --help for the options.\n";
          return exit_usage;
        }
      cuda.set_device(o.gpus.front());  // the postprocess's device: its state is made on it
    }
#endif
    device = std::make_unique<device_postprocessor>(staging_blocks(o), o.seq_len);
  }

#if __has_include(<unistd.h>)
  const bool tty = isatty(fileno(stdout)) != 0;
#else
  const bool tty = false;
#endif
  Console console(stdout, tty, o.quiet);
  try {
    const Setup setup(o);
    console.block(describe(setup, profiled));
    RunResult r;
    const auto fmt = o.profile_format == output_format::json ? dflash::report_format::json : dflash::report_format::table;
    if constexpr (profiled) {
      Stats stats;
      if (!o.trace.empty()) {
        dflash::TraceProfiler<train_keys> trace;
        const dflash::Composite<Stats, dflash::TraceProfiler<train_keys>> both{stats, trace};
        r = run_training(setup, both, stats, console, device.get());
        trace.write_file(o.trace);
        console.block("trace: wrote " + o.trace + " (open in ui.perfetto.dev or chrome://tracing)");
      } else {
        r = run_training(setup, stats, stats, console, device.get());
      }
      dflash::report_options final_opt = table_options(o);
      final_opt.format = fmt;
      console.block("final profile (whole run):\n" + stats.summary(final_opt));
      console.block(r.advice);
      if (o.validate && r.advice_data) {  // the predictions, run for real
        console.progress("validate: running the predicted configurations...");
        Console quiet(stdout, false, true);
        std::map<std::string, std::unique_ptr<Setup>> setups;  // made in the unmeasured warm-up
        const auto run_one = [&](const Options& v) {
          char key[128];  // what the validated changes vary
          std::snprintf(key, sizeof key, "%d %d %d %d %g", v.target_workers, v.batch_queue_depth, v.post_link_depth,
                        v.hs_queue_depth, v.slow_drafter);
          auto& su = setups[key];
          if (!su) su = std::make_unique<Setup>(v);
          dflash::NullProfiler none;
          return run_training(*su, none, none, quiet, device.get()).log.tokens;
        };
        Options base = o;
        base.quiet = true;
        base.profile_interval = 0;
        base.progress_interval = 0;
        console.block(validate_predictions(r.advice_data->advice, r.advice_data->options, base,
                                           static_cast<std::size_t>(o.validate_rounds), run_one));
      }
    } else {
      dflash::NullProfiler none;
      r = run_training(setup, none, none, console, device.get());
    }
    if (!r.link_counts.empty()) console.block(r.link_counts);
    if (!r.staging.empty()) console.block(r.staging);
    if (!r.graphs.empty()) console.block(r.graphs);
    print_result(console, r);
    if (!o.results.empty()) write_results(o.results, r);
  } catch (const std::exception& e) {
    console.block(std::string(self) + ": error: " + e.what());
    return exit_failure;
  }
  return signals.exit_code(0);  // [signals] 128 + signal when one stopped the run
}

}  // namespace dflash_example

#if DFLASH_EXAMPLE_MPI
#include "mpi_train.hpp"
#endif
