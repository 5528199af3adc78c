#include "kernels/dspark/reference.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "frontends/error.h"
#include "kernels/attention/reference.h"
#include "kernels/common.h"

namespace smelt::kernels::dspark {

void draft_attention(const DraftAttentionArgs& a, float* out) {
  if (a.block <= 0 || a.heads <= 0 || a.head_dim <= 0 || a.window <= 0 || a.t < 0)
    throw Error("dspark draft_attention: bad shape (block, heads, head_dim, window > 0 and t >= 0 required)");
  const int hd = a.head_dim, B = a.block;
  const int n_ring = int(std::min<int64_t>(a.window, a.t + 1));  // slots holding positions <= t
  const int entries = n_ring + B;

  // The index list as one pool: ring slots 0 .. n_ring-1, then the draft rows; every query lists all of it.
  std::vector<float> pool(size_t(entries) * hd);
  std::memcpy(pool.data(), a.ring, sizeof(float) * size_t(n_ring) * hd);
  std::memcpy(pool.data() + size_t(n_ring) * hd, a.draft_kv, sizeof(float) * size_t(B) * hd);
  std::vector<int32_t> idx(size_t(B) * entries);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < entries; ++j) idx[size_t(i) * entries + j] = j;

  // The V4.1 kernel's compressed branch with ratio 1 and no window: query i sees pool entry j iff
  // j < p0 + i + 1, so p0 = entries - 1 makes every listed entry visible (the block has no causal mask).
  // Positions play no other part in the kernel (RoPE is applied by the caller).
  SparseAttentionArgs s;
  s.rows = B, s.heads = a.heads, s.head_dim = hd, s.p0 = entries - 1, s.scale = a.scale;
  s.q = a.q, s.sink = a.sink;
  s.window = 0;
  s.ratio = 1, s.pool = pool.data(), s.idx = idx.data(), s.k = entries;
  s.numerics_v41 = true;
  sparse_attention(s, out);
}

int32_t greedy(const float* logits, int vocab) {
  int32_t best = 0;
  for (int v = 1; v < vocab; ++v)
    if (logits[v] > logits[best] || (logits[best] != logits[best] && logits[v] == logits[v])) best = v;
  return best;
}

void markov_step(const float* embed, const float* head, int vocab, int rank, int32_t id, float* logits, float* e_out) {
  if (id < 0 || id >= vocab) throw Error("dspark markov_step: token id " + std::to_string(id) + " outside the vocab");
  const float* e = embed + int64_t(id) * rank;
  // F.linear in fp32 on the CPU: a BLAS sum of unknown blocking, within a few ulp of the closest float.
  for (int v = 0; v < vocab; ++v) logits[v] += detail::dot_exact(e, head + int64_t(v) * rank, rank);
  if (e_out) std::memcpy(e_out, e, sizeof(float) * size_t(rank));
}

float confidence(const float* proj, const float* x, int dim, const float* e, int rank) {
  // One fp32 dot over the concatenation [x ; e]: a single output, closest float to the exact sum.
  double s = 0.0;
  for (int d = 0; d < dim; ++d) s += double(proj[d]) * double(x[d]);
  for (int r = 0; r < rank; ++r) s += double(proj[dim + r]) * double(e[r]);
  return float(s);
}

void draft_head(const DraftHeadArgs& a, int32_t input_id, const float* x, float* logits, int32_t* ids, float* conf) {
  if (a.block <= 0 || a.vocab <= 0 || a.dim <= 0 || a.rank <= 0)
    throw Error("dspark draft_head: bad shape (block, vocab, dim, rank > 0 required)");
  std::vector<float> e(size_t(a.rank));
  int32_t prev = input_id;
  for (int i = 0; i < a.block; ++i) {
    float* row = logits + int64_t(i) * a.vocab;
    markov_step(a.markov_embed, a.markov_head, a.vocab, a.rank, prev, row, e.data());
    conf[i] = confidence(a.proj, x + int64_t(i) * a.dim, a.dim, e.data(), a.rank);
    prev = ids[i] = greedy(row, a.vocab);
  }
}

}  // namespace smelt::kernels::dspark
