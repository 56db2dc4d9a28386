#pragma once
// Every name dflash still accepts under an old spelling, in one place, each
// with the version that removes it. Each use warns and names its replacement.
// Define DFLASH_NO_DEPRECATED (before any dflash header) to hide them all: an
// old name is then an error, so a program can make sure it uses none.
//
//   old name                              new name                                   removed in
//   dflash::queue_spec<Name, Depth>       dflash::queue_link<Name, Depth>            0.2
//   dflash::pipeline_keys_t<T>            dflash::pipeline_keys<T<NullProfiler>>     0.2
//   dflash::pipeline_keys_of<B>           dflash::pipeline_keys<B>                   0.2
//   Pipeline::queue_count                 Pipeline::link_count                       0.2
//   Pipeline::queue_type<I>               Pipeline::link_type<I>                     0.2
//   Pipeline::queue<I>()                  Pipeline::link<I>()                        0.2
//   dflash::analysis::link_kind           dflash::analysis::model_kind               0.3
//
// Pipeline's members are declared in pipeline/pipeline.hpp under the same
// switch. Deprecated alias templates are classes or go through a declared-only
// function here: clang 14 does not warn on an alias template's [[deprecated]].

#include <cstddef>
#include <type_traits>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/pipeline/links/queue.hpp"
#include "dflash/pipeline/pipeline.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/null_profiler.hpp"

#if !defined(DFLASH_NO_DEPRECATED)

namespace dflash {

template <fixed_string Name, std::size_t Depth>
struct [[deprecated("dflash::queue_spec<Name, Depth> is renamed dflash::queue_link<Name, Depth>")]] queue_spec
    : queue_link<Name, Depth> {};

namespace detail {
template <template <class> class PipelineOf>
[[deprecated("dflash::pipeline_keys_t<T> is renamed dflash::pipeline_keys<T<dflash::NullProfiler>>")]]
std::type_identity<typename PipelineOf<NullProfiler>::keys> deprecated_keys_of_template();
template <class Build>
[[deprecated("dflash::pipeline_keys_of<B> is renamed dflash::pipeline_keys<B>")]] std::type_identity<pipeline_keys<Build>>
deprecated_keys_of_builder();
}  // namespace detail

template <template <class> class PipelineOf>
using pipeline_keys_t = typename decltype(detail::deprecated_keys_of_template<PipelineOf>())::type;
template <class Build>
using pipeline_keys_of = typename decltype(detail::deprecated_keys_of_builder<Build>())::type;

namespace analysis {
using link_kind [[deprecated("dflash::analysis::link_kind is renamed dflash::analysis::model_kind")]] = model_kind;
}  // namespace analysis

}  // namespace dflash

#endif  // !DFLASH_NO_DEPRECATED
