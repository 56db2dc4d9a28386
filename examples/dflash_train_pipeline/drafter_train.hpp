#pragma once
// drafter_train: the pipeline's sink, one clipped-Adam drafter step per HS-queue entry.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include <dflash/dflash.hpp>

#include "console.hpp"
#include "model.hpp"
#include "payloads.hpp"

namespace dflash_example {

/// CPU time of the calling thread (not wall time: a spin measured in wall time
/// would cost less CPU whenever the thread is descheduled).
inline double thread_cpu_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

/// The drafter train loop: one clipped-Adam step per HS entry.
template <dflash::ProfilerPolicy P>
struct drafter_train {
  static constexpr dflash::fixed_string name{"drafter"};
  using input_type = std::unique_ptr<HsItem>;
  using output_type = void;
  using keys = dflash::key_set<"drafter_step">;
  using clock = std::chrono::steady_clock;
  // The train loop keeps its thread: its model state and, with a GPU, its
  // context stay on one thread, and producers never run a step themselves.
  static constexpr bool own_threads_only = true;

  drafter_train(const P& p, Drafter* d, TrainLog* l, Console* c, std::int64_t steps, double interval) noexcept
      : prof(p), drafter(d), log(l), console(c), total_steps(steps), progress_interval(interval) {}

  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;  // keys checked in every build
  Drafter* drafter;
  TrainLog* log;
  Console* console;
  std::int64_t total_steps;  ///< 0: not known ahead (--hs-link rows: steps are the link's batches)
  double progress_interval;
  clock::time_point start = clock::now();
  clock::time_point last_print = start;
  std::int64_t seen = 0;
  double slowdown = 1;  ///< --slow-drafter

  void operator()(std::unique_ptr<HsItem>&& item) {
    if (item->finish_on_host) {  // --device cuda: the postprocess's CPU part, now that its copy is done
      const auto finish_item = std::exchange(item->finish_on_host, nullptr);
      try {
        finish_item(*item);
      } catch (...) {
        item->error = std::current_exception();
      }
    }
    const HsItem& it = *item;
    if (it.error) std::rethrow_exception(it.error);  // never train on an item the postprocess got wrong
    ++seen;
    log->digests.emplace_back(it.step, it.digest());
    log->checks.push_back(step_check_of(it));
    if (it.dropped) {
      ++log->dropped;
    } else {
      const DrafterBatch b{it.hidden, it.tokens, it.loss_mask, it.doc_ids, it.anchors, it.keep, &it.attention};
      StepStats s;
      {
        auto t = prof->scope("drafter_step"_key);
        const double cpu0 = slowdown > 1 ? thread_cpu_ns() : 0;
        s = drafter->train_step(b);
        if (slowdown > 1) {  // --slow-drafter: (F - 1) x the step's own CPU time, spent on the CPU
          const double until = thread_cpu_ns() + (thread_cpu_ns() - cpu0) * (slowdown - 1);
          while (thread_cpu_ns() < until) {
          }
        }
      }
      log->losses.push_back(s.loss);
      log->last_accuracy = s.accuracy;
      log->tokens += it.real_tokens();
    }
    const auto now = clock::now();
    const bool last = total_steps > 0 && seen == total_steps;
    if (last || (progress_interval > 0 && now - last_print >= std::chrono::duration<double>(progress_interval))) {
      last_print = now;
      console->progress(progress_line(now));
    }
  }

  [[nodiscard]] std::string progress_line(clock::time_point now) const {
    const double secs = std::chrono::duration<double>(now - start).count();
    char buf[160];
    char of[32] = "";  // "/total" when the number of steps is known ahead
    if (total_steps > 0) std::snprintf(of, sizeof of, "/%lld", static_cast<long long>(total_steps));
    std::snprintf(buf, sizeof buf, "step %6lld%s  %9.0f tok/s  loss %.4f  acc %.3f", static_cast<long long>(seen), of,
                  secs > 0 ? static_cast<double>(log->tokens) / secs : 0.0,
                  log->losses.empty() ? 0.0 : log->losses.back(), log->last_accuracy);
    return buf;
  }
};

}  // namespace dflash_example
