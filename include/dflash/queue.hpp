#pragma once
// Host-side queues: bounded_queue (blocking MPMC) and the device queue's
// control logic with its host twin (ring_control, host_ring). The CUDA device
// queue itself is dflash/queue/device_queue.cuh (include from .cu files).
#include "dflash/queue/bounded_queue.hpp"
#include "dflash/queue/queue_keys.hpp"
#include "dflash/queue/ring_control.hpp"
