// Dense linears in float32: y = x W^T with W stored [out, in] (nn.Linear convention).
#pragma once
#include <cstdint>

namespace smelt::kernels {

// y[r, n] = sum_k x[r, k] * w[n, k]
void linear(const float* x, const float* w, float* y, int rows, int in, int out);

// Block-diagonal grouped linear (wo_a): x row = G groups of `in_per_group`; w = [G * out_per_group,
// in_per_group], group g uses rows g*out_per_group .. (g+1)*out_per_group-1; y row = G * out_per_group.
void grouped_linear(const float* x, const float* w, float* y, int rows, int groups, int in_per_group,
                    int out_per_group);

// ---- V4.1: linears on the release's quantized weights (official inference code `linear()`) ----------

// How a quantized weight is stored. FP8_E4M3: `weight` [out, in] E4M3 codes, `scale` E8M0
// [ceil(out/block), ceil(in/block)] (block 32 in V4.1, 128 in V4). FP4_E2M1: `weight` [out, in/2] packed
// E2M1 (element 2j in the low nibble), `scale` E8M0 [out, in/32] (block must be 32).
enum class WeightFormat : uint8_t { FP8_E4M3, FP4_E2M1 };

struct QuantWeight {
  const uint8_t* weight = nullptr;
  const uint8_t* scale = nullptr;  // E8M0 bytes
  WeightFormat format = WeightFormat::FP8_E4M3;
  int block = 32;
};

// y[r, n] = x[r] . W[n] on a quantized weight, as the reference computes it:
// - act_quant_fp8_b32 (the reference always sets it for FP8/FP4 weights): each row of x is quantized to
//   E4M3 in K-blocks of 32 with power-of-two scales (kernels/quant act_quant); each 32-block product is
//   summed in fp32 and multiplied by activation scale x weight scale; the blocks accumulate in K order.
// - without it: y = x . dequant(W) in float32 (no activation rounding; not used by the V4.1 model).
// y is the fp32 accumulation; bf16_out rounds it to bf16, which is what the reference's GEMM returns
// (equivalently the op's `round` attribute). `in` must be a multiple of 32 with act quant.
void linear_quant(const float* x, int rows, int in, int out, const uint8_t* weight, WeightFormat fmt,
                  const uint8_t* scale_e8m0, int block, bool act_quant_fp8_b32, float* y, bool bf16_out = false);
inline void linear_quant(const float* x, int rows, int in, int out, const QuantWeight& w, bool act_quant_fp8_b32,
                         float* y, bool bf16_out = false) {
  linear_quant(x, rows, in, out, w.weight, w.format, w.scale, w.block, act_quant_fp8_b32, y, bf16_out);
}

}  // namespace smelt::kernels
