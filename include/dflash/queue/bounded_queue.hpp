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
//
// How: a bounded MPMC ring of `capacity` slots (Vyukov's per-slot sequence
// scheme): a push or pop that does not wait is one CAS plus a release store, no
// lock and no fence; one that must wait spins, yields, then parks. Everything
// but moving a T in and out is detail::blocking_ring (blocking_ring.hpp, with
// the protocol and why), which is not a template: each queue type adds only
// its slot moves.

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "dflash/detail/capacity.hpp"
#include "dflash/detail/deadline.hpp"
#include "dflash/detail/std_chrono.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/blocking_ring.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

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
      : slots_(std::make_unique<slot[]>(checked(capacity))), prof_(prof),
        ring_(capacity, first_seq(capacity), sizeof(slot)) {}

  bounded_queue(const bounded_queue&) = delete;
  bounded_queue& operator=(const bounded_queue&) = delete;

  /// Blocks while full. false = closed (the argument is left untouched).
  template <class U>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] bool push(U&& v) {
    return push_until(std::forward<U>(v), nullptr) == queue_status::ok;
  }

  /// Never blocks: ok, full or closed. "full" means no slot is free at this
  /// instant, which includes a slot whose pop has claimed it but not yet
  /// finished moving the item out: try_push can report full while size() <
  /// capacity(). A caller that knows room exists (at most capacity items ever
  /// in flight) must use push(), which waits for that pop to finish.
  template <class U>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] queue_status try_push(U&& v) {
    return try_enqueue(std::forward<U>(v));
  }

  /// Blocks at most `timeout` while full: ok, timeout or closed.
  template <class U, class Rep, class Period>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] queue_status push_for(U&& v, std::chrono::duration<Rep, Period> timeout) {
    const auto deadline = detail::saturating_deadline(timeout, "dflash::bounded_queue::push_for");
    return push_until(std::forward<U>(v), &deadline);
  }

  /// Blocks while empty. Empty optional = closed and nothing left.
  [[nodiscard]] std::optional<T> pop() { return pop_until(nullptr); }

  /// Never blocks. Empty optional = nothing available right now (see closed()).
  [[nodiscard]] std::optional<T> try_pop() {
    std::optional<T> out;
    (void)try_dequeue(out);
    return out;
  }

  /// Blocks at most `timeout`. Empty optional = timed out, or closed and drained.
  template <class Rep, class Period>
  [[nodiscard]] std::optional<T> pop_for(std::chrono::duration<Rep, Period> timeout) {
    const auto deadline = detail::saturating_deadline(timeout, "dflash::bounded_queue::pop_for");
    return pop_until(&deadline);
  }

  /// An item its producer handed to the consumer stage directly (a pipeline's
  /// help-first call, pipeline/agents/host_worker.hpp) instead of through the
  /// ring: recorded as a push and a pop that did not wait, so the keys count
  /// every item that crossed this link either way.
  void record_handover() const {
    record_zero(push_wait_key<Name>{});
    record_zero(pop_wait_key<Name>{});
  }

  /// An item its consumer took with try_pop (which records nothing) where a
  /// pipeline would have popped it: recorded as a pop that did not wait.
  void record_pop() const { record_zero(pop_wait_key<Name>{}); }

  /// Idempotent. Wakes every blocked push (fails) and pop (drains, then empty).
  void close() noexcept { ring_.close(); }

  /// The largest capacity the position encoding serves (detail/capacity.hpp).
  static constexpr std::size_t max_capacity = detail::max_ring_capacity;

  [[nodiscard]] bool closed() const noexcept { return ring_.closed(); }
  /// Items in the queue (reserved pushes minus reserved pops; exact when quiescent).
  [[nodiscard]] std::size_t size() const noexcept { return ring_.size(); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  /// Pushes that claimed a position so far: every item that entered, plus any
  /// pending publish (a pipeline compares it with the items its consumers took).
  [[nodiscard]] std::uint64_t pushes() const noexcept { return ring_.pushes(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return ring_.capacity(); }
  /// Threads blocked (spinning or parked) in push()/push_for() now (for tests and diagnostics).
  [[nodiscard]] std::size_t blocked_pushers() const noexcept { return ring_.blocked_pushers(); }
  /// Threads blocked in pop()/pop_for() now.
  [[nodiscard]] std::size_t blocked_poppers() const noexcept { return ring_.blocked_poppers(); }
  /// Pause rounds the next blocking push / pop spins before it yields: doubled (up to
  /// max_spin) when a wait ends while spinning, halved (down to min_spin) when it does not.
  static constexpr int min_spin = detail::blocking_ring::min_spin, max_spin = detail::blocking_ring::max_spin;
  [[nodiscard]] int push_spin() const noexcept { return ring_.push_spin(); }
  [[nodiscard]] int pop_spin() const noexcept { return ring_.pop_spin(); }

 private:
  using time_point = detail::blocking_ring::time_point;

  // The ring's sequence word first: slot i's lies sizeof(slot) * i bytes past slot 0's (blocking_ring).
  struct slot {
    std::atomic<std::uint64_t> seq{0};
    std::optional<T> value;  // empty only if a throwing constructor was published
  };

  static std::size_t checked(std::size_t capacity) {
    detail::check_capacity(capacity, "dflash::bounded_queue", Name.view());
    return capacity;
  }

  // checked() has thrown for capacity 0 before this runs; the test keeps g++'s
  // -Warray-bounds from following a constant 0 into a zero-slot array.
  std::atomic<std::uint64_t>* first_seq(std::size_t capacity) const noexcept {
    return capacity != 0 ? &slots_[0].seq : nullptr;
  }

  // `locked`: the caller holds the ring's parking mutex (a parker's attempt).
  template <class U>
  queue_status try_enqueue(U&& v, bool locked = false, bool* in_flight = nullptr) {
    const auto c = ring_.claim_push(slots_.get(), in_flight);
    if (c.st == queue_status::ok) fill(*c.slot, c.pos, std::forward<U>(v), locked, c.wake_poppers);
    return c.st;
  }

  template <class U>
  void fill(slot& s, std::uint64_t pos, U&& v, bool locked, bool wake_poppers) {
    struct publish {  // runs even if T's constructor throws, so the ring never stalls
      detail::blocking_ring& r;
      slot& s;
      std::uint64_t pos;
      bool locked, wake;
      ~publish() { r.publish(s.seq, pos, locked, wake); }
    } guard{ring_, s, pos, locked, wake_poppers};
    s.value.emplace(std::forward<U>(v));
  }

  struct dequeue_state {
    bool drained = false;    ///< closed and nothing left (only meaningful when no item came)
    bool in_flight = false;  ///< no item, but a push has claimed the position: its publish is imminent
  };

  // The next item into `out` (the caller's: the item is moved once, into the
  // optional that pop() returns). `out` stays empty when there is none.
  dequeue_state try_dequeue(std::optional<T>& out, bool locked = false) {
    for (;;) {
      const auto c = ring_.claim_pop(slots_.get());
      if (!c.claimed) return {c.drained, c.in_flight};
      take(*c.slot, c.pos, out, locked, c.wake_pushers);
      if (out) return {};
      // a failed push's empty slot: skip it
    }
  }

  void take(slot& s, std::uint64_t pos, std::optional<T>& out, bool locked, bool wake_pushers) {
    struct release {  // hands the slot to the next lap even if T's move throws
      detail::blocking_ring& r;
      slot& s;
      std::uint64_t pos;
      bool locked, wake;
      ~release() {
        s.value.reset();
        r.release(s.seq, pos, locked, wake);
      }
    } guard{ring_, s, pos, locked, wake_pushers};
    if (s.value) out.emplace(std::move(*s.value));
  }

  template <class K>
  void record_zero(K k) const {
    if constexpr (P::enabled) prof_->add(k, typename P::duration{0});
  }

  template <class U>
  queue_status push_until(U&& v, const time_point* deadline) {
    queue_status st = try_enqueue(std::forward<U>(v));
    if (st != queue_status::full) {
      record_zero(push_wait_key<Name>{});
      return st;
    }
    if (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline) {
      record_zero(push_wait_key<Name>{});
      return queue_status::timeout;
    }
    const blocked_scope<push_wait_key<Name>> b(*this, ring_.push_waiters());
    auto attempt = [&](bool locked, bool& in_flight) {
      st = try_enqueue(std::forward<U>(v), locked, &in_flight);
      return st != queue_status::full;
    };
    return ring_.wait_push(detail::blocking_ring::attempt(attempt), deadline) ? st : queue_status::timeout;
  }

  std::optional<T> pop_until(const time_point* deadline) {
    std::optional<T> out;  // the one object returned on every path (no move of the item on the way out)
    dequeue_state st = try_dequeue(out);
    if (out || st.drained || (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline)) {
      record_zero(pop_wait_key<Name>{});
      return out;
    }
    {
      const blocked_scope<pop_wait_key<Name>> b(*this, ring_.pop_waiters());
      auto attempt = [&](bool locked, bool& in_flight) {
        st = try_dequeue(out, locked);
        in_flight = st.in_flight;
        return out.has_value() || st.drained;
      };
      (void)ring_.wait_pop(detail::blocking_ring::attempt(attempt), deadline);
    }
    return out;
  }

  // A blocking push or pop: counted in the ring's blocked_push / blocked_pop and
  // timed under K, until it returns or throws (T's constructor or move).
  template <class K>
  class blocked_scope {
   public:
    blocked_scope(const bounded_queue& q, std::atomic<std::size_t>& n) : q_(q), n_(n), tok_(q.begin_wait(K{})) {
      n_.fetch_add(1, std::memory_order_acq_rel);
    }
    blocked_scope(const blocked_scope&) = delete;
    blocked_scope& operator=(const blocked_scope&) = delete;
    ~blocked_scope() {
      n_.fetch_sub(1, std::memory_order_acq_rel);
      q_.end_wait(K{}, tok_);
    }

   private:
    const bounded_queue& q_;
    std::atomic<std::size_t>& n_;
    decltype(std::declval<const bounded_queue&>().begin_wait(K{})) tok_;
  };

  template <class K>
  auto begin_wait(K k) const noexcept {
    if constexpr (P::enabled) return prof_->begin(k);
    else return 0;
  }
  template <class K, class Tok>
  void end_wait(K k, const Tok& tok) const {
    if constexpr (P::enabled) prof_->end(k, tok);
  }

  // slots_ before ring_: the ring is given their address. What every push and
  // pop reads sits together (the slots, the profiler, the ring's sizes), ahead
  // of the ring's index words on lines of their own. A NullProfiler queue is
  // exactly one pointer smaller than a profiled one (prof_ takes no room).
  std::unique_ptr<slot[]> slots_;
  [[no_unique_address]] profiler_ref<P> prof_;
  detail::blocking_ring ring_;
};

}  // namespace dflash
