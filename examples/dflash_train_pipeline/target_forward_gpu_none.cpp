// target_forward_gpu for builds without CUDA: --device cuda never gets this
// far (device_postprocessor::probe() already says why and the example exits
// with code 3); constructing it anyway throws the same reason.
#include "target_forward_gpu.hpp"

#include <stdexcept>

namespace dflash_example {

struct target_forward_gpu::impl {};

std::string target_forward_gpu::probe() {
  return "this build has no CUDA support (configure with -DDFLASH_ENABLE_CUDA=ON on a machine with nvcc)";
}

target_forward_gpu::target_forward_gpu(const TargetModel&, std::int32_t, std::size_t, target_forward_gpu_options) {
  throw std::runtime_error("target_forward_gpu: " + probe());
}
target_forward_gpu::~target_forward_gpu() = default;

std::int32_t target_forward_gpu::max_tokens() const noexcept { return 0; }
std::size_t target_forward_gpu::workers() const noexcept { return 0; }

void target_forward_gpu::enqueue(std::span<const std::int32_t>, std::span<const std::int32_t>, std::int32_t, float*,
                                 std::size_t, void*, std::size_t) {
  throw std::runtime_error("target_forward_gpu: " + probe());
}
void target_forward_gpu::enqueue_rows(std::span<const std::int32_t>, std::span<const std::int32_t>,
                                      std::span<const std::uint8_t>, std::int32_t, std::int64_t,
                                      const dflash::row_pusher<hs_token, float>&, void*, std::size_t) {
  throw std::runtime_error("target_forward_gpu: " + probe());
}

void target_forward_gpu::prepare_graphed(std::span<const std::int32_t>, std::span<const std::int32_t>, std::int32_t,
                                         std::size_t, void*, std::size_t) {
  throw std::runtime_error("target_forward_gpu: " + probe());
}
void target_forward_gpu::launch_graphed(float*, std::size_t, void*, std::size_t) {
  throw std::runtime_error("target_forward_gpu: " + probe());
}
void target_forward_gpu::after_graphed(void*, std::size_t) { throw std::runtime_error("target_forward_gpu: " + probe()); }

}  // namespace dflash_example
