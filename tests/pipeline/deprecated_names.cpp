// The old names (dflash/deprecated.hpp) still compile, each with a
// deprecation warning that names its replacement, and none compiles with
// DFLASH_NO_DEPRECATED (tests/pipeline/deprecated_names.cmake checks the
// compiler's output); with -DDFLASH_CONTROL the file uses only the new names
// and must compile without any warning.
#include <dflash/pipeline.hpp>

#include <optional>

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  int n = 0;
  std::optional<int> operator()() { return n < 10 ? std::optional<int>(n++) : std::nullopt; }
};
struct drop {
  static constexpr dflash::fixed_string name{"drop"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};

#ifdef DFLASH_CONTROL
template <class P>
using pipe_of = dflash::Pipeline<P, numbers, dflash::queue_link<"q", 4>, drop>;
using keys = dflash::pipeline_keys<pipe_of<dflash::NullProfiler>>;
int main() {
  pipe_of<dflash::NullProfiler> p;
  p.run_to_completion();
  static_assert(pipe_of<dflash::NullProfiler>::link_count == 1);
  using q = pipe_of<dflash::NullProfiler>::link_type<0>;
  return p.link<0>().closed() && sizeof(q) > 0 && keys::size == 4 ? 0 : 1;
}
#else
// Not an alias template: clang 14 reports no deprecated name inside one.
using old_pipe = dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_spec<"q", 4>, drop>;
template <class P>
using pipe_of = dflash::Pipeline<P, numbers, dflash::queue_link<"q", 4>, drop>;
using keys = dflash::pipeline_keys_t<pipe_of>;
auto build = [](const auto& prof) {
  return dflash::make_pipeline(prof, numbers{}, dflash::queue_link<"q", 4>{}, drop{});
};
using builder_keys = dflash::pipeline_keys_of<decltype(build)>;
constexpr auto old_kind = dflash::analysis::link_kind::queue;
int main() {
  static_assert(old_kind == dflash::analysis::model_kind::queue);
  old_pipe p;
  p.run_to_completion();
  static_assert(old_pipe::queue_count == 1);
  using q = old_pipe::queue_type<0>;
  return p.queue<0>().closed() && sizeof(q) > 0 && keys::size == 4 && builder_keys::size == 4 ? 0 : 1;
}
#endif
