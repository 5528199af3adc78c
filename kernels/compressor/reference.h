// KV compressor of DeepSeek-V4 CSA (ratio 4, overlapping windows) and HCA (ratio 128) layers, and of the
// V4 indexer's key side. Emits one compressed entry per completed window of `ratio` positions.
#pragma once
#include <cstdint>

namespace smelt::kernels {

struct CompressorArgs {
  int ratio = 0;
  int head_dim = 0;
  bool overlap = false;          // c = 2: entry j mixes window j-1's first half and window j's second half
  int in_dim = 0;
  const float* wkv = nullptr;    // [c*head_dim, in_dim]
  const float* wgate = nullptr;  // [c*head_dim, in_dim]
  const float* ape = nullptr;    // [ratio, c*head_dim] position bias added to gate scores
  const float* norm = nullptr;   // [head_dim]
  float eps = 1e-6f;
  int rope_dim = 0;
  const float* inv_freq = nullptr;  // rope_dim/2 (compress table)
  // Slot count R of `ring`: 0 means 2*ratio. R = 2*ratio + K survives a speculative rollback of K positions.
  int ring_rows = 0;
};

// x [rows, in_dim] at positions p0 .. p0+rows-1. `ring` [R, 2*c*head_dim] holds projected rows (kv then
// gate, ape not added) of earlier positions at slot pos % R and is updated here.
// Every entry j completed inside the chunk is written to pool row j (pool_capacity rows; overflow is a
// caller error checked by the runtime).
void compressor(const CompressorArgs& a, const float* x, int rows, int64_t p0, float* ring, float* pool,
                int64_t pool_capacity);

// ---- V4.1 (official inference code `Compressor` + the index-key half of `Indexer`) ------------------
// `smelt.kv_compressor`: ratio 2 (softmax-gated pooling of 2 tokens, fp32) or ratio 1 (one token per
// entry, bf16 projection), no position bias, no overlap. Entry j covers positions j*ratio .. j*ratio+ratio-1
// and is emitted when its last position is in the chunk.
struct KvCompressorV41Args {
  int ratio = 0;                  // 1 or 2
  int head_dim = 0;               // hd (latent width)
  int index_head_dim = 0;         // dI (index key width), when wk is given
  int rope_dim = 0;               // rotated tail of both the latent and the index key
  int in_dim = 0;                 // D
  const float* wkv = nullptr;     // [hd, D]
  const float* wgate = nullptr;   // [hd, D] (ratio 2), nullptr for ratio 1
  const float* norm = nullptr;    // [hd]
  const float* wk = nullptr;      // [dI, hd] or nullptr: no index keys (index_pool untouched)
  const float* k_norm = nullptr;  // [dI]
  float eps = 1e-20f;
  const float* inv_freq = nullptr;  // rope_dim/2, the compress table (rope_inv_freq_v41)
  // Slot count R of `ring` for ratio 2: 0 means R = ratio. R = ratio + K survives a rollback of K positions.
  int ring_rows = 0;
  // false (smelt-numerics{mode=fp32}): none of the bf16 roundings and FP4 fake quants below, all fp32.
  bool model_numerics = true;
};

// x [rows, D] (bf16 values) at positions p0 .. p0+rows-1.
// ratio 2: per position kv = x wkv^T and g = x wgate^T in fp32; `ring` [R, 2*hd] keeps them (kv then g)
//   at slot pos % R for groups completed in a later chunk. Entry j: w = softmax over the 2 tokens per
//   channel (max, exp, sum, divide), latent = bf16(kv0*w0 + kv1*w1), latent = bf16(rms_norm(latent; norm)).
// ratio 1: latent = bf16(rms_norm(bf16(x wkv^T); norm)); ring unused (may be nullptr).
// Index key (wk given): k = bf16(rms_norm(bf16(latent wk^T); k_norm)), RoPE on its last rope_dim at position
//   j*ratio rounded to bf16, FP4 fake quant (E2M1, groups of 32, power-of-two scales) -> index_pool row j.
// Compressed KV: latent with RoPE at position j*ratio rounded to bf16, FP4 fake quant (groups of 16, E4M3
//   scales) -> pool row j.
// The reference's prefill (one call at position 0) and decode (one token, kv_state/score_state slots) run
// the same per-entry math, so any chunking gives the same pool rows. capacity = rows of pool/index_pool.
void kv_compressor_v41(const KvCompressorV41Args& a, const float* x, int rows, int64_t p0, float* ring, float* pool,
                       float* index_pool, int64_t capacity);

}  // namespace smelt::kernels
