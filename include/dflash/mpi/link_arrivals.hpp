#pragma once
// A consumer's items on an mpi_link whose buffer messages are on their way
// (link_receiver.hpp): each waits in a record until its buffers arrived
// (matched probes, so each size is known before anything is allocated), is
// checked against this rank's wire<T> layout, sized and received into, and
// goes to the source stage once its receives completed, in arrival order per
// producer. With the group's MPI lock held only.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "dflash/mpi/link_shared.hpp"
#include "dflash/mpi/runtime.hpp"
#include "dflash/mpi/wire.hpp"

namespace dflash::mpi::detail {

// Fills item from its wire<T> header and sizes its vectors to the buffer
// messages that arrived (bufs: where to receive them); else why it does not fit.
template <class T>
std::string fit_item(T& item, const std::byte* header, std::size_t len, std::uint32_t nbufs,
                     const std::vector<int>& sizes, std::vector<wire_buffer>& bufs) {
  std::string why;
  try {
    const auto ext = wire_parse(item, header, len);
    std::size_t k = 0;
    for (const auto& e : ext) {
      if (!e.count) continue;
      if (k < nbufs && e.bytes != static_cast<std::size_t>(sizes[k]) && why.empty())
        why = "its header gives buffer " + std::to_string(k) + " " + std::to_string(e.bytes) + " bytes, " +
              std::to_string(sizes[k]) + " bytes arrived";
      ++k;
    }
    if (k != nbufs)
      why = "its header gives " + std::to_string(k) + " non-empty vectors, " + std::to_string(nbufs) +
            " buffers were sent";
    if (why.empty()) wire_allocate(item, ext, bufs);
  } catch (const std::exception& e) {
    why = e.what();
  }
  return why;
}

template <class T>
class arriving_items {
 public:
  struct arrival {
    T item;
    int src = -1;
    std::uint32_t nbufs = 0;
    std::vector<std::byte> header;  // wire<T>'s part
    std::vector<MPI_Message> msgs;  // the buffer messages, matched in order
    std::vector<int> sizes;         // their byte counts, as they arrived
    std::vector<MPI_Request> reqs;
    std::vector<std::vector<std::byte>> scratch;  // a rejected item's buffers land here
    bool posted = false, rejected = false;
  };

  explicit arriving_items(std::size_t ranks) : waiting_(ranks, 0), blocked_(ranks, false), dropped_(ranks, 0) {}

  /// An item of rank src (received into `item`) waits for its nbufs buffers.
  void add(T item, int src, std::uint32_t nbufs, const std::byte* header, std::size_t len) {
    auto& a = list_.emplace_back();
    a.item = std::move(item);
    a.src = src;
    a.nbufs = nbufs;
    a.header.assign(header, header + len);
    ++waiting_[static_cast<std::size_t>(src)];
  }
  /// Items of rank src wait here (a later one of its must not overtake them).
  [[nodiscard]] bool waiting(std::size_t src) const noexcept { return waiting_[src] > 0; }
  [[nodiscard]] bool empty() const noexcept { return list_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return list_.size(); }

  /// The job's loop ended (every rank said FINAL, so every buffer sent here
  /// was sent and matched): the receives still posted complete, the matched
  /// messages not yet received are received, and their items go — the run
  /// is over — so that no request or matched message is left at MPI_Finalize.
  void retire() {
    for (auto& a : list_) {
      if (a.posted) {
        if (!a.reqs.empty())
          check(MPI_Waitall(static_cast<int>(a.reqs.size()), a.reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
        continue;
      }
      for (std::size_t k = 0; k < a.msgs.size(); ++k) {
        bin_.resize(static_cast<std::size_t>(a.sizes[k]));
        check(MPI_Mrecv(bin_.data(), a.sizes[k], MPI_BYTE, &a.msgs[k], MPI_STATUS_IGNORE), "MPI_Mrecv");
      }
    }
    list_.clear();
    std::fill(waiting_.begin(), waiting_.end(), 0);
  }

  /// From now on every buffer message of rank src is received and dropped
  /// (it sends frames this rank cannot read: the job failed), so that its
  /// sends complete and it can end.
  void drop(std::size_t src) {
    dropped_[src] = 1;
    any_dropped_ = true;
  }
  [[nodiscard]] bool dropped(std::size_t src) const noexcept { return dropped_[src] != 0; }

  /// Buffer messages: matched in order per producer (an item's come before the
  /// next item's). An item whose buffers all arrived gets its receives posted;
  /// one that does not fit gets reject(src, why), its bytes land in scratch.
  template <class Reject>
  bool match(MPI_Comm c, int buffer_tag, Reject&& reject) {
    bool busy = any_dropped_ && drop_buffers(c, buffer_tag);
    MPI_Status st;
    int flag = 0;
    std::fill(blocked_.begin(), blocked_.end(), false);
    for (auto& a : list_) {
      if (a.posted) continue;
      auto&& blk = blocked_[static_cast<std::size_t>(a.src)];
      if (blk) continue;
      while (a.msgs.size() < a.nbufs) {
        MPI_Message msg = MPI_MESSAGE_NULL;
        check(MPI_Improbe(a.src, buffer_tag, c, &flag, &msg, &st), "MPI_Improbe");
        if (!flag) break;
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        a.msgs.push_back(msg);
        a.sizes.push_back(n);
        busy = true;
      }
      if (a.msgs.size() < a.nbufs) {
        blk = true;
        continue;
      }
      post_receives(a, reject);
      busy = true;
    }
    return busy;
  }

  /// Items whose receives completed, in arrival order per producer: done(arrival&)
  /// for each (a rejected one too), then its record goes. True if any did.
  template <class Done>
  bool complete(Done&& done) {
    bool busy = false;
    std::fill(blocked_.begin(), blocked_.end(), false);
    for (auto it = list_.begin(); it != list_.end();) {
      auto&& blk = blocked_[static_cast<std::size_t>(it->src)];
      if (!blk && it->posted && (it->reqs.empty() || test_all(it->reqs))) {
        done(*it);
        --waiting_[static_cast<std::size_t>(it->src)];
        it = list_.erase(it);
        busy = true;
      } else {
        blk = true;
        ++it;
      }
    }
    return busy;
  }

 private:
  // The header's sizes against the buffer messages that arrived: on success
  // the item's vectors are sized and its receives posted; otherwise the bytes
  // land in scratch (the producer's sends must complete) and the job fails.
  template <class Reject>
  void post_receives(arrival& a, Reject& reject) {
    std::vector<wire_buffer> bufs;
    const std::string why = fit_item(a.item, a.header.data(), a.header.size(), a.nbufs, a.sizes, bufs);
    a.reqs.assign(a.nbufs, MPI_REQUEST_NULL);
    if (!why.empty()) {
      a.rejected = true;
      a.scratch.resize(a.nbufs);
      for (std::size_t k = 0; k < a.nbufs; ++k) {
        a.scratch[k].resize(static_cast<std::size_t>(a.sizes[k]));
        check(MPI_Imrecv(a.scratch[k].data(), a.sizes[k], MPI_BYTE, &a.msgs[k], &a.reqs[k]), "MPI_Imrecv");
      }
      reject(a.src, why);
    } else {
      for (std::size_t k = 0; k < a.nbufs; ++k)
        check(MPI_Imrecv(bufs[k].data, a.sizes[k], MPI_BYTE, &a.msgs[k], &a.reqs[k]), "MPI_Imrecv");
    }
    a.posted = true;
  }

  bool drop_buffers(MPI_Comm c, int buffer_tag) {
    bool busy = false;
    for (std::size_t r = 0; r < dropped_.size(); ++r)
      while (dropped_[r]) {
        int flag = 0;
        MPI_Status st;
        MPI_Message msg = MPI_MESSAGE_NULL;
        check(MPI_Improbe(static_cast<int>(r), buffer_tag, c, &flag, &msg, &st), "MPI_Improbe");
        if (!flag) break;
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        bin_.resize(static_cast<std::size_t>(n));
        check(MPI_Mrecv(bin_.data(), n, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
        busy = true;
      }
    return busy;
  }

  std::list<arrival> list_;
  std::vector<std::size_t> waiting_;  // per rank: its items here
  std::vector<bool> blocked_;         // per rank, scratch of one pass: an earlier item of its is not done
  std::vector<char> dropped_;         // per rank: drop()
  bool any_dropped_ = false;
  std::vector<std::byte> bin_;        // where dropped buffer messages land
};

}  // namespace dflash::mpi::detail
