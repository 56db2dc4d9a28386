#pragma once
// The calling thread's label ("target_forward#2"): set where a profiler names
// a thread, read where a trace first meets a thread nobody named. A thread
// that runs work for another thread — the host twin's stream executor — takes
// the label of the thread that enqueued the work, so its trace track says
// whose work it ran rather than "thread 6".

#include <string>

namespace dflash::detail {

inline std::string& thread_label() noexcept {
  thread_local std::string label;
  return label;
}

}  // namespace dflash::detail
