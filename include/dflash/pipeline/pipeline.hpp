#pragma once
// dflash::Pipeline<P, stage, link, stage, ..., stage>: stages composed at
// compile time with link kinds between them, each stage on its own threads (or
// its producers' threads over a direct_link), wait vs work time recorded per
// stage with no user code, and nothing recorded — nor paid — with NullProfiler.
// docs/guide.md is the manual; here only the declaration and the lifecycle:
//
//   using train = dflash::Pipeline<P, source, dflash::queue_link<"batch_queue", 8>,
//                                  dflash::workers<target, 4>, dflash::queue_link<"hs_queue", 60>,
//                                  dflash::in_order<drafter>>;
//   train p(prof, source{...}, target{...}, drafter{...});   // or (prof, shape, stages...)
//   p.run_to_completion();   // or run() ... join(); stop(stop_mode) from any thread
//
// Where the rest lives:
//   stage.hpp       the Stage concepts, workers<S, N>, in_order<S>, stage keys
//   link.hpp        the PipelineLink concept; links/ one header per link kind
//   topology.hpp    what the template arguments say (pure metafunctions)
//   checks.hpp      every compile-time and run-time check, with its message
//   core.hpp        the run-time state the agents share: stages, link endpoints, cancel / errors
//   agents/         one header per worker shape: host_worker, direct_segment, device_worker
//   shape.hpp       run-time workers, depths and placement

#include <atomic>
#include <cstdio>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/pipeline/agents/device_worker.hpp"
#include "dflash/pipeline/agents/direct_segment.hpp"
#include "dflash/pipeline/agents/host_worker.hpp"
#include "dflash/pipeline/checks.hpp"
#include "dflash/pipeline/core.hpp"
#include "dflash/pipeline/layout.hpp"
#include "dflash/pipeline/links/device.hpp"
#include "dflash/pipeline/links/direct.hpp"
#include "dflash/pipeline/links/queue.hpp"
#include "dflash/pipeline/shape.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/pipeline/topology.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash {

template <ProfilerPolicy P, class... Specs>
class Pipeline {
  static_assert(sizeof...(Specs) >= 3 && sizeof...(Specs) % 2 == 1,
                "dflash::Pipeline<P, ...>: list stages and links alternately — stage, queue_link<\"name\", depth> "
                "(or another link kind), stage, ..., stage (at least a source, a link and a sink)");
  using topo = detail::topology<Specs...>;
  static_assert(detail::static_checks<topo>::value);
  using core_type = detail::pipeline_core<P, Specs...>;
  static_assert(detail::flow_keys_check<core_type>::value);

  template <class... Args>
  static constexpr bool stage_args = sizeof...(Args) == topo::stage_count || sizeof...(Args) == 0;

 public:
  static constexpr std::size_t stage_count = topo::stage_count;
  static constexpr std::size_t link_count = topo::link_count;
  template <std::size_t I>
  using stage_type = typename topo::template stage_type<I>;
  template <std::size_t I>
  static constexpr std::size_t workers_of = topo::template workers_of<I>;
  /// Stage I receives items in source order (declared with in_order<S>).
  template <std::size_t I>
  static constexpr bool in_order_at = topo::template in_order_at<I>;
  /// Stage I is next to a device link: it gets a stream per worker.
  template <std::size_t I>
  static constexpr bool device_stage = topo::template device_stage<I>;
  /// The kind of link L (queue_link<...>, device_link<...>, ...), as written.
  template <std::size_t L>
  using link_kind = typename topo::template link_kind<L>;
  /// The run-time object of link L: a bounded_queue, a device_channel, ...
  template <std::size_t L>
  using link_type = typename core_type::template endpoint_type<L>;
  /// The backend of the device links (detail::no_backend without any).
  using backend_type = typename topo::backend_type;
  static constexpr bool has_device_links = topo::has_device_links;
  /// Items carry their source sequence number (some stage is in_order).
  static constexpr bool sequenced = topo::sequenced;
  /// Items carry a flow_stamp and the pipeline records the flow rows (FlowPolicy<P>, pipeline/item.hpp).
  static constexpr bool flow = core_type::flow;
  /// Every key this pipeline records (stages, links, the stages' own keys); independent of P.
  using keys = typename detail::topology_keys<topo>::type;
  using shape_type = pipeline_shape<stage_count, link_count>;

  /// Stages in order (or none, to default-construct them all). `prof` must outlive the pipeline.
  template <class... Args>
    requires stage_args<Args...>
  explicit Pipeline(const P& prof, Args&&... stages) : Pipeline(prof, default_shape(), std::forward<Args>(stages)...) {}
  /// Run-time sizes and placement (shape.hpp); std::invalid_argument if they make no sense.
  template <class... Args>
    requires stage_args<Args...>
  Pipeline(const P& prof, const shape_type& shape, Args&&... stages)
      : core_(prof, detail::checked_shape<topo>(shape), std::forward<Args>(stages)...) {}
  /// For empty policies (NullProfiler): no profiler argument.
  template <class... Args>
    requires(std::is_empty_v<P> && stage_args<Args...>)
  Pipeline(const shape_type& shape, Args&&... stages) : Pipeline(P{}, shape, std::forward<Args>(stages)...) {}
  template <class... Args>
    requires(std::is_empty_v<P> && stage_args<Args...> && (!std::is_same_v<std::remove_cvref_t<Args>, P> && ...))
  explicit Pipeline(Args&&... stages) : Pipeline(P{}, std::forward<Args>(stages)...) {}
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

 private:
  template <fixed_string Name, bool Stage>
  static consteval std::size_t index_of_name() {
    constexpr std::size_t i = []<std::size_t... K>(std::index_sequence<K...>) {
      const std::array<std::string_view, sizeof...(K)> names{[] {
        if constexpr (Stage) return stage_type<K>::name.view();
        else return link_kind<K>::name.view();
      }()...};
      std::size_t k = 0;
      while (k < names.size() && names[k] != Name.view()) ++k;
      return k;
    }(std::make_index_sequence<Stage ? stage_count : link_count>{});
    static_assert(i < (Stage ? stage_count : link_count),
                  "dflash::Pipeline::stage_index<Name> / link_index<Name>: this pipeline has no stage / link of that "
                  "name (names are the stages' `name` and the link kinds' first argument)");
    return i;
  }

 public:
  /// The index of the stage / link named Name, for filling a shape by name:
  ///   shape.depths[train::link_index<"hs_queue">] = 60;
  ///   shape.workers[train::stage_index<"target_forward">] = 4;
  /// A name the pipeline does not have is a compile-time error that says so.
  template <fixed_string Name>
  static constexpr std::size_t stage_index = index_of_name<Name, true>();
  template <fixed_string Name>
  static constexpr std::size_t link_index = index_of_name<Name, false>();

  /// The compile-time sizes: workers<S, N>::count per stage, each link kind's depth.
  [[nodiscard]] static shape_type default_shape() {
    shape_type s;
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((s.workers[I] = workers_of<I>), ...); }(
        std::make_index_sequence<stage_count>{});
    [&]<std::size_t... L>(std::index_sequence<L...>) { ((s.depths[L] = link_kind<L>::depth), ...); }(
        std::make_index_sequence<link_count>{});
    return s;
  }
  [[nodiscard]] const shape_type& shape() const noexcept { return core_.shape(); }
  /// The topology with a shape as plain data, for the analysis (analysis/bottleneck.hpp).
  [[nodiscard]] static analysis::pipeline_layout layout(const shape_type& s) { return detail::layout_of<topo>(s); }
  [[nodiscard]] analysis::pipeline_layout layout() const { return layout(shape()); }
  /// Only the stages the shape places in this process (shape.ranks, shape.rank) and the links between them.
  [[nodiscard]] static analysis::pipeline_layout local_layout(const shape_type& s) {
    return detail::local_layout_of<topo>(s);
  }

  /// Cancels and joins if still running; an unobserved stage exception is
  /// dropped. Destroying a started pipeline that was neither joined nor
  /// stopped is almost always a forgotten join(), and one never run a
  /// forgotten run(): both are said on stderr.
  ~Pipeline();

  /// Starts every stage's threads (those placed in this process) and returns. Once per pipeline.
  void run();
  /// run() then join(): blocks until the source is exhausted and every item
  /// reached the sink (or a stage threw: rethrown here).
  void run_to_completion() {
    run();
    join();
  }
  /// Waits for every thread; rethrows the first exception a stage threw.
  /// Call from one thread, after run() (before it: std::logic_error).
  void join();
  /// Thread-safe, non-blocking; follow with join(). cancel: every link wakes
  /// its threads now; drain: the source stops and items in flight reach the sink.
  void stop(stop_mode mode = stop_mode::cancel) noexcept {
    stop_requested_.store(true, std::memory_order_release);
    if (mode == stop_mode::drain) core_.drain();
    else core_.cancel();
  }
  [[nodiscard]] bool cancelled() const noexcept { return core_.cancelled(); }
  /// stop() was called (drain or cancel): the source may have ended before it was exhausted.
  [[nodiscard]] bool stop_requested() const noexcept { return stop_requested_.load(std::memory_order_acquire); }

  /// The run-time object of link L (0 = between the source and stage 1).
  template <std::size_t L>
  [[nodiscard]] link_type<L>& link() noexcept {
    static_assert(L < link_count, "dflash::Pipeline::link<L>(): L is past the last link (links count from 0, "
                                  "the one after the source)");
    static_assert(!std::is_same_v<link_type<L>, no_endpoint>,
                  "dflash::Pipeline::link<L>(): link L is a direct_link, which has no run-time object");
    return core_.template link<L>();
  }
  /// The I-th stage object (0 = the source, stage_count - 1 = the sink). I
  /// counts stages only: in `Pipeline<P, A, queue_link<"q", 4>, B>` B is stage<1>().
  template <std::size_t I>
  [[nodiscard]] auto& stage() noexcept {
    static_assert(I < stage_count, "dflash::Pipeline::stage<I>(): I is past the last stage (I counts stages "
                                   "only, from 0 = the source; links are not counted)");
    if constexpr (I < stage_count) return core_.template stage<I>();
  }
  [[nodiscard]] const P& profiler() const noexcept { return core_.prof(); }
  /// The device backend the device links and device stages use (device pipelines only).
  // A member template: an explicit instantiation of a pipeline without device links must skip it,
  // which clang 14 does not do for a constrained non-template member.
  template <bool Device = has_device_links>
    requires Device
  [[nodiscard]] auto& backend() noexcept {
    return core_.backend();
  }

#if !defined(DFLASH_NO_DEPRECATED)  // dflash 0.x names, removed in 0.2 (dflash/deprecated.hpp lists them)
  [[deprecated("Pipeline::queue_count is renamed Pipeline::link_count")]] static constexpr std::size_t queue_count =
      link_count;
  template <std::size_t L>
  [[deprecated("Pipeline::queue_type<I> is renamed Pipeline::link_type<I>")]] static std::type_identity<link_type<L>>
  deprecated_queue_type();  // declared only: named in queue_type, so that each use warns (clang 14 ignores
                            // [[deprecated]] on an alias template)
  template <std::size_t L>
  using queue_type = typename decltype(deprecated_queue_type<L>())::type;
  template <std::size_t L>
  [[deprecated("Pipeline::queue<I>() is renamed Pipeline::link<I>()")]] [[nodiscard]] link_type<L>& queue() noexcept {
    return link<L>();
  }
#endif

 private:
  template <std::size_t... I>
  void launch(std::index_sequence<I...>) {
    std::size_t n = 0;
    ((n += core_.template threads_of<I>()), ...);
    threads_.reserve(n);
    (core_.template set_live<I>(core_.template threads_of<I>()), ...);
    (launch_stage<I>(), ...);
  }
  // Stage I's agent, chosen by its links; a function pointer: one std::thread type for every stage and pipeline.
  template <std::size_t I>
  static void worker_main(void* self, std::size_t w) {
    core_type& core = static_cast<Pipeline*>(self)->core_;
    core.template name_worker<I>(w);
    if constexpr (topo::template direct_out<I>()) {
      detail::segment_worker<I>(core, w);
      core.template worker_exit<I, topo::template segment_last<I>()>();
    } else {
      if constexpr (device_stage<I>) detail::device_worker<I>(core, w);
      else detail::host_worker<I>(core, w);
      core.template worker_exit<I>();
    }
  }
  template <std::size_t I>
  void launch_stage() {
    if constexpr (!topo::template direct_in<I>())  // else it runs on its segment's threads
      for (std::size_t w = 0; w < core_.template threads_of<I>(); ++w)
        threads_.emplace_back(&worker_main<I>, static_cast<void*>(this), w);
  }
  void join_threads() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

  core_type core_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_requested_{false};
  bool started_ = false;
};

// Defined out of the class body, so not implicitly inline: where a program declares its pipeline
// type `extern template class` (guide, "Compile time with many translation units"), the engine
// behind run() — every stage's agent — is compiled in the one TU that instantiates it. (An
// inline member would be instantiated in every TU anyway, for the optimizer to inline.)
template <ProfilerPolicy P, class... Specs>
void Pipeline<P, Specs...>::run() {
  if (started_) throw std::logic_error("dflash::Pipeline::run(): the pipeline was already started");
  started_ = true;
  try {
    core_.make_streams();
    launch(std::make_index_sequence<stage_count>{});
  } catch (...) {
    core_.cancel();
    join_threads();
    throw;
  }
}

template <ProfilerPolicy P, class... Specs>
void Pipeline<P, Specs...>::join() {
  if (!started_)
    throw std::logic_error(
        "dflash::Pipeline::join(): run() was never called, so nothing ran; call run() first (or run_to_completion())");
  join_threads();
  if (!cancelled()) core_.check_in_order_complete();
  if (auto e = core_.take_error()) std::rethrow_exception(e);
}

template <ProfilerPolicy P, class... Specs>
Pipeline<P, Specs...>::~Pipeline() {
  if (!started_ && !stop_requested_.load(std::memory_order_acquire))
    std::fputs("dflash::Pipeline: destroyed without ever being run; its stages did nothing. "
               "Call run() and join(), or run_to_completion().\n",
               stderr);
  if (!threads_.empty()) {
    if (!stop_requested_.load(std::memory_order_acquire) && !cancelled())
      std::fputs("dflash::Pipeline: destroyed while running without join() or stop(); cancelling it. "
                 "Call join() (or run_to_completion()) to let it finish, or stop() to cancel on purpose.\n",
                 stderr);
    core_.cancel();
    join_threads();
  }
}

namespace detail {
template <class X>
struct keys_of_pipeline {  // a builder: the pipeline it makes for NullProfiler
  using type = typename std::remove_cvref_t<std::invoke_result_t<X&, const NullProfiler&>>::keys;
};
template <class X>
  requires requires { typename X::keys; }
struct keys_of_pipeline<X> {
  using type = typename X::keys;
};
}  // namespace detail

/// The key set of a pipeline — a Pipeline type (with any profiler and any
/// further parameters), or a builder `[&](const auto& prof) { return
/// make_pipeline(prof, ...); }` — for the profiler's type:
/// `AccumulatingProfiler<pipeline_keys<train<NullProfiler>>>`.
template <class PipelineOrBuilder>
using pipeline_keys = typename detail::keys_of_pipeline<PipelineOrBuilder>::type;

}  // namespace dflash
