// Must NOT compile with -DDFLASH_NO_NAME / -DDFLASH_NO_INPUT_TYPE /
// -DDFLASH_NO_OUTPUT_TYPE (a middle stage, run by 2 workers, missing that
// member): ctest expects the first error to name the missing member. With
// none of them the file compiles.
#include <dflash/pipeline.hpp>

#include <optional>

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};

struct twice {
#ifndef DFLASH_NO_NAME
  static constexpr dflash::fixed_string name{"twice"};
#endif
#ifndef DFLASH_NO_INPUT_TYPE
  using input_type = int;
#endif
#ifndef DFLASH_NO_OUTPUT_TYPE
  using output_type = int;
#endif
  int operator()(int&& x) const { return 2 * x; }
};

struct drop {
  static constexpr dflash::fixed_string name{"drop"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};

int main() {
  dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"q", 4>, dflash::workers<twice, 2>,
                   dflash::queue_link<"r", 4>, drop>
      p;
  p.run_to_completion();
}
