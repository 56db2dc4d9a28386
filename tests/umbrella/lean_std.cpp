// The host core (<dflash/pipeline.hpp>, <dflash/profile.hpp>) includes the
// parts of the standard library it uses, not the heavy headers around them:
// in C++20, libstdc++'s <chrono> brings the calendar, time zones and
// <sstream>, and <functional> the searchers with <unordered_map> and the
// algorithms, in every TU that includes a dflash header
// (detail/std_chrono.hpp, detail/std_function.hpp; docs/bench/compile_time.md).
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#if defined(__GLIBCXX__)
#if defined(_GLIBCXX_CHRONO)
#error "dflash host core: <chrono> itself was included; include dflash/detail/std_chrono.hpp instead"
#endif
#if defined(_GLIBCXX_SSTREAM)
#error "dflash host core: <sstream> was included (format with detail/format.hpp)"
#endif
#if defined(_GLIBCXX_FUNCTIONAL)
#error "dflash host core: <functional> itself was included; include dflash/detail/std_function.hpp instead"
#endif
#endif

int main() {
  // What the lean headers must still provide: clocks, durations, their literals, std::function.
  using namespace std::chrono_literals;
  const std::chrono::steady_clock::duration d = 2ms;
  const std::function<int()> f = [&] { return static_cast<int>(d.count() > 0); };
  return f() == 1 ? 0 : 1;
}
