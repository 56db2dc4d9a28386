#pragma once
// The reorder buffer of an in_order stage: items that arrive before the one
// due next wait here, by source sequence number, and the call that
// brings the item due next also delivers the parked ones that follow it
// (oneTBB's serial_in_order tokens). One caller at a time: the stage's one
// worker, or the holder of its direct segment's `post` lock. Tag is what
// follows the item (item.hpp): its sequence number, or its flow_stamp, which
// waits beside a parked item.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/detail/format.hpp"
#include "dflash/detail/indexed_storage.hpp"
#include "dflash/pipeline/item.hpp"

namespace dflash::detail {

/// The error of an item whose sequence number was already delivered or parked.
[[noreturn]] inline void throw_seen_twice(std::string_view stage, std::uint64_t seq) {
  throw std::logic_error(formatted("dflash::Pipeline: in_order stage '%.*s' received item #%llu twice",
                                   static_cast<int>(stage.size()), stage.data(), static_cast<unsigned long long>(seq)));
}

template <class T, class Tag = std::uint64_t>
class reorder_buffer {
  static constexpr bool bare = std::is_same_v<Tag, std::uint64_t>;  // the tag is the key itself
  using parked_item = std::conditional_t<bare, T, std::pair<T, Tag>>;

 public:
  /// Runs `run(x, tag)` if x is due, then the parked items that follow it
  /// while `go()` holds; parks x if it came early. `run` returns false when
  /// the pipeline is closing; so does this. A number seen twice is an error.
  template <class Run, class Go>
  bool deliver(T&& x, const Tag& tag, std::string_view stage, Run&& run, Go&& go) {
    const std::uint64_t seq = seq_of(tag);
    if (seq != next_) {
      if (seq < next_) throw_seen_twice(stage, seq);
      park(seq, std::move(x), tag, stage);
      return true;
    }
    ++next_;
    bool ok = run(std::move(x), tag);
    while (ok && count_ != 0 && slot(next_).has_value() && go()) {
      std::optional<parked_item>& s = slot(next_);
      parked_item p = std::move(*s);
      s.reset();
      --count_;
      if constexpr (bare) {
        ok = run(std::move(p), next_++);
      } else {
        ++next_;
        ok = run(std::move(p.first), p.second);
      }
    }
    return ok;
  }
  [[nodiscard]] bool due(std::uint64_t seq) const noexcept { return seq == next_; }
  [[nodiscard]] std::uint64_t next() const noexcept { return next_; }
  [[nodiscard]] std::size_t parked() const noexcept { return count_; }

 private:
  // Parked items live in a ring indexed by sequence number: item s is in
  // ring_[s % ring_.size()], and every parked number lies in
  // [next_, next_ + ring_.size()), so no two share a slot. Lighter to compile
  // than a std::map, and O(1) per item; it grows (doubling) to the widest gap
  // seen between the item due and the latest arrival.
  std::optional<parked_item>& slot(std::uint64_t seq) noexcept {
    return ring_[static_cast<std::size_t>(seq % ring_.size())];
  }
  void park(std::uint64_t seq, T&& x, const Tag& tag, std::string_view stage) {
    if (seq - next_ >= ring_.size()) grow(seq - next_ + 1);
    std::optional<parked_item>& s = slot(seq);
    if (s) throw_seen_twice(stage, seq);
    if constexpr (bare) s.emplace(std::move(x));
    else s.emplace(std::move(x), tag);
    ++count_;
  }
  void grow(std::uint64_t need) {
    std::size_t n = ring_.empty() ? 16 : 2 * ring_.size();
    while (n < need) n *= 2;
    std::vector<std::optional<parked_item>> bigger(n);
    for (std::uint64_t seq = next_; seq < next_ + ring_.size(); ++seq)
      if (auto& s = slot(seq)) bigger[static_cast<std::size_t>(seq % n)] = std::move(s);
    ring_ = std::move(bigger);
  }

  std::vector<std::optional<parked_item>> ring_;
  std::size_t count_ = 0;
  std::uint64_t next_ = 0;
};

/// The reorder buffers of a pipeline's in_order stages (Topo: its topology;
/// Tag: what follows an item). Stages that are not in_order hold an empty
/// placeholder, so a build compiles no buffer (a std::map) it never uses.
template <class Topo, class Tag>
class ordered_stages {
  template <std::size_t I>
  using stage_type = typename Topo::template stage_type<I>;
  template <std::size_t I>
  using value = std::conditional_t<std::is_void_v<typename stage_type<I>::input_type>, char,
                                   typename stage_type<I>::input_type>;
  struct no_reorder {};
  template <std::size_t I>
  using order_type = std::conditional_t<Topo::template in_order_at<I>, reorder_buffer<value<I>, Tag>, no_reorder>;
  template <std::size_t... I>
  static auto orders_of(std::index_sequence<I...>) -> indexed_storage<order_type<I>...>;

 public:
  template <std::size_t I>
  [[nodiscard]] auto& reorder() noexcept {
    return detail::get<I>(orders_);
  }
  /// in_order stage I: runs `run(x, tag)` if x is due, then the parked items
  /// that follow it, while `go()` holds.
  template <std::size_t I, class Run, class Go>
  bool deliver_in_order(typename stage_type<I>::input_type&& x, const Tag& tag, Run&& run, Go&& go) {
    return reorder<I>().deliver(std::move(x), tag, stage_type<I>::name.view(), std::forward<Run>(run),
                                std::forward<Go>(go));
  }
  /// An in_order stage that still parks items after a normal end waited for
  /// an item that never came: the loss, said, instead of ending as if
  /// complete; empty if every stage delivered everything.
  [[nodiscard]] std::string unfinished() {
    std::string why;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         if constexpr (Topo::template in_order_at<I>) {
           auto& o = reorder<I>();
           if (o.parked() != 0 && why.empty()) {
             const std::string_view name = stage_type<I>::name.view();
             why = formatted("dflash::Pipeline: in_order stage '%.*s' ended with %zu item(s) parked: item #%llu never "
                             "arrived, so they were not delivered",
                             static_cast<int>(name.size()), name.data(), static_cast<std::size_t>(o.parked()),
                             static_cast<unsigned long long>(o.next()));
           }
         }
       }()),
       ...);
    }(std::make_index_sequence<Topo::stage_count>{});
    return why;
  }

 private:
  decltype(orders_of(std::make_index_sequence<Topo::stage_count>{})) orders_;
};

}  // namespace dflash::detail
