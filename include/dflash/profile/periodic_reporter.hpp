#pragma once
// periodic_reporter: every `interval` prints the profiler's summary (table or
// JSON) to a callback or std::ostream, then clears it (take(): nothing recorded
// between print and reset is lost) or keeps the totals.
//
//   dflash::periodic_reporter rep(prof, 10s, std::cerr);                // clear after each report
//   dflash::periodic_reporter rep(prof, 10s, sink, {report_format::json, report_reset::keep});
//   rep.start();  ...  rep.stop();                                       // background thread
//
// Time comes from a Clock policy and tick() is public, so tests drive it with
// manual_clock and no thread. interval 0 = off; negative, NaN, infinite or
// longer than half the clock's range = std::invalid_argument.
// With a policy that records nothing (NullProfiler) the reporter is an empty
// type: no thread, no timer, every member a no-op.

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "dflash/detail/format.hpp"
#include "dflash/detail/std_chrono.hpp"
#include "dflash/detail/std_function.hpp"
#include "dflash/profile/clock.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/profile/report.hpp"

namespace dflash {

enum class report_reset {
  clear,  ///< each report covers the last interval only (profiler.take())
  keep,   ///< each report shows the totals since start (profiler.snapshot())
};

struct reporter_options {
  report_format format = report_format::table;
  report_reset reset = report_reset::clear;
  report_options table{};  ///< a table's layout (its format is `format` above)
};

namespace detail {
inline std::chrono::duration<double> checked_interval(std::chrono::duration<double> interval) {
  // Also rejects NaN (every comparison is false) and infinity, without <cmath>.
  if (!(interval.count() >= 0.0 && interval.count() <= std::numeric_limits<double>::max()))
    throw_invalid_argument("dflash::periodic_reporter: interval must be >= 0 seconds (0 = off) and finite, got %g s",
                           interval.count());
  return interval;
}
inline std::function<void(std::string_view)> ostream_sink(std::ostream& os) {
  return [&os](std::string_view s) {
    os << s;
    if (s.empty() || s.back() != '\n') os << '\n';
    os.flush();
  };
}
}  // namespace detail

template <ProfilerPolicy P, ProfilerClock Clock = std::chrono::steady_clock>
class periodic_reporter {
 public:
  using sink_type = std::function<void(std::string_view)>;

  periodic_reporter(P& prof, std::chrono::duration<double> interval, sink_type sink, reporter_options opt = {})
      : prof_(prof), interval_(to_clock(detail::checked_interval(interval))), sink_(std::move(sink)), opt_(opt),
        next_(Clock::now() + interval_) {
    if (!sink_) throw std::invalid_argument("dflash::periodic_reporter: the sink callback is empty");
  }
  periodic_reporter(P& prof, std::chrono::duration<double> interval, std::ostream& os, reporter_options opt = {})
      : periodic_reporter(prof, interval, detail::ostream_sink(os), opt) {}
  periodic_reporter(const periodic_reporter&) = delete;
  periodic_reporter& operator=(const periodic_reporter&) = delete;
  ~periodic_reporter() { stop(); }

  [[nodiscard]] bool enabled() const noexcept { return interval_ > Clock::duration::zero(); }
  [[nodiscard]] std::size_t reports() const {
    std::lock_guard lk(report_m_);
    return reports_;
  }

  /// Reports once if an interval has elapsed by Clock since the last report
  /// (or construction); returns whether it did. A late tick reports once and
  /// schedules the next deadline one interval after now.
  bool tick() {
    if (!enabled()) return false;
    std::lock_guard lk(report_m_);
    const auto now = Clock::now();
    if (now < next_) return false;
    next_ += interval_;
    if (next_ <= now) next_ = now + interval_;
    emit();
    return true;
  }

  /// Reports now regardless of the schedule (e.g. a final summary).
  void report_now() {
    std::lock_guard lk(report_m_);
    emit();
  }

  /// Starts the background thread (none when the interval is 0). Idempotent.
  void start() {
    if (!enabled() || thread_.joinable()) return;
    {
      std::lock_guard lk(thread_m_);
      stop_ = false;
    }
    thread_ = std::thread([this] { loop(); });
  }
  /// Stops and joins the background thread. Idempotent.
  void stop() noexcept {
    {
      std::lock_guard lk(thread_m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  static typename Clock::duration to_clock(std::chrono::duration<double> d) {
    // Half the clock's range: deadlines (now + interval) must not overflow.
    const std::chrono::duration<double> longest = Clock::duration::max() / 2;
    if (d > longest)
      detail::throw_invalid_argument(
          "dflash::periodic_reporter: interval of %g s is longer than the clock can count (at most %g s)", d.count(),
          longest.count());
    const auto c = std::chrono::duration_cast<typename Clock::duration>(d);
    if (d.count() > 0.0 && c.count() == 0)
      detail::throw_invalid_argument("dflash::periodic_reporter: interval of %g s is shorter than one clock tick",
                                     d.count());
    return c;
  }

  void emit() {
    const profile_snapshot s = opt_.reset == report_reset::clear ? prof_.take() : prof_.snapshot();
    ++reports_;
    report_options r = opt_.table;
    r.format = opt_.format;
    sink_(format_report(s, r));
  }

  void loop() {
    std::unique_lock lk(thread_m_);
    while (!stop_) {
      // Sleep until the deadline (real time), at most one interval, at least 1 ms.
      auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(next_deadline() - Clock::now());
      wait = std::clamp(wait, std::chrono::nanoseconds(std::chrono::milliseconds(1)),
                        std::chrono::duration_cast<std::chrono::nanoseconds>(interval_));
      if (cv_.wait_for(lk, wait, [this] { return stop_; })) break;
      lk.unlock();
      try {
        tick();
      } catch (...) {
        // A failing sink must not kill the process from a background thread.
      }
      lk.lock();
    }
  }
  typename Clock::time_point next_deadline() const {
    std::lock_guard lk(report_m_);
    return next_;
  }

  P& prof_;
  const typename Clock::duration interval_;
  sink_type sink_;
  reporter_options opt_;
  mutable std::mutex report_m_;
  typename Clock::time_point next_;
  std::size_t reports_ = 0;

  std::mutex thread_m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

/// With a policy that records nothing: an empty type, no thread, no timer.
template <ProfilerPolicy P, ProfilerClock Clock>
  requires(!P::enabled)
class periodic_reporter<P, Clock> {
 public:
  using sink_type = std::function<void(std::string_view)>;
  periodic_reporter(const P&, std::chrono::duration<double> interval, const sink_type&, reporter_options = {}) {
    detail::checked_interval(interval);
  }
  periodic_reporter(const P&, std::chrono::duration<double> interval, std::ostream&, reporter_options = {}) {
    detail::checked_interval(interval);
  }
  [[nodiscard]] static constexpr bool enabled() noexcept { return false; }
  [[nodiscard]] static constexpr std::size_t reports() noexcept { return 0; }
  static constexpr bool tick() noexcept { return false; }
  static constexpr void report_now() noexcept {}
  static constexpr void start() noexcept {}
  static constexpr void stop() noexcept {}
};

}  // namespace dflash
