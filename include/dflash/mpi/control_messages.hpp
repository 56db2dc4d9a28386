#pragma once
// The job's own messages between ranks, as wire types (wire.hpp), each sent
// as one message on its own tag (wire_pack / wire_unpack):
//
//   STOP     any rank -> every rank   the job stops (no payload)
//   PROFILE  rank r -> rank 0         a periodic snapshot
//   FINAL    rank r -> rank 0         r's error text (empty: none), final snapshot
//                                     (empty: none, its ~job finished it), whether a stop ended its run
//   BYE      rank 0 -> every rank     every FINAL arrived; whether all were clean, whether any stopped
//
// Links use tags from tag_links up (mpi_link.hpp).

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "dflash/mpi/runtime.hpp"
#include "dflash/mpi/wire.hpp"

namespace dflash::mpi {

inline constexpr int tag_stop = 1, tag_profile = 2, tag_final = 3, tag_bye = 4, tag_clock = 5, tag_links = 100;
/// A link uses tags_per_link tags from tag_links + tags_per_link * (its name's
/// hash % link_tag_slots): its header, buffer and credit messages.
inline constexpr int link_tag_slots = 8000, tags_per_link = 3;
/// The first tag of the link that `tag` (>= tag_links) belongs to.
constexpr int link_tag_base(int tag) noexcept { return tag - (tag - tag_links) % tags_per_link; }

struct stop_message {
  std::uint8_t unused = 0;  // MPI messages may be empty, but a STOP is never confused with one
};
struct bye_message {
  std::uint8_t ok = 1;       ///< every rank's FINAL had no error
  std::uint8_t stopped = 0;  ///< some rank's FINAL said a stop ended its run
};
struct profile_message {
  std::vector<std::uint64_t> snapshot;  ///< encode_snapshot's words
};
struct final_message {
  std::vector<char> error;              ///< the rank's error, empty if none
  std::vector<std::uint64_t> snapshot;  ///< encode_snapshot's words, empty if none was taken
  std::uint8_t stopped = 0;             ///< a stop (STOP seen or asked for) ended this rank's run early
};

template <>
struct wire<profile_message> {
  static void for_each_field(profile_message& m, auto&& f) { f(m.snapshot); }
};
template <>
struct wire<final_message> {
  static void for_each_field(final_message& m, auto&& f) {
    f(m.stopped);
    f(m.error);
    f(m.snapshot);
  }
};

/// A message that arrived, still in bytes.
struct received_message {
  int source = -1;
  std::vector<std::byte> bytes;

  /// Decodes it as M; throws std::runtime_error if the bytes do not fit M.
  template <WireItem M>
  M as() const {
    M m;
    wire_unpack(m, bytes.data(), bytes.size());
    return m;
  }
};

/// The next message on `tag` from `source` (or MPI_ANY_SOURCE), if one is there.
inline std::optional<received_message> try_receive(MPI_Comm comm, int source, int tag) {
  int flag = 0;
  MPI_Status st;
  check(MPI_Iprobe(source, tag, comm, &flag, &st), "MPI_Iprobe");
  if (!flag) return std::nullopt;
  int n = 0;
  MPI_Get_count(&st, MPI_BYTE, &n);
  received_message m{st.MPI_SOURCE, std::vector<std::byte>(static_cast<std::size_t>(n))};
  check(MPI_Recv(m.bytes.data(), n, MPI_BYTE, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
  return m;
}

}  // namespace dflash::mpi
