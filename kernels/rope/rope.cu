// smelt.rope: interleaved pairs (2i, 2i+1) of the last rope_dim channels of every head rotate by
// inv_freq[i] * position (the negative angle when inverse). The inverse frequencies are computed on the host
// exactly as the cpu backend does (rope_inv_freq / rope_inv_freq_v41) and passed by value. y may alias x.
// grid (rows), block 128.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

struct InvFreq {
  float v[256];  // rope_dim / 2 <= 256
};

extern "C" __global__ void smelt_rope(const float* x, float* y, const StepInfo* step, int heads, int head_dim,
                                      int rope_dim, int inverse, InvFreq f) {
  const i64 r = blockIdx.x;
  const float pos = float(step->p0 + r);
  const int half = rope_dim / 2, width = heads * head_dim;
  const float* xr = x + r * width;
  float* yr = y + r * width;
  if (x != y)
    for (int i = threadIdx.x; i < width; i += blockDim.x) yr[i] = xr[i];
  __syncthreads();
  for (int t = threadIdx.x; t < heads * half; t += blockDim.x) {
    const int h = t / half, i = t % half;
    const float angle = __fmul_rn(f.v[i], pos);
    float sn, cs;
    sincosf(angle, &sn, &cs);
    if (inverse) sn = -sn;
    float* v = yr + h * head_dim + (head_dim - rope_dim) + 2 * i;
    const float a = v[0], b = v[1];
    v[0] = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
    v[1] = __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
  }
}
