#pragma once
// A pipeline type several translation units use, declared once. Its stages are classes so the
// type can be named in a header; `sum_pipeline<P>` is what every TU refers to.
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <optional>

template <dflash::ProfilerPolicy P>
struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  int count = 0, next = 0;
  std::optional<int> operator()() { return next < count ? std::optional(next++) : std::nullopt; }
};

template <dflash::ProfilerPolicy P>
struct square {
  static constexpr dflash::fixed_string name{"square"};
  using input_type = int;
  using output_type = long long;
  long long operator()(int x) const { return 1LL * x * x; }
};

template <dflash::ProfilerPolicy P>
struct total {
  static constexpr dflash::fixed_string name{"total"};
  using input_type = long long;
  using output_type = void;
  long long* sum = nullptr;
  void operator()(long long v) const { *sum += v; }
};

template <class P>
using sum_pipeline = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in", 64>, dflash::workers<square<P>, 2>,
                                      dflash::queue_link<"out", 64>, dflash::in_order<total<P>>>;
using sum_profiler = dflash::AccumulatingProfiler<dflash::pipeline_keys<sum_pipeline<dflash::NullProfiler>>>;

long long sum_of_squares(int count);           // part_a.cpp
long long sum_of_squares_profiled(int count);  // part_b.cpp
long long sum_of_squares_stopped(int count);   // part_c.cpp
