#pragma once
// Sends whose bytes the sender keeps until they complete: the job's control
// messages and links' credits. By default each is an MPI_Issend, so "complete"
// means the receiver matched it; empty() after the last complete() is what
// lets a rank say FINAL knowing nothing of its is left unmatched at
// MPI_Finalize. An unsynchronised post (MPI_Isend) completes once its bytes
// are out, without the receiver's acknowledgement (a message less per send);
// whoever uses it ends the stream to that rank with a synchronous one on the
// same tag: MPI does not let it overtake the earlier ones, so its match proves
// theirs. With the job's MPI lock held only.

#include <mpi.h>

#include <cstddef>
#include <list>
#include <utility>
#include <vector>

#include "dflash/mpi/runtime.hpp"
#include "dflash/mpi/wire.hpp"

namespace dflash::mpi {

namespace detail {
// Moves each record of `posted` that done(record) says completed to `kept`,
// in order, where its memory serves a later send; true if any moved.
template <class T, class Done>
bool keep_completed(std::list<T>& posted, std::list<T>& kept, Done&& done) {
  bool any = false;
  for (auto it = posted.begin(); it != posted.end();) {
    if (done(*it)) {
      kept.splice(kept.end(), posted, it++);
      any = true;
    } else {
      ++it;
    }
  }
  return any;
}
}  // namespace detail

class owned_sends {
 public:
  enum class mode { synchronous, unsynchronised };
  void post(std::vector<std::byte> bytes, int dest, int tag, MPI_Comm comm, mode m = mode::synchronous) {
    auto& o = take();
    o.bytes = std::move(bytes);
    start(o, dest, tag, comm, m);
  }
  /// A copy of n bytes at p: into a record kept from a completed send, so a
  /// stream of small messages (credits) allocates nothing once warm.
  void post_copy(const void* p, std::size_t n, int dest, int tag, MPI_Comm comm, mode m = mode::synchronous) {
    auto& o = take();
    const auto* b = static_cast<const std::byte*>(p);
    o.bytes.assign(b, b + n);
    start(o, dest, tag, comm, m);
  }
  /// A wire type as one message (wire_pack).
  template <WireItem M>
  void post_message(M m, int dest, int tag, MPI_Comm comm) {
    post(wire_pack(m), dest, tag, comm);
  }
  /// Tests every send; true if any completed.
  bool complete() {
    return detail::keep_completed(sends_, done_, [](send& o) {
      int done = 0;
      check(MPI_Test(&o.req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      return done != 0;
    });
  }
  [[nodiscard]] bool empty() const noexcept { return sends_.empty(); }

 private:
  struct send {
    std::vector<std::byte> bytes;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  send& take() {
    if (done_.empty()) return sends_.emplace_back();
    sends_.splice(sends_.end(), done_, done_.begin());
    return sends_.back();
  }
  static void start(send& o, int dest, int tag, MPI_Comm comm, mode m) {
    const int n = static_cast<int>(o.bytes.size());
    if (m == mode::synchronous)
      check(MPI_Issend(o.bytes.data(), n, MPI_BYTE, dest, tag, comm, &o.req), "MPI_Issend");
    else
      check(MPI_Isend(o.bytes.data(), n, MPI_BYTE, dest, tag, comm, &o.req), "MPI_Isend");
  }
  std::list<send> sends_, done_;  // posted; completed, kept for their memory
};

}  // namespace dflash::mpi
