#pragma once
// target_forward: the frozen target model's stage (N workers, a stream each).

#include <cstddef>
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

/// The frozen target: a forward over the padded documents, taps concatenated.
/// With a GPU (cuda_backend) the forward runs on the worker's stream and
/// writes the slot's device buffer itself (target_forward_gpu: cuBLAS and CUB);
/// on the host twin it runs on this worker's thread (TargetModel::forward_padded
/// is const: N workers share it), then an asynchronous copy fills the slot.
template <dflash::ProfilerPolicy P, dflash::DeviceBackend B>
struct target_forward {
  static constexpr dflash::fixed_string name{"target_forward"};
  using input_type = Batch;
  using output_type = HsSlot<B>;
  using keys = dflash::key_set<"target_forward.model">;  // the model forward alone (work minus the upload)

  static constexpr bool on_gpu = !std::is_same_v<B, dflash::host_stream_backend>;

  target_forward(const P& p, const Setup* s, std::size_t workers) : prof(p), setup(s), staging(workers) {
    for (auto& st : staging) st = std::make_unique<upload>();
    // The weights once per device, scratch per worker sized for --seq-len
    // (target_forward_gpu.hpp). --gpus: worker w runs on gpus[w % n], as the
    // pipeline places it, and uses the forward made on that device.
    if constexpr (on_gpu) {
      const std::vector<int>& g = s->opts.gpus;
      if (g.empty()) {
        gpu.push_back(std::make_shared<target_forward_gpu>(s->target, s->opts.seq_len, workers));
      } else {
        B b;
        const int was = b.current_device();
        const std::size_t per_device = (workers + g.size() - 1) / g.size();
        for (const int d : g) {
          b.set_device(d);
          gpu.push_back(std::make_shared<target_forward_gpu>(s->target, s->opts.seq_len, per_device));
        }
        b.set_device(was);
      }
    }
  }

  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;  // keys checked in every build
  const Setup* setup;

  void operator()(Batch&& b, HsSlot<B>& slot, const dflash::device_stream<B>& s, std::size_t worker) {
    upload& up = *staging.at(worker);
    const TokenBatch& tb = b.tokens;
    const std::size_t n = static_cast<std::size_t>(tb.num_docs()) * static_cast<std::size_t>(tb.seq) *
                          static_cast<std::size_t>(setup->target.feature_dim());
    if constexpr (on_gpu) {  // on the stream, straight into the slot: no host forward, no upload
      float* out = slot.hidden.ensure(n, s);
      {
        auto t = prof->scope("target_forward.model"_key);  // the host's part: checks, token upload, launches
        gpu[worker % gpu.size()]->enqueue(tb.tokens, tb.lengths, tb.seq, out, n, s.native(), worker / gpu.size());
      }
      slot.step = b.step;
      slot.tokens = std::move(b.tokens);
      return;
    }
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
  std::vector<std::unique_ptr<upload>> staging;  // one per worker (the host twin's path)
  std::vector<std::shared_ptr<target_forward_gpu>> gpu;  // --device cuda only: one per device (--gpus)
};

}  // namespace dflash_example
