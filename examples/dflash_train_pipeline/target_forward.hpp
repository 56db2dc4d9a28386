#pragma once
// target_forward: the frozen target model's stage (N workers, a stream each).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <dflash/dflash.hpp>

#include "payloads.hpp"
#include "setup.hpp"
#include "target_forward_gpu.hpp"

namespace dflash_example {

/// The GPU forwards of `workers` target workers: the weights once per device, scratch per worker
/// sized for --seq-len (target_forward_gpu.hpp). --gpus: worker w runs on gpus[w % n], as the
/// pipeline places it, and uses the forward made on that device (element w % n).
template <dflash::DeviceBackend B>
std::vector<std::shared_ptr<target_forward_gpu>> make_target_forward_gpus(const Setup& s, std::size_t workers) {
  std::vector<std::shared_ptr<target_forward_gpu>> gpu;
  const std::vector<int>& g = s.opts.gpus;
  if (g.empty()) {
    gpu.push_back(std::make_shared<target_forward_gpu>(s.target, s.opts.seq_len, workers));
    return gpu;
  }
  B b;
  const int was = b.current_device();
  const std::size_t per_device = (workers + g.size() - 1) / g.size();
  for (const int d : g) {
    b.set_device(d);
    gpu.push_back(std::make_shared<target_forward_gpu>(s.target, s.opts.seq_len, per_device));
  }
  b.set_device(was);
  return gpu;
}

/// The frozen target: a forward over the padded documents, taps concatenated.
/// Out is where its hidden states go:
///   HsSlot<B> (--hs-link slots)  the padded [docs, seq, feature] states in a device_link slot;
///   HsRows<B> (--hs-link rows)   one row per valid token, packed, pushed into the
///                                device_queue_link's ring (no padding ever leaves the stage).
/// With a GPU (cuda_backend) the forward runs on the worker's stream and
/// writes the slot's device buffer or the ring itself (target_forward_gpu:
/// cuBLAS and CUB); on the host twin it runs on this worker's thread
/// (TargetModel::forward_padded is const: N workers share it), then work on
/// the stream copies it into the slot or pushes its valid rows.
template <dflash::ProfilerPolicy P, dflash::DeviceBackend B, class Out = HsSlot<B>>
struct target_forward {
  static constexpr dflash::fixed_string name{"target_forward"};
  using input_type = Batch;
  using output_type = Out;
  using keys = dflash::key_set<"target_forward.model">;  // the model forward alone (work minus the upload)

  static constexpr bool on_gpu = !std::is_same_v<B, dflash::host_stream_backend>;
  static constexpr bool rows = std::is_same_v<Out, HsRows<B>>;
  static_assert(rows || std::is_same_v<Out, HsSlot<B>>, "target_forward: Out is HsSlot<B> or HsRows<B>");

  target_forward(const P& p, const Setup* s, std::size_t workers) : prof(p), setup(s), staging(workers) {
    for (auto& st : staging) st = std::make_unique<upload>();
    if constexpr (on_gpu) gpu = make_target_forward_gpus<B>(*s, workers);
  }

  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;  // keys checked in every build
  const Setup* setup;

  void operator()(Batch&& b, Out& slot, const dflash::device_stream<B>& s, std::size_t worker) {
    const TokenBatch& tb = b.tokens;
    const std::size_t n = static_cast<std::size_t>(tb.num_docs()) * static_cast<std::size_t>(tb.seq) *
                          static_cast<std::size_t>(setup->target.feature_dim());
    if constexpr (on_gpu) {  // on the stream, straight into the slot or the ring: no host forward, no upload
      target_forward_gpu& g = *gpu[worker % gpu.size()];
      if constexpr (rows) {
        auto t = prof->scope("target_forward.model"_key);  // the host's part: checks, token upload, launches
        g.enqueue_rows(tb.tokens, tb.lengths, tb.loss_mask, tb.seq, hs_doc_id(b.step, 0), slot.pusher(), s.native(),
                       worker / gpu.size());
      } else {
        float* out = slot.hidden.ensure(n, s);
        {
          auto t = prof->scope("target_forward.model"_key);
          g.enqueue(tb.tokens, tb.lengths, tb.seq, out, n, s.native(), worker / gpu.size());
        }
        slot.step = b.step;
        slot.tokens = std::move(b.tokens);
      }
    } else {
      upload& up = *staging.at(worker);
      B& backend = s.backend();
      // This worker's staging buffer is reused: its previous copy must have left
      // it (long done in practice: a forward takes far longer than the copy).
      if (up.in_flight) backend.host_wait(up.copied);
      float* h = up.buffer.ensure(n, backend);
      {
        auto t = prof->scope("target_forward.model"_key);
        setup->target.forward_padded(tb.tokens, tb.lengths, tb.seq, std::span<float>(h, n));
      }
      if constexpr (rows) {
        s.enqueue([push = slot.pusher(), h, docs = std::move(b.tokens), base = hs_doc_id(b.step, 0),
                   F = setup->target.feature_dim()] { push_valid_rows(push, h, docs, base, F); });
      } else {
        slot.step = b.step;
        slot.tokens = std::move(b.tokens);
        s.copy(slot.hidden.ensure(n, s), h, n * sizeof(float));
      }
      if (!up.copied) up.copied = backend.create_event(false);
      backend.record(up.copied, s.native());
      up.in_flight = true;
      up.backend = &backend;
    }
  }

  /// The host twin's push (stream work): the valid tokens of the padded
  /// states `h`, in document order, as one reservation of rows. A push that
  /// does not fit is the link's to report (its count says so).
  static void push_valid_rows(const dflash::row_pusher<hs_token, float>& push, const float* h, const TokenBatch& docs,
                              std::int64_t doc_base, std::int32_t feature) {
    const auto total = static_cast<std::uint32_t>(docs.total_tokens());
    if (total == 0) return;
    const dflash::ring_ticket t = push.reserve(total);
    if (t.status != dflash::ring_status::ok) return;
    const auto F = static_cast<std::size_t>(feature), seq = static_cast<std::size_t>(docs.seq);
    std::uint32_t i = 0;
    for (std::int32_t d = 0; d < docs.num_docs(); ++d)
      for (std::int32_t p = 0; p < docs.lengths[static_cast<std::size_t>(d)]; ++p, ++i) {
        const std::size_t at = static_cast<std::size_t>(d) * seq + static_cast<std::size_t>(p);
        push.row(t, i) = hs_token{doc_base + d, docs.tokens[at], docs.loss_mask[at]};
        std::copy_n(h + at * F, F, push.payload(t, i));
        push.publish(t, i);
      }
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
  std::vector<std::unique_ptr<upload>> staging;  // one per worker (the host twin's path)
  std::vector<std::shared_ptr<target_forward_gpu>> gpu;  // --device cuda only: one per device (--gpus)
};

}  // namespace dflash_example
