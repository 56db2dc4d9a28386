#pragma once
// Profiler keys of the ops area. Concatenate with your own keys:
//   using my_keys = dflash::key_set_cat_t<dflash::key_set<"forward">, dflash::ops::keys>;
// GPU ops record host-side enqueue time under the same keys (they do not
// synchronise the stream to measure device time).

#include "dflash/profile/key.hpp"

namespace dflash::ops {

using keys = key_set<"doc_ids", "pack_hidden_states", "unpack_hidden_states", "readback",
                     "block_mask", "anchors">;

}  // namespace dflash::ops
