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

// ---- Both indexers split for tensor parallelism (smelt-partition): scores of a rank's heads, all_reduce, select --
struct IndexerScoresArgs {
  int rows = 0;
  int heads = 0;        // this rank's heads
  int head_dim = 0;
  int ratio = 0;
  int64_t p0 = 0;
  int64_t width = 0;    // S: the scores row (the index pool's rows)
  const float* q = nullptr;     // [rows, heads*head_dim], as indexer_topk / indexer_v41 take it
  const float* w = nullptr;     // [rows, heads]
  const float* keys = nullptr;  // index pool [>= visible entries, head_dim]
  bool v41 = false;
  int heads_total = 0;          // V4: the model's head count (its heads^-0.5 weight scale)
  bool model_numerics = true;   // V4.1: false = no bf16 roundings
};

// scores [rows, width]: entry j < visible gets this rank's partial sum over its heads, in head order: V4 the
// terms of indexer_topk (heads_total in the weight scale); V4.1 the bf16 terms of indexer_v41, the sum NOT rounded
// (the all_reduce rounds the total). Entries j >= visible are 0.
void indexer_scores(const IndexerScoresArgs& a, float* scores);

struct IndexerSelectArgs {
  int rows = 0;
  int ratio = 0;
  int topk = 0;
  int64_t p0 = 0;
  int64_t width = 0;              // S
  const float* scores = nullptr;  // [rows, width], the summed scores
  bool v41 = false;               // V4: best first (indexer_topk); V4.1: ascending, with the candidate level
  int candidate_blocks = 0;
  int candidate_block_size = 0;
  bool is_candidate_source = false;
  const int32_t* cand_in = nullptr;
};

// The selection of indexer_topk (V4) / indexer_v41 (V4.1) on given scores of the visible entries.
void indexer_select(const IndexerSelectArgs& a, int32_t* idx, int32_t* cand_out);

}  // namespace smelt::kernels
