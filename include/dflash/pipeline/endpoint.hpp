#pragma once
// The endpoint protocol: what the run-time object a link kind opens
// (Link::open, pipeline/link.hpp) must do for the agents that use it, as
// concepts, and the envelope handling between a stage's values and what the
// link carries.
//
// Which protocol a kind's endpoint answers follows from its answers:
//
//   carries_values        ValueEndpoint<E, Item>:  bool push(Item&&)  (false: closed or cancelled;
//                         the item is then dropped by the caller), std::optional<Item> pop() (empty:
//                         closed and drained, or cancelled). Link::close(e) ends the items; the
//                         consumer drains what was pushed. Link::cancel(e) wakes every blocked call.
//   carries_device_slots  SlotEndpoint<E>: acquire(ds) / publish(slot, ds) / abandon(slot, ds) on the
//                         producer's stream, pop(ds) / release(slot, ds) on the consumer's, each slot
//                         a handle with item() and index() (device/device_channel.hpp). No call waits
//                         for the device: they record and stream-wait.
//
// Two optional protocols a value endpoint may add, and what they allow:
//
//   HelpFirstEndpoint     pushes() and record_handover(): with the kind's
//                         `consumer_callable_by_producer = true`, a producer's thread may call the
//                         consumer stage itself instead of pushing (agents/host_worker.hpp), so push()
//                         does not run for that item. The rule: a kind sets the flag only when its
//                         push() does nothing but store the item (queue_link). A kind whose push()
//                         counts, filters, forwards or sends must leave it unset — copying queue_link
//                         copies the flag, and the new kind's push() then never runs for helped items.
//   PullableEndpoint      try_pop(), record_pop(), size(), capacity(): the source may run on stage 1's
//                         threads when they find the link empty (agents/source_pull.hpp); only with
//                         the help-first flag as well.
//
// What crosses (Item): the producer's output_type, or it in an envelope
// (pipeline/item.hpp) when the pipeline needs to know more about it —
//   detail::sequenced<T, Tag>   seq: the source sequence number (some stage is in_order) or the
//                               flow_stamp (a profiled pipeline); value: the item;
//   detail::pending<T, B, S>    value, an event that device work still writing it records (a host
//                               link after a device stage: the consumer waits on it, then the event
//                               goes back to its pool), and its flow_stamp when profiled.
// A kind sees the envelope as an opaque movable Item: it must move it through
// whole, never open it. Device links never carry an envelope: a slot's stamp
// stays beside it in the pipeline.
//
// What a kind may do to items is its `delivery` answer (link.hpp): a link
// that does not deliver each item once cannot precede an in_order stage or
// carry pending values — the checks refuse both at compile time.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "dflash/pipeline/item.hpp"

namespace dflash {

/// An endpoint of a link that carries values.
template <class E, class Item>
concept ValueEndpoint = requires(E& e, Item&& x) {
  { e.push(std::move(x)) } -> std::convertible_to<bool>;
  { e.pop() } -> std::same_as<std::optional<Item>>;
};

/// A value endpoint whose producer may call the consumer instead of pushing
/// (only with the kind's consumer_callable_by_producer; see the rule above).
template <class E>
concept HelpFirstEndpoint = requires(E& e) {
  { e.pushes() } -> std::convertible_to<std::uint64_t>;
  e.record_handover();
};

namespace detail {
// An endpoint whose fill a thread can read (a queue link's ring). The pulled
// source and the backlog yield (agents/) look at it; other endpoints are not asked.
template <class E>
concept fill_visible = requires(const E& e) {
  { e.size() } -> std::convertible_to<std::size_t>;
  { e.capacity() } -> std::convertible_to<std::size_t>;
};
}  // namespace detail

/// A value endpoint a thread may look into without blocking: its fill, and a
/// pop that never waits (recorded as one that did not wait with record_pop()).
template <class E, class Item>
concept PullableEndpoint = detail::fill_visible<E> && requires(E& e) {
  { e.try_pop() } -> std::same_as<std::optional<Item>>;
  e.record_pop();
};

/// An endpoint of a link that carries device slots, on streams of type DS.
template <class E, class DS>
concept SlotEndpoint = requires(E& e, const DS& ds) {
  { e.acquire(ds) } -> std::same_as<std::optional<typename E::slot_ref>>;
  { e.pop(ds) } -> std::same_as<std::optional<typename E::slot_ref>>;
} && requires(E& e, const DS& ds, typename E::slot_ref&& s) {
  { e.publish(std::move(s), ds) } -> std::convertible_to<bool>;
  e.abandon(std::move(s), ds);
  e.release(std::move(s), ds);
  s.item();
  { s.index() } -> std::convertible_to<std::size_t>;
};

namespace detail {

// ---- envelopes: a stage's values in and out of a host link of Core ----

/// What host link I - 1 gave stage I: its value, and its tag when items carry one.
template <std::size_t I, class Core>
std::optional<typename Core::template stage_type<I>::input_type> unwrap(
    std::optional<typename Core::template item_type<I - 1>> got, [[maybe_unused]] typename Core::tag_type& tag) {
  if constexpr (Core::tagged) {
    std::optional<typename Core::template stage_type<I>::input_type> v;
    if (got) {
      tag = got->seq;
      v.emplace(std::move(got->value));
    }
    return v;
  } else {
    return got;
  }
}

/// Pops the next value of pending link I - 1 (device work may still be
/// writing it): `wait_for(ev)` orders the consumer after that work (the host
/// thread waits, or a stream does), then the event goes back to its pool.
template <std::size_t I, class Core, class Wait>
std::optional<typename Core::template stage_type<I>::input_type> pop_pending(Core& c, Wait&& wait_for,
                                                                             [[maybe_unused]] typename Core::tag_type& tag) {
  auto got = c.template link<I - 1>().pop();
  std::optional<typename Core::template stage_type<I>::input_type> v;
  if (!got) return v;
  wait_for(got->ev);  // rethrows an error of the work that wrote it
  c.pool(I - 1).release(got->ev);
  if constexpr (Core::flow) tag = got->stamp;
  v.emplace(std::move(got->value));
  return v;
}

/// Pops the next host input of stage I, and its tag when items carry one; a
/// value device work was writing is waited for here, on this (the
/// consumer's) thread.
template <std::size_t I, class Core>
std::optional<typename Core::template stage_type<I>::input_type> pop_input(Core& c, typename Core::tag_type& tag) {
  if constexpr (Core::topo::template pending_at<I - 1>)
    return pop_pending<I>(c, [&c](auto ev) { c.backend().host_wait(ev); }, tag);
  else return unwrap<I, Core>(c.template link<I - 1>().pop(), tag);
}

/// The next input of stage I if one is in host link I - 1 now (never waits),
/// recorded as a pop that did not wait.
template <std::size_t I, class Core>
  requires(!Core::topo::template pending_at<I - 1>)
std::optional<typename Core::template stage_type<I>::input_type> try_pop_input(Core& c, typename Core::tag_type& tag) {
  auto& q = c.template link<I - 1>();
  auto got = q.try_pop();
  if (got) q.record_pop();
  return unwrap<I, Core>(std::move(got), tag);
}

/// Hands stage I's output to host link I, with its tag when items carry one.
template <std::size_t I, class Core>
bool push_output(Core& c, typename Core::template stage_type<I>::output_type&& y,
                 [[maybe_unused]] const typename Core::tag_type& tag) {
  using Out = typename Core::template stage_type<I>::output_type;
  if constexpr (Core::tagged)
    return c.template link<I>().push(sequenced<Out, typename Core::tag_type>{tag, std::move(y)});
  else return c.template link<I>().push(std::move(y));
}

}  // namespace detail
}  // namespace dflash
