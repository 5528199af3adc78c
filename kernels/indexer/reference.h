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

// ---- V4.1 (official inference code `Indexer.forward` + `select_candidate_blocks`) ---------------------
struct IndexerV41Args {
  int rows = 0;
  int heads = 0;
  int head_dim = 0;
  int ratio = 0;
  int topk = 0;
  int64_t p0 = 0;
  const float* q = nullptr;     // [rows, heads*head_dim], RoPE'd and FP4 fake-quantized (bf16 values)
  const float* w = nullptr;     // [rows, heads], bf16(weights_proj output) x head_dim^-0.5 x heads^-0.5, bf16
  const float* keys = nullptr;  // index pool of the key source [>= visible entries, head_dim]
  // Two-level top-k (0 = off). A candidate source writes cand_out; a consumer passes cand_in.
  int candidate_blocks = 0;
  int candidate_block_size = 0;
  bool is_candidate_source = false;
  const int32_t* cand_in = nullptr;  // [rows, candidate_blocks] block ids (-1 = none), or nullptr
  bool model_numerics = true;        // false: scores in fp32, no bf16 roundings
};

// Query at position p sees entries j < (p+1)/ratio. score(j) = bf16(sum_h bf16(relu(bf16(q_h . k_j)) * w_h)),
// heads summed in fp32 in head order; invisible entries -inf.
// Candidate source: block b's score = max over its entries; the block of the newest visible entry is
// forced to +inf; the min(candidate_blocks, blocks) best blocks (ties: lower block) whose score is > -inf
// are kept; cand_out row = their ids ascending, -1 padded (may be nullptr).
// Consumer (cand_in given): entries outside the listed blocks score -inf (they stay selectable, as in the
// reference, when fewer than k entries are finite).
// idx row: the k = min(topk, visible) largest scores over the visible entries (equal values: lower index
// first), sorted ascending, then -1 padding to topk.
void indexer_v41(const IndexerV41Args& a, int32_t* idx, int32_t* cand_out);

}  // namespace smelt::kernels
