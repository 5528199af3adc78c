// Lightning indexer scoring and top-k (DeepSeek-V4 CSA layers).
#pragma once
#include <cstdint>

namespace smelt::kernels {

struct IndexerArgs {
  int rows = 0;
  int heads = 0;
  int head_dim = 0;
  int ratio = 0;
  int topk = 0;
  int64_t p0 = 0;
  const float* q = nullptr;     // [rows, heads*head_dim], RoPE applied
  const float* w = nullptr;     // [rows, heads], raw weights_proj output
  const float* keys = nullptr;  // index pool [>= visible entries, head_dim]
};

// score(j) = sum_h relu(q_h . k_j) * head_dim^-0.5 * w_h * heads^-0.5 over j < (p+1)/ratio; idx row gets
// the min(topk, visible) best entries (score descending, ties to the lower index), then -1 padding.
void indexer_topk(const IndexerArgs& a, int32_t* idx);

}  // namespace smelt::kernels
