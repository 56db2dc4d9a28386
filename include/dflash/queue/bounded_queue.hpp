#pragma once
// bounded_queue: a bounded MPMC blocking queue for host threads.
//
//   dflash::bounded_queue<Batch> q(60);               // NullProfiler: records nothing
//   if (!q.push(b)) { /* closed: b was not consumed */ }
//   while (auto b = q.pop()) use(*b);                 // empty optional = closed and drained
//
//   using P = dflash::AccumulatingProfiler<dflash::queue_keys<"hs_queue">>;
//   dflash::bounded_queue<Batch, P, "hs_queue"> hq(60, prof);  // records hs_queue.push_wait / .pop_wait
//
// close() wakes every waiter: pops drain what is left and then return empty,
// pushes fail (false / queue_status::closed) and leave their argument intact.
// With a stateful profiler every blocking push/pop records its wait time (zero
// when it did not block; the clock is read only when it does); with an
// empty policy nothing is recorded and no clock is read.

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

namespace detail {
/// steady_clock::now() + timeout, saturated at time_point::max() ("forever")
/// instead of overflowing; zero or negative = now. The comparison runs in
/// long double, so hours::max() or an infinite duration<double> cannot
/// overflow on the way. A NaN timeout is the caller's bug and throws.
template <class Rep, class Period>
std::chrono::steady_clock::time_point saturating_deadline(std::chrono::duration<Rep, Period> timeout,
                                                          std::string_view who) {
  using sc = std::chrono::steady_clock;
  using ld = std::chrono::duration<long double, std::nano>;
  const auto now = sc::now();
  const ld t = std::chrono::duration_cast<ld>(timeout);
  if (t.count() != t.count()) throw std::invalid_argument(std::string(who) + ": timeout is NaN");
  if (!(t.count() > 0)) return now;
  const ld room = std::chrono::duration_cast<ld>(sc::time_point::max() - now);
  if (t >= room) return sc::time_point::max();
  return now + std::chrono::ceil<sc::duration>(t);
}
}  // namespace detail

/// Outcome of a push that can fail for more than one reason.
enum class queue_status : std::uint8_t {
  ok,       ///< the item is in the queue
  full,     ///< try_push: no room right now
  timeout,  ///< push_for: no room before the deadline
  closed,   ///< the queue is closed; the item was not taken
};

template <class T, ProfilerPolicy P = NullProfiler, fixed_string Name = "queue">
class bounded_queue {
 public:
  using value_type = T;
  using profiler_type = P;
  using keys = queue_keys<Name>;  ///< what this queue records when P is stateful
  static constexpr auto name = Name;

  /// For empty (stateless) policies such as NullProfiler.
  explicit bounded_queue(std::size_t capacity)
    requires std::is_empty_v<P>
      : bounded_queue(capacity, P{}) {}

  /// `prof` must outlive the queue.
  bounded_queue(std::size_t capacity, const P& prof)
      : cap_(checked(capacity)), slots_(std::make_unique<std::optional<T>[]>(capacity)), prof_(prof) {}

  bounded_queue(const bounded_queue&) = delete;
  bounded_queue& operator=(const bounded_queue&) = delete;

  /// Blocks while full. false = closed (the argument is left untouched).
  template <class U>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] bool push(U&& v) {
    std::unique_lock lk(m_);
    if (size_ == cap_ && !closed_) wait_push([&] { not_full_.wait(lk, [&] { return ready_push(); }); });
    else record_zero(push_wait_key<Name>{});
    if (closed_) return false;
    put(lk, std::forward<U>(v));
    return true;
  }

  /// Never blocks: ok, full or closed.
  template <class U>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] queue_status try_push(U&& v) {
    std::unique_lock lk(m_);
    if (closed_) return queue_status::closed;
    if (size_ == cap_) return queue_status::full;
    put(lk, std::forward<U>(v));
    return queue_status::ok;
  }

  /// Blocks at most `timeout` while full: ok, timeout or closed.
  template <class U, class Rep, class Period>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] queue_status push_for(U&& v, std::chrono::duration<Rep, Period> timeout) {
    const auto deadline = detail::saturating_deadline(timeout, "dflash::bounded_queue::push_for");
    std::unique_lock lk(m_);
    if (size_ == cap_ && !closed_)
      wait_push([&] { (void)not_full_.wait_until(lk, deadline, [&] { return ready_push(); }); });
    else record_zero(push_wait_key<Name>{});
    if (closed_) return queue_status::closed;
    if (size_ == cap_) return queue_status::timeout;
    put(lk, std::forward<U>(v));
    return queue_status::ok;
  }

  /// Blocks while empty. Empty optional = closed and nothing left.
  [[nodiscard]] std::optional<T> pop() {
    std::unique_lock lk(m_);
    if (size_ == 0 && !closed_) wait_pop([&] { not_empty_.wait(lk, [&] { return ready_pop(); }); });
    else record_zero(pop_wait_key<Name>{});
    return take(lk);
  }

  /// Never blocks. Empty optional = nothing available right now (see closed()).
  [[nodiscard]] std::optional<T> try_pop() {
    std::unique_lock lk(m_);
    return take(lk);
  }

  /// Blocks at most `timeout`. Empty optional = timed out, or closed and drained.
  template <class Rep, class Period>
  [[nodiscard]] std::optional<T> pop_for(std::chrono::duration<Rep, Period> timeout) {
    const auto deadline = detail::saturating_deadline(timeout, "dflash::bounded_queue::pop_for");
    std::unique_lock lk(m_);
    if (size_ == 0 && !closed_)
      wait_pop([&] { (void)not_empty_.wait_until(lk, deadline, [&] { return ready_pop(); }); });
    else record_zero(pop_wait_key<Name>{});
    return take(lk);
  }

  /// Idempotent. Wakes every blocked push (fails) and pop (drains, then empty).
  void close() noexcept {
    {
      std::lock_guard lk(m_);
      closed_ = true;
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  [[nodiscard]] bool closed() const {
    std::lock_guard lk(m_);
    return closed_;
  }
  [[nodiscard]] std::size_t size() const {
    std::lock_guard lk(m_);
    return size_;
  }
  [[nodiscard]] bool empty() const { return size() == 0; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  /// Threads blocked in push()/push_for() now (for tests and diagnostics).
  [[nodiscard]] std::size_t blocked_pushers() const {
    std::lock_guard lk(m_);
    return blocked_push_;
  }
  /// Threads blocked in pop()/pop_for() now.
  [[nodiscard]] std::size_t blocked_poppers() const {
    std::lock_guard lk(m_);
    return blocked_pop_;
  }

 private:
  static std::size_t checked(std::size_t capacity) {
    if (capacity == 0)
      throw std::invalid_argument("dflash::bounded_queue '" + std::string(Name.view()) +
                                  "': capacity must be at least 1 (got 0)");
    return capacity;
  }

  bool ready_push() const noexcept { return closed_ || size_ < cap_; }
  bool ready_pop() const noexcept { return closed_ || size_ > 0; }

  template <class K>
  void record_zero(K k) const {
    if constexpr (P::enabled) prof_->add(k, typename P::duration{0});
  }

  // Runs `wait` (a condition-variable wait) counted as a blocked pusher and,
  // with a stateful profiler, timed under <Name>.push_wait.
  template <class Wait>
  void wait_push(Wait&& wait) {
    ++blocked_push_;
    if constexpr (P::enabled) {
      const auto tok = prof_->begin(push_wait_key<Name>{});
      wait();
      prof_->end(push_wait_key<Name>{}, tok);
    } else {
      wait();
    }
    --blocked_push_;
  }
  template <class Wait>
  void wait_pop(Wait&& wait) {
    ++blocked_pop_;
    if constexpr (P::enabled) {
      const auto tok = prof_->begin(pop_wait_key<Name>{});
      wait();
      prof_->end(pop_wait_key<Name>{}, tok);
    } else {
      wait();
    }
    --blocked_pop_;
  }

  // Called with the lock held and room available; releases the lock.
  template <class U>
  void put(std::unique_lock<std::mutex>& lk, U&& v) {
    std::size_t tail = head_ + size_;
    if (tail >= cap_) tail -= cap_;
    slots_[tail].emplace(std::forward<U>(v));
    ++size_;
    const bool wake = blocked_pop_ > 0;  // no syscall when nobody waits
    lk.unlock();
    if (wake) not_empty_.notify_one();
  }

  std::optional<T> take(std::unique_lock<std::mutex>& lk) {
    if (size_ == 0) return std::nullopt;
    std::optional<T> out(std::move(*slots_[head_]));
    slots_[head_].reset();
    if (++head_ == cap_) head_ = 0;
    --size_;
    const bool wake = blocked_push_ > 0;
    lk.unlock();
    if (wake) not_full_.notify_one();
    return out;
  }

  const std::size_t cap_;
  std::unique_ptr<std::optional<T>[]> slots_;
  [[no_unique_address]] profiler_ref<P> prof_;
  mutable std::mutex m_;
  std::condition_variable not_full_, not_empty_;
  std::size_t head_ = 0, size_ = 0;
  std::size_t blocked_push_ = 0, blocked_pop_ = 0;
  bool closed_ = false;
};

}  // namespace dflash
