// Token sampling on the GPU: the token kernels/sampling/reference.h picks on the host, without sorting the
// vocabulary and without copying the logits row back (runtime/cuda/backend.h CudaBackend::sample).
//
// Launch sequence (one stream; scratch from sample_scratch_bytes below, any contents):
//   smelt_sample_argmax   grid 1, block 1024: the greedy token (-> *token, the packed key -> *best), zeroes hist.
//   -- greedy stops here --
//   smelt_sample_weights  grid any, block 256: q[i] (the integer weights) and hist[top 11 bits of key] += q.
//   smelt_sample_pick     grid 1, block 1024: the nucleus and the draw by a radix select over the logit keys.
//
// Why it equals the host: weights, the nucleus threshold and the draw are integers computed by the same code
// (kernels/sampling/sampling.cuh), and the host's sorted order (logit descending, ties lower id first) is
// reproduced by key ranges: with S(k) the mass of the tokens whose key is above k, the nucleus ends in the
// group of key kb with S(kb) < need <= S(kb) + mass(kb), taking its first ceil((need - S(kb)) / q(kb)) tokens
// by id; the draw lands in the group kd with S(kd) <= target < S(kd) + mass(kd), at its
// ((target - S(kd)) / q(kd))-th token by id. Integer sums do not depend on the order they are added in, so
// there is no boundary case: the device token is the host token.
#include "kernels/cuda/common.cuh"
#include "kernels/sampling/sampling.cuh"

namespace ss = smelt_sampling;

namespace {

constexpr int kBuckets = 2048;      // key digits: 11, 11 and 10 bits

__device__ __forceinline__ u64 shfl_xor_u64(u64 v, int o) {
  const u32 lo = __shfl_xor_sync(0xffffffffu, u32(v), o), hi = __shfl_xor_sync(0xffffffffu, u32(v >> 32), o);
  return (u64(hi) << 32) | lo;
}

__device__ __forceinline__ u64 shfl_up_u64(u64 v, int o) {
  const u32 lo = __shfl_up_sync(0xffffffffu, u32(v), o), hi = __shfl_up_sync(0xffffffffu, u32(v >> 32), o);
  return (u64(hi) << 32) | lo;
}

// Greedy as one max over u64: (key, ~id), where a NaN ranks below -inf except at id 0, where it beats
// everything (the host's left-to-right scan with `>` never moves off a NaN at id 0).
__device__ __forceinline__ u64 greedy_key(float l, i64 i) {
  const u32 k = (l != l) ? (i == 0 ? 0xffffffffu : 0u) : ss::order_key(l);
  return (u64(k) << 32) | u64(0xffffffffu - u32(i));
}
__device__ __forceinline__ i64 greedy_id(u64 packed) { return i64(0xffffffffu - u32(packed)); }

// Block-wide exclusive prefix sum (blockDim.x a multiple of 32, at most 1024); `tot` is 32 u64 of shared
// memory; every thread also gets the block's total.
__device__ u64 exclusive_scan(u64 v, u64* tot, u64& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  u64 inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const u64 t = shfl_up_u64(inc, o);
    if (lane >= o) inc += t;
  }
  __syncthreads();  // `tot` may still be read by a previous call
  if (lane == 31) tot[warp] = inc;
  __syncthreads();
  u64 before = 0;
  total = 0;
  for (int w = 0; w < warps; ++w) {
    if (w < warp) before += tot[w];
    total += tot[w];
  }
  return before + inc - v;
}

// Of nb buckets (a multiple of blockDim.x) taken from the highest down, the one where the running mass reaches
// `need` (1 <= need <= the sum): *bucket, and the mass of the buckets above it in *above. Block-wide.
__device__ void find_bucket(const u64* h, int nb, u64 need, u64* tot, u32* bucket, u64* above) {
  const int per = nb / int(blockDim.x), first = nb - 1 - int(threadIdx.x) * per;
  u64 s = 0;
  for (int j = 0; j < per; ++j) s += h[first - j];
  u64 total;
  u64 run = exclusive_scan(s, tot, total);
  if (run < need && need <= run + s)
    for (int j = 0; j < per; ++j) {
      const u64 m = h[first - j];
      if (run + m >= need) {
        *bucket = u32(first - j);
        *above = run;
        break;
      }
      run += m;
    }
  __syncthreads();
}

// The key k with S(k) < need <= S(k) + mass(k) (S(k): mass of the keys above k), by three digits: the first
// from hist1 (whole vocabulary), the others from passes over the tokens under the prefix so far.
struct Selected {
  u32 key;
  u64 above;
};
__device__ Selected select_key(const float* logits, i64 n, const u64* q, const u64* hist1, u64 need, u64* h,
                               u64* tot, u32* s_bucket, u64* s_above) {
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) h[b] = hist1[b];
  __syncthreads();
  find_bucket(h, kBuckets, need, tot, s_bucket, s_above);
  u32 prefix = *s_bucket;  // key >> 21
  u64 above = *s_above;
  const int shift[2] = {10, 0}, buckets[2] = {2048, 1024};
  for (int level = 0; level < 2; ++level) {
    const int sh = shift[level], top = level == 0 ? 21 : 10;
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
      const u32 k = ss::order_key(logits[i]);
      if ((k >> top) == prefix && q[i]) atomicAdd(&h[(k >> sh) & u32(buckets[level] - 1)], q[i]);
    }
    __syncthreads();
    find_bucket(h, buckets[level], need - above, tot, s_bucket, s_above);
    prefix = (prefix << (top - sh)) | *s_bucket;
    above += *s_above;
    __syncthreads();
  }
  return {prefix, above};
}

}  // namespace

// Scratch: best (u64) at 0, token (int) at 8, hist (2048 u64) at 256, q (n u64) at 256 + 16384.
// The greedy token, and the setup of the other two kernels. grid 1, block 1024.
extern "C" __global__ void smelt_sample_argmax(const float* logits, i64 n, u64* best, int* token, u64* hist) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ u64 warp_best[32];
  u64 m = 0;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
    const u64 k = greedy_key(logits[i], i);
    m = k > m ? k : m;
  }
  for (int o = 16; o >= 1; o >>= 1) {
    const u64 t = shfl_xor_u64(m, o);
    m = t > m ? t : m;
  }
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = m;
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w) m = warp_best[w] > m ? warp_best[w] : m;
    *best = m;
    *token = int(greedy_id(m));
  }
}

// q[i] = weight(logits[i]) and hist[key >> 21] += q[i]. Nothing when the greedy logit is not finite (the pick
// then keeps the greedy token). grid any, block 256.
extern "C" __global__ void smelt_sample_weights(const float* logits, i64 n, const u64* best, double temperature,
                                                u64* q, u64* hist) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ u64 h[kBuckets];
  const double mx = logits[greedy_id(*best)];
  if (mx - mx != 0.0) return;  // +inf or NaN
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) h[b] = 0;
  __syncthreads();
  for (i64 i = blockIdx.x * i64(blockDim.x) + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    const float l = logits[i];
    const u64 w = ss::weight(l, mx, temperature);
    q[i] = w;
    if (w) atomicAdd(&h[ss::order_key(l) >> 21], w);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x)
    if (h[b]) atomicAdd(&hist[b], h[b]);
}

// The nucleus, the draw and the token (-> *token). grid 1, block 1024.
extern "C" __global__ void smelt_sample_pick(const float* logits, i64 n, const u64* best, double temperature,
                                             double top_p, u64 seed, u64 step, const u64* q, const u64* hist,
                                             int* token) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ u64 h[kBuckets];
  __shared__ u64 tot[32];
  __shared__ u32 s_bucket;
  __shared__ u64 s_above;
  __shared__ i64 s_found;
  const double mx = logits[greedy_id(*best)];
  if (mx - mx != 0.0) return;  // *token is the greedy one
  u64 s = 0;
  for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) s += hist[b];
  u64 total;
  exclusive_scan(s, tot, total);

  // The nucleus: key kb, mass A above it, the first m tokens of its group.
  const u64 need = ss::nucleus_need(top_p, total);
  const Selected nb = select_key(logits, n, q, hist, need, h, tot, &s_bucket, &s_above);
  const u64 vb = ss::weight(ss::key_logit(nb.key), mx, temperature);
  const u64 mass = nb.above + (need - nb.above + vb - 1) / vb * vb;

  // The draw: the first kept token whose cumulative mass exceeds target.
  const u64 target = ss::draw_target(ss::draw_bits(seed, step), mass);
  const Selected d = select_key(logits, n, q, hist, target + 1, h, tot, &s_bucket, &s_above);
  const u64 j = (target - d.above) / ss::weight(ss::key_logit(d.key), mx, temperature);

  // Its id: the j-th (from 0) token of key d.key in id order; thread t counts in ids [t*chunk, (t+1)*chunk).
  const i64 chunk = (n + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
  u64 c = 0;
  for (i64 i = lo; i < hi; ++i) c += ss::order_key(logits[i]) == d.key;
  u64 all;
  u64 run = exclusive_scan(c, tot, all);
  if (threadIdx.x == 0) s_found = -1;
  __syncthreads();
  if (run <= j && j < run + c)
    for (i64 i = lo; i < hi; ++i)
      if (ss::order_key(logits[i]) == d.key && run++ == j) {
        s_found = i;
        break;
      }
  __syncthreads();
  if (threadIdx.x == 0 && s_found >= 0) *token = int(s_found);
}
