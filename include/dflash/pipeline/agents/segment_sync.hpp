#pragma once
// One per direct segment (agents/direct_segment.hpp): the locks of its serial
// parts and the turn of its in_order stage.

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace dflash::detail {

struct segment_sync {
  std::mutex pre, post;  // stages before / after the segment's parallel stage
  std::condition_variable turn;
  std::uint64_t issued = 0;  // the source's next sequence number (under pre)
  bool exhausted = false;    // the source returned empty (under pre)
};

}  // namespace dflash::detail
