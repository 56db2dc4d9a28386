#pragma once
// A pipeline from values, with every type deduced (oneTBB's parallel_pipeline
// shape), and the key set of such a pipeline for the profiler:
//
//   auto build = [&](const auto& prof) {
//     return dflash::make_pipeline(prof, numbers, dflash::queue_link<"in", 64>{},
//                                  dflash::parallel<4>(square), dflash::queue_link<"out", 64>{},
//                                  dflash::in_order(sum));
//   };
//   build(dflash::NullProfiler{}).run_to_completion();        // nothing recorded, nothing paid
//   dflash::AccumulatingProfiler<dflash::pipeline_keys<decltype(build)>> prof;
//   build(prof).run_to_completion();                          // per-stage wait / work / queue waits
//
// Parts alternate, as in dflash::Pipeline: a stage (class or dflash::stage<"name">(f)),
// parallel<N>(stage) or in_order(stage); then a link kind value (queue_link, direct_link, device_link).

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dflash/pipeline/pipeline.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash {

/// `parallel<N>(stage)`: the stage on N worker threads (workers<S, N> as a value).
template <std::size_t N, class S>
[[nodiscard]] workers<std::decay_t<S>, N> parallel(S&& s) {
  return {std::forward<S>(s)};
}

namespace detail {
template <class Part>
struct pipeline_part {  // a plain stage object
  using spec = Part;
  static Part&& stage(Part& p) { return std::move(p); }
};
template <class S, std::size_t N>
struct pipeline_part<workers<S, N>> {
  using spec = workers<S, N>;
  static S&& stage(workers<S, N>& p) { return std::move(p.stage); }
};
template <class S>
struct pipeline_part<in_order<S>> {
  using spec = in_order<S>;
  static S&& stage(in_order<S>& p) { return std::move(p.stage); }
};
}  // namespace detail

/// The pipeline of `parts` (stages and link specs alternately) recording into `prof`.
template <ProfilerPolicy P, class... Parts>
[[nodiscard]] auto make_pipeline(const P& prof, Parts... parts) {
  static_assert(sizeof...(Parts) % 2 == 1,
                "dflash::make_pipeline(prof, ...): stages and link values (queue_link{}, ...) alternately, "
                "starting and ending with a stage");
  auto all = std::forward_as_tuple(parts...);
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    using pipeline = Pipeline<P, typename detail::pipeline_part<Parts>::spec...>;
    return pipeline(prof, detail::pipeline_part<std::tuple_element_t<2 * I, std::tuple<Parts...>>>::stage(
                              std::get<2 * I>(all))...);
  }(std::make_index_sequence<(sizeof...(Parts) + 1) / 2>{});
}

}  // namespace dflash
