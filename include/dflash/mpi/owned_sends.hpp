#pragma once
// Sends whose bytes the sender keeps until they complete: the job's control
// messages and links' credits. Each is an MPI_Issend, so "complete" means the
// receiver matched it; empty() after the last complete() is what lets a rank
// say FINAL knowing nothing of its is left unmatched at MPI_Finalize.
// Progress thread only.

#include <mpi.h>

#include <cstddef>
#include <list>
#include <utility>
#include <vector>

#include "dflash/mpi/runtime.hpp"
#include "dflash/mpi/wire.hpp"

namespace dflash::mpi {

class owned_sends {
 public:
  void post(std::vector<std::byte> bytes, int dest, int tag, MPI_Comm comm) {
    auto& o = sends_.emplace_back();
    o.bytes = std::move(bytes);
    check(MPI_Issend(o.bytes.data(), static_cast<int>(o.bytes.size()), MPI_BYTE, dest, tag, comm, &o.req),
          "MPI_Issend");
  }
  /// A wire type as one message (wire_pack).
  template <WireItem M>
  void post_message(M m, int dest, int tag, MPI_Comm comm) {
    post(wire_pack(m), dest, tag, comm);
  }
  /// Tests every send; true if any completed.
  bool complete() {
    bool any = false;
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      check(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) {
        it = sends_.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    return any;
  }
  [[nodiscard]] bool empty() const noexcept { return sends_.empty(); }

 private:
  struct send {
    std::vector<std::byte> bytes;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  std::list<send> sends_;
};

}  // namespace dflash::mpi
