#pragma once
// What a link carries for an item: the stage's value itself, or the value in
// an envelope with what the pipeline needs to know about it —
//   sequenced<T>   its source sequence number (pipelines with an in_order stage)
//   pending<T, B>  an event device work that still writes it records (host
//                  links after a device stage: the consumer waits on it)
// A pipeline that needs neither carries the user's type unchanged.

#include <cstdint>

namespace dflash::detail {

template <class T>
struct sequenced {
  std::uint64_t seq;
  T value;
};

template <class T, class B>
struct pending {
  T value;
  typename B::event_type ev;
};

}  // namespace dflash::detail
