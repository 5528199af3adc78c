// Decode-time (few rows) act-quant linears: smelt_gemv_fp8_aq / smelt_gemv_fp4_aq compute exactly what
// smelt_act_quant_b32 + smelt_linear_fp8_aq / smelt_linear_fp4_aq compute, bit for bit, in one launch laid out
// for memory bandwidth (gemv_aq.cuh).
//
// Launch (runtime/cuda/ops.cc): block kGemvThreads, grid (min(ceil(N / cpb), 2 x SMs), rows), dynamic shared
// memory gemv_smem_bytes(K, 1, cpb, 1, FP4 ? 4 : 8). Each block stages its row once and walks column groups of cpb.
#include "kernels/linear/gemv_aq.cuh"

using namespace smelt_dev;

namespace {

template <bool FP4>
__device__ void gemv_aq_body(const float* x, float* y, const u8* w, const u8* ws, int K, int N, int blk,
                             float scale_after, int round, int cpb) {
  extern __shared__ __align__(16) unsigned char gemv_sm[];
  const int nb = K / 32, ld = nb + 1;
  const i64 r = blockIdx.y;
  using XS = typename XStage<FP4>::type;
  XS* xq = reinterpret_cast<XS*>(gemv_sm);
  float* xsc = reinterpret_cast<float*>(gemv_sm + size_t(K) * sizeof(XS));
  float* terms = xsc + nb;  // [2][cpb][ld]
  gemv_stage_quant(x + r * K, K, xq, xsc);  // act quant of the row, as smelt_act_quant_b32
  const int items = cpb * nb;
  const float inv_nb = 1.f / float(nb);
  int buf = 0;
  for (i64 n0 = i64(blockIdx.x) * cpb; n0 < N; n0 += i64(gridDim.x) * cpb, buf ^= 1) {
    float* tb = terms + buf * cpb * ld;
    for (int it0 = threadIdx.x; it0 < items; it0 += 2 * blockDim.x) {
      // Two items per pass, both weight loads issued before the arithmetic.
      const int it1 = it0 + blockDim.x;
      int b0, b1;
      const int c0 = item_split(it0, nb, inv_nb, b0), c1 = item_split(it1, nb, inv_nb, b1);
      const bool v0 = n0 + c0 < N, v1 = it1 < items && n0 + c1 < N;
      WBlock<FP4> q0{}, q1{};
      float s0 = 0.f, s1 = 0.f;
      if (v0) {
        q0 = load_wblock<FP4>(wblock_ptr<FP4>(w, n0 + c0, b0, K, N));
        s0 = wblock_scale<FP4>(ws, n0 + c0, b0, K, blk);
      }
      if (v1) {
        q1 = load_wblock<FP4>(wblock_ptr<FP4>(w, n0 + c1, b1, K, N));
        s1 = wblock_scale<FP4>(ws, n0 + c1, b1, K, blk);
      }
      if (v0) tb[c0 * ld + b0] = __fmul_rn(__fmul_rn(block_dot_staged(xq, b0, q0), xsc[b0]), s0);
      if (v1) tb[c1 * ld + b1] = __fmul_rn(__fmul_rn(block_dot_staged(xq, b1, q1), xsc[b1]), s1);
    }
    __syncthreads();  // the other buffer is folded while the next group loads (two buffers)
    if (threadIdx.x < cpb && n0 + threadIdx.x < N) {
      const float* t = tb + threadIdx.x * ld;
      float acc = fold_terms(t, nb);  // K order, as dot_rows_aq
      if (scale_after != 1.f) acc = __fmul_rn(acc, scale_after);
      y[r * N + n0 + threadIdx.x] = round ? round_bf16(acc) : acc;
    }
  }
}

}  // namespace

// x [rows, K] float (the linear's input, quantized per token inside), y [rows, N].
extern "C" __global__ void smelt_gemv_fp8_aq(const float* x, float* y, const u8* w, const u8* ws, int K, int N,
                                             int blk, float scale_after, int round, int cpb) {
  SMELT_KERNEL_PROLOGUE();
  gemv_aq_body<false>(x, y, w, ws, K, N, blk, scale_after, round, cpb);
}
extern "C" __global__ void smelt_gemv_fp4_aq(const float* x, float* y, const u8* w, const u8* ws, int K, int N,
                                             int blk, float scale_after, int round, int cpb) {
  SMELT_KERNEL_PROLOGUE();
  gemv_aq_body<true>(x, y, w, ws, K, N, blk, scale_after, round, cpb);
}
