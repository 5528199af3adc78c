// bfloat16 rounding of float32 values: the V4.1 reference keeps activations in bf16, so the kernels hold
// them in float32 buffers whose values are rounded at the points where the reference stores bf16.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace smelt::kernels {

// Round to the nearest bf16 value, ties to even (torch's float -> bfloat16 cast). Infinities stay
// infinite, values past the largest bf16 round to infinity, NaN stays NaN (quiet, sign kept).
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u | 0x00400000u) & 0xffff0000u;  // quiet NaN; the payload bit 22 survives the truncation
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  std::memcpy(&x, &u, 4);
  return x;
}

// The model's bf16 rounding points switch off together (smelt-numerics{mode=fp32}): `on` false keeps fp32.
inline float round_bf16_if(bool on, float x) { return on ? round_bf16(x) : x; }

inline void round_bf16_inplace(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

}  // namespace smelt::kernels
