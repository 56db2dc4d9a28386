#pragma once
// The device worker: one thread and one stream of a stage next to a link that
// carries device slots (device_link). Everything the stage does to items is
// enqueued on its stream; the worker adds the stream-waits and records around
// the call, so the host never waits for the device per item — only once at
// exit (in-flight work completes before the worker reports done). With a
// stateful policy it also records "<stage>.gpu", the device time of the work
// per item (gpu_timer), and when it follows items (a stage after the source)
// "<stage>.age_gpu_end", the item's age when that work ended; with
// NullProfiler no timing event exists. Flow
// stamps (item.hpp) cross device links beside the slot (pipeline_core's
// slot_stamp), never inside the user's device item.
//
// Call shapes (DS = dflash::device_stream<B>; a trailing worker index is optional):
//   source  -> link   bool operator()(Out& slot, DS)         false = exhausted
//   host    -> link   void operator()(In&&, Out& slot, DS)
//   link    -> link   void operator()(In& slot, Out& slot, DS)
//   link    -> host   Out  operator()(In& slot, DS)          Out may still be written by
//                                                            the enqueued work: the next stage waits for it
//   link    -> sink   void operator()(In& slot, DS)

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/device/gpu_timer.hpp"
#include "dflash/pipeline/core.hpp"
#include "dflash/pipeline/item.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::detail {

template <std::size_t I, class Core>
void device_worker(Core& c, std::size_t w) noexcept {
  using T = typename Core::topo;
  using S = typename Core::template stage_type<I>;
  using B = typename Core::backend_type;
  using P = std::remove_cvref_t<decltype(c.prof())>;
  constexpr bool in_slot = T::template input_slot<I>();
  constexpr bool out_slot = T::template output_slot<I>();
  using wait_key = stage_wait_key<S::name>;
  using work_key = stage_work_key<S::name>;
  using gpu_key = stage_gpu_key<S::name>;
  using launch_key = stage_launch_key<S::name>;
  S& s = c.template stage<I>();
  const P& prof = c.prof();
  B& b = c.backend();
  const auto native = c.streams(I)[w];
  const int dev = c.device(I, w);
  const device_stream<B> ds(b, native, dev);
  std::optional<gpu_timer<B>> timer;
  // flow: the age of each item when its device work ended (a source's items are born after it)
  constexpr bool follow_gpu_end = Core::flow && I > 0;
  auto resolve = [&] {
    if constexpr (follow_gpu_end)
      timer->resolve(prof, gpu_key{}, [&](std::int64_t born, std::int64_t end) { c.template flow_gpu_end<I>(born, end); });
    else if constexpr (P::enabled)
      timer->resolve(prof, gpu_key{});
  };
  auto now_ns = [] {
    if constexpr (Core::flow) return Core::now_ns();
    else return std::int64_t{0};
  };
  // The stage's output held by value (char stands in for a sink's void).
  // Outside the loop and the try: work enqueued by the call may still write
  // it, so on an exception or a closed link it is freed only after the
  // synchronize below.
  using out_value = std::conditional_t<std::is_void_v<typename S::output_type>, char, typename S::output_type>;
  [[maybe_unused]] std::optional<out_value> y;
  // flow: the tag of the item in hand (its stamp, or sequence number)
  [[maybe_unused]] typename Core::tag_type tag{};
  try {
    // This thread's device is its stream's: the events and memory it makes
    // (slot events, timers, the stage's buffers) belong to it.
    if constexpr (MultiDeviceBackend<B>) b.set_device(dev);
    if constexpr (P::enabled) timer.emplace(b);
    if constexpr (follow_gpu_end) timer->anchor(native, now_ns);  // the stream is new: nothing in flight
    for (;;) {
      if constexpr (I == 0) {
        if (c.cancelled() || c.draining()) break;
      }
      // 1. the input: a slot (the stream waits for its producer), a value
      //    device work may still be writing (the stream waits for it), or a host value
      [[maybe_unused]] auto in = [&] {
        auto t = prof.scope(wait_key{});
        if constexpr (I == 0) return true;
        else if constexpr (in_slot) return c.template link<I - 1>().pop(ds);
        // A host value: the stage's host code may read it as soon as the
        // call starts, so the host waits for the work writing it, not
        // only the stream (pop_input does).
        else return pop_input<I>(c, tag);
      }();
      if constexpr (I > 0) {
        if (!in || c.cancelled()) break;
      }
      // 2. the output slot (blocks while the link's K slots are in flight)
      [[maybe_unused]] auto out = [&] {
        if constexpr (out_slot) {
          auto t = prof.scope(wait_key{});
          return c.template link<I>().acquire(ds);
        } else {
          return true;
        }
      }();
      if constexpr (out_slot) {
        if (!out) break;
      }
      // 3. the call: enqueues the work
      // flow: the slot's stamp, read after pop (the channel orders it after the producer's write)
      if constexpr (Core::flow && in_slot) tag = c.slot_stamp(I - 1, in->index());
      c.template flow_start<I>(tag);
      // "<stage>.launch": the host's enqueueing of this item's work, from the timer's first event
      // to the hand-over's record (waits for room excluded); read only by a stateful policy.
      using launch_clock = std::chrono::steady_clock;
      [[maybe_unused]] launch_clock::duration launch{};
      [[maybe_unused]] launch_clock::time_point mark;
      if constexpr (P::enabled) mark = launch_clock::now();
      if constexpr (P::enabled) timer->start(native);
      auto call = [&]() -> decltype(auto) {
        auto t = prof.scope(work_key{});
        if constexpr (I == 0) return call_stage(s, w, out->item(), ds);
        else if constexpr (in_slot && out_slot) return call_stage(s, w, in->item(), out->item(), ds);
        else if constexpr (in_slot) return call_stage(s, w, in->item(), ds);
        else return call_stage(s, w, std::move(*in), out->item(), ds);
      };
      bool more = true;
      if constexpr (I == 0) more = static_cast<bool>(call());
      else if constexpr (!out_slot && I + 1 < T::stage_count) y.emplace(call());
      else call();
      if constexpr (follow_gpu_end) timer->stop(native, tag.born_ns);
      else if constexpr (P::enabled) timer->stop(native);
      if constexpr (P::enabled) launch = launch_clock::now() - mark;
      // flow: a source's item is born as its call returns; the stamp goes beside the slot before publish
      if constexpr (I == 0) {
        if (more) tag = c.next_source_tag();
      }
      if constexpr (Core::flow && out_slot) c.slot_stamp(I, out->index()) = tag;
      if (more) c.template flow_done<I>(tag);
      // 4. hand over: record on our stream after the work
      if constexpr (P::enabled) mark = launch_clock::now();
      auto add_launch = [&] {
        if constexpr (P::enabled)
          prof.add(launch_key{},
                   std::chrono::duration_cast<typename P::duration>(launch + (launch_clock::now() - mark)));
      };
      if constexpr (in_slot) c.template link<I - 1>().release(std::move(*in), ds);
      if constexpr (out_slot) {
        if (!more) {
          c.template link<I>().abandon(std::move(*out), ds);
          break;
        }
        const bool published = c.template link<I>().publish(std::move(*out), ds);
        add_launch();
        if (!published) break;
      } else if constexpr (I + 1 < T::stage_count) {
        bool ok;
        if constexpr (T::template pending_at<I>) {
          const auto ev = c.pool(I).acquire(dev);
          b.record(ev, native);
          add_launch();
          typename Core::template item_type<I> pend{std::move(*y), ev};
          if constexpr (Core::flow) pend.stamp = tag;
          {
            auto t = prof.scope(wait_key{});
            ok = c.template link<I>().push(std::move(pend));  // false: closed, pend left intact
          }
          if (!ok) y.emplace(std::move(pend.value));  // work may still write it: freed after the sync below
        } else {
          add_launch();
          b.synchronize(native);  // a link to another process sends host bytes: the work writing them is done
          auto t = prof.scope(wait_key{});
          ok = push_output<I>(c, std::move(*y), tag);  // false: closed (the work writing *y is done)
        }
        if (!ok) break;
      } else {
        add_launch();  // a device sink: its hand-over is the release above
      }
      b.check(native);  // an asynchronous error so far: stop now, not at the end
      resolve();
      // flow: every timed item's work ended, and what was enqueued after it (hand-over
      // records) completes at once: the stream is idle, so the anchor's poll is short
      if constexpr (follow_gpu_end)
        if (timer->anchor_due()) timer->anchor(native, now_ns);
    }
  } catch (const pipeline_stop&) {
    c.cancel();
  } catch (...) {
    c.fail(std::current_exception());
  }
  // In-flight work completes before this worker counts as done (and so
  // before any slot can be freed); its errors are the pipeline's too.
  try {
    b.synchronize(native);
    if constexpr (P::enabled)
      if (timer) resolve();
  } catch (const pipeline_stop&) {  // thrown inside enqueued work: a stop, as from the call
    c.cancel();
  } catch (...) {
    c.fail(std::current_exception());
  }
}

}  // namespace dflash::detail
