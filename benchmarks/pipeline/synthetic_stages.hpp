#pragma once
// The synthetic pipeline the pipeline benchmarks share (pipeline_vs_tbb,
// flow_overhead): source -> parallel workers x W us busy work -> serial
// in-order S us -> sink, as dflash stages and the two pipelines over them,
// with the CPU-time helpers.

#include <dflash/pipeline.hpp>

#include <sys/resource.h>

#include <chrono>
#include <optional>
#include <thread>

namespace bench_pipeline {

using clk = std::chrono::steady_clock;

inline void busy(std::chrono::microseconds d) {  // CPU work, not a sleep
  if (d.count() == 0) return;
  const auto end = clk::now() + d;
  while (clk::now() < end) {
  }
}

inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct costs {
  std::chrono::microseconds work, serial;
  int items;
};

struct source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  int items = 0;
  int next = 0;
  std::chrono::milliseconds idle_first{0};  // sleeps this long before its first item: the rest of the pipeline waits idle
  std::optional<int> operator()() {
    if (next == 0 && idle_first.count() > 0) std::this_thread::sleep_for(idle_first);
    return next < items ? std::optional(next++) : std::nullopt;
  }
};
struct work {
  static constexpr dflash::fixed_string name{"work"};
  using input_type = int;
  using output_type = int;
  costs c;
  int operator()(int&& x) const {
    busy(c.work);
    return x;
  }
};
struct serial {
  static constexpr dflash::fixed_string name{"serial"};
  using input_type = int;
  using output_type = int;
  costs c;
  int operator()(int&& x) const {
    busy(c.serial);
    return x;
  }
};
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  long long* sum;
  void operator()(int&& x) { *sum += x; }
};

// The shared shape: 2 parallel workers and an in-order stage, joined by queue
// links (a thread per worker) or by direct links (the segment runs on the two
// workers' threads, oneTBB's model). Depth 8 unless a shape says otherwise.
template <class P>
using queued = dflash::Pipeline<P, source, dflash::queue_link<"a", 8>, dflash::workers<work, 2>,
                                dflash::queue_link<"b", 8>, dflash::in_order<serial>, dflash::queue_link<"c", 8>, sink>;
template <class P>
using direct = dflash::Pipeline<P, source, dflash::direct_link<"a", 8>, dflash::workers<work, 2>,
                                dflash::direct_link<"b", 8>, dflash::in_order<serial>, dflash::direct_link<"c", 8>, sink>;

}  // namespace bench_pipeline
