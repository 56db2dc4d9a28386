#pragma once
// device_lease: a slot popped from a device_channel and held outside any stage — by a
// framework's tensor (DLPack), a Python loop, a consumer that keeps a batch across steps —
// for as long as its holders want it. Shared: copies hold the same slot, and the slot goes back
// to the channel when the last copy goes, after every stream that used it is done with it.
//
//   auto lease = dflash::device_lease<Ch>::pop(channel, s);  // s waits for the producer's work
//   lease->ready_on(c);       // c (any stream of the backend) waits too; the host does not block
//   use(lease->item(), c);
//   lease->used_on(c);        // the slot is reused only after c's work on it
//   lease.reset();            // the last holder: `consumed` is recorded on s, the slot goes back
//
// Both joins go through s, the lease's stream, with an event (the only way one stream waits for
// another without the host blocking): ready_on records on s and makes c wait; used_on records
// on c and makes s wait, so the release recorded on s comes after every user's work. Each call
// makes one event and destroys it at once: CUDA and the twin both keep a recorded marker alive
// for the waits that captured it. The calling thread's current device must be the device of
// the stream an event is recorded on, as CUDA requires.
//
// The channel is held by a shared_ptr (an aliasing one into its owner works): a lease dropped
// after the pipeline that filled it ended still has a channel to go back to.

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "dflash/device/backend.hpp"
#include "dflash/device/device_stream.hpp"

namespace dflash {

template <class Channel>
class device_lease {
 public:
  using channel_type = Channel;
  using item_type = typename Channel::item_type;
  using backend_type = typename Channel::backend_type;
  using stream_type = typename Channel::stream_type;
  using native_stream = typename backend_type::stream_type;

  /// The next published slot, popped on `s` (which then waits for the producer's work); `s`
  /// must outlive the lease. Empty: the channel is closed and drained, or cancelled.
  [[nodiscard]] static std::optional<device_lease> pop(std::shared_ptr<Channel> channel, const stream_type& s) {
    if (!channel) throw std::invalid_argument("dflash::device_lease::pop: null channel");
    auto r = channel->pop(s);
    if (!r) return std::nullopt;
    return device_lease(std::make_shared<state>(std::move(channel), std::move(*r), s));
  }

  /// The slot's item (or its mirror on the lease stream's device).
  [[nodiscard]] item_type& item() const noexcept { return st_->ref.item(); }
  [[nodiscard]] std::size_t slot_index() const noexcept { return st_->ref.index(); }
  [[nodiscard]] const stream_type& stream() const noexcept { return st_->s; }
  /// How many leases (and exported tensors) hold the slot now.
  [[nodiscard]] long holders() const noexcept { return st_.use_count(); }

  /// Work enqueued on `c` after this starts only once the producer's work on the slot is done.
  void ready_on(native_stream c) const { join(c, st_->s.native()); }

  /// The slot is not reused before the work enqueued on `c` so far is done.
  void used_on(native_stream c) const { join(st_->s.native(), c); }

 private:
  struct state {
    std::shared_ptr<Channel> ch;
    typename Channel::slot_ref ref;
    stream_type s;
    state(std::shared_ptr<Channel> c, typename Channel::slot_ref&& r, const stream_type& st)
        : ch(std::move(c)), ref(std::move(r)), s(st) {}
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    // release records `consumed` on s; if that fails the channel gives the slot back only
    // after s's work on it (device_channel's rule for a failed release), so nothing is lost.
    ~state() {
      try {
        ch->release(std::move(ref), s);
      } catch (...) {
      }
    }
  };

  explicit device_lease(std::shared_ptr<state> st) noexcept : st_(std::move(st)) {}

  // `waiter` waits for the work enqueued on `on` so far.
  void join(native_stream waiter, native_stream on) const {
    backend_type& b = st_->ch->backend();
    auto e = b.create_event(false);
    try {
      b.record(e, on);
      b.wait(waiter, e);
    } catch (...) {
      b.destroy_event(e);
      throw;
    }
    b.destroy_event(e);  // the wait captured the marker
  }

  std::shared_ptr<state> st_;
};

}  // namespace dflash
