#pragma once
// A producer's posted batches on an mpi_link (link_sender.hpp): each record
// keeps a batch's items, its header message (link_frame.hpp) and its buffers'
// addresses until every send of the batch completed; a completed record is
// kept, and its vectors' memory with it, for the next batch, so posting
// allocates nothing once warm. With the group's MPI lock held only.

#include <mpi.h>

#include <cstddef>
#include <list>
#include <utility>
#include <vector>

#include "dflash/mpi/link_frame.hpp"
#include "dflash/mpi/link_shared.hpp"
#include "dflash/mpi/owned_sends.hpp"
#include "dflash/mpi/runtime.hpp"
#include "dflash/mpi/wire.hpp"

namespace dflash::mpi::detail {

template <class T>
class sent_batches {
 public:
  struct batch {
    std::vector<T> items;
    std::vector<std::byte> header;
    std::vector<wire_buffer> bufs;  // the items' buffers, in order
    std::vector<MPI_Request> reqs;  // the header's first, then the buffers'
    bool header_done = false;
  };

  /// A new batch of up to `reserve` items for one consumer, its header begun.
  batch& open(std::size_t reserve) {
    auto& b = take();
    b.items.reserve(reserve);  // items stay where they are encoded from
    link_frame::begin(b.header);
    return b;
  }
  /// x joins batch b: its header into b's, its buffers after the others'.
  void add(batch& b, T&& x) {
    // The buffers go from the item the record keeps until its sends
    // complete: encoded after the move (a type without a move constructor
    // copies into new memory and the original is freed).
    auto& y = b.items.emplace_back(std::move(x));
    wire_encode(y, item_header_, item_bufs_);
    link_frame::add_item(b.header, static_cast<link_frame::word>(item_bufs_.size()), item_header_);
    b.bufs.insert(b.bufs.end(), item_bufs_.begin(), item_bufs_.end());
  }
  /// Posts batch b to dest: its header (MPI_Issend if `synchronous`, else
  /// MPI_Isend), then each buffer (MPI_Issend). Sizes were checked by send();
  /// posting is all or nothing.
  void post(batch& b, int dest, int header_tag, int buffer_tag, MPI_Comm c, bool synchronous) {
    link_frame::set_count(b.header, static_cast<link_frame::word>(b.items.size()));
    b.reqs.assign(1 + b.bufs.size(), MPI_REQUEST_NULL);
    const int hn = static_cast<int>(b.header.size());
    if (synchronous)
      check(MPI_Issend(b.header.data(), hn, MPI_BYTE, dest, header_tag, c, &b.reqs[0]), "MPI_Issend");
    else
      check(MPI_Isend(b.header.data(), hn, MPI_BYTE, dest, header_tag, c, &b.reqs[0]), "MPI_Isend");
    for (std::size_t k = 0; k < b.bufs.size(); ++k)
      check(MPI_Issend(b.bufs[k].data, static_cast<int>(b.bufs[k].bytes), MPI_BYTE, dest, buffer_tag, c,
                       &b.reqs[1 + k]),
            "MPI_Issend");
  }
  /// FIN to dest: a 0-byte header message, synchronous. Not a batch: no
  /// header_matched() for it.
  void post_fin(int dest, int header_tag, MPI_Comm c) {
    auto& b = take();
    b.header_done = true;
    b.reqs.assign(1, MPI_REQUEST_NULL);
    check(MPI_Issend(nullptr, 0, MPI_BYTE, dest, header_tag, c, &b.reqs[0]), "MPI_Issend");
  }
  /// Tests the posted sends: header_matched() once per batch whose header
  /// completed, sent(items) once per record whose sends all completed (its
  /// record is then kept for reuse). True if any did.
  template <class HeaderMatched, class Sent>
  bool complete(HeaderMatched&& header_matched, Sent&& sent) {
    bool busy = false;
    const bool freed = keep_completed(posted_, free_, [&](batch& b) {
      if (!b.header_done) {
        int done = 0;
        check(MPI_Test(&b.reqs[0], &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) {
          b.header_done = true;
          header_matched();
          busy = true;
        }
      }
      // a batch of items without buffers is done with its header (FIN has no items: tested here)
      if (!b.header_done || !((b.reqs.size() == 1 && !b.items.empty()) || test_all(b.reqs))) return false;
      sent(b.items);
      b.items.clear();
      b.header.clear();
      b.bufs.clear();
      b.reqs.clear();
      b.header_done = false;
      return true;
    });
    return freed || busy;
  }
  /// No send is in flight.
  [[nodiscard]] bool empty() const noexcept { return posted_.empty(); }

 private:
  // A record, from the completed ones when there are some.
  batch& take() {
    if (free_.empty()) return posted_.emplace_back();
    posted_.splice(posted_.end(), free_, free_.begin());
    return posted_.back();
  }

  std::list<batch> posted_, free_;  // posted; completed, kept for their memory
  // add()'s scratch
  std::vector<std::byte> item_header_;
  std::vector<wire_buffer> item_bufs_;
};

}  // namespace dflash::mpi::detail
