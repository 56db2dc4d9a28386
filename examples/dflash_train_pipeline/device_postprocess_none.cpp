// device_postprocessor for builds without CUDA: --device cuda reports this
// and the example exits with code 3.
#include "device_postprocess.hpp"

#include <stdexcept>
#include <utility>

namespace dflash_example {

struct device_postprocessor::impl {};

namespace {
const char* probe_text() {
  return "this build has no CUDA support (configure with -DDFLASH_ENABLE_CUDA=ON on a machine with nvcc)";
}
}  // namespace

std::string device_postprocessor::probe() { return probe_text(); }

device_postprocessor::device_postprocessor(std::size_t, std::int32_t) { throw std::runtime_error(probe()); }
std::optional<dflash::pinned_pool_stats> device_postprocessor::staging_stats() const { return std::nullopt; }
device_postprocessor::~device_postprocessor() = default;

struct device_result::state {};
device_result::device_result() noexcept = default;
device_result::device_result(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
device_result::device_result(device_result&&) noexcept = default;
device_result& device_result::operator=(device_result&&) noexcept = default;
device_result::~device_result() = default;
void device_result::unpack(const device_output&) const { throw std::logic_error(probe_text()); }

device_result device_postprocessor::enqueue(const device_job&, void*) { throw std::runtime_error(probe()); }
device_result device_postprocessor::enqueue_rows(const rows_job&, void*) { throw std::runtime_error(probe()); }

}  // namespace dflash_example
