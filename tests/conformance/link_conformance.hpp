#pragma once
// The link-kind conformance suite's harnesses: for a kind L, a pipeline that
// puts L between two stages of the right call shape and reports what crossed.
// The harness follows from the kind's answers (what it carries, its delivery),
// so the suite (test_link_conformance.cpp) runs one list of cases over every
// kind and a new kind joins with one line in its type list.
//
//   carries_values                 numbers -> queue -> workers<mark, Np> -> L -> workers<sink, Nc>
//   carries_device_slots, each once  numbers -> queue -> workers<fill, Np> -> L -> workers<read, Nc>
//   carries_device_slots, rows once  numbers -> queue -> workers<push, Np> -> L -> workers<take, Nc>
//
// Every harness records, per unit that arrived (an item, or a row), its value,
// the producer thread that made it and the consumer (thread, or device worker
// whose stream's work read it) that took it, in arrival order per consumer; host-twin device work runs later on the
// streams' threads, so a missing wait is a wrong value here and a race under TSan.
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/links/device_queue.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace conformance {

using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;

struct unit {
  int value;
  std::size_t producer, consumer;  ///< the threads that made and took it (thread_index())
};

/// A number for the calling thread. The order a kind promises is per producer
/// *thread*: a worker index is a seat a helping thread may take too (help-first,
/// agents/host_worker.hpp), so two threads may call a stage with one index.
inline std::size_t thread_index() {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

/// What a run asks of the harness and what it saw.
struct run_state {
  int items = 0;           ///< source items (-1: endless, for stop cases)
  int throw_at = -1;       ///< the consumer throws on every unit from this value on (-1: never)
  std::atomic<int> produced{0};  ///< items the source made
  std::atomic<int> arrived{0};   ///< units the consumer recorded
  std::mutex m;
  std::vector<unit> got;

  void record(unit u) {
    std::lock_guard lk(m);
    got.push_back(u);
    arrived.fetch_add(1, std::memory_order_release);
  }
};

struct source {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  run_state* st;
  int next = 0;
  std::optional<int> operator()() {
    if (st->items >= 0 && next >= st->items) return std::nullopt;
    st->produced.fetch_add(1, std::memory_order_relaxed);
    return next++;
  }
};

// ---- values -------------------------------------------------------------------------
struct tagged {
  int value;
  std::size_t producer;
};
struct mark {
  static constexpr dflash::fixed_string name{"mark"};
  using input_type = int;
  using output_type = tagged;
  tagged operator()(int&& x) const { return {x, thread_index()}; }
};
struct value_sink {
  static constexpr dflash::fixed_string name{"take"};
  using input_type = tagged;
  using output_type = void;
  run_state* st;
  void operator()(tagged&& t) const {
    if (st->throw_at >= 0 && t.value >= st->throw_at) throw std::runtime_error("consumer failed at item " + std::to_string(t.value));
    st->record({t.value, t.producer, thread_index()});
  }
};

// ---- device slots -------------------------------------------------------------------
struct slot : dflash::device_item<B> {
  dflash::device_buffer<int, B> data;  // [value, producer], written by the producer's enqueued work
};
struct fill {
  static constexpr dflash::fixed_string name{"mark"};
  using input_type = int;
  using output_type = slot;
  void operator()(int&& x, slot& out, const DS& s) const {
    int* d = out.data.ensure(2, s);
    const auto w = static_cast<int>(thread_index());
    s.enqueue([=] {
      d[0] = x;
      d[1] = w;
    });
  }
};
struct slot_sink {
  static constexpr dflash::fixed_string name{"take"};
  using input_type = slot;
  using output_type = void;
  run_state* st;
  void operator()(slot& in, const DS& s, std::size_t w) const {
    const int* d = in.data.data();
    run_state* o = st;
    s.enqueue([=] {
      if (o->throw_at >= 0 && d[0] >= o->throw_at) throw std::runtime_error("consumer failed at item " + std::to_string(d[0]));
      o->record({d[0], static_cast<std::size_t>(d[1]), w});
    });
  }
};

// ---- device rows --------------------------------------------------------------------
struct row {
  int value, producer;
};
using rows = dflash::device_rows<row, B>;
struct push_rows {
  static constexpr dflash::fixed_string name{"mark"};
  using input_type = int;
  using output_type = rows;
  void operator()(int&& x, rows& out, const DS& s) const {
    const auto p = out.pusher();
    const auto w = static_cast<int>(thread_index());
    s.enqueue([=] { (void)p.push(row{x, w}); });  // one row per item: the suite's unit
  }
};
struct rows_sink {
  static constexpr dflash::fixed_string name{"take"};
  using input_type = rows;
  using output_type = void;
  run_state* st;
  void operator()(rows& in, const DS& s, std::size_t w) const {
    const auto b = in.batch();
    run_state* o = st;
    s.enqueue([=] {
      for (std::uint32_t i = 0; i < b.count(); ++i) {
        if (o->throw_at >= 0 && b[i].value >= o->throw_at) throw std::runtime_error("consumer failed at item " + std::to_string(b[i].value));
        o->record({b[i].value, static_cast<std::size_t>(b[i].producer), w});
      }
    });
  }
};

// ---- the harness a kind gets ----------------------------------------------------------
template <class L>
constexpr bool rows_kind = std::is_same_v<typename L::delivery, dflash::delivers_rows_once>;
template <class L>
constexpr bool slot_kind = std::is_same_v<typename L::carries, dflash::carries_device_slots>;

template <class L>
struct stages_for {
  using producer = mark;
  using consumer = value_sink;
};
template <class L>
  requires(slot_kind<L> && !rows_kind<L>)
struct stages_for<L> {
  using producer = fill;
  using consumer = slot_sink;
};
template <class L>
  requires(rows_kind<L>)
struct stages_for<L> {
  using producer = push_rows;
  using consumer = rows_sink;
};

/// The producer stage's workers: several, so FIFO is checked per producer.
constexpr std::size_t producers = 3;
/// The consumer's: one where it runs on the producers' threads (a direct
/// segment runs on the workers of one parallel stage), else two.
template <class L>
constexpr std::size_t consumers = std::is_same_v<typename L::consumer_threads, dflash::consumer_on_producer_threads> ? 1 : 2;

template <class P, class L>
using pipeline_for = dflash::Pipeline<P, source, dflash::queue_link<"in", 8>,
                                      dflash::workers<typename stages_for<L>::producer, producers>, L,
                                      dflash::workers<typename stages_for<L>::consumer, consumers<L>>>;

template <class P, class L>
pipeline_for<P, L> make(run_state& st) {
  return pipeline_for<P, L>(source{&st}, typename stages_for<L>::producer{}, typename stages_for<L>::consumer{&st});
}
template <class P, class L>
pipeline_for<P, L> make(const P& prof, run_state& st,
                        const typename pipeline_for<P, L>::shape_type& shape = pipeline_for<P, L>::default_shape()) {
  return pipeline_for<P, L>(prof, shape, source{&st}, typename stages_for<L>::producer{},
                            typename stages_for<L>::consumer{&st});
}

/// Units out per unit in that the kind promises (a harness unit is one item, or one row per item).
template <class L>
struct ratio {
  static constexpr std::size_t out = 1, in = 1;
};
template <class L>
  requires requires { L::delivery::items_in; }
struct ratio<L> {
  static constexpr std::size_t out = L::delivery::items_out, in = L::delivery::items_in;
};

}  // namespace conformance
