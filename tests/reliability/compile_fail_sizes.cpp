// Must NOT compile with -DDFLASH_ZERO_DEPTH (a queue of depth 0) or
// -DDFLASH_ZERO_WORKERS (a stage on 0 threads): ctest expects dflash's
// static_assert message. With neither macro the file must compile, so each
// failure is the bad size's, not something else in the file.
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

#ifdef DFLASH_ZERO_DEPTH
inline constexpr std::size_t depth = 0;
#else
inline constexpr std::size_t depth = 4;
#endif
#ifdef DFLASH_ZERO_WORKERS
inline constexpr std::size_t threads = 0;
#else
inline constexpr std::size_t threads = 2;
#endif

int main() {
  dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"q", depth>, dflash::workers<twice, threads>,
                   dflash::queue_link<"r", 4>, drop>
      p;
  p.run();
  p.join();
}
