#pragma once
// postprocess: the device stage between the target workers and the HS queue
// (doc ids, packing, anchors, block mask; its own stream).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <dflash/device/host_stream_backend.hpp>
#include <dflash/dflash.hpp>

#include "device_postprocess.hpp"
#include "hs_staging.hpp"
#include "payloads.hpp"
#include "setup.hpp"

namespace dflash_example {

/// Off the target's critical path, on its own stream: doc ids, packing, the
/// copy into host memory, anchors and the block mask. With the host twin the
/// ops' host versions run as the stream's work (reading the slot's "device"
/// memory); with CUDA, dflash::ops::gpu kernels run on the stream and the
/// results are copied into pinned memory asynchronously (device_postprocess.cu).
/// The returned item is written by that work: the pipeline makes the drafter
/// wait for it, not this thread. With CUDA the CPU part (pinned -> the item's
/// vectors, mask_expand) is left to the drafter's thread (finish_on_host):
/// nothing heavier than that copy's bookkeeping may run in stream order.
///
/// In is what it reads: HsSlot<B> (--hs-link slots: one step's padded states,
/// packed here by pack_hidden_states) or HsRows<B> (--hs-link rows: a batch of
/// exactly --seq-len valid tokens' rows from the hs_rows ring, already packed,
/// across steps; the last batch may be short and is padded). With rows the
/// host never learns how many rows a batch has: the item has the fixed
/// --seq-len layout, and the count travels with the results.
template <dflash::ProfilerPolicy P, dflash::DeviceBackend B, class In = HsSlot<B>>
struct postprocess {
  static constexpr dflash::fixed_string name{"postprocess"};
  using input_type = In;
  using output_type = std::unique_ptr<HsItem>;
  using keys = dflash::key_set_cat_t<dflash::ops::keys, dflash::key_set<"copy", "mask_expand">>;
  static constexpr bool on_host_twin = std::is_same_v<B, dflash::host_stream_backend>;
  static constexpr bool rows = std::is_same_v<In, HsRows<B>>;
  static_assert(rows || std::is_same_v<In, HsSlot<B>>, "postprocess: In is HsSlot<B> or HsRows<B>");

  postprocess(const P& p, const Setup* s, device_postprocessor* dev)
      : prof(p),
        setup(s),
        device(dev),
        staging(std::make_shared<hs_staging<B>>(staging_blocks(s->opts))) {}

  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;  // keys checked in every build
  const Setup* setup;
  device_postprocessor* device = nullptr;  ///< the CUDA path's kernels and pinned buffers
  std::shared_ptr<hs_staging<B>> staging;  ///< the host twin's pinned staging (CUDA: the device's own pool)
  dflash::ops::tile_shape tile{128, 128};
  std::int64_t batches = 0;  ///< --hs-link rows: batches popped so far (one worker: the pop order)

  /// The pinned staging pool's counts (empty before the first item, or without one).
  [[nodiscard]] std::optional<dflash::pinned_pool_stats> staging_stats() const {
    if constexpr (on_host_twin) return staging->stats();
    else return device ? device->staging_stats() : std::nullopt;
  }

  std::unique_ptr<HsItem> operator()(HsRows<B>& in, const dflash::device_stream<B>& s)
    requires rows
  {
    const std::int32_t S = setup->opts.seq_len, D = setup->target.feature_dim(), N = setup->opts.anchors;
    auto out = std::make_unique<HsItem>();
    out->step = batches++;
    const dflash::ops::block_mask_params mp{S, N, setup->opts.block_size, setup->opts.window};
    const dflash::ops::anchor_params ap = setup->anchor_params(out->step);
    if constexpr (on_host_twin) {
      s.enqueue([this, item = out.get(), batch = in.batch(), mp, ap, D, N] { run_host_rows(batch, *item, mp, ap, D, N); });
    } else {
      const rows_job job{in.batch(), S, D, ap, mp, tile};
      auto staged = std::make_shared<device_result>(device->enqueue_rows(job, static_cast<void*>(s.native())));
      out->finish_on_host = [this, staged = std::move(staged), mp, D, N](HsItem& item) {
        size_outputs(item, mp.context_len, D, N);
        item.tokens.resize(static_cast<std::size_t>(mp.context_len));  // the rows' tokens come from the device too
        item.loss_mask.resize(static_cast<std::size_t>(mp.context_len));
        item.mask = dflash::ops::block_sparse_mask::allocate(mp, tile);
        std::int32_t count = 0;
        staged->unpack({item.hidden, item.doc_ids, item.pos, item.anchors, item.keep, item.mask.view(), item.tokens,
                        item.loss_mask, &count});
        item.padding = mp.context_len - count;
        if (dflash::ops::should_drop_sample(item.loss_mask, setup->opts.block_size)) return drop(item);
        item.mask.bind_rule(item.anchors, item.keep, item.pos);
        finish(item);
      };
    }
    return out;
  }

  std::unique_ptr<HsItem> operator()(HsSlot<B>& in, const dflash::device_stream<B>& s)
    requires(!rows)
  {
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
      // The packed states stage through pinned memory as the CUDA path's do, in blocks of one
      // size for every step (the largest, --seq-len tokens); a block goes back once the
      // stream's work below has read it.
      const std::size_t bytes =
          static_cast<std::size_t>(setup->opts.seq_len) * static_cast<std::size_t>(D) * sizeof(float);
      auto& pool = staging->pool(s.backend(), bytes);
      auto block = pool.acquire(bytes);
      // The stream's work: reads the slot (after the pipeline's wait on it), writes *item.
      s.enqueue([this, item = out.get(), padded = in.hidden.data(), lengths = tb.lengths, docs = tb.num_docs(),
                 seq = tb.seq, mp, ap, pinned = static_cast<float*>(block.data())] {
        run_host(padded, lengths, docs, seq, *item, mp, ap, pinned);
      });
      pool.give_back(std::move(block), s.native());
    } else {
      run_device(in, *out, mp, ap, s);
    }
    return out;
  }

 private:
  void run_host(const float* padded, const std::vector<std::int32_t>& lengths, std::int32_t docs, std::int32_t seq,
                HsItem& out, const dflash::ops::block_mask_params& mp, const dflash::ops::anchor_params& ap,
                float* pinned) const {
    const std::int32_t S = out.num_tokens(), D = setup->target.feature_dim();
    const std::size_t padded_n = static_cast<std::size_t>(docs) * static_cast<std::size_t>(seq) * static_cast<std::size_t>(D);
    dflash::ops::doc_ids(std::span<const std::int32_t>(lengths), std::span(out.doc_ids), std::span(out.pos), prof);
    std::vector<std::int32_t> cu(lengths.size() + 1);
    dflash::ops::pack_hidden_states(std::span<const float>(padded, padded_n), {docs, seq, D},
                                    std::span<const std::int32_t>(lengths), std::span(pinned, out.hidden.size()),
                                    std::span(cu), prof);
    {
      auto t = prof->scope("copy"_key);  // stands for pinned -> the item's memory (the CUDA path's unpack)
      std::memcpy(out.hidden.data(), pinned, out.hidden.size() * sizeof(float));
    }
    anchors_and_mask(out, S, mp, ap);
  }

  // Anchors among the first `tokens` of the item's S, the block mask, the drafter's form of it.
  void anchors_and_mask(HsItem& out, std::int32_t tokens, const dflash::ops::block_mask_params& mp,
                        const dflash::ops::anchor_params& ap) const {
    const std::int32_t seq_lens[1] = {tokens};
    dflash::ops::select_anchors(ap, 1, mp.context_len, std::span<const std::int32_t>(seq_lens),
                                std::span<const std::uint8_t>(out.loss_mask), std::span<const std::int32_t>(out.doc_ids),
                                std::span(out.anchors), std::span(out.keep), prof);
    out.mask = dflash::ops::build_block_mask(mp, tile, dflash::ops::packed_docs{out.doc_ids, out.pos},
                                             std::span<const std::int32_t>(out.anchors),
                                             std::span<const std::uint8_t>(out.keep), prof);
    finish(out);
  }

  // The host twin's work for a batch of rows (runs on the stream, after the pop):
  // the count, read here on the "device", decides the layout's padding.
  void run_host_rows(const dflash::row_batch<hs_token, float>& b, HsItem& out, const dflash::ops::block_mask_params& mp,
                     const dflash::ops::anchor_params& ap, std::int32_t D, std::int32_t N) const {
    const std::int32_t S = mp.context_len, n = static_cast<std::int32_t>(b.count());
    size_outputs(out, S, D, N);
    out.tokens.assign(static_cast<std::size_t>(S), 0);
    out.loss_mask.assign(static_cast<std::size_t>(S), 0);
    out.padding = S - n;
    std::vector<std::int32_t> docs;  // the batch's document pieces, then the padding: doc_ids' lengths
    {
      auto t = prof->scope("copy"_key);  // stands for the device -> pinned host copy
      for (std::int32_t i = 0; i < n; ++i) {
        const hs_token& r = b[static_cast<std::uint32_t>(i)];
        out.tokens[static_cast<std::size_t>(i)] = r.token;
        out.loss_mask[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(r.loss);
        std::copy_n(b.payload(static_cast<std::uint32_t>(i)), D, out.hidden.begin() + static_cast<std::ptrdiff_t>(i) * D);
        if (i == 0 || r.doc != b[static_cast<std::uint32_t>(i - 1)].doc) docs.push_back(0);
        ++docs.back();
      }
    }
    std::fill(out.hidden.begin() + static_cast<std::ptrdiff_t>(n) * D, out.hidden.end(), 0.0f);
    if (n < S) docs.push_back(S - n);
    dflash::ops::doc_ids(std::span<const std::int32_t>(docs), std::span(out.doc_ids), std::span(out.pos), prof);
    if (dflash::ops::should_drop_sample(out.loss_mask, setup->opts.block_size)) return drop(out);
    anchors_and_mask(out, n, mp, ap);  // anchors only among the batch's tokens
  }

  /// A batch with too few loss tokens: what both backends keep of it (the
  /// layout, the states), nothing the drafter would train on.
  static void drop(HsItem& out) {
    out.dropped = true;
    out.anchors.clear();
    out.keep.clear();
    out.mask = {};
  }

  static void size_outputs(HsItem& out, std::int32_t D, std::int32_t N) { size_outputs(out, out.num_tokens(), D, N); }
  static void size_outputs(HsItem& out, std::int32_t S, std::int32_t D, std::int32_t N) {
    const auto su = static_cast<std::size_t>(S);
    out.hidden.resize(su * static_cast<std::size_t>(D));
    out.doc_ids.resize(su);
    out.pos.resize(su);
    out.anchors.resize(static_cast<std::size_t>(N));
    out.keep.resize(static_cast<std::size_t>(N));
  }

  void finish(HsItem& out) const {
    auto t = prof->scope("mask_expand"_key);
    out.attention = drafter_attention(out.mask);
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
      item.mask = dflash::ops::block_sparse_mask::allocate(mp, tile);
      staged->unpack({item.hidden, item.doc_ids, item.pos, item.anchors, item.keep, item.mask.view()});
      // The kernels wrote the tiles; the rule comes from the inputs they were built from.
      item.mask.bind_rule(item.anchors, item.keep, item.pos);
      finish(item);
    };
  }
};

}  // namespace dflash_example
