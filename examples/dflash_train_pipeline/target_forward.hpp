#pragma once
// target_forward: the frozen target model's stage (N workers, a stream each).

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <dflash/dflash.hpp>

#include "payloads.hpp"
#include "setup.hpp"

namespace dflash_example {

/// The frozen target: a forward over the padded documents, taps concatenated,
/// on the CPU (this worker's thread), then an asynchronous copy into the
/// slot's device buffer. TargetModel::forward_padded is const: N workers share it.
template <dflash::ProfilerPolicy P, dflash::DeviceBackend B>
struct target_forward {
  static constexpr dflash::fixed_string name{"target_forward"};
  using input_type = Batch;
  using output_type = HsSlot<B>;
  using keys = dflash::key_set<"target_forward.model">;  // the model forward alone (work minus the upload)

  target_forward(const P& p, const Setup* s, std::size_t workers) : prof(p), setup(s), staging(workers) {
    for (auto& st : staging) st = std::make_unique<upload>();
  }

  [[no_unique_address]] dflash::profiler_ref<P> prof;
  const Setup* setup;

  void operator()(Batch&& b, HsSlot<B>& slot, const dflash::device_stream<B>& s, std::size_t worker) {
    upload& up = *staging.at(worker);
    const TokenBatch& tb = b.tokens;
    const std::size_t n = static_cast<std::size_t>(tb.num_docs()) * static_cast<std::size_t>(tb.seq) *
                          static_cast<std::size_t>(setup->target.feature_dim());
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
};

}  // namespace dflash_example
