// Must NOT compile: the source emits int, the sink takes std::string. ctest
// compiles this file and expects dflash's static_assert message. With
// -DDFLASH_CONTROL the sink takes int and the file must compile, proving the
// failure is the type mismatch's.
#include <dflash/pipeline.hpp>

#include <optional>
#include <string>

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};

struct printer {
  static constexpr dflash::fixed_string name{"printer"};
#ifdef DFLASH_CONTROL
  using input_type = int;
#else
  using input_type = std::string;
#endif
  using output_type = void;
  void operator()(input_type&&) {}
};

int main() {
  dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"q", 4>, printer> p;
  p.run();
  p.join();
}
