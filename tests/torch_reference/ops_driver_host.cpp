// The ops driver on the host twins (see ops_driver.hpp): what torch_reference.py
// compares with PyTorch on the CPU, and with its own pure-Python reference.
#include <deque>

#include "ops_driver.hpp"

namespace {
using namespace dflash;
using ops_driver::bvec;
using ops_driver::ivec;

struct host_impl {
  ops_driver::scalar_batch<ops::host_batched_readback> batch;
  std::deque<std::int64_t> cells;  // where the scalars live until read back (stable addresses)

  static const char* name() { return "host"; }
  void reset() {
    batch.reset();
    cells.clear();
  }
  template <class T>
  void stage(const char* n, T v) {
    static_assert(sizeof(T) <= sizeof(std::int64_t));
    std::memcpy(&cells.emplace_back(0), &v, sizeof v);
    batch.stage(n, reinterpret_cast<const T*>(&cells.back()));
  }
  std::vector<ops_driver::scalar> read_back() { return batch.read(); }

  void doc_ids(const ivec& lengths, ivec& doc, ivec& pos) {
    auto r = ops::doc_ids(lengths);
    doc = std::move(r.doc_id);
    pos = std::move(r.pos);
  }
  template <class T>
  void pack(const ops::hidden_shape& s, const ivec& lengths, const std::vector<T>& padded, ivec& cu,
            std::vector<T>& packed, std::vector<T>& unpacked) {
    cu.assign(lengths.size() + 1, 0);
    std::vector<T> buf(padded.size());
    const std::int32_t total = ops::pack_hidden_states<T>(padded, s, lengths, buf, cu);
    packed.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(total) * s.hidden);
    unpacked.assign(padded.size(), T{});
    ops::unpack_hidden_states<T>(packed, cu, s, unpacked);
    stage("tokens", total);
    if constexpr (std::is_same_v<T, float>) {
      double sum = 0;  // then rounded once: the reference's f32 sum is compared within a tolerance
      for (float x : packed) sum += x;
      stage("packed_sum", static_cast<float>(sum));
    }
  }
  void select_anchors(const ops::anchor_params& a, std::int32_t b, std::int32_t seq, const ivec& seq_lens,
                      const bvec& mask, const ivec& docs, ivec& anchors, bvec& keep) {
    const std::size_t k = static_cast<std::size_t>(b) * static_cast<std::size_t>(a.num_anchors);
    anchors.assign(k, 0);
    keep.assign(k, 0);
    ops::select_anchors(a, b, seq, seq_lens, mask, docs, anchors, keep);
    std::int32_t kept = 0;
    for (auto x : keep) kept += x;
    stage("kept", kept);
    stage("loss_tokens", ops::count_loss_tokens(mask));
  }
  ops::block_sparse_mask build_block_mask(const ops::block_mask_params& p, ops::tile_shape t,
                                          const ops::doc_ids_result& d, const ivec& anchors, const bvec& keep) {
    ops::block_sparse_mask m = ops::build_block_mask(p, t, d, anchors, keep);
    std::int32_t np = 0, nf = 0;
    for (auto x : m.kv_num_blocks) np += x;
    for (auto x : m.full_kv_num_blocks) nf += x;
    stage("partial_tiles", np);
    stage("full_tiles", nf);
    return m;
  }
};
}  // namespace

int main() {
  host_impl impl;
  return dflash::ops_driver::main_loop(impl);
}
