// Lightning indexer (kernels/indexer/reference.h): scoring of the visible index-pool entries and exact top-k.
//
// smelt_indexer_scores / smelt_indexer_v41_scores: one warp per (row, entry), heads summed in head order, write
// scores [T, S] (S = the pool's rows; entries past the row's visible count are not written).
// smelt_indexer_topk: one block per row selects the min(topk, visible) best entries by (score desc, index asc)
// with a 64-bit radix select over key = (ordered score bits, ~index), so the result is exact and independent
// of thread timing; V4 emits them best first, V4.1 ascending by index; -1 padding.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

namespace {

constexpr int kMaxSel = 2048;  // topk and candidate_blocks upper bound

__device__ __forceinline__ u32 order_bits(float s) {
  if (s != s) s = -__int_as_float(0x7f800000);  // NaN ranks last, as the reference
  if (s == 0.f) s = 0.f;                        // -0 == +0 in the reference's comparisons
  const u32 u = __float_as_uint(s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ u64 sel_key(float s, i64 j) { return (u64(order_bits(s)) << 32) | u64(0xffffffffu - u32(j)); }

// The radix histogram's 256 bins in shared memory, a word of padding after every 8 (hist_at): pick_digit's lane l
// reads bins 255 - 8l - i (i < 8), which unpadded fell on 4 banks (8-way conflicts; Nsight Compute on the V4.1 top-k:
// most of its stall samples were those loads and the adds waiting for them), and padded fall on 32.
constexpr int kHistWords = 256 + 32;
__device__ __forceinline__ int hist_at(int bin) { return bin + (bin >> 3); }

// hist[bin] += 1, one shared-memory atomic per distinct bin of the warp (close scores share their top bytes, so
// per-thread atomics on one bin serialise).
__device__ __forceinline__ void hist_add(int* hist, int bin) {
  const unsigned peers = __match_any_sync(__activemask(), bin);
  if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[hist_at(bin)], __popc(peers));
}

// The serial scan "from digit 255 down, skip whole bins while they hold fewer than `need` keys" done by a warp
// with a lane-parallel prefix sum (lane l holds bins 255-8l .. 248-8l); every lane gets the scan's digit, exact and
// remaining need. One whole warp calls it.
__device__ __forceinline__ void pick_digit(const int* hist, int& need, int& digit, bool& exact) {
  const int lane = threadIdx.x & 31;
  int c[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += c[i] = hist[hist_at(255 - (lane * 8 + i))];
  int inc = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += t;
  }
  const int exc = inc - sum;
  const unsigned hit = __ballot_sync(0xffffffffu, exc < need && need <= inc);
  if (!hit) {  // fewer keys than needed: the serial scan runs off the end
    need -= __shfl_sync(0xffffffffu, inc, 31);
    digit = 0, exact = false;
    return;
  }
  const int src = __ffs(hit) - 1;
  int nd = need - exc, dg = 0, ex = 0;
  if (lane == src)
    for (int i = 0; i < 8; ++i) {
      if (c[i] < nd) {
        nd -= c[i];
        continue;
      }
      dg = 255 - (lane * 8 + i), ex = c[i] == nd;
      break;
    }
  need = __shfl_sync(0xffffffffu, nd, src);
  digit = __shfl_sync(0xffffffffu, dg, src);
  exact = __shfl_sync(0xffffffffu, ex, src) != 0;
}

// Selects the `keep` largest keys among n (keys from get(j)), then hands them on: radix_select writes them to
// list[0 .. keep) in no particular order, radix_select_ascending calls emit(position, j, key) with positions in
// ascending j (a block-wide scan of the selection flags: what the V4.1 kernels need, ascending indices, without the
// 45 barrier steps of a bitonic sort of 512 keys). Block-wide; hist is kHistWords ints of shared memory, wc 32 ints.
// Up to kKeyRegs * blockDim.x keys (4096 at 1024 threads: S = 2065 compressed entries, or the candidate blocks) are
// formed once and kept in registers for every pass, instead of read (and for block scores folded) again in each of
// up to 8 passes. Keys are distinct (their low word is the index), so exactly `keep` of them pass the threshold.
constexpr int kKeyRegs = 4;
template <class Get, class Done>
__device__ void radix_select_impl(int n, int keep, Get get, int* hist, Done done) {
  const bool cached = n <= kKeyRegs * int(blockDim.x);
  u64 kc[kKeyRegs];
  if (cached) {
#pragma unroll
    for (int u = 0; u < kKeyRegs; ++u) {
      const int j = threadIdx.x + u * blockDim.x;
      kc[u] = j < n ? get(j) : 0ull;
    }
  }
  // f(key) for every key j of this thread (j = threadIdx.x, + blockDim.x, ...).
  auto each = [&](auto&& f) {
    if (cached) {
#pragma unroll
      for (int u = 0; u < kKeyRegs; ++u)
        if (threadIdx.x + u * blockDim.x < n) f(kc[u]);
    } else {
      for (int j = threadIdx.x; j < n; j += blockDim.x) f(get(j));
    }
  };
  // f(j, key) for j = u * blockDim.x + threadIdx.x over every chunk u of blockDim.x entries, the whole block in
  // every call (j >= n: key 0, which no threshold selects).
  auto chunks = [&](auto&& f) {
    const int nc = (n + int(blockDim.x) - 1) / int(blockDim.x);
    for (int u = 0; u < nc; ++u) {
      const int j = u * int(blockDim.x) + int(threadIdx.x);
      u64 k = 0ull;
      if (cached) {
#pragma unroll
        for (int v = 0; v < kKeyRegs; ++v)
          if (v == u) k = kc[v];
      } else if (j < n) {
        k = get(j);
      }
      f(j, k);
    }
  };
  u64 prefix = 0, mask = 0;
  int need = keep;
  __shared__ int picked[3];  // warp 0's pick_digit: need, digit, exact
  for (int shift = 56; shift >= 0 && keep > 0; shift -= 8) {
    for (int d = threadIdx.x; d < kHistWords; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    each([&](u64 k) {
      if ((k & mask) == prefix) hist_add(hist, int((k >> shift) & 255));
    });
    __syncthreads();
    // One warp scans the bins (every warp did the same scan: 32 x the shared loads, which queued behind each other)
    if (threadIdx.x < 32) {
      int nd = need, digit = 0;
      bool exact = false;
      pick_digit(hist, nd, digit, exact);
      if (threadIdx.x == 0) picked[0] = nd, picked[1] = digit, picked[2] = exact;
    }
    __syncthreads();
    need = picked[0];
    const int digit = picked[1];
    const bool exact = picked[2] != 0;
    prefix |= u64(digit) << shift;
    mask |= u64(255) << shift;
    if (exact) break;
  }
  done(keep > 0, [&](u64 k) { return (k & mask) >= prefix; }, each, chunks);
}

template <class Get>
__device__ void radix_select(int n, int keep, Get get, u64* list, int* hist, int* count) {
  radix_select_impl(n, keep, get, hist, [&](bool any, auto&& selected, auto&& each, auto&&) {
    if (threadIdx.x == 0) *count = 0;
    __syncthreads();
    if (any)
      each([&](u64 k) {
        if (selected(k)) list[atomicAdd(count, 1)] = k;
      });
    __syncthreads();
  });
}

// emit(pos, j, key) for the selected keys with also(key) true, pos = their rank in ascending j; returns how many.
template <class Get, class Also, class Emit>
__device__ int radix_select_ascending(int n, int keep, Get get, int* hist, int* wc, Also also, Emit emit) {
  int total = 0;
  radix_select_impl(n, keep, get, hist, [&](bool any, auto&& selected, auto&&, auto&& chunks) {
    if (!any) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = int(blockDim.x) >> 5;
    chunks([&](int j, u64 k) {
      const bool f = j < n && selected(k) && also(k);
      const unsigned b = __ballot_sync(0xffffffffu, f);
      if (lane == 0) wc[warp] = __popc(b);
      __syncthreads();
      // The warps' counts by a shuffle scan (lane w holds warp w's), not a loop over all of them in every thread.
      const int c = lane < nw ? wc[lane] : 0;
      int inc = c;
      for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += t;
      }
      const int before = __shfl_sync(0xffffffffu, inc - c, warp), all = __shfl_sync(0xffffffffu, inc, 31);
      if (f) emit(total + before + __popc(b & ((1u << lane) - 1u)), j, k);
      total += all;
      __syncthreads();  // wc is rewritten by the next chunk
    });
  });
  return total;
}

// Bitonic sort of list[0 .. n) (padded to a power of two with `pad`), descending when desc.
__device__ void bitonic(u64* list, int n, bool desc, u64 pad) {
  int m = 1;
  while (m < n) m <<= 1;
  for (int i = n + threadIdx.x; i < m; i += blockDim.x) list[i] = pad;
  __syncthreads();
  for (int size = 2; size <= m; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int partner = i ^ stride;
        if (partner > i) {
          const bool up = ((i & size) == 0) == desc;  // this pair sorted descending?
          const u64 a = list[i], b = list[partner];
          if (up ? a < b : a > b) list[i] = b, list[partner] = a;
        }
      }
      __syncthreads();
    }
}

}  // namespace

// V4: score(j) = sum_h relu(q_h . k_j) * hd^-0.5 * (w_h * H^-0.5). grid (ceil(S / 8), T), block 256,
// dynamic shared memory H*hd floats (the row's queries).
extern "C" __global__ void smelt_indexer_scores(const float* q, const float* w, const float* keys, i64 S,
                                                const StepInfo* step, int H, int hd, int ratio, float score_scale,
                                                float weight_scale, float* scores) {
  SMELT_KERNEL_PROLOGUE();
  extern __shared__ float qs[];
  const i64 i = blockIdx.y;
  const i64 visible = (step->p0 + i + 1) / ratio;
  if (i64(blockIdx.x) * (blockDim.x / 32) >= visible) return;  // the whole block past the visible entries
  for (int c = threadIdx.x; c < H * hd; c += blockDim.x) qs[c] = q[i * H * hd + c];
  __syncthreads();
  const i64 j = i64(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (j >= visible || j >= S) return;
  const int lane = threadIdx.x & 31;
  const float* k = keys + j * hd;
  float s = 0.f;
  for (int h = 0; h < H; ++h) {
    float d = 0.f;
    for (int c = lane; c < hd; c += 32) d = fmaf(qs[h * hd + c], k[c], d);
    d = warp_sum(d);
    s = __fadd_rn(s, __fmul_rn(__fmul_rn(fmaxf(d, 0.f), score_scale), __fmul_rn(w[i * H + h], weight_scale)));
  }
  if (lane == 0) scores[i * S + j] = s;
}

// V4.1: score(j) = bf16(sum_h bf16(relu(bf16(q_h . k_j)) * w_h)) (rb = 0: no roundings; rb = 2: the terms rounded,
// the sum not: a TP rank's partial sum, smelt.indexer_scores, whose all_reduce rounds the total). Same launch.
extern "C" __global__ void smelt_indexer_v41_scores(const float* q, const float* w, const float* keys, i64 S,
                                                    const StepInfo* step, int H, int hd, int ratio, int rb,
                                                    float* scores) {
  SMELT_KERNEL_PROLOGUE();
  extern __shared__ float qs[];
  const i64 i = blockIdx.y;
  const i64 visible = (step->p0 + i + 1) / ratio;
  if (i64(blockIdx.x) * (blockDim.x / 32) >= visible) return;  // the whole block past the visible entries
  for (int c = threadIdx.x; c < H * hd; c += blockDim.x) qs[c] = q[i * H * hd + c];
  __syncthreads();
  const i64 j = i64(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (j >= visible || j >= S) return;
  const int lane = threadIdx.x & 31;
  const float* k = keys + j * hd;
  float s = 0.f;
  int h = 0;
  // 8 heads at a time: each key value is loaded once for 8 dots, the 8 warp sums share warp_sum8's shuffles, and
  // lane 4g forms head h+g's term; the terms are then added to s in head order from those lanes.
  for (; h + 8 <= H; h += 8) {
    double d[8];
#pragma unroll
    for (int g = 0; g < 8; ++g) d[g] = 0.0;
    for (int c = lane; c < hd; c += 32) {
      const float kc = k[c];
#pragma unroll
      for (int g = 0; g < 8; ++g) d[g] += double(qs[(h + g) * hd + c]) * double(kc);
    }
    float qk = float(warp_sum8(d));  // head h + (lane >> 2)
    if (rb) qk = round_bf16(qk);
    float t = __fmul_rn(fmaxf(qk, 0.f), w[i * H + h + (lane >> 2)]);
    t = rb ? round_bf16(t) : t;
#pragma unroll
    for (int g = 0; g < 8; ++g) s = __fadd_rn(s, __shfl_sync(0xffffffffu, t, 4 * g));
  }
  for (; h < H; ++h) {
    double d = 0.0;
    for (int c = lane; c < hd; c += 32) d += double(qs[h * hd + c]) * double(k[c]);
    float qk = float(warp_sum_d(d));
    if (rb) qk = round_bf16(qk);
    float t = __fmul_rn(fmaxf(qk, 0.f), w[i * H + h]);
    s = __fadd_rn(s, rb ? round_bf16(t) : t);
  }
  if (lane == 0) scores[i * S + j] = rb == 1 ? round_bf16(s) : s;
}

// V4.1 candidate source: block b's score = max over its bs entries, the newest visible entry's block forced
// to +inf; the best min(CB, blocks) blocks with score > -inf, ascending, -1 padded -> cand_out [T, CB].
// grid (T), block 1024.
extern "C" __global__ void smelt_indexer_candidates(const float* scores, i64 S, const StepInfo* step, int ratio, int bs,
                                                    int CB, i32* cand_out) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ int hist[kHistWords];
  __shared__ int wc[32];
  const i64 i = blockIdx.x;
  i64 visible = (step->p0 + i + 1) / ratio;
  if (visible > S) visible = S;
  const int nb = int((visible + bs - 1) / bs);
  const float* sc = scores + i * S;
  auto block_score = [&](int b) {
    if (b == nb - 1) return __int_as_float(0x7f800000);
    float m = -__int_as_float(0x7f800000);
    const i64 j0 = i64(b) * bs, j1 = j0 + bs < visible ? j0 + bs : visible;
#pragma unroll 16
    for (i64 j = j0; j < j1; ++j) m = fmaxf(m, sc[j]);  // in entry order; unrolled: the loads fly together
    return m;
  };
  const int keep = CB < nb ? CB : nb;
  // Ascending block ids of the kept blocks whose score is > -inf, then -1.
  i32* out = cand_out + i * CB;
  const u32 ninf = order_bits(-__int_as_float(0x7f800000));
  const int got = radix_select_ascending(
      nb, keep, [&](int b) { return sel_key(block_score(b), b); }, hist, wc,
      [&](u64 k) { return u32(k >> 32) != ninf; }, [&](int pos, int b, u64) { out[pos] = b; });
  for (int t = got + int(threadIdx.x); t < CB; t += blockDim.x) out[t] = -1;
}

// Top-k over scores [T, S]: the k = min(topk, visible) best entries; v41: ascending by index, else best first.
// cand_in [T, CB] (V4.1 consumer, or nullptr): entries outside the listed blocks score -inf.
// grid (T), block 1024.
extern "C" __global__ void smelt_indexer_topk(const float* scores, i64 S, const StepInfo* step, int ratio, int topk,
                                              int v41, const i32* cand_in, int CB, int bs, i32* idx) {
  SMELT_KERNEL_PROLOGUE();
  __shared__ u64 list[kMaxSel];
  __shared__ int hist[kHistWords];
  __shared__ int count;
  __shared__ u32 allowed[2048];  // bitmap of candidate blocks (65536 blocks)
  __shared__ int wc[32];
  const i64 i = blockIdx.x;
  i64 visible = (step->p0 + i + 1) / ratio;
  if (visible > S) visible = S;
  const float* sc = scores + i * S;
  if (cand_in) {
    for (int t = threadIdx.x; t < 2048; t += blockDim.x) allowed[t] = 0;
    __syncthreads();
    for (int t = threadIdx.x; t < CB; t += blockDim.x) {
      const i32 b = cand_in[i * CB + t];
      if (b >= 0 && b < 65536) atomicOr(&allowed[b >> 5], 1u << (b & 31));
    }
    __syncthreads();
  }
  auto get = [&](int j) {
    float s = sc[j];
    if (cand_in) {
      const int b = j / bs;
      if (b >= 65536 || !(allowed[b >> 5] & (1u << (b & 31)))) s = -__int_as_float(0x7f800000);
    }
    return sel_key(s, j);
  };
  const int keep = int(topk < visible ? topk : visible);
  i32* out = idx + i * topk;
  if (v41) {  // ascending by index: the selection compacted in index order
    radix_select_ascending(
        int(visible), keep, get, hist, wc, [](u64) { return true; }, [&](int pos, int j, u64) { out[pos] = j; });
  } else {  // best first
    radix_select(int(visible), keep, get, list, hist, &count);
    bitonic(list, keep, true, 0ull);
    for (int t = threadIdx.x; t < keep; t += blockDim.x) out[t] = i32(0xffffffffu - u32(list[t]));
  }
  for (int t = keep + int(threadIdx.x); t < topk; t += blockDim.x) out[t] = -1;
}
