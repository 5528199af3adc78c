// Sliding-window + compressed sparse attention with per-head sink, one shared K=V head (DeepSeek-V4).
#pragma once
#include <cstdint>

namespace smelt::kernels {

struct SparseAttentionArgs {
  int rows = 0;           // T queries at positions p0 .. p0+T-1
  int heads = 0;
  int head_dim = 0;
  int64_t p0 = 0;
  float scale = 0.f;      // softmax scale (head_dim^-0.5)
  const float* q = nullptr;       // [T, heads*head_dim]
  const float* sink = nullptr;    // [heads]
  // window: positions >= p0 come from chunk_kv row (pos - p0); positions < p0 from ring slot pos % R
  const float* chunk_kv = nullptr;  // [T, head_dim]
  const float* ring = nullptr;      // [R, head_dim]
  int window = 0;
  // R, the ring's slot count: 0 means R = window. R = window + K keeps the rows a speculative rollback of up
  // to K rejected positions needs (their writes land in slots of positions nobody reads again).
  int ring_rows = 0;
  // compressed branch (ratio 0 = none): entry j visible to position p iff j < (p+1)/ratio
  int ratio = 0;
  const float* pool = nullptr;      // [>= visible entries, head_dim]
  const int32_t* idx = nullptr;     // [T, k] selected entries (-1 = none), or nullptr = all visible
  int k = 0;
  // V4.1 numerics (official `sparse_attn`): the attended entries form one index list per query, window
  // first then compressed; the softmax runs online over blocks of 64 list slots (slots holding nothing
  // still take their place in a block); per block the running max is updated, p = exp(s - running max)
  // is summed in fp32 into the denominator and rounded to bf16 before P.V; the sink logit (unscaled)
  // enters the denominator at the end; the output is rounded to bf16.
  // Window part of the list, for the query at position t:
  //   p0 == 0 (prefill layout): min(T, window) slots, slot i = position max(0, t-window+1) + i, empty if > t;
  //   p0 >  0 (decode layout):  window slots, slot i = position t-window+1+i, empty if < 0.
  // (The reference only runs prefills at position 0 and one-token decodes; both layouts agree once
  // t >= window-1. A chunked prefill therefore reproduces the one-shot prefill exactly when its first chunk
  // has at least `window` rows or the window part fits one block with the compressed part.)
  // Compressed part: the idx row in its column order (the indexer emits it ascending, -1 padded), or every
  // visible entry ascending when idx is nullptr.
  bool numerics_v41 = false;
};

// out [T, heads*head_dim]: o_h = sum_j softmax_j([s_j..., sink_h]) kv_j, s_j = q_h . kv_j * scale.
// With numerics_v41 see above (q and kv should hold bf16 values, as in the reference).
void sparse_attention(const SparseAttentionArgs& a, float* out);

// ring[pos % R] = chunk_kv[pos - p0] for the chunk's last min(T, R) positions; R = ring_rows, or window if 0.
void window_kv_update(const float* chunk_kv, int rows, int head_dim, int64_t p0, float* ring, int window,
                      int ring_rows = 0);

}  // namespace smelt::kernels
