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
};

// out [T, heads*head_dim]: o_h = sum_j softmax_j([s_j..., sink_h]) kv_j, s_j = q_h . kv_j * scale.
void sparse_attention(const SparseAttentionArgs& a, float* out);

// ring[pos % R] = chunk_kv[pos - p0] for the chunk's last min(T, R) positions; R = ring_rows, or window if 0.
void window_kv_update(const float* chunk_kv, int rows, int head_dim, int64_t p0, float* ring, int window,
                      int ring_rows = 0);

}  // namespace smelt::kernels
