// Must NOT compile: a stage that declares its keys (profiler_ref<P, keys>) and
// records "froward" fails in the NullProfiler build, which takes any key, not
// only in the profiled one. ctest expects dflash's static_assert message; with
// -DDFLASH_CONTROL the key is spelt right and the file must compile.
#include <dflash/profile.hpp>

using namespace dflash::literals;

template <dflash::ProfilerPolicy P>
struct Forward {
  using keys = dflash::key_set<"forward", "pack">;
  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;

  void operator()() const {
#ifdef DFLASH_CONTROL
    auto t = prof->scope("forward"_key);
#else
    auto t = prof->scope("froward"_key);
#endif
  }
};

int main() { Forward<dflash::NullProfiler>{}(); }
