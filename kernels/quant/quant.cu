// smelt.fake_quant (kernels/quant qdq_window_kv / qdq_compressed_kv / qdq_index), bit-exact: the first
// `channels` values of every head segment of a row are quantized and dequantized in place, group by group.
// mode 0: E4M3, groups of 32, power-of-two scale (window K=V); 1: E2M1, groups of 16, E4M3 scale (compressed
// KV); 2: E2M1, groups of 32, power-of-two scale (index q/k).
//
// A thread per element, a group in 32 (or 16) consecutive lanes: the group's amax by shuffles (a max of |x|
// over the group, NaN skipped by fmaxf, is the same whatever the order), then every lane scales its own value
// with the scale every lane computes alike. Grid-stride over warps; any grid and a block of a multiple of 32.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

extern "C" __global__ void smelt_fake_quant(float* x, int rows, int width, int heads, int channels, int mode) {
  SMELT_KERNEL_PROLOGUE();
  const int g = mode == 1 ? 16 : 32;
  const int seg = width / heads, per_head = channels / g;
  const i64 total = i64(rows) * heads * per_head * g;  // elements
  const int lane = threadIdx.x & 31;
  const i64 stride = i64(gridDim.x) * blockDim.x;
  for (i64 base = i64(blockIdx.x) * blockDim.x + (threadIdx.x & ~31); base < total; base += stride) {
    const i64 k = base + lane;  // warp-uniform loop: every lane takes part in the shuffles
    const bool in = k < total;
    const i64 grp_all = k / g;
    const i64 r = grp_all / (i64(heads) * per_head);
    const int h = int(grp_all / per_head % heads), grp = int(grp_all % per_head), i = int(k % g);
    float* v = x + r * width + i64(h) * seg + grp * g + i;
    const float val = in ? *v : 0.f;
    float amax = fabsf(val);
    for (int o = g / 2; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    amax = fmaxf(0.f, amax);
    if (!in) continue;
    if (mode == 0) *v = qdq_e4m3(val, window_kv_scale(amax));
    else *v = qdq_e2m1(val, mode == 1 ? compressed_kv_scale(amax) : index_scale(amax));
  }
}
