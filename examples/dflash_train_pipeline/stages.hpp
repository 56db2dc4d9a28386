#pragma once
// The stages of the example pipeline and the pipeline type itself:
//
//   batch_source ─batch_queue─▶ target_forward × N ═hs_device (device link)═▶ postprocess ─hs_queue (60)─▶ drafter_train
//                               (stream per worker)                           (own stream)
//
// The target workers write hidden states into device slots; the postprocess
// reads them on its own stream (doc ids, packing, anchors, block mask) and
// copies the results into host memory asynchronously; the drafter trains on
// the CPU. Every stage is a template on the profiler policy P and the device
// backend B: dflash::cuda_backend (--device cuda) or the asynchronous host
// twin dflash::host_stream_backend (--device cpu), where "device" work runs
// on executor threads and device memory is host memory. With NullProfiler
// the timers compile to nothing. Stage names give the profile keys
// "<name>.wait" / "<name>.work" (and "<name>.gpu" for the device stages).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dflash/device/host_stream_backend.hpp>
#include <dflash/dflash.hpp>

#include "device_postprocess.hpp"
#include "model.hpp"
#include "options.hpp"
#include "step_check.hpp"
#include "target_forward_gpu.hpp"

namespace dflash_example {

using namespace dflash::literals;

// ------------------------------------------------------------ payloads ---

struct Batch {
  std::int64_t step = 0;
  TokenBatch tokens;  ///< padded [docs, seq] documents
};

/// One slot of the hs_device link: a step's target hidden states, on the device.
template <dflash::DeviceBackend B>
struct HsSlot : dflash::device_item<B> {
  std::int64_t step = 0;                   ///< host fields: set by the producer, read by the consumer's thread
  TokenBatch tokens;
  dflash::device_buffer<float, B> hidden;  ///< [docs, seq, feature] padded, written in stream order
};

/// One HS-queue entry: everything the drafter needs for a step, packed.
struct HsItem {
  std::int64_t step = 0;
  bool dropped = false;                 ///< fewer than 2 x block_size loss tokens: skipped
  std::vector<float> hidden;            ///< [S, feature]
  std::vector<std::int32_t> tokens;     ///< [S]
  std::vector<std::uint8_t> loss_mask;  ///< [S]
  std::vector<std::int32_t> doc_ids, pos;
  std::vector<std::int32_t> anchors;    ///< [N]
  std::vector<std::uint8_t> keep;       ///< [N]
  dflash::ops::block_sparse_mask mask;  ///< flex-attention style form
  AttentionMask attention;              ///< the drafter's CSR form of the same mask
  std::exception_ptr error;             ///< set when the device postprocess failed for this item
  /// --device cuda: the postprocess results are still in pinned staging; the
  /// consumer's host stage calls this (once) after the pipeline waited for the
  /// item's event: it fills the fields above (or throws for a wrong item).
  std::function<void(HsItem&)> finish_on_host;

  [[nodiscard]] std::int32_t num_tokens() const noexcept { return static_cast<std::int32_t>(tokens.size()); }

  /// FNV-1a over every field the postprocess wrote (float bits included):
  /// equal digests = bit-identical postprocess results (--results).
  [[nodiscard]] std::uint64_t digest() const noexcept {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const void* p, std::size_t n) {
      const auto* b = static_cast<const unsigned char*>(p);
      for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    };
    auto vec = [&mix](const auto& v) { mix(v.data(), v.size() * sizeof(v[0])); };
    mix(&dropped, sizeof dropped);
    vec(hidden), vec(tokens), vec(loss_mask), vec(doc_ids), vec(pos), vec(anchors), vec(keep);
    vec(mask.kv_num_blocks), vec(mask.kv_indices), vec(mask.full_kv_num_blocks), vec(mask.full_kv_indices);
    return h;
  }
};

// ------------------------------------------------------ mask adaptation ---

/// The drafter's CSR mask from the block-sparse one: full tiles are taken
/// whole, partial tiles ask the element rule (block_mask_mod), empty tiles
/// are never looked at.
[[nodiscard]] inline AttentionMask attention_from_block_mask(const dflash::ops::block_sparse_mask& m,
                                                             const dflash::ops::block_mask_mod& mod) {
  const std::int32_t rows = m.params.num_queries(), cols = m.params.num_kv();
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols), 0);
  auto tile = [&](std::int32_t qt, std::int32_t kt, bool full) {
    const std::int32_t q0 = qt * m.tile.q, q1 = std::min(q0 + m.tile.q, rows);
    const std::int32_t k0 = kt * m.tile.kv, k1 = std::min(k0 + m.tile.kv, cols);
    for (std::int32_t q = q0; q < q1; ++q) {
      std::uint8_t* row = dense.data() + static_cast<std::size_t>(q) * static_cast<std::size_t>(cols);
      for (std::int32_t kv = k0; kv < k1; ++kv) row[kv] = full || mod(q, kv) ? 1 : 0;
    }
  };
  for (std::int32_t qt = 0; qt < m.num_q_tiles; ++qt) {
    for (std::int32_t kt : m.full(qt)) tile(qt, kt, true);
    for (std::int32_t kt : m.partial(qt)) tile(qt, kt, false);
  }
  return AttentionMask::from_dense(rows, cols, dense);
}

/// Model sizes the stages share, derived from the options.
struct Setup {
  explicit Setup(const Options& o)
      : opts(o),
        data(make_data()),
        source(data),
        target(TargetConfig{.vocab = data.vocab, .hidden = o.hidden}),
        drafter_cfg(make_drafter(o, target.feature_dim(), data.vocab)) {}

  Options opts;
  DataConfig data;
  MarkovSource source;
  TargetModel target;
  DrafterConfig drafter_cfg;

  [[nodiscard]] dflash::ops::anchor_params anchor_params(std::int64_t step) const noexcept {
    return {opts.block_size, opts.anchors, mix_seed(opts.seed ^ 0xA5C0u, static_cast<std::uint64_t>(step))};
  }

 private:
  static DataConfig make_data() { return DataConfig{}; }
  static DrafterConfig make_drafter(const Options& o, std::int32_t feature_dim, std::int32_t vocab) {
    DrafterConfig c;
    c.vocab = vocab;
    c.feature_dim = feature_dim;
    c.block_size = o.block_size;
    // DFlash recipes: gamma 7 / 5 / 4 for block sizes 16 / 10 / 8; elsewhere block_size / 2.
    c.loss_gamma = o.block_size == 16 || o.block_size == 10 || o.block_size == 8 ? recommended_gamma(o.block_size)
                                                                                  : o.block_size / 2.0;
    c.seed = o.seed;
    return c;
  }
};

// --------------------------------------------------------------- stages ---

/// Seeded synthetic batches: documents of 48..192 tokens packed up to seq_len.
struct batch_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = Batch;

  explicit batch_source(const Setup* s) noexcept : setup(s) {}

  const Setup* setup;
  std::int64_t next = 0;  // one worker

  std::optional<Batch> operator()() {
    if (next >= setup->opts.steps) return std::nullopt;
    const std::int64_t step = next++;
    return Batch{step, setup->source.make_batch(setup->opts.seed, static_cast<std::uint64_t>(step), setup->opts.seq_len)};
  }
};

/// The frozen target: a forward over the padded documents, taps concatenated,
/// on the CPU (this worker's thread), then an asynchronous copy into the
/// slot's device buffer. TargetModel::forward_padded is const: N workers share it.
/// [gpu forward] With CUDA the same model runs on the GPU instead, on the worker's stream into the slot.
template <dflash::ProfilerPolicy P, dflash::DeviceBackend B>
struct target_forward {
  static constexpr dflash::fixed_string name{"target_forward"};
  using input_type = Batch;
  using output_type = HsSlot<B>;
  using keys = dflash::key_set<"target_forward.model">;  // the model forward alone (work minus the upload)

  target_forward(const P& p, const Setup* s, std::size_t workers) : prof(p), setup(s), staging(workers) {
    for (auto& st : staging) st = std::make_unique<upload>();
    // [gpu forward] --device cuda: the model's weights on the device, scratch per worker (target_forward_gpu.hpp)
    if constexpr (!std::is_same_v<B, dflash::host_stream_backend>)
      gpu = std::make_shared<target_forward_gpu>(s->target, s->opts.seq_len, workers);
  }

  [[no_unique_address]] dflash::profiler_ref<P> prof;
  const Setup* setup;

  void operator()(Batch&& b, HsSlot<B>& slot, const dflash::device_stream<B>& s, std::size_t worker) {
    upload& up = *staging.at(worker);
    const TokenBatch& tb = b.tokens;
    const std::size_t n = static_cast<std::size_t>(tb.num_docs()) * static_cast<std::size_t>(tb.seq) *
                          static_cast<std::size_t>(setup->target.feature_dim());
    if constexpr (!std::is_same_v<B, dflash::host_stream_backend>) {  // [gpu forward] on the stream, into the slot
      float* out = slot.hidden.ensure(n, s);
      {
        auto t = prof->scope("target_forward.model"_key);  // the host's part: checks, token upload, launches
        gpu->enqueue(tb.tokens, tb.lengths, tb.seq, out, n, s.native(), worker);
      }
      slot.step = b.step;
      slot.tokens = std::move(b.tokens);
      return;
    }  // [/gpu forward]
    B& backend = s.backend();
    // This worker's staging buffer is reused: its previous copy must have left
    // it (long done in practice: a forward takes far longer than the copy).
    if (up.in_flight) backend.host_wait(up.copied);
    float* h = up.buffer.ensure(n, backend);
    {
      auto t = prof->scope("target_forward.model"_key);
      setup->target.forward_padded(tb.tokens, tb.lengths, tb.seq, std::span<float>(h, n));
    }
    slot.step = b.step;
    slot.tokens = std::move(b.tokens);
    s.copy(slot.hidden.ensure(n, s), h, n * sizeof(float));
    if (!up.copied) up.copied = backend.create_event(false);
    backend.record(up.copied, s.native());
    up.in_flight = true;
    up.backend = &backend;
  }

 private:
  struct upload {
    dflash::host_buffer<float, B> buffer;  // pinned with CUDA: the copy is truly asynchronous
    typename B::event_type copied{};
    bool in_flight = false;
    B* backend = nullptr;
    upload() = default;
    upload(const upload&) = delete;
    upload& operator=(const upload&) = delete;
    ~upload() {
      if (backend && copied) backend->destroy_event(copied);
    }
  };
  std::vector<std::unique_ptr<upload>> staging;  // one per worker
  std::shared_ptr<target_forward_gpu> gpu;       // [gpu forward] --device cuda only
};

/// Off the target's critical path, on its own stream: doc ids, packing, the
/// copy into host memory, anchors and the block mask. With the host twin the
/// ops' host versions run as the stream's work (reading the slot's "device"
/// memory); with CUDA, dflash::ops::gpu kernels run on the stream and the
/// results are copied into pinned memory asynchronously (device_postprocess.cu).
/// The returned item is written by that work: the pipeline makes the drafter
/// wait for it, not this thread. With CUDA the CPU part (pinned -> the item's
/// vectors, mask_expand) is left to the drafter's thread (finish_on_host):
/// nothing heavier than that copy's bookkeeping may run in stream order.
template <dflash::ProfilerPolicy P, dflash::DeviceBackend B>
struct postprocess {
  static constexpr dflash::fixed_string name{"postprocess"};
  using input_type = HsSlot<B>;
  using output_type = std::unique_ptr<HsItem>;
  using keys = dflash::key_set_cat_t<dflash::ops::keys, dflash::key_set<"copy", "mask_expand">>;
  static constexpr bool on_host_twin = std::is_same_v<B, dflash::host_stream_backend>;

  postprocess(const P& p, const Setup* s, device_postprocessor* dev) noexcept : prof(p), setup(s), device(dev) {}

  [[no_unique_address]] dflash::profiler_ref<P> prof;
  const Setup* setup;
  device_postprocessor* device = nullptr;  ///< the CUDA path's kernels and pinned buffers
  dflash::ops::tile_shape tile{128, 128};

  std::unique_ptr<HsItem> operator()(HsSlot<B>& in, const dflash::device_stream<B>& s) {
    const TokenBatch& tb = in.tokens;
    const std::int32_t D = setup->target.feature_dim(), Bk = setup->opts.block_size, N = setup->opts.anchors;
    auto out = std::make_unique<HsItem>();
    out->step = in.step;
    out->tokens = tb.packed_tokens();
    out->loss_mask = tb.packed_loss_mask();
    if (dflash::ops::should_drop_sample(out->loss_mask, Bk)) {
      out->dropped = true;
      return out;
    }
    const std::int32_t S = out->num_tokens();
    const dflash::ops::block_mask_params mp{S, N, Bk, setup->opts.window};
    const dflash::ops::anchor_params ap = setup->anchor_params(in.step);
    if constexpr (on_host_twin) {
      size_outputs(*out, D, N);
      // The stream's work: reads the slot (after the pipeline's wait on it), writes *item.
      s.enqueue([this, item = out.get(), padded = in.hidden.data(), lengths = tb.lengths, docs = tb.num_docs(),
                 seq = tb.seq, mp, ap] { run_host(padded, lengths, docs, seq, *item, mp, ap); });
    } else {
      run_device(in, *out, mp, ap, s);
    }
    return out;
  }

 private:
  void run_host(const float* padded, const std::vector<std::int32_t>& lengths, std::int32_t docs, std::int32_t seq,
                HsItem& out, const dflash::ops::block_mask_params& mp, const dflash::ops::anchor_params& ap) const {
    const std::int32_t S = out.num_tokens(), D = setup->target.feature_dim();
    const std::size_t padded_n = static_cast<std::size_t>(docs) * static_cast<std::size_t>(seq) * static_cast<std::size_t>(D);
    dflash::ops::doc_ids(std::span<const std::int32_t>(lengths), std::span(out.doc_ids), std::span(out.pos), prof);
    std::vector<float> staging(out.hidden.size());
    std::vector<std::int32_t> cu(lengths.size() + 1);
    dflash::ops::pack_hidden_states(std::span<const float>(padded, padded_n), {docs, seq, D},
                                    std::span<const std::int32_t>(lengths), std::span(staging), std::span(cu), prof);
    {
      auto t = prof->scope("copy"_key);  // stands for the device -> pinned host copy
      std::memcpy(out.hidden.data(), staging.data(), out.hidden.size() * sizeof(float));
    }
    const std::int32_t seq_lens[1] = {S};
    dflash::ops::select_anchors(ap, 1, S, std::span<const std::int32_t>(seq_lens),
                                std::span<const std::uint8_t>(out.loss_mask), std::span<const std::int32_t>(out.doc_ids),
                                std::span(out.anchors), std::span(out.keep), prof);
    out.mask = dflash::ops::build_block_mask(mp, tile, std::span<const std::int32_t>(out.doc_ids),
                                             std::span<const std::int32_t>(out.pos),
                                             std::span<const std::int32_t>(out.anchors),
                                             std::span<const std::uint8_t>(out.keep), prof);
    finish(out, mp);
  }

  static void size_outputs(HsItem& out, std::int32_t D, std::int32_t N) {
    const auto su = static_cast<std::size_t>(out.num_tokens());
    out.hidden.resize(su * static_cast<std::size_t>(D));
    out.doc_ids.resize(su);
    out.pos.resize(su);
    out.anchors.resize(static_cast<std::size_t>(N));
    out.keep.resize(static_cast<std::size_t>(N));
  }

  void finish(HsItem& out, const dflash::ops::block_mask_params& mp) const {
    auto t = prof->scope("mask_expand"_key);
    out.attention = attention_from_block_mask(out.mask, {mp, out.anchors.data(), out.keep.data(), out.pos.data()});
  }

  void run_device(const HsSlot<B>& in, HsItem& out, const dflash::ops::block_mask_params& mp,
                  const dflash::ops::anchor_params& ap, const dflash::device_stream<B>& s) {
    const TokenBatch& tb = in.tokens;
    const device_job job{in.hidden.data(), tb.num_docs(), tb.seq, setup->target.feature_dim(), tb.lengths,
                         out.loss_mask, out.num_tokens(), ap, mp, tile};
    // Everything is enqueued on the stream; the results arrive in the step's
    // pinned block. The drafter's thread unpacks them after the pipeline waited
    // for this item (the item's vectors are sized there too, so a queued item
    // holds the pinned copy only).
    auto staged = std::make_shared<device_result>(device->enqueue(job, static_cast<void*>(s.native())));
    out.finish_on_host = [this, staged = std::move(staged), mp, D = job.feature,
                          N = ap.num_anchors](HsItem& item) {
      size_outputs(item, D, N);
      dflash::ops::block_sparse_mask& m = item.mask;
      m.params = mp;
      m.tile = tile;
      m.num_q_tiles = dflash::ops::tiles_for(mp.num_queries(), tile.q);
      m.num_kv_tiles = dflash::ops::tiles_for(mp.num_kv(), tile.kv);
      const auto nq = static_cast<std::size_t>(m.num_q_tiles), nk = static_cast<std::size_t>(m.num_kv_tiles);
      m.kv_num_blocks.resize(nq);
      m.full_kv_num_blocks.resize(nq);
      m.kv_indices.resize(nq * nk);
      m.full_kv_indices.resize(nq * nk);
      staged->unpack({item.hidden, item.doc_ids, item.pos, item.anchors, item.keep, m.view()});
      finish(item, mp);
    };
  }
};

/// What the drafter loop leaves behind for main() (one writer: the sink thread).
struct TrainLog {
  std::vector<double> losses;  ///< per trained step
  std::vector<std::pair<std::int64_t, std::uint64_t>> digests;  ///< (step, HsItem::digest()) per item, arrival order
  std::vector<step_check> checks;  ///< [results across backends] per item, arrival order (step_check.hpp)
  std::int64_t tokens = 0;     ///< packed tokens trained on
  std::int64_t dropped = 0;
  double last_accuracy = 0;
};

/// Progress lines; shared with the profile reporter so their output never interleaves.
class Console {
 public:
  Console(std::FILE* out, bool tty, bool quiet) : out_(out), tty_(tty), quiet_(quiet) {}
  /// A progress line: rewritten in place on a terminal, one line each otherwise.
  void progress(const std::string& line) {
    if (quiet_) return;
    std::lock_guard lk(m_);
    if (tty_) {
      std::fprintf(out_, "\r%s\033[K", line.c_str());
      pending_ = true;
    } else {
      std::fprintf(out_, "%s\n", line.c_str());
    }
    std::fflush(out_);
  }
  /// A block of text (a profile table), starting on a fresh line.
  void block(std::string_view text) {
    std::lock_guard lk(m_);
    if (pending_) std::fputc('\n', out_);
    pending_ = false;
    std::fwrite(text.data(), 1, text.size(), out_);
    if (text.empty() || text.back() != '\n') std::fputc('\n', out_);
    std::fflush(out_);
  }

 private:
  std::mutex m_;
  std::FILE* out_;
  bool tty_, quiet_;
  bool pending_ = false;
};

/// CPU time of the calling thread (not wall time: a spin measured in wall time
/// would cost less CPU whenever the thread is descheduled).
inline double thread_cpu_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

/// The drafter train loop: one clipped-Adam step per HS entry.
template <dflash::ProfilerPolicy P>
struct drafter_train {
  static constexpr dflash::fixed_string name{"drafter"};
  using input_type = std::unique_ptr<HsItem>;
  using output_type = void;
  using keys = dflash::key_set<"drafter_step">;
  using clock = std::chrono::steady_clock;

  drafter_train(const P& p, Drafter* d, TrainLog* l, Console* c, std::int64_t steps, double interval) noexcept
      : prof(p), drafter(d), log(l), console(c), total_steps(steps), progress_interval(interval) {}

  [[no_unique_address]] dflash::profiler_ref<P> prof;
  Drafter* drafter;
  TrainLog* log;
  Console* console;
  std::int64_t total_steps;
  double progress_interval;
  clock::time_point start = clock::now();
  clock::time_point last_print = start;
  std::int64_t seen = 0;
  double slowdown = 1;  ///< --slow-drafter

  void operator()(std::unique_ptr<HsItem>&& item) {
    if (item->finish_on_host) {  // --device cuda: the postprocess's CPU part, now that its copy is done
      const auto finish_item = std::exchange(item->finish_on_host, nullptr);
      try {
        finish_item(*item);
      } catch (...) {
        item->error = std::current_exception();
      }
    }
    const HsItem& it = *item;
    if (it.error) std::rethrow_exception(it.error);  // never train on an item the postprocess got wrong
    ++seen;
    log->digests.emplace_back(it.step, it.digest());
    log->checks.push_back(step_check_of(it));  // [results across backends]
    if (it.dropped) {
      ++log->dropped;
    } else {
      const DrafterBatch b{it.hidden, it.tokens, it.loss_mask, it.doc_ids, it.anchors, it.keep, &it.attention};
      StepStats s;
      {
        auto t = prof->scope("drafter_step"_key);
        const double cpu0 = slowdown > 1 ? thread_cpu_ns() : 0;
        s = drafter->train_step(b);
        if (slowdown > 1) {  // --slow-drafter: (F - 1) x the step's own CPU time, spent on the CPU
          const double until = thread_cpu_ns() + (thread_cpu_ns() - cpu0) * (slowdown - 1);
          while (thread_cpu_ns() < until) {
          }
        }
      }
      log->losses.push_back(s.loss);
      log->last_accuracy = s.accuracy;
      log->tokens += it.num_tokens();
    }
    const auto now = clock::now();
    const bool last = seen == total_steps;
    if (last || (progress_interval > 0 && now - last_print >= std::chrono::duration<double>(progress_interval))) {
      last_print = now;
      console->progress(progress_line(now));
    }
  }

  [[nodiscard]] std::string progress_line(clock::time_point now) const {
    const double secs = std::chrono::duration<double>(now - start).count();
    char buf[160];
    std::snprintf(buf, sizeof buf, "step %6lld/%lld  %9.0f tok/s  loss %.4f  acc %.3f", static_cast<long long>(seen),
                  static_cast<long long>(total_steps), secs > 0 ? static_cast<double>(log->tokens) / secs : 0.0,
                  log->losses.empty() ? 0.0 : log->losses.back(), log->last_accuracy);
    return buf;
  }
};

// ------------------------------------------------------------- pipeline ---

template <class P, class B>
using train_pipeline = dflash::Pipeline<P,                                                    //
                                        batch_source, dflash::queue_spec<"batch_queue", 8>,   //
                                        dflash::workers<target_forward<P, B>, 2>,             //
                                        dflash::device_link<"hs_device", 4>,                  //
                                        postprocess<P, B>, dflash::queue_spec<"hs_queue", 60>,  //
                                        drafter_train<P>>;

/// The host-twin instance (keys do not depend on the backend or the policy).
template <class P>
using train_pipeline_twin = train_pipeline<P, dflash::host_stream_backend>;

/// Every key the pipeline records, known at compile time.
using train_keys = dflash::pipeline_keys_t<train_pipeline_twin>;

}  // namespace dflash_example
