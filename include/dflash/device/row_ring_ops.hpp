#pragma once
// row_ring_ops<B>: the four pieces of device work a row_queue enqueues on a
// stream, per backend. Everything else it does is record, wait and copy.
//   init(ctl)             every slot free, both positions 0 (once, at construction)
//   zero(counter)         a producer call's pushed-row counter to 0 (before the call's work)
//   pop(ctl, n, m, ticket) reserve up to n published rows, none if fewer than m; the ticket
//                         (device memory) says which
//   release(ctl, ticket)  hand the ticket's slots back to producers (after the consumer's work)
//
// host_stream_backend (and any backend with enqueue(stream, f)): host code
// enqueued on the stream's executor, over the same ring_control.
// cuda_backend: one-thread kernels, defined in device/row_ring_kernels.cuh —
// include that file in exactly one .cu file of a program that runs a
// device_queue_link on cuda_backend (a host TU may build the pipeline).

#include "dflash/detail/require_cccl.hpp"  // first: ring_control needs libcu++

#include <cstdint>

#include "dflash/queue/ring_control.hpp"

namespace dflash {

class cuda_backend;

/// The CUDA kernels' launchers (device/row_ring_kernels.cuh); streams as void*
/// so that host TUs need no CUDA header.
struct row_ring_kernels {
  static void init(ring_control ctl, void* stream);
  static void zero(unsigned long long* counter, void* stream);
  static void pop(ring_control ctl, std::uint32_t n, std::uint32_t at_least, ring_ticket* ticket, void* stream);
  static void release(ring_control ctl, const ring_ticket* ticket, void* stream);
};

template <class B>
struct row_ring_ops {
  static_assert(requires(B& b, typename B::stream_type s) { b.enqueue(s, [] {}); },
                "dflash::row_ring_ops<B>: this backend has no row ring operations (host_stream_backend and "
                "cuda_backend have them)");
  static void init(B& b, ring_control ctl, typename B::stream_type s) {
    b.enqueue(s, [ctl] {
      for (unsigned long long i = 0; i < ctl.capacity(); ++i) ctl.init_slot(i);
      ctl.init_header();
    });
  }
  static void zero(B& b, unsigned long long* counter, typename B::stream_type s) {
    b.enqueue(s, [counter] { *counter = 0; });
  }
  static void pop(B& b, ring_control ctl, std::uint32_t n, std::uint32_t at_least, ring_ticket* ticket,
                  typename B::stream_type s) {
    b.enqueue(s, [ctl, n, at_least, ticket] { *ticket = ctl.try_reserve_pop(n, at_least); });
  }
  static void release(B& b, ring_control ctl, const ring_ticket* ticket, typename B::stream_type s) {
    b.enqueue(s, [ctl, ticket] {
      for (std::uint32_t i = 0; i < ticket->count; ++i) ctl.release(ticket->first + i);
    });
  }
};

template <>
struct row_ring_ops<cuda_backend> {
  template <class Bk, class S>
  static void init(Bk&, ring_control ctl, S s) {
    row_ring_kernels::init(ctl, static_cast<void*>(s));
  }
  template <class Bk, class S>
  static void zero(Bk&, unsigned long long* counter, S s) {
    row_ring_kernels::zero(counter, static_cast<void*>(s));
  }
  template <class Bk, class S>
  static void pop(Bk&, ring_control ctl, std::uint32_t n, std::uint32_t at_least, ring_ticket* ticket, S s) {
    row_ring_kernels::pop(ctl, n, at_least, ticket, static_cast<void*>(s));
  }
  template <class Bk, class S>
  static void release(Bk&, ring_control ctl, const ring_ticket* ticket, S s) {
    row_ring_kernels::release(ctl, ticket, static_cast<void*>(s));
  }
};

}  // namespace dflash
