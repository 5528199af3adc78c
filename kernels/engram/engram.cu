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

// Gate per (row, copy c): X/out [T, n*D], kv [T, (n+1)*D] (keys then value, bf16 values), q_weight / k_weight
// [n, D]. out = bf16(h + gate * value) (rb = 0, numerics fp32: not rounded). grid (n, T), block 256. out may
// alias X.
extern "C" __global__ void smelt_engram_gate(const float* X, const float* kv, const void* qw, int qdt, const void* kw,
                                             int kdt, int D, float eps, float inv_sqrt_dim, int rb, float* out) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ double red[32];
  const int c = blockIdx.x, n = gridDim.x;
  const i64 r = blockIdx.y;
  const float* h = X + (r * n + c) * D;
  const float* key = kv + r * (n + 1) * D + i64(c) * D;
  const float* value = kv + r * (n + 1) * D + i64(n) * D;
  double dot = 0.0, hh = 0.0, kk = 0.0;
  // n blocks at decode, each thread ~D / 256 steps: unrolled so the loads of several steps are in flight at once
  // (the sums keep their order).
#pragma unroll 8
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const float w = __fmul_rn(ldw(qw, i64(c) * D + d, qdt), ldw(kw, i64(c) * D + d, kdt));
    dot += double(__fmul_rn(__fmul_rn(h[d], w), key[d]));
    hh += double(h[d]) * double(h[d]);
    kk += double(key[d]) * double(key[d]);
  }
  dot = block_sum_d(dot, red);
  hh = block_sum_d(hh, red);
  kk = block_sum_d(kk, red);
  const float rstd = __fmul_rn(rms_scale_from(hh, D, eps), rms_scale_from(kk, D, eps));
  const float g = __fmul_rn(__fmul_rn(float(dot), rstd), inv_sqrt_dim);
  const float a = fabsf(g);
  const float mag = __fsqrt_rn(a > 1e-6f ? a : 1e-6f);
  const float gate = __fdiv_rn(1.f, 1.f + expf(-copysignf(mag, g)));
  float* o = out + (r * n + c) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const float v = __fadd_rn(h[d], __fmul_rn(gate, value[d]));
    o[d] = rb ? round_bf16(v) : v;
  }
}
