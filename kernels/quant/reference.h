// Bit-exact float32 reference for the release's number formats and quantized compute
// (architecture spec §4): E4M3 (FN) weights and activations, E8M0 power-of-two scales, E2M1 (FP4)
// expert weights, BF16, the per-token activation quantization every FP8/FP4 linear applies, the
// fake-quant (quantize -> dequantize) of attention state, and small FP8/FP4 GEMMs.
//
// Codes are raw bytes: an E4M3 or E8M0 code is one uint8_t, an E2M1 code is the low nibble of one
// uint8_t, packed FP4 bytes hold element 2j in the low nibble and 2j+1 in the high nibble.
// Bad shapes or block sizes throw smelt::Error naming the function.
#pragma once
#include <cstdint>

namespace smelt::kernels::quant {

// ---- element formats ----------------------------------------------------------------------------

// E4M3 (FN): bias 7, no inf; 0x7F / 0xFF are NaN; max finite ±448; subnormal step 2^-9.
float e4m3_decode(uint8_t code);
// Round to nearest, ties to even, saturating to ±448 (the kernels clamp before the cast).
// NaN keeps its sign and becomes 0x7F / 0xFF.
uint8_t e4m3_encode(float x);
float e4m3_round(float x);  // e4m3_decode(e4m3_encode(x))

// E8M0 (UE8M0) scale byte e: 2^(e-127); 255 is NaN. e = 0 gives the subnormal float 2^-127.
float e8m0_decode(uint8_t e);

// E2M1 nibble: bit 3 = sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Bits above 3 are ignored.
float e2m1_decode(uint8_t nibble);
// Round to nearest, ties to the even code, saturating to ±6. NaN maps to ±6 (no NaN code).
uint8_t e2m1_encode(float x);
float e2m1_round(float x);  // e2m1_decode(e2m1_encode(x))

// Packed FP4 row of n elements (n even, n/2 bytes) -> n nibble codes or n values.
void fp4_unpack_codes(const uint8_t* packed, int64_t n, uint8_t* codes);
void fp4_unpack(const uint8_t* packed, int64_t n, float* values);

// BF16 bits <-> float32. float -> bf16 rounds to nearest even; NaN stays a (quiet) NaN.
uint16_t bf16_from_f32(float x);
float bf16_to_f32(uint16_t bits);
float bf16_round(float x);  // bf16_to_f32(bf16_from_f32(x))

// 2^ceil(log2(amax * max_inv)) computed the way the reference kernels do it: from the float32 bits
// of the fp32 product v = amax * max_inv, exponent - 127 + (mantissa != 0). v must be a positive
// normal float (the amax floors below guarantee it).
float pow2_scale(float amax, float max_inv);

// ---- weight dequantization (weights -> float32; every result is exactly representable in bf16) --

// FP8 weight w [out, in] E4M3 codes with E8M0 block scales [ceil(out/block), ceil(in/block)]
// (block 128 for V4, 32 for V4.1). y [out, in].
void dequant_fp8_weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, int block, float* y);

// FP4 expert weight [out, in/2] packed E2M1 + E8M0 scales [out, ceil(in/32)] -> y [out, in].
constexpr int kFp4Block = 32;
void dequant_fp4_weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y);

// ---- dynamic activation quantization (spec §4.2) -------------------------------------------------

constexpr float kE4m3Max = 448.f;
constexpr float kE2m1Max = 6.f;
constexpr float kActAmaxFloor = 1e-4f;

// Per token (row) in K-blocks of `block` (32 in V4.1; a ragged last block is allowed):
// amax = max(|x_blk|, 1e-4), s = pow2_scale(amax, 1/448), q = e4m3_rne(clamp(x/s, ±448)).
// codes [rows, k] E4M3, scales [rows, ceil(k/block)] (powers of two, as float32).
void act_quant(const float* x, int64_t rows, int64_t k, int block, uint8_t* codes, float* scales);

// ---- fake quantization of attention state (spec §4.3); in place, values stay bf16-representable -

// The per-group scales below, from a group's amax (max |x|):
float window_kv_scale(float amax);      // pow2_scale(max(amax, 1e-4), 1/448)
float compressed_kv_scale(float amax);  // e4m3_round(max(amax, 6*2^-9) / 6), fp32 division
float index_scale(float amax);          // pow2_scale(max(amax, 6*2^-126), 1/6)

// Window K=V: E4M3 in groups of 32, power-of-two scale with amax floor 1e-4 (act_quant + dequant).
void qdq_window_kv(float* x, int64_t n);
// Compressed KV latent: E2M1 in groups of 16, E4M3 scale s = e4m3(max(amax, 6*2^-9) / 6),
// x <- e2m1_rne(clamp(x / s, ±6)) * s.
void qdq_compressed_kv(float* x, int64_t n);
// Index queries and keys: E2M1 in groups of 32, scale pow2_scale(max(amax, 6*2^-126), 1/6).
void qdq_index(float* x, int64_t n);

// ---- quantized GEMMs (spec §4.2), for small shapes ----------------------------------------------
// y[m, n] = sum over K-blocks kb, in K order, in float32, of
//           (sum_{k in kb} xq[m,k] * w[n,k]) * sx[m,kb] * sw[.., kb].
// Inside a K-block the products are exact and summed exactly, then rounded once to float32 (so the
// block sum does not depend on summation order). With bf16_out the result is rounded to bf16.

// xq [m, k] E4M3 codes with scales sx [m, ceil(k/act_block)]; w [n, k] E4M3 with E8M0 block scales
// [ceil(n/w_block), ceil(k/w_block)]; act_block must divide w_block.
void fp8_gemm(const uint8_t* xq, const float* sx, int64_t m, int64_t k, int act_block, const uint8_t* w,
              const uint8_t* w_scale, int64_t n, int w_block, float* y, bool bf16_out);
// xq as above with act_block dividing 32; w [n, k/2] packed E2M1 with E8M0 scales [n, ceil(k/32)].
void fp4_gemm(const uint8_t* xq, const float* sx, int64_t m, int64_t k, int act_block, const uint8_t* w,
              const uint8_t* w_scale, int64_t n, float* y, bool bf16_out);

// The model's linears: act_quant(x) then the GEMM. x [m, k] float32 (bf16 values in the model).
void fp8_linear(const float* x, int64_t m, int64_t k, const uint8_t* w, const uint8_t* w_scale, int64_t n,
                int w_block, float* y, bool bf16_out, int act_block = 32);
void fp4_linear(const float* x, int64_t m, int64_t k, const uint8_t* w, const uint8_t* w_scale, int64_t n,
                float* y, bool bf16_out, int act_block = 32);

}  // namespace smelt::kernels::quant
