#pragma once
// Batched scalar read-back: many per-step scalars (loss, accuracy, token
// counts) come back to the host with ONE gather, ONE async copy into pinned
// memory and ONE event per step, instead of one synchronising read per scalar
// (PyTorch's repeated `.item()`).
//
//   batched_readback<Backend> rb(n_slots);
//   kernel<<<..., stream>>>(rb.slot<float>(0));   // producers write slots directly, or
//   rb.stage(1, d_count);                         // name a scalar to gather at submit
//   auto h = rb.submit(stream);                   // enqueue; no host sync
//   ... later: if (h.ready()) / h.wait(); float loss = h.get<float>(0);
//
// Slots are 8 bytes; a slot holds one trivially copyable scalar of <= 8 bytes.
// `depth` host buffers rotate, so up to `depth` submissions can be in flight;
// submitting beyond that first waits for the oldest. A handle whose buffer was
// reused by a later submission is stale: get() on it throws std::logic_error.
// Backends: host_readback_backend here (host memory, copies at once, handles
// are immediately ready) and gpu::cuda_readback_backend in batched_readback.cuh.
// One batched_readback is used by one thread and one stream at a time.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/ops/keys.hpp"
#include "dflash/ops/validate.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::ops {

/// One staged scalar: `bytes` bytes at `src` go to slot `slot` at submit time.
struct readback_source {
  const void* src;
  std::uint32_t slot;
  std::uint32_t bytes;
};

template <class T>
concept ReadbackScalar = std::is_trivially_copyable_v<T> && sizeof(T) <= 8;

/// What batched_readback needs from a memory/stream backend.
template <class B>
concept ReadbackBackend =
    std::default_initializable<typename B::stream_type> &&
    requires(B& b, typename B::stream_type s, typename B::event_type e, std::byte* p, const std::byte* cp,
             const readback_source* src, std::size_t n) {
      { b.allocate_device(n) } -> std::same_as<std::byte*>;
      b.free_device(p);
      { b.allocate_host(n) } -> std::same_as<std::byte*>;
      b.free_host(p);
      { b.create_event() } -> std::same_as<typename B::event_type>;
      b.destroy_event(e);
      b.gather(p, src, n, s);        // staging[src[i].slot] <- *src[i].src, stream-ordered
      b.copy_to_host(p, cp, n, s);   // async device -> host copy on s
      b.record(e, s);
      { b.query(e) } -> std::same_as<bool>;
      b.synchronize(e);
    };

/// Host twin: "device" memory is host memory, copies happen at once.
struct host_readback_backend {
  struct stream_type {};
  struct event_type {};

  std::byte* allocate_device(std::size_t n) { return new std::byte[n]{}; }
  void free_device(std::byte* p) noexcept { delete[] p; }
  std::byte* allocate_host(std::size_t n) { return new std::byte[n]{}; }
  void free_host(std::byte* p) noexcept { delete[] p; }
  event_type create_event() noexcept { return {}; }
  void destroy_event(event_type) noexcept {}
  void gather(std::byte* staging, const readback_source* src, std::size_t n, stream_type) noexcept {
    for (std::size_t i = 0; i < n; ++i) std::memcpy(staging + src[i].slot * 8u, src[i].src, src[i].bytes);
  }
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t n, stream_type) noexcept {
    std::memcpy(dst, src, n);
  }
  void record(event_type, stream_type) noexcept {}
  bool query(event_type) noexcept { return true; }
  void synchronize(event_type) noexcept {}
};
static_assert(ReadbackBackend<host_readback_backend>);

template <ReadbackBackend Backend>
class batched_readback;

/// Future-like result of one submit().
template <ReadbackBackend Backend>
class readback_handle {
 public:
  readback_handle() = default;

  /// True once the copy has landed (never blocks).
  [[nodiscard]] bool ready() const { return owner().entry_ready(entry_, generation_); }
  /// Blocks until the copy has landed.
  void wait() const { owner().entry_wait(entry_, generation_); }
  /// Value of slot i (waits first).
  template <ReadbackScalar T>
  [[nodiscard]] T get(std::size_t i) const {
    wait();
    return owner().template entry_get<T>(entry_, generation_, i);
  }
  /// Every slot read as T (waits first).
  template <ReadbackScalar T>
  [[nodiscard]] std::vector<T> values() const {
    wait();
    std::vector<T> v(owner().size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = owner().template entry_get<T>(entry_, generation_, i);
    return v;
  }
  [[nodiscard]] bool valid() const noexcept { return rb_ != nullptr; }

 private:
  friend class batched_readback<Backend>;
  readback_handle(batched_readback<Backend>* rb, std::size_t entry, std::uint64_t gen) noexcept
      : rb_(rb), entry_(entry), generation_(gen) {}
  batched_readback<Backend>& owner() const {
    if (rb_ == nullptr) throw std::logic_error("dflash::ops::readback_handle: empty handle");
    return *rb_;
  }

  batched_readback<Backend>* rb_ = nullptr;
  std::size_t entry_ = 0;
  std::uint64_t generation_ = 0;
};

template <ReadbackBackend Backend>
class batched_readback {
 public:
  using stream_type = typename Backend::stream_type;
  using handle = readback_handle<Backend>;
  static constexpr std::size_t slot_bytes = 8;

  explicit batched_readback(std::size_t slots, std::size_t depth = 2, Backend backend = {})
      : backend_(std::move(backend)), slots_(slots) {
    constexpr std::string_view op = "batched_readback";
    detail::require(slots > 0, op, "needs at least one slot (got 0)");
    detail::require(slots <= (std::size_t{1} << 24), op, "slots = " + std::to_string(slots) + " is too many");
    detail::require(depth > 0, op, "depth must be positive (got 0)");
    entries_.resize(depth);  // before any allocation: if it throws, nothing leaks
    staging_ = backend_.allocate_device(bytes());
    try {
      for (auto& e : entries_) {
        e.host = backend_.allocate_host(bytes());
        e.event = backend_.create_event();
        e.has_event = true;
      }
    } catch (...) {
      release();
      throw;
    }
  }
  batched_readback(const batched_readback&) = delete;
  batched_readback& operator=(const batched_readback&) = delete;
  ~batched_readback() { release(); }

  [[nodiscard]] std::size_t size() const noexcept { return slots_; }
  [[nodiscard]] std::size_t depth() const noexcept { return entries_.size(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return slots_ * slot_bytes; }
  [[nodiscard]] Backend& backend() noexcept { return backend_; }

  /// Where a producer writes slot i (device memory for the CUDA backend).
  template <ReadbackScalar T>
  [[nodiscard]] T* slot(std::size_t i) {
    check_slot(i);
    return reinterpret_cast<T*>(staging_ + i * slot_bytes);
  }

  /// Gather *src into slot i at every later submit (until clear_staged()).
  /// Staging slot i again replaces its source: a slot has one source, so a
  /// loop that stages each step does not grow the gather, and the device's
  /// gather (one thread per entry) never has two writers for one slot.
  template <ReadbackScalar T>
  void stage(std::size_t i, const T* src) {
    check_slot(i);
    detail::require(src != nullptr, "batched_readback::stage", "source pointer is null");
    const readback_source s{src, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(sizeof(T))};
    if (staged_at_.empty()) staged_at_.assign(slots_, 0);
    if (std::uint32_t& at = staged_at_[i]; at != 0) {
      staged_[at - 1] = s;
    } else {
      staged_.push_back(s);
      at = static_cast<std::uint32_t>(staged_.size());
    }
  }
  void clear_staged() noexcept {
    for (const auto& s : staged_) staged_at_[s.slot] = 0;
    staged_.clear();
  }
  [[nodiscard]] std::size_t staged() const noexcept { return staged_.size(); }

  /// Enqueue gather + copy + event on `stream`; returns at once (after waiting
  /// for the oldest in-flight submission if all `depth` buffers are busy).
  template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
  [[nodiscard]] handle submit(stream_type stream = {}, profiler_ref<P, K> prof = {}) {
    using namespace dflash::literals;
    auto timer = prof->scope("readback"_key);
    const std::size_t idx = next_++ % entries_.size();
    entry& e = entries_[idx];
    if (e.generation != 0) backend_.synchronize(e.event);  // buffer about to be reused
    if (!staged_.empty()) backend_.gather(staging_, staged_.data(), staged_.size(), stream);
    backend_.copy_to_host(e.host, staging_, bytes(), stream);
    backend_.record(e.event, stream);
    e.generation = ++generation_;
    return handle(this, idx, e.generation);
  }

 private:
  friend class readback_handle<Backend>;
  struct entry {
    std::byte* host = nullptr;
    typename Backend::event_type event{};
    bool has_event = false;
    std::uint64_t generation = 0;
  };

  void check_slot(std::size_t i) const {
    if (i >= slots_)
      detail::fail("batched_readback", "slot " + std::to_string(i) + " out of range (size " + std::to_string(slots_) + ")");
  }
  const entry& live(std::size_t idx, std::uint64_t gen) const {
    const entry& e = entries_[idx];
    if (e.generation != gen)
      throw std::logic_error("dflash::ops::readback_handle: stale handle (its buffer was reused by a later submit)");
    return e;
  }
  bool entry_ready(std::size_t idx, std::uint64_t gen) { return backend_.query(live(idx, gen).event); }
  void entry_wait(std::size_t idx, std::uint64_t gen) { backend_.synchronize(live(idx, gen).event); }
  template <class T>
  T entry_get(std::size_t idx, std::uint64_t gen, std::size_t i) const {
    check_slot(i);
    T v;
    std::memcpy(&v, live(idx, gen).host + i * slot_bytes, sizeof(T));
    return v;
  }
  void release() noexcept {
    for (auto& e : entries_) {
      if (e.has_event) {
        if (e.generation != 0) {
          try {
            backend_.synchronize(e.event);  // no copy may land in freed memory
          } catch (...) {                   // a failed device cannot be waited on any further
          }
        }
        backend_.destroy_event(e.event);
      }
      if (e.host) backend_.free_host(e.host);
      e = {};
    }
    if (staging_) backend_.free_device(staging_);
    staging_ = nullptr;
  }

  Backend backend_;
  std::size_t slots_;
  std::byte* staging_ = nullptr;
  std::vector<entry> entries_;
  std::vector<readback_source> staged_;
  std::vector<std::uint32_t> staged_at_;  // slot -> 1 + its index in staged_, 0: not staged
  std::size_t next_ = 0;
  std::uint64_t generation_ = 0;
};

/// The host twin's type.
using host_batched_readback = batched_readback<host_readback_backend>;

}  // namespace dflash::ops
