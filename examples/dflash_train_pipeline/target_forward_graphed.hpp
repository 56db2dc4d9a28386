#pragma once
// target_forward_graphed: the target forward in the form dflash::graphed replays (--cuda-graphs).
// Its per-step work is captured once per (worker, slot buffer) and replayed with one graph launch
// per step, so the host pays one launch instead of the forward's ~10 per layer.
//
// A graph replays the same launches on the same addresses, so everything that changes per step
// travels through memory, written by prepare() on the worker's stream before the replay reads it:
//   cuda_backend   the step's plan (tokens, documents, positions, output rows), padded to
//                  --seq-len rows, into the worker's device block; the captured forward runs over
//                  all --seq-len rows (padding rows write nowhere), so no launch depends on the
//                  step's token count (target_forward_gpu::prepare_graphed / launch_graphed);
//   host twin      the step's [docs, seq, lengths, tokens] into the worker's "device" block; the
//                  captured work reads it and runs TargetModel::forward_padded into the slot.
// Both write the same padded states as target_forward, bit for bit on the twin (the
// example_train_cuda_graphs_same_results test) and within the forward's float tolerance on the GPU.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dflash/dflash.hpp>

#include "payloads.hpp"
#include "setup.hpp"
#include "target_forward.hpp"

namespace dflash_example {

template <dflash::ProfilerPolicy P, dflash::DeviceBackend B>
struct target_forward_graphed {
  static constexpr dflash::fixed_string name{"target_forward"};
  using input_type = Batch;
  using output_type = HsSlot<B>;
  using keys = dflash::key_set<"target_forward.model">;  // prepare's host part: plan, checks, token upload
  static constexpr bool on_gpu = !std::is_same_v<B, dflash::host_stream_backend>;

  target_forward_graphed(const P& p, const Setup* s, std::size_t workers) : prof(p), setup(s), inputs(workers) {
    for (auto& in : inputs) in = std::make_unique<worker_inputs>();
    if constexpr (on_gpu) gpu = make_target_forward_gpus<B>(*s, workers);
  }

  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;
  const Setup* setup;

  /// Each step, not captured: the host fields, the slot's size, the step's inputs into the worker's block.
  void prepare(Batch& b, HsSlot<B>& slot, const dflash::device_stream<B>& s, std::size_t worker) {
    const TokenBatch& tb = b.tokens;
    const std::size_t n = static_cast<std::size_t>(tb.num_docs()) * static_cast<std::size_t>(tb.seq) *
                          static_cast<std::size_t>(setup->target.feature_dim());
    slot.hidden.ensure(n, s);
    {
      auto t = prof->scope("target_forward.model"_key);
      if constexpr (on_gpu) {
        gpu_of(worker).prepare_graphed(tb.tokens, tb.lengths, tb.seq, n, s.native(), local(worker));
      } else {
        // [docs, seq, lengths[docs], tokens[docs * seq]] into the worker's block, on the stream (the
        // work owns its copy of the values, as a copy from pageable memory would): nothing here waits,
        // so .launch is what enqueueing costs, not a wait for an earlier step.
        std::vector<std::int32_t> h;
        h.reserve(2 + tb.lengths.size() + tb.tokens.size());
        h.push_back(tb.num_docs());
        h.push_back(tb.seq);
        h.insert(h.end(), tb.lengths.begin(), tb.lengths.end());
        h.insert(h.end(), tb.tokens.begin(), tb.tokens.end());
        std::int32_t* d = inputs.at(worker)->device.ensure(h.size(), s);
        s.enqueue([d, h = std::move(h)] { std::copy(h.begin(), h.end(), d); });
      }
    }
    slot.step = b.step;
    slot.tokens = std::move(b.tokens);
  }

  /// Captured once per key, then replayed: reads the step from the worker's block, never from `b`.
  void launch(const Batch&, HsSlot<B>& slot, const dflash::device_stream<B>& s, std::size_t worker) const {
    if constexpr (on_gpu) {
      gpu_of(worker).launch_graphed(slot.hidden.data(), slot.hidden.capacity(), s.native(), local(worker));
    } else {
      s.enqueue([in = inputs.at(worker)->device.data(), out = slot.hidden.data(), cap = slot.hidden.capacity(),
                 model = &setup->target] {
        const auto docs = static_cast<std::size_t>(in[0]), seq = static_cast<std::size_t>(in[1]);
        const std::size_t n = docs * seq * static_cast<std::size_t>(model->feature_dim());
        if (n > cap) throw std::logic_error("target_forward_graphed: the step outgrew the slot prepare() sized");
        model->forward_padded(std::span<const std::int32_t>(in + 2 + docs, docs * seq),
                              std::span<const std::int32_t>(in + 2, docs), in[1], std::span<float>(out, n));
      });
    }
  }

  /// Every address the launches use: the slot's buffer and the worker's blocks (the GPU's are
  /// fixed at construction; the twin's grow with the largest step so far).
  auto graph_key(const Batch&, const HsSlot<B>& slot, std::size_t worker) const {
    const std::int32_t* in = on_gpu ? nullptr : inputs.at(worker)->device.data();
    const std::size_t in_cap = on_gpu ? 0 : inputs.at(worker)->device.capacity();
    return std::tuple(worker, slot.hidden.data(), slot.hidden.capacity(), in, in_cap);
  }

  /// After the replay, not captured: the GPU worker's "step done" mark (its scratch's next user waits for it).
  void after_launch(Batch&, HsSlot<B>&, const dflash::device_stream<B>& s, std::size_t worker) const {
    if constexpr (on_gpu) gpu_of(worker).after_graphed(s.native(), local(worker));
  }

 private:
  // --gpus: worker w runs on gpus[w % n] and is the (w / n)-th worker of that device's forward.
  target_forward_gpu& gpu_of(std::size_t worker) const { return *gpu[worker % gpu.size()]; }
  std::size_t local(std::size_t worker) const { return worker / gpu.size(); }

  struct worker_inputs {  // the host twin's per-worker step block (stream order makes one enough:
                         // a step's inputs are written after the last step's forward read them)
    dflash::device_buffer<std::int32_t, B> device;
  };
  std::vector<std::unique_ptr<worker_inputs>> inputs;
  std::vector<std::shared_ptr<target_forward_gpu>> gpu;  // --device cuda only: one per device (--gpus)
};

}  // namespace dflash_example
