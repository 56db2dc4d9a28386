#include <catch2/catch.hpp>
#include <dflash/ops/bf16.hpp>
#include <dflash/ops/pack_hidden_states.hpp>
#include <dflash/profile.hpp>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops_test_util.hpp"

using dflash::bf16;
using dflash::ops::hidden_shape;
using dflash::ops::pack_hidden_states;
using dflash::ops::unpack_hidden_states;
using ivec = std::vector<std::int32_t>;

namespace {
template <class T>
T value_at(std::mt19937& rng) {
  const float f = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
  if constexpr (std::is_same_v<T, bf16>) return bf16(f);
  else return f;
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// Element-wise reference gather.
template <class T>
std::vector<T> naive_pack(const std::vector<T>& padded, hidden_shape s, const ivec& lengths) {
  std::vector<T> out;
  for (int b = 0; b < s.batch; ++b)
    for (int t = 0; t < lengths[static_cast<std::size_t>(b)]; ++t)
      for (int h = 0; h < s.hidden; ++h)
        out.push_back(padded[(static_cast<std::size_t>(b) * s.seq + t) * s.hidden + h]);
  return out;
}

template <class T>
void check_random_round_trips(unsigned seed) {
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 150; ++iter) {
    hidden_shape s{std::uniform_int_distribution<int>(1, 6)(rng), std::uniform_int_distribution<int>(0, 40)(rng),
                   std::uniform_int_distribution<int>(1, 24)(rng)};
    if (iter == 0) s = {1, 300, 64};  // batch of 1, one long sequence
    ivec lengths = ops_test::random_lengths(rng, static_cast<std::size_t>(s.batch), s.seq);
    if (iter == 0) lengths[0] = s.seq;
    std::vector<T> padded(s.padded_elements());
    for (auto& x : padded) x = value_at<T>(rng);

    const std::vector<T> want = naive_pack(padded, s, lengths);
    std::vector<T> packed(want.size());
    ivec cu(static_cast<std::size_t>(s.batch) + 1);
    const auto total = pack_hidden_states<T>(padded, s, lengths, packed, cu);
    REQUIRE(static_cast<std::size_t>(total) * static_cast<std::size_t>(s.hidden) == want.size());
    REQUIRE(same_bytes(packed, want));
    REQUIRE(cu[0] == 0);
    for (std::size_t b = 0; b < lengths.size(); ++b) REQUIRE(cu[b + 1] - cu[b] == lengths[b]);

    // Inverse: valid rows come back, padding is zero bytes.
    std::vector<T> back(s.padded_elements());
    for (auto& x : back) x = value_at<T>(rng);  // garbage that must be overwritten
    unpack_hidden_states<T>(packed, cu, s, back);
    std::vector<T> expect = padded;
    for (int b = 0; b < s.batch; ++b)
      for (int t = lengths[static_cast<std::size_t>(b)]; t < s.seq; ++t)
        std::memset(static_cast<void*>(&expect[(static_cast<std::size_t>(b) * s.seq + t) * s.hidden]), 0, s.hidden * sizeof(T));
    REQUIRE(same_bytes(back, expect));
  }
}
}  // namespace

TEST_CASE("pack/unpack fp32 match the element-wise reference", "[pack]") { check_random_round_trips<float>(7); }
TEST_CASE("pack/unpack bf16 match the element-wise reference", "[pack]") { check_random_round_trips<bf16>(8); }

TEST_CASE("pack on a hand-written case", "[pack]") {
  const hidden_shape s{2, 3, 2};
  const std::vector<float> padded{1, 2, 3, 4, 5, 6, /**/ 7, 8, 9, 10, 11, 12};
  std::vector<float> packed(8, -1.0f);
  ivec cu(3);
  CHECK(pack_hidden_states<float>(padded, s, ivec{1, 2}, packed, cu) == 3);
  CHECK(cu == ivec{0, 1, 3});
  CHECK(packed == std::vector<float>{1, 2, 7, 8, 9, 10, -1, -1});  // a larger buffer keeps its tail
  std::vector<float> back(12, 99.0f);
  unpack_hidden_states<float>(packed, cu, s, back);
  CHECK(back == std::vector<float>{1, 2, 0, 0, 0, 0, 7, 8, 9, 10, 0, 0});
}

TEST_CASE("pack of all-empty rows and seq 0", "[pack]") {
  std::vector<float> padded(2 * 4 * 3, 1.0f), packed;
  ivec cu(3);
  CHECK(pack_hidden_states<float>(padded, {2, 4, 3}, ivec{0, 0}, packed, cu) == 0);
  CHECK(cu == ivec{0, 0, 0});
  std::vector<float> none;
  CHECK(pack_hidden_states<float>(none, {2, 0, 3}, ivec{0, 0}, packed, cu) == 0);
}

TEST_CASE("cu_seqlens is the inclusive prefix sum with a leading 0", "[pack]") {
  ivec cu(4);
  CHECK(dflash::ops::cu_seqlens(ivec{3, 0, 5}, 5, cu) == 8);
  CHECK(cu == ivec{0, 3, 3, 8});
}

TEST_CASE("pack/unpack reject bad input with a clear message", "[pack]") {
  const hidden_shape s{2, 3, 2};
  std::vector<float> padded(12), packed(12);
  ivec cu(3);
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, s, ivec{1, -1}, packed, cu), Catch::Contains("lengths[1] = -1 is negative"));
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, s, ivec{4, 1}, packed, cu), Catch::Contains("lengths[0] = 4 exceeds seq = 3"));
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, s, ivec{1}, packed, cu), Catch::Contains("lengths has 1 elements, expected 2"));
  std::vector<float> short_padded(11);
  CHECK_THROWS_WITH(pack_hidden_states<float>(short_padded, s, ivec{1, 1}, packed, cu), Catch::Contains("padded has 11 elements, expected 12"));
  std::vector<float> small(3);
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, s, ivec{1, 1}, small, cu), Catch::Contains("packed has 3 elements, needs 4"));
  ivec cu_short(2);
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, s, ivec{1, 1}, packed, cu_short), Catch::Contains("cu_seqlens has 2 elements, expected 3"));
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, {2, 3, 0}, ivec{1, 1}, packed, cu), Catch::Contains("hidden = 0 must be positive"));
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, {-2, 3, 2}, ivec{1, 1}, packed, cu), Catch::Contains("batch = -2 is negative"));

  CHECK_THROWS_WITH(unpack_hidden_states<float>(packed, ivec{1, 2, 3}, s, padded), Catch::Contains("cu_seqlens[0] = 1 must be 0"));
  CHECK_THROWS_WITH(unpack_hidden_states<float>(packed, ivec{0, 2, 1}, s, padded), Catch::Contains("cu_seqlens[2] - cu_seqlens[1] = -1"));
  CHECK_THROWS_WITH(unpack_hidden_states<float>(packed, ivec{0, 4, 5}, s, padded), Catch::Contains("is not a length in [0, seq = 3]"));
  CHECK_THROWS_WITH(unpack_hidden_states<float>(small, ivec{0, 2, 4}, s, padded), Catch::Contains("packed has 3 elements, needs 8"));
  CHECK_THROWS_AS(unpack_hidden_states<float>(packed, ivec{0, 2}, s, padded), std::invalid_argument);
}

TEST_CASE("pack and unpack record under their own profiler keys", "[pack][profile]") {
  dflash::AccumulatingProfiler<dflash::ops::keys> prof;
  std::vector<float> padded(4), packed(4);
  ivec cu(2);
  pack_hidden_states<float>(padded, {1, 2, 2}, ivec{2}, packed, cu, dflash::profiler_ref(prof));
  unpack_hidden_states<float>(packed, cu, {1, 2, 2}, padded, dflash::profiler_ref(prof));
  unpack_hidden_states<float>(packed, cu, {1, 2, 2}, padded, dflash::profiler_ref(prof));
  const auto snap = prof.snapshot();
  CHECK(snap.find("pack_hidden_states")->count == 1);
  CHECK(snap.find("unpack_hidden_states")->count == 2);
}

TEST_CASE("pack_hidden_states: a shape whose element count wraps size_t is an overflow error, not 0 tokens",
          "[pack][limits]") {
  // 16 * 2^30 * 2^30 = 2^64 wrapped to 0: an empty `padded` passed the size check and pack returned 0.
  const hidden_shape huge{16, 1 << 30, 1 << 30};
  CHECK_THROWS_AS((void)huge.padded_elements(), std::overflow_error);
  std::vector<float> padded, packed;
  const ivec lengths(16, 0);
  ivec cu(17);
  CHECK_THROWS_AS(pack_hidden_states<float>(padded, huge, lengths, packed, cu), std::overflow_error);
  CHECK_THROWS_WITH(pack_hidden_states<float>(padded, huge, lengths, packed, cu),
                    Catch::Contains("pack_hidden_states") && Catch::Contains("batch * seq * hidden"));
  // 2^62 elements fit size_t, 2^64 bytes of float do not.
  const hidden_shape bytes_wrap{4, 1 << 30, 1 << 30};
  ivec cu4(5);
  CHECK_THROWS_AS(pack_hidden_states<float>(padded, bytes_wrap, ivec(4, 0), packed, cu4), std::overflow_error);
}

TEST_CASE("unpack_hidden_states: a shape whose element count wraps size_t is an overflow error, not a crash",
          "[pack][limits]") {
  // A size product that wraps to 0 must not pass the size check (0 == 0) and zero 2^60 floats of padding.
  const hidden_shape huge{16, 1 << 30, 1 << 30};
  std::vector<float> padded, packed;
  const ivec cu(17, 0);
  CHECK_THROWS_AS(unpack_hidden_states<float>(packed, cu, huge, padded), std::overflow_error);
  CHECK_THROWS_WITH(unpack_hidden_states<float>(packed, cu, huge, padded),
                    Catch::Contains("unpack_hidden_states") && Catch::Contains("batch * seq * hidden"));
}
