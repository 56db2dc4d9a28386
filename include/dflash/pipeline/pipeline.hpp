#pragma once
// dflash::Pipeline: stages and bounded queues composed at compile time, each
// stage on its own thread(s), wait vs work time recorded per stage without
// user code. Usage (stages as in stage.hpp):
//
//   template <class P>
//   using train_pipeline = dflash::Pipeline<P,
//       batch_source<P>,           dflash::queue_spec<"batch_queue", 8>,
//       dflash::workers<target_forward<P>, 4>,   dflash::queue_spec<"post_queue", 8>,
//       postprocess<P>,            dflash::queue_spec<"hs_queue", 60>,
//       drafter_train<P>>;
//
//   using profiler = dflash::AccumulatingProfiler<dflash::pipeline_keys_t<train_pipeline>>;
//   profiler prof;
//   train_pipeline<profiler> p(prof, batch_source<profiler>{...}, target_forward<profiler>{...},
//                              postprocess<profiler>{...}, drafter_train<profiler>{...});
//   p.run();     // starts every thread, returns at once
//   p.join();    // waits; rethrows the first exception a stage threw
//   (or p.run_to_completion(): both in one blocking call)
// Items reorder across the workers of a parallel stage (workers<S, N>, N > 1):
// a later stage sees them in completion order, not source order.
//   std::cout << prof.summary();   // <stage>.wait/.work, <queue>.push_wait/.pop_wait
//
// Runtime sizes (e.g. from a CLI): pass a shape after the profiler; the
// compile-time workers<S, N> / queue_spec<Name, Depth> values are its defaults.
//   auto shape = train_pipeline<profiler>::default_shape();
//   shape.workers[1] = n_targets;  shape.depths[2] = hs_depth;   // 0 -> std::invalid_argument
//   train_pipeline<profiler> p(prof, shape, stages...);
//
// Lifecycle: the source runs until it returns an empty optional; each stage's
// output queue is closed when its last worker exits, so the pipeline drains to
// the sink and join() returns. A stage that throws cancels the pipeline: every
// queue is closed, every thread exits after its current call, join() rethrows.
// stop() (cancel) does the same from outside: blocked threads wake at once and
// the latency is one in-flight call per stage; stop(stop_mode::drain) stops
// the source only and lets queued items reach the sink. A stage ends the
// pipeline early from inside its call with `throw dflash::pipeline_stop{};`
// (e.g. a sink that has seen enough): the same as stop(), join() returns.
// Keys: "<stage>.wait" (blocked in pop/push), "<stage>.work" (inside the
// stage's call), plus queue_keys<queue name>, plus each stage's own `keys`.
// They never depend on P, so pipeline_keys_t<train_pipeline> names them all.
//
// GPU stages: a dflash::device_link<"name", K> may stand between two stages
// instead of a queue_spec. Its item type is a slot (derived from
// dflash::device_item<B>, B the backend: cuda_backend or the host twin
// host_stream_backend) that stays on the device; each worker of a stage next
// to a device link gets its own stream, and the pipeline does every
// stream-wait and event-record, so no stage synchronises per item. Call shapes
// (DS = dflash::device_stream<B>; the worker index may follow, as above):
//   source  -> link   bool operator()(Out& slot, DS)         false = exhausted
//   host    -> link   void operator()(In&&, Out& slot, DS)
//   link    -> link   void operator()(In& slot, Out& slot, DS)
//   link    -> host   Out  operator()(In& slot, DS)          Out may still be
//                     written by the enqueued work: the next stage waits for it
//   link    -> sink   void operator()(In& slot, DS)
// With a stateful policy each such stage also records "<stage>.gpu": the
// device time of its work per item, from events resolved without blocking.

#include <array>
#include <condition_variable>
#include <deque>
#include <map>
#include <atomic>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana/at.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/tuple.hpp>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/detail/capacity.hpp"
#include "dflash/detail/spin.hpp"
#include "dflash/device/backend.hpp"
#include "dflash/device/device_channel.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/bounded_queue.hpp"

namespace dflash {

enum class stop_mode {
  cancel,  ///< close every queue now; threads exit after their current call
  drain,   ///< stop the source; items already queued still reach the sink
};

/// Thrown from a stage's call to end the pipeline early and cleanly: the same
/// as stop() (stop_mode::cancel) from outside. The call's item is dropped,
/// every thread exits after its current call, and join() returns normally
/// (it still rethrows a real error another stage threw). Deliberately not a
/// std::exception, so a `catch (const std::exception&)` does not swallow it.
/// (A source that wants to drain instead returns an empty optional.)
struct pipeline_stop {};

namespace detail {
template <class Spec>
struct stage_spec {
  using stage = Spec;
  static constexpr std::size_t count = 1;
};
template <class S, std::size_t N>
struct stage_spec<workers<S, N>> {
  using stage = S;
  // Read through workers<S, N> so that it is instantiated and its N > 0
  // check fires (matching this pattern alone instantiates nothing).
  static constexpr std::size_t count = workers<S, N>::count;
};
template <class S>
struct stage_spec<in_order<S>> {
  using stage = S;
  static constexpr std::size_t count = 1;
  static constexpr bool ordered = true;
};
template <class Spec>
inline constexpr bool is_ordered = requires { requires stage_spec<Spec>::ordered; };

// An item with its source sequence number (pipelines with an in_order stage).
template <class T>
struct sequenced {
  std::uint64_t seq;
  T value;
};

// By member, not by partial specialisation: nvcc 13 cannot deduce fixed_string NTTPs.
template <class T>
struct is_queue_spec : std::bool_constant<requires { requires T::dflash_link_kind == 1; }> {};

template <class T>
struct is_device_link : std::bool_constant<requires { requires T::dflash_link_kind == 2; }> {};

template <class T>
struct is_direct_link : std::bool_constant<requires { requires T::dflash_link_kind == 3; }> {};

/// The "queue" of a direct_link: there is none (the next stage runs on the producer's threads).
struct direct_hop {};

/// One per direct segment: the locks of its serial parts and the turn of its in_order stage.
struct segment_sync {
  std::mutex pre, post;  // stages before / after the segment's parallel stage
  std::condition_variable turn;
  std::uint64_t issued = 0;  // the source's next sequence number (under pre)
  bool exhausted = false;    // the source returned empty (under pre)
};

template <std::size_t I, class... T>
using nth_t = std::tuple_element_t<I, std::tuple<T...>>;

/// Pipelines without device links have no backend.
struct no_backend {};

// The item type of a device link, checked once with a message that names it.
template <class T>
struct device_link_item {
  static_assert(DeviceItem<T>,
                "dflash::Pipeline: the type crossing a device_link must be a device item: derive it from "
                "dflash::device_item<B> (B = dflash::cuda_backend or dflash::host_stream_backend) and keep it "
                "default-constructible (T is the stage's output_type)");
  using backend = typename T::backend_type;
};

// A host value that device work is still writing: the next stage waits on ev.
template <class T, class B>
struct pending {
  T value;
  typename B::event_type ev;
};

// Events for pending values; an event goes back once its waiter captured it.
template <class B>
class event_pool {
 public:
  explicit event_pool(B& b) : b_(b) {}
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;
  ~event_pool() {
    for (auto e : all_) b_.destroy_event(e);
  }
  typename B::event_type acquire() {
    std::lock_guard lk(m_);
    if (!free_.empty()) {
      auto e = free_.back();
      free_.pop_back();
      return e;
    }
    all_.reserve(all_.size() + 1);
    free_.reserve(all_.size() + 1);  // release() never allocates
    auto e = b_.create_event(false);
    all_.push_back(e);
    return e;
  }
  void release(typename B::event_type e) noexcept {
    std::lock_guard lk(m_);
    free_.push_back(e);
  }

 private:
  B& b_;
  std::mutex m_;
  std::vector<typename B::event_type> all_, free_;
};

// Per device-stage worker, stateful policies only: a start/end event pair
// per item, resolved when the end event has completed (never blocking).
template <class B>
class gpu_timer {
 public:
  using event = typename B::event_type;
  explicit gpu_timer(B& b) : b_(b) {}
  gpu_timer(const gpu_timer&) = delete;
  gpu_timer& operator=(const gpu_timer&) = delete;
  ~gpu_timer() {
    for (auto& [a, z] : all_) {
      b_.destroy_event(a);
      b_.destroy_event(z);
    }
  }
  void start(typename B::stream_type s) {
    if (free_.empty()) {
      all_.reserve(all_.size() + 1);
      free_.reserve(all_.size() + 1);
      all_.emplace_back(b_.create_event(true), b_.create_event(true));
      free_.push_back(all_.back());
    }
    cur_ = free_.back();
    free_.pop_back();
    b_.record(cur_.first, s);
  }
  void stop(typename B::stream_type s) {
    b_.record(cur_.second, s);
    pending_.push_back(cur_);
  }
  /// Adds every completed measurement to `prof` under K.
  template <class P, class K>
  void resolve(const P& prof, K k) {
    while (!pending_.empty() && b_.query(pending_.front().second)) {
      prof.add(k, b_.elapsed(pending_.front().first, pending_.front().second));
      free_.push_back(pending_.front());
      pending_.pop_front();
    }
  }

 private:
  B& b_;
  std::vector<std::pair<event, event>> all_, free_;
  std::deque<std::pair<event, event>> pending_;
  std::pair<event, event> cur_{};
};

// Instantiated once per adjacent pair; the error names From and To.
template <class From, class To>
struct link_check {
  static_assert(std::is_same_v<typename From::output_type, typename To::input_type>,
                "dflash::Pipeline: a stage's output_type does not match the next stage's input_type "
                "(From and To in link_check<From, To> are the two stages)");
  static constexpr bool value = true;
};

template <class S, class... Args>
decltype(auto) call_stage(S& s, [[maybe_unused]] std::size_t worker, Args&&... args) {
  if constexpr (std::is_invocable_v<S&, Args&&..., std::size_t>) return s(std::forward<Args>(args)..., worker);
  else return s(std::forward<Args>(args)...);
}
}  // namespace detail

/// Threads per stage and capacity per queue, chosen at run time.
template <std::size_t Stages, std::size_t Queues>
struct pipeline_shape {
  std::array<std::size_t, Stages> workers{};
  std::array<std::size_t, Queues> depths{};
};

template <ProfilerPolicy P, class... Specs>
class Pipeline {
  static_assert(sizeof...(Specs) >= 3 && sizeof...(Specs) % 2 == 1,
                "dflash::Pipeline<P, ...>: list stages and links alternately — stage, queue_spec<\"name\", depth> "
                "(or device_link<\"name\", depth>), stage, ..., stage (at least a source, a link and a sink)");

 public:
  static constexpr std::size_t stage_count = (sizeof...(Specs) + 1) / 2;
  static constexpr std::size_t queue_count = stage_count - 1;

  template <std::size_t I>
  using stage_type = typename detail::stage_spec<detail::nth_t<2 * I, Specs...>>::stage;
  template <std::size_t I>
  static constexpr std::size_t workers_of = detail::stage_spec<detail::nth_t<2 * I, Specs...>>::count;
  /// Stage I receives items in source order (declared with in_order<S>).
  template <std::size_t I>
  static constexpr bool in_order_at = detail::is_ordered<detail::nth_t<2 * I, Specs...>>;
  template <std::size_t I>
  using queue_spec_type = detail::nth_t<2 * I + 1, Specs...>;
  /// Link L (between stage L and L + 1) is a device_link.
  template <std::size_t L>
  static constexpr bool device_link_at = detail::is_device_link<queue_spec_type<L>>::value;
  /// Link L is a direct_link: stage L + 1 runs on the threads that produce its items.
  template <std::size_t L>
  static constexpr bool direct_link_at = detail::is_direct_link<queue_spec_type<L>>::value;

 private:
  template <std::size_t I>
  static consteval bool input_on_device() {
    if constexpr (I == 0) return false;
    else return device_link_at<I - 1>;
  }
  template <std::size_t I>
  static consteval bool output_on_device() {
    if constexpr (I + 1 >= stage_count) return false;
    else return device_link_at<I>;
  }
  // Direct segments: maximal runs of stages joined by direct links.
  template <std::size_t I>
  static consteval bool direct_in() {
    if constexpr (I == 0) return false;
    else return direct_link_at<I - 1>;
  }
  template <std::size_t I>
  static consteval bool direct_out() {
    if constexpr (I + 1 >= stage_count) return false;
    else return direct_link_at<I>;
  }
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
  template <std::size_t L>
  static consteval auto backend_from() {
    if constexpr (L == queue_count) return std::type_identity<detail::no_backend>{};
    else if constexpr (device_link_at<L>)
      return std::type_identity<typename detail::device_link_item<typename stage_type<L>::output_type>::backend>{};
    else return backend_from<L + 1>();
  }

 public:
  /// Stage I is next to a device link: it gets a stream per worker.
  template <std::size_t I>
  static constexpr bool device_stage = input_on_device<I>() || output_on_device<I>();
  /// The backend of the device links (detail::no_backend without any).
  using backend_type = typename decltype(backend_from<0>())::type;
  static constexpr bool has_device_links = !std::is_same_v<backend_type, detail::no_backend>;
  /// Items carry their source sequence number (some stage is in_order).
  static constexpr bool sequenced = []<std::size_t... I>(std::index_sequence<I...>) {
    return (in_order_at<I> || ...);
  }(std::make_index_sequence<stage_count>{});
  static_assert(!(sequenced && has_device_links),
                "dflash::Pipeline: in_order stages are not supported in pipelines with device links yet");

 private:
  // Host link L carries values device work may still be writing (its producer is a device stage).
  template <std::size_t L>
  static constexpr bool pending_link = !device_link_at<L> && device_stage<L>;

  template <std::size_t I>
  static consteval bool check_stage() {
    using S = stage_type<I>;
    static_assert(requires { S::name; },
                  "dflash::Pipeline: a stage has no `name`: add `static constexpr dflash::fixed_string "
                  "name{\"my_stage\"};` (its keys are my_stage.wait / my_stage.work)");
    static_assert(requires { typename S::input_type; },
                  "dflash::Pipeline: a stage has no `input_type`: add `using input_type = ...;` (void for a source)");
    static_assert(requires { typename S::output_type; },
                  "dflash::Pipeline: a stage has no `output_type`: add `using output_type = ...;` (void for a sink)");
    static_assert(!requires { S::name; } || NamedStage<S>,
                  "dflash::Pipeline: a stage's `name` must be a `static constexpr dflash::fixed_string`");
    if constexpr (direct_in<I>() || direct_out<I>())
      static_assert(!device_stage<I>,
                    "dflash::Pipeline: a direct_link joins host stages only; a stage next to a device_link cannot "
                    "also be next to a direct_link (put a queue_spec there)");
    if constexpr (in_order_at<I> && direct_in<I>())
      static_assert(segment_first<I>() == 0,
                    "dflash::Pipeline: an in_order stage reached by a direct_link needs the source in the same direct "
                    "segment (source, direct_link, ..., in_order<S>): only then do items enter it in source order. "
                    "Put a queue_spec before the in_order stage instead");
    if constexpr (!NamedStage<S>) {
      return false;  // reported above
    } else if constexpr (device_stage<I>) {
      static_assert(has_device_links);
      using DS = device_stream<backend_type>;
      using In = typename S::input_type;
      using Out = typename S::output_type;
      if constexpr (I == 0) {
        static_assert(detail::callable_maybe_indexed<S, Out&, DS>,
                      "dflash::Pipeline: a source before a device_link must be callable as "
                      "bool(output_type& slot, dflash::device_stream<B>) — enqueue the work that fills the slot, "
                      "return false when exhausted");
      } else if constexpr (I + 1 == stage_count) {
        static_assert(detail::callable_maybe_indexed<S, In&, DS>,
                      "dflash::Pipeline: a sink after a device_link must be callable as "
                      "void(input_type& slot, dflash::device_stream<B>)");
      } else if constexpr (input_on_device<I>() && output_on_device<I>()) {
        static_assert(detail::callable_maybe_indexed<S, In&, Out&, DS>,
                      "dflash::Pipeline: a stage between two device_links must be callable as "
                      "void(input_type& in_slot, output_type& out_slot, dflash::device_stream<B>)");
      } else if constexpr (input_on_device<I>()) {
        static_assert(detail::callable_maybe_indexed<S, In&, DS>,
                      "dflash::Pipeline: a stage after a device_link (and before a queue_spec) must be callable as "
                      "output_type(input_type& slot, dflash::device_stream<B>)");
      } else {
        static_assert(detail::callable_maybe_indexed<S, In&&, Out&, DS>,
                      "dflash::Pipeline: a stage before a device_link must be callable as "
                      "void(input_type&&, output_type& slot, dflash::device_stream<B>) — a host-only stage cannot "
                      "feed a device_link");
      }
    } else if constexpr (I == 0) {
      static_assert(SourceStage<S>,
                    "dflash::Pipeline: the first stage must be a source: input_type = void, "
                    "std::optional<output_type> operator()()");
    } else if constexpr (I + 1 == stage_count) {
      static_assert(SinkStage<S>,
                    "dflash::Pipeline: the last stage must be a sink: output_type = void, void operator()(input_type&&)");
    } else {
      static_assert(TransformStage<S>,
                    "dflash::Pipeline: a middle stage must be a transform: output_type operator()(input_type&&)");
    }
    return true;
  }

  template <std::size_t... I>
  static consteval bool check_specs(std::index_sequence<I...>) {
    static_assert(((detail::is_queue_spec<queue_spec_type<I>>::value || device_link_at<I> || direct_link_at<I>) && ...),
                  "dflash::Pipeline: every second entry must be a dflash::queue_spec<\"name\", depth>, a "
                  "dflash::device_link<\"name\", depth> or a dflash::direct_link<\"name\", depth>");
    return (check_stage<I>() && ...) && check_stage<stage_count - 1>() &&
           (detail::link_check<stage_type<I>, stage_type<I + 1>>::value && ...);
  }
  static_assert(check_specs(std::make_index_sequence<queue_count>{}));

  template <std::size_t I>
  static auto keys_of_stage() {
    if constexpr (device_stage<I>)
      return std::type_identity<key_set_cat_t<stage_keys_t<stage_type<I>>, key_set<name_cat<stage_type<I>::name, ".gpu">>>>{};
    else return std::type_identity<stage_keys_t<stage_type<I>>>{};
  }
  template <std::size_t I>
  using stage_all_keys = typename decltype(keys_of_stage<I>())::type;

  template <std::size_t... I>
  static auto keys_of(std::index_sequence<I...>)
      -> key_set_cat_t<stage_all_keys<0>, key_set_cat_t<queue_keys<queue_spec_type<I>::name>, stage_all_keys<I + 1>>...>;
  template <std::size_t... I>
  static auto stages_of(std::index_sequence<I...>) -> boost::hana::tuple<stage_type<I>...>;

  template <std::size_t L>
  static auto link_of() {
    using T = typename stage_type<L>::output_type;
    constexpr auto N = queue_spec_type<L>::name;
    if constexpr (direct_link_at<L>) return std::type_identity<detail::direct_hop>{};
    else if constexpr (device_link_at<L>) return std::type_identity<device_channel<T, P, N>>{};
    else if constexpr (pending_link<L>) return std::type_identity<bounded_queue<detail::pending<T, backend_type>, P, N>>{};
    else if constexpr (sequenced) return std::type_identity<bounded_queue<detail::sequenced<T>, P, N>>{};
    else return std::type_identity<bounded_queue<T, P, N>>{};
  }

 public:
  /// Every key this pipeline (and its stages' own keys) records; independent of P.
  using keys = decltype(keys_of(std::make_index_sequence<queue_count>{}));

  /// Link I: a bounded_queue, or a device_channel for a device_link.
  template <std::size_t I>
  using queue_type = typename decltype(link_of<I>())::type;

 private:
  template <std::size_t... I>
  static auto queues_of(std::index_sequence<I...>) -> boost::hana::tuple<std::unique_ptr<queue_type<I>>...>;
  // The reorder buffer of an in_order stage (see deliver_in_order).
  template <std::size_t I>
  struct order_state {
    using value = std::conditional_t<std::is_void_v<typename stage_type<I>::input_type>, char,
                                     typename stage_type<I>::input_type>;
    std::map<std::uint64_t, value> early;
    std::uint64_t next = 0;
  };
  template <std::size_t... I>
  static auto orders_of(std::index_sequence<I...>) -> boost::hana::tuple<order_state<I>...>;
  using orders_tuple = decltype(orders_of(std::make_index_sequence<stage_count>{}));
  using stages_tuple = decltype(stages_of(std::make_index_sequence<stage_count>{}));
  using queues_tuple = decltype(queues_of(std::make_index_sequence<queue_count>{}));

  // Device state: owned only by pipelines with device links.
  struct device_state_none {};
  struct device_state_some {
    using B = backend_type;
    B backend;
    std::array<std::vector<typename B::stream_type>, stage_count> streams{};
    std::array<std::unique_ptr<detail::event_pool<B>>, queue_count> pools{};
  };
  using device_state = std::conditional_t<has_device_links, device_state_some, device_state_none>;

 public:
  /// Stages in order (or none, to default-construct them all). `prof` must outlive the pipeline.
  template <class... Args>
    requires(sizeof...(Args) == stage_count || sizeof...(Args) == 0)
  explicit Pipeline(const P& prof, Args&&... stages)
      : prof_(prof), stages_(std::forward<Args>(stages)...), shape_(default_shape()) {
    make_queues(std::make_index_sequence<queue_count>{});
  }

  using shape_type = pipeline_shape<stage_count, queue_count>;
  /// The compile-time sizes: workers<S, N>::count per stage, queue_spec depth per queue.
  [[nodiscard]] static constexpr shape_type default_shape() noexcept {
    shape_type s;
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((s.workers[I] = workers_of<I>), ...); }(
        std::make_index_sequence<stage_count>{});
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((s.depths[I] = queue_spec_type<I>::depth), ...); }(
        std::make_index_sequence<queue_count>{});
    return s;
  }
  /// Runtime sizes; every worker count and depth must be >= 1 (std::invalid_argument otherwise).
  template <class... Args>
    requires(sizeof...(Args) == stage_count || sizeof...(Args) == 0)
  Pipeline(const P& prof, const shape_type& shape, Args&&... stages)
      : prof_(prof), stages_(std::forward<Args>(stages)...), shape_(checked(shape)) {
    make_queues(std::make_index_sequence<queue_count>{});
  }
  template <class... Args>
    requires(std::is_empty_v<P> && (sizeof...(Args) == stage_count || sizeof...(Args) == 0))
  Pipeline(const shape_type& shape, Args&&... stages) : Pipeline(P{}, shape, std::forward<Args>(stages)...) {}
  [[nodiscard]] const shape_type& shape() const noexcept { return shape_; }
  /// The compile-time topology with a run-time shape, as plain data for the
  /// analysis (analysis/bottleneck.hpp, analysis/what_if.hpp); built on demand, never on a hot path.
  [[nodiscard]] static analysis::pipeline_layout layout(const shape_type& s) {
    analysis::pipeline_layout out;
    if constexpr (has_device_links) out.device_work_on_cpu = backend_type::work_on_host_cores;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (out.stages.push_back({std::string(stage_type<I>::name.view()), s.workers[I], device_stage<I>, in_order_at<I>}),
       ...);
    }(std::make_index_sequence<stage_count>{});
    [&]<std::size_t... L>(std::index_sequence<L...>) {
      (out.links.push_back({std::string(queue_spec_type<L>::name.view()),
                            device_link_at<L>   ? analysis::link_kind::device
                            : direct_link_at<L> ? analysis::link_kind::direct
                                                : analysis::link_kind::queue,
                            s.depths[L]}),
       ...);
    }(std::make_index_sequence<queue_count>{});
    return out;
  }
  [[nodiscard]] analysis::pipeline_layout layout() const { return layout(shape_); }
  /// For empty policies (NullProfiler): no profiler argument.
  template <class... Args>
    requires(std::is_empty_v<P> && (sizeof...(Args) == stage_count || sizeof...(Args) == 0) &&
             (!std::is_same_v<std::remove_cvref_t<Args>, P> && ...))
  explicit Pipeline(Args&&... stages) : Pipeline(P{}, std::forward<Args>(stages)...) {}

  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Cancels and joins if still running; an unobserved stage exception is
  /// dropped. Destroying a started pipeline that was neither joined nor
  /// stopped is almost always a forgotten join(): it says so on stderr (the
  /// items still in flight never reach the sink).
  /// A pipeline that was never run (nor stopped on purpose) did nothing,
  /// which is almost always a forgotten run(): that too is said on stderr.
  ~Pipeline() {
    if (!started_ && !stop_requested_.load(std::memory_order_acquire))
      std::fputs("dflash::Pipeline: destroyed without ever being run; its stages did nothing. "
                 "Call run() and join(), or run_to_completion().\n",
                 stderr);
    if (!threads_.empty()) {
      if (!stop_requested_.load(std::memory_order_acquire) && !cancelled())
        std::fputs("dflash::Pipeline: destroyed while running without join() or stop(); cancelling it. "
                   "Call join() (or run_to_completion()) to let it finish, or stop() to cancel on purpose.\n",
                   stderr);
      cancel();
      for (auto& t : threads_)
        if (t.joinable()) t.join();
    }
    destroy_streams();  // each worker already waited for its stream's work
  }

  /// Starts every stage's threads and returns. Once per pipeline.
  void run() {
    if (started_) throw std::logic_error("dflash::Pipeline::run(): the pipeline was already started");
    started_ = true;
    threads_.reserve(total_workers());
    try {
      make_streams();
      launch(std::make_index_sequence<stage_count>{});
    } catch (...) {
      cancel();
      for (auto& t : threads_)
        if (t.joinable()) t.join();
      threads_.clear();
      throw;
    }
  }

  /// run() then join(): blocks until the source is exhausted and every item
  /// reached the sink (or a stage threw: rethrown here).
  void run_to_completion() {
    run();
    join();
  }

  /// Waits for every thread; rethrows the first exception a stage threw.
  /// Call from one thread, after run() (before it: std::logic_error).
  void join() {
    if (!started_)
      throw std::logic_error(
          "dflash::Pipeline::join(): run() was never called, so nothing ran; call run() first (or run_to_completion())");
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    if (!cancelled()) check_in_order_complete();
    std::exception_ptr e;
    {
      std::lock_guard lk(err_m_);
      e = std::exchange(error_, nullptr);
    }
    if (e) std::rethrow_exception(e);
  }

  /// Thread-safe, non-blocking; follow with join().
  void stop(stop_mode mode = stop_mode::cancel) noexcept {
    stop_requested_.store(true, std::memory_order_release);
    if (mode == stop_mode::drain) draining_.store(true, std::memory_order_release);
    else cancel();
  }

  [[nodiscard]] bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

  template <std::size_t I>
  [[nodiscard]] queue_type<I>& queue() noexcept {
    static_assert(!direct_link_at<I>, "dflash::Pipeline::queue<I>(): link I is a direct_link, which has no queue");
    return *boost::hana::at_c<I>(queues_);
  }
  /// The I-th stage object (0 = the source, stage_count - 1 = the sink). I
  /// counts stages only: links (queue_spec, direct_link, device_link) have
  /// no index here, so in `Pipeline<P, A, queue_spec<"q", 4>, B>` B is stage<1>().
  template <std::size_t I>
  [[nodiscard]] auto& stage() noexcept {
    static_assert(I < stage_count, "dflash::Pipeline::stage<I>(): I is past the last stage (I counts stages "
                                   "only, from 0 = the source; links are not counted)");
    return boost::hana::at_c<I>(stages_);
  }
  [[nodiscard]] const P& profiler() const noexcept { return prof_.get(); }
  /// The device backend the device links and device stages use (device pipelines only).
  [[nodiscard]] auto& backend() noexcept
    requires has_device_links
  {
    return dev_.backend;
  }

 private:
  // An in_order stage that still parks items after a normal end waited for an
  // item that never came: report the loss instead of ending as if complete.
  void check_in_order_complete() {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         if constexpr (in_order_at<I>) {
           auto& o = boost::hana::at_c<I>(orders_);
           if (!o.early.empty())
             fail(std::make_exception_ptr(std::logic_error(
                 "dflash::Pipeline: in_order stage '" + std::string(stage_type<I>::name.view()) + "' ended with " +
                 std::to_string(o.early.size()) + " item(s) parked: item #" + std::to_string(o.next) +
                 " never arrived, so they were not delivered")));
         }
       }()),
       ...);
    }(std::make_index_sequence<stage_count>{});
  }

  template <std::size_t... I>
  void make_queues(std::index_sequence<I...>) {
    (make_queue<I>(), ...);
  }
  template <std::size_t I>
  void make_queue() {
    if constexpr (direct_link_at<I>) return;
    else if constexpr (device_link_at<I>)
      boost::hana::at_c<I>(queues_) = std::make_unique<queue_type<I>>(dev_.backend, shape_.depths[I], prof_.get());
    else boost::hana::at_c<I>(queues_) = std::make_unique<queue_type<I>>(shape_.depths[I], prof_.get());
    if constexpr (pending_link<I>) dev_.pools[I] = std::make_unique<detail::event_pool<backend_type>>(dev_.backend);
  }
  // One stream per worker of each device stage, made by run(), destroyed by ~Pipeline.
  void make_streams() {
    if constexpr (has_device_links) {
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (([&] {
           if constexpr (device_stage<I>)
             for (std::size_t w = 0; w < shape_.workers[I]; ++w) dev_.streams[I].push_back(dev_.backend.create_stream());
         }()),
         ...);
      }(std::make_index_sequence<stage_count>{});
    }
  }
  void destroy_streams() noexcept {
    if constexpr (has_device_links) {
      for (auto& v : dev_.streams) {
        for (auto st : v) dev_.backend.destroy_stream(st);
        v.clear();
      }
    }
  }
  static shape_type checked(const shape_type& s) {
    for (std::size_t i = 0; i < stage_count; ++i)
      if (s.workers[i] == 0)
        throw std::invalid_argument("dflash::Pipeline: stage " + std::to_string(i) + " needs at least one worker (got 0)");
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (((in_order_at<I> && s.workers[I] != 1)
            ? throw std::invalid_argument("dflash::Pipeline: stage " + std::to_string(I) +
                                          " is in_order and runs on exactly one worker (got " +
                                          std::to_string(s.workers[I]) + ")")
            : void()),
       ...);
    }(std::make_index_sequence<stage_count>{});
    for (std::size_t i = 0; i < queue_count; ++i) {
      if (s.depths[i] == 0)
        throw std::invalid_argument("dflash::Pipeline: queue " + std::to_string(i) + " needs a depth of at least 1 (got 0)");
      // One limit for every link kind, whatever it allocates (a direct link's window allocates nothing).
      if (s.depths[i] > detail::max_ring_capacity)
        throw std::invalid_argument("dflash::Pipeline: queue " + std::to_string(i) + " needs a depth of at most 2^61 (got " +
                                    std::to_string(s.depths[i]) + ")");
    }
    [&]<std::size_t... I>(std::index_sequence<I...>) { (check_segment<I>(s), ...); }(
        std::make_index_sequence<stage_count>{});
    return s;
  }
  // A direct segment runs on the threads of its one parallel stage; its source
  // (if any) is serial; an in_order stage in it directly follows the parallel stage.
  template <std::size_t A>
  static void check_segment(const shape_type& s) {
    if constexpr (direct_out<A>() && !direct_in<A>()) {
      constexpr std::size_t B = segment_last<A>();
      if (A == 0 && s.workers[0] > 1)
        throw std::invalid_argument("dflash::Pipeline: a source joined by a direct_link runs one call at a time "
                                    "(workers must be 1, got " + std::to_string(s.workers[0]) + ")");
      const std::size_t p = parallel_stage_of<A>(s);
      for (std::size_t k = p + 1; k <= B && p < stage_count; ++k)
        if (s.workers[k] > 1)
          throw std::invalid_argument("dflash::Pipeline: stages " + std::to_string(p) + " and " + std::to_string(k) +
                                      " are joined by direct_links and both have several workers; a direct segment "
                                      "runs on the workers of one parallel stage (put a queue_spec between them)");
      if (in_order_at<A> && p < stage_count)
        throw std::invalid_argument("dflash::Pipeline: the in_order stage " + std::to_string(A) +
                                    " starts a direct segment, which then runs on one thread: stage " +
                                    std::to_string(p) + " of that segment cannot have several workers");
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        (((in_order_at<A + K> && K > 0 && p < stage_count && p + 1 != A + K)
              ? throw std::invalid_argument("dflash::Pipeline: the in_order stage " + std::to_string(A + K) +
                                            " in a direct segment must directly follow its parallel stage (" +
                                            std::to_string(p) + ")")
              : void()),
         ...);
      }(std::make_index_sequence<B - A + 1>{});
    }
  }
  /// The stage with several workers in the direct segment starting at A, or stage_count if none.
  template <std::size_t A>
  static std::size_t parallel_stage_of(const shape_type& s) noexcept {
    for (std::size_t k = A; k <= segment_last<A>(); ++k)
      if (s.workers[k] > 1) return k;
    return stage_count;
  }
  /// Threads stage I starts: none if it runs on its producers' threads.
  template <std::size_t I>
  std::size_t threads_of() const noexcept {
    if constexpr (direct_in<I>()) return 0;
    else if constexpr (direct_out<I>()) {
      const std::size_t p = parallel_stage_of<I>(shape_);
      return p < stage_count ? shape_.workers[p] : 1;
    } else {
      return shape_.workers[I];
    }
  }
  std::size_t total_workers() const noexcept {
    std::size_t n = 0;
    for (std::size_t w : shape_.workers) n += w;
    return n;
  }
  template <std::size_t... I>
  void launch(std::index_sequence<I...>) {
    ((live_[I].store(threads_of<I>(), std::memory_order_relaxed)), ...);
    (launch_stage<I>(), ...);
  }
  template <std::size_t I>
  void launch_stage() {
    if constexpr (!direct_in<I>()) {  // else it runs on its segment's threads
      for (std::size_t w = 0; w < threads_of<I>(); ++w) {
        if constexpr (direct_out<I>()) threads_.emplace_back([this, w] { segment_worker<I>(w); });
        else threads_.emplace_back([this, w] { worker<I>(w); });
      }
    }
  }

  void cancel() noexcept {
    cancelled_.store(true, std::memory_order_release);
    boost::hana::for_each(queues_, [](auto& q) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*q)>, detail::direct_hop>) return;
      else if constexpr (requires { q->cancel(); }) q->cancel();  // device link: wake producers and consumers
      else q->close();
    });
    for (auto& g : segs_) g.turn.notify_all();  // threads waiting for an in_order turn (they also re-check every 2 ms)
  }
  void fail(std::exception_ptr e) noexcept {
    {
      std::lock_guard lk(err_m_);
      if (!error_) error_ = std::move(e);
    }
    cancel();
  }

  template <std::size_t I>
  void worker(std::size_t w) noexcept {
    name_worker<I>(w);
    if constexpr (device_stage<I>) device_worker<I>(w);
    else host_worker<I>(w);
    worker_exit<I>();
  }

  // Trace tracks read "target_forward#2", not "thread 3" (stateful policies only).
  template <std::size_t I>
  void name_worker(std::size_t w) const noexcept {
    if constexpr (P::enabled) {
      try {
        name_this_thread(prof_.get(), std::string(stage_type<I>::name.view()) + "#" + std::to_string(w));
      } catch (...) {  // a name is cosmetic: never a reason to stop
      }
    }
  }

  // The last thread of stage I (of the direct segment I..B) closes its output: downstream drains and ends.
  template <std::size_t I, std::size_t B = I>
  void worker_exit() noexcept {
    if (live_[I].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if constexpr (B < queue_count) queue<B>().close();
    }
  }

  // Pops the next value of pending link I - 1 (device work may still be
  // writing it): `wait_for(ev)` orders the consumer after that work (the host
  // thread waits, or a stream does), then the event goes back to its pool.
  template <std::size_t I, class Wait>
  std::optional<typename stage_type<I>::input_type> pop_pending(Wait&& wait_for) {
    auto got = queue<I - 1>().pop();
    std::optional<typename stage_type<I>::input_type> v;
    if (!got) return v;
    wait_for(got->ev);  // rethrows an error of the work that wrote it
    dev_.pools[I - 1]->release(got->ev);
    v.emplace(std::move(got->value));
    return v;
  }

  // Pops the next input of host stage I, and its sequence number when items
  // carry one; a value device work was writing is waited for here, on this
  // (the consumer's) thread.
  template <std::size_t I>
  std::optional<typename stage_type<I>::input_type> pop_input([[maybe_unused]] std::uint64_t& seq) {
    if constexpr (pending_link<I - 1>) {
      return pop_pending<I>([this](auto ev) { dev_.backend.host_wait(ev); });
    } else if constexpr (sequenced) {
      auto got = queue<I - 1>().pop();
      std::optional<typename stage_type<I>::input_type> v;
      if (got) {
        seq = got->seq;
        v.emplace(std::move(got->value));
      }
      return v;
    } else {
      return queue<I - 1>().pop();
    }
  }

  // Hands stage I's output to link I, with its sequence number when items carry one.
  template <std::size_t I>
  bool push_output(typename stage_type<I>::output_type&& y, [[maybe_unused]] std::uint64_t seq) {
    if constexpr (sequenced) return queue<I>().push(detail::sequenced<typename stage_type<I>::output_type>{seq, std::move(y)});
    else return queue<I>().push(std::move(y));
  }

  // in_order stage I: runs `run(x, seq)` if x is due, then the parked items
  // that follow it; parks x if it came early. One caller at a time (the
  // stage's one worker, or the holder of its segment's `post`). `run` returns
  // false when the pipeline is closing; so does this.
  template <std::size_t I, class Run>
  bool deliver_in_order(typename stage_type<I>::input_type&& x, std::uint64_t seq, Run&& run) {
    auto& o = boost::hana::at_c<I>(orders_);
    if (seq != o.next) {
      // the call that brings the item due next runs it
      if (seq < o.next || !o.early.emplace(seq, std::move(x)).second)
        throw std::logic_error("dflash::Pipeline: in_order stage '" + std::string(stage_type<I>::name.view()) +
                               "' received item #" + std::to_string(seq) + " twice");
      return true;
    }
    bool ok = run(std::move(x), o.next++);
    while (ok && !o.early.empty() && o.early.begin()->first == o.next && !cancelled()) {
      auto node = o.early.extract(o.early.begin());
      ok = run(std::move(node.mapped()), o.next++);
    }
    return ok;
  }

  template <std::size_t I>
  void host_worker(std::size_t w) noexcept {
    using S = stage_type<I>;
    using wait_key = stage_wait_key<S::name>;
    using work_key = stage_work_key<S::name>;
    S& s = boost::hana::at_c<I>(stages_);
    const P& prof = prof_.get();
    try {
      if constexpr (I == 0) {
        while (!cancelled() && !draining_.load(std::memory_order_acquire)) {
          auto item = timed(prof, work_key{}, [&] { return detail::call_stage(s, w); });
          if (!item) break;
          // One numbering across every source worker: an in_order stage
          // orders all items, and no two carry the same number.
          std::uint64_t seq = 0;
          if constexpr (sequenced) seq = source_seq_.fetch_add(1, std::memory_order_relaxed);
          bool ok;
          {
            auto t = prof.scope(wait_key{});
            ok = push_output<0>(std::move(*item), seq);
          }
          if (!ok) break;
        }
      } else {
        // Calls the stage on one item and hands the result on; false: the pipeline is closing.
        auto process = [&](typename S::input_type&& x, [[maybe_unused]] std::uint64_t seq) -> bool {
          if constexpr (I + 1 < stage_count) {
            typename S::output_type y = timed(prof, work_key{}, [&] { return detail::call_stage(s, w, std::move(x)); });
            auto t = prof.scope(wait_key{});
            return push_output<I>(std::move(y), seq);
          } else {
            timed(prof, work_key{}, [&] { detail::call_stage(s, w, std::move(x)); });
            return true;
          }
        };
        for (;;) {
          std::optional<typename S::input_type> item;
          std::uint64_t seq = 0;
          {
            auto t = prof.scope(wait_key{});
            item = pop_input<I>(seq);
          }
          if (!item || cancelled()) break;
          bool ok;
          if constexpr (in_order_at<I>) ok = deliver_in_order<I>(std::move(*item), seq, process);
          else ok = process(std::move(*item), seq);
          if (!ok) break;
        }
      }
    } catch (const pipeline_stop&) {
      cancel();
    } catch (...) {
      fail(std::current_exception());
    }
  }

  // ---- direct segments: stages A..B joined by direct links, on the same threads ----
  // Each thread takes an item (calls the source, or pops the segment's input
  // queue) and carries it through every stage of the segment. Stages before
  // the parallel stage p run under `pre` (held from taking the item), p runs
  // unlocked, stages after p under `post`; an in_order stage right after p
  // parks early items in its reorder buffer, and the thread that brings the
  // item due next also runs the parked ones that follow it (oneTBB's tokens).
  struct chain {
    std::size_t w, p;  // the thread's index; the parallel stage (stage_count: none, one thread)
    std::unique_lock<std::mutex> pre, post;
  };

  template <std::size_t A>
  void segment_worker(std::size_t w) noexcept {
    constexpr std::size_t B = segment_last<A>();
    detail::segment_sync& g = segs_[A];
    const P& prof = prof_.get();
    name_worker<A>(w);
    chain c{w, parallel_stage_of<A>(shape_), std::unique_lock(g.pre, std::defer_lock),
            std::unique_lock(g.post, std::defer_lock)};
    const auto release = [&]() noexcept {  // a stage may throw while its thread holds a lock
      if (c.pre.owns_lock()) c.pre.unlock();
      if (c.post.owns_lock()) c.post.unlock();
    };
    // On a throw the pipeline is cancelled before the locks are released, so
    // no thread queued on a serial stage's lock calls it again with a later
    // item (cancel() takes neither lock, so it cannot deadlock here).
    try {
      while (!cancelled()) {
        const bool more = segment_take<A>(c, prof);
        release();
        if (!more) break;
      }
    } catch (const pipeline_stop&) {
      cancel();
      release();
    } catch (...) {
      fail(std::current_exception());
      release();
    }
    worker_exit<A, B>();
  }

  // Takes the segment's next input and carries it through; false: no more input or closing.
  template <std::size_t A>
  bool segment_take(chain& c, const P& prof) {
    using S = stage_type<A>;
    detail::segment_sync& g = segs_[A];
    if constexpr (A == 0) {
      {
        auto t = prof.scope(stage_wait_key<S::name>{});
        detail::lock_spinning(c.pre);  // the source runs one call at a time; sequence numbers follow its order
      }
      if (g.exhausted || draining_.load(std::memory_order_acquire) || cancelled()) return false;
      auto item = timed(prof, stage_work_key<S::name>{}, [&] { return detail::call_stage(stage<0>(), 0); });
      if (!item) {
        g.exhausted = true;
        return false;
      }
      const std::uint64_t seq = g.issued++;
      return segment_step<1, A>(std::move(*item), seq, c, prof);
    } else {
      std::optional<typename S::input_type> item;
      std::uint64_t seq = 0;
      {
        auto t = prof.scope(stage_wait_key<S::name>{});
        item = pop_input<A>(seq);
      }
      if (!item || cancelled()) return false;
      auto step = [&](typename S::input_type&& x, std::uint64_t s) { return segment_step<A, A>(std::move(x), s, c, prof); };
      if constexpr (in_order_at<A>) return deliver_in_order<A>(std::move(*item), seq, step);  // one thread (checked)
      else return step(std::move(*item), seq);
    }
  }

  // Stage K of the segment from A: takes the lock K runs under, then calls it.
  template <std::size_t K, std::size_t A>
  bool segment_step(typename stage_type<K>::input_type&& x, std::uint64_t seq, chain& c, const P& prof) {
    auto wait_scope = [&] {
      if constexpr (K == A) return prof.scope(stage_wait_key<stage_type<K>::name>{});
      else return prof.scope(push_wait_key<queue_spec_type<K - 1>::name>{});
    };
    if (K < c.p) {
      if (!c.pre.owns_lock()) {
        {
          auto t = wait_scope();
          detail::lock_spinning(c.pre);
        }
        if (cancelled()) return false;  // queued on the lock while the pipeline stopped: no new call
      }
    } else {
      if (c.pre.owns_lock()) c.pre.unlock();
      if (K > c.p && !c.post.owns_lock()) {
        {
          auto t = wait_scope();
          detail::lock_spinning(c.post);
        }
        if (cancelled()) return false;
        if constexpr (in_order_at<K> && K > A) return segment_in_order<K, A>(std::move(x), seq, c, prof);
      }
    }
    return segment_call<K, A>(std::move(x), seq, c, prof);
  }

  // Under `post`: runs x if it is due, then the parked items that follow it;
  // parks x if it is early and the window has room; else waits for its turn.
  template <std::size_t K, std::size_t A>
  bool segment_in_order(typename stage_type<K>::input_type&& x, std::uint64_t seq, chain& c, const P& prof) {
    detail::segment_sync& g = segs_[A];
    auto& o = boost::hana::at_c<K>(orders_);
    const std::size_t window = shape_.depths[K - 1];
    if (seq != o.next && o.early.size() >= window) {
      auto t = prof.scope(push_wait_key<queue_spec_type<K - 1>::name>{});
      const auto ready = [&] { return seq == o.next || o.early.size() < window || cancelled(); };
      for (int i = 0; i < 32 && !ready(); ++i) {  // the turn usually comes within a call: spin before sleeping
        c.post.unlock();
        std::this_thread::yield();
        detail::lock_spinning(c.post);
      }
      // cancel() notifies without taking `post` (stop() must not block on a
      // running call, or deadlock when a stage calls it): a notify that falls
      // between our check and our wait is caught by the next timed check.
      while (!g.turn.wait_for(c.post, std::chrono::milliseconds(2), ready)) {
      }
    }
    if (cancelled()) return false;
    const bool due = seq == o.next;
    const bool ok = deliver_in_order<K>(std::move(x), seq, [&](typename stage_type<K>::input_type&& v, std::uint64_t s) {
      return segment_call<K, A>(std::move(v), s, c, prof);
    });
    if (due) {
      c.post.unlock();
      g.turn.notify_all();  // the item due next, or room in the window
    }
    return ok;
  }

  // Calls stage K (serial stages get worker index 0), then the next stage or the segment's output queue.
  template <std::size_t K, std::size_t A>
  bool segment_call(typename stage_type<K>::input_type&& x, std::uint64_t seq, chain& c, const P& prof) {
    using S = stage_type<K>;
    S& s = stage<K>();
    const std::size_t w = K == c.p ? c.w : 0;
    if constexpr (K + 1 == stage_count) {
      timed(prof, stage_work_key<S::name>{}, [&] { detail::call_stage(s, w, std::move(x)); });
      return true;
    } else {
      typename S::output_type y =
          timed(prof, stage_work_key<S::name>{}, [&] { return detail::call_stage(s, w, std::move(x)); });
      if constexpr (K < segment_last<A>()) {
        return segment_step<K + 1, A>(std::move(y), seq, c, prof);
      } else {
        auto t = prof.scope(stage_wait_key<S::name>{});
        return push_output<K>(std::move(y), seq);
      }
    }
  }

  // A stage next to a device link: everything it does to items is enqueued on
  // its worker's stream; the pipeline adds the stream-waits and records around
  // the call. The host never waits for the device here, except once at exit
  // (in-flight work completes before the worker reports done).
  template <std::size_t I>
  void device_worker(std::size_t w) noexcept {
    if constexpr (has_device_links) {
      using S = stage_type<I>;
      using B = backend_type;
      using wait_key = stage_wait_key<S::name>;
      using work_key = stage_work_key<S::name>;
      using gpu_key = stage_gpu_key<S::name>;
      S& s = boost::hana::at_c<I>(stages_);
      const P& prof = prof_.get();
      B& b = dev_.backend;
      const auto native = dev_.streams[I][w];
      const device_stream<B> ds(b, native);
      std::optional<detail::gpu_timer<B>> timer;
      // The stage's output held by value (char stands in for a sink's void).
      // Outside the loop and the try: work enqueued by the call may still write
      // it, so on an exception or a closed queue it is freed only after the
      // synchronize below.
      using out_value = std::conditional_t<std::is_void_v<typename S::output_type>, char, typename S::output_type>;
      [[maybe_unused]] std::optional<out_value> y;
      try {
        if constexpr (P::enabled) timer.emplace(b);
        for (;;) {
          if constexpr (I == 0) {
            if (cancelled() || draining_.load(std::memory_order_acquire)) break;
          }
          // 1. the input: a slot (the stream waits for its producer), a value
          //    device work may still be writing (the stream waits for it), or a host value
          [[maybe_unused]] auto in = [&] {
            auto t = prof.scope(wait_key{});
            if constexpr (I == 0) return true;
            else if constexpr (input_on_device<I>()) return queue<I - 1>().pop(ds);
            // A host value: the stage's host code may read it as soon as the
            // call starts, so the host waits for the work writing it, not
            // only the stream.
            else if constexpr (pending_link<I - 1>) return pop_pending<I>([&](auto ev) { b.host_wait(ev); });
            else {
              return queue<I - 1>().pop();
            }
          }();
          if constexpr (I > 0) {
            if (!in || cancelled()) break;
          }
          // 2. the output slot (blocks while the link's K slots are in flight)
          [[maybe_unused]] auto out = [&] {
            if constexpr (output_on_device<I>()) {
              auto t = prof.scope(wait_key{});
              return queue<I>().acquire(ds);
            } else {
              return true;
            }
          }();
          if constexpr (output_on_device<I>()) {
            if (!out) break;
          }
          // 3. the call: enqueues the work
          if constexpr (P::enabled) timer->start(native);
          auto call = [&]() -> decltype(auto) {
            auto t = prof.scope(work_key{});
            if constexpr (I == 0) return detail::call_stage(s, w, out->item(), ds);
            else if constexpr (input_on_device<I>() && output_on_device<I>())
              return detail::call_stage(s, w, in->item(), out->item(), ds);
            else if constexpr (input_on_device<I>()) return detail::call_stage(s, w, in->item(), ds);
            else return detail::call_stage(s, w, std::move(*in), out->item(), ds);
          };
          bool more = true;
          if constexpr (I == 0) more = static_cast<bool>(call());
          else if constexpr (!output_on_device<I>() && I + 1 < stage_count) y.emplace(call());
          else call();
          if constexpr (P::enabled) timer->stop(native);
          // 4. hand over: record on our stream after the work
          if constexpr (input_on_device<I>()) queue<I - 1>().release(std::move(*in), ds);
          if constexpr (output_on_device<I>()) {
            if (!more) {
              queue<I>().abandon(std::move(*out), ds);
              break;
            }
            if (!queue<I>().publish(std::move(*out), ds)) break;
          } else if constexpr (I + 1 < stage_count) {
            const auto ev = dev_.pools[I]->acquire();
            b.record(ev, native);
            detail::pending<typename S::output_type, B> pend{std::move(*y), ev};
            bool ok;
            {
              auto t = prof.scope(wait_key{});
              ok = queue<I>().push(std::move(pend));  // false: closed, pend left intact
            }
            if (!ok) {
              y.emplace(std::move(pend.value));  // work may still write it: freed after the sync below
              break;
            }
          }
          b.check(native);  // an asynchronous error so far: stop now, not at the end
          if constexpr (P::enabled) timer->resolve(prof, gpu_key{});
        }
      } catch (const pipeline_stop&) {
        cancel();
      } catch (...) {
        fail(std::current_exception());
      }
      // In-flight work completes before this worker counts as done (and so
      // before any slot can be freed); its errors are the pipeline's too.
      try {
        b.synchronize(native);
        if constexpr (P::enabled)
          if (timer) timer->resolve(prof, gpu_key{});
      } catch (const pipeline_stop&) {  // thrown inside enqueued work: a stop, as from the call
        cancel();
      } catch (...) {
        fail(std::current_exception());
      }
    } else {
      (void)w;
    }
  }

  [[no_unique_address]] profiler_ref<P> prof_;
  [[no_unique_address]] device_state dev_;  // first: stages and device links may hold its events and memory
  stages_tuple stages_;
  shape_type shape_;
  queues_tuple queues_;
  std::array<std::atomic<std::size_t>, stage_count> live_{};
  std::array<detail::segment_sync, stage_count> segs_;  // used by direct segments (indexed by first stage)
  orders_tuple orders_;
  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> source_seq_{0};  // the next source sequence number (in_order pipelines)
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stop_requested_{false};
  bool started_ = false;
  std::mutex err_m_;
  std::exception_ptr error_;
};

/// The complete key set of a pipeline template, for the profiler's type:
/// `AccumulatingProfiler<pipeline_keys_t<train_pipeline>>`.
template <template <class> class PipelineOf>
using pipeline_keys_t = typename PipelineOf<NullProfiler>::keys;

}  // namespace dflash
