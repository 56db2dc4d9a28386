#pragma once
// The kernels of examples/gpu_pipeline.cpp (defined in gpu_pipeline_kernels.cu,
// compiled by nvcc). The pipeline itself is host C++: only kernels need nvcc.
#include <cuda_runtime_api.h>

/// x[0, n) = v, on stream s.
void launch_fill(float* x, int n, float v, cudaStream_t s);
/// *out = x[0] + ... + x[n - 1] (out: device memory), on stream s.
void launch_sum(const float* x, int n, float* out, cudaStream_t s);
