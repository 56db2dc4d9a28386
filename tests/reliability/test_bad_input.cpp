// Bad input across the public API: one table per entry point
// that takes a size, length, count or interval. Every bad row must throw
// std::invalid_argument whose message names the function and the bad value;
// every table also has a control row (the same call with good values) that
// must not throw, so each failure is the bad value's. Sizes that are template
// arguments (queue_link depth, workers count) are compile-time errors, checked
// by the compile_fail_* ctests next to this file.
#include <catch2/catch.hpp>
#include <dflash/dflash.hpp>
#include <dflash/profile/periodic_reporter.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace dflash::literals;

namespace {

struct bad_row {
  std::string what;                 ///< the case, for the failure report
  std::function<void()> call;       ///< must throw std::invalid_argument
  std::vector<std::string> says;    ///< substrings the message must contain
};

// Runs every row: each must throw std::invalid_argument (nothing else) with
// every expected substring; the control must not throw at all.
void check_table(const std::function<void()>& control, const std::vector<bad_row>& rows) {
  CHECK_NOTHROW(control());
  for (const auto& r : rows) {
    INFO(r.what);
    std::string msg;
    bool invalid = false;
    try {
      r.call();
    } catch (const std::invalid_argument& e) {
      invalid = true;
      msg = e.what();
    } catch (const std::exception& e) {
      FAIL_CHECK("threw another std::exception: " << e.what());
    }
    CHECK(invalid);
    for (const auto& s : r.says) CHECK_THAT(msg, Catch::Contains(s));
  }
}

template <class T>
std::span<const T> cs(const std::vector<T>& v) {
  return std::span<const T>(v);
}
template <class T>
std::span<T> ms(std::vector<T>& v) {
  return std::span<T>(v);
}
using i32 = std::vector<std::int32_t>;
using u8 = std::vector<std::uint8_t>;

}  // namespace

// ---- queues ----------------------------------------------------------------

TEST_CASE("bounded_queue: capacity 0", "[bad_input][queue]") {
  using prof_t = dflash::AccumulatingProfiler<dflash::queue_keys<"hs_queue">>;
  prof_t prof;
  check_table([] { dflash::bounded_queue<int> q(1); },
              {
                  {"NullProfiler, default name", [] { dflash::bounded_queue<int> q(0); },
                   {"dflash::bounded_queue 'queue'", "capacity must be at least 1 (got 0)"}},
                  {"profiled, named", [&] { dflash::bounded_queue<int, prof_t, "hs_queue"> q(0, prof); },
                   {"dflash::bounded_queue 'hs_queue'", "(got 0)"}},
              });
}

TEST_CASE("host_ring: capacity 0; a batch larger than the ring is refused whole", "[bad_input][queue]") {
  check_table([] { dflash::host_ring<int> r(1); },
              {
                  {"capacity 0", [] { dflash::host_ring<int> r(0); },
                   {"dflash::host_ring", "capacity must be at least 1 (got 0)"}},
              });
  // try_push is a non-blocking status API shared with the device: too large is
  // a status (ring_status::too_large), never a partial push.
  dflash::host_ring<int> r(4);
  const std::vector<int> five{1, 2, 3, 4, 5};
  CHECK(r.try_push(five.data(), 5) == dflash::ring_status::too_large);
  CHECK(r.size_approx() == 0);
  CHECK(r.try_push(five.data(), 4) == dflash::ring_status::ok);
  CHECK(r.size_approx() == 4);
  // The control's view reports the same for a raw reservation.
  CHECK(r.control().try_reserve_push(5).status == dflash::ring_status::too_large);
}

// ---- pipeline: runtime shape -------------------------------------------------

namespace {
struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};
struct twice {
  static constexpr dflash::fixed_string name{"twice"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const { return 2 * x; }
};
struct drop {
  static constexpr dflash::fixed_string name{"drop"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};
template <class P>
using small_pipeline = dflash::Pipeline<P, numbers, dflash::queue_link<"q", 4>, dflash::workers<twice, 2>,
                                        dflash::queue_link<"r", 4>, drop>;
}  // namespace

// Compile-time sizes (queue_link<Name, 0>, workers<S, 0>) are compile errors:
// see the compile_fail_queue_depth_0 / compile_fail_workers_0 ctests.
TEST_CASE("Pipeline: a runtime shape with 0 workers or a queue of depth 0", "[bad_input][pipeline]") {
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<small_pipeline<dflash::NullProfiler>>>;
  using pipe = small_pipeline<prof_t>;
  prof_t prof;
  auto with = [](auto edit) {
    auto s = pipe::default_shape();
    edit(s);
    return s;
  };
  check_table(
      [&] {
        pipe p(prof, with([](auto& s) { s.workers[1] = 5, s.depths[0] = 1; }));
        small_pipeline<dflash::NullProfiler> q(small_pipeline<dflash::NullProfiler>::default_shape());
      },
      {
          {"source with 0 workers", [&] { pipe p(prof, with([](auto& s) { s.workers[0] = 0; })); },
           {"dflash::Pipeline", "stage 0 needs at least one worker (got 0)"}},
          {"middle stage with 0 workers", [&] { pipe p(prof, with([](auto& s) { s.workers[1] = 0; })); },
           {"dflash::Pipeline", "stage 1 needs at least one worker (got 0)"}},
          {"sink with 0 workers", [&] { pipe p(prof, with([](auto& s) { s.workers[2] = 0; })); },
           {"dflash::Pipeline", "stage 2 needs at least one worker (got 0)"}},
          {"queue of depth 0", [&] { pipe p(prof, with([](auto& s) { s.depths[1] = 0; })); },
           {"dflash::Pipeline", "link 1 ('r') needs a depth of at least 1 (got 0)"}},
          {"NullProfiler, queue of depth 0",
           [] {
             auto s = small_pipeline<dflash::NullProfiler>::default_shape();
             s.depths[0] = 0;
             small_pipeline<dflash::NullProfiler> p(s);
           },
           {"dflash::Pipeline", "link 0 ('q') needs a depth of at least 1 (got 0)"}},
          // before the shape check, a queue tried to allocate it (bad_alloc, or a length_error)
          {"queue deeper than any link holds", [&] { pipe p(prof, with([](auto& s) { s.depths[1] = (std::size_t{1} << 61) + 1; })); },
           {"dflash::Pipeline", "link 1 ('r') needs a depth of at most 2^61 (got 2305843009213693953)"}},
      });
  CHECK(pipe::default_shape().workers == std::array<std::size_t, 3>{1, 2, 1});
  CHECK(pipe::default_shape().depths == std::array<std::size_t, 2>{4, 4});
}

// Messages are printf-formatted through a stack buffer (detail/format.hpp): one
// longer than the buffer must come whole, not cut at its size.
TEST_CASE("bounded_queue: a long name stays whole in the message", "[bad_input][queue]") {
  struct chars {
    char v[301];
  };
  static constexpr chars text = [] {
    chars c{};
    for (std::size_t i = 0; i < 300; ++i) c.v[i] = static_cast<char>('a' + i % 26);
    return c;
  }();
  static constexpr dflash::fixed_string<300> long_name(text.v);
  std::string expected = "dflash::bounded_queue '";
  for (std::size_t i = 0; i < 300; ++i) expected += static_cast<char>('a' + i % 26);
  expected += "': capacity must be at least 1 (got 0)";
  CHECK_THROWS_MATCHES((dflash::bounded_queue<int, dflash::NullProfiler, long_name>(0)), std::invalid_argument,
                       Catch::Matchers::Message(expected));
}

// ---- periodic reporter -------------------------------------------------------

TEST_CASE("periodic_reporter: negative, NaN, infinite, too long or sub-tick interval", "[bad_input][reporter]") {
  using prof_t = dflash::AccumulatingProfiler<dflash::key_set<"x">>;
  prof_t prof;
  auto sink = [](std::string_view) {};
  auto make = [&](double seconds) {
    dflash::periodic_reporter<prof_t> r(prof, std::chrono::duration<double>(seconds), sink);
  };
  auto make_null = [&](double seconds) {
    dflash::periodic_reporter<dflash::NullProfiler> r(dflash::NullProfiler{}, std::chrono::duration<double>(seconds),
                                                      sink);
  };
  const double inf = std::numeric_limits<double>::infinity();
  check_table([&] { make(0.5); make(0.0); make_null(0.5); },
              {
                  {"negative", [&] { make(-1.0); }, {"dflash::periodic_reporter", "interval", "-1"}},
                  {"NaN", [&] { make(std::nan("")); }, {"dflash::periodic_reporter", "interval", "nan"}},
                  {"+inf", [&] { make(inf); }, {"dflash::periodic_reporter", "interval", "inf"}},
                  {"-inf", [&] { make(-inf); }, {"dflash::periodic_reporter", "interval", "-inf"}},
                  {"longer than the clock can count", [&] { make(1e300); },
                   {"dflash::periodic_reporter", "interval", "1e+300"}},
                  {"shorter than one clock tick", [&] { make(1e-12); },
                   {"dflash::periodic_reporter", "shorter than one clock tick", "1e-12"}},
                  {"NullProfiler, negative", [&] { make_null(-2.0); }, {"dflash::periodic_reporter", "-2"}},
                  {"NullProfiler, +inf", [&] { make_null(inf); }, {"dflash::periodic_reporter", "inf"}},
              });
}

// ---- profiler policies (sizes and durations) ---------------------------------

TEST_CASE("AccumulatingProfiler::add and TraceProfiler: negative duration, capacity 0", "[bad_input][profile]") {
  dflash::AccumulatingProfiler<dflash::key_set<"x">> acc;
  dflash::TraceProfiler<dflash::key_set<"x">> trace(4);
  check_table(
      [&] {
        acc.add("x"_key, 0ns);
        trace.add("x"_key, 1ns);
        dflash::TraceProfiler<dflash::key_set<"x">> t(1);
      },
      {
          {"AccumulatingProfiler::add(-5ns)", [&] { acc.add("x"_key, -5ns); },
           {"dflash::AccumulatingProfiler::add", "negative duration", "'x'"}},
          {"TraceProfiler::add(-1ms)", [&] { trace.add("x"_key, -1ms); },
           {"dflash::TraceProfiler::add", "negative duration", "'x'"}},
          {"TraceProfiler(0)", [] { dflash::TraceProfiler<dflash::key_set<"x">> t(0); },
           {"dflash::TraceProfiler", "events_per_thread must be at least 1"}},
      });
  CHECK(acc.snapshot().find("x")->count == 1);  // the rejected add left no trace
}

// ---- ops: doc ids and packing --------------------------------------------------

TEST_CASE("ops::doc_ids: negative lengths, mismatched outputs", "[bad_input][ops]") {
  i32 lengths{2, 0, 3}, doc(5), pos(5), short_out(4);
  namespace ops = dflash::ops;
  check_table([&] { ops::doc_ids(cs(lengths), ms(doc), ms(pos)); },
              {
                  {"negative length", [&] { (void)ops::doc_ids(cs(i32{2, -2, 3})); },
                   {"dflash::ops::doc_ids", "lengths[1] = -2 is negative"}},
                  {"doc_id too short", [&] { ops::doc_ids(cs(lengths), ms(short_out), ms(pos)); },
                   {"dflash::ops::doc_ids", "doc_id has 4 elements, expected 5"}},
                  {"pos too short", [&] { ops::doc_ids(cs(lengths), ms(doc), ms(short_out)); },
                   {"dflash::ops::doc_ids", "pos has 4 elements, expected 5"}},
                  {"sum overflows int32",
                   [&] { (void)ops::doc_ids(cs(i32{std::numeric_limits<std::int32_t>::max(), 1})); },
                   {"dflash::ops::doc_ids", "total length 2147483648 does not fit int32"}},
              });
}

TEST_CASE("ops::cu_seqlens: negative seq, lengths beyond seq, wrong cu size", "[bad_input][ops]") {
  namespace ops = dflash::ops;
  i32 lengths{3, 0, 4}, cu(4), cu_short(3);
  check_table([&] { (void)ops::cu_seqlens(cs(lengths), 4, ms(cu)); },
              {
                  {"seq < 0", [&] { (void)ops::cu_seqlens(cs(lengths), -1, ms(cu)); },
                   {"dflash::ops::cu_seqlens", "seq = -1 is negative"}},
                  {"length > seq", [&] { (void)ops::cu_seqlens(cs(lengths), 3, ms(cu)); },
                   {"dflash::ops::cu_seqlens", "lengths[2] = 4 exceeds seq = 3"}},
                  {"negative length", [&] { (void)ops::cu_seqlens(cs(i32{1, -1, 0}), 4, ms(cu)); },
                   {"dflash::ops::cu_seqlens", "lengths[1] = -1 is negative"}},
                  {"cu too short", [&] { (void)ops::cu_seqlens(cs(lengths), 4, ms(cu_short)); },
                   {"dflash::ops::cu_seqlens", "cu_seqlens has 3 elements, expected 4"}},
              });
}

TEST_CASE("ops::pack_hidden_states: bad shapes, lengths and spans", "[bad_input][ops]") {
  namespace ops = dflash::ops;
  const ops::hidden_shape shape{2, 3, 4};
  std::vector<float> padded(shape.padded_elements()), packed(24), small_packed(15);
  i32 lengths{3, 1}, cu(3);
  auto pack = [&](ops::hidden_shape s, std::span<const float> in, const i32& l, std::span<float> out,
                  std::span<std::int32_t> c) { (void)ops::pack_hidden_states(in, s, cs(l), out, c); };
  check_table([&] { pack(shape, cs(padded), lengths, ms(packed), ms(cu)); },
              {
                  {"batch < 0", [&] { pack({-1, 3, 4}, cs(padded), lengths, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "batch = -1 is negative"}},
                  {"seq < 0", [&] { pack({2, -3, 4}, cs(padded), lengths, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "seq = -3 is negative"}},
                  {"hidden 0", [&] { pack({2, 3, 0}, cs(padded), lengths, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "hidden = 0 must be positive"}},
                  {"hidden < 0", [&] { pack({2, 3, -4}, cs(padded), lengths, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "hidden = -4 must be positive"}},
                  {"padded of the wrong size",
                   [&] { pack(shape, cs(padded).first(23), lengths, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "padded has 23 elements, expected 24"}},
                  {"lengths count != batch", [&] { pack(shape, cs(padded), i32{3}, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "lengths has 1 elements, expected 2"}},
                  {"length > seq", [&] { pack(shape, cs(padded), i32{4, 1}, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "lengths[0] = 4 exceeds seq = 3"}},
                  {"negative length", [&] { pack(shape, cs(padded), i32{3, -1}, ms(packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "lengths[1] = -1 is negative"}},
                  {"packed too small", [&] { pack(shape, cs(padded), lengths, ms(small_packed), ms(cu)); },
                   {"dflash::ops::pack_hidden_states", "packed has 15 elements, needs 16"}},
                  {"cu of the wrong size", [&] { pack(shape, cs(padded), lengths, ms(packed), ms(cu).first(2)); },
                   {"dflash::ops::pack_hidden_states", "cu_seqlens has 2 elements, expected 3"}},
              });
}

TEST_CASE("ops::unpack_hidden_states: bad cu_seqlens and spans", "[bad_input][ops]") {
  namespace ops = dflash::ops;
  const ops::hidden_shape shape{2, 3, 4};
  std::vector<float> padded(shape.padded_elements()), packed(16);
  auto unpack = [&](const i32& cu, std::span<const float> in, std::span<float> out, ops::hidden_shape s) {
    ops::unpack_hidden_states(in, cs(cu), s, out);
  };
  check_table([&] { unpack(i32{0, 3, 4}, cs(packed), ms(padded), shape); },
              {
                  {"cu[0] != 0", [&] { unpack(i32{1, 3, 4}, cs(packed), ms(padded), shape); },
                   {"dflash::ops::unpack_hidden_states", "cu_seqlens[0] = 1 must be 0"}},
                  {"decreasing cu", [&] { unpack(i32{0, 3, 2}, cs(packed), ms(padded), shape); },
                   {"dflash::ops::unpack_hidden_states", "cu_seqlens[2] - cu_seqlens[1] = -1"}},
                  {"step > seq", [&] { unpack(i32{0, 4, 4}, cs(packed), ms(padded), shape); },
                   {"dflash::ops::unpack_hidden_states", "cu_seqlens[1] - cu_seqlens[0] = 4", "seq = 3"}},
                  {"cu of the wrong size", [&] { unpack(i32{0, 3}, cs(packed), ms(padded), shape); },
                   {"dflash::ops::unpack_hidden_states", "cu_seqlens has 2 elements, expected 3"}},
                  {"packed too small", [&] { unpack(i32{0, 3, 4}, cs(packed).first(15), ms(padded), shape); },
                   {"dflash::ops::unpack_hidden_states", "packed has 15 elements, needs 16"}},
                  {"padded of the wrong size",
                   [&] { unpack(i32{0, 3, 4}, cs(packed), ms(padded).first(20), shape); },
                   {"dflash::ops::unpack_hidden_states", "padded has 20 elements, expected 24"}},
                  {"hidden 0", [&] { unpack(i32{0, 3, 4}, cs(packed), ms(padded), {2, 3, 0}); },
                   {"dflash::ops::unpack_hidden_states", "hidden = 0 must be positive"}},
              });
}

// ---- ops: block mask -------------------------------------------------------

TEST_CASE("ops::build_block_mask / dense_block_mask: bad params, ids and anchors", "[bad_input][ops]") {
  namespace ops = dflash::ops;
  // Context of 6 tokens in two documents (4 + 2), 2 blocks of 2.
  const i32 doc{0, 0, 0, 0, 1, 1}, pos{0, 1, 2, 3, 0, 1}, anchors{2, 5};
  const u8 keep{1, 1};
  const ops::block_mask_params good{6, 2, 2, 0};
  auto build = [&](ops::block_mask_params p, ops::tile_shape t, const i32& d, const i32& ps, const i32& a,
                   const u8& k) { (void)ops::build_block_mask(p, t, ops::packed_docs{cs(d), cs(ps)}, cs(a), cs(k)); };
  auto with = [&](auto edit) {
    ops::block_mask_params p = good;
    edit(p);
    return p;
  };
  const ops::tile_shape tile{2, 2};
  check_table([&] { build(good, tile, doc, pos, anchors, keep); },
              {
                  {"block_size 0", [&] { build(with([](auto& p) { p.block_size = 0; }), tile, doc, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "block_size = 0 must be positive"}},
                  {"block_size < 0",
                   [&] { build(with([](auto& p) { p.block_size = -3; }), tile, doc, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "block_size = -3 must be positive"}},
                  {"window < 0", [&] { build(with([](auto& p) { p.window = -1; }), tile, doc, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "window = -1 is negative"}},
                  {"context_len < 0",
                   [&] { build(with([](auto& p) { p.context_len = -6; }), tile, doc, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "context_len = -6 is negative"}},
                  {"num_blocks < 0",
                   [&] { build(with([](auto& p) { p.num_blocks = -2; }), tile, doc, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "num_blocks = -2 is negative"}},
                  {"kv count overflows int32",
                   [&] {
                     build(with([](auto& p) { p.num_blocks = 1 << 20, p.block_size = 1 << 12; }), tile, doc, pos,
                           anchors, keep);
                   },
                   {"dflash::ops::build_block_mask", "overflows int32"}},
                  {"tile 0", [&] { build(good, {0, 2}, doc, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "tile sizes must be positive (got 0 x 2)"}},
                  {"tile < 0", [&] { build(good, {2, -128}, doc, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "(got 2 x -128)"}},
                  {"doc_ids shorter than the context", [&] { build(good, tile, i32{0, 0, 0}, pos, anchors, keep); },
                   {"dflash::ops::build_block_mask", "doc_ids has 3 elements, expected 6"}},
                  {"pos shorter than the context", [&] { build(good, tile, doc, i32{0}, anchors, keep); },
                   {"dflash::ops::build_block_mask", "pos has 1 elements, expected 6"}},
                  {"non-monotone doc ids",
                   [&] { build(good, tile, i32{0, 0, 1, 1, 0, 0}, i32{0, 1, 0, 1, 0, 1}, anchors, keep); },
                   {"dflash::ops::build_block_mask", "doc_ids must be non-decreasing", "doc_ids[4]"}},
                  {"pos not restarting at a new document", [&] { build(good, tile, doc, i32{0, 1, 2, 3, 4, 5}, anchors, keep); },
                   {"dflash::ops::build_block_mask", "pos[4] = 4"}},
                  {"anchors count != num_blocks", [&] { build(good, tile, doc, pos, i32{2}, keep); },
                   {"dflash::ops::build_block_mask", "anchors has 1 elements, expected 2"}},
                  {"keep count != num_blocks", [&] { build(good, tile, doc, pos, anchors, u8{1, 1, 1}); },
                   {"dflash::ops::build_block_mask", "keep has 3 elements, expected 2"}},
                  {"anchor beyond the context", [&] { build(good, tile, doc, pos, i32{2, 6}, keep); },
                   {"dflash::ops::build_block_mask", "anchors[1] = 6 is outside the context [0, 6)"}},
                  {"negative anchor", [&] { build(good, tile, doc, pos, i32{-1, 5}, keep); },
                   {"dflash::ops::build_block_mask", "anchors[0] = -1"}},
              });
  // The oracle validates the same parameters. (A named short vector: with a
  // temporary, GCC -O3 warns about the loop behind the size check that throws.)
  const i32 one_doc{0};
  check_table([&] { (void)ops::dense_block_mask(good, cs(doc), cs(anchors), cs(keep)); },
              {
                  {"dense: block_size 0",
                   [&] { (void)ops::dense_block_mask(with([](auto& p) { p.block_size = 0; }), cs(doc), cs(anchors), cs(keep)); },
                   {"dflash::ops::dense_block_mask", "block_size = 0 must be positive"}},
                  {"dense: window < 0",
                   [&] { (void)ops::dense_block_mask(with([](auto& p) { p.window = -7; }), cs(doc), cs(anchors), cs(keep)); },
                   {"dflash::ops::dense_block_mask", "window = -7 is negative"}},
                  {"dense: doc_ids of the wrong size",
                   [&] { (void)ops::dense_block_mask(good, cs(one_doc), cs(anchors), cs(keep)); },
                   {"dflash::ops::dense_block_mask", "doc_ids has 1 elements, expected 6"}},
                  {"dense: anchor beyond the context",
                   [&] { (void)ops::dense_block_mask(good, cs(doc), cs(i32{9, 0}), cs(keep)); },
                   {"dflash::ops::dense_block_mask", "anchors[0] = 9"}},
              });
}

// ---- ops: anchors, loss weights, drop rule ----------------------------------

TEST_CASE("ops::select_anchors: bad params, lengths, spans and doc ids", "[bad_input][ops]") {
  namespace ops = dflash::ops;
  constexpr std::int32_t batch = 2, seq = 8;
  const i32 lens{8, 5}, docs(batch * seq, 0);
  const u8 mask(batch * seq, 1);
  i32 anchors(batch * 2);
  u8 keep(batch * 2);
  const ops::anchor_params good{2, 2, 7};
  auto sel = [&](ops::anchor_params a, std::int32_t b, std::int32_t s, const i32& l, const u8& m, const i32& d,
                 std::span<std::int32_t> an, std::span<std::uint8_t> k) {
    ops::select_anchors(a, b, s, cs(l), cs(m), cs(d), an, k);
  };
  i32 decreasing = docs;
  decreasing[8 + 3] = 1;  // row 1: 0 0 0 1 0 ...
  check_table([&] { sel(good, batch, seq, lens, mask, docs, ms(anchors), ms(keep)); },
              {
                  {"block_size 0", [&] { sel({0, 2, 7}, batch, seq, lens, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "block_size = 0 must be positive"}},
                  {"block_size < 0", [&] { sel({-16, 2, 7}, batch, seq, lens, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "block_size = -16 must be positive"}},
                  {"num_anchors < 0", [&] { sel({2, -1, 7}, batch, seq, lens, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "num_anchors = -1 is negative"}},
                  {"batch < 0", [&] { sel(good, -2, seq, lens, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "batch = -2 is negative"}},
                  {"seq < 0", [&] { sel(good, batch, -8, lens, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "seq = -8 is negative"}},
                  {"seq beyond the key's 20 bits", [&] { sel(good, batch, 1 << 20, lens, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "seq = 1048576 exceeds 1048575"}},
                  {"seq_lens count != batch", [&] { sel(good, batch, seq, i32{8}, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "seq_lens has 1 elements, expected 2"}},
                  {"seq_len > seq", [&] { sel(good, batch, seq, i32{8, 9}, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "[1] = 9 exceeds seq = 8"}},
                  {"negative seq_len", [&] { sel(good, batch, seq, i32{-1, 5}, mask, docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "[0] = -1 is negative"}},
                  {"loss_mask of the wrong size",
                   [&] { sel(good, batch, seq, lens, u8(15, 1), docs, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "loss_mask has 15 elements, expected 16"}},
                  {"doc_ids of the wrong size", [&] { sel(good, batch, seq, lens, mask, i32(3), ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "doc_ids has 3 elements, expected 0 or 16"}},
                  {"anchors of the wrong size",
                   [&] { sel(good, batch, seq, lens, mask, docs, ms(anchors).first(3), ms(keep)); },
                   {"dflash::ops::select_anchors", "anchors has 3 elements, expected 4"}},
                  {"keep of the wrong size",
                   [&] { sel(good, batch, seq, lens, mask, docs, ms(anchors), ms(keep).first(1)); },
                   {"dflash::ops::select_anchors", "keep has 1 elements, expected 4"}},
                  {"doc ids decreasing inside a row",
                   [&] { sel(good, batch, seq, lens, mask, decreasing, ms(anchors), ms(keep)); },
                   {"dflash::ops::select_anchors", "doc_ids of row 1 decrease at position 4"}},
              });
}

TEST_CASE("ops::slot_loss_weights and should_drop_sample: block_size, gamma", "[bad_input][ops]") {
  namespace ops = dflash::ops;
  std::vector<float> out(4);
  const u8 mask(10, 1);
  check_table(
      [&] {
        ops::slot_loss_weights(4, 7.0f, std::span<float>(out));
        (void)ops::slot_loss_weights(4, 0.0f);
        (void)ops::should_drop_sample(cs(mask), 4);
      },
      {
          {"weights: block_size 0", [] { (void)ops::slot_loss_weights(0, 7.0f); },
           {"dflash::ops::slot_loss_weights", "block_size = 0 must be positive"}},
          {"weights: block_size < 0", [] { (void)ops::slot_loss_weights(-4, 7.0f); },
           {"dflash::ops::slot_loss_weights", "block_size = -4 must be positive"}},
          {"weights: gamma < 0", [] { (void)ops::slot_loss_weights(4, -1.0f); },
           {"dflash::ops::slot_loss_weights", "gamma = -1"}},
          {"weights: gamma NaN", [] { (void)ops::slot_loss_weights(4, std::nanf("")); },
           {"dflash::ops::slot_loss_weights", "gamma = nan"}},
          {"weights: out of the wrong size", [&] { ops::slot_loss_weights(3, 7.0f, std::span<float>(out)); },
           {"dflash::ops::slot_loss_weights", "out has 4 elements, expected 3"}},
          {"drop: block_size 0", [&] { (void)ops::should_drop_sample(cs(mask), 0); },
           {"dflash::ops::should_drop_sample", "block_size = 0 must be positive"}},
          {"drop: block_size < 0", [&] { (void)ops::should_drop_sample(cs(mask), -2); },
           {"dflash::ops::should_drop_sample", "block_size = -2 must be positive"}},
      });
}

// ---- ops: batched read-back -------------------------------------------------

TEST_CASE("ops::batched_readback: slots, depth, slot index, null source", "[bad_input][ops]") {
  namespace ops = dflash::ops;
  ops::host_batched_readback rb(2);
  const float loss = 1.5f;
  check_table(
      [&] {
        ops::host_batched_readback ok(1, 1);
        rb.stage(1, &loss);
        (void)rb.slot<float>(1);
      },
      {
          {"0 slots", [] { ops::host_batched_readback r(0); },
           {"dflash::ops::batched_readback", "needs at least one slot (got 0)"}},
          {"too many slots", [] { ops::host_batched_readback r((std::size_t{1} << 24) + 1); },
           {"dflash::ops::batched_readback", "slots = 16777217 is too many"}},
          {"depth 0", [] { ops::host_batched_readback r(2, 0); },
           {"dflash::ops::batched_readback", "depth must be positive (got 0)"}},
          {"slot index out of range", [&] { (void)rb.slot<float>(2); },
           {"dflash::ops::batched_readback", "slot 2 out of range (size 2)"}},
          {"stage into a slot out of range", [&] { rb.stage(5, &loss); },
           {"dflash::ops::batched_readback", "slot 5 out of range (size 2)"}},
          {"stage a null source", [&] { rb.stage<float>(0, nullptr); },
           {"dflash::ops::batched_readback::stage", "source pointer is null"}},
          {"get() of a slot out of range", [&] { (void)rb.submit().get<float>(9); },
           {"dflash::ops::batched_readback", "slot 9 out of range (size 2)"}},
      });
}
