#pragma once
// Compile-environment facts shared by every dflash header.

#if defined(__CUDACC__)
#define DFLASH_HOST_DEVICE __host__ __device__
#define DFLASH_DEVICE __device__
#define DFLASH_CUDA_COMPILER 1
#else
#define DFLASH_HOST_DEVICE
#define DFLASH_DEVICE
#define DFLASH_CUDA_COMPILER 0
#endif

// True while compiling the device side of a .cu TU.
#if defined(__CUDA_ARCH__)
#define DFLASH_DEVICE_PASS 1
#else
#define DFLASH_DEVICE_PASS 0
#endif

namespace dflash {

/// True in TUs compiled by nvcc (CUDA kernels and CUB device algorithms usable).
inline constexpr bool cuda_compiler = DFLASH_CUDA_COMPILER != 0;

}  // namespace dflash
