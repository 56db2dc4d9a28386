#pragma once
// The reorder buffer of an in_order stage: items that arrive before the one
// due next wait here, keyed by source sequence number, and the call that
// brings the item due next also delivers the parked ones that follow it
// (oneTBB's serial_in_order tokens). One caller at a time: the stage's one
// worker, or the holder of its direct segment's `post` lock. Tag is what
// follows the item (item.hpp): its sequence number, or its flow_stamp, which
// waits beside a parked item.

#include <cstdint>
#include <map>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "dflash/pipeline/item.hpp"

namespace dflash::detail {

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
      const bool fresh = seq > next_ && [&] {
        if constexpr (bare) return early_.emplace(seq, std::move(x)).second;
        else return early_.emplace(seq, parked_item(std::move(x), tag)).second;
      }();
      if (!fresh)
        throw std::logic_error("dflash::Pipeline: in_order stage '" + std::string(stage) + "' received item #" +
                               std::to_string(seq) + " twice");
      return true;
    }
    ++next_;
    bool ok = run(std::move(x), tag);
    while (ok && !early_.empty() && early_.begin()->first == next_ && go()) {
      auto node = early_.extract(early_.begin());
      if constexpr (bare) {
        ok = run(std::move(node.mapped()), next_++);
      } else {
        ++next_;
        ok = run(std::move(node.mapped().first), node.mapped().second);
      }
    }
    return ok;
  }
  [[nodiscard]] bool due(std::uint64_t seq) const noexcept { return seq == next_; }
  [[nodiscard]] std::uint64_t next() const noexcept { return next_; }
  [[nodiscard]] std::size_t parked() const noexcept { return early_.size(); }

 private:
  std::map<std::uint64_t, parked_item> early_;
  std::uint64_t next_ = 0;
};

}  // namespace dflash::detail
