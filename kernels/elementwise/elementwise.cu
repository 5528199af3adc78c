// Small row-wise ops: smelt.add, smelt.concat, the `round` attribute (bf16 rounding of an op's outputs) and a
// pointer-table writer the launchers use to hand per-expert weight addresses to the MoE kernels.
// Grid-stride loops over rows x width; every element is independent, so any row count gives the same bits.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

// c = a + b over n elements (fp32, RNE).
extern "C" __global__ void smelt_add(const float* a, const float* b, float* c, i64 n) {
  SMELT_KERNEL_PROLOGUE();
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x)
    c[i] = __fadd_rn(a[i], b[i]);
}
// smelt_add then the op's `round = "bf16"`, in one pass.
extern "C" __global__ void smelt_add_bf16(const float* a, const float* b, float* c, i64 n) {
  SMELT_KERNEL_PROLOGUE();
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x)
    c[i] = round_bf16(__fadd_rn(a[i], b[i]));
}

// x <- bf16(x), in place, over n elements (kernels/bf16.h round_bf16).
extern "C" __global__ void smelt_round_bf16_rows(float* x, i64 n) {
  SMELT_KERNEL_PROLOGUE();
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x)
    x[i] = round_bf16(x[i]);
}

// y[r, off .. off+w) = x[r, 0 .. w): one input of a concat (one launch per input). grid (blocks, rows).
extern "C" __global__ void smelt_copy_cols(const float* x, int w, float* y, int ldy, int off) {
  SMELT_KERNEL_PROLOGUE();
  const i64 r = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < w; i += gridDim.x * blockDim.x)
    y[r * ldy + off + i] = x[r * w + i];
}

// dst[first + i] = vals.v[i] for i < n: writes a table of device addresses (kernel arguments are captured by
// CUDA graphs, so the table is rewritten on every replay without a host copy).
struct U64Pack {
  u64 v[480];
};
extern "C" __global__ void smelt_write_u64(u64* dst, int first, int n, U64Pack vals) {
  SMELT_KERNEL_PROLOGUE();
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[first + i] = vals.v[i];
}
