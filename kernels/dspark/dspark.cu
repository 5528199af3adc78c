// V4.1 DSpark head (kernels/dspark/reference.h draft_head) and greedy argmax. The draft attention is the
// attention family's kernel in its dspark mode. The head is sequential over the B draft positions (row i+1
// continues from row i's argmax), so the launcher runs smelt_dspark_bias then smelt_dspark_pick per row.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

namespace {

// The token row i continues from: the input id for row 0, else the previous draft.
__device__ __forceinline__ i32 prev_id(const i32* ids_in, const i32* draft, int i) { return i == 0 ? ids_in[0] : draft[i - 1]; }

}  // namespace

// out[i, v] = logits[i, v] + markov_embed[prev] . markov_head[v] (double accumulation, rounded once, as the
// reference's dot_exact). Warp per v; grid (ceil(V/8)), block 256.
extern "C" __global__ void smelt_dspark_bias(const float* logits, float* out, int V, int rank, const i32* ids_in,
                                             const i32* draft, int i, const void* embed, int edt, const void* head,
                                             int hdt) {
  SMELT_KERNEL_PROLOGUE();
  const i64 v = i64(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (v >= V) return;
  const int lane = threadIdx.x & 31;
  i64 id = prev_id(ids_in, draft, i);
  if (id < 0 || id >= V) id = 0;
  double s = 0.0;
  for (int c = lane; c < rank; c += 32) s += double(ldw(embed, id * rank + c, edt)) * double(ldw(head, v * rank + c, hdt));
  s = warp_sum_d(s);
  if (lane == 0) out[i64(i) * V + v] = __fadd_rn(logits[i64(i) * V + v], float(s));
}

// draft[i] = argmax out[i] (ties: lower id; NaN never wins); conf[i] = proj . [x_i ; embed[prev]] (double).
// One block of 1024 threads.
extern "C" __global__ void smelt_dspark_pick(const float* out, int V, int D, int rank, const i32* ids_in, i32* draft,
                                             int i, const float* x, const void* embed, int edt, const void* proj,
                                             int pdt, float* conf) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ float bv[32];
  __shared__ int bi[32];
  __shared__ double red[32];
  const float* row = out + i64(i) * V;
  float best = -__int_as_float(0x7f800000);
  int arg = -1;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float l = row[v];
    if (l == l && (arg < 0 || l > best)) best = l, arg = v;  // increasing v per thread: first max kept
  }
  for (int o = 16; o >= 1; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, arg, o);
    if (oi >= 0 && (arg < 0 || ob > best || (ob == best && oi < arg))) best = ob, arg = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) bv[warp] = best, bi[warp] = arg;
  i64 id = prev_id(ids_in, draft, i);
  if (id < 0 || id >= V) id = 0;
  double s = 0.0;
  for (int d = threadIdx.x; d < D; d += blockDim.x) s += double(ldw(proj, d, pdt)) * double(x[i64(i) * D + d]);
  for (int c = threadIdx.x; c < rank; c += blockDim.x)
    s += double(ldw(proj, D + c, pdt)) * double(ldw(embed, id * rank + c, edt));
  s = block_sum_d(s, red);  // syncs, so bv / bi are visible below
  if (threadIdx.x == 0) {
    float b = -__int_as_float(0x7f800000);
    int a = -1;
    for (int w = 0; w < int(blockDim.x >> 5); ++w)
      if (bi[w] >= 0 && (a < 0 || bv[w] > b || (bv[w] == b && bi[w] < a))) b = bv[w], a = bi[w];
    draft[i] = a < 0 ? 0 : a;
    conf[i] = float(s);
  }
}
