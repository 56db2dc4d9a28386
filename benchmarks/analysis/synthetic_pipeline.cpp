// synthetic_pipeline: four stages with known CPU costs, for validating the
// what-if model against real runs (scripts/whatif_validation.py).
//
//   source (0.05 ms) -q_in-> decode x W (1.6 ms) -q_mid-> transform (0.8 ms x slow) -q_out-> sink (0.4 ms)
//
// Each item's cost is the stage's cost times a uniform draw in [0.5, 1.5)
// (seeded per item), spent as CPU time of the calling thread (a spin on the
// thread's CPU clock, so a descheduled thread does not count it as done).
// Prints one JSON line: the configuration, the measured items/s and, from this
// run's profile, the advice with every --what-if prediction.
//
//   synthetic_pipeline --items 600 --decode-workers 1 --q-in 8 --q-mid 8 --q-out 8 --slow 1 \
//                      --what-if decode.workers=2 --what-if q_mid.depth=1

#include <dflash/analysis.hpp>
#include <dflash/dflash.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#if __has_include(<sys/resource.h>)
#include <sys/resource.h>
#endif

namespace {

double thread_cpu_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}
double process_cpu_ns() noexcept {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto ns = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_usec) * 1e3; };
  return ns(u.ru_utime) + ns(u.ru_stime);
}
/// Spends `ns` of this thread's CPU time.
void burn(double ns) {
  const double until = thread_cpu_ns() + ns;
  while (thread_cpu_ns() < until) {
  }
}
/// Cost x [0.5, 1.5), from the item and stage alone (same draws in every configuration).
double jittered(double cost_ns, std::uint64_t item, std::uint64_t stage) {
  std::uint64_t z = item * 0x9E3779B97F4A7C15ull + stage * 0xD1B54A32D192ED03ull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return cost_ns * (0.5 + static_cast<double>(z >> 11) * 0x1.0p-53);
}

struct Item {
  std::uint64_t id = 0;
};

struct Source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = Item;
  std::uint64_t n = 0, next = 0;
  std::optional<Item> operator()() {
    if (next >= n) return std::nullopt;
    burn(jittered(0.05e6, next, 0));
    return Item{next++};
  }
};
struct Decode {
  static constexpr dflash::fixed_string name{"decode"};
  using input_type = Item;
  using output_type = Item;
  Item operator()(Item&& x) const {
    burn(jittered(1.6e6, x.id, 1));
    return x;
  }
};
struct Transform {
  static constexpr dflash::fixed_string name{"transform"};
  using input_type = Item;
  using output_type = Item;
  double slow = 1;
  Item operator()(Item&& x) const {
    burn(jittered(0.8e6 * slow, x.id, 2));
    return x;
  }
};
struct Sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = Item;
  using output_type = void;
  void operator()(Item&& x) const { burn(jittered(0.4e6, x.id, 3)); }
};

template <class P>
using synthetic = dflash::Pipeline<P, Source, dflash::queue_link<"q_in", 8>, dflash::workers<Decode, 1>,
                                   dflash::queue_link<"q_mid", 8>, Transform, dflash::queue_link<"q_out", 8>, Sink>;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "synthetic_pipeline: %s\nusage: synthetic_pipeline [--items N] [--decode-workers W] [--q-in D] "
               "[--q-mid D] [--q-out D] [--slow F] [--cores C] [--what-if SPEC]...\n",
               why.c_str());
  std::exit(2);
}
double number(const char* flag, const char* v, double lo, double hi) {
  char* end = nullptr;
  const double x = v ? std::strtod(v, &end) : 0;
  if (!v || *end || !(x >= lo && x <= hi)) usage(std::string(flag) + " needs a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  using profiler = dflash::AccumulatingProfiler<dflash::pipeline_keys<synthetic<dflash::NullProfiler>>>;
  using pipe = synthetic<profiler>;
  auto shape = pipe::default_shape();
  std::uint64_t items = 600;
  double slow = 1, cores = 0;
  std::vector<std::string> what_if;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--items") items = static_cast<std::uint64_t>(number("--items", v, 1, 1e9));
    else if (a == "--decode-workers") shape.workers[1] = static_cast<std::size_t>(number("--decode-workers", v, 1, 256));
    else if (a == "--q-in") shape.depths[0] = static_cast<std::size_t>(number("--q-in", v, 1, 1e6));
    else if (a == "--q-mid") shape.depths[1] = static_cast<std::size_t>(number("--q-mid", v, 1, 1e6));
    else if (a == "--q-out") shape.depths[2] = static_cast<std::size_t>(number("--q-out", v, 1, 1e6));
    else if (a == "--slow") slow = number("--slow", v, 0.01, 100);
    else if (a == "--cores") cores = number("--cores", v, 0, 1024);
    else if (a == "--what-if" && v) what_if.emplace_back(v);
    else usage("unknown or incomplete argument '" + a + "'");
    ++i;
  }
  const auto layout = pipe::layout(shape);
  dflash::analysis::advice_options o;
  o.format = dflash::report_format::json;
  o.model.cores = cores;
  o.knobs = {{"decode.workers", "--decode-workers"}, {"q_in.depth", "--q-in"}, {"q_mid.depth", "--q-mid"},
             {"q_out.depth", "--q-out"}};
  try {
    for (const auto& w : what_if) o.requested.push_back(dflash::analysis::parse_scenario(w, layout));
  } catch (const std::invalid_argument& e) {
    usage(e.what());
  }

  profiler prof;
  Transform t;
  t.slow = slow;
  pipe p(prof, shape, Source{items, 0}, Decode{}, t, Sink{});
  prof.clear();
  const double cpu0 = process_cpu_ns();
  const auto t0 = std::chrono::steady_clock::now();
  p.run_to_completion();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto snap = prof.snapshot();
  o.model.process_cpu_ns = process_cpu_ns() - cpu0;
  const auto adv = dflash::analysis::advise(snap, layout, o);
  std::printf("{\"config\":{\"decode_workers\":%zu,\"q_in\":%zu,\"q_mid\":%zu,\"q_out\":%zu,\"slow\":%g,\"items\":%llu},"
              "\"items_per_s\":%.3f,\"cpu_s\":%.3f,\"advice\":%s}\n",
              shape.workers[1], shape.depths[0], shape.depths[1], shape.depths[2], slow,
              static_cast<unsigned long long>(items), static_cast<double>(items) / secs, o.model.process_cpu_ns / 1e9,
              dflash::analysis::format_advice(adv, o).c_str());
  if (std::getenv("SYNTHETIC_TABLE")) {
    o.format = dflash::report_format::table;
    std::fputs(dflash::analysis::format_advice(adv, o).c_str(), stderr);
  }
}
