// How the tensor-core decode GEMVs (kernels/linear/gemv_mma.cuh) split K over the 8 warps of a block, and the shared
// memory they take: one copy for the launcher (runtime/cuda/ops_mma.cc) and the GPU tests / bench that launch the
// same shapes.
#pragma once
#include <algorithm>
#include <cstdint>

namespace smelt::runtime::cuda {

// gemv_mma.cuh mma_smem_bytes: rows_staged rows of K staged f16 values (2 K + 64 bytes each), the scales [K/32][8],
// the K-split partials, then the 8 warps' weight rings (ring_bytes: SMELT_MMA_RING_BYTES, 8192 unless a plan-time
// define says otherwise) and scale bytes (FP8 scales, the FP4 scale ring: at least 256 a warp).
inline unsigned mma_smem_bytes(int K, int rows_staged, int ring_bytes = 8192) {
  const int scale_stride = std::max((2 * (K / 32) + 15) / 16 * 16, 256);  // gemv_mma.cuh mma_scale_stride
  return unsigned(rows_staged * (2 * K + 64) + (K / 32) * 8 * 4 + 8 * 4 * 32 * 4 + 8 * (ring_bytes + scale_stride));
}

// Ring bytes a warp of the FP4 wgmma kernels uses: D stages of tpw x 256 bytes (gemv_mma.cuh MmaSegment: at most
// pair_stages for two matrices, 16 otherwise).
inline int mma_wg_ring_bytes(int tpw = 2, int ring_bytes = 8192, int pair_stages = 8) {
  return std::min(ring_bytes, tpw * 256 * (tpw == 2 ? pair_stages : 16));
}

// Shared memory of the FP4 wgmma up (kernels/moe/moe_mma.cu *_fp4_wgmma*, up_mma_body's POS): its one row in the
// column-pair layout (gemv_mma.cuh kStageE4m3Pos: two planes of 384 bytes per 4 blocks and one group more, in rows of
// 2 K + 64 bytes) beside rings of the stages the FP4 pair uses (min(ring, 512 x pair stages) a warp).
inline unsigned mma_wg_up_smem(int K, int ring_bytes = 8192, int pair_stages = 8) {
  const int bytes = 2 * 384 * ((K / 32 + 2) / 4 + 1), rows = (bytes + 2 * K + 63) / (2 * K + 64);
  // at least the one-row layout's, which the kernel takes when built with SMELT_MMA_WG_POS=0
  return std::max(mma_smem_bytes(K, rows, mma_wg_ring_bytes(2, ring_bytes, pair_stages)), mma_smem_bytes(K, 1, ring_bytes));
}

// The slots a group of tpg tiles (8 / K split) of the weight-only ring down can span, tps tiles a slot (moe_mma.cu
// down_mma_body's `span`: it stages two rows, hi and lo, for each).
inline int mma_wo_down_span(int topk, int tps, int tpg) {
  const int span = (tpg + tps - 2) / tps + 1;
  return span < topk ? span : topk;
}

// Blocks of a persistent grid that a split S needs: 8 / S tiles (16 columns each) a block.
inline int64_t mma_groups(int64_t tiles, int S) { return (tiles * S + 7) / 8; }

// K segments per 16-column tile (1, 2, 4 or 8 warps of a block) for a grid of `blocks` (2 an SM), nb K-blocks of 32:
// the largest split whose groups all run in one round of the persistent grid, keeping >= 4 blocks of 32 per segment
// (a second round of a few groups cost as much as the first: session 6). The sweep of every split alone (session 9)
// found larger splits faster for wo_b (8 vs 4) and the Engram projection (4 vs 1); a rule taking them measured
// slower inside the decode step (1.442 vs 1.429 ms, two runs each, session 10: docs/performance.md), so the
// one-round rule stays.
inline int mma_ksplit(int64_t tiles, int nb, unsigned blocks) {
  int S = 1;
  while (S < 8 && mma_groups(tiles, 2 * S) <= int64_t(blocks) && nb / (2 * S) >= 4) S *= 2;
  return S;
}

// The FP4 experts on wgmma (kernels/moe/moe_mma.cu *_fp4_wgmma, sm_90): a tile is 64 x tpw rows walked by a
// warpgroup, two warpgroups a block, so a tile counts as 4 of the 16-row warp tiles above and K splits at most in 2.
inline int64_t mma_wg_tiles(int64_t slots, int64_t rows, int tpw) { return slots * ((rows + 64 * tpw - 1) / (64 * tpw)); }
inline int mma_wg_ksplit(int64_t wg_tiles, int nb, unsigned blocks) {
  const int S = mma_ksplit(4 * wg_tiles, nb, blocks);
  return S < 2 ? S : 2;
}
inline int64_t mma_wg_groups(int64_t wg_tiles, int S) { return (wg_tiles * S + 1) / 2; }

// The one-row FP8 linears on wgmma (kernels/linear/linear_mma.cu smelt_gemv_fp8_wgmma, sm_90): 64-row tiles, two
// warpgroups a block. S = 1: two tiles a block, while that fills the grid; else the largest even S <= smax whose
// tiles x S / 2 blocks fit in one round and leave >= 8 blocks of 32 a segment, S / 2 blocks a tile past S = 2 (their
// partials added by the tile's last block). smax 8: the step (H200, V4.1 slice) 1.089-1.092 ms at 16, 1.078-1.079 at
// 8, 1.079-1.085 at 4, 1.131 at 2 (no cross-block split), 1.098-1.101 on the mma.sync kernel.
inline int64_t mma_wg_linear_tiles(int64_t N) { return (N + 63) / 64; }
inline int mma_wg_linear_ksplit(int64_t tiles, int nb, unsigned blocks, int smax = 8) {
  int S = 1;
  for (int s = 2; s <= smax; s += 2)
    if (tiles * s / 2 <= int64_t(blocks) && nb / s >= 8) S = s;
  return S;
}
inline int64_t mma_wg_linear_groups(int64_t tiles, int S) { return S == 1 ? (tiles + 1) / 2 : tiles * (S / 2); }
// The zeroed memory's layout: the tiles' counts (a word each, padded to 256 bytes), then their partials (SX = S / 2
// of 64 floats a tile) from this offset.
inline uint64_t mma_wg_linear_partials_offset(int64_t tiles) { return (uint64_t(tiles) * 4 + 255) / 256 * 256; }
// Zeroed bytes the split needs; 0 at S <= 2.
inline uint64_t mma_wg_linear_zeroed_bytes(int64_t tiles, int S) {
  return S <= 2 ? 0 : mma_wg_linear_partials_offset(tiles) + uint64_t(tiles) * uint64_t(S / 2) * 64 * 4;
}

}  // namespace smelt::runtime::cuda
