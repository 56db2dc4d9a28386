#pragma once
// DLPack export: hands dflash memory to another framework (PyTorch, NumPy, CuPy, JAX) without a
// copy. A tensor is a DLManagedTensorVersioned (DLPack >= 1.0), or the unversioned
// DLManagedTensor for consumers that ask for no version (NumPy before 2.1). The tensor owns
// what keeps its memory alive — an item moved into it, or a device_lease — and its deleter
// lets go of that, on whichever thread the consumer drops the tensor.
//
//   // a host item, moved into the tensor
//   DLManagedTensorVersioned* t = dflash::dlpack::export_owned(std::move(entry), entry_data,
//                                     dflash::dlpack::row_major<float>({rows, hidden}));
//   // a device slot: the consumer's stream waits for it, the slot is reused after its work
//   auto* u = dflash::dlpack::export_lease(*lease, lease->item().hs.data(),
//                                          dflash::dlpack::row_major<dflash::bf16>({rows, hidden}), c);
//
// dlpack/dlpack.h is the user's to provide (any DLPack >= 1.0; scripts/fetch_dlpack.py takes
// it from a pinned wheel); this header is not part of <dflash/dflash.hpp> for that reason.

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/interop/device_lease.hpp"

static_assert(DLPACK_MAJOR_VERSION >= 1,
              "dflash/interop/dlpack.hpp needs DLPack >= 1.0 (DLManagedTensorVersioned); the dlpack/dlpack.h "
              "found is older (Debian's libdlpack-dev is 0.6): put a newer one first on the include path "
              "(scripts/fetch_dlpack.py)");

namespace dflash {
// Declared only: this header needs neither CCCL (bf16) nor the CUDA runtime (cuda_backend).
struct bf16;
class host_stream_backend;
class cuda_backend;
}  // namespace dflash

namespace dflash::dlpack {

/// The DLPack type code of an element type; other types are a compile error naming them.
template <class T>
[[nodiscard]] constexpr DLDataType dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return {kDLFloat, 32, 1};
  else if constexpr (std::is_same_v<U, double>) return {kDLFloat, 64, 1};
  else if constexpr (std::is_same_v<U, bf16>) return {kDLBfloat, 16, 1};
  else if constexpr (std::is_same_v<U, std::int32_t>) return {kDLInt, 32, 1};
  else if constexpr (std::is_same_v<U, std::int64_t>) return {kDLInt, 64, 1};
  else if constexpr (std::is_same_v<U, std::uint8_t>) return {kDLUInt, 8, 1};
  else
    static_assert(sizeof(U) == 0,
                  "dflash::dlpack::dtype_of<T>: no DLPack type for T (float, double, dflash::bf16, int32_t, "
                  "int64_t and uint8_t have one)");
}

/// A tensor's element type, extents and strides (in elements, as DLPack counts them).
struct tensor_layout {
  DLDataType dtype{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;

  /// Elements the layout spans from its first to its last element, plus one (0 if empty).
  [[nodiscard]] std::int64_t span() const noexcept {
    std::int64_t last = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 0) return 0;
      last += (shape[d] - 1) * strides[d];
    }
    return last + 1;
  }
};

/// A row-major (C-contiguous) layout of T with the given extents.
template <class T>
[[nodiscard]] tensor_layout row_major(std::initializer_list<std::int64_t> shape) {
  tensor_layout l{dtype_of<T>(), std::vector<std::int64_t>(shape), std::vector<std::int64_t>(shape.size())};
  std::int64_t stride = 1;
  for (std::size_t d = l.shape.size(); d-- > 0;) {
    if (l.shape[d] < 0)
      throw std::invalid_argument("dflash::dlpack::row_major: extent " + std::to_string(l.shape[d]) + " of dimension " +
                                  std::to_string(d) + " is negative");
    l.strides[d] = stride;
    stride *= l.shape[d];
  }
  return l;
}

/// Where the memory of backend B lives, for a consumer: the CUDA backend's is the device's;
/// the host twin's "device memory" is host memory, which a CPU consumer (NumPy) reads in place.
template <class B>
struct memory_of;
template <>
struct memory_of<host_stream_backend> {
  static DLDevice device(int) noexcept { return {kDLCPU, 0}; }
};
template <>
struct memory_of<cuda_backend> {
  static DLDevice device(int d) noexcept { return {kDLCUDA, d}; }
};

namespace detail {
inline void check_layout(const tensor_layout& l, const void* data, const char* who) {
  const std::string w = who;
  if (l.dtype.bits == 0 || l.dtype.lanes == 0) throw std::invalid_argument(w + ": the layout has no element type");
  if (l.strides.size() != l.shape.size())
    throw std::invalid_argument(w + ": " + std::to_string(l.shape.size()) + " extents but " +
                                std::to_string(l.strides.size()) + " strides");
  for (std::size_t d = 0; d < l.shape.size(); ++d)
    if (l.shape[d] < 0) throw std::invalid_argument(w + ": extent of dimension " + std::to_string(d) + " is negative");
  if (data == nullptr && l.span() > 0) throw std::invalid_argument(w + ": null data for a non-empty tensor");
}

// One allocation holds the framework-facing struct, the extents and the owner; the deleter
// frees it all. Managed is DLManagedTensorVersioned or DLManagedTensor.
template <class Managed, class Owner>
struct holder {
  Managed m{};
  std::vector<std::int64_t> shape, strides;
  Owner owner;
  holder(Owner&& o, tensor_layout&& l) : shape(std::move(l.shape)), strides(std::move(l.strides)), owner(std::move(o)) {}
};

template <class Managed, class Owner>
Managed* make(Owner&& owner, void* data, DLDevice device, tensor_layout layout, std::uint64_t flags) {
  const DLDataType dtype = layout.dtype;
  auto h = std::make_unique<holder<Managed, Owner>>(std::move(owner), std::move(layout));
  DLTensor& t = h->m.dl_tensor;
  t.data = data;
  t.device = device;
  t.ndim = static_cast<std::int32_t>(h->shape.size());
  t.dtype = dtype;
  t.shape = h->shape.empty() ? nullptr : h->shape.data();
  t.strides = h->strides.empty() ? nullptr : h->strides.data();
  t.byte_offset = 0;
  h->m.manager_ctx = h.get();
  h->m.deleter = [](Managed* self) {
    // A deleter must not throw into the consumer's framework: the owner's destructor doesn't.
    delete static_cast<holder<Managed, Owner>*>(self->manager_ctx);
  };
  if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>) {
    h->m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    h->m.flags = flags;
  }
  return &h.release()->m;
}

// What a tensor over a leased slot owns: the lease, and the consumer stream whose work on the
// slot must end before the slot is reused.
template <class Channel>
struct lease_use {
  std::optional<device_lease<Channel>> lease;
  typename device_lease<Channel>::native_stream consumer;
  lease_use(const device_lease<Channel>& l, typename device_lease<Channel>::native_stream c) : lease(l), consumer(c) {}
  lease_use(lease_use&& o) noexcept : lease(std::exchange(o.lease, std::nullopt)), consumer(o.consumer) {}
  lease_use& operator=(lease_use&&) = delete;
  ~lease_use() {
    if (!lease) return;
    try {
      lease->used_on(consumer);
    } catch (...) {
      // The consumer's stream failed: its error is its own to report. The slot still waits for
      // that stream's work, as the channel does before giving back a slot whose release failed.
      dflash::detail::quiet_synchronize(lease->stream().backend(), consumer);
    }
  }
};

// The exports below, once for both tensor kinds (Managed: DLManagedTensorVersioned or DLManagedTensor).
template <class Managed, class Owner>
Managed* export_owned_as(Owner&& owner, void* data, tensor_layout&& layout, DLDevice device, std::uint64_t flags,
                         const char* who) {
  static_assert(std::is_nothrow_destructible_v<std::remove_cvref_t<Owner>>,
                "dflash::dlpack::export_owned: the owner's destructor runs in the consumer's deleter and must not "
                "throw");
  check_layout(layout, data, who);
  return make<Managed>(std::move(owner), data, device, std::move(layout), flags);
}
template <class Managed, class Channel>
Managed* export_lease_as(const device_lease<Channel>& lease, void* data, tensor_layout&& layout,
                         typename device_lease<Channel>::native_stream consumer, std::uint64_t flags, const char* who) {
  check_layout(layout, data, who);  // before the join: a refused export leaves the streams as they were
  lease.ready_on(consumer);
  using B = typename device_lease<Channel>::backend_type;
  return make<Managed>(lease_use<Channel>(lease, consumer), data, memory_of<B>::device(lease.stream().device()),
                       std::move(layout), flags);
}
}  // namespace detail

/// A versioned tensor over `data`, which `owner` keeps alive: the owner moves into the tensor
/// and is destroyed by its deleter (its destructor must not throw). read_only sets
/// DLPACK_FLAG_BITMASK_READ_ONLY, which consumers honour by refusing to write.
template <class Owner>
[[nodiscard]] DLManagedTensorVersioned* export_owned(Owner owner, void* data, tensor_layout layout,
                                                     DLDevice device = {kDLCPU, 0}, bool read_only = false) {
  return detail::export_owned_as<DLManagedTensorVersioned>(std::move(owner), data, std::move(layout), device,
                                                           read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0,
                                                           "dflash::dlpack::export_owned");
}

/// The same as an unversioned DLManagedTensor, for consumers that ask for no DLPack version.
template <class Owner>
[[nodiscard]] DLManagedTensor* export_owned_unversioned(Owner owner, void* data, tensor_layout layout,
                                                        DLDevice device = {kDLCPU, 0}) {
  return detail::export_owned_as<DLManagedTensor>(std::move(owner), data, std::move(layout), device, 0,
                                                  "dflash::dlpack::export_owned_unversioned");
}

/// A versioned tensor over `data` (memory of the leased slot), for work on the consumer's stream
/// `consumer`: that stream waits for the producer's work first (no host wait), and the slot is
/// reused only after the work `consumer` has enqueued when the tensor is dropped. The tensor
/// holds a copy of the lease, so a lease may be exported several times; the slot goes back when
/// the lease and every tensor are gone.
template <class Channel>
[[nodiscard]] DLManagedTensorVersioned* export_lease(const device_lease<Channel>& lease, void* data, tensor_layout layout,
                                                     typename device_lease<Channel>::native_stream consumer,
                                                     bool read_only = false) {
  return detail::export_lease_as<DLManagedTensorVersioned>(lease, data, std::move(layout), consumer,
                                                           read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0,
                                                           "dflash::dlpack::export_lease");
}

/// The same as an unversioned DLManagedTensor.
template <class Channel>
[[nodiscard]] DLManagedTensor* export_lease_unversioned(const device_lease<Channel>& lease, void* data,
                                                        tensor_layout layout,
                                                        typename device_lease<Channel>::native_stream consumer) {
  return detail::export_lease_as<DLManagedTensor>(lease, data, std::move(layout), consumer, 0,
                                                  "dflash::dlpack::export_lease_unversioned");
}

}  // namespace dflash::dlpack
