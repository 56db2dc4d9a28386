#pragma once
// The host worker: one thread of a host stage whose links on both sides give
// it its own threads (queue links, or a link to another process). It pops an
// item, calls the stage, hands the result on; the stage's keys record the time
// blocked on links (.wait) and inside the call (.work); with a policy that
// stamps items, the item's age as the call starts (.age) and at a sink its
// time since the source at the call's end (.e2e). A source calls until
// it is exhausted (or the pipeline drains); an in_order stage delivers through
// its reorder buffer.
//
// Help-first hand-on: when the next stage is a host stage fed by this queue
// (pipeline_core::helped), its sampled call is cheap (stage_seats) and one of
// its seats is free — and, unless it is in_order, every item pushed before
// has been seated by its own threads, so it keeps FIFO order — this thread
// calls that stage itself instead of pushing, as oneTBB's threads carry a
// token through the next filter, and goes on down the pipeline the same way.
// Why, measured (docs/bench/pipeline.md): with more threads than cores, a
// hand-over through a queue costs a wake and context switches (~3 per item
// at depth 2 on 2 cores, a microsecond or more each), which no spin or
// deferred wake removes when the queue holds 2 items; a cheap call costs far
// less. No item waits in a queue for this: it is called at once or pushed
// with the queue's wake protocol. A slow stage (sampled above
// stage_seats::cheap_ns) keeps the plain push, so its producer goes on
// producing while the stage's own threads work. Seats keep one call per
// worker index and one deliverer of an in_order buffer at a time; a helper
// checks cancellation before each helped call, records the link's keys and
// both stages' .wait as a push and a pop that did not wait, and the stage's
// .work/.age/flow rows as its own threads would. The thread keeps its own
// name: a trace shows the helped calls' ranges (under their stage's keys) on
// the helper's track. Never helped: device stages and direct segments (they
// own their thread, stream or segment order) and OwnThreadsOnlyStage stages.
//
// Source pull: the other way round at the first link. When stage 1 is helped
// and the source may run on threads not its own, a thread of stage 1 that
// finds the link empty calls a cheap source itself and goes on with the item,
// while the source's own thread parks (agents/source_pull.hpp has why and the
// rules). The rows read as for a helped item.

#include <cstddef>
#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/pipeline/agents/source_pull.hpp"
#include "dflash/pipeline/agents/stage_seats.hpp"
#include "dflash/pipeline/core.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::detail {

template <std::size_t I, class Core>
bool hand_on(Core& c, typename Core::template stage_type<I>::output_type&& y, const typename Core::tag_type& tag);

// A push or pop that did not wait (a helped or pulled item, a try_pop): Key records zero.
template <class Key, class Core>
void record_no_wait(Core& c) {
  using P = std::remove_cvref_t<decltype(c.prof())>;
  if constexpr (P::enabled) c.prof().add(Key{}, typename P::duration{0});
}

// f(), timed into `seats` when the seat's turn to sample has come (helped
// stages and pulled sources only: stage_seats or source_pull).
template <class Seats, class F>
decltype(auto) sampled_call(Seats* seats, std::size_t seat, F&& f) {
  if (seats == nullptr || !seats->sample(seat)) return f();
  struct sample {
    Seats* s;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~sample() { s->sampled(std::chrono::steady_clock::now() - t0); }
  } timing{seats};
  return f();
}

// Stage I takes items in queue order (FIFO per producer thread, the
// queue_link promise): every stage but an in_order one, whose buffer orders
// items by source sequence anyway.
template <class Core, std::size_t I>
constexpr bool fifo_stage() noexcept {
  return !Core::topo::template in_order_at<I>;
}

// What runs under a seat (a helped stage's, a pulled source's): an error or
// pipeline_stop ends the run before the seat goes, so no other thread calls
// the stage once a call there threw (its own, or that of a stage it helped).
template <class Core, class F>
decltype(auto) end_run_on_throw(Core& c, F&& f) {
  try {
    return f();
  } catch (const pipeline_stop&) {
    c.cancel();
    throw;
  } catch (...) {
    c.fail(std::current_exception());
    throw;
  }
}

// Stage I's call on x with worker index `w`, then the hand-on of its result
// (an in_order stage: through its reorder buffer). `hold` is the seat of w
// (null: the stage has none). With several seats it is released right after
// the call; a single seat is held through the hand-on, so results leave in
// the order of the calls (one worker keeps FIFO order; an in_order stage's
// seat guards its buffer until the delivery run ends). false: the pipeline is closing.
template <std::size_t I, class Core>
bool call_and_hand_on(Core& c, std::size_t w, typename Core::template stage_type<I>::input_type&& x,
                      const typename Core::tag_type& tag, seat_hold* hold) {
  using T = typename Core::topo;
  using S = typename Core::template stage_type<I>;
  using work_key = stage_work_key<S::name>;
  using tag_type = typename Core::tag_type;
  S& s = c.template stage<I>();
  const auto& prof = c.prof();
  stage_seats* seats = nullptr;
  if constexpr (Core::template helped<I>)
    if (hold != nullptr) seats = c.template seats<I>();
  auto process = [&](typename S::input_type&& v, const tag_type& t) -> bool {
    c.template flow_start<I>(t);
    if constexpr (I + 1 < T::stage_count) {
      typename S::output_type y =
          sampled_call(seats, w, [&] { return timed(prof, work_key{}, [&] { return call_stage(s, w, std::move(v)); }); });
      c.template flow_done<I>(t);
      if constexpr (!T::template in_order_at<I>)
        if (seats != nullptr && seats->size() > 1) hold->release();
      return hand_on<I>(c, std::move(y), t);
    } else {
      sampled_call(seats, w, [&] { timed(prof, work_key{}, [&] { call_stage(s, w, std::move(v)); }); });
      c.template flow_done<I>(t);
      return true;
    }
  };
  const auto deliver = [&] {
    if constexpr (T::template in_order_at<I>) return c.template deliver_in_order<I>(std::move(x), tag, process);
    else return process(std::move(x), tag);
  };
  return hold != nullptr ? end_run_on_throw(c, deliver) : deliver();
}

// After a push that leaves link I at least half full (a link deeper than two
// items), the consumer is behind. With more threads than cores it may be
// runnable but waiting for this core: running on, its producers fill the link
// and then block together while it works the backlog off alone, and a core
// idles. Yielding lets it run now (measured in docs/bench/pipeline.md, "Longer
// runs"). Where no other thread waits for this core the yield returns at once:
// one syscall per such push.
//
// The push only notes the backlog; the thread yields at the top of its worker
// loop, where it holds no seat. A push can come with a seat held (a helper
// carrying an item through a one-seat stage, the source's own thread through
// its push), and yielding there would keep the seat's waiters waiting too.
inline thread_local bool backlog_seen = false;

template <std::size_t I, class Core>
void note_backlog(Core& c) {
  if constexpr (fill_visible<typename Core::template endpoint_type<I>>) {
    const auto& q = c.template link<I>();
    const std::size_t cap = q.capacity();
    if (cap > 2 && 2 * q.size() >= cap) backlog_seen = true;
  }
}

// At the top of a worker loop: no seat is held here.
inline void yield_to_backlog() noexcept {
  if (std::exchange(backlog_seen, false)) std::this_thread::yield();
}

// Stage I's result to link I: called by this thread when stage I + 1 may be
// helped (see the header comment), else pushed; the push's wait is stage I's .wait.
template <std::size_t I, class Core>
bool hand_on(Core& c, typename Core::template stage_type<I>::output_type&& y, const typename Core::tag_type& tag) {
  if constexpr (Core::template helped<I + 1>) {
    stage_seats* seats = c.template seats<I + 1>();
    if (seats != nullptr && seats->cheap()) {
      if (const std::size_t seat = seats->try_take(); seat != stage_seats::none) {
        seat_hold hold(seats, seat);
        auto& q = c.template link<I>();
        // FIFO per producer thread: helped only when every item pushed before has
        // been seated (overtakes none). Once cancelled, the push below fails as usual.
        if ((!fifo_stage<Core, I + 1>() || seats->all_seated(q)) && !c.cancelled()) {
          q.record_handover();  // a push and a pop that did not wait, as the queue records them
          record_no_wait<stage_wait_key<Core::template stage_type<I>::name>>(c);
          record_no_wait<stage_wait_key<Core::template stage_type<I + 1>::name>>(c);
          return call_and_hand_on<I + 1>(c, seat, std::move(y), tag, &hold);
        }
      }
    }
  }
  auto t = c.prof().scope(stage_wait_key<Core::template stage_type<I>::name>{});
  if (!push_output<I>(c, std::move(y), tag)) return false;
  note_backlog<I>(c);
  return true;
}

enum class pulled { went_on, wait, stop };

// Thread w of stage I = 1, fed by a pulled source: the next item from link 0
// if one is there, else the source called by this thread if its seat is free
// (see source_pull.hpp), then stage 1's call and hand-on either way. `wait`:
// neither now (the source is not known cheap, draining, exhausted, or its
// seat is taken): block in the link, with the source's own thread asked.
template <std::size_t I, class Core>
pulled pull_or_pop(Core& c, std::size_t w, source_pull& pull) {
  using S = typename Core::template stage_type<I>;
  using S0 = typename Core::template stage_type<0>;
  using tag_type = typename Core::tag_type;
  static_assert(I == 1 && Core::template helped<I>);
  stage_seats* seats = c.template seats<I>();  // made with the source_pull: both stages run here
  auto& q = c.template link<I - 1>();
  const auto& prof = c.prof();
  // One call per worker index: stage 1's seat w before the call (and, for a
  // pulled item, before the source's seat goes: with one seat, no later item
  // can be called by the source's own thread, helping, first).
  auto seat = [&](bool popped) {
    seats->take(w);
    if constexpr (fifo_stage<Core, I>())
      if (popped) seats->seated_one();
    return seat_hold(seats, w);
  };
  for (int round = 0;; ++round) {
    if (c.cancelled()) return pulled::stop;
    tag_type tag{};
    if (auto x = try_pop_input<I>(c, tag)) {
      record_no_wait<stage_wait_key<S::name>>(c);  // the pop that did not wait
      seat_hold hold = seat(true);
      if (c.cancelled()) return pulled::stop;
      return call_and_hand_on<I>(c, w, std::move(*x), tag, &hold) ? pulled::went_on : pulled::stop;
    }
    if (c.draining() || !pull.cheap() || pull.exhausted()) return pulled::wait;
    // The seat taken (the own thread or another consumer thread is calling the
    // source), or items pushed but not yet seated (they are next in line: FIFO):
    // try again shortly, then wait in the link.
    if (!pull.try_take()) {
      if (round >= 4) return pulled::wait;
      std::this_thread::yield();
      continue;
    }
    source_seat src(&pull);
    if (pull.exhausted()) return pulled::wait;
    if (fifo_stage<Core, I>() && !seats->all_seated(q)) {
      src.release();
      if (round >= 4) return pulled::wait;
      std::this_thread::yield();
      continue;
    }
    if (c.cancelled()) return pulled::stop;
    if (c.draining()) return pulled::wait;
    auto y = end_run_on_throw(c, [&] {
      return sampled_call(&pull, 0, [&] {
        return timed(prof, stage_work_key<S0::name>{}, [&] { return call_stage(c.template stage<0>(), 0); });
      });
    });
    if (!y) {
      pull.exhaust();
      return pulled::wait;  // the own thread exits and closes the link: the pop there ends
    }
    tag = c.next_source_tag();
    c.template flow_done<0>(tag);
    q.record_handover();  // a push and a pop that did not wait, as the queue records them
    record_no_wait<stage_wait_key<S0::name>>(c);
    record_no_wait<stage_wait_key<S::name>>(c);
    seat_hold hold = seat(false);
    src.release();
    if (c.cancelled()) return pulled::stop;
    return call_and_hand_on<I>(c, w, std::move(*y), tag, &hold) ? pulled::went_on : pulled::stop;
  }
}

template <std::size_t I, class Core>
void host_worker(Core& c, std::size_t w) noexcept {
  using S = typename Core::template stage_type<I>;
  using wait_key = stage_wait_key<S::name>;
  using work_key = stage_work_key<S::name>;
  S& s = c.template stage<I>();
  const auto& prof = c.prof();
  try {
    if constexpr (I == 0) {
      source_pull* pull = nullptr;
      if constexpr (Core::source_pulled) pull = c.pull();
      // Woken (a consumer waits, or the source turned slow), the own thread fills
      // the link before it may park again: the link then absorbs the next hiccups
      // (a slow sample, a taken seat) instead of a wake each.
      [[maybe_unused]] bool filling = false;
      while (!c.cancelled() && !c.draining()) {
        yield_to_backlog();
        std::optional<source_seat> held;
        if constexpr (Core::source_pulled) {
          if (pull != nullptr) {  // stage 1's threads may call the source: park while they do
            if (!filling && !pull->park()) break;
            auto& q = c.template link<0>();
            filling = q.size() + 1 < q.capacity();
            pull->take();
            held.emplace(pull);
            if (pull->exhausted() || c.cancelled() || c.draining()) break;
          }
        }
        // The seat is held through the push: one index's items enter the link in
        // call order. false: exhausted, or the pipeline is closing.
        auto one = [&] {
          auto item = sampled_call(pull, w, [&] { return timed(prof, work_key{}, [&] { return call_stage(s, w); }); });
          if (!item) {
            if (pull != nullptr) pull->exhaust();
            return false;
          }
          const auto tag = c.next_source_tag();
          c.template flow_done<0>(tag);
          return hand_on<0>(c, std::move(*item), tag);
        };
        // With a seat, an error (the source's, or a helped stage's) ends the run before the seat goes.
        if (!(pull != nullptr ? end_run_on_throw(c, one) : one())) break;
      }
    } else {
      source_pull* pull = nullptr;
      if constexpr (I == 1 && Core::source_pulled) pull = c.pull();
      for (;;) {
        yield_to_backlog();
        if constexpr (I == 1 && Core::source_pulled) {
          if (pull != nullptr) {
            const pulled r = pull_or_pop<I>(c, w, *pull);
            if (r == pulled::went_on) continue;
            if (r == pulled::stop) break;
          }
        }
        std::optional<typename S::input_type> item;
        typename Core::tag_type tag{};
        stage_seats* seats = nullptr;
        std::size_t seat = w;
        {
          auto t = prof.scope(wait_key{});
          std::optional<source_pull::waiting> asking;  // the source's own threads make items meanwhile
          if (pull != nullptr) asking.emplace(*pull);
          item = pop_input<I>(c, tag);
          if constexpr (Core::template helped<I>) {  // a seat: a helper may be calling this stage
            seats = c.template seats<I>();
            if (item && seats != nullptr) {
              seats->take(w);
              if constexpr (fifo_stage<Core, I>()) seats->seated_one();
            }
          }
        }
        if (!item) break;
        seat_hold hold(seats, seat);
        if (c.cancelled()) break;
        if (!call_and_hand_on<I>(c, seat, std::move(*item), tag, seats != nullptr ? &hold : nullptr)) break;
      }
    }
  } catch (const pipeline_stop&) {
    c.cancel();
  } catch (...) {
    c.fail(std::current_exception());
  }
}

}  // namespace dflash::detail
