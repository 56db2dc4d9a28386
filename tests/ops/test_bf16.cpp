#include <catch2/catch.hpp>
#include <dflash/ops/bf16.hpp>

#include <cstdint>
#include <cstring>
#include <limits>

using dflash::bf16;

namespace {
float from_bits32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("bf16 is a 2-byte trivially copyable storage type", "[bf16]") {
  STATIC_REQUIRE(sizeof(bf16) == 2);
  STATIC_REQUIRE(std::is_trivially_copyable_v<bf16>);
  STATIC_REQUIRE(std::is_standard_layout_v<bf16>);
  STATIC_REQUIRE(bf16(1.0f).bits == 0x3F80);  // usable in constant expressions
}

TEST_CASE("float to bf16 rounds to nearest, ties to even", "[bf16]") {
  CHECK(bf16(1.0f).bits == 0x3F80);
  CHECK(bf16(-2.0f).bits == 0xC000);
  CHECK(bf16(0.0f).bits == 0x0000);
  CHECK(bf16(-0.0f).bits == 0x8000);
  CHECK(bf16(from_bits32(0x3F80'7FFFu)).bits == 0x3F80);  // below half: down
  CHECK(bf16(from_bits32(0x3F80'8000u)).bits == 0x3F80);  // tie, even stays
  CHECK(bf16(from_bits32(0x3F81'8000u)).bits == 0x3F82);  // tie, odd rounds up to even
  CHECK(bf16(from_bits32(0x3F80'8001u)).bits == 0x3F81);  // above half: up
  CHECK(bf16(std::numeric_limits<float>::max()).bits == 0x7F80);  // overflows to +inf
  CHECK(bf16(std::numeric_limits<float>::infinity()).bits == 0x7F80);
  CHECK(bf16(-std::numeric_limits<float>::infinity()).bits == 0xFF80);
  CHECK(bf16(std::numeric_limits<float>::quiet_NaN()).bits == 0x7FFF);
  CHECK(bf16(from_bits32(0x7F80'0001u)).bits == 0x7FFF);  // signalling NaN stays NaN, never inf
  CHECK(bf16(from_bits32(0x0000'0001u)).bits == 0x0000);  // smallest subnormal rounds to zero
}

TEST_CASE("every non-NaN bf16 survives bf16 -> float -> bf16", "[bf16]") {
  int bad = 0;
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const bf16 x = bf16::from_bits(static_cast<std::uint16_t>(b));
    const float f = x.to_float();
    if (f != f) continue;
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if (u != b << 16 || bf16(f) != x) ++bad;
  }
  CHECK(bad == 0);
  CHECK(static_cast<float>(bf16(3.140625f)) == 3.140625f);  // exactly representable
}
