#pragma once
// The host worker: one thread of a host stage whose links on both sides give
// it its own threads (queue links, or a link to another process). It pops an
// item, calls the stage, pushes the result; the stage's keys record the time
// blocked on links (.wait) and inside the call (.work); with a policy that
// stamps items, the item's age as the call starts (.age) and at a sink its
// time since the source at the call's end (.e2e). A source calls until
// it is exhausted (or the pipeline drains); an in_order stage delivers through
// its reorder buffer.

#include <cstddef>
#include <optional>
#include <utility>

#include "dflash/pipeline/core.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::detail {

template <std::size_t I, class Core>
void host_worker(Core& c, std::size_t w) noexcept {
  using T = typename Core::topo;
  using S = typename Core::template stage_type<I>;
  using wait_key = stage_wait_key<S::name>;
  using work_key = stage_work_key<S::name>;
  S& s = c.template stage<I>();
  const auto& prof = c.prof();
  try {
    if constexpr (I == 0) {
      while (!c.cancelled() && !c.draining()) {
        auto item = timed(prof, work_key{}, [&] { return call_stage(s, w); });
        if (!item) break;
        const auto tag = c.next_source_tag();
        c.template flow_done<0>(tag);
        bool ok;
        {
          auto t = prof.scope(wait_key{});
          ok = c.template push_output<0>(std::move(*item), tag);
        }
        if (!ok) break;
      }
    } else {
      // Calls the stage on one item and hands the result on; false: the pipeline is closing.
      using tag_type = typename Core::tag_type;
      auto process = [&](typename S::input_type&& x, const tag_type& tag) -> bool {
        c.template flow_start<I>(tag);
        if constexpr (I + 1 < T::stage_count) {
          typename S::output_type y = timed(prof, work_key{}, [&] { return call_stage(s, w, std::move(x)); });
          c.template flow_done<I>(tag);
          auto t = prof.scope(wait_key{});
          return c.template push_output<I>(std::move(y), tag);
        } else {
          timed(prof, work_key{}, [&] { call_stage(s, w, std::move(x)); });
          c.template flow_done<I>(tag);
          return true;
        }
      };
      for (;;) {
        std::optional<typename S::input_type> item;
        tag_type tag{};
        {
          auto t = prof.scope(wait_key{});
          item = c.template pop_input<I>(tag);
        }
        if (!item || c.cancelled()) break;
        bool ok;
        if constexpr (T::template in_order_at<I>) ok = c.template deliver_in_order<I>(std::move(*item), tag, process);
        else ok = process(std::move(*item), tag);
        if (!ok) break;
      }
    }
  } catch (const pipeline_stop&) {
    c.cancel();
  } catch (...) {
    c.fail(std::current_exception());
  }
}

}  // namespace dflash::detail
