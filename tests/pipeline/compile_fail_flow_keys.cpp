// Must NOT compile: a profiler that follows items (AccumulatingProfiler) with
// a hand-made key set that lacks the flow rows; ctest expects dflash's message
// first. With -DDFLASH_CONTROL the same key set under a policy that opts out
// (flow = false) compiles.
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

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
  void operator()(int&&) const {}
};

using keys = dflash::key_set<"numbers.wait", "numbers.work", "q.push_wait", "q.pop_wait", "drop.wait", "drop.work">;
#ifdef DFLASH_CONTROL
struct prof_t : dflash::AccumulatingProfiler<keys> {
  static constexpr bool flow = false;
};
#else
using prof_t = dflash::AccumulatingProfiler<keys>;
#endif

int main() {
  prof_t prof;
  dflash::Pipeline<prof_t, numbers, dflash::queue_link<"q", 2>, drop> p(prof);
  p.run_to_completion();
}
