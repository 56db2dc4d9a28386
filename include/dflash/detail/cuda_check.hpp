#pragma once
// The one place dflash turns CUDA runtime results into exceptions (host code;
// only the runtime API, so g++/clang TUs that link CUDA::cudart use it too).
//
//   cuda_check(e, "dflash::x: cudaMalloc")   throws std::runtime_error unless e == cudaSuccess
//   cuda_check_launch("dflash::x: k launch") after a <<<...>>> launch (launch_error(): cudaGetLastError)
//   cuda_ready(cudaEventQuery(e), "...")     a query's answer: true done, false busy, else throws
//   forget(e)                                clears the thread's last error only if it is e
//   no_cuda_device_reason(e)                 cudaGetDeviceCount's error in a user's terms
//
// The rule for cudaErrorNotReady: it is an answer, never an error. A query
// (cudaEventQuery, cudaStreamQuery) that says "busy" may leave it as the
// thread's last error, where the next launch check (cudaGetLastError) would
// report a launch that did not fail. So every query goes through cuda_ready,
// which clears exactly that value, and a launch check ignores it too (a
// caller's query may have left it). Nothing else is ever cleared here: an
// error someone else left pending stays theirs to see.

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace dflash::detail {

/// "cudaErrorX: description".
[[nodiscard]] inline std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

/// Clears the thread's last error if (and only if) it is `e`: the error a
/// caller already handled is not reported a second time, and an unrelated one
/// left by someone else is not swallowed.
inline void forget(cudaError_t e) noexcept {
  if (e != cudaSuccess && cudaPeekAtLastError() == e) (void)cudaGetLastError();
}

/// A busy event or stream is not an error: clear that answer if the runtime kept it.
inline void forget_not_ready() noexcept { forget(cudaErrorNotReady); }

/// Throws std::runtime_error("<what>: cudaErrorX: description") unless e == cudaSuccess.
/// Before it throws it forgets e (the runtime also keeps a failed call's
/// result as the thread's last error): reported by this throw, not again by
/// the next launch check. A sticky error cannot be cleared; every call reports it.
inline void cuda_check(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  forget(e);
  throw std::runtime_error(std::string(what) + ": " + cuda_error_text(e));
}

/// After a kernel launch: the thread's last error, read and cleared (so one
/// failed launch is reported once), with a leftover cudaErrorNotReady read as
/// cudaSuccess (not a launch failure). Anything else pending (a launch of this
/// thread that failed earlier and nobody checked, or a sticky error) is returned.
[[nodiscard]] inline cudaError_t launch_error() noexcept {
  const cudaError_t e = cudaGetLastError();
  return e == cudaErrorNotReady ? cudaSuccess : e;
}

/// cuda_check(launch_error(), what).
inline void cuda_check_launch(std::string_view what) { cuda_check(launch_error(), what); }

/// The answer of cudaEventQuery / cudaStreamQuery: true when the work is done,
/// false while it is not (and no stale cudaErrorNotReady is left behind);
/// any other result throws (cuda_check).
[[nodiscard]] inline bool cuda_ready(cudaError_t r, std::string_view what) {
  if (r == cudaSuccess) return true;
  if (r == cudaErrorNotReady) {
    forget_not_ready();
    return false;
  }
  cuda_check(r, what);
  return true;  // not reached
}

/// Why cudaGetDeviceCount's error `e` leaves no usable device, in a user's
/// terms: without a driver (or with one older than the runtime) CUDA says
/// "driver version is insufficient", which reads as a version problem only.
[[nodiscard]] inline std::string no_cuda_device_reason(cudaError_t e) {
  if (e == cudaErrorNoDevice) return "no CUDA device found";
  if (e == cudaErrorInsufficientDriver)
    return std::string("no usable CUDA device (driver missing or too old: ") + cudaGetErrorString(e) + ")";
  return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
}

}  // namespace dflash::detail
