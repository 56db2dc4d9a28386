#pragma once
// detail::core_types<P, Specs...>: the compile-time facts of a Pipeline that
// its core and agents share — what each link carries (the producer's
// output_type, or it in an envelope: item.hpp), the endpoint each link kind
// makes for it, and where a producer's thread may run the next stage itself
// (help-first: the link kind allows it and the consumer's endpoint is a
// HelpFirstEndpoint, endpoint.hpp; the bookkeeping is agents/stage_seats.hpp
// and agents/source_pull.hpp).

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "dflash/detail/indexed_storage.hpp"
#include "dflash/pipeline/endpoint.hpp"
#include "dflash/pipeline/flow_state.hpp"
#include "dflash/pipeline/item.hpp"
#include "dflash/pipeline/shape.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/pipeline/topology.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::detail {

template <ProfilerPolicy P, class... Specs>
struct core_types {
  using topo = topology<Specs...>;
  static constexpr std::size_t stage_count = topo::stage_count;
  static constexpr std::size_t link_count = topo::link_count;
  using shape_type = pipeline_shape<stage_count, link_count>;
  using backend_type = typename topo::backend_type;
  template <std::size_t I>
  using stage_type = typename topo::template stage_type<I>;
  template <std::size_t L>
  using link_kind = typename topo::template link_kind<L>;

  // (public, like the rest: clang 14 checks the access of what an alias
  // template names where the alias is used, not where it is declared)
  using flow_facts = flow_state<P, topo>;
  template <std::size_t L>
  static auto item_of() {
    using T = typename stage_type<L>::output_type;
    using tag = typename flow_facts::tag_type;
    if constexpr (topo::template pending_at<L>)
      return std::type_identity<pending<T, backend_type, std::conditional_t<flow_facts::flow, flow_stamp, no_stamp>>>{};
    else if constexpr (flow_facts::tagged && !topo::template slots_at<L>) return std::type_identity<sequenced<T, tag>>{};
    else return std::type_identity<T>{};
  }

  /// What link L carries: the producer's output_type, or it in an envelope (item.hpp).
  template <std::size_t L>
  using item_type = typename decltype(item_of<L>())::type;
  /// The run-time object of link L (a bounded_queue, a device_channel, ...).
  template <std::size_t L>
  using endpoint_type = typename link_kind<L>::template endpoint<item_type<L>, P>;

  // ---- help-first: a producer's thread may call the next host stage itself (host_worker.hpp) ----
  /// Stage I runs on a host_worker of its own (no device stream, no direct segment).
  template <std::size_t I>
  static constexpr bool host_agent = !topo::template device_stage<I> && !topo::template direct_in<I>() &&
                                     !topo::template direct_out<I>();
  /// Stage I is fed, from a host_worker stage, by a link kind that lets a
  /// producer call the consumer instead of pushing (queue_link says so; a
  /// user's kind, whose push may do more, is never bypassed), unless stage I
  /// is OwnThreadsOnlyStage.
  template <std::size_t I>
  static constexpr bool helped = [] {
    if constexpr (I == 0) return false;
    else
      return host_agent<I - 1> && host_agent<I> && !OwnThreadsOnlyStage<stage_type<I>> &&
             !topo::template crosses_at<I - 1> &&
             requires { requires link_kind<I - 1>::consumer_callable_by_producer; } &&
             HelpFirstEndpoint<endpoint_type<I - 1>>;
  }();
  /// Stage 1's threads may call the source (agents/source_pull.hpp): stage 1
  /// is helped (above) and the source may run on threads not its own (pulled
  /// at run time only with one source worker, help_first.hpp).
  static constexpr bool source_pulled = [] {
    if constexpr (stage_count < 2) return false;
    else
      return helped<1> && !OwnThreadsOnlyStage<stage_type<0>> && PullableEndpoint<endpoint_type<0>, item_type<0>>;
  }();

  // ---- what the core keeps per stage and per link ----
  template <std::size_t... I>
  static auto stages_of(std::index_sequence<I...>) -> indexed_storage<stage_type<I>...>;
  template <std::size_t... L>
  static auto links_of(std::index_sequence<L...>) -> indexed_storage<std::unique_ptr<endpoint_type<L>>...>;

  using stages_tuple = decltype(stages_of(std::make_index_sequence<stage_count>{}));
  using links_tuple = decltype(links_of(std::make_index_sequence<link_count>{}));
};

}  // namespace dflash::detail
