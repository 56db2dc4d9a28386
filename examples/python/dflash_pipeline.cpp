// dflash_pipeline: the example's C++ pipeline (source -> target forward -> postprocess -> HS
// queue) driven from Python. Its hidden-state batches arrive in a Python loop, each field
// exportable without a copy through DLPack (numpy.from_dlpack, torch.from_dlpack); the Python
// loop is the pipeline's last stage, "drafter", so the profile and the advisor see its step
// (drafter.work) and its wait on the HS queue (drafter.wait) beside the C++ stages.
//
//   import dflash_pipeline as dp
//   with dp.HiddenStates(steps=200, device="cpu") as hs:
//       for batch in hs:
//           hidden = numpy.from_dlpack(batch.hidden)   # [seq_len, features] float32, zero-copy
//           ...                                        # the drafter step
//       print(hs.profile())                            # table (or format="json"), bottleneck, what-ifs
//
// The pipeline is instantiated here for AccumulatingProfiler (the profile is what a Python
// user comes for) and for each backend the build has: the host twin always, CUDA with nvcc.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlpack/dlpack.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <dflash/device/host_stream_backend.hpp>
#include <dflash/dflash.hpp>
#include <dflash/interop/dlpack.hpp>
#include <dflash/pipeline/handoff.hpp>
#if DFLASH_EXAMPLE_CUDA
#include <dflash/device/cuda_backend.hpp>
#endif

#include "advice.hpp"
#include "batch_source.hpp"
#include "device_postprocess.hpp"
#include "payloads.hpp"
#include "postprocess.hpp"
#include "setup.hpp"
#include "target_forward.hpp"

namespace py = pybind11;
namespace ex = dflash_example;

namespace {

// Batches alive anywhere (the iterator's, a Python Batch, a tensor a framework holds): what the
// tests read to see that every export lets go of its batch exactly once.
std::atomic<long> live_batches{0};

/// One HS-queue entry, shared by its Python Batch and every tensor exported from it.
struct batch_owner {
  std::unique_ptr<ex::HsItem> item;
  explicit batch_owner(std::unique_ptr<ex::HsItem> i) noexcept : item(std::move(i)) { ++live_batches; }
  batch_owner(const batch_owner&) = delete;
  batch_owner& operator=(const batch_owner&) = delete;
  ~batch_owner() { --live_batches; }
};
using batch_ptr = std::shared_ptr<batch_owner>;

/// One field of a batch, for DLPack consumers: the batch's own memory, kept alive by the
/// tensors made from it.
struct tensor {
  batch_ptr owner;
  void* data = nullptr;
  dflash::dlpack::tensor_layout layout;

  template <class T>
  static tensor over(const batch_ptr& b, std::vector<T>& v, std::initializer_list<std::int64_t> shape) {
    return {b, v.data(), dflash::dlpack::row_major<T>(shape)};
  }

  [[nodiscard]] py::tuple shape() const {
    py::tuple t(layout.shape.size());
    for (std::size_t d = 0; d < layout.shape.size(); ++d) t[d] = layout.shape[d];
    return t;
  }
  [[nodiscard]] std::string dtype() const {
    const DLDataType& t = layout.dtype;
    const char* kind = t.code == kDLFloat ? "float" : t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : "?";
    return kind + std::to_string(t.bits);
  }

  // The array API's __dlpack__: CPU memory, so no stream to order against (None, or -1 for
  // "no synchronisation"); a versioned capsule when the consumer takes DLPack >= 1.0.
  [[nodiscard]] py::object dlpack(const py::object& stream, const py::object& max_version,
                                  const py::object& dl_device, const py::object& copy) const {
    if (!stream.is_none() && !(py::isinstance<py::int_>(stream) && stream.cast<long long>() == -1))
      throw py::value_error("dflash_pipeline.Tensor.__dlpack__: stream=" + py::str(stream).cast<std::string>() +
                            " for CPU memory (only None or -1: there is no stream to wait on)");
    if (!dl_device.is_none()) {
      const auto want = dl_device.cast<std::pair<int, int>>();
      if (want.first != kDLCPU)
        throw py::buffer_error("dflash_pipeline.Tensor.__dlpack__: the batch is in CPU memory; dl_device=(" +
                               std::to_string(want.first) + ", " + std::to_string(want.second) +
                               ") would need a copy: import it, then copy");
    }
    if (!copy.is_none() && copy.cast<bool>())
      throw py::buffer_error("dflash_pipeline.Tensor.__dlpack__: copy=True: dflash exports the batch's memory "
                             "itself; copy after importing it");
    const bool versioned = !max_version.is_none() && max_version.cast<std::pair<int, int>>().first >= 1;
    dflash::dlpack::tensor_layout l = layout;
    if (versioned) {
      DLManagedTensorVersioned* t = dflash::dlpack::export_owned(owner, data, std::move(l));
      return capsule(t, "dltensor_versioned", [](PyObject* cap) {
        // A consumer that took the tensor renamed the capsule and owns it; otherwise it is ours.
        if (PyCapsule_IsValid(cap, "dltensor_versioned"))
          if (auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned")))
            if (m->deleter) m->deleter(m);
      });
    }
    DLManagedTensor* t = dflash::dlpack::export_owned_unversioned(owner, data, std::move(l));
    return capsule(t, "dltensor", [](PyObject* cap) {
      if (PyCapsule_IsValid(cap, "dltensor"))
        if (auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor")))
          if (m->deleter) m->deleter(m);
    });
  }

 private:
  template <class Managed>
  static py::object capsule(Managed* t, const char* name, PyCapsule_Destructor destroy) {
    PyObject* cap = PyCapsule_New(t, name, destroy);
    if (!cap) {
      t->deleter(t);
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(cap);
  }
};

/// What the Python loop receives: one HS-queue entry.
struct batch {
  batch_ptr owner;
  [[nodiscard]] ex::HsItem& item() const noexcept { return *owner->item; }
  [[nodiscard]] std::int64_t seq() const noexcept { return item().num_tokens(); }
  [[nodiscard]] std::int64_t features() const noexcept {
    return seq() > 0 ? static_cast<std::int64_t>(item().hidden.size()) / seq() : 0;
  }
};

// ---- the pipeline: the example's stages, then the Python loop as the sink ----

/// The pipeline's last stage: the HS-queue entry goes to the Python loop, and the call lasts
/// until the loop asks for the next one (dflash::handoff), so "drafter.work" is its step.
struct to_python {
  static constexpr dflash::fixed_string name{"drafter"};
  using input_type = std::unique_ptr<ex::HsItem>;
  using output_type = void;
  static constexpr bool own_threads_only = true;

  dflash::handoff<batch_ptr>* out = nullptr;
  std::atomic<std::int64_t>* tokens = nullptr;  // real tokens delivered: the advisor's tokens per step
  std::int64_t fail_at_step = -1;               // fault injection for the tests

  void operator()(std::unique_ptr<ex::HsItem>&& item) {
    // --device cuda: the postprocess's CPU part, now that the pipeline waited for its copy.
    if (auto finish = std::exchange(item->finish_on_host, nullptr)) finish(*item);
    if (item->error) std::rethrow_exception(item->error);
    if (item->step == fail_at_step)
      throw std::runtime_error("drafter: step " + std::to_string(item->step) +
                               " failed (fail_at_step, the fault the tests inject)");
    tokens->fetch_add(item->real_tokens(), std::memory_order_relaxed);
    out->give(std::make_shared<batch_owner>(std::move(item)));
  }
};

template <class P, class B>
using py_pipeline = dflash::Pipeline<P,                                                    //
                                     ex::batch_source, dflash::queue_link<"batch_queue", 8>,  //
                                     dflash::workers<ex::target_forward<P, B>, 2>,            //
                                     dflash::device_link<"hs_device", 4>,                     //
                                     ex::postprocess<P, B>, dflash::queue_link<"hs_queue", 60>,  //
                                     to_python>;
using py_keys = dflash::pipeline_keys<py_pipeline<dflash::NullProfiler, dflash::host_stream_backend>>;
using stats_type = dflash::AccumulatingProfiler<py_keys>;

/// A running pipeline, whichever backend: what HiddenStates holds.
class run_base {
 public:
  virtual ~run_base() = default;
  virtual void stop(dflash::stop_mode) noexcept = 0;
  virtual void join_runner() = 0;
  [[nodiscard]] virtual dflash::analysis::pipeline_layout layout() const = 0;
  [[nodiscard]] virtual std::optional<dflash::pinned_pool_stats> staging_stats() = 0;
};

template <class B>
class run_on final : public run_base {
  using pipeline = py_pipeline<stats_type, B>;

 public:
  run_on(const ex::Setup& setup, stats_type& stats, dflash::handoff<batch_ptr>& out, std::atomic<std::int64_t>& tokens,
         std::int64_t fail_at_step, ex::device_postprocessor* device)
      : p_(stats, shape_for(setup.opts), ex::batch_source(&setup),
           ex::target_forward<stats_type, B>(stats, &setup, static_cast<std::size_t>(setup.opts.target_workers)),
           ex::postprocess<stats_type, B>(stats, &setup, device), to_python{&out, &tokens, fail_at_step}),
        runner_([this, &out] {
          try {
            p_.run_to_completion();
            out.finish();
          } catch (...) {
            out.finish(std::current_exception());
          }
        }) {}
  ~run_on() override {
    p_.stop(dflash::stop_mode::cancel);
    if (runner_.joinable()) runner_.join();
  }
  void stop(dflash::stop_mode m) noexcept override { p_.stop(m); }
  void join_runner() override {
    if (runner_.joinable()) runner_.join();
  }
  [[nodiscard]] dflash::analysis::pipeline_layout layout() const override { return p_.layout(); }
  [[nodiscard]] std::optional<dflash::pinned_pool_stats> staging_stats() override {
    return p_.template stage<pipeline::template stage_index<"postprocess">>().staging_stats();
  }

 private:
  static typename pipeline::shape_type shape_for(const ex::Options& o) {
    auto s = pipeline::default_shape();
    s.workers[pipeline::template stage_index<"target_forward">] = static_cast<std::size_t>(o.target_workers);
    s.depths[pipeline::template link_index<"batch_queue">] = static_cast<std::size_t>(o.batch_queue_depth);
    s.depths[pipeline::template link_index<"hs_device">] = static_cast<std::size_t>(o.post_link_depth);
    s.depths[pipeline::template link_index<"hs_queue">] = static_cast<std::size_t>(o.hs_queue_depth);
    return s;
  }
  pipeline p_;
  std::thread runner_;  // runs and joins the pipeline, then ends the handoff with its outcome
};

#if DFLASH_EXAMPLE_CUDA
constexpr bool built_with_cuda = true;
#else
constexpr bool built_with_cuda = false;
#endif

void check_range(const char* name, std::int64_t v, ex::int_range r) {
  if (v < r.lo || v > r.hi)
    throw py::value_error(std::string("dflash_pipeline.HiddenStates: ") + name + "=" + std::to_string(v) +
                          " is out of range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]");
}

/// The Python object: builds the setup, starts the pipeline, hands out its batches.
class hidden_states {
 public:
  hidden_states(std::int64_t steps, const std::string& device, std::int32_t target_workers, std::int32_t hidden,
                std::int32_t seq_len, std::int32_t block_size, std::int32_t anchors, std::int32_t hs_queue_depth,
                std::int32_t post_link_depth, std::int32_t batch_queue_depth, std::uint64_t seed,
                std::vector<std::string> what_if, std::int64_t fail_at_step) {
    check_range("steps", steps, ex::limits::steps);
    check_range("target_workers", target_workers, ex::limits::target_workers);
    check_range("hidden", hidden, ex::limits::hidden);
    check_range("seq_len", seq_len, ex::limits::seq_len);
    check_range("block_size", block_size, ex::limits::block_size);
    check_range("anchors", anchors, ex::limits::anchors);
    check_range("hs_queue_depth", hs_queue_depth, ex::limits::depth);
    check_range("post_link_depth", post_link_depth, ex::limits::depth);
    check_range("batch_queue_depth", batch_queue_depth, ex::limits::depth);
    if (device != "cpu" && device != "cuda")
      throw py::value_error("dflash_pipeline.HiddenStates: device='" + device + "' (expected 'cpu' or 'cuda')");
    ex::Options o;
    o.steps = steps;
    o.target_workers = target_workers;
    o.hidden = hidden;
    o.seq_len = seq_len;
    o.block_size = block_size;
    o.anchors = anchors;
    o.hs_queue_depth = hs_queue_depth;
    o.post_link_depth = post_link_depth;
    o.batch_queue_depth = batch_queue_depth;
    o.seed = seed;
    o.what_if = std::move(what_if);
    o.device = device == "cuda" ? ex::device_kind::cuda : ex::device_kind::cpu;
    using twin = py_pipeline<stats_type, dflash::host_stream_backend>;
    try {  // a misspelt what-if is an error before any work
      (void)ex::advice_options_for(o, twin::layout(twin::default_shape()), ex::knob_names::python);
    } catch (const std::invalid_argument& e) {
      throw py::value_error(std::string("dflash_pipeline.HiddenStates: what_if: ") + e.what());
    }
    if (o.device == ex::device_kind::cuda) {
      if (const std::string why = ex::device_postprocessor::probe(); !why.empty())
        throw std::runtime_error("dflash_pipeline.HiddenStates: device='cuda': " + why);
      device_ = std::make_unique<ex::device_postprocessor>(ex::staging_blocks(o), o.seq_len);
    }
    setup_ = std::make_unique<ex::Setup>(o);
    cpu0_ = ex::process_cpu_ns();
#if DFLASH_EXAMPLE_CUDA
    if (o.device == ex::device_kind::cuda) {
      run_ = std::make_unique<run_on<dflash::cuda_backend>>(*setup_, stats_, out_, tokens_, fail_at_step, device_.get());
      return;
    }
#endif
    run_ = std::make_unique<run_on<dflash::host_stream_backend>>(*setup_, stats_, out_, tokens_, fail_at_step,
                                                                 device_.get());
  }
  hidden_states(const hidden_states&) = delete;
  hidden_states& operator=(const hidden_states&) = delete;
  ~hidden_states() { close(); }

  /// The next batch (the GIL is released while waiting); StopIteration at the end; the
  /// pipeline's error as a Python exception with its message.
  batch next() {
    std::optional<batch_ptr> b;
    {
      py::gil_scoped_release unlocked;
      b = out_.next();
    }
    if (!b) throw py::stop_iteration();
    return batch{std::move(*b)};
  }

  /// drain=True: the source stops, batches in flight still arrive (iterate on to the end);
  /// drain=False: the run ends now, the iterator stops.
  void stop(bool drain) {
    if (!run_) return;
    if (drain) {
      run_->stop(dflash::stop_mode::drain);
    } else {
      out_.cancel();
      run_->stop(dflash::stop_mode::cancel);
    }
  }

  /// Cancels what is still running and waits for the pipeline's threads.
  void close() {
    if (!run_) return;
    out_.cancel();
    run_->stop(dflash::stop_mode::cancel);
    {
      std::optional<py::gil_scoped_release> unlocked;
      if (PyGILState_Check()) unlocked.emplace();
      run_->join_runner();
    }
    layout_ = run_->layout();
    staging_ = run_->staging_stats();
    run_.reset();
  }

  /// The profile so far: the per-stage table (or JSON) with the bottleneck and what-ifs.
  [[nodiscard]] std::string profile(const std::string& format) const {
    if (format != "table" && format != "json")
      throw py::value_error("dflash_pipeline.HiddenStates.profile: format='" + format +
                            "' (expected 'table' or 'json')");
    dflash::report_options r;
    r.format = format == "json" ? dflash::report_format::json : dflash::report_format::table;
    const dflash::profile_snapshot snap = stats_.snapshot();
    const dflash::analysis::pipeline_layout lay = run_ ? run_->layout() : layout_;
    ex::Options o = setup_->opts;
    o.profile_format = format == "json" ? ex::output_format::json : ex::output_format::table;
    const double delivered = static_cast<double>(out_.taken());
    const ex::advised adv = ex::advise_on(snap, lay, o, ex::process_cpu_ns() - cpu0_,
                                          delivered > 0 ? static_cast<double>(tokens_.load()) / delivered : 0,
                                          ex::knob_names::python);
    const std::string advice = dflash::analysis::format_advice(adv.advice, adv.options);
    const std::optional<dflash::pinned_pool_stats> st = run_ ? run_->staging_stats() : staging_;
    if (format == "json") {
      std::string staging = "null";
      if (st)
        staging = "{\"allocations\":" + std::to_string(st->allocations) + ",\"reuses\":" + std::to_string(st->reuses) +
                  ",\"high_water_bytes\":" + std::to_string(st->high_water) +
                  ",\"bound_bytes\":" + std::to_string(st->bound) + "}";
      return "{\"profile\":" + stats_.summary(r) + ",\"advice\":" + advice + ",\"staging\":" + staging + "}";
    }
    return stats_.summary(r) + advice + ex::staging_line(st);
  }

  [[nodiscard]] std::uint64_t delivered() const { return out_.taken(); }
  [[nodiscard]] const ex::Setup& setup() const noexcept { return *setup_; }
  [[nodiscard]] bool running() const noexcept { return run_ != nullptr; }

 private:
  std::unique_ptr<ex::device_postprocessor> device_;
  std::unique_ptr<ex::Setup> setup_;
  stats_type stats_;
  dflash::handoff<batch_ptr> out_;
  std::atomic<std::int64_t> tokens_{0};
  double cpu0_ = 0;
  std::unique_ptr<run_base> run_;
  dflash::analysis::pipeline_layout layout_;  // kept for profile() after close()
  std::optional<dflash::pinned_pool_stats> staging_;
};

}  // namespace

PYBIND11_MODULE(dflash_pipeline, m) {
  m.doc() = "The dflash example's C++ pipeline (source, target forward, postprocess, HS queue) driven from Python: "
            "hidden-state batches exported through DLPack, the Python loop profiled as the 'drafter' stage.";

  py::class_<tensor>(m, "Tensor", "One field of a batch, in the batch's own memory; import it with "
                                  "numpy.from_dlpack / torch.from_dlpack (no copy). It keeps the batch alive.")
      .def_property_readonly("shape", &tensor::shape)
      .def_property_readonly("dtype", &tensor::dtype)
      .def_property_readonly("data_ptr", [](const tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data); },
                             "address of the first element (the batch's own memory)")
      .def("__dlpack__", &tensor::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const tensor&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); });

  py::class_<batch>(m, "Batch", "One HS-queue entry: a step's packed hidden states and what the drafter needs.")
      .def_property_readonly("step", [](const batch& b) { return b.item().step; })
      .def_property_readonly("dropped", [](const batch& b) { return b.item().dropped; },
                             "fewer than 2 x block_size loss tokens: a drafter skips it")
      .def_property_readonly("num_tokens", [](const batch& b) { return b.item().num_tokens(); })
      .def_property_readonly("real_tokens", [](const batch& b) { return b.item().real_tokens(); })
      .def_property_readonly("digest", [](const batch& b) { return b.item().digest(); },
                             "FNV-1a over every field the postprocess wrote (the C++ example's --results digest)")
      .def_property_readonly("hidden", [](const batch& b) {
        return tensor::over(b.owner, b.item().hidden, {b.seq(), b.features()});
      }, "[seq, features] float32")
      .def_property_readonly("tokens", [](const batch& b) { return tensor::over(b.owner, b.item().tokens, {b.seq()}); },
                             "[seq] int32")
      .def_property_readonly("loss_mask",
                             [](const batch& b) { return tensor::over(b.owner, b.item().loss_mask, {b.seq()}); },
                             "[seq] uint8")
      .def_property_readonly("doc_ids", [](const batch& b) { return tensor::over(b.owner, b.item().doc_ids, {b.seq()}); },
                             "[seq] int32")
      .def_property_readonly("pos", [](const batch& b) { return tensor::over(b.owner, b.item().pos, {b.seq()}); },
                             "[seq] int32: position within its document")
      .def_property_readonly("anchors", [](const batch& b) {
        return tensor::over(b.owner, b.item().anchors, {static_cast<std::int64_t>(b.item().anchors.size())});
      }, "[anchors] int32 (sorted; empty when dropped)")
      .def_property_readonly("keep", [](const batch& b) {
        return tensor::over(b.owner, b.item().keep, {static_cast<std::int64_t>(b.item().keep.size())});
      }, "[anchors] uint8: 1 where the anchor is real");

  py::class_<hidden_states>(m, "HiddenStates",
                            "Starts the pipeline; iterate it for Batch objects. Use it as a context manager (or "
                            "call close()) so that leaving the loop early stops the pipeline.")
      .def(py::init<std::int64_t, const std::string&, std::int32_t, std::int32_t, std::int32_t, std::int32_t,
                    std::int32_t, std::int32_t, std::int32_t, std::int32_t, std::uint64_t, std::vector<std::string>,
                    std::int64_t>(),
           py::kw_only(), py::arg("steps") = 200, py::arg("device") = "cpu", py::arg("target_workers") = 2,
           py::arg("hidden") = 64, py::arg("seq_len") = 384, py::arg("block_size") = 16, py::arg("anchors") = 24,
           py::arg("hs_queue_depth") = 60, py::arg("post_link_depth") = 4, py::arg("batch_queue_depth") = 8,
           py::arg("seed") = 1, py::arg("what_if") = std::vector<std::string>{}, py::arg("fail_at_step") = -1)
      .def("__iter__", [](hidden_states& h) -> hidden_states& { return h; }, py::return_value_policy::reference)
      .def("__next__", &hidden_states::next)
      .def("stop", &hidden_states::stop, py::kw_only(), py::arg("drain") = false,
           "drain=True: no new steps, batches in flight still arrive; drain=False: the run ends now")
      .def("close", &hidden_states::close, "cancel what still runs and wait for the pipeline's threads")
      .def("__enter__", [](hidden_states& h) -> hidden_states& { return h; }, py::return_value_policy::reference)
      .def("__exit__", [](hidden_states& h, const py::object&, const py::object&, const py::object&) { h.close(); })
      .def("profile", &hidden_states::profile, py::arg("format") = "table",
           "per-stage timings ('drafter' is the Python loop), the limiting stage and what-ifs; 'table' or 'json'")
      .def_property_readonly("delivered", &hidden_states::delivered, "batches handed to the Python loop so far")
      .def_property_readonly("running", &hidden_states::running)
      .def_property_readonly("features", [](const hidden_states& h) { return h.setup().target.feature_dim(); },
                             "hidden-state features per token (the target's tapped layers x hidden)")
      .def_property_readonly("vocab", [](const hidden_states& h) { return h.setup().data.vocab; })
      .def_property_readonly("block_size", [](const hidden_states& h) { return h.setup().opts.block_size; })
      .def_property_readonly("seq_len", [](const hidden_states& h) { return h.setup().opts.seq_len; });

  m.def("live_batches", [] { return live_batches.load(); },
        "batches alive in this process (a Batch, a tensor a framework holds, the one in hand-over)");
  m.attr("has_cuda") = py::bool_(built_with_cuda);
}
