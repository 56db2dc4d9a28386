// Must NOT compile: "froward" is not in the key set. ctest compiles this file
// and expects dflash's static_assert message. With -DDFLASH_CONTROL the key is
// spelt right and the file must compile, proving the failure is the key's.
#include <dflash/profile.hpp>

using namespace dflash::literals;

int main() {
  dflash::AccumulatingProfiler<dflash::key_set<"forward", "pack">> prof;
#ifdef DFLASH_CONTROL
  auto t = prof.scope("forward"_key);
#else
  auto t = prof.scope("froward"_key);
#endif
}
