#pragma once
// dflash::detail::topology<Specs...>: what a Pipeline's template arguments say,
// as pure compile-time functions — the stages and their specs, the links and
// what their kinds answer (link.hpp), which stages are device stages, the
// direct segments, the device backend, and (topology_keys) the key set. No state,
// no checks (checks.hpp); tested with static_asserts.

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dflash/pipeline/link.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/key_suffixes.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::detail {

template <class Spec>
struct stage_spec {
  using stage = Spec;
  static constexpr std::size_t count = 1;
  static constexpr bool ordered = false;
};
template <class S, std::size_t N>
struct stage_spec<workers<S, N>> {
  using stage = S;
  // Read through workers<S, N> so that it is instantiated and its N > 0
  // check fires (matching this pattern alone instantiates nothing).
  static constexpr std::size_t count = workers<S, N>::count;
  static constexpr bool ordered = false;
};
template <class S>
struct stage_spec<in_order<S>> {
  using stage = S;
  static constexpr std::size_t count = 1;
  static constexpr bool ordered = true;
};

template <std::size_t I, class... T>
using nth_t = std::tuple_element_t<I, std::tuple<T...>>;

/// Pipelines without device links have no backend.
struct no_backend {};

template <class... Specs>
struct topology {
  static constexpr std::size_t stage_count = (sizeof...(Specs) + 1) / 2;
  static constexpr std::size_t link_count = stage_count - 1;

  template <std::size_t I>
  using stage_type = typename stage_spec<nth_t<2 * I, Specs...>>::stage;
  template <std::size_t I>
  static constexpr std::size_t workers_of = stage_spec<nth_t<2 * I, Specs...>>::count;
  /// Stage I receives items in source order (declared with in_order<S>).
  template <std::size_t I>
  static constexpr bool in_order_at = stage_spec<nth_t<2 * I, Specs...>>::ordered;
  /// The kind of link L (between stage L and L + 1): queue_link, device_link, ...
  template <std::size_t L>
  using link_kind = nth_t<2 * L + 1, Specs...>;

  /// Link L keeps its items on a device: the stages on either side get streams.
  // (Read without a hard error from an entry that is not a link kind: checks.hpp reports that one.)
  template <std::size_t L>
  static constexpr bool slots_at =
      requires { requires std::is_same_v<typename link_kind<L>::carries, carries_device_slots>; };
  /// Stage L + 1 runs on the threads that produce its items (no endpoint, no threads of its own).
  template <std::size_t L>
  static constexpr bool direct_at =
      requires { requires std::is_same_v<typename link_kind<L>::consumer_threads, consumer_on_producer_threads>; };

  // Per link, the two answers the stages next to it depend on.
  static constexpr auto slot_links = []<std::size_t... L>(std::index_sequence<L...>) {
    return std::array<bool, link_count>{slots_at<L>...};
  }(std::make_index_sequence<link_count>{});
  static constexpr auto direct_links = []<std::size_t... L>(std::index_sequence<L...>) {
    return std::array<bool, link_count>{direct_at<L>...};
  }(std::make_index_sequence<link_count>{});

  template <std::size_t I>
  static consteval bool input_slot() { return I > 0 && slot_links[I - 1]; }
  template <std::size_t I>
  static consteval bool output_slot() { return I + 1 < stage_count && slot_links[I]; }
  /// Stage I is next to a link that carries device slots: a device worker runs it.
  template <std::size_t I>
  static constexpr bool device_stage = input_slot<I>() || output_slot<I>();

  // Direct segments: maximal runs of stages joined by links whose consumer runs on the producer's threads.
  template <std::size_t I>
  static consteval bool direct_in() { return I > 0 && direct_links[I - 1]; }
  template <std::size_t I>
  static consteval bool direct_out() { return I + 1 < stage_count && direct_links[I]; }
  template <std::size_t I>
  static consteval std::size_t segment_last() {
    if constexpr (direct_out<I>()) return segment_last<I + 1>();
    else return I;
  }
  template <std::size_t I>
  static consteval std::size_t segment_first() {
    if constexpr (direct_in<I>()) return segment_first<I - 1>();
    else return I;
  }

 private:
  template <std::size_t L>
  static consteval auto backend_from() {
    if constexpr (L == link_count) return std::type_identity<no_backend>{};
    else if constexpr (slots_at<L>)
      return std::type_identity<typename link_kind<L>::template item_backend<typename stage_type<L>::output_type>>{};
    else return backend_from<L + 1>();
  }

 public:
  /// The backend of the device links (no_backend without any).
  using backend_type = typename decltype(backend_from<0>())::type;
  static constexpr bool has_device_links = !std::is_same_v<backend_type, no_backend>;
  /// Items carry their source sequence number (some stage is in_order).
  static constexpr bool sequenced = []<std::size_t... I>(std::index_sequence<I...>) {
    return (in_order_at<I> || ...);
  }(std::make_index_sequence<stage_count>{});
  /// Link L's two stages may run in different processes.
  template <std::size_t L>
  static constexpr bool crosses_at = requires { requires link_kind<L>::crosses_processes; };
  /// Host link L carries values device work may still be writing (its producer
  /// is a device stage). Not across processes: there the value leaves once
  /// that work completed.
  template <std::size_t L>
  static constexpr bool pending_at = !slots_at<L> && device_stage<L> && !crosses_at<L>;
};

/// The stage with several workers in the direct segment starting at A, or stage_count if none.
template <class T, std::size_t A, class Shape>
std::size_t parallel_stage_of(const Shape& s) noexcept {
  for (std::size_t k = A; k <= T::template segment_last<A>(); ++k)
    if (s.workers[k] > 1) return k;
  return T::stage_count;
}

/// Every key the pipeline of topology T records (its stages' wait / work / gpu / launch
/// and own keys, the flow rows age / age_clock_backwards / age_gpu_end / e2e,
/// its links' keys); independent of the profiler. Apart from
/// topology so that naming a topology never reads a stage's name (checks.hpp
/// reports a missing one first).
template <class T>
struct topology_keys {
 private:
  template <std::size_t I>
  static auto keys_of_stage() {
    using S = typename T::template stage_type<I>;
    if constexpr (T::template device_stage<I>)
      return std::type_identity<key_set_cat_t<
          stage_keys_t<S>, key_set<name_cat<S::name, key_suffix::gpu>, name_cat<S::name, key_suffix::launch>>>>{};
    else return std::type_identity<stage_keys_t<S>>{};
  }
  // Flow rows (recorded by policies that stamp items, item.hpp): every stage
  // after the source an age (a device stage also the age when its device
  // work ended), the sink the end-to-end time.
  template <std::size_t I>
  static auto age_keys_of_stage() {
    using S = typename T::template stage_type<I>;
    if constexpr (T::template device_stage<I>)
      return std::type_identity<key_set_cat_t<stage_age_keys_t<S::name>, key_set<name_cat<S::name, key_suffix::age_gpu_end>>>>{};
    else return std::type_identity<stage_age_keys_t<S::name>>{};
  }
  template <std::size_t I>
  using stage_age_rows = typename decltype(age_keys_of_stage<I>())::type;
  template <std::size_t I>
  static auto flow_keys_of_stage() {
    using S = typename T::template stage_type<I>;
    if constexpr (I == 0) return std::type_identity<stage_all_keys_base<I>>{};
    else if constexpr (I + 1 < T::stage_count)
      return std::type_identity<key_set_cat_t<stage_all_keys_base<I>, stage_age_rows<I>>>{};
    else
      return std::type_identity<key_set_cat_t<stage_all_keys_base<I>,
                                              key_set_cat_t<stage_age_rows<I>, key_set<name_cat<S::name, key_suffix::e2e>>>>>{};
  }
  template <std::size_t I>
  using stage_all_keys_base = typename decltype(keys_of_stage<I>())::type;
  template <std::size_t I>
  using stage_all_keys = typename decltype(flow_keys_of_stage<I>())::type;
  template <std::size_t... I>
  static auto keys_of(std::index_sequence<I...>)
      -> key_set_cat_t<stage_all_keys<0>, key_set_cat_t<typename T::template link_kind<I>::keys, stage_all_keys<I + 1>>...>;

 public:
  using type = decltype(keys_of(std::make_index_sequence<T::link_count>{}));
};

}  // namespace dflash::detail
