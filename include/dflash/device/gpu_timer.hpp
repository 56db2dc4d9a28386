#pragma once
// gpu_timer<B>: the device time of a device stage's work per item, from a
// start/end timing-event pair recorded around the call on the worker's
// stream and resolved once the end event has completed — never blocking.
// One per device-stage worker, stateful profiler policies only (with
// NullProfiler no timing event is ever created).
//
// For a profiled pipeline that follows items it also gives, per item, when
// its device work ended on the host's clock (so "<stage>.age_gpu_end", the
// item's age then): the device timeline is tied to the host clock by an
// anchor event recorded on the stream while the stream has nothing in
// flight; the worker polls it until it has completed (µs: the stream is
// idle) and reads the host clock then, so the anchor's device time is at or
// before that reading. An end event's host time is the anchor's plus the
// device time between the two: never early (an item never reads as ending
// before it was born), late by at most the poll. The anchor is renewed when
// the stream is idle again (at most once per anchor_every items), so the two
// clocks' drift stays small.

#include <cstdint>
#include <deque>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/device/backend.hpp"

namespace dflash::detail {

template <class B>
class gpu_timer {
 public:
  using event = typename B::event_type;
  /// An item without a birth stamp: its end is not followed.
  static constexpr std::int64_t unstamped = std::numeric_limits<std::int64_t>::min();
  /// Items between anchors, at least (an anchor is one more event record).
  static constexpr std::uint64_t anchor_every = 16;
  /// An anchor whose poll took longer (the thread was descheduled) is renewed
  /// at the next idle moment: the ends it gives are late by up to the poll.
  static constexpr std::int64_t anchor_slack_ns = 50'000;

  explicit gpu_timer(B& b) : b_(b) {}
  gpu_timer(const gpu_timer&) = delete;
  gpu_timer& operator=(const gpu_timer&) = delete;
  ~gpu_timer() {
    for (auto& [a, z] : all_) {
      b_.destroy_event(a);
      b_.destroy_event(z);
    }
    if (anchored_) b_.destroy_event(anchor_);
  }
  /// Ties the device timeline to the host clock (`host_now()`, ns), when the
  /// stream `s` has no work in flight: before its first item, or once every
  /// timed item's work ended (anchor_due()). Polls until the anchor event
  /// completed: short on an idle stream, and never a counted host wait.
  template <class Now>
  void anchor(typename B::stream_type s, Now&& host_now) {
    if (!anchored_) anchor_ = b_.create_event(true);
    anchored_ = true;
    const std::int64_t before = host_now();
    b_.record(anchor_, s);
    while (!b_.query(anchor_)) std::this_thread::yield();
    anchor_ns_ = host_now();
    since_anchor_ = anchor_ns_ - before > anchor_slack_ns ? anchor_every : 0;
  }
  /// Every timed item's work ended and the anchor is due for renewal.
  [[nodiscard]] bool anchor_due() const noexcept { return pending_.empty() && since_anchor_ >= anchor_every; }
  void start(typename B::stream_type s) {
    if (free_.empty()) {
      all_.reserve(all_.size() + 1);
      free_.reserve(all_.size() + 1);
      const event a = b_.create_event(true);
      event z{};
      try {
        z = b_.create_event(true);
      } catch (...) {
        b_.destroy_event(a);  // not in all_ yet: the destructor would not see it
        throw;
      }
      all_.emplace_back(a, z);
      free_.push_back(all_.back());
    }
    cur_ = free_.back();
    free_.pop_back();
    b_.record(cur_.first, s);
  }
  /// The work of the item born at `born_ns` (host clock) was enqueued since start().
  void stop(typename B::stream_type s, std::int64_t born_ns = unstamped) {
    b_.record(cur_.second, s);
    pending_.push_back({cur_, born_ns});
    ++since_anchor_;
  }
  /// Adds every completed measurement to `prof` under K.
  template <class P, class K>
  void resolve(const P& prof, K k) {
    resolve(prof, k, [](std::int64_t, std::int64_t) {});
  }
  /// The same, and for each stamped item on_end(born_ns, end_ns): when its
  /// work ended, on the host clock of anchor().
  template <class P, class K, class OnEnd>
  void resolve(const P& prof, K k, OnEnd&& on_end) {
    while (!pending_.empty() && b_.query(pending_.front().ev.second)) {
      const auto& [ev, born] = pending_.front();
      prof.add(k, b_.elapsed(ev.first, ev.second));
      if (born != unstamped && anchored_) on_end(born, anchor_ns_ + b_.elapsed(anchor_, ev.second).count());
      free_.push_back(ev);
      pending_.pop_front();
    }
  }

 private:
  B& b_;
  std::vector<std::pair<event, event>> all_, free_;
  struct timed {
    std::pair<event, event> ev;
    std::int64_t born;
  };
  std::deque<timed> pending_;
  std::pair<event, event> cur_{};
  event anchor_{};
  bool anchored_ = false;
  std::int64_t anchor_ns_ = 0;
  std::uint64_t since_anchor_ = 0;
};

}  // namespace dflash::detail
