// KV compressors (kernels/compressor/reference.h): smelt.compressor (V4, CSA / HCA, optional overlap) and
// smelt.kv_compressor (V4.1, ratio 1 or 2, with the index-key half of the indexer).
//
// The per-position projections (kv, gate) are run by the linear kernels into scratch before these kernels.
// Entries completed inside the chunk (j in [p0/r, (p0+T)/r)) are emitted by one block each, 256 threads;
// the grid is launched with the most entries a chunk of T rows can complete (T/r + 1) and blocks past the
// chunk's real count return at once (p0 lives in device memory). The ring is updated by a separate kernel
// afterwards, because entries read ring slots the chunk's own rows replace.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

namespace {

constexpr int kMaxHd = 1024;

struct InvFreq {
  float v[256];
};

// v <- w * (v * rsqrt(mean v^2 + eps)) over a shared vector of n (weight dtype wdt); optional bf16 rounding.
__device__ void rms_norm_shared(float* v, int n, const void* w, int wdt, float eps, bool bf16, double* red) {
  double sq = 0.0;
  for (int c = threadIdx.x; c < n; c += blockDim.x) sq += double(v[c]) * double(v[c]);
  sq = block_sum_d(sq, red);
  const float r = rms_scale_from(sq, n, eps);
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    float y = __fmul_rn(ldw(w, c, wdt), __fmul_rn(v[c], r));
    v[c] = bf16 ? round_bf16(y) : y;
  }
  __syncthreads();
}

// Interleaved RoPE on the last rope_dim values of a shared vector of n, at position pos.
__device__ void rope_shared(float* v, int n, int rope_dim, const InvFreq& f, i64 pos) {
  const int half = rope_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    sincosf(__fmul_rn(f.v[i], float(pos)), &sn, &cs);
    float* x = v + (n - rope_dim) + 2 * i;
    const float a = x[0], b = x[1];
    x[0] = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
    x[1] = __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
  }
  __syncthreads();
}

// Fake quant of a shared vector in groups of g (g = 16: compressed KV, E2M1 + E4M3 scale; g = 32 with
// index = true: E2M1 + power-of-two scale). One thread per group (n / g <= blockDim).
__device__ void qdq_shared(float* v, int n, int g, bool index) {
  for (int grp = threadIdx.x; grp < n / g; grp += blockDim.x) {
    float* x = v + grp * g;
    float amax = 0.f;
    for (int i = 0; i < g; ++i) amax = fmaxf(amax, fabsf(x[i]));
    const float s = index ? index_scale(amax) : compressed_kv_scale(amax);
    for (int i = 0; i < g; ++i) x[i] = qdq_e2m1(x[i], s);
  }
  __syncthreads();
}

// sum over c in order of double(x[c]) * double(row o of w [., hd], BF16 or F32), the reference's dot. The row is
// read 16 bytes at a time, 8 loads a batch, the next batch in flight while this one is summed (hd % 8 == 0, w
// 16-byte aligned).
template <bool BF16>
__device__ double wk_row_dot(const float* x, const void* w, int o, int hd) {
  constexpr int B = 8, E = BF16 ? 8 : 4;  // loads a batch, elements a load
  const unsigned char* base = static_cast<const unsigned char*>(w) + i64(o) * hd * (BF16 ? 2 : 4);
  const uint4* row = reinterpret_cast<const uint4*>(base);
  const int nq = hd / E;
  uint4 cur[B], nxt[B];
#pragma unroll
  for (int j = 0; j < B; ++j) cur[j] = j < nq ? __ldg(row + j) : make_uint4(0u, 0u, 0u, 0u);
  double s = 0.0;
  for (int q0 = 0; q0 < nq; q0 += B) {
#pragma unroll
    for (int j = 0; j < B; ++j) nxt[j] = q0 + B + j < nq ? __ldg(row + q0 + B + j) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int j = 0; j < B; ++j) {
      if (q0 + j >= nq) break;
      const u32 u[4] = {cur[j].x, cur[j].y, cur[j].z, cur[j].w};
      const float* xs = x + (q0 + j) * E;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        if (BF16) {
          s += double(xs[2 * t]) * double(__uint_as_float(u[t] << 16));
          s += double(xs[2 * t + 1]) * double(__uint_as_float(u[t] & 0xffff0000u));
        } else {
          s += double(xs[t]) * double(__uint_as_float(u[t]));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < B; ++j) cur[j] = nxt[j];
  }
  return s;
}

}  // namespace

// V4 compressor entry. kv, gate: this chunk's projections [T, cw] (cw = c*hd); ring [R, 2*cw] (kv then gate
// of earlier positions at slot pos % R). ape [ratio, cw], norm [hd]. grid (T/ratio + 1), block 256.
extern "C" __global__ void smelt_compressor_emit(const float* kv, const float* gate, int T, const StepInfo* step,
                                                 const float* ring, int R, float* pool, i64 pool_rows,
                                                 const void* ape, int ape_dt, const void* norm, int norm_dt, int ratio,
                                                 int hd, int overlap, float eps, int rope_dim, InvFreq f) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ float entry[kMaxHd];
  __shared__ double red[32];
  const i64 p0 = step->p0;
  const i64 j = p0 / ratio + blockIdx.x;
  if (j >= (p0 + T) / ratio) return;
  const int cw = (overlap ? 2 : 1) * hd;
  auto kv_row = [&](i64 pos) { return pos >= p0 ? kv + (pos - p0) * cw : ring + (pos % R) * 2 * cw; };
  auto gate_row = [&](i64 pos) { return pos >= p0 ? gate + (pos - p0) * cw : ring + (pos % R) * 2 * cw + cw; };
  const int off = overlap ? hd : 0;
  const bool prev = overlap && j > 0;
  for (int c = threadIdx.x; c < hd; c += blockDim.x) {
    // Slots: window j-1's first halves (overlap, j > 0), then window j's own (second halves with overlap).
    float mx = -__int_as_float(0x7f800000);
    for (int pass = prev ? 0 : 1; pass < 2; ++pass)
      for (int s = 0; s < ratio; ++s) {
        const i64 pos = (j - 1 + pass) * ratio + s;
        const int o = pass ? off : 0;
        mx = fmaxf(mx, __fadd_rn(gate_row(pos)[o + c], ldw(ape, i64(s) * cw + o + c, ape_dt)));
      }
    float sum = 0.f;
    for (int pass = prev ? 0 : 1; pass < 2; ++pass)
      for (int s = 0; s < ratio; ++s) {
        const i64 pos = (j - 1 + pass) * ratio + s;
        const int o = pass ? off : 0;
        sum = __fadd_rn(sum, expf(__fsub_rn(__fadd_rn(gate_row(pos)[o + c], ldw(ape, i64(s) * cw + o + c, ape_dt)), mx)));
      }
    float acc = 0.f;
    for (int pass = prev ? 0 : 1; pass < 2; ++pass)
      for (int s = 0; s < ratio; ++s) {
        const i64 pos = (j - 1 + pass) * ratio + s;
        const int o = pass ? off : 0;
        const float e = expf(__fsub_rn(__fadd_rn(gate_row(pos)[o + c], ldw(ape, i64(s) * cw + o + c, ape_dt)), mx));
        acc = __fadd_rn(acc, __fmul_rn(kv_row(pos)[o + c], __fdiv_rn(e, sum)));
      }
    entry[c] = acc;
  }
  __syncthreads();
  rms_norm_shared(entry, hd, norm, norm_dt, eps, false, red);
  rope_shared(entry, hd, rope_dim, f, j * ratio);
  if (j < pool_rows)
    for (int c = threadIdx.x; c < hd; c += blockDim.x) pool[j * hd + c] = entry[c];
}

// ring[(p0+t) % R] = [kv_t | gate_t] (each `w` wide) for the chunk's last min(T, R) rows. grid (T), block 256.
extern "C" __global__ void smelt_compressor_ring_store(const float* kv, const float* gate, int T, int w,
                                                       const StepInfo* step, float* ring, int R) {
  SMELT_KERNEL_PROLOGUE();
  const int t = blockIdx.x;
  if (t < T - R) return;
  float* slot = ring + ((step->p0 + t) % R) * 2 * w;
  for (int c = threadIdx.x; c < w; c += blockDim.x) {
    slot[c] = kv[i64(t) * w + c];
    slot[w + c] = gate[i64(t) * w + c];
  }
}

// V4.1 kv_compressor entry j (reference kv_compressor_v41). ratio 2: kv / gate [T, hd] fp32 projections of
// the chunk, ring [R, 2*hd]; ratio 1: kv = the chunk's projections (rounded to bf16 here), gate/ring unused.
// wk [dI, hd] (nullptr: no index key), k_norm [dI]. rb = 0: numerics fp32 (no bf16 roundings).
// grid (T/ratio + 1), block 256.
extern "C" __global__ void smelt_kv_compressor_emit(const float* kv, const float* gate, int T, const StepInfo* step,
                                                    const float* ring, int R, float* pool, float* index_pool,
                                                    i64 capacity, const void* norm, int norm_dt, const void* wk,
                                                    int wk_dt, const void* k_norm, int kn_dt, int ratio, int hd,
                                                    int dI, float eps, int rope_dim, int rb, InvFreq f) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ float latent[kMaxHd];
  __shared__ float work[kMaxHd];
  __shared__ double red[32];
  const i64 p0 = step->p0;
  const i64 j = p0 / ratio + blockIdx.x;
  if (j >= (p0 + T) / ratio || j >= capacity) return;
  auto rnd = [&](float v) { return rb ? round_bf16(v) : v; };
  for (int c = threadIdx.x; c < hd; c += blockDim.x) {
    if (ratio == 2) {
      const i64 q0 = 2 * j, q1 = 2 * j + 1;
      const float* k0 = q0 >= p0 ? kv + (q0 - p0) * hd : ring + (q0 % R) * 2 * hd;
      const float* g0 = q0 >= p0 ? gate + (q0 - p0) * hd : ring + (q0 % R) * 2 * hd + hd;
      const float* k1 = q1 >= p0 ? kv + (q1 - p0) * hd : ring + (q1 % R) * 2 * hd;
      const float* g1 = q1 >= p0 ? gate + (q1 - p0) * hd : ring + (q1 % R) * 2 * hd + hd;
      const float mx = fmaxf(g0[c], g1[c]);
      const float e0 = expf(__fsub_rn(g0[c], mx)), e1 = expf(__fsub_rn(g1[c], mx)), sum = __fadd_rn(e0, e1);
      latent[c] = rnd(__fadd_rn(__fmul_rn(k0[c], __fdiv_rn(e0, sum)), __fmul_rn(k1[c], __fdiv_rn(e1, sum))));
    } else {
      latent[c] = rnd(kv[(j - p0) * hd + c]);
    }
  }
  __syncthreads();
  rms_norm_shared(latent, hd, norm, norm_dt, eps, rb, red);
  const i64 pos = j * ratio;
  if (wk && index_pool) {
    // A thread an output, its wk row read 16 bytes at a time (wk_row_dot): the rows are hd elements apart, so every
    // load instruction of a warp touches 32 cache lines and the L1 serves them one line a cycle; element-wise loads
    // made this ~45 us a launch (the same for a float chain: not the double adds). The sum is the reference's, in c
    // order.
    const bool vec = wk_dt != kF16 && hd % 8 == 0 && (reinterpret_cast<u64>(wk) & 15) == 0;
    for (int o = threadIdx.x; o < dI; o += blockDim.x) {
      double s = 0.0;
      if (vec && wk_dt == kBF16) s = wk_row_dot<true>(latent, wk, o, hd);
      else if (vec) s = wk_row_dot<false>(latent, wk, o, hd);
      else
        for (int c = 0; c < hd; ++c) s += double(latent[c]) * double(ldw(wk, i64(o) * hd + c, wk_dt));
      work[o] = rnd(float(s));
    }
    __syncthreads();
    rms_norm_shared(work, dI, k_norm, kn_dt, eps, rb, red);
    rope_shared(work, dI, rope_dim, f, pos);
    for (int c = threadIdx.x; c < dI; c += blockDim.x) work[c] = rnd(work[c]);
    __syncthreads();
    if (rb) qdq_shared(work, dI, 32, true);  // fake quant only with the model's numerics
    for (int c = threadIdx.x; c < dI; c += blockDim.x) index_pool[j * dI + c] = work[c];
    __syncthreads();
  }
  for (int c = threadIdx.x; c < hd; c += blockDim.x) work[c] = latent[c];
  __syncthreads();
  rope_shared(work, hd, rope_dim, f, pos);
  for (int c = threadIdx.x; c < hd; c += blockDim.x) work[c] = rnd(work[c]);
  __syncthreads();
  if (rb) qdq_shared(work, hd, 16, false);
  for (int c = threadIdx.x; c < hd; c += blockDim.x) pool[j * hd + c] = work[c];
}
