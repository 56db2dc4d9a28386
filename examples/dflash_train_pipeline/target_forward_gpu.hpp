#pragma once
// --device cuda: the frozen target model (model.hpp, TargetModel) computed on
// the GPU, on the target worker's stream, straight into the device slot:
//   embedding; per layer  h += tanh(rms(h) A + rms(causal_mean_in_doc(h)) C + b);
//   taps concatenated per token into the padded [docs, seq, taps * hidden] slot
//   (padding rows 0), as TargetModel::forward_padded lays them out.
// The GEMMs run in cuBLAS (fp32; TF32 only when asked for), the in-document
// causal mean is a CUB by-key scan, the rest small kernels
// (target_forward_gpu.cu). Only the step's token ids travel host -> device;
// the hidden states never touch host memory.
//
// The host half lives here so the CPU can test it: the packed plan of a step
// (which packed row is which document's token, and where its output row goes)
// and the stacked per-layer weights, the operands the GPU kernels read.
// The interface names no CUDA type, so the example's host TUs include it;
// builds without CUDA link target_forward_gpu_none.cpp, whose probe() says why.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dflash/device/device_rows.hpp>

#include "hs_token.hpp"
#include "model.hpp"

namespace dflash_example {

/// One step, packed: row i (0 <= i < size()) is document doc[i]'s token at
/// position pos[i]; its output row in the padded slot is dst[i] = doc[i] * seq + pos[i].
/// Documents keep their order, tokens theirs inside a document, so the rows of
/// one document are contiguous: the by-key scan's segments.
struct target_forward_plan {
  std::int32_t docs = 0, seq = 0;
  std::vector<std::int32_t> tokens, doc, pos, dst;  ///< [size()] each

  [[nodiscard]] std::int32_t size() const noexcept { return static_cast<std::int32_t>(tokens.size()); }
  /// Rows of the padded output: docs * seq.
  [[nodiscard]] std::size_t padded_rows() const noexcept {
    return static_cast<std::size_t>(docs) * static_cast<std::size_t>(seq);
  }
};

/// The plan of forward_padded(tokens [docs * seq], lengths [docs], seq), checked
/// as TargetModel::forward_padded checks it (sizes, lengths in [0, seq], every
/// real token in [0, vocab)): std::invalid_argument names what is wrong.
/// Written into `p`, whose vectors keep their capacity (a worker reuses one plan).
inline void plan_target_forward(target_forward_plan& p, std::span<const std::int32_t> tokens,
                                std::span<const std::int32_t> lengths, std::int32_t seq, std::int32_t vocab) {
  constexpr std::string_view op = "target_forward_gpu";
  constexpr auto most = static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
  checks.require(seq >= 0, op, "seq = " + std::to_string(seq) + " is negative");
  checks.require(lengths.size() <= most, op, "too many documents");
  for (auto* v : {&p.tokens, &p.doc, &p.pos, &p.dst}) v->clear();
  p.docs = static_cast<std::int32_t>(lengths.size());
  p.seq = seq;
  checks.require_size(tokens.size(), p.padded_rows(), op, "tokens");
  std::size_t total = 0;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    checks.require(lengths[d] >= 0 && lengths[d] <= seq, op,
                    "lengths[" + std::to_string(d) + "] = " + std::to_string(lengths[d]) + " is not in [0, seq = " +
                        std::to_string(seq) + "]");
    total += detail::sz(lengths[d]);
  }
  checks.require(total <= most && p.padded_rows() <= most, op, "the step has more than 2^31 - 1 rows");
  for (auto* v : {&p.tokens, &p.doc, &p.pos, &p.dst}) v->reserve(total);
  for (std::int32_t d = 0; d < p.docs; ++d) {
    for (std::int32_t t = 0; t < lengths[detail::sz(d)]; ++t) {
      const std::int32_t row = d * seq + t;
      const std::int32_t tok = tokens[detail::sz(row)];
      if (tok < 0 || tok >= vocab)
        checks.fail(op, "token " + std::to_string(tok) + " is outside [0, vocab = " + std::to_string(vocab) + ")");
      p.tokens.push_back(tok);
      p.doc.push_back(d);
      p.pos.push_back(t);
      p.dst.push_back(row);
    }
  }
}
[[nodiscard]] inline target_forward_plan plan_target_forward(std::span<const std::int32_t> tokens,
                                                             std::span<const std::int32_t> lengths, std::int32_t seq,
                                                             std::int32_t vocab) {
  target_forward_plan p;
  plan_target_forward(p, tokens, lengths, seq, vocab);
  return p;
}

/// The key of element (h, s) of the transposed [H, S] layout (index h * S + s)
/// the by-key scan runs over: neighbours share a key exactly when they are one
/// column h of one document, so the scan's segments are the in-document
/// running sums. Neighbours are (h, s), (h, s + 1) — one column, equal keys when
/// one document — or (h, S - 1), (h + 1, 0), which the column's parity tells
/// apart; so the key needs no document count, and a graph captured once serves
/// every step. The kernels compute it (--expt-relaxed-constexpr).
[[nodiscard]] constexpr std::int32_t scan_key(std::int32_t h, std::int32_t doc) noexcept {
  return 2 * doc + (h & 1);
}

/// A step's plan as the graphed forward runs it (--cuda-graphs): padded to
/// `rows` rows, so every launch has the same shape whatever the step's token
/// count. Padding rows are one more document (doc = docs, positions 0, 1, ...:
/// a segment of its own) whose output row is -1: computed, written nowhere.
inline void pad_plan_for_graph(target_forward_plan& p, std::int32_t rows) {
  constexpr std::string_view op = "target_forward_gpu";
  checks.require(p.size() <= rows, op, "the step has " + std::to_string(p.size()) + " tokens, more than the " +
                                           std::to_string(rows) + " rows of the graph");
  for (std::int32_t i = 0, pad = rows - p.size(); i < pad; ++i) {
    p.tokens.push_back(0);
    p.doc.push_back(p.docs);
    p.pos.push_back(i);
    p.dst.push_back(-1);
  }
}

/// Layer l's A and C stacked into one GEMM operand, row-major [2 * hidden, hidden]:
/// rows 0..H-1 are A, rows H..2H-1 are C. With Z = [rms(h) | rms(mean)] per row,
/// Z W = rms(h) A + rms(mean) C: one GEMM of depth 2H instead of two.
[[nodiscard]] inline std::vector<float> stacked_layer_weights(const TargetModel& m, std::size_t l) {
  const std::span<const float> a = m.layer_a(l), c = m.layer_c(l);
  std::vector<float> w(a.begin(), a.end());
  w.insert(w.end(), c.begin(), c.end());
  return w;
}

/// Options of the GPU forward. TF32 is off unless asked for: with it the GEMMs
/// round their inputs to 10 mantissa bits and agree with the CPU model to
/// ~1e-3 instead of ~1e-6 (tests/examples/test_target_forward_gpu.cpp).
struct target_forward_gpu_options {
  bool allow_tf32 = false;
};

class target_forward_gpu {
 public:
  /// Empty when a CUDA device is usable, else why not.
  [[nodiscard]] static std::string probe();

  /// Uploads the model's weights to the current device, once, and gives each
  /// of `workers` its own cuBLAS handle, cuBLAS workspace and scratch, sized
  /// for `max_tokens` packed tokens a step: a step allocates nothing.
  /// Throws std::runtime_error when no device is usable or CUDA / cuBLAS fails.
  target_forward_gpu(const TargetModel& model, std::int32_t max_tokens, std::size_t workers,
                     target_forward_gpu_options options = {});
  ~target_forward_gpu();  ///< waits for every worker's last step, then frees
  target_forward_gpu(const target_forward_gpu&) = delete;
  target_forward_gpu& operator=(const target_forward_gpu&) = delete;

  /// Enqueues on `stream` (a cudaStream_t) the forward of tokens [docs * seq]
  /// (lengths [docs]) into `out`, DEVICE memory of out_elems = docs * seq *
  /// feature_dim floats, and returns: nothing here waits for the device but a
  /// reuse of the worker's pinned token block, whose copy finished a step ago.
  /// One thread per worker at a time; different workers may call concurrently.
  /// Bad input (plan_target_forward's checks, more than max_tokens tokens,
  /// out_elems, worker out of range): std::invalid_argument, nothing enqueued.
  void enqueue(std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths, std::int32_t seq,
               float* out, std::size_t out_elems, void* stream, std::size_t worker);

  /// The same forward, its valid tokens pushed into a device_queue_link's
  /// ring instead (--hs-link rows): one reservation of sum(lengths) rows, each
  /// row {doc_base + document, token, loss_mask} with its taps as the payload
  /// (`out.width` must be feature_dim()). No padded buffer and no pack pass:
  /// the taps are written packed, then a warp per row copies them into the
  /// ring and publishes the row. Same rules as enqueue().
  void enqueue_rows(std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths,
                    std::span<const std::uint8_t> loss_mask, std::int32_t seq, std::int64_t doc_base,
                    const dflash::row_pusher<hs_token, float>& out, void* stream, std::size_t worker);

  /// The graphed forward (--cuda-graphs, dflash::graphed): the same step in three parts, so the
  /// launches in the middle are the same every step and one captured graph replays them.
  ///   prepare_graphed   not captured: the plan padded to max_tokens rows (pad_plan_for_graph),
  ///                     its upload into the worker's device block, cuBLAS bound to `stream`;
  ///                     the checks of enqueue() (out_elems: the step's docs * seq * feature)
  ///   launch_graphed    captured: the slot zeroed (out_capacity floats), the forward over
  ///                     max_tokens rows, taps to the valid rows; no synchronisation, no event,
  ///                     no allocation, no value of the step in any argument
  ///   after_graphed     not captured: the worker's "step done" mark after the replay
  void prepare_graphed(std::span<const std::int32_t> tokens, std::span<const std::int32_t> lengths, std::int32_t seq,
                       std::size_t out_elems, void* stream, std::size_t worker);
  void launch_graphed(float* out, std::size_t out_capacity, void* stream, std::size_t worker);
  void after_graphed(void* stream, std::size_t worker);

  [[nodiscard]] std::int32_t max_tokens() const noexcept;
  [[nodiscard]] std::size_t workers() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dflash_example
