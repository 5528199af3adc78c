// smelt.rope: interleaved pairs (2i, 2i+1) of the last rope_dim channels of every head rotate by
// inv_freq[i] * position (the negative angle when inverse). The inverse frequencies are computed on the host
// exactly as the cpu backend does (rope_inv_freq / rope_inv_freq_v41) and passed by value. y may alias x.
// smelt_rope / smelt_rope_bf16: grid (rows, head blocks: 1 or more), block 128 (SMELT_CUDA_DECODE_KERNELS=0).
// smelt_rope_units / smelt_rope_units_bf16: the same bits in one pass without a barrier, see below.
#include "kernels/rope/rope_pair.cuh"

using namespace smelt_dev;

namespace {

// R: the op's `round = "bf16"` on the whole output row in the same launch (smelt_rope_bf16): the rotated pairs
// are rounded as they are written, the other channels in a pass of their own (disjoint elements).
template <bool R>
__device__ void rope_body(const float* x, float* y, const StepInfo* step, int heads, int head_dim, int rope_dim,
                          int inverse, const InvFreq& f) {
  const i64 r = blockIdx.x;
  const float pos = float(step->p0 + r);
  const int half = rope_dim / 2, width = heads * head_dim;
  // grid.y blocks share a row's heads (each element is computed the same whichever block does it).
  const int hpb = (heads + int(gridDim.y) - 1) / int(gridDim.y), h0 = int(blockIdx.y) * hpb;
  const int h1 = heads < h0 + hpb ? heads : h0 + hpb;
  if (h0 >= h1) return;
  const float* xr = x + r * width;
  float* yr = y + r * width;
  if (x != y)
    for (int i = h0 * head_dim + threadIdx.x; i < h1 * head_dim; i += blockDim.x) yr[i] = xr[i];
  __syncthreads();
  for (int t = threadIdx.x; t < (h1 - h0) * half; t += blockDim.x) {
    const int h = h0 + t / half, i = t % half;
    float* v = yr + h * head_dim + (head_dim - rope_dim) + 2 * i;
    rope_pair<R>(v[0], v[1], f.v[i], pos, inverse, v);
  }
  if (R)
    for (int i = h0 * head_dim + threadIdx.x; i < h1 * head_dim; i += blockDim.x)
      if (i % head_dim < head_dim - rope_dim) yr[i] = round_bf16(yr[i]);
}

}  // namespace

extern "C" __global__ void smelt_rope(const float* x, float* y, const StepInfo* step, int heads, int head_dim,
                                      int rope_dim, int inverse, InvFreq f) {
  SMELT_KERNEL_PROLOGUE();
  rope_body<false>(x, y, step, heads, head_dim, rope_dim, inverse, f);
}
extern "C" __global__ void smelt_rope_bf16(const float* x, float* y, const StepInfo* step, int heads, int head_dim,
                                           int rope_dim, int inverse, InvFreq f) {
  SMELT_KERNEL_PROLOGUE();
  rope_body<true>(x, y, step, heads, head_dim, rope_dim, inverse, f);
}

// One pass over a row, a thread per unit: a unit is one non-rotated channel or one rotated pair of a head. Each
// value is read once, rotated or rounded in registers and written once (smelt_rope copied the row, synchronised,
// read the pairs back and made a third pass to round, four dependent memory round trips for a few thousand
// values). Every element gets the operations smelt_rope gives it, in the same order: the same bits.
// grid (rows, ceil(heads * (head_dim - rope_dim / 2) / blockDim)), any block.
template <bool R>
__device__ __forceinline__ void rope_units_body(const float* x, float* y, const StepInfo* step, int heads,
                                                int head_dim, int rope_dim, int inverse, const InvFreq& f) {
  const i64 r = blockIdx.x;
  const int half = rope_dim / 2, nope = head_dim - rope_dim, per = nope + half;
  const int u = blockIdx.y * blockDim.x + threadIdx.x;
  if (u >= heads * per) return;
  const int h = u / per, j = u - h * per;
  const i64 at = r * i64(heads) * head_dim + i64(h) * head_dim;
  if (j < nope) {
    const float v = x[at + j];
    y[at + j] = R ? round_bf16(v) : v;
    return;
  }
  const int i = j - nope;
  const float* xv = x + at + nope + 2 * i;
  rope_pair<R>(xv[0], xv[1], f.v[i], float(step->p0 + r), inverse, y + at + nope + 2 * i);
}

extern "C" __global__ void smelt_rope_units(const float* x, float* y, const StepInfo* step, int heads, int head_dim,
                                            int rope_dim, int inverse, InvFreq f) {
  SMELT_KERNEL_PROLOGUE();
  rope_units_body<false>(x, y, step, heads, head_dim, rope_dim, inverse, f);
}
extern "C" __global__ void smelt_rope_units_bf16(const float* x, float* y, const StepInfo* step, int heads,
                                                 int head_dim, int rope_dim, int inverse, InvFreq f) {
  SMELT_KERNEL_PROLOGUE();
  rope_units_body<true>(x, y, step, heads, head_dim, rope_dim, inverse, f);
}
