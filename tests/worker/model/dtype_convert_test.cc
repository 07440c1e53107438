#include "worker/model/dtype_convert.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace verl {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_CASE("bfloat16 conversion rounds to nearest even", "[dtype_convert]") {
  CHECK(Float32ToBFloat16(1.0f) == 0x3f80);
  CHECK(Float32ToBFloat16(-2.0f) == 0xc000);
  CHECK(Float32ToBFloat16(0.0f) == 0x0000);
  CHECK(Float32ToBFloat16(-0.0f) == 0x8000);
  CHECK(Float32ToBFloat16(FromBits(0x3f808000)) == 0x3f80);  // tie, even below
  CHECK(Float32ToBFloat16(FromBits(0x3f818000)) == 0x3f82);  // tie, even above
  CHECK(Float32ToBFloat16(FromBits(0x3f808001)) == 0x3f81);  // just above the tie
  CHECK(Float32ToBFloat16(FromBits(0x3f807fff)) == 0x3f80);  // just below the tie
  CHECK(Float32ToBFloat16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(Float32ToBFloat16(std::numeric_limits<float>::max()) == 0x7f80);  // overflows to inf, as torch does
  CHECK(Float32ToBFloat16(std::numeric_limits<float>::quiet_NaN()) == 0x7fc0);
  CHECK(BFloat16ToFloat32(0x3f80) == 1.0f);
  CHECK(BFloat16ToFloat32(0xbfc0) == -1.5f);

  // Every bfloat16 value survives a round trip through float32.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BFloat16ToFloat32(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      CHECK(std::isnan(BFloat16ToFloat32(Float32ToBFloat16(f))));
    } else if (Float32ToBFloat16(f) != b) {
      FAIL("bfloat16 " << b << " does not round trip");
    }
  }
}

TEST_CASE("float16 conversion rounds to nearest even", "[dtype_convert]") {
  CHECK(Float32ToFloat16(1.0f) == 0x3c00);
  CHECK(Float32ToFloat16(-2.0f) == 0xc000);
  CHECK(Float32ToFloat16(65504.0f) == 0x7bff);
  CHECK(Float32ToFloat16(65519.0f) == 0x7bff);
  CHECK(Float32ToFloat16(65520.0f) == 0x7c00);  // the tie rounds to even, i.e. infinity
  CHECK(Float32ToFloat16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie, even below
  CHECK(Float32ToFloat16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie, even above
  CHECK(Float32ToFloat16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(Float32ToFloat16(std::ldexp(1.0f, -25)) == 0x0000);  // tie with zero
  CHECK(Float32ToFloat16(3 * std::ldexp(1.0f, -25)) == 0x0002);
  CHECK(Float32ToFloat16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(Float32ToFloat16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(std::isnan(Float16ToFloat32(Float32ToFloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(Float16ToFloat32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(Float16ToFloat32(0x7bff) == 65504.0f);

  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Float16ToFloat32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(Float16ToFloat32(Float32ToFloat16(f))));
    } else if (Float32ToFloat16(f) != h) {
      FAIL("float16 " << h << " does not round trip");
    }
  }
}

// For random floats the chosen 16-bit value must be the nearest representable one, ties going to the even one.
template <typename ToHalf, typename FromHalf>
void CheckNearestEven(ToHalf to_half, FromHalf from_half, float max_abs) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> exponent(-30, 15);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mantissa(gen), exponent(gen));
    if (std::fabs(x) >= max_abs) continue;
    const uint16_t h = to_half(x);
    const double err = std::fabs(static_cast<double>(from_half(h)) - x);
    for (int delta : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + delta);
      if ((n & 0x7fff) == 0x7fff || ((h ^ n) & 0x8000)) continue;  // wrapped past zero or into NaN
      const float other = from_half(n);
      if (std::isinf(other) || std::isnan(other)) continue;
      const double other_err = std::fabs(static_cast<double>(other) - x);
      if (other_err < err || (other_err == err && (h & 1))) {
        FAIL("x=" << x << " -> " << h << " but " << n << " is nearer or even");
      }
    }
  }
}

TEST_CASE("16-bit conversions pick the nearest value", "[dtype_convert]") {
  CheckNearestEven([](float x) { return Float32ToBFloat16(x); }, [](uint16_t h) { return BFloat16ToFloat32(h); },
                   1e38f);
  CheckNearestEven([](float x) { return Float32ToFloat16(x); }, [](uint16_t h) { return Float16ToFloat32(h); },
                   65504.0f);
  std::vector<float> src = {1.0f, -3.5f, 1e-3f};
  std::vector<uint16_t> mid(3);
  std::vector<float> back(3);
  Float32ToBFloat16(src.data(), mid.data(), 3);
  BFloat16ToFloat32(mid.data(), back.data(), 3);
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == -3.5f);
  CHECK(back[2] == Approx(1e-3f).epsilon(1e-2));
}

}  // namespace
}  // namespace verl
