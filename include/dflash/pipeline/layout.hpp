#pragma once
// The compile-time topology with a run-time shape, as plain data for the
// analysis (analysis/bottleneck.hpp, analysis/what_if.hpp): each link kind
// says how it is modelled (Link::model, or no model: link_model_of). Built on
// demand, never on a hot path.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/detail/format.hpp"
#include "dflash/pipeline/link.hpp"

namespace dflash::detail {

template <class T, class Shape>
analysis::pipeline_layout layout_of(const Shape& s) {
  analysis::pipeline_layout out;
  if constexpr (T::has_device_links) out.device_work_on_cpu = T::backend_type::work_on_host_cores;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (out.stages.push_back({std::string(T::template stage_type<I>::name.view()), s.workers[I],
                           T::template device_stage<I>, T::template in_order_at<I>}),
     ...);
  }(std::make_index_sequence<T::stage_count>{});
  [&]<std::size_t... L>(std::index_sequence<L...>) {
    (([&] {
       const analysis::link_model m = link_model_of<typename T::template link_kind<L>>(
           {s.depths[L], s.ranks[L].size(), s.ranks[L + 1].size()});
       out.links.push_back({std::string(T::template link_kind<L>::name.view()), m.kind, m.depth, m.items_out,
                            m.items_in, m.crosses_processes, std::string(m.no_model)});
     }()),
     ...);
  }(std::make_index_sequence<T::link_count>{});
  return out;
}

/// The part of layout_of that runs in this process (shape.ranks, shape.rank):
/// its stages and the links between them — what one rank's profile can judge.
template <class T, class Shape>
analysis::pipeline_layout local_layout_of(const Shape& s) {
  const analysis::pipeline_layout all = layout_of<T>(s);
  analysis::pipeline_layout out;
  out.device_work_on_cpu = all.device_work_on_cpu;
  for (std::size_t i = 0; i < all.stages.size(); ++i) {
    if (!s.here(i)) continue;
    if (!out.stages.empty() && !s.here(i - 1))
      throw_invalid_argument("dflash::Pipeline::local_layout: the stages placed on rank %d are not one run of adjacent "
                             "stages, so they form no pipeline to analyse", s.rank);
    if (!out.stages.empty()) out.links.push_back(all.links[i - 1]);
    out.stages.push_back(all.stages[i]);
  }
  return out;
}

}  // namespace dflash::detail
