// DeepSeek-V4.1 DSpark drafter (architecture spec §2.9; official inference code `DSparkAttention`,
// `DSparkMarkovHead`, `DSparkConfidenceHead`, `DSparkBlock.forward_head`, `get_dspark_topk_idxs`).
//
// The drafter is three stages `mtp.0..2`, each a V4.1 block (window-only attention, own MoE, own mHC) run on
// a block of B = dspark_block_size draft tokens [y_t, noise, ..., noise] at positions t+1 .. t+B, where y_t is
// the token the main model just produced at position t. What differs from a backbone block lives here:
// - attention: the B queries see the stage's window ring (main-model KV of positions <= t, slot p % W) plus
//   the B draft rows' own KV, with no causal mask inside the block;
// - the head: Markov logits bias and greedy sampling, one draft position after the other, and the
//   confidence head.
// Values are float32 buffers holding bf16 values where the reference holds bf16 (kernels/bf16.h).
#pragma once
#include <cstdint>

namespace smelt::kernels::dspark {

// ---- attention ----------------------------------------------------------------------------------------------

struct DraftAttentionArgs {
  int block = 0;  // B draft queries, at positions t+1 .. t+B (RoPE is the caller's)
  int heads = 0;
  int head_dim = 0;
  int64_t t = 0;                // position of the main model's newest token; the ring must already hold its KV
  float scale = 0.f;            // softmax scale (head_dim^-0.5)
  const float* q = nullptr;     // [B, heads*head_dim]
  const float* sink = nullptr;  // [heads]
  const float* ring = nullptr;  // [window, head_dim]: KV of position p in slot p % window
  int window = 0;
  const float* draft_kv = nullptr;  // [B, head_dim]: the draft rows' own K=V (RoPE'd, FP8 fake-quantized)
};

// out [B, heads*head_dim] (bf16 values). Every query attends to the same index list, the reference's
// `get_dspark_topk_idxs`: ring slots 0 .. min(window, t+1)-1 in slot order (not oldest first: the list order
// decides which entries share a 64-entry softmax block), then the B draft rows. The softmax numerics are the
// V4.1 `sparse_attention`'s (numerics_v41: online over blocks of 64 list entries, bf16 probabilities in P.V,
// unscaled sink, bf16 output); this function runs that kernel on the list as an explicit index set.
void draft_attention(const DraftAttentionArgs& a, float* out);

// ---- head ---------------------------------------------------------------------------------------------------

// Greedy pick: the largest logit, ties to the lower id (torch.argmax takes the first maximum). NaN never wins.
int32_t greedy(const float* logits, int vocab);

// Markov head of one draft position: e = embed[id] (rank values, bf16 in the checkpoint) and
// logits[v] += e . head[v] (fp32 GEMM over the rank; head is the bf16 weight promoted to fp32).
// e_out receives e (rank values) when not nullptr.
void markov_step(const float* embed, const float* head, int vocab, int rank, int32_t id, float* logits, float* e_out);

// Confidence of one draft position: proj . [x ; e] in fp32 (proj [dim + rank], the bf16 weight promoted).
float confidence(const float* proj, const float* x, int dim, const float* e, int rank);

struct DraftHeadArgs {
  int block = 0;  // B
  int vocab = 0;
  int dim = 0;
  int rank = 0;                         // dspark_markov_rank
  const float* markov_embed = nullptr;  // [vocab, rank]
  const float* markov_head = nullptr;   // [vocab, rank]
  const float* proj = nullptr;          // confidence_head.proj [1, dim + rank]
};

// The last stage's head after `logits = head(norm(x))`: for i = 0 .. B-1 in order, the Markov bias of
// out_ids[i] (out_ids[0] = input_id) is added to logits row i and out_ids[i+1] = greedy(logits row i);
// confidence[i] = proj . [x_i ; embed[out_ids[i]]].
// x [B, dim] (the collapsed stream, bf16 values), logits [B, vocab] fp32 updated in place (the Markov bias
// included, as the reference returns them), ids [B] = out_ids[1 .. B] (the drafts), conf [B].
void draft_head(const DraftHeadArgs& a, int32_t input_id, const float* x, float* logits, int32_t* ids, float* conf);

}  // namespace smelt::kernels::dspark
