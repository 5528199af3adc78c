// V4.1 Engram (kernels/engram/reference.h, hash.h): the n-gram hash on the device and the block's gather and
// gate. The kv projection between them is the FP8 act-quant linear (kernels/linear), launched by the op.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

// Hash layout of every Engram layer (host: kernels/engram make_hash_layout), by value.
struct HashLayout {
  i64 mult[4][8];      // [layer][s], s < max_ngram
  i64 prime[4][32];    // [layer][col]
  i64 offset[4][32];   // [layer][col]
  int layers, max_ngram, heads;
};

namespace {

// Compressed id of absolute position pos (p0 = the chunk's first): the chunk's own ids, the history ring for
// earlier positions, the pad before the sequence start.
__device__ i64 compressed_at(const i32* ids, const i32* map, i64 vocab_map, i64 cvocab, const float* hist, int R,
                             i64 p0, i64 pos, i64 pad) {
  if (pos < 0) return pad;
  if (pos < p0) return i64(hist[pos % R]);
  i64 id = ids[pos - p0];
  if (map) id = (id >= 0 && id < vocab_map) ? map[id] : pad;
  return id >= 0 && id < cvocab ? id : pad;
}

}  // namespace

// hashes [T, layers * cols] I32. Thread per (row, layer); grid (ceil(T*layers/64)), block 64.
extern "C" __global__ void smelt_engram_hash(const i32* ids, int T, const StepInfo* step, const i32* map, i64 vocab_map,
                                             i64 cvocab, i64 pad_id, const float* hist, int R, HashLayout L,
                                             i32* hashes) {
  SMELT_KERNEL_PROLOGUE();
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= T * L.layers) return;
  const int t = k / L.layers, l = k % L.layers;
  const i64 p0 = step->p0, pos = p0 + t;
  i64 pad = pad_id;
  if (map) pad = pad_id >= 0 && pad_id < vocab_map ? map[pad_id] : 0;
  const int look = L.max_ngram - 1, cols = look * L.heads;
  i32* o = hashes + (i64(t) * L.layers + l) * cols;
  u64 h = u64(compressed_at(ids, map, vocab_map, cvocab, hist, R, p0, pos, pad)) * u64(L.mult[l][0]);
  for (int i = 1; i <= look; ++i) {
    h ^= u64(compressed_at(ids, map, vocab_map, cvocab, hist, R, p0, pos - i, pad)) * u64(L.mult[l][i]);
    for (int e = 0; e < L.heads; ++e) {
      const int col = (i - 1) * L.heads + e;
      o[col] = i32(i64(h % u64(L.prime[l][col])) + L.offset[l][col]);
    }
  }
}

// history[(p0 + t) % R] = compressed id of row t, for the chunk's last min(T, R) rows (after the hash).
extern "C" __global__ void smelt_engram_history(const i32* ids, int T, const StepInfo* step, const i32* map,
                                                i64 vocab_map, i64 cvocab, i64 pad_id, float* hist, int R) {
  SMELT_KERNEL_PROLOGUE();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T || t < T - R) return;
  i64 pad = pad_id;
  if (map) pad = pad_id >= 0 && pad_id < vocab_map ? map[pad_id] : 0;
  const i64 p0 = step->p0;
  hist[(p0 + t) % R] = float(compressed_at(ids, map, vocab_map, cvocab, hist, R, p0, p0 + t, pad));
}

// e[r, c*hd + i] = bf16(e4m3(table[row, i]) * e8m0(scale[row, i/32])) for the row's `cols` hashed rows
// (hashes[r * stride + c]). `table` holds rows [row_begin, row_begin + table_rows) of the whole table (a TP
// rank's range, smelt.engram_lookup; 0 and all rows for smelt.engram); a row outside them gives -0.0 (the
// additive identity: the all_reduce of the ranks' rows is then exact, a -0 table value included).
// grid (cols, T), block 128.
extern "C" __global__ void smelt_engram_gather(const i32* hashes, int stride, const u8* table, const u8* scale,
                                               i64 table_rows, i64 row_begin, int hd, float* e) {
  SMELT_KERNEL_PROLOGUE();
  const int c = blockIdx.x, cols = gridDim.x;
  const i64 r = blockIdx.y;
  const i64 row = i64(hashes[r * stride + c]) - row_begin;
  float* dst = e + (r * cols + c) * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x)
    dst[i] = (row >= 0 && row < table_rows)
                 ? round_bf16(e4m3_decode(table[row * hd + i]) * e8m0_decode(scale[row * (hd / 32) + i / 32]))
                 : -0.f;
}

namespace {

constexpr int kGateSteps = 20;  // a thread's steps loaded at once (D = 5120 over 256 threads: all of them)

// block_sum_d of three values at once: each with block_sum_d's trees (warp butterflies, then warp 0 over the warp
// sums in warp order), one pair of barriers instead of three.
__device__ __forceinline__ void block_sum3_d(double& a, double& b, double& c, double (*red)[32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  a = warp_sum_d(a), b = warp_sum_d(b), c = warp_sum_d(c);
  if (lane == 0) red[0][warp] = a, red[1][warp] = b, red[2][warp] = c;
  __syncthreads();
  if (warp == 0) {
    double x = lane < nw ? red[0][lane] : 0.0, y = lane < nw ? red[1][lane] : 0.0, z = lane < nw ? red[2][lane] : 0.0;
    x = warp_sum_d(x), y = warp_sum_d(y), z = warp_sum_d(z);
    if (lane == 0) red[0][0] = x, red[1][0] = y, red[2][0] = z;
  }
  __syncthreads();
  a = red[0][0], b = red[1][0], c = red[2][0];
}

// One weight dtype pair: the weights' loads are straight-line code, so a thread's ST steps of all four
// inputs are loaded before any is summed (one memory round trip instead of one a step; the sums keep their order:
// thread t's chain over d = t, t + blockDim.x, ...).
template <int QDT, int KDT, int ST = kGateSteps>
__device__ __forceinline__ void gate_row(const float* h, const float* key, const float* value, const void* qw,
                                         const void* kw, i64 wo, int D, float eps, float inv_sqrt_dim, int rb,
                                         float* o, double (*red)[32]) {
  const int tid = threadIdx.x, nt = blockDim.x;
  double dot = 0.0, hh = 0.0, kk = 0.0;
  for (int d0 = tid; d0 < D; d0 += ST * nt) {
    float hv[ST], kv[ST], w[ST];
#pragma unroll
    for (int u = 0; u < ST; ++u) {
      const int d = d0 + u * nt;
      const bool in = d < D;
      hv[u] = in ? h[d] : 0.f;
      kv[u] = in ? key[d] : 0.f;
      w[u] = in ? __fmul_rn(ldw(qw, wo + d, QDT), ldw(kw, wo + d, KDT)) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < ST; ++u)
      if (d0 + u * nt < D) {
        dot += double(__fmul_rn(__fmul_rn(hv[u], w[u]), kv[u]));
        hh += double(hv[u]) * double(hv[u]);
        kk += double(kv[u]) * double(kv[u]);
      }
  }
  block_sum3_d(dot, hh, kk, red);
  const float rstd = __fmul_rn(rms_scale_from(hh, D, eps), rms_scale_from(kk, D, eps));
  const float g = __fmul_rn(__fmul_rn(float(dot), rstd), inv_sqrt_dim);
  const float a = fabsf(g);
  const float mag = __fsqrt_rn(a > 1e-6f ? a : 1e-6f);
  const float gate = __fdiv_rn(1.f, 1.f + expf(-copysignf(mag, g)));
  // o may alias h: each thread reads its own channels before it writes them.
  for (int d0 = tid; d0 < D; d0 += ST * nt) {
    float hv[ST], vv[ST];
#pragma unroll
    for (int u = 0; u < ST; ++u) {
      const int d = d0 + u * nt;
      hv[u] = d < D ? h[d] : 0.f;
      vv[u] = d < D ? value[d] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < ST; ++u) {
      const int d = d0 + u * nt;
      if (d < D) {
        const float v = __fadd_rn(hv[u], __fmul_rn(gate, vv[u]));
        o[d] = rb ? round_bf16(v) : v;
      }
    }
  }
}

// Gate per (row, copy c): X/out [T, n*D], kv [T, (n+1)*D] (keys then value, bf16 values), q_weight / k_weight
// [n, D]. out = bf16(h + gate * value) (rb = 0, numerics fp32: not rounded). grid (n, T); ST steps of a thread loaded
// at once. out may alias X.
template <int ST>
__device__ __forceinline__ void engram_gate(const float* X, const float* kv, const void* qw, int qdt, const void* kw,
                                            int kdt, int D, float eps, float inv_sqrt_dim, int rb, float* out) {
  const int c = blockIdx.x, n = gridDim.x;
  const i64 r = blockIdx.y;
  const float* h = X + (r * n + c) * D;
  const float* key = kv + r * (n + 1) * D + i64(c) * D;
  const float* value = kv + r * (n + 1) * D + i64(n) * D;
  float* o = out + (r * n + c) * D;
  const i64 wo = i64(c) * D;
  __shared__ double red[3][32];
#define SMELT_GATE(Q, K) gate_row<Q, K, ST>(h, key, value, qw, kw, wo, D, eps, inv_sqrt_dim, rb, o, red)
  switch (qdt * 3 + kdt) {
    case kBF16 * 3 + kBF16: SMELT_GATE(kBF16, kBF16); break;
    case kBF16 * 3 + kF32: SMELT_GATE(kBF16, kF32); break;
    case kBF16 * 3 + kF16: SMELT_GATE(kBF16, kF16); break;
    case kF32 * 3 + kBF16: SMELT_GATE(kF32, kBF16); break;
    case kF32 * 3 + kF16: SMELT_GATE(kF32, kF16); break;
    case kF16 * 3 + kBF16: SMELT_GATE(kF16, kBF16); break;
    case kF16 * 3 + kF32: SMELT_GATE(kF16, kF32); break;
    case kF16 * 3 + kF16: SMELT_GATE(kF16, kF16); break;
    default: SMELT_GATE(kF32, kF32); break;
  }
#undef SMELT_GATE
}

}  // namespace

// Block 256: 20 steps a thread (D = 5120: all of them), 212 registers.
extern "C" __global__ void smelt_engram_gate(const float* X, const float* kv, const void* qw, int qdt, const void* kw,
                                             int kdt, int D, float eps, float inv_sqrt_dim, int rb, float* out) {
  SMELT_KERNEL_PROLOGUE();
  engram_gate<kGateSteps>(X, kv, qw, qdt, kw, kdt, D, eps, inv_sqrt_dim, rb, out);
}

// Block 1024, 5 steps a thread (the launcher's choice: runtime/cuda/ops_v41.cc gate_kernel). The sums' order follows
// the block size (thread t's chain over d = t, t + 1024, ...).
extern "C" __global__ void __launch_bounds__(1024) smelt_engram_gate_wide(const float* X, const float* kv, const void* qw,
                                                                          int qdt, const void* kw, int kdt, int D,
                                                                          float eps, float inv_sqrt_dim, int rb,
                                                                          float* out) {
  SMELT_KERNEL_PROLOGUE();
  engram_gate<5>(X, kv, qw, qdt, kw, kdt, D, eps, inv_sqrt_dim, rb, out);
}
