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
#include <stdexcept>
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

/// Fills x from a header (and sizes its vectors); returns the buffers the
/// caller then receives into, in order. A header of the wrong size throws.
template <WireItem T>
void wire_decode(T& x, const std::byte* header, std::size_t bytes, std::vector<wire_buffer>& buffers) {
  buffers.clear();
  std::size_t at = 0;
  auto take = [&](void* dst, std::size_t n) {
    if (at + n > bytes) throw std::runtime_error("dflash::mpi: item header shorter than its wire<T> layout");
    std::memcpy(dst, header + at, n);
    at += n;
  };
  detail::visit_fields(x, [&]<class M>(M& m) {
    if constexpr (detail::is_vector<M>::value) {
      std::uint64_t n = 0;
      take(&n, sizeof n);
      m.resize(n);
      if (n) buffers.push_back({static_cast<void*>(m.data()), n * sizeof(typename M::value_type)});
    } else {
      take(&m, sizeof(M));
    }
  });
  if (at != bytes) throw std::runtime_error("dflash::mpi: item header longer than its wire<T> layout");
}

}  // namespace dflash::mpi
