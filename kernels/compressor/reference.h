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

}  // namespace smelt::kernels
