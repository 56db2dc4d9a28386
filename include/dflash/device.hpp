#pragma once
// Device links: the DeviceBackend concept, the asynchronous host twin, device
// buffers and the stream-ordered device_channel (what a dflash::device_link in
// a Pipeline is made of). The CUDA backend is dflash/device/cuda_backend.hpp
// (host code over the CUDA runtime API: include it where cuda_runtime.h is on
// the include path and link CUDA::cudart).
#include "dflash/device/backend.hpp"
#include "dflash/device/device_channel.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/device/host_stream_backend.hpp"
#include "dflash/device/pinned_pool.hpp"
