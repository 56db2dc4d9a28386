// Must NOT compile: a shape filled by a link name the pipeline does not have
// (a typo, or the link of another pipeline type). ctest expects dflash's message
// as the first error. With -DDFLASH_CONTROL the name is right and the file compiles.
#include <dflash/pipeline.hpp>

#include <optional>

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};
struct drop {
  static constexpr dflash::fixed_string name{"drop"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};

using train = dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"hs_queue", 60>, drop>;
static_assert(train::stage_index<"numbers"> == 0 && train::stage_index<"drop"> == 1 && train::link_index<"hs_queue"> == 0);

int main() {
  auto shape = train::default_shape();
#ifdef DFLASH_CONTROL
  shape.depths[train::link_index<"hs_queue">] = 30;
#else
  shape.depths[train::link_index<"hs_qeue">] = 30;
#endif
  train p(shape);
  p.run_to_completion();
}
