#pragma once
// What a device stage works with:
//   device_stream<B>     the stage worker's stream (pipeline-owned); enqueue work on it
//   device_buffer<T, B>  device memory that grows stream-ordered (no host sync)
//   host_buffer<T, B>    host memory for asynchronous copies (pinned with CUDA)
//   device_item<B>       base of the types that cross a device_link (slot contents)
//
//   template <class B>
//   struct hs_slot : dflash::device_item<B> {          // one slot of a device link
//     std::int64_t step = 0;                           // host fields: written before publish
//     dflash::device_buffer<float, B> hidden;          // device fields: written in stream order
//   };
//
// A slot is reused: the pipeline makes the producer's stream wait until the
// previous consumer's work on it completed, so ensure()/writes never race it.

#include <concepts>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "dflash/device/backend.hpp"

namespace dflash {

namespace detail {
/// n elements of `elem` bytes, or std::length_error when the product does not
/// fit size_t (it would wrap to a small allocation that later writes overrun).
inline std::size_t checked_bytes(std::size_t n, std::size_t elem, const char* who) {
  if (elem != 0 && n > std::numeric_limits<std::size_t>::max() / elem)
    throw std::length_error(std::string(who) + ": " + std::to_string(n) + " elements of " + std::to_string(elem) +
                            " bytes overflow size_t");
  return n * elem;
}
}  // namespace detail

/// A backend, one of its streams and the device the stream belongs to: the
/// argument device stages receive.
template <DeviceBackend B>
class device_stream {
 public:
  using backend_type = B;
  using native_type = typename B::stream_type;

  device_stream(B& b, native_type s, int device = 0) noexcept : b_(&b), s_(s), device_(device) {}

  [[nodiscard]] B& backend() const noexcept { return *b_; }
  /// The device the stream (and memory allocated on it) belongs to.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// cudaStream_t for kernel launches (cuda_backend); the executor for the host twin.
  [[nodiscard]] native_type native() const noexcept { return s_; }

  /// Host-twin work (runs later on the stream's thread, in order).
  template <class F>
    requires requires(B& b, native_type s, F&& f) { b.enqueue(s, std::forward<F>(f)); }
  void enqueue(F&& f) const {
    b_->enqueue(s_, std::forward<F>(f));
  }
  /// Stream-ordered copy of `bytes` (any direction the backend supports).
  void copy(void* dst, const void* src, std::size_t bytes) const { b_->copy(dst, src, bytes, s_); }

 private:
  B* b_;
  native_type s_;
  int device_;
};

/// Device memory for n Ts. ensure(n, s) grows it in stream order: the old
/// block is freed after the work already on s, the new one is usable by work
/// enqueued on s after the call. Contents are not kept when it grows. It lives
/// on the device of the stream that last grew it; ensure() on another device's
/// stream moves it there (a slot filled by workers on several devices is
/// always on its current producer's device).
template <class T, DeviceBackend B>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "dflash::device_buffer<T, B>: T must be trivially copyable");

 public:
  device_buffer() = default;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept
      : b_(std::exchange(o.b_, nullptr)), p_(std::exchange(o.p_, nullptr)), size_(std::exchange(o.size_, 0)),
        cap_(std::exchange(o.cap_, 0)), dev_(o.dev_) {}
  /// Frees at once: the owner guarantees no work on it is in flight (device
  /// links synchronise before their slots are destroyed).
  ~device_buffer() {
    if (p_) b_->deallocate(p_, typename B::stream_type{});
  }

  /// Room for n elements (size() becomes n); returns data().
  /// std::length_error if n * sizeof(T) does not fit size_t.
  T* ensure(std::size_t n, const device_stream<B>& s) {
    if (n > cap_ || p_ == nullptr || dev_ != s.device()) {
      const std::size_t bytes = detail::checked_bytes(n == 0 ? 1 : n, sizeof(T), "dflash::device_buffer::ensure");
      if (p_) s.backend().deallocate(p_, s.native());
      p_ = nullptr;
      cap_ = 0;
      b_ = &s.backend();
      p_ = static_cast<T*>(b_->allocate(bytes, s.native()));
      cap_ = n == 0 ? 1 : n;
      dev_ = s.device();
    }
    size_ = n;
    return p_;
  }

  /// Makes this a copy of `src` (its size and contents), on s's device, in
  /// stream order on s; src may live on another device (a peer copy, which
  /// needs no peer access). For a DeviceItem's mirror_from.
  void copy_from(const device_buffer& src, const device_stream<B>& s) {
    T* d = ensure(src.size(), s);
    const std::size_t bytes = src.size() * sizeof(T);
    if (bytes == 0) return;
    if (src.dev_ == dev_) {
      s.copy(d, src.data(), bytes);
    } else if constexpr (MultiDeviceBackend<B>) {
      s.backend().copy_peer(d, dev_, src.data(), src.dev_, bytes, s.native());
    } else {
      throw std::logic_error("dflash::device_buffer::copy_from: a copy between devices needs a MultiDeviceBackend");
    }
  }

  [[nodiscard]] T* data() const noexcept { return p_; }
  /// The device the memory is on (meaningful once allocated).
  [[nodiscard]] int device() const noexcept { return dev_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }

 private:
  B* b_ = nullptr;
  T* p_ = nullptr;
  std::size_t size_ = 0, cap_ = 0;
  int dev_ = 0;
};

/// Host memory device work can copy from / into asynchronously (pinned with
/// cuda_backend). ensure() grows it on the host at once: call it only when no
/// work in flight uses the buffer.
template <class T, DeviceBackend B>
class host_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "dflash::host_buffer<T, B>: T must be trivially copyable");

 public:
  host_buffer() = default;
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;
  ~host_buffer() {
    if (p_) b_->deallocate_host(p_);
  }
  /// Room for n elements (size() becomes n); returns data().
  /// std::length_error if n * sizeof(T) does not fit size_t.
  T* ensure(std::size_t n, B& b) {
    if (n > cap_ || p_ == nullptr) {
      const std::size_t bytes = detail::checked_bytes(n == 0 ? 1 : n, sizeof(T), "dflash::host_buffer::ensure");
      if (p_) b_->deallocate_host(p_);
      p_ = nullptr;
      cap_ = 0;
      b_ = &b;
      p_ = static_cast<T*>(b.allocate_host(bytes));
      cap_ = n == 0 ? 1 : n;
    }
    size_ = n;
    return p_;
  }
  [[nodiscard]] T* data() const noexcept { return p_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  B* b_ = nullptr;
  T* p_ = nullptr;
  std::size_t size_ = 0, cap_ = 0;
};

/// Base of every type that crosses a device_link: names the backend whose
/// memory the item's buffers live in.
template <DeviceBackend B>
struct device_item {
  using backend_type = B;
};

/// A slot type for device links: derives from device_item<B>, default-constructible
/// (slots are made once, empty, and grow their buffers on first use).
template <class T>
concept DeviceItem = requires { typename T::backend_type; } && DeviceBackend<typename T::backend_type> &&
                     std::derived_from<T, device_item<typename T::backend_type>> && std::default_initializable<T>;

/// A device item a link can copy to another device when the consumer's device
/// cannot reach the producer's memory (no peer access): `dst.mirror_from(src, s)`
/// copies the host fields and, with device_buffer::copy_from, every buffer, in
/// stream order on s (the consumer's stream, on the consumer's device).
template <class T>
concept MirrorableItem = DeviceItem<T> && requires(T& dst, const T& src, const device_stream<typename T::backend_type>& s) {
  dst.mirror_from(src, s);
};

}  // namespace dflash
