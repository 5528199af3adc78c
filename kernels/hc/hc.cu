// Manifold-constrained hyper-connections (kernels/hc/reference.h): hc_init, hc_mix (+ Sinkhorn), hc_collapse,
// hc_expand, hc_head, hc_mean. Elementwise parts use explicit _rn operations in the reference's order, so
// they are bit-exact; the mix projections are dot products (fp32 for V4, double for V4.1's dot_exact).
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

// X[r, k, :] = x[r, :] for k < n. grid (ceil(D/256), rows, n), block 256.
extern "C" __global__ void smelt_hc_init(const float* x, float* X, int D) {
  SMELT_KERNEL_PROLOGUE();
  const i64 r = blockIdx.y, k = blockIdx.z, n = gridDim.z;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d < D) X[(r * n + k) * D + d] = x[r * D + d];
}

// Mix logits m[r, o] of one row and one output o (block (o, r), any multiple of 32 threads; 1024 at decode):
//   v4:  m = fn[o] . (z * rsqrt(mean z^2 + eps))   (normalise first, fp32 dot)
//   v41: m = (fn[o] . z) * rsqrt(mean z^2 + eps)   (project first, double dot = the reference's dot_exact)
// Each thread keeps four independent partial sums (elements i + j*blockDim, j = 0..3, then +4*blockDim...) so four
// loads are in flight, folded in the order 0+1+2+3, then a fixed block reduction: the split depends only on len
// and blockDim, never on the row count.
extern "C" __global__ void smelt_hc_mix_logits(const float* X, int len, const void* fn, int fdt, float norm_eps,
                                               int v41, float* m) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ double redd[32];
  __shared__ float redf[32];
  const int o = blockIdx.x, outs = gridDim.x, bd = blockDim.x;
  const i64 r = blockIdx.y;
  const float* z = X + r * len;
  const i64 wo = i64(o) * len;
  if (v41) {  // one pass: squares and the dot together
    double sq[4] = {0.0, 0.0, 0.0, 0.0}, d[4] = {0.0, 0.0, 0.0, 0.0};
    for (int i0 = threadIdx.x; i0 < len; i0 += 4 * bd) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = i0 + j * bd;
        if (i < len) {
          const double zi = double(z[i]);
          sq[j] += zi * zi;
          d[j] += zi * double(ldw(fn, wo + i, fdt));
        }
      }
    }
    const double sqs = block_sum_d(((sq[0] + sq[1]) + sq[2]) + sq[3], redd);
    const double ds = block_sum_d(((d[0] + d[1]) + d[2]) + d[3], redd);
    const float rs = rms_scale_from(sqs, len, norm_eps);
    if (threadIdx.x == 0) m[r * outs + o] = __fmul_rn(float(ds), rs);
  } else {
    double sq[4] = {0.0, 0.0, 0.0, 0.0};
    for (int i0 = threadIdx.x; i0 < len; i0 += 4 * bd) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = i0 + j * bd;
        if (i < len) sq[j] += double(z[i]) * double(z[i]);
      }
    }
    const float rs = rms_scale_from(block_sum_d(((sq[0] + sq[1]) + sq[2]) + sq[3], redd), len, norm_eps);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    for (int i0 = threadIdx.x; i0 < len; i0 += 4 * bd) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = i0 + j * bd;
        if (i < len) d[j] = fmaf(__fmul_rn(z[i], rs), ldw(fn, wo + i, fdt), d[j]);
      }
    }
    const float dsum = block_sum(__fadd_rn(__fadd_rn(__fadd_rn(d[0], d[1]), d[2]), d[3]), redf);
    if (threadIdx.x == 0) m[r * outs + o] = dsum;
  }
}

namespace {

__device__ float wload(const void* p, int i, int dt) { return ldw(p, i, dt); }

}  // namespace

// pre / post / Sinkhorn comb of each row from its (2+n)*n logits (reference split_sinkhorn, same op order).
// One thread per row: grid (ceil(rows/32)), block 32. n <= 8. The n x n matrix lives in registers (the body is
// instantiated per n, loops fully unrolled): the 20 iterations then cost a few microseconds, not ~60 us of
// dependent global-memory round trips. Written to comb once at the end.
template <int N>
__device__ __forceinline__ void hc_sinkhorn_body(const float* m, const void* base, int bdt, float s0, float s1,
                                                 float s2, int iters, float hc_eps, float* pr, float* po, float* cout) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    pr[i] = __fadd_rn(sigmoidf_(__fadd_rn(__fmul_rn(m[i], s0), wload(base, i, bdt))), hc_eps);
    po[i] = __fmul_rn(2.0f, sigmoidf_(__fadd_rn(__fmul_rn(m[N + i], s1), wload(base, N + i, bdt))));
  }
  float c[N * N];
#pragma unroll
  for (int a = 0; a < N; ++a) {
    float* row = c + a * N;
#pragma unroll
    for (int k = 0; k < N; ++k)
      row[k] = __fadd_rn(__fmul_rn(m[2 * N + a * N + k], s2), wload(base, 2 * N + a * N + k, bdt));
    float mx = row[0];
#pragma unroll
    for (int k = 1; k < N; ++k) mx = fmaxf(mx, row[k]);
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      row[k] = expf(__fsub_rn(row[k], mx));
      sum = __fadd_rn(sum, row[k]);
    }
#pragma unroll
    for (int k = 0; k < N; ++k) row[k] = __fadd_rn(__fdiv_rn(row[k], sum), hc_eps);
  }
  float colsum[N];
  for (int it = 0; it < (iters > 1 ? iters : 1); ++it) {  // one column pass at least, as the reference
    if (it > 0) {
#pragma unroll
      for (int a = 0; a < N; ++a) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < N; ++k) s = __fadd_rn(s, c[a * N + k]);
#pragma unroll
        for (int k = 0; k < N; ++k) c[a * N + k] = __fdiv_rn(c[a * N + k], __fadd_rn(s, hc_eps));
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) colsum[k] = 0.f;
#pragma unroll
    for (int a = 0; a < N; ++a)
#pragma unroll
      for (int k = 0; k < N; ++k) colsum[k] = __fadd_rn(colsum[k], c[a * N + k]);
#pragma unroll
    for (int a = 0; a < N; ++a)
#pragma unroll
      for (int k = 0; k < N; ++k) c[a * N + k] = __fdiv_rn(c[a * N + k], __fadd_rn(colsum[k], hc_eps));
  }
#pragma unroll
  for (int i = 0; i < N * N; ++i) cout[i] = c[i];
}

// Row r's slices of the Sinkhorn kernels' arguments and the three logit scales.
struct SinkhornRow {
  const float* m;
  float s0, s1, s2;
  float *pr, *po, *c;
};
__device__ __forceinline__ SinkhornRow sinkhorn_row(i64 r, const float* m_all, int n, const void* scale, int sdt,
                                                    float* pre, float* post, float* comb) {
  return {m_all + r * (2 + n) * n, wload(scale, 0, sdt), wload(scale, 1, sdt), wload(scale, 2, sdt),
          pre + r * n, post + r * n, comb + r * n * n};
}

extern "C" __global__ void smelt_hc_sinkhorn(const float* m_all, int rows, int n, const void* base, int bdt,
                                             const void* scale, int sdt, int iters, float hc_eps, float* pre,
                                             float* post, float* comb) {
  SMELT_KERNEL_PROLOGUE();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const SinkhornRow x = sinkhorn_row(r, m_all, n, scale, sdt, pre, post, comb);
  switch (n) {
#define SMELT_HC_SK(N) \
  case N: hc_sinkhorn_body<N>(x.m, base, bdt, x.s0, x.s1, x.s2, iters, hc_eps, x.pr, x.po, x.c); break;
    SMELT_HC_SK(1) SMELT_HC_SK(2) SMELT_HC_SK(3) SMELT_HC_SK(4) SMELT_HC_SK(5) SMELT_HC_SK(6) SMELT_HC_SK(7)
    SMELT_HC_SK(8)
#undef SMELT_HC_SK
    default: break;
  }
}

// The same Sinkhorn with a warp per row and a lane per element of comb (N * N <= 32): every pass's row or column
// sums gathered by shuffles and added in the order hc_sinkhorn_body adds them, then one division per lane instead
// of N * N serial ones (the serial kernel spent ~27 us of latency per call at hc_mult 4, 20 iterations). Same
// operations on the same values in the same order: the same bits. grid ceil(rows / 4), block 128.
template <int N>
__device__ __forceinline__ void hc_sinkhorn_warp_body(const float* m, const void* base, int bdt, float s0, float s1,
                                                      float s2, int iters, float hc_eps, float* pr, float* po,
                                                      float* cout) {
  const unsigned full = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  if (lane < N) {
    pr[lane] = __fadd_rn(sigmoidf_(__fadd_rn(__fmul_rn(m[lane], s0), wload(base, lane, bdt))), hc_eps);
    po[lane] = __fmul_rn(2.0f, sigmoidf_(__fadd_rn(__fmul_rn(m[N + lane], s1), wload(base, N + lane, bdt))));
  }
  const bool live = lane < N * N;
  const int a = lane / N, k = lane - a * N;  // dead lanes read wrapped lanes: garbage nobody stores
  const float v = live ? __fadd_rn(__fmul_rn(m[2 * N + lane], s2), wload(base, 2 * N + lane, bdt)) : 0.f;
  float mx = __shfl_sync(full, v, a * N);
#pragma unroll
  for (int j = 1; j < N; ++j) mx = fmaxf(mx, __shfl_sync(full, v, a * N + j));
  const float e = expf(__fsub_rn(v, mx));
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) sum = __fadd_rn(sum, __shfl_sync(full, e, a * N + j));
  float c = __fadd_rn(__fdiv_rn(e, sum), hc_eps);
  for (int it = 0; it < (iters > 1 ? iters : 1); ++it) {
    if (it > 0) {
      float rs = 0.f;
#pragma unroll
      for (int j = 0; j < N; ++j) rs = __fadd_rn(rs, __shfl_sync(full, c, a * N + j));
      c = __fdiv_rn(c, __fadd_rn(rs, hc_eps));
    }
    float cs = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) cs = __fadd_rn(cs, __shfl_sync(full, c, j * N + k));
    c = __fdiv_rn(c, __fadd_rn(cs, hc_eps));
  }
  if (live) cout[lane] = c;
}

extern "C" __global__ void smelt_hc_sinkhorn_warp(const float* m_all, int rows, int n, const void* base, int bdt,
                                                  const void* scale, int sdt, int iters, float hc_eps, float* pre,
                                                  float* post, float* comb) {
  SMELT_KERNEL_PROLOGUE();
  const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;  // per warp: the shuffles below see whole warps
  const SinkhornRow x = sinkhorn_row(r, m_all, n, scale, sdt, pre, post, comb);
  switch (n) {
    case 1: hc_sinkhorn_warp_body<1>(x.m, base, bdt, x.s0, x.s1, x.s2, iters, hc_eps, x.pr, x.po, x.c); break;
    case 2: hc_sinkhorn_warp_body<2>(x.m, base, bdt, x.s0, x.s1, x.s2, iters, hc_eps, x.pr, x.po, x.c); break;
    case 3: hc_sinkhorn_warp_body<3>(x.m, base, bdt, x.s0, x.s1, x.s2, iters, hc_eps, x.pr, x.po, x.c); break;
    case 4: hc_sinkhorn_warp_body<4>(x.m, base, bdt, x.s0, x.s1, x.s2, iters, hc_eps, x.pr, x.po, x.c); break;
    case 5: hc_sinkhorn_warp_body<5>(x.m, base, bdt, x.s0, x.s1, x.s2, iters, hc_eps, x.pr, x.po, x.c); break;
    default: break;  // the launcher sends hc_mult > 5 to smelt_hc_sinkhorn
  }
}

// ---- V4.1 hc_mix at decode: smelt_hc_mix_logits (v41) + smelt_hc_sinkhorn_warp in two kernels over many blocks,
// the same bits. smelt_hc_mix_logits gave each of the (2 + n) * n outputs one block of vb (1024) threads: 24
// multiprocessors, each thread walking its ~20 values in five dependent batches of loads. Here the vb "virtual"
// threads of an output are spread over vb / blockDim blocks; virtual thread t sums exactly the elements and partial
// sums smelt_hc_mix_logits' thread t sums (t + k * vb, partial k % 4, folded 0+1+2+3) with all its loads in flight
// at once (the projection weights before the dependent-launch wait), and each virtual warp's warp_sum_d (the first
// level of block_sum_d) goes to scratch. smelt_hc_mix_sinkhorn then does block_sum_d's second level for every
// output and for the squares (warp 0's butterfly over the vb / 32 warp sums, zeros past them), the logit
// float(dot) * rsqrt scale, and hc_sinkhorn_warp_body on the logits in shared memory.

namespace {
constexpr int kMixRegs = 32;  // values a virtual thread holds: len <= 32 * vb
}  // namespace

// grid (outs * (vb / blockDim), rows), block a multiple of 32 dividing vb. part: [rows, outs + 1, 32] doubles
// (output o's warp sums of the dot at [o], the squares' at [outs], written by the blocks of output 0).
extern "C" __global__ void smelt_hc_mix_partials(const float* X, int len, const void* fn, int fdt, int vb,
                                                 double* part) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();
  const int bd = blockDim.x, per = vb / bd, outs = gridDim.x / per;
  const int o = blockIdx.x / per, t = (blockIdx.x - o * per) * bd + threadIdx.x;  // virtual thread of output o
  const i64 r = blockIdx.y;
  const i64 wo = i64(o) * len;
  float fv[kMixRegs], zv[kMixRegs];
#pragma unroll
  for (int k = 0; k < kMixRegs; ++k) {
    const int i = t + k * vb;
    fv[k] = i < len ? ldw(fn, wo + i, fdt) : 0.f;
  }
  grid_dep_wait();
  const float* z = X + r * len;
#pragma unroll
  for (int k = 0; k < kMixRegs; ++k) {
    const int i = t + k * vb;
    zv[k] = i < len ? z[i] : 0.f;
  }
  double sq[4] = {0.0, 0.0, 0.0, 0.0}, d[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
  for (int k = 0; k < kMixRegs; ++k) {
    if (t + k * vb < len) {
      const double zi = double(zv[k]);
      sq[k & 3] += zi * zi;
      d[k & 3] += zi * double(fv[k]);
    }
  }
  const double sqw = warp_sum_d(((sq[0] + sq[1]) + sq[2]) + sq[3]);
  const double dw = warp_sum_d(((d[0] + d[1]) + d[2]) + d[3]);
  if ((threadIdx.x & 31) == 0) {
    double* pr = part + r * (outs + 1) * 32;
    pr[o * 32 + (t >> 5)] = dw;
    if (o == 0) pr[outs * 32 + (t >> 5)] = sqw;
  }
}

// grid (rows), block 128 (4 warps). Folds the partials of smelt_hc_mix_partials (vb threads, len values a row),
// then smelt_hc_sinkhorn_warp's body on warp 0 (n <= 5).
extern "C" __global__ void smelt_hc_mix_sinkhorn(const double* part, int len, int vb, float norm_eps, int n,
                                                 const void* base, int bdt, const void* scale, int sdt, int iters,
                                                 float hc_eps, float* pre, float* post, float* comb) {
  SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST();
  __shared__ float mb[64], ms[64], sc[4];
  __shared__ double dsum[65];
  const int outs = (2 + n) * n, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = vb >> 5;
  const i64 r = blockIdx.x;
  // base and scale are weights: read before the wait, as floats (the same values wload gives).
  for (int i = threadIdx.x; i < outs; i += blockDim.x) mb[i] = wload(base, i, bdt);
  if (threadIdx.x < 3) sc[threadIdx.x] = wload(scale, threadIdx.x, sdt);
  grid_dep_wait();
  const double* pr = part + r * (outs + 1) * 32;
  // A warp's partials are all loaded before its butterflies (one at a time, each load had waited behind the
  // previous output's shuffles: ~7 serial loads a warp at n = 4). Same sums.
  constexpr int kPer = 9;  // outputs a warp per pass: (2 + 5) * 5 + 1 = 36 over the 4 warps of a block of 128
  const int nwarps = blockDim.x >> 5;
  for (int o0 = warp; o0 <= outs; o0 += kPer * nwarps) {  // o == outs: the squares
    double v[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int o = o0 + u * nwarps;
      v[u] = o <= outs && lane < nw ? pr[o * 32 + lane] : 0.0;
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int o = o0 + u * nwarps;
      if (o > outs) break;  // warp-uniform
      const double t = warp_sum_d(v[u]);
      if (lane == 0) dsum[o] = t;
    }
  }
  __syncthreads();
  if (threadIdx.x < outs) {
    const float rs = rms_scale_from(dsum[outs], len, norm_eps);
    ms[threadIdx.x] = __fmul_rn(float(dsum[threadIdx.x]), rs);
  }
  __syncthreads();
  if (warp != 0) return;
  float* pr_ = pre + r * n;
  float* po_ = post + r * n;
  float* c_ = comb + r * n * n;
  const float s0 = sc[0], s1 = sc[1], s2 = sc[2];
  switch (n) {
    case 1: hc_sinkhorn_warp_body<1>(ms, mb, kF32, s0, s1, s2, iters, hc_eps, pr_, po_, c_); break;
    case 2: hc_sinkhorn_warp_body<2>(ms, mb, kF32, s0, s1, s2, iters, hc_eps, pr_, po_, c_); break;
    case 3: hc_sinkhorn_warp_body<3>(ms, mb, kF32, s0, s1, s2, iters, hc_eps, pr_, po_, c_); break;
    case 4: hc_sinkhorn_warp_body<4>(ms, mb, kF32, s0, s1, s2, iters, hc_eps, pr_, po_, c_); break;
    case 5: hc_sinkhorn_warp_body<5>(ms, mb, kF32, s0, s1, s2, iters, hc_eps, pr_, po_, c_); break;
    default: break;  // the launcher sends hc_mult > 5 to smelt_hc_mix_logits + smelt_hc_sinkhorn
  }
}

// u[r, d] = sum_c pre[r, c] * X[r, c, d] in copy order (pre == nullptr: copy 0). grid (ceil(D/256), rows).
// R: the op's `round = "bf16"` in the same pass (the _bf16 entry points).
template <bool R>
__device__ __forceinline__ void hc_collapse_body(const float* X, const float* pre, int n, int D, float* u) {
  const i64 r = blockIdx.y;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  const float* x = X + r * n * D;
  if (!pre) {
    u[r * D + d] = R ? round_bf16(x[d]) : x[d];
    return;
  }
  float s = 0.f;
  for (int c = 0; c < n; ++c) s = __fadd_rn(s, __fmul_rn(pre[r * n + c], x[i64(c) * D + d]));
  u[r * D + d] = R ? round_bf16(s) : s;
}
extern "C" __global__ void smelt_hc_collapse(const float* X, const float* pre, int n, int D, float* u) {
  SMELT_KERNEL_PROLOGUE();
  hc_collapse_body<false>(X, pre, n, D, u);
}
extern "C" __global__ void smelt_hc_collapse_bf16(const float* X, const float* pre, int n, int D, float* u) {
  SMELT_KERNEL_PROLOGUE();
  hc_collapse_body<true>(X, pre, n, D, u);
}

// hc_head's collapse: pre[c] = sigmoid(m[c] * scale[0] + base[c]) + hc_eps from the n logits, then collapse.
extern "C" __global__ void smelt_hc_head_collapse(const float* X, const float* m, int n, int D, const void* base,
                                                  int bdt, const void* scale, int sdt, float hc_eps, float* out) {
  SMELT_KERNEL_PROLOGUE();
  const i64 r = blockIdx.y;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  const float s0 = wload(scale, 0, sdt);
  const float* x = X + r * n * D;
  float s = 0.f;
  for (int c = 0; c < n; ++c) {
    const float p = __fadd_rn(sigmoidf_(__fadd_rn(__fmul_rn(m[r * n + c], s0), wload(base, c, bdt))), hc_eps);
    s = __fadd_rn(s, __fmul_rn(p, x[i64(c) * D + d]));
  }
  out[r * D + d] = s;
}

// out[r, k, d] = post[r, k] * y[r, d] + sum_a comb[r, a*n + k] * X[r, a, d]. grid (ceil(D/256), rows, n).
template <bool R>
__device__ __forceinline__ void hc_expand_body(const float* X, const float* y, const float* post, const float* comb,
                                               int D, float* out) {
  const i64 r = blockIdx.y, k = blockIdx.z, n = gridDim.z;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  const float* x = X + r * n * D;
  const float* c = comb + r * n * n;
  float s = 0.f;
  for (int a = 0; a < n; ++a) s = __fadd_rn(s, __fmul_rn(c[a * n + k], x[i64(a) * D + d]));
  const float v = __fadd_rn(__fmul_rn(post[r * n + k], y[r * D + d]), s);
  out[(r * n + k) * D + d] = R ? round_bf16(v) : v;
}
extern "C" __global__ void smelt_hc_expand(const float* X, const float* y, const float* post, const float* comb, int D,
                                           float* out) {
  SMELT_KERNEL_PROLOGUE();
  hc_expand_body<false>(X, y, post, comb, D, out);
}
extern "C" __global__ void smelt_hc_expand_bf16(const float* X, const float* y, const float* post, const float* comb,
                                                int D, float* out) {
  SMELT_KERNEL_PROLOGUE();
  hc_expand_body<true>(X, y, post, comb, D, out);
}

// A sublayer's seam in one pass (runtime/cuda/backend.cc plan_seams: adjacent ops of the plan whose values flow only
// between them): ADD: y = a + b (the FFN's routed and shared experts' sum, written), else y is read; then hc_expand,
// out[k] = post[k] * y + sum_a comb[a*n + k] * X[a] for every stream k, and the next site's hc_collapse of out,
// u = sum_c pre[c] * out[c] (pre == nullptr: out[0]). Every value with the separate kernels' operations in their order
// (smelt_add, hc_expand_body, hc_collapse_body): the same bits. R: each op's round = "bf16" (all three or none).
// A thread owns column d of every row buffer and reads all its inputs before it writes (the stores could alias the
// mix's coefficients for the compiler, which then issued each stream's loads after the previous stream's stores: four
// L2 round trips), so a written row buffer may share bytes with a read one as the same column (ops.cc run_seam).
// grid (ceil(D/256), rows).
template <int N, bool ADD, bool R>
__device__ __forceinline__ void hc_seam_body(const float* a, const float* b, float* y, const float* X, const float* post,
                                             const float* comb, const float* pre, int D, float* out, float* u) {
  const i64 r = blockIdx.y;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float xv[N], po[N], pr[N], c[N * N];
  const float* x = X + r * N * D;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    xv[j] = x[i64(j) * D + d];
    po[j] = post[r * N + j];
    pr[j] = pre ? pre[r * N + j] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < N * N; ++j) c[j] = comb[r * N * N + j];
  float yv;
  if (ADD) {
    const float av = a[r * D + d], bv = b[r * D + d];
    yv = __fadd_rn(av, bv);
    if (R) yv = round_bf16(yv);
  } else {
    yv = y[r * D + d];
  }
  float v[N];
  float su = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) s = __fadd_rn(s, __fmul_rn(c[j * N + k], xv[j]));
    v[k] = __fadd_rn(__fmul_rn(po[k], yv), s);
    if (R) v[k] = round_bf16(v[k]);
    su = __fadd_rn(su, __fmul_rn(pr[k], v[k]));
  }
  if (!pre) su = v[0];
  if (R) su = round_bf16(su);
  if (ADD) y[r * D + d] = yv;
#pragma unroll
  for (int k = 0; k < N; ++k) out[(r * N + k) * D + d] = v[k];
  u[r * D + d] = su;
}
template <bool ADD, bool R>
__device__ __forceinline__ void hc_seam(const float* a, const float* b, float* y, const float* X, const float* post,
                                        const float* comb, const float* pre, int n, int D, float* out, float* u) {
  switch (n) {
#define SMELT_HC_SEAM(N) \
  case N: hc_seam_body<N, ADD, R>(a, b, y, X, post, comb, pre, D, out, u); break;
    SMELT_HC_SEAM(1) SMELT_HC_SEAM(2) SMELT_HC_SEAM(3) SMELT_HC_SEAM(4) SMELT_HC_SEAM(5) SMELT_HC_SEAM(6)
    SMELT_HC_SEAM(7) SMELT_HC_SEAM(8)
#undef SMELT_HC_SEAM
    default: break;  // the backend fuses hc_mult <= 8 only
  }
}
extern "C" __global__ void smelt_hc_seam(const float* y, const float* X, const float* post, const float* comb,
                                         const float* pre, int n, int D, float* out, float* u) {
  SMELT_KERNEL_PROLOGUE();
  hc_seam<false, false>(nullptr, nullptr, const_cast<float*>(y), X, post, comb, pre, n, D, out, u);
}
extern "C" __global__ void smelt_hc_seam_bf16(const float* y, const float* X, const float* post, const float* comb,
                                              const float* pre, int n, int D, float* out, float* u) {
  SMELT_KERNEL_PROLOGUE();
  hc_seam<false, true>(nullptr, nullptr, const_cast<float*>(y), X, post, comb, pre, n, D, out, u);
}
extern "C" __global__ void smelt_hc_seam_add(const float* a, const float* b, float* y, const float* X,
                                             const float* post, const float* comb, const float* pre, int n, int D,
                                             float* out, float* u) {
  SMELT_KERNEL_PROLOGUE();
  hc_seam<true, false>(a, b, y, X, post, comb, pre, n, D, out, u);
}
extern "C" __global__ void smelt_hc_seam_add_bf16(const float* a, const float* b, float* y, const float* X,
                                                  const float* post, const float* comb, const float* pre, int n,
                                                  int D, float* out, float* u) {
  SMELT_KERNEL_PROLOGUE();
  hc_seam<true, true>(a, b, y, X, post, comb, pre, n, D, out, u);
}

// m[r, d] = bf16(sum_c X[r, c, d] / n) (rb = 0, numerics fp32: not rounded). grid (ceil(D/256), rows).
extern "C" __global__ void smelt_hc_mean(const float* X, int n, int D, int rb, float* m) {
  SMELT_KERNEL_PROLOGUE();
  const i64 r = blockIdx.y;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float s = 0.f;
  for (int c = 0; c < n; ++c) s = __fadd_rn(s, X[(r * n + c) * D + d]);
  const float v = __fdiv_rn(s, float(n));
  m[r * D + d] = rb ? round_bf16(v) : v;
}
