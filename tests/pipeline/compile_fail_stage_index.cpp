// Must NOT compile: p.stage<3>() on a 3-stage pipeline (stages 0..2; links are
// not counted). ctest expects dflash's message as the first error, not the
// tuple's. With -DDFLASH_CONTROL the index is 2 and the file compiles.
#include <dflash/pipeline.hpp>

#include <optional>

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};
struct twice {
  static constexpr dflash::fixed_string name{"twice"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const { return 2 * x; }
};
struct drop {
  static constexpr dflash::fixed_string name{"drop"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};

int main() {
  dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"q", 4>, twice, dflash::queue_link<"r", 4>, drop> p;
#ifdef DFLASH_CONTROL
  drop& last = p.stage<2>();
#else
  auto& last = p.stage<3>();
#endif
  (void)last;
}
