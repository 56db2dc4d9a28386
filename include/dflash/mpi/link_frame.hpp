#pragma once
// The wire format of an mpi_link (mpi_link.hpp): the tags it uses, its header
// message (the frame) and the limits both ends of a link agree on.
//
// * Wire: trivially copyable T, or wire<T> (wire.hpp). Items queued while
//   a batch header is in flight (or while the sink waits for credits) go
//   as one header message per consumer (small items cross as their
//   headers; a batch over 1 MiB of headers is split, and an item whose
//   header alone is over it is refused by send()), then each buffer
//   straight from the item's memory (MPI_Issend, no staging copy). Headers
//   and credits land in receives kept posted: testing one costs less than a
//   probe, and a message that finds its receive posted is copied once.
//
// A header message (a 0-byte one is FIN) carries a batch of items:
//   marker 1, the protocol version, the item count, then per item: the
//   number of buffer messages that follow it (so a consumer that rejects the
//   item can still receive them and let the producer's sends complete), the
//   length of its wire<T> header (the consumer checks it against its own
//   layout), the header.
// The buffers follow, item by item, in order.
// A 1-byte header message with sync_marker ends the unsynchronised header
// stream of a producer that did not close (see link_core::quiescent()); it
// carries no items.
// The marker and the version are the first two bytes in every version of
// the frame, so a consumer tells a producer built with another frame apart
// from a malformed message, and fails the job naming both versions.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dflash/mpi/control_messages.hpp"
#include "dflash/mpi/job_profile.hpp"
#include "dflash/mpi/wire.hpp"
#include "dflash/profile/fixed_string.hpp"

namespace dflash::mpi::detail {

/// The tags of the link named Name: its header, buffer and credit messages
/// (the same on every rank).
template <fixed_string Name>
struct link_tags {
  static constexpr int base =
      tag_links + tags_per_link * static_cast<int>(key_set_hash(std::array{Name.view()}) % link_tag_slots);
  static constexpr int header = base, buffer = base + 1, credit = base + 2;
};

/// How errors of the link named Name begin.
template <fixed_string Name>
std::string link_name() {
  return "dflash::mpi::mpi_link \"" + std::string(Name.view()) + "\"";
}

struct link_frame {
  using word = std::uint32_t;
  static constexpr std::uint8_t batch_marker = 1, sync_marker = 2;
  /// The frame's layout after its first two bytes: a change to it changes this.
  static constexpr std::uint8_t protocol_version = 1;
  /// Marker, version, item count.
  static constexpr std::size_t prefix = 2 + sizeof(word);
  // No header message is longer, whatever the item type: a producer splits a
  // batch to fit, and send() refuses an item whose header alone does not. So
  // a consumer receives every header into one buffer of this size it keeps
  // posted, even from a producer that disagrees on the item type (a message
  // longer than a posted receive is an error in MPI, and OpenMPI's
  // shared-memory transport then writes past the buffer).
  static constexpr std::size_t max_header_message = std::size_t{1} << 20;
  static constexpr std::size_t max_item_header = max_header_message - prefix - 2 * sizeof(word);

  /// What an item with a wire<T> header of `bytes` adds to a header message.
  static constexpr std::size_t framed(std::size_t bytes) noexcept { return 2 * sizeof(word) + bytes; }

  /// A batch's first bytes (its item count is written by set_count()).
  static void begin(std::vector<std::byte>& h) {
    h.push_back(std::byte{batch_marker});
    h.push_back(std::byte{protocol_version});
    put_word(h, 0);
  }
  static void add_item(std::vector<std::byte>& h, word nbufs, const std::vector<std::byte>& item_header) {
    put_word(h, nbufs);
    put_word(h, static_cast<word>(item_header.size()));
    h.insert(h.end(), item_header.begin(), item_header.end());
  }
  static void set_count(std::vector<std::byte>& h, word count) { std::memcpy(h.data() + 2, &count, sizeof count); }

  /// What MPI can carry of x: each buffer within an int count, its header
  /// within one header message; else std::length_error with the fix.
  template <fixed_string Name, class T>
  static void check_sendable(T& x) {
    visit_fields(x, [&]<class M>(M& m) {
      if constexpr (is_vector<M>::value) {
        const std::size_t elem = sizeof(typename M::value_type);
        if (m.size() > wire_max_buffer_bytes / elem)
          throw std::length_error(link_name<Name>() + ": one buffer of an item is " + std::to_string(m.size() * elem) +
                                  " bytes, over 2 GiB (MPI's int count limit)");
      }
    });
    if (const std::size_t header = wire_header_bytes(x); header > max_item_header)
      throw std::length_error(link_name<Name>() + ": an item's header (its fields other than vectors) is " +
                              std::to_string(header) + " bytes, over the " + std::to_string(max_item_header) +
                              " bytes one header message carries; give large arrays a std::vector field in wire<T>, so "
                              "they cross as buffers of their own");
  }

  static bool is_fin(std::size_t n) noexcept { return n == 0; }
  static bool is_sync(const std::byte* h, std::size_t n) noexcept { return n == 1 && h[0] == std::byte{sync_marker}; }

  /// An item of a parsed batch: its buffer count and where its wire<T> header lies.
  struct item {
    word nbufs;
    std::size_t at, len;
  };
  enum class parsed { ok, malformed, other_version };
  /// A header message into its items; other_version: h[1] is the producer's version.
  static parsed parse(const std::byte* h, const std::size_t size, std::vector<item>& items) {
    if (size < 2 || h[0] != std::byte{batch_marker}) return parsed::malformed;
    if (h[1] != std::byte{protocol_version}) return parsed::other_version;
    std::size_t at = prefix;
    bool ok = size >= at;
    auto next = [&] {
      word w = 0;
      if (size - at < sizeof w) ok = false;
      if (!ok) return w;
      std::memcpy(&w, h + at, sizeof w);
      at += sizeof w;
      return w;
    };
    word count = 0;
    if (ok) std::memcpy(&count, h + 2, sizeof count);
    items.clear();
    for (word i = 0; ok && i < count; ++i) {
      const word nbufs = next();
      const std::size_t len = next();
      if (!ok || size - at < len) return parsed::malformed;
      items.push_back({nbufs, at, len});
      at += len;
    }
    return ok && at == size && count > 0 ? parsed::ok : parsed::malformed;
  }

 private:
  static void put_word(std::vector<std::byte>& b, word w) {
    const auto* p = reinterpret_cast<const std::byte*>(&w);
    b.insert(b.end(), p, p + sizeof w);
  }
};

}  // namespace dflash::mpi::detail
