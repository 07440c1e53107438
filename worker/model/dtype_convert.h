#ifndef VERL_WORKER_MODEL_DTYPE_CONVERT_H_
#define VERL_WORKER_MODEL_DTYPE_CONVERT_H_

// Scalar and bulk conversions between float32 and the 16-bit float formats (bfloat16, IEEE float16), as raw bits.
// float32 -> 16 bit rounds to nearest, ties to even (what PyTorch's `.to(torch.bfloat16)` / `.half()` do); NaN stays
// NaN (bfloat16 NaN becomes the canonical quiet NaN 0x7FC0, as in c10::BFloat16); overflow goes to +-inf.
// 16 bit -> float32 is exact. Header-only, torch-free, no dependence on the host FPU rounding mode except for
// float16 subnormals, which use the default round-to-nearest-even mode.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace verl {

namespace dtype_convert_internal {
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
}  // namespace dtype_convert_internal

// float32 -> bfloat16 bits, round to nearest even.
inline uint16_t Float32ToBFloat16(float value) {
  uint32_t x = dtype_convert_internal::FloatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

// bfloat16 bits -> float32 (exact).
inline float BFloat16ToFloat32(uint16_t bits) {
  return dtype_convert_internal::BitsFloat(static_cast<uint32_t>(bits) << 16);
}

// float32 -> IEEE 754 binary16 bits, round to nearest even (subnormals included).
inline uint16_t Float32ToFloat16(float value) {
  using dtype_convert_internal::BitsFloat;
  using dtype_convert_internal::FloatBits;
  uint32_t x = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // inf or NaN; NaN keeps its top payload bits and is made quiet
    return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? (0x200u | ((x >> 13) & 0x3ffu)) : 0u));
  }
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {
    // Subnormal or zero in half: adding 0.5f aligns the value so the FPU's round-to-nearest-even does the rounding.
    const float shifted = BitsFloat(x) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatBits(shifted) - 0x3f000000u));
  }
  const uint32_t mant_odd = (x >> 13) & 1u;
  x += 0xc8000fffu + mant_odd;  // rebias the exponent (127 -> 15) and add the rounding bias
  return static_cast<uint16_t>(sign | (x >> 13));
}

// IEEE 754 binary16 bits -> float32 (exact).
inline float Float16ToFloat32(uint16_t bits) {
  using dtype_convert_internal::BitsFloat;
  using dtype_convert_internal::FloatBits;
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return BitsFloat(sign);
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // mantissa * 2^-24, exact
    return BitsFloat(sign | FloatBits(magnitude));
  }
  if (exponent == 31) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  return BitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Bulk versions: `n` elements from `src` to `dst` (which must not overlap).
inline void Float32ToBFloat16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Float32ToBFloat16(src[i]);
}
inline void BFloat16ToFloat32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat32(src[i]);
}
inline void Float32ToFloat16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Float32ToFloat16(src[i]);
}
inline void Float16ToFloat32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Float16ToFloat32(src[i]);
}

}  // namespace verl

#endif  // VERL_WORKER_MODEL_DTYPE_CONVERT_H_
