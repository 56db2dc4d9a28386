#pragma once
// The suffixes of the keys a pipeline records for its stages and links, in
// one table: every key alias (pipeline/stage.hpp, queue/queue_keys.hpp), the
// key sets a topology lists (pipeline/topology.hpp) and the flow-row checks
// (profile/flow_rows.hpp) spell them from here.
//
//   "<stage>.wait" / ".work"        waiting for input / the stage's call
//   "<stage>.gpu"                   a device stage's device time per item
//   "<stage>.launch"                a device stage's host time enqueueing that work per item
//   "<stage>.age" / ".age_gpu_end"  an item's age when the stage starts it / when its device work ends
//   "<stage>.age_clock_backwards"   items whose clock read behind their birth stamp (a count)
//   "<sink>.e2e"                    an item's age when the sink's call ends
//   "<link>.push_wait" / ".pop_wait" a link's producer waiting for room / consumer for an item

#include "dflash/profile/fixed_string.hpp"

namespace dflash::key_suffix {

inline constexpr fixed_string wait{".wait"};
inline constexpr fixed_string work{".work"};
inline constexpr fixed_string gpu{".gpu"};
inline constexpr fixed_string launch{".launch"};
inline constexpr fixed_string age{".age"};
inline constexpr fixed_string age_gpu_end{".age_gpu_end"};
inline constexpr fixed_string age_clock_backwards{".age_clock_backwards"};
inline constexpr fixed_string e2e{".e2e"};
inline constexpr fixed_string push_wait{".push_wait"};
inline constexpr fixed_string pop_wait{".pop_wait"};

}  // namespace dflash::key_suffix
