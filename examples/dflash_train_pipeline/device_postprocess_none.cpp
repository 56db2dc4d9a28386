// device_postprocessor for builds without CUDA: --device cuda reports this
// and the example exits with code 3.
#include "device_postprocess.hpp"

#include <stdexcept>

namespace dflash_example {

struct device_postprocessor::impl {};

std::string device_postprocessor::probe() {
  return "this build has no CUDA support (configure with -DDFLASH_ENABLE_CUDA=ON on a machine with nvcc)";
}

device_postprocessor::device_postprocessor() { throw std::runtime_error(probe()); }
device_postprocessor::~device_postprocessor() = default;

void device_postprocessor::rethrow_pending() {}

void device_postprocessor::enqueue(const device_job&, const device_output&, std::function<void(std::exception_ptr)>,
                                   void*) {
  throw std::runtime_error(probe());
}

}  // namespace dflash_example
