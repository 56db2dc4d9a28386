// Compiled without CCCL on the include path (ctest without_cccl.*): a header
// that needs CCCL must stop with dflash's message that names the fix; the
// host core (the control) must compile.
#ifdef DFLASH_CONTROL
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>
#else
#include <dflash/dflash.hpp>
#endif

int main() {}
