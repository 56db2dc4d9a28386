#pragma once
// The Stage concept: what dflash::Pipeline runs on its threads.
//
// A stage is a plain class (usually a template on the profiler policy P that
// holds `[[no_unique_address]] dflash::profiler_ref<P, keys> prof;` for its
// own keys, which checks them in every build):
//
//   template <class P>
//   struct target_forward {
//     static constexpr dflash::fixed_string name{"target"};   // keys "target.wait", "target.work"
//     using input_type  = Batch;                               // void for a source
//     using output_type = HiddenStates;                        // void for a sink
//     using keys = dflash::key_set<"target.h2d">;              // optional own keys; must not depend on P
//     HiddenStates operator()(Batch&& b, std::size_t worker);  // or operator()(Batch&&)
//   };
//
// Call shapes (the trailing std::size_t worker index is optional everywhere):
//   source     std::optional<Out> operator()()       empty optional = exhausted
//   transform  Out operator()(In&&)
//   sink       void operator()(In&&)
// A stage run by N workers is one object called from N threads at once, so
// its call operator must be safe for that (or use the worker index to pick
// per-worker state).

#include <concepts>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/key_suffixes.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

namespace detail {
template <class T>
struct is_fixed_string : std::false_type {};
template <std::size_t N>
struct is_fixed_string<fixed_string<N>> : std::true_type {};

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class S, class... Args>
concept callable_maybe_indexed = std::invocable<S&, Args...> || std::invocable<S&, Args..., std::size_t>;

/// Calls a stage with the worker index when its call operator takes one.
template <class S, class... Args>
decltype(auto) call_stage(S& s, [[maybe_unused]] std::size_t worker, Args&&... args) {
  if constexpr (std::is_invocable_v<S&, Args&&..., std::size_t>) return s(std::forward<Args>(args)..., worker);
  else return s(std::forward<Args>(args)...);
}

template <class S, class... Args>
using stage_result_t = typename std::conditional_t<std::invocable<S&, Args..., std::size_t>,
                                                   std::invoke_result<S&, Args..., std::size_t>,
                                                   std::invoke_result<S&, Args...>>::type;
}  // namespace detail

/// Has `static constexpr dflash::fixed_string name{...}`, input_type and output_type.
template <class S>
concept NamedStage = requires {
  typename S::input_type;
  typename S::output_type;
  S::name;
} && detail::is_fixed_string<std::remove_cv_t<decltype(S::name)>>::value;

template <class S>
concept SourceStage = NamedStage<S> && std::is_void_v<typename S::input_type> &&
                      !std::is_void_v<typename S::output_type> && detail::callable_maybe_indexed<S> &&
                      std::same_as<detail::stage_result_t<S>, std::optional<typename S::output_type>>;

template <class S>
concept TransformStage = NamedStage<S> && !std::is_void_v<typename S::input_type> &&
                         !std::is_void_v<typename S::output_type> &&
                         detail::callable_maybe_indexed<S, typename S::input_type&&> &&
                         std::convertible_to<detail::stage_result_t<S, typename S::input_type&&>,
                                             typename S::output_type>;

template <class S>
concept SinkStage = NamedStage<S> && !std::is_void_v<typename S::input_type> &&
                    std::is_void_v<typename S::output_type> &&
                    detail::callable_maybe_indexed<S, typename S::input_type&&>;

template <class S>
concept Stage = SourceStage<S> || TransformStage<S> || SinkStage<S>;

/// A stage that declares `static constexpr bool own_threads_only = true;` is
/// called only by its own threads, never help-first by its producer's thread
/// nor, a source, by its consumer's (pipeline/agents/host_worker.hpp): for
/// thread-affine state (thread_local caches, a per-thread handle) or calls
/// that wait for one another.
template <class S>
concept OwnThreadsOnlyStage = requires { requires S::own_threads_only; };

/// Run stage S on N threads: `dflash::workers<target_forward<P>, 4>`.
/// (The Pipeline checks S: its name and types, and its call shape, which
/// depends on the links next to it.)
template <class S, std::size_t N>
struct workers {
  static_assert(N > 0, "dflash::workers<S, N>: a stage needs at least one worker (N > 0)");
  using stage_type = S;
  static constexpr std::size_t count = N;
  S stage;  // for make_pipeline: dflash::parallel<N>(s); unused when named as a type
};

/// Run stage S on one thread, receiving items in source order (like oneTBB's
/// serial_in_order), whatever parallel workers before it did to the order:
/// `dflash::in_order<drafter_train<P>>`. Items that arrive early wait in a
/// reorder buffer (bounded by the items in flight upstream).
template <class S>
struct in_order {
  using stage_type = S;
  static constexpr std::size_t count = 1;
  S stage;  // for make_pipeline: dflash::in_order(s); unused when named as a type

  // Constructors, not aggregate init: clang 14 lacks C++20's parenthesised
  // aggregate initialisation, which `dflash::in_order(s)` would need.
  constexpr in_order() = default;
  constexpr explicit in_order(S s) : stage(std::move(s)) {}
};
template <class S>
in_order(S) -> in_order<S>;

/// Keys a stage named Name gets from the pipeline: blocked on its queues vs in its call.
template <fixed_string Name>
using stage_wait_key = key_t<name_cat<Name, key_suffix::wait>>;
template <fixed_string Name>
using stage_work_key = key_t<name_cat<Name, key_suffix::work>>;
/// Device time of a device stage's work per item (from the events it records).
template <fixed_string Name>
using stage_gpu_key = key_t<name_cat<Name, key_suffix::gpu>>;
/// Host time a device stage spends enqueueing its work per item: the call, the timing events
/// around it and the hand-over record after it (waits for links excluded). Next to ".gpu" it
/// says whether the stage is launch-bound (analysis/bottleneck.hpp).
template <fixed_string Name>
using stage_launch_key = key_t<name_cat<Name, key_suffix::launch>>;

/// Flow rows of a stage after the source (profiled pipelines, item.hpp): how
/// old an item is when the stage starts it, and how often the clock read
/// behind the item's birth stamp (clocks of two processes that disagree, or a
/// test clock set back) — such an item is counted there, never given an age.
template <fixed_string Name>
using stage_age_key = key_t<name_cat<Name, key_suffix::age>>;
template <fixed_string Name>
using stage_age_clock_backwards_key = key_t<name_cat<Name, key_suffix::age_clock_backwards>>;
template <fixed_string Name>
using stage_age_keys_t = key_set<name_cat<Name, key_suffix::age>, name_cat<Name, key_suffix::age_clock_backwards>>;
/// A device stage's flow row: how old an item is when the stage's device work
/// on it ends (from the events the stage records for "<stage>.gpu").
template <fixed_string Name>
using stage_age_gpu_end_key = key_t<name_cat<Name, key_suffix::age_gpu_end>>;
/// The sink's source-to-end-of-call time per item.
template <fixed_string Name>
using stage_e2e_key = key_t<name_cat<Name, key_suffix::e2e>>;

/// All keys of stage S: "<name>.wait", "<name>.work", then S::keys if it has any.
template <NamedStage S>
struct stage_keys {
  using type = key_set<name_cat<S::name, key_suffix::wait>, name_cat<S::name, key_suffix::work>>;
};
template <NamedStage S>
  requires requires { typename S::keys; }
struct stage_keys<S> {
  static_assert(is_key_set<typename S::keys>::value, "dflash: a stage's `keys` member must be a dflash::key_set<...>");
  using type = key_set_cat_t<key_set<name_cat<S::name, key_suffix::wait>, name_cat<S::name, key_suffix::work>>, typename S::keys>;
};
template <NamedStage S>
using stage_keys_t = typename stage_keys<S>::type;

}  // namespace dflash
