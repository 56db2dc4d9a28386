#pragma once
// The ops driver that scripts/bundle/torch_reference.py checks against PyTorch:
// reads cases from stdin, runs them through one implementation of the ops (the
// host twins, ops_driver_host.cpp, or dflash::ops::gpu, ops_driver_gpu.cu) and
// writes every output to stdout. Plain text, one record per line, integers in
// decimal (floats and bf16 travel as their bit patterns, so nothing is rounded):
//
// in:
//   pack ID f32|bf16 BATCH SEQ HIDDEN  lengths[BATCH]  padded_bits[BATCH*SEQ*HIDDEN]
//   anchors ID BATCH SEQ BLOCK NUM_ANCHORS SEED HAS_DOCS  seq_lens[BATCH]  mask[BATCH*SEQ]  [docs[BATCH*SEQ]]
//   chain ID N_DOCS BLOCK NUM_ANCHORS SEED WINDOW TILE_Q TILE_KV  lengths[N_DOCS]  mask[sum(lengths)]
//     (one packed context: doc_ids -> select_anchors -> build_block_mask, the mask from the
//      anchors the op chose; its dense form is the block-sparse mask expanded by its own rule)
// out, per case (ARRAY is "ID NAME COUNT v0 v1 ..."):
//   pack:    cu_seqlens, packed, unpacked
//   anchors: anchors, keep
//   chain:   doc_id, pos, anchors, keep, kv_num_blocks, kv_indices, full_kv_num_blocks,
//            full_kv_indices, slot_weights (float bits, gamma 7), then
//            "ID dense ROWS COLS 0101..." (row-major, one character per element)
//   every case: "ID readback NAME TYPE VALUE" per scalar brought back by ONE batched
//   read-back (pack: tokens i32, packed_sum f32 for f32; anchors: kept i32, loss_tokens i64;
//   chain: kept i32, loss_tokens i64, partial_tiles i32, full_tiles i32)
//   "ID error MESSAGE" when an op throws (the case's remaining outputs are missing).
// Last line: "done CASES". Exit 0 when the input parsed (op errors are reported, not fatal),
// 2 on malformed input, 3 when the implementation fails outside an op (a CUDA
// error, say), 1 when the implementation is unavailable (no device).
//
// Impl provides: name(); doc_ids(lengths, doc, pos); pack<T>(shape, lengths, padded, cu,
// packed, unpacked); select_anchors(params, batch, seq, seq_lens, mask, docs, anchors, keep);
// build_block_mask(params, tile, docs, anchors, keep) -> block_sparse_mask (rule bound);
// each op also stages its scalars and read_back() returns them in staging order (one batched
// read-back per case); reset() drops what a failed case staged.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <dflash/ops.hpp>

namespace dflash::ops_driver {

using ivec = std::vector<std::int32_t>;
using bvec = std::vector<std::uint8_t>;

/// One scalar as read back: its name, type tag and value printed exactly.
struct scalar {
  std::string name;
  std::string type;  // i32 | i64 | f32
  std::string value;
};

inline std::string f32_text(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  return buf;
}

/// The per-case scalars, gathered by ONE submit of a batched_readback (RB): stage() names each
/// source as it is produced; read() submits, waits once and returns them in staging order.
template <class RB>
class scalar_batch {
 public:
  template <class T>
  void stage(std::string name, const T* src) {
    static_assert(std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> || std::is_same_v<T, float>);
    rb_.stage(names_.size(), src);
    names_.push_back({std::move(name), std::is_same_v<T, float> ? "f32" : sizeof(T) == 4 ? "i32" : "i64"});
  }
  void reset() noexcept {
    rb_.clear_staged();
    names_.clear();
  }
  template <class... Stream>
  std::vector<scalar> read(Stream... stream) {
    auto h = rb_.submit(stream...);
    h.wait();
    std::vector<scalar> out;
    for (std::size_t i = 0; i < names_.size(); ++i) {
      const std::string& t = names_[i].second;
      const std::string v = t == "f32"   ? f32_text(h.template get<float>(i))
                            : t == "i32" ? std::to_string(h.template get<std::int32_t>(i))
                                         : std::to_string(h.template get<std::int64_t>(i));
      out.push_back({names_[i].first, t, v});
    }
    reset();
    return out;
  }

 private:
  RB rb_{16};
  std::vector<std::pair<std::string, std::string>> names_;
};

/// Input the driver cannot parse (exit 2); any other failure is the
/// implementation's, reported as such (exit 3), never as "malformed input".
struct malformed_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class reader {
 public:
  explicit reader(std::istringstream& in, std::string what) : in_(in), what_(std::move(what)) {}
  template <class T = std::int64_t>
  T next(const char* field) {
    long long v = 0;
    if (!(in_ >> v)) throw malformed_input(what_ + ": missing or malformed " + field);
    return static_cast<T>(v);
  }
  std::uint64_t next_u64(const char* field) {
    unsigned long long v = 0;
    if (!(in_ >> v)) throw malformed_input(what_ + ": missing or malformed " + field);
    return v;
  }
  template <class T>
  std::vector<T> many(std::size_t n, const char* field) {
    std::vector<T> v(n);
    for (auto& x : v) x = static_cast<T>(next(field));
    return v;
  }
  std::string word(const char* field) {
    std::string w;
    if (!(in_ >> w)) throw malformed_input(what_ + ": missing " + field);
    return w;
  }
  void end() {
    std::string extra;
    if (in_ >> extra) throw malformed_input(what_ + ": unexpected trailing '" + extra + "'");
  }

 private:
  std::istringstream& in_;
  std::string what_;
};

template <class T>
void put(std::ostream& out, const std::string& id, const char* name, const std::vector<T>& v) {
  out << id << ' ' << name << ' ' << v.size();
  for (const T& x : v) out << ' ' << static_cast<long long>(x);
  out << '\n';
}

inline void put_readback(std::ostream& out, const std::string& id, const std::vector<scalar>& s) {
  for (const auto& x : s) out << id << " readback " << x.name << ' ' << x.type << ' ' << x.value << '\n';
}

template <class Impl>
void run_pack(Impl& impl, reader& r, const std::string& id, std::ostream& out) {
  const std::string dtype = r.word("dtype");
  ops::hidden_shape s{r.next<std::int32_t>("batch"), r.next<std::int32_t>("seq"), r.next<std::int32_t>("hidden")};
  if (s.batch < 0 || s.seq < 0 || s.hidden < 0) throw malformed_input("pack " + id + ": negative extent");
  const ivec lengths = r.many<std::int32_t>(static_cast<std::size_t>(s.batch), "lengths");
  const std::size_t n = static_cast<std::size_t>(s.batch) * static_cast<std::size_t>(s.seq) *
                        static_cast<std::size_t>(s.hidden);
  auto go = [&]<class T, class Bits>() {
    const std::vector<Bits> bits = r.many<Bits>(n, "padded bits");
    r.end();
    std::vector<T> padded(n);
    if (n) std::memcpy(padded.data(), bits.data(), n * sizeof(T));
    ivec cu;
    std::vector<T> packed, unpacked;
    try {
      impl.template pack<T>(s, lengths, padded, cu, packed, unpacked);
    } catch (const std::exception& e) {
      out << id << " error " << e.what() << '\n';
      return;
    }
    auto as_bits = [](const std::vector<T>& v) {
      std::vector<Bits> b(v.size());
      if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(T));
      return b;
    };
    put(out, id, "cu_seqlens", cu);
    put(out, id, "packed", as_bits(packed));
    put(out, id, "unpacked", as_bits(unpacked));
    put_readback(out, id, impl.read_back());
  };
  static_assert(sizeof(float) == sizeof(std::uint32_t) && sizeof(dflash::bf16) == sizeof(std::uint16_t));
  if (dtype == "f32")
    go.template operator()<float, std::uint32_t>();
  else if (dtype == "bf16")
    go.template operator()<dflash::bf16, std::uint16_t>();
  else
    throw malformed_input("pack " + id + ": dtype must be f32 or bf16, not '" + dtype + "'");
}

template <class Impl>
void run_anchors(Impl& impl, reader& r, const std::string& id, std::ostream& out) {
  const auto batch = r.next<std::int32_t>("batch"), seq = r.next<std::int32_t>("seq");
  ops::anchor_params a;
  a.block_size = r.next<std::int32_t>("block_size");
  a.num_anchors = r.next<std::int32_t>("num_anchors");
  a.seed = r.next_u64("seed");
  const bool has_docs = r.next("has_docs") != 0;
  if (batch < 0 || seq < 0 || a.num_anchors < 0) throw malformed_input("anchors " + id + ": negative extent");
  const std::size_t cells = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);
  const ivec seq_lens = r.many<std::int32_t>(static_cast<std::size_t>(batch), "seq_lens");
  const bvec mask = r.many<std::uint8_t>(cells, "mask");
  const ivec docs = has_docs ? r.many<std::int32_t>(cells, "docs") : ivec{};
  r.end();
  ivec anchors;
  bvec keep;
  try {
    impl.select_anchors(a, batch, seq, seq_lens, mask, docs, anchors, keep);
  } catch (const std::exception& e) {
    out << id << " error " << e.what() << '\n';
    return;
  }
  put(out, id, "anchors", anchors);
  put(out, id, "keep", keep);
  put_readback(out, id, impl.read_back());
}

template <class Impl>
void run_chain(Impl& impl, reader& r, const std::string& id, std::ostream& out) {
  const auto n_docs = r.next<std::int32_t>("n_docs");
  ops::anchor_params a;
  a.block_size = r.next<std::int32_t>("block_size");
  a.num_anchors = r.next<std::int32_t>("num_anchors");
  a.seed = r.next_u64("seed");
  const auto window = r.next<std::int32_t>("window");
  const ops::tile_shape tile{r.next<std::int32_t>("tile_q"), r.next<std::int32_t>("tile_kv")};
  if (n_docs < 0) throw malformed_input("chain " + id + ": negative n_docs");
  const ivec lengths = r.many<std::int32_t>(static_cast<std::size_t>(n_docs), "lengths");
  std::int64_t total = 0;
  for (auto l : lengths) total += l;
  if (total < 0 || total > (1 << 24)) throw malformed_input("chain " + id + ": total length out of range");
  const bvec mask = r.many<std::uint8_t>(static_cast<std::size_t>(total), "mask");
  r.end();
  try {
    ops::doc_ids_result d;
    impl.doc_ids(lengths, d.doc_id, d.pos);
    put(out, id, "doc_id", d.doc_id);
    put(out, id, "pos", d.pos);
    ivec anchors;
    bvec keep;
    const auto s = static_cast<std::int32_t>(d.doc_id.size());
    impl.select_anchors(a, 1, s, ivec{s}, mask, d.doc_id, anchors, keep);
    put(out, id, "anchors", anchors);
    put(out, id, "keep", keep);
    const ops::block_mask_params p{s, a.num_anchors, a.block_size, window};
    const ops::block_sparse_mask m = impl.build_block_mask(p, tile, d, anchors, keep);
    put(out, id, "kv_num_blocks", m.kv_num_blocks);
    put(out, id, "kv_indices", m.kv_indices);
    put(out, id, "full_kv_num_blocks", m.full_kv_num_blocks);
    put(out, id, "full_kv_indices", m.full_kv_indices);
    const std::vector<float> w = ops::slot_loss_weights(a.block_size, 7.0f);
    std::vector<std::uint32_t> wb(w.size());
    if (!w.empty()) std::memcpy(wb.data(), w.data(), w.size() * sizeof(float));
    put(out, id, "slot_weights", wb);
    const ops::dense_mask dense = ops::expand_block_mask(m);
    std::string cells(dense.allowed.size(), '0');
    for (std::size_t i = 0; i < cells.size(); ++i) cells[i] = dense.allowed[i] ? '1' : '0';
    out << id << " dense " << dense.rows << ' ' << dense.cols << ' ' << (cells.empty() ? "-" : cells) << '\n';
    put_readback(out, id, impl.read_back());
  } catch (const std::exception& e) {
    out << id << " error " << e.what() << '\n';
  }
}

/// The driver's main: reads stdin to the end, one case per line.
template <class Impl>
int main_loop(Impl& impl) {
  std::ios::sync_with_stdio(false);
  std::string line;
  long cases = 0;
  std::ostream& out = std::cout;
  while (std::getline(std::cin, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string kind, id;
    in >> kind >> id;
    impl.reset();  // scalars staged by a case that failed half-way are not read back by the next
    try {
      reader r(in, kind + " " + id);
      if (kind == "pack")
        run_pack(impl, r, id, out);
      else if (kind == "anchors")
        run_anchors(impl, r, id, out);
      else if (kind == "chain")
        run_chain(impl, r, id, out);
      else
        throw malformed_input("unknown case kind '" + kind + "'");
    } catch (const malformed_input& e) {
      std::cerr << "ops_driver (" << impl.name() << "): malformed input: " << e.what() << '\n';
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "ops_driver (" << impl.name() << "): failed: " << e.what() << '\n';
      return 3;
    }
    ++cases;
    out.flush();
  }
  out << "done " << cases << '\n';
  return 0;
}

}  // namespace dflash::ops_driver
