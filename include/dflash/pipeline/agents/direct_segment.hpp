#pragma once
// The direct segment: stages A..B joined by links whose consumer runs on the
// producer's threads (direct_link), run on the threads of the segment's one
// parallel stage p. Each thread takes an item (calls the source, or pops the
// segment's input link) and carries it through every stage of the segment.
// Stages before p run under `pre` (held from taking the item), p runs
// unlocked, stages after p under `post`; an in_order stage right after p parks
// early items in its reorder buffer, and the thread that brings the item due
// next also runs the parked ones that follow it (oneTBB's tokens). The time a
// thread waits for the next stage's turn is "<link>.push_wait".

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "dflash/detail/spin.hpp"
#include "dflash/detail/std_chrono.hpp"
#include "dflash/pipeline/agents/segment_sync.hpp"
#include "dflash/pipeline/core.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::detail {

template <std::size_t A, class Core>
class direct_segment {
  using T = typename Core::topo;
  static constexpr std::size_t B = T::template segment_last<A>();
  template <std::size_t K>
  using stage_t = typename Core::template stage_type<K>;
  using tag_type = typename Core::tag_type;  // what follows an item: its sequence number or flow_stamp

 public:
  direct_segment(Core& c, std::size_t w)
      : c_(c), g_(c.segment(A)), prof_(c.prof()), w_(w), p_(c.template parallel_stage<A>()),
        pre_(g_.pre, std::defer_lock), post_(g_.post, std::defer_lock) {}

  /// The thread's loop: items until the input ends or the pipeline stops.
  void run() noexcept {
    const auto release = [&]() noexcept {  // a stage may throw while its thread holds a lock
      if (pre_.owns_lock()) pre_.unlock();
      if (post_.owns_lock()) post_.unlock();
    };
    // On a throw the pipeline is cancelled before the locks are released, so
    // no thread queued on a serial stage's lock calls it again with a later
    // item (cancel() takes neither lock, so it cannot deadlock here).
    try {
      while (!c_.cancelled()) {
        const bool more = take();
        release();
        if (!more) break;
      }
    } catch (const pipeline_stop&) {
      c_.cancel();
      release();
    } catch (...) {
      c_.fail(std::current_exception());
      release();
    }
  }

 private:
  // Takes the segment's next input and carries it through; false: no more input or closing.
  bool take() {
    using S = stage_t<A>;
    if constexpr (A == 0) {
      {
        auto t = prof_.scope(stage_wait_key<S::name>{});
        lock_spinning(pre_);  // the source runs one call at a time; sequence numbers follow its order
      }
      if (g_.exhausted || c_.draining() || c_.cancelled()) return false;
      auto item = timed(prof_, stage_work_key<S::name>{}, [&] { return call_stage(c_.template stage<0>(), 0); });
      if (!item) {
        g_.exhausted = true;
        return false;
      }
      const tag_type tag = c_.source_tag(g_.issued++);
      c_.template flow_done<0>(tag);
      return step<1>(std::move(*item), tag);
    } else {
      std::optional<typename S::input_type> item;
      tag_type tag{};
      {
        auto t = prof_.scope(stage_wait_key<S::name>{});
        item = pop_input<A>(c_, tag);
      }
      if (!item || c_.cancelled()) return false;
      auto first = [&](typename S::input_type&& x, const tag_type& g) { return step<A>(std::move(x), g); };
      if constexpr (T::template in_order_at<A>) return c_.template deliver_in_order<A>(std::move(*item), tag, first);
      else return first(std::move(*item), tag);
    }
  }

  // Stage K of the segment: takes the lock K runs under, then calls it.
  template <std::size_t K>
  bool step(typename stage_t<K>::input_type&& x, const tag_type& tag) {
    auto wait_scope = [&] {
      if constexpr (K == A) return prof_.scope(stage_wait_key<stage_t<K>::name>{});
      else return prof_.scope(push_wait_key<Core::template link_kind<K - 1>::name>{});
    };
    if (K < p_) {
      if (!pre_.owns_lock()) {
        {
          auto t = wait_scope();
          lock_spinning(pre_);
        }
        if (c_.cancelled()) return false;  // queued on the lock while the pipeline stopped: no new call
      }
    } else {
      if (pre_.owns_lock()) pre_.unlock();
      if (K > p_ && !post_.owns_lock()) {
        {
          auto t = wait_scope();
          lock_spinning(post_);
        }
        if (c_.cancelled()) return false;
        if constexpr (T::template in_order_at<K> && K > A) return ordered_step<K>(std::move(x), tag);
      }
    }
    return call<K>(std::move(x), tag);
  }

  // Under `post`: runs x if it is due, then the parked items that follow it;
  // parks x if it is early and the window has room; else waits for its turn.
  template <std::size_t K>
  bool ordered_step(typename stage_t<K>::input_type&& x, const tag_type& tag) {
    const std::uint64_t seq = seq_of(tag);
    auto& o = c_.template reorder<K>();
    const std::size_t window = c_.shape().depths[K - 1];
    if (!o.due(seq) && o.parked() >= window) {
      auto t = prof_.scope(push_wait_key<Core::template link_kind<K - 1>::name>{});
      const auto ready = [&] { return o.due(seq) || o.parked() < window || c_.cancelled(); };
      for (int i = 0; i < 32 && !ready(); ++i) {  // the turn usually comes within a call: spin before sleeping
        post_.unlock();
        std::this_thread::yield();
        lock_spinning(post_);
      }
      // cancel() notifies without taking `post` (stop() must not block on a
      // running call, or deadlock when a stage calls it): a notify that falls
      // between our check and our wait is caught by the next timed check.
      while (!g_.turn.wait_for(post_, std::chrono::milliseconds(2), ready)) {
      }
    }
    if (c_.cancelled()) return false;
    const bool due = o.due(seq);
    const bool ok = c_.template deliver_in_order<K>(
        std::move(x), tag, [&](typename stage_t<K>::input_type&& v, const tag_type& g) { return call<K>(std::move(v), g); });
    if (due) {
      post_.unlock();
      g_.turn.notify_all();  // the item due next, or room in the window
    }
    return ok;
  }

  // Calls stage K (serial stages get worker index 0), then the next stage or the segment's output link.
  template <std::size_t K>
  bool call(typename stage_t<K>::input_type&& x, const tag_type& tag) {
    using S = stage_t<K>;
    S& s = c_.template stage<K>();
    const std::size_t w = K == p_ ? w_ : 0;
    c_.template flow_start<K>(tag);
    if constexpr (K + 1 == T::stage_count) {
      timed(prof_, stage_work_key<S::name>{}, [&] { call_stage(s, w, std::move(x)); });
      c_.template flow_done<K>(tag);
      return true;
    } else {
      typename S::output_type y = timed(prof_, stage_work_key<S::name>{}, [&] { return call_stage(s, w, std::move(x)); });
      c_.template flow_done<K>(tag);
      if constexpr (K < B) {
        return step<K + 1>(std::move(y), tag);
      } else {
        auto t = prof_.scope(stage_wait_key<S::name>{});
        return push_output<K>(c_, std::move(y), tag);
      }
    }
  }

  Core& c_;
  segment_sync& g_;
  const decltype(std::declval<Core&>().prof())& prof_;
  std::size_t w_, p_;  // the thread's index; the parallel stage (stage_count: none, one thread)
  std::unique_lock<std::mutex> pre_, post_;
};

template <std::size_t A, class Core>
void segment_worker(Core& c, std::size_t w) noexcept {
  direct_segment<A, Core>(c, w).run();
}

}  // namespace dflash::detail
