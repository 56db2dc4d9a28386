#pragma once
// The CUDA result checks dflash uses itself, for a program's own CUDA code
// (host code; only the runtime API, so g++/clang TUs that link CUDA::cudart
// may use them too):
//
//   dflash::cuda_check(e, "my_op: cudaMalloc")  throws std::runtime_error unless e == cudaSuccess
//   dflash::cuda_check_launch("my_op: launch")  after a <<<...>>> launch (cudaGetLastError)
//   dflash::cuda_ready(cudaEventQuery(ev), "..") a query's answer: true done, false busy, else throws
//   dflash::no_cuda_device_reason(e)            why cudaGetDeviceCount's error leaves no device
//
// Their rules (a busy query is an answer, never an error; only what was
// reported is cleared) are in dflash/detail/cuda_check.hpp.

#include <cuda_runtime_api.h>  // (the checks take the runtime's cudaError_t: a TU that includes this links CUDA::cudart)

#include "dflash/detail/cuda_check.hpp"

namespace dflash {
using detail::cuda_check;
using detail::cuda_check_launch;
using detail::cuda_ready;
using detail::no_cuda_device_reason;
}  // namespace dflash
