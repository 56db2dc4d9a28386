#pragma once
// The reorder buffer of an in_order stage: items that arrive before the one
// due next wait here, keyed by source sequence number, and the call that
// brings the item due next also delivers the parked ones that follow it
// (oneTBB's serial_in_order tokens). One caller at a time: the stage's one
// worker, or the holder of its direct segment's `post` lock.

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace dflash::detail {

template <class T>
class reorder_buffer {
 public:
  /// Runs `run(x, seq)` if x is due, then the parked items that follow it
  /// while `go()` holds; parks x if it came early. `run` returns false when
  /// the pipeline is closing; so does this. A number seen twice is an error.
  template <class Run, class Go>
  bool deliver(T&& x, std::uint64_t seq, std::string_view stage, Run&& run, Go&& go) {
    if (seq != next_) {
      if (seq < next_ || !early_.emplace(seq, std::move(x)).second)
        throw std::logic_error("dflash::Pipeline: in_order stage '" + std::string(stage) + "' received item #" +
                               std::to_string(seq) + " twice");
      return true;
    }
    bool ok = run(std::move(x), next_++);
    while (ok && !early_.empty() && early_.begin()->first == next_ && go()) {
      auto node = early_.extract(early_.begin());
      ok = run(std::move(node.mapped()), next_++);
    }
    return ok;
  }
  [[nodiscard]] bool due(std::uint64_t seq) const noexcept { return seq == next_; }
  [[nodiscard]] std::uint64_t next() const noexcept { return next_; }
  [[nodiscard]] std::size_t parked() const noexcept { return early_.size(); }

 private:
  std::map<std::uint64_t, T> early_;
  std::uint64_t next_ = 0;
};

}  // namespace dflash::detail
