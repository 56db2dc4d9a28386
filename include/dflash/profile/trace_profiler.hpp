#pragma once
// TraceProfiler: records every timed range with its thread and writes a Chrome
// trace-event JSON file that opens in Perfetto (ui.perfetto.dev) and
// chrome://tracing.
//
//   dflash::TraceProfiler<keys> trace;             // 65536 events per thread
//   { auto t = trace.scope("forward"_key); ... }
//   trace.write_file("pipeline.trace.json");
//
// Recording: each thread appends to its own fixed-capacity buffer, registered
// once under a mutex on the thread's first event and then found through a
// small thread_local cache — the hot path takes no lock and does no
// allocation. A range is written as one "X" (complete) event when it ends, so
// begin and end can never come out unmatched, even when the buffer fills.
//
// Bounded memory: at most `events_per_thread` events per thread. When a
// buffer is full new events are dropped and counted — never a crash, never
// growth. dropped() reports the total; the JSON carries it in "otherData".
//
// Timestamps are Clock's time since its epoch, written in microseconds with
// nanosecond digits (integer arithmetic, exact). Track ids ("tid") are 1, 2,
// ... in the order threads first record; name_thread() labels a track.
//
// Tracks never hold partly overlapping ranges (a viewer would nest them
// wrongly): durations measured elsewhere (add(), e.g. a device stage's
// "<stage>.gpu") go on the thread's second track, "<thread> stream", one after
// the other in the order they were added — each ends where the host learnt of
// it or, if that would overlap the one before, starts where it ended; a zero
// duration (a queue's wait that did not wait) is counted by other policies
// but not drawn. Flow
// rows of a pipeline ("<stage>.age", "<sink>.e2e", ...) are item lifetimes
// that overlap by nature: not drawn as ranges; a pipeline calls flow_step()
// instead, and the trace gets Chrome flow events ("s"/"t"/"f", id = the item's
// source sequence number) bound to each stage's work range: in Perfetto
// clicking a work range shows the item's arrows from source to sink.

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/profile/flow_rows.hpp"
#include "dflash/detail/os.hpp"
#include "dflash/detail/thread_label.hpp"
#include "dflash/profile/clock.hpp"
#include "dflash/profile/clock_profiler_base.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/profile/report.hpp"

namespace dflash {

namespace detail {

struct trace_event {
  std::int64_t start_ns;
  std::int64_t dur_ns;  // a flow event: the item's sequence number
  std::uint32_t key;
  std::uint32_t kind;  // trace_kind
};
enum trace_kind : std::uint32_t {
  trace_range = 0,       // a range timed on this thread
  trace_added = 1,       // a duration measured elsewhere (the "stream" track)
  trace_flow_start = 2,  // flow events: start_ns = where, dur_ns = the item's number
  trace_flow_step = 3,
  trace_flow_end = 4,
};

/// One thread's events. Single writer (the owning thread); readers see the
/// prefix [0, size) published by the release store.
struct trace_buffer {
  trace_buffer(std::size_t cap, std::uint32_t track, std::thread::id who)
      : events(std::make_unique<trace_event[]>(cap)), capacity(cap), tid(track), owner(who) {}

  void push(const trace_event& e) noexcept {
    const std::size_t n = size.load(std::memory_order_acquire);
    if (n == capacity) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    events[n] = e;
    size.store(n + 1, std::memory_order_release);
  }

  std::unique_ptr<trace_event[]> events;
  std::size_t capacity;
  std::atomic<std::size_t> size{0};
  std::atomic<std::uint64_t> dropped{0};
  std::uint32_t tid;
  std::int64_t added_end = INT64_MIN;  // the end of the last range on the "stream" track (owner only)
  std::thread::id owner;
  std::string name;  // guarded by the profiler's registry mutex
};

/// Per-thread cache of (profiler id → buffer). Ids are never reused, so an
/// entry left by a destroyed profiler can never match a live one.
struct trace_cache_slot {
  std::uint64_t owner = 0;
  trace_buffer* buffer = nullptr;
};
inline thread_local std::array<trace_cache_slot, 4> trace_cache{};
inline thread_local unsigned trace_cache_next = 0;

inline std::uint64_t next_trace_profiler_id() noexcept {
  static std::atomic<std::uint64_t> n{0};
  return n.fetch_add(1, std::memory_order_relaxed) + 1;
}

/// ns → "µs.nnn" exactly (no floating point: steady_clock values have 16+ digits).
inline void append_us(std::string& out, std::int64_t ns) {
  const bool neg = ns < 0;
  const std::uint64_t a = neg ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  append_fmt(out, "%s%llu.%03llu", neg ? "-" : "", static_cast<unsigned long long>(a / 1000),
             static_cast<unsigned long long>(a % 1000));
}

inline long trace_pid() noexcept { return os::process_id(); }

}  // namespace detail

template <class Keys, ProfilerClock Clock = std::chrono::steady_clock>
  requires ClosedKeySet<Keys>
class TraceProfiler : public detail::clock_profiler_base<TraceProfiler<Keys, Clock>, Keys, Clock> {
  using base = detail::clock_profiler_base<TraceProfiler, Keys, Clock>;
  friend base;

 public:
  using typename base::duration;
  using typename base::time_point;
  static constexpr std::size_t default_events_per_thread = std::size_t{1} << 16;
  static constexpr std::string_view policy_name = "dflash::TraceProfiler";  ///< in errors and tables

  /// `events_per_thread` bounds each thread's buffer (24 bytes an event).
  explicit TraceProfiler(std::size_t events_per_thread = default_events_per_thread)
      : id_(detail::next_trace_profiler_id()), capacity_(events_per_thread) {
    if (events_per_thread == 0)
      throw std::invalid_argument("dflash::TraceProfiler: events_per_thread must be at least 1 (got 0)");
  }
  TraceProfiler(const TraceProfiler&) = delete;
  TraceProfiler& operator=(const TraceProfiler&) = delete;

  /// Label the calling thread's track in the trace viewer.
  void name_thread(std::string name) const {
    detail::trace_buffer* b = local();
    if (b == nullptr) throw std::bad_alloc();
    detail::thread_label() = name;  // work this thread hands to a host-twin stream is labelled after it
    const std::lock_guard lock(m_);
    b->name = std::move(name);
  }

  /// The policy-generic spelling (dflash::name_this_thread(p, name) calls it).
  void name_this_thread(std::string_view name) const { name_thread(std::string(name)); }

  std::size_t events_per_thread() const noexcept { return capacity_; }
  /// Events dropped because a thread's buffer was full (or could not be allocated).
  std::uint64_t dropped() const {
    const std::lock_guard lock(m_);
    std::uint64_t d = unbuffered_drops_.load(std::memory_order_relaxed);
    for (const auto& b : buffers_) d += b->dropped.load(std::memory_order_relaxed);
    return d;
  }
  /// Events held (all threads).
  std::size_t recorded() const {
    const std::lock_guard lock(m_);
    std::size_t n = 0;
    for (const auto& b : buffers_) n += b->size.load(std::memory_order_acquire);
    return n;
  }
  /// Threads that have recorded at least once (= tracks in the trace).
  std::size_t thread_count() const {
    const std::lock_guard lock(m_);
    return buffers_.size();
  }

  /// Chrome trace-event JSON. Safe while other threads record: it writes what
  /// was complete when each thread's buffer was read.
  void write_json(std::ostream& os) const {
    const long pid = detail::trace_pid();
    std::string out;
    out.reserve(4096);
    const std::lock_guard lock(m_);
    detail::append_fmt(out, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":0,"
                            "\"args\":{\"name\":\"dflash\"}}", pid);
    std::uint64_t dropped = unbuffered_drops_.load(std::memory_order_relaxed);
    for (const auto& b : buffers_) {
      const std::size_t n = b->size.load(std::memory_order_acquire);
      bool has_stream = false;
      dropped += b->dropped.load(std::memory_order_relaxed);
      detail::append_fmt(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%u,\"args\":{\"name\":",
                         pid, b->tid);
      if (b->name.empty()) {
        detail::append_fmt(out, "\"thread %u\"}}", b->tid);
      } else {
        detail::append_json_string(out, b->name);
        out += "}}";
      }
      for (std::size_t i = 0; i < n; ++i) {
        const detail::trace_event& e = b->events[i];
        if (e.kind >= detail::trace_flow_start) {
          static constexpr const char* ph[] = {"s", "t", "f"};
          detail::append_fmt(out, ",\n{\"name\":\"item\",\"cat\":\"dflash.flow\",\"ph\":\"%s\",%s\"id\":%llu,\"ts\":",
                             ph[e.kind - detail::trace_flow_start], e.kind == detail::trace_flow_end ? "\"bp\":\"e\"," : "",
                             static_cast<unsigned long long>(e.dur_ns));
          detail::append_us(out, e.start_ns);
          detail::append_fmt(out, ",\"pid\":%ld,\"tid\":%u}", pid, b->tid);
          continue;
        }
        if (e.kind == detail::trace_added) has_stream = true;
        out += ",\n{\"name\":";
        detail::append_json_string(out, Keys::names[e.key]);
        out += e.kind == detail::trace_added ? ",\"cat\":\"dflash.add\",\"ph\":\"X\",\"ts\":"
                                       : ",\"cat\":\"dflash\",\"ph\":\"X\",\"ts\":";
        detail::append_us(out, e.start_ns);
        out += ",\"dur\":";
        detail::append_us(out, e.dur_ns);
        detail::append_fmt(out, ",\"pid\":%ld,\"tid\":%u}", pid,
                           e.kind == detail::trace_added ? stream_tid(b->tid) : b->tid);
        if (out.size() > (std::size_t{1} << 20)) {
          os << out;
          out.clear();
        }
      }
      if (has_stream) {
        detail::append_fmt(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%u,\"args\":{\"name\":",
                           pid, stream_tid(b->tid));
        detail::append_json_string(out, (b->name.empty() ? "thread " + std::to_string(b->tid) : b->name) + " stream");
        out += "}}";
      }
    }
    detail::append_fmt(out,
                       "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"producer\":\"dflash::TraceProfiler\","
                       "\"events_per_thread\":%llu,\"threads\":%llu,\"dropped_events\":%llu}}\n",
                       static_cast<unsigned long long>(capacity_), static_cast<unsigned long long>(buffers_.size()),
                       static_cast<unsigned long long>(dropped));
    os << out;
  }

  std::string json() const {
    std::ostringstream s;
    write_json(s);
    return s.str();
  }

  /// A pipeline's stage just ended its work range `K` on this thread for the
  /// item numbered `seq`: binds the item's flow (from the source's range,
  /// through each stage's, to the sink's) to that range, at an instant inside
  /// it that no range nested in it covers (a viewer binds a flow event to the
  /// innermost range around it: a user's zone inside the stage would take
  /// the arrow). Nothing when this thread's last range is not K's.
  template <Key K>
  void flow_step(K, std::uint64_t seq, flow_phase phase) const noexcept {
    this->template check_key<K>();
    detail::trace_buffer* b = local();
    if (b == nullptr) return;
    const std::size_t n = b->size.load(std::memory_order_relaxed);  // the owner's own writes
    for (std::size_t i = n; i-- > 0;) {
      const detail::trace_event& e = b->events[i];
      if (e.kind != detail::trace_range) continue;  // a stream range or a flow event in between
      if (e.key != Keys::index_of(K::name())) return;
      const auto kind = phase == flow_phase::start  ? detail::trace_flow_start
                        : phase == flow_phase::step ? detail::trace_flow_step
                                                    : detail::trace_flow_end;
      b->push({free_instant(*b, i), static_cast<std::int64_t>(seq), e.key, kind});
      return;
    }
  }

  /// Writes the trace to `path`; throws std::runtime_error naming the path
  /// and the reason if it cannot be opened or written.
  void write_file(const std::string& path) const {
    std::ofstream f(path, std::ios::out | std::ios::trunc | std::ios::binary);
    if (!f) {
      const int err = errno;
      throw std::runtime_error("dflash::TraceProfiler::write_file: cannot open '" + path +
                               "' for writing: " + (err ? std::strerror(err) : "unknown error"));
    }
    write_json(f);
    f.flush();
    if (!f) throw std::runtime_error("dflash::TraceProfiler::write_file: writing '" + path + "' failed");
  }

 private:
  void on_range(std::size_t key, time_point start, time_point stop) const noexcept { emit(key, start, stop, false); }
  /// A duration measured elsewhere is drawn on the thread's stream track,
  /// ending now or right after the one before (the file comment says why);
  /// a pipeline's flow rows are not drawn.
  void on_added(std::size_t key, std::uint64_t ns) const noexcept {
    if (flow_row[key] || ns == 0) return;  // a zero-length range (a wait that did not wait) has nothing to draw
    detail::trace_buffer* b = local();
    if (b == nullptr) {
      unbuffered_drops_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const std::int64_t d = static_cast<std::int64_t>(ns);
    const std::int64_t start = std::max(ns_since_epoch(Clock::now()) - d, b->added_end);
    b->added_end = start + d;
    b->push({start, d, static_cast<std::uint32_t>(key), detail::trace_added});
  }
  // An instant of range i that none of the ranges nested in it covers: just
  // after its start, else just after one of its children's ends; its midpoint
  // if children tile it to the nanosecond (or are too many to look at: this
  // runs once per item and stage). Children are recorded before their parent
  // (a range is pushed when it ends), so they sit just below i.
  static std::int64_t free_instant(const detail::trace_buffer& b, std::size_t i) noexcept {
    const detail::trace_event& e = b.events[i];
    const std::int64_t end = e.start_ns + e.dur_ns;
    std::array<std::pair<std::int64_t, std::int64_t>, 32> kids;
    std::size_t n = 0;
    for (std::size_t j = i; j-- > 0;) {
      const detail::trace_event& c = b.events[j];
      if (c.kind != detail::trace_range) continue;
      if (c.start_ns < e.start_ns) break;  // before the parent began: no more children
      if (n == kids.size()) return e.start_ns + e.dur_ns / 2;
      kids[n++] = {c.start_ns, c.start_ns + c.dur_ns};
    }
    const auto free = [&](std::int64_t t) {
      for (std::size_t k = 0; k < n; ++k)
        if (kids[k].first <= t && t <= kids[k].second) return false;
      return true;
    };
    if (const std::int64_t first = std::min(e.start_ns + 1, end); free(first)) return first;
    for (std::size_t k = 0; k < n; ++k)
      if (const std::int64_t after = kids[k].second + 1; after < end && free(after)) return after;
    return e.start_ns + e.dur_ns / 2;
  }
  static constexpr std::uint32_t stream_tid(std::uint32_t tid) noexcept { return tid + (1u << 20); }
  // Keys a pipeline records per item lifetime (pipeline/stage.hpp's flow rows).
  static constexpr std::array<bool, Keys::size> flow_row = [] {
    std::array<bool, Keys::size> r{};
    for (std::size_t i = 0; i < Keys::size; ++i)
      r[i] = is_flow_row(Keys::names[i]);
    return r;
  }();

  static std::int64_t ns_since_epoch(time_point t) noexcept {
    return static_cast<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  }

  void emit(std::size_t key, time_point start, time_point stop, bool added) const noexcept {
    detail::trace_buffer* b = local();
    if (b == nullptr) {
      unbuffered_drops_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const std::int64_t s = ns_since_epoch(start);
    b->push({s, std::max<std::int64_t>(0, ns_since_epoch(stop) - s), static_cast<std::uint32_t>(key),
             added ? detail::trace_added : detail::trace_range});
  }

  detail::trace_buffer* local() const noexcept {
    for (const auto& slot : detail::trace_cache)
      if (slot.owner == id_) return slot.buffer;
    return register_thread();
  }

  // Slow path, once per thread (or after the thread's cache evicted us).
  detail::trace_buffer* register_thread() const noexcept {
    detail::trace_buffer* b = nullptr;
    try {
      const std::lock_guard lock(m_);
      const auto me = std::this_thread::get_id();
      for (const auto& x : buffers_)
        if (x->owner == me) b = x.get();  // a reused thread id continues the dead thread's track
      if (b == nullptr) {
        buffers_.push_back(std::make_unique<detail::trace_buffer>(
            capacity_, static_cast<std::uint32_t>(buffers_.size() + 1), me));
        b = buffers_.back().get();
        b->name = detail::thread_label();  // empty unless the thread was labelled elsewhere
      }
    } catch (...) {  // out of memory: this event is dropped and counted, not fatal
      return nullptr;
    }
    detail::trace_cache[detail::trace_cache_next++ % detail::trace_cache.size()] = {id_, b};
    return b;
  }

  std::uint64_t id_;
  std::size_t capacity_;
  mutable std::mutex m_;
  mutable std::vector<std::unique_ptr<detail::trace_buffer>> buffers_;
  mutable std::atomic<std::uint64_t> unbuffered_drops_{0};
};

static_assert(ProfilerPolicy<TraceProfiler<key_set<"probe">>>);

}  // namespace dflash
