// smelt.fake_quant (kernels/quant qdq_window_kv / qdq_compressed_kv / qdq_index), bit-exact: the first
// `channels` values of every head segment of a row are quantized and dequantized in place, group by group.
// mode 0: E4M3, groups of 32, power-of-two scale (window K=V); 1: E2M1, groups of 16, E4M3 scale (compressed
// KV); 2: E2M1, groups of 32, power-of-two scale (index q/k). One thread per group; grid-stride.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

extern "C" __global__ void smelt_fake_quant(float* x, int rows, int width, int heads, int channels, int mode) {
  SMELT_KERNEL_PROLOGUE();
  const int g = mode == 1 ? 16 : 32;
  const int seg = width / heads, per_head = channels / g;
  const i64 total = i64(rows) * heads * per_head;
  for (i64 k = i64(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += i64(gridDim.x) * blockDim.x) {
    const i64 r = k / (i64(heads) * per_head);
    const int h = int(k / per_head % heads), grp = int(k % per_head);
    float* v = x + r * width + i64(h) * seg + grp * g;
    float amax = 0.f;
    for (int i = 0; i < g; ++i) amax = fmaxf(amax, fabsf(v[i]));
    if (mode == 0) {
      const float s = window_kv_scale(amax);
      for (int i = 0; i < g; ++i) v[i] = qdq_e4m3(v[i], s);
    } else {
      const float s = mode == 1 ? compressed_kv_scale(amax) : index_scale(amax);
      for (int i = 0; i < g; ++i) v[i] = qdq_e2m1(v[i], s);
    }
  }
}
