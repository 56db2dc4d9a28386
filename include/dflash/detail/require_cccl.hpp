#pragma once
// Included first by every header that needs CCCL 3 (Thrust, CUB, libcu++): the
// ops, the ring control behind the device queue, and the umbrella header. A TU
// without CCCL on its include path stops here with the fix, rather than at a
// missing <cuda/...> file deep inside a dflash header.
#if !__has_include(<cuda/std/atomic>)
#error "dflash: this header needs CCCL 3 (Thrust, CUB, libcu++), which is not on the include path. Link dflash::ops (find_package(dflash COMPONENTS ops)) or add CCCL's include folder; the host core (<dflash/pipeline.hpp>, <dflash/profile.hpp>, dflash::dflash) needs no CCCL."
#endif
