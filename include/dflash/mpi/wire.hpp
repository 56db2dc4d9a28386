#pragma once
// How an item crosses an mpi_link: a header of fixed-size fields (sent as one
// message) plus zero or more contiguous buffers, each sent straight from its
// own memory (no packing copy), so with CUDA-aware MPI a device buffer can be
// one of them later.
//
// Trivially copyable items need nothing: they are the header. Anything else
// specialises dflash::mpi::wire<T> with a for_each_field that visits every
// member in a fixed order:
//
//   template <> struct dflash::mpi::wire<HsItem> {
//     static void for_each_field(HsItem& x, auto&& f) { f(x.step); f(x.hidden); f(x.doc_ids); }
//   };
//
// f(scalar&)          any trivially copyable member: copied into the header
// f(std::vector<U>&)  U trivially copyable: its size goes in the header, its
//                     bytes are one message of their own (resized on receipt)

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace dflash::mpi {

/// Customisation point; see the file comment.
template <class T>
struct wire;

namespace detail {
template <class T>
struct is_vector : std::false_type {};
template <class U, class A>
struct is_vector<std::vector<U, A>> : std::true_type {};

struct probe_visitor {
  template <class M>
  void operator()(M&) const {}
};
}  // namespace detail

template <class T>
concept WireCustom = requires(T& x) { wire<T>::for_each_field(x, detail::probe_visitor{}); };

/// What an mpi_link can carry: default-constructible (the receiver builds it)
/// and either trivially copyable or described by wire<T>.
template <class T>
concept WireItem = std::default_initializable<T> && std::movable<T> &&
                   (WireCustom<T> || std::is_trivially_copyable_v<T>);

/// A contiguous buffer of an item, by pointer and size.
struct wire_buffer {
  void* data;
  std::size_t bytes;
};

namespace detail {
template <class T>
void visit_fields(T& x, auto&& f) {
  if constexpr (WireCustom<T>) {
    wire<T>::for_each_field(x, [&]<class M>(M& m) {
      if constexpr (is_vector<M>::value) {
        static_assert(std::is_trivially_copyable_v<typename M::value_type>,
                      "dflash::mpi::wire: a std::vector field must hold a trivially copyable type");
        f(m);
      } else {
        static_assert(std::is_trivially_copyable_v<M>,
                      "dflash::mpi::wire: a field must be trivially copyable or a std::vector of such");
        f(m);
      }
    });
  } else {
    f(x);  // trivially copyable: the whole item is the header
  }
}
}  // namespace detail

/// The header of x (scalars' bytes, then one uint64 size per vector) and its buffers.
template <WireItem T>
void wire_encode(T& x, std::vector<std::byte>& header, std::vector<wire_buffer>& buffers) {
  header.clear();
  buffers.clear();
  detail::visit_fields(x, [&]<class M>(M& m) {
    if constexpr (detail::is_vector<M>::value) {
      const std::uint64_t n = m.size();
      const auto* p = reinterpret_cast<const std::byte*>(&n);
      header.insert(header.end(), p, p + sizeof n);
      if (n) buffers.push_back({static_cast<void*>(m.data()), n * sizeof(typename M::value_type)});
    } else {
      const auto* p = reinterpret_cast<const std::byte*>(&m);
      header.insert(header.end(), p, p + sizeof(M));
    }
  });
}

/// The most bytes one buffer of an item can have: one MPI message, and MPI
/// counts are int.
inline constexpr std::size_t wire_max_buffer_bytes = static_cast<std::size_t>(INT32_MAX);

/// One vector field as a header describes it.
struct wire_extent {
  std::uint64_t count;  ///< elements
  std::size_t bytes;    ///< count * sizeof(element), checked not to overflow
};

/// Bytes of T's header: its scalars' sizes plus 8 per vector field. The same
/// for every item of T (x is only visited, not read).
template <WireItem T>
std::size_t wire_header_bytes(T& x) {
  std::size_t n = 0;
  detail::visit_fields(x, [&]<class M>(M&) { n += detail::is_vector<M>::value ? sizeof(std::uint64_t) : sizeof(M); });
  return n;
}

/// Reads x's scalars from a header and returns its vectors' extents in field
/// order. Allocates nothing: the header's length is checked against x's layout
/// before any field is read, and a size field whose byte count overflows
/// throws, so a short, long or garbled header costs no memory. The caller
/// checks the extents against what actually arrived, then calls wire_allocate.
template <WireItem T>
std::vector<wire_extent> wire_parse(T& x, const std::byte* header, std::size_t bytes) {
  const std::size_t need = wire_header_bytes(x);
  if (bytes != need)
    throw std::runtime_error("dflash::mpi: item header of " + std::to_string(bytes) +
                             " bytes, this rank's wire<T> layout needs " + std::to_string(need) +
                             " (producer and consumer disagree on the item type or its wire<T>)");
  std::vector<wire_extent> ext;
  std::size_t at = 0;
  detail::visit_fields(x, [&]<class M>(M& m) {
    if constexpr (detail::is_vector<M>::value) {
      std::uint64_t n = 0;
      std::memcpy(&n, header + at, sizeof n);
      at += sizeof n;
      constexpr std::size_t elem = sizeof(typename M::value_type);
      if (n > std::numeric_limits<std::size_t>::max() / elem)
        throw std::runtime_error("dflash::mpi: item header gives a vector " + std::to_string(n) +
                                 " elements: its size in bytes overflows");
      ext.push_back({n, static_cast<std::size_t>(n) * elem});
    } else {
      std::memcpy(&m, header + at, sizeof(M));
      at += sizeof(M);
    }
  });
  return ext;
}

/// Sizes x's vectors to the extents (from wire_parse, already validated) and
/// returns the buffers to receive into: the non-empty vectors, in order.
template <WireItem T>
void wire_allocate(T& x, const std::vector<wire_extent>& ext, std::vector<wire_buffer>& buffers) {
  buffers.clear();
  std::size_t k = 0;
  detail::visit_fields(x, [&]<class M>(M& m) {
    if constexpr (detail::is_vector<M>::value) {
      if (k >= ext.size()) throw std::logic_error("dflash::mpi::wire_allocate: fewer extents than vector fields");
      m.resize(static_cast<std::size_t>(ext[k].count));
      if (ext[k].count) buffers.push_back({static_cast<void*>(m.data()), ext[k].bytes});
      ++k;
    }
  });
}

/// Fills x from a header and sizes its vectors; returns the buffers the caller
/// then receives into, in order. Validates before allocating: a header of the
/// wrong length, or a vector over max_buffer_bytes, throws with x's vectors
/// untouched. (mpi_link also checks each size against the message that arrived.)
template <WireItem T>
void wire_decode(T& x, const std::byte* header, std::size_t bytes, std::vector<wire_buffer>& buffers,
                 std::size_t max_buffer_bytes = wire_max_buffer_bytes) {
  buffers.clear();
  const auto ext = wire_parse(x, header, bytes);
  for (const auto& e : ext)
    if (e.bytes > max_buffer_bytes)
      throw std::runtime_error("dflash::mpi: item header gives a vector of " + std::to_string(e.bytes) +
                               " bytes, over the limit of " + std::to_string(max_buffer_bytes));
  wire_allocate(x, ext, buffers);
}

/// x as one message: its header, then its buffers' bytes in order. For small
/// messages (the job's control messages) where one copy costs less than a
/// message per buffer.
template <WireItem T>
std::vector<std::byte> wire_pack(T& x) {
  std::vector<std::byte> out;
  std::vector<wire_buffer> bufs;
  wire_encode(x, out, bufs);
  for (const auto& b : bufs) {
    const auto* p = static_cast<const std::byte*>(b.data);
    out.insert(out.end(), p, p + b.bytes);
  }
  return out;
}

/// Inverse of wire_pack. The buffers' sizes from the header must add up to
/// the bytes after it exactly; otherwise it throws, allocating nothing.
template <WireItem T>
void wire_unpack(T& x, const std::byte* bytes, std::size_t n) {
  const std::size_t head = wire_header_bytes(x);
  if (n < head)
    throw std::runtime_error("dflash::mpi: message of " + std::to_string(n) + " bytes, its header alone needs " +
                             std::to_string(head));
  const auto ext = wire_parse(x, bytes, head);
  std::size_t rest = n - head;
  for (const auto& e : ext) {
    if (e.bytes > rest)
      throw std::runtime_error("dflash::mpi: message of " + std::to_string(n) +
                               " bytes is shorter than its header says");
    rest -= e.bytes;
  }
  if (rest != 0)
    throw std::runtime_error("dflash::mpi: message of " + std::to_string(n) + " bytes has " + std::to_string(rest) +
                             " bytes more than its header says");
  std::vector<wire_buffer> bufs;
  wire_allocate(x, ext, bufs);
  const std::byte* at = bytes + head;
  for (const auto& b : bufs) {
    std::memcpy(b.data, at, b.bytes);
    at += b.bytes;
  }
}

}  // namespace dflash::mpi
