#pragma once
// Included first by every header that needs CCCL 3 (Thrust, CUB, libcu++): the
// ops, the ring control behind the device queue, and the umbrella header. A TU
// without CCCL on its include path stops here with the fix, rather than at a
// missing <cuda/...> file deep inside a dflash header.
#if !__has_include(<cuda/std/atomic>)
#error "dflash: this header needs CCCL 3 (Thrust, CUB, libcu++), which is not on the include path. Link dflash::dflash: dflash::dflash brings it where CCCL was found when dflash was configured (the CUDA toolkit 13, or -DCCCL_DIR=<cccl>/lib/cmake/cccl), or add CCCL's include folder. The host core (<dflash/pipeline.hpp>, <dflash/profile.hpp>; target dflash::core) needs no CCCL."
#endif
