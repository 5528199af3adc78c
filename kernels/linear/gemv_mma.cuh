// Decode (1..8 rows) act-quant GEMVs on FP8 tensor cores (sm_89+), shared by the linear and MoE kernels.
//
// The CUDA-core kernels (gemv_aq.cuh) compute every 32-block sum exactly, ~4-6 instructions per weight: at
// decode that, not memory, bounds them. Here tensor-core MMAs give the block sums of 16 weight rows (output columns)
// x 8 token rows at once: the E4M3 activation codes are staged as f16 (exact), the weights become f16 in registers
// (E4M3 by cvt, exact; E2M1 nibbles by shifts and masks as f16 * 2^-14, exact) and two m16n8k16 f16 MMAs with fp32
// accumulation sum a 32-block (sm_90 has no E4M3 mma.sync of its own: ptxas turned one into these same f16
// conversions and HMMAs, plus conversions of the activations every block and an add of C). The hardware's
// accumulation inside the instruction is not guaranteed exact, so the results are within a tolerance of the exact
// kernels, not bit for bit (docs/performance.md "Tensor-core decode"). Everything else is the exact kernels'
// arithmetic: the same act quant codes and scales, term = (bsum * x scale) * w scale, terms folded in K order in
// fp32.
//
// Operands (swap AB): A = 16 weight rows x 16 k, B = 16 k x 8 n with n = token row (n >= rows: 0). Fragments of
// m16n8k16 (PTX ISA, f16), g = lane / 4, tig = lane % 4: a0 row g, k tig*2, tig*2 + 1; a1 row g + 8; a2 row g,
// k 8 + tig*2 ..; a3 row g + 8; b0 k tig*2 .., n g; b1 k 8 + tig*2 ..; c0, c1 (row g, n tig*2, tig*2 + 1), c2, c3
// (row g + 8). A block sum does not care which k pairs with which as long as A and B agree: a lane holds the 8
// contiguous weights tig*8 .. tig*8 + 7 of rows g and g + 8 of the block and the 8 activations at the same k of
// token row g, paired (0,1) (2,3) | (4,5) (6,7) for FP8 (MMA 0 | MMA 1) and (0,4) (1,5) | (2,6) (3,7) for FP4
// (the pairs wo_e2m1_pairs makes), the activations staged in that order for the FP4 kernels (mma_stage_quant<kStageF16Paired>).
//
// K may be split into S segments over the warps of a block: each warp folds its segment in K order from 0, the
// segment partials are added in segment order (deterministic; differs from one fold by fp32 rounding only).
#pragma once
#include "kernels/linear/gemv_aq.cuh"      // prmt
#include "kernels/linear/gemv_wo_mma.cuh"  // wo_mma, wo_e2m1_pairs

namespace smelt_dev {

constexpr int kMmaWarps = 8;  // block of 256 threads

// Tuning knobs, plan-time defines (NVRTC -D); the defaults are what the runtime launches (runtime/cuda/ops_mma.cc
// sizes the shared memory with the same ring bytes). tests/kernels_cuda/bench_mma_gemv.cc times other values.
#ifndef SMELT_MMA_RING_BYTES
// weight ring of a warp (4096 measures the same over the decode shapes: tests/kernels_cuda/bench_mma_gemv.cc)
#define SMELT_MMA_RING_BYTES 8192
#endif
#ifndef SMELT_MMA_MIN_BLOCKS
#define SMELT_MMA_MIN_BLOCKS 2  // __launch_bounds__ blocks per multiprocessor (sets the register budget)
#endif
#ifndef SMELT_MMA_PROBE
#define SMELT_MMA_PROBE 0  // timing probes of the FP4 wgmma ring (tests/kernels_cuda/bench_mma_gemv "wgp*"): wrong sums
// (1: the ring alone; 2: + conversions and wgmmas, no fold; 3: + conversions and folds, no wgmmas; 4: as 2 with each
// wgmma's result read by one add; 5: everything but the weight scales' loads and decode)
#endif
#ifndef SMELT_MMA_WG_POS
// the FP4 wgmma up's blocks in column pairs, four a chain in 1 or 2 accumulators (run_wg_pos); 0: one block a fold
// (run_wg). Off by default: 1.1 us faster alone, but the step 6-12 us slower on an H100 (docs/performance.md "Session 33")
#define SMELT_MMA_WG_POS 0
#endif
#ifndef SMELT_MMA_WG_POS_DOWN
// the same for the FP4 wgmma down, where a block stages only its one group's slots and they fit the one-row layout's
// rows (kernels/moe/moe_mma.cu down_mma_body); 1 or 2 accumulators; off by default as the up's
#define SMELT_MMA_WG_POS_DOWN 0
#endif
#ifndef SMELT_MMA_HL_CHAIN
// the weight-only FP4 ring's blocks (the sm_80 path's experts) four a chain on mma.sync, in 1 or 2 accumulators
// (MmaSegment::run_hl_chain); 0: one block a fold (run)
#define SMELT_MMA_HL_CHAIN 2
#endif
#ifndef SMELT_MMA_AQ_CHAIN
#define SMELT_MMA_AQ_CHAIN 2  // the same for the act-quant FP4 ring on mma.sync (sm_89 / sm_120 experts)
#endif
#ifndef SMELT_MMA_FP4_SMEM_SCALES
#define SMELT_MMA_FP4_SMEM_SCALES 1  // FP4 scale words by cp.async through shared memory (MmaSegment::sc_smem_)
#endif
#ifndef SMELT_MMA_GROUP
#define SMELT_MMA_GROUP 4  // blocks consumed per cp.async wait
#endif
#ifndef SMELT_MMA_L2PF
// L2 prefetch hint of the weight copies in bytes (0: none; 64, 128, 256). 128: the step's GEMVs 631.7 -> 617.1 us
// (tile order), 691.7 -> 680.9 (row-major); 256 slower (H200, tests/kernels_cuda/bench_mma_gemv.cc).
#define SMELT_MMA_L2PF 128
#endif
#ifndef SMELT_MMA_FP4_PAIR_STAGES
// ring stages of the two-matrix FP4 segment (the experts' gate and up): its block scales ride in registers, a u32
// a stage
#define SMELT_MMA_FP4_PAIR_STAGES 8
#endif
#ifndef SMELT_MMA_WO_PAIR_STAGES
// the same for the weight-only ring's two-matrix FP4 segments (pair order: the gate + up, the down's two tiles a warp;
// 8 or 16: its launches size the whole 8 KB ring)
#define SMELT_MMA_WO_PAIR_STAGES SMELT_MMA_FP4_PAIR_STAGES
#endif
#ifndef SMELT_MMA_FULL_GROUPS
// a group of blocks wholly inside the segment consumed without a bound check per block, so that the compiler can
// interleave their loads, conversions and MMAs (with a check between blocks each block's two HMMAs and fold ran
// serially: Nsight Compute showed the FP8 GEMV loop stalled on fixed-latency waits)
#define SMELT_MMA_FULL_GROUPS 1
#endif
#ifndef SMELT_MMA_TPW
#define SMELT_MMA_TPW 1  // 16-row matrices a warp of the linear GEMV walks at once (1 or 2)
#endif
#ifndef SMELT_MMA_DOWN_TPW
// the same for the experts' down projection: 2 (FP4 routed down 28.5 -> 22.5 us, FP8 shared down 7.9 -> 7.3 us a
// layer, tests/kernels_cuda/bench_mma_gemv.cc; runtime/cuda/ops_mma.cc counts tiles with it)
#define SMELT_MMA_DOWN_TPW 2
#endif
constexpr int kMmaRingBytes = SMELT_MMA_RING_BYTES;  // per warp

// wgmma (sm_90a: the compiler builds sm_90 cubins for sm_90a, compiler/cuda/nvrtc.cc; PTX and other archs have none).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SMELT_WGMMA 1
#else
#define SMELT_WGMMA 0
#endif

// Eight E2M1 nibbles (k 0..7 of a row: byte j holds k 2j low, 2j + 1 high) -> E4M3 codes of their values * 2^-6, lo =
// k 0, 2, 4, 6 and hi = k 1, 3, 5, 7 (byte j each). Exact: a nibble's three magnitude bits, moved to bits 2-4 of a
// byte, are the E4M3 exponent's low two bits and the first mantissa bit (value * 2^-6, subnormals included) and its
// sign goes to bit 7 (the high nibbles' sign is already there). Seven instructions for eight values, where the f16
// pairs cost four for two.
__device__ __forceinline__ void e2m1x8_e4m3(u32 w, u32& lo, u32& hi) {
  lo = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);
  hi = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
}

#if SMELT_WGMMA
// Shared-memory matrix descriptor of a wgmma B operand (K-major, no swizzle) for a block of 32 activations staged at
// smem address a as two columns: core matrices of 8 columns x 16 bytes, column n at + 16 n; k 0..15 of columns 0, 1
// at a, a + 16, k 16..31 at a + 32, a + 48 (the second core matrix at + 32: both byte offsets 32, so either reading
// of which offset is the k step gives the same). Columns 2..7 read the bytes after (their sums are unused).
// Why two columns: Hopper's FP8 tensor cores add a column's 32 products at about 14 bits aligned to the largest, so
// next to an outlier activation the small products lost their low bits (ops of the V4.1 tiny backbone differed from
// the exact sums by up to 4% of their scale); codes with |x| >= 2 go to column 0, the others to column 1, each summed
// against its own largest product, and the block sum is column 0 + column 1.
// The descriptor's low word (start address / 16, the first offset); the high word is the second offset (2). The next
// block (+ 64 bytes) is lo + 4: the start field (14 bits, shared memory < 256 KB) never carries.
__device__ __forceinline__ u32 wgmma_desc_col01_lo(u32 a) { return ((a & 0x3FFFFu) >> 4) | (2u << 16); }
__device__ __forceinline__ u64 wgmma_desc(u32 lo, u32 hi = 2u) {
  u64 d;
  asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo), "r"(hi));
  return d;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Until at most N committed groups of this warp's wgmmas are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// d = A . B for a 64 x 32 E4M3 A from registers (this warp's 16 rows: a0 row g, k 4 tig ..; a1 row g + 8; a2 row g,
// k 16 + 4 tig ..; a3 row g + 8) and B 32 x 8 at desc; fp32 result, issued asynchronously (wgmma_wait, then
// wgmma_ready on d).
#define SMELT_WGMMA_E4M3_64X8X32                        \
  "{ .reg .pred p; setp.ne.b32 p, %9, 0;\n"            \
  "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 " \
  "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1; }"
__device__ __forceinline__ void wgmma_e4m3_64x8x32(float* d, const u32* a, u64 desc) {
  asm volatile(SMELT_WGMMA_E4M3_64X8X32
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(0)
               : "memory");
}
// The same, d += A . B (a chain of wgmmas into one accumulator: scale-d 1).
__device__ __forceinline__ void wgmma_e4m3_64x8x32_acc(float* d, const u32* a, u64 desc) {
  asm volatile(SMELT_WGMMA_E4M3_64X8X32
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1)
               : "memory");
}
// After wgmma_wait: d is read only from here on (the compiler sees the registers change here, after the wait).
__device__ __forceinline__ void wgmma_ready(float& d) { asm volatile("" : "+f"(d)::"memory"); }
#endif

// Byte stride of a staged row (K activation codes as f16, 2 bytes each): + 64 so that the 8 token rows' 16-byte
// loads of one block (lanes g, tig at g * stride + tig * 16) fall on distinct banks. K % 32 == 0.
__host__ __device__ constexpr int mma_x_stride(int K) { return 2 * K + 64; }

// Dynamic shared memory: rows_staged code rows, scales [K/32][8], K-split partials [warps][4][32], then the warps'
// weight rings (kMmaRingBytes each, 16-byte aligned: everything before is a multiple of 32 bytes), then the warps'
// FP8 weight-scale bytes (two matrices x K/32 blocks each, mma_scale_stride).
__host__ __device__ constexpr int mma_ring_offset(int K, int rows_staged) {
  return rows_staged * mma_x_stride(K) + (K / 32) * 8 * 4 + kMmaWarps * 4 * 32 * 4;
}
// At least kMmaScaleMin: the FP4 scale ring in shared memory (MmaSegment::kSmemScales) uses the same area.
constexpr int kMmaScaleMin = 256;
__host__ __device__ constexpr int mma_scale_stride(int K) {
  return (2 * (K / 32) + 15) / 16 * 16 > kMmaScaleMin ? (2 * (K / 32) + 15) / 16 * 16 : kMmaScaleMin;
}
__host__ __device__ constexpr int mma_smem_bytes(int K, int rows_staged, int ring_bytes = kMmaRingBytes) {
  return mma_ring_offset(K, rows_staged) + kMmaWarps * (ring_bytes + mma_scale_stride(K));
}


// Traps unless the launch's dynamic shared memory covers mma_smem_bytes(K, rows_staged): the runtime sizes it with
// its own copy of the ring size (runtime/cuda/ops_mma.cc), and a mismatch would overrun shared memory silently.
__device__ __forceinline__ void mma_check_smem(int K, int rows_staged, int ring_bytes = kMmaRingBytes) {
  unsigned dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  if (unsigned(mma_smem_bytes(K, rows_staged, ring_bytes)) > dyn) __trap();
}

// E4M3 code of x: round to nearest even, saturating to +-448 (sm_89+: the kernels trap below).
__device__ __forceinline__ u8 e4m3_cvt(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short h;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.f), "f"(x));
  return u8(h);
#else
  return e4m3_encode(clampf(x, -448.f, 448.f));
#endif
}

// Four E4M3 codes (bytes 0..3 of v, no NaN) -> their f16 values as pairs (c0, c1) and (c2, c3), exact. sm_89+.
__device__ __forceinline__ void e4m3x4_f16(u32 v, u32& lo, u32& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }"
      : "=r"(lo), "=r"(hi)
      : "r"(v));
#else
  lo = hi = 0u;
  __trap();
#endif
}

// f16 pairs (x0,x1) (x2,x3) (x4,x5) (x6,x7) -> (x0,x4) (x1,x5) (x2,x6) (x3,x7): the B operand of the FP4 path, paired
// as wo_e2m1_pairs pairs the weights' nibbles.
__device__ __forceinline__ void f16x8_repair(uint4 x, u32* b) {
  b[0] = prmt(x.x, x.z, 0x5410u), b[1] = prmt(x.x, x.z, 0x7632u);
  b[2] = prmt(x.y, x.w, 0x5410u), b[3] = prmt(x.y, x.w, 0x7632u);
}

// Staging of the activation codes (mma_stage_quant's Mode): f16 values in k order (the FP8 MMAs), f16 values paired as
// the FP4 nibbles pair (the FP4 f16 MMAs), or the E4M3 codes themselves, each block's even k then its odd k (the
// wgmma FP4 path: e2m1x8_e4m3's lo / hi words, split by magnitude into two columns; 64 bytes a block).
// kStageE4m3SplitK: the same columns for the FP8 weights on wgmma (MmaSegment::run_wg8), whose A fragments are the
// ring's bytes as they are: a lane's 8 codes k 8 tig .. 8 tig + 7 of a row are the MMA's k 4 tig .. 4 tig + 3 and
// 16 + 4 tig .., so the block's k 8i .. 8i + 3 go first and k 8i + 4 .. 8i + 7 after.
constexpr int kStageF16 = 0, kStageF16Paired = 1, kStageE4m3Split = 2, kStageE4m3SplitK = 3, kStageE4m3Pos = 4;

// kStageE4m3Pos (MmaSegment::run_wg_pos): block b's codes (kStageE4m3Split's two columns) at column pair p = b % 4
// of a wgmma B operand whose other six columns read zeros, so that four consecutive blocks' wgmmas can add into one
// accumulator, each block's sums in its own column pair. A B operand is two core matrices (k 0..15, k 16..31) of 8
// columns x 16 bytes; here the second lies a plane after the first (the descriptor's offsets: mma_pos_plane), so a
// row is two planes, k 0..15 of every block in the first. In a plane, per 4 blocks (384 bytes, 24 slots of 16 bytes),
// the core matrices of p = 0..3 start at slots 0, 6, 10, 16 with their two data slots at 0, 8, 14, 22: no core matrix
// holds another's data, and the slots between hold zeros. One group more than the blocks fill (zeros) for the blocks
// past the row that a chain also runs (not folded).
__host__ __device__ constexpr int mma_pos_plane(int K) { return 384 * ((K / 32 + 2) / 4 + 1); }
__host__ __device__ constexpr int mma_pos_bytes(int K) { return 2 * mma_pos_plane(K); }
// Staged rows of mma_x_stride(K) bytes that hold one such row (what the launcher sizes shared memory with).
__host__ __device__ constexpr int mma_pos_rows(int K) { return (mma_pos_bytes(K) + 2 * K + 63) / (2 * K + 64); }
// Block b's data offset in a plane / the 16-byte start of its core matrix there.
__host__ __device__ constexpr int mma_pos_data(int b) { return 384 * (b >> 2) + 16 * ((0x160E0800u >> (8 * (b & 3))) & 0xFF); }
__host__ __device__ constexpr int mma_pos_start16(int b) { return 24 * (b >> 2) + ((0x100A0600u >> (8 * (b & 3))) & 0xFF); }

// mma_stage_quant's stores of one block's 32 codes w (4 a word, k order) at dst: kStageE4m3Split(K) ...
template <bool KHalves = false>
__device__ __forceinline__ void mma_stage_e4m3_split(const u32* w, u8* dst_bytes, int half1 = 32) {
  // k 8i .. 8i + 7 are w[2i], w[2i + 1]: their even k to slots 4i .. 4i + 3, their odd k to 16 + 4i .. (KHalves:
  // w[2i] to slots 4i .., w[2i + 1] to 16 + 4i ..); each code in column 0 when |x| >= 2 (E4M3 exponent field >= 8:
  // bit 6), else in column 1, the other column 0. Columns: wgmma_desc_col01_lo's layout, 64 bytes a block.
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // evens, odds (KHalves: first, second four of each 8)
    const u32 sel = h ? 0x7531u : 0x6420u;
    u32 hi[4], lo[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const u32 c = KHalves ? w[2 * i + h] : prmt(w[2 * i], w[2 * i + 1], sel), big = ((c >> 6) & 0x01010101u) * 0xFFu;
      hi[i] = c & big, lo[i] = c & ~big;
    }
    uint4* d = reinterpret_cast<uint4*>(dst_bytes + h * half1);  // k 0..15, then k 16..31 at + half1
    d[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    d[1] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
}
// ... and kStageF16 / kStageF16Paired.
template <bool Paired>
__device__ __forceinline__ void mma_stage_f16(const u32* w, u8* dst_bytes) {
  u32 h[16];
#pragma unroll
  for (int i = 0; i < 8; ++i) e4m3x4_f16(w[i], h[2 * i], h[2 * i + 1]);
  uint4* dst = reinterpret_cast<uint4*>(dst_bytes);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 q = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
    if (Paired) {
      u32 f[4];
      f16x8_repair(q, f);
      dst[i] = make_uint4(f[0], f[1], f[2], f[3]);
    } else {
      dst[i] = q;
    }
  }
}

// The 32 floats of a staging unit at p (vec: p is 16-byte aligned).
__device__ __forceinline__ void mma_load_block32(const float* p, bool vec, float* v) {
  if (vec) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 f = reinterpret_cast<const float4*>(p)[i];
      v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = p[i];
  }
}

// Act quant of `rows` rows of x (contiguous, K floats each) per token in K-blocks of 32, exactly as
// gemv_stage_quant / smelt_act_quant_b32 (same scales, same codes), staged as the codes' f16 values (exact) at
// xq[r * stride + 2 k] (the MMAs' B operand needs no conversion per block) and scales xsc[b * 8 + r]. NaN codes are
// staged as 0 (e4m3_units gives them 0 in the exact kernels). kStageF16Paired: each 8 codes staged in the order the
// FP4 weights' nibbles pair, (x0,x4) (x1,x5) (x2,x6) (x3,x7) (f16x8_repair's, once here instead of every block of
// every tile). kStageE4m3Split: the codes as bytes, block b at xq[r * stride + 64 b] in two columns by magnitude
// (wgmma_desc_col01_lo). Call with all threads; synchronises.
template <int Mode>
__device__ __forceinline__ void mma_stage_quant(const float* x, int rows, int K, u8* xq, int stride, float* xsc) {
  // A thread per 32-block (not a warp with shuffles): the staging sits before every block's first MMA, and the
  // serial warp version cost ~70 dependent instructions per block (Nsight Compute). The maximum of |x| is the same
  // whatever the order (fmaxf drops NaN until all are NaN), so the scales and codes are unchanged.
  const int nb = K / 32, units = rows * nb;
  const bool vec = (reinterpret_cast<u64>(x) & 15) == 0;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {  // unit u = row u / nb, block u % nb (rows contiguous)
    float v[32];
    mma_load_block32(x + i64(u) * 32, vec, v);
    float amax = fabsf(v[0]);
#pragma unroll
    for (int i = 1; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const ActScale a = act_scale(amax);
    if (a.pow2) {
#pragma unroll
      for (int i = 0; i < 32; ++i) v[i] = __fmul_rn(v[i], a.inv);
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) v[i] = __fdiv_rn(v[i], a.s);
    }
    u32 w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      // cvt.rn.satfinite: round to nearest even, saturating to +-448: e4m3_encode(clampf(q, -448, 448)) in one
      // instruction (NaN gives a NaN code, staged as 0).
      const u32 c = u32(e4m3_cvt(v[4 * i])) | (u32(e4m3_cvt(v[4 * i + 1])) << 8) | (u32(e4m3_cvt(v[4 * i + 2])) << 16) |
                    (u32(e4m3_cvt(v[4 * i + 3])) << 24);
      w[i] = e4m3x4_nan_to_zero(c);
    }
    const int r = u / nb, b = u - r * nb;
    xsc[b * 8 + r] = a.s;
    if constexpr (Mode == kStageE4m3Pos) {
      u8* row = xq + r * stride;
      const int p = b & 3, d = mma_pos_data(b), plane = mma_pos_plane(K);
      mma_stage_e4m3_split(w, row + d, plane);
      // zeros after the data in both planes, up to the next block's (p 0: 6 slots, 1: 4, 2: 6, 3: none); the row's
      // last block to the plane's end
      const int z1 = b == nb - 1 ? plane : d + 32 + 16 * ((0x00060406u >> (8 * p)) & 0xFF);
      for (int o = d + 32; o < z1; o += 16) {
        *reinterpret_cast<uint4*>(row + o) = make_uint4(0u, 0u, 0u, 0u);
        *reinterpret_cast<uint4*>(row + plane + o) = make_uint4(0u, 0u, 0u, 0u);
      }
    } else if constexpr (Mode == kStageE4m3Split) mma_stage_e4m3_split(w, xq + r * stride + b * 64);
    else if constexpr (Mode == kStageE4m3SplitK) mma_stage_e4m3_split<true>(w, xq + r * stride + b * 64);
    else mma_stage_f16<Mode == kStageF16Paired>(w, xq + r * stride + b * 64);
  }
#if SMELT_WGMMA
  // wgmma reads its B operand through the async proxy: these generic-proxy stores must be made visible to it.
  if constexpr (Mode == kStageE4m3Split || Mode == kStageE4m3SplitK || Mode == kStageE4m3Pos)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
  __syncthreads();
}


// The weight-only (sm_80 path) staging of `rows` rows of x (contiguous, K floats each) for the FP4 ring
// (MmaSegment::run with HL): wo_stage's numbers (gemv_wo_mma.cuh: per 32-block a power of two 2^s puts the largest
// finite |x| in [2^14, 2^15), hi = f16(x 2^s), lo = f16(x 2^s - hi), inf / NaN in hi with lo 0), laid out as
// in the pairs the weights' decode makes (FP4: kStageF16Paired's (k, k + 4); FP8: wo_e4m3_pairs' (0,2) (1,3) (4,6)
// (5,7) of each 8): row r's hi values at xq + 2r * stride, its lo values at xq + (2r + 1) * stride (the MMA's token
// columns 0 and 1), the factor 2^-s at xsc[b * 8 + r] (r < 8). A thread per 32-block; call with all threads;
// synchronises.
template <bool FP4>
__device__ __forceinline__ void mma_stage_wo(const float* x, int rows, int K, u8* xq, int stride, float* xsc) {
  const int nb = K / 32, units = rows * nb;
  const bool vec = (reinterpret_cast<u64>(x) & 15) == 0;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    float v[32];
    mma_load_block32(x + i64(u) * 32, vec, v);
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fabsf(v[i]) <= 3.402823466e38f ? fmaxf(amax, fabsf(v[i])) : amax;
    // s = 14 - floor(log2 amax), at most 126 (zero / tiny blocks): 2^s and 2^-s are normal floats.
    const int e = amax > 0.f ? int((__float_as_uint(amax) >> 23) & 0xFF) - 127 : -112;
    const int sh = min(14 - e, 126);
    const float up = __uint_as_float(u32(127 + sh) << 23);
    u32 hi[16], lo[16];
#pragma unroll
    for (int i = 0; i < 32; i += 8)
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // word j of each 8: the pair (k0, k0 + d)
        const int k0 = FP4 ? j : (j & 1) + 4 * (j >> 1), d = FP4 ? 4 : 2;
        u32 h2[2], l2[2];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const float vv = v[i + k0 + d * t], y = vv * up;  // exact: a power of two, |y| < 2^15 when finite
          const u16 h = wo_f16(y);
          h2[t] = h;
          l2[t] = fabsf(vv) <= 3.402823466e38f ? wo_f16(y - wo_f32(h)) : 0u;
        }
        hi[i / 2 + j] = h2[0] | (h2[1] << 16);
        lo[i / 2 + j] = l2[0] | (l2[1] << 16);
      }
    const int r = u / nb, b = u - r * nb;
    xsc[b * 8 + r] = __uint_as_float(u32(127 - sh) << 23);
    uint4* dh = reinterpret_cast<uint4*>(xq + 2 * r * stride + b * 64);
    uint4* dl = reinterpret_cast<uint4*>(xq + (2 * r + 1) * stride + b * 64);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      dh[i] = make_uint4(hi[4 * i], hi[4 * i + 1], hi[4 * i + 2], hi[4 * i + 3]);
      dl[i] = make_uint4(lo[4 * i], lo[4 * i + 1], lo[4 * i + 2], lo[4 * i + 3]);
    }
  }
  __syncthreads();
}

// E8M0 scale bytes of s as floats: the shift alone when no byte is 0x00 (2^-127) or 0xFF (NaN), e8m0_decode's selects
// otherwise (the same values; the common case costs two instructions a scale instead of six). N: the low bytes
// that hold scales (the others may be anything).
template <int N>
__device__ __forceinline__ void e8m0x4_decode(u32 s, float* f) {
  const u32 t = N == 4 ? s : (s | (0x01010101u << (8 * N)));  // unused bytes: neither 0x00 nor 0xFF
  const u32 zero = (t - 0x01010101u) & ~t & 0x80808080u, ff = (~t - 0x01010101u) & t & 0x80808080u;
  if ((zero | ff) == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = __uint_as_float(((s >> (8 * i)) & 0xFFu) << 23);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = e8m0_decode(u8(s >> (8 * i)));
  }
}

// acc += a block's terms (bsum * x scale) * w scale, the exact kernels' arithmetic. C fragment c: c0, c1 (weight row
// g, token rows 2 tig, 2 tig + 1), c2, c3 (row g + 8). NC = 2 keeps all four (acc = c0..c3), NC = 1 token row 0's
// (acc = c0, c2). xs0 / xs1: the token rows' scales, wa / wb: rows g / g + 8's weight scales.
template <int NC>
__device__ __forceinline__ void mma_fold(float* acc, const float* c, float xs0, float xs1, float wa, float wb) {
  if (NC == 2) {
    acc[0] = __fadd_rn(acc[0], __fmul_rn(__fmul_rn(c[0], xs0), wa));
    acc[1] = __fadd_rn(acc[1], __fmul_rn(__fmul_rn(c[1], xs1), wa));
    acc[2] = __fadd_rn(acc[2], __fmul_rn(__fmul_rn(c[2], xs0), wb));
    acc[3] = __fadd_rn(acc[3], __fmul_rn(__fmul_rn(c[3], xs1), wb));
  } else {
    // xs0 and the weight scales are powers of two, so c * (xs0 * w) is (c * xs0) * w exactly and the fma rounds once
    // as the add did (outside fp32's normal range excepted): two instructions fewer a block for the experts.
    acc[0] = __fmaf_rn(c[0], __fmul_rn(xs0, wa), acc[0]);
    acc[1] = __fmaf_rn(c[2], __fmul_rn(xs0, wb), acc[1]);
  }
}

// mma_fold<1> of a wgmma block with its factors f_a / f_b (xs * w of rows g / g + 8) computed before the wait: the
// block sum of each row is C column 0 + column 1 (the magnitude split of the staged activations), the same bits.
__device__ __forceinline__ void mma_fold_cols(float* acc, const float* c, float f_a, float f_b) {
  acc[0] = __fmaf_rn(__fadd_rn(c[0], c[1]), f_a, acc[0]);
  acc[1] = __fmaf_rn(__fadd_rn(c[2], c[3]), f_b, acc[1]);
}

// mma_fold<1> of a weight-only block (MmaSegment's HL): the block sum of each weight row is C column 0 (the hi halves)
// + column 1 (the lo halves).
__device__ __forceinline__ void mma_fold_hl(float* acc, const float* c, float xf, float wa, float wb) {
  const float bs[4] = {__fadd_rn(c[0], c[1]), 0.f, __fadd_rn(c[2], c[3]), 0.f};
  mma_fold<1>(acc, bs, xf, 0.f, wa, wb);
}

// Block sums of 16 weight rows n0 .. n0+15 (rows >= N read as 0) of NW weight matrices over blocks [b0, b1) of
// one K segment, folded in K order into acc[m] (run): NC = 2 keeps all four C values (token rows n = 2 tig,
// 2 tig + 1; acc = c0, c1, c2, c3), NC = 1 only n = 0's (acc = c0, c2; the other lanes' values are unused). xrow:
// this lane's staged code row (token row g), nullptr for B = 0; xsl: the scale of c0's token row at xsl[b * 8],
// c1's at xsl[b * 8 + 1]. Weights: FP8 E4M3 [N, K] with E8M0 scales [ceil(N/blk), ceil(K/blk)] (blk >= 32, so the
// 16 rows of a tile share one scale row), FP4 packed [N, K/2] with scales [N, K/32]. Whole warp, uniform arguments.
//
// The weight blocks stream through a per-warp ring of D stages in shared memory by cp.async, D blocks ahead of the
// MMAs (kMmaRingBytes in flight per warp, no registers held for them); FP4 block scales ride in a register ring
// beside it (ring sizes measured: tests/kernels_cuda/bench_mma_gemv.cc, docs/performance.md).
// Register batches (the previous version) kept only 2-4 KB in flight per warp: Nsight Compute showed the GEMVs
// latency-bound at 10-30% of DRAM bandwidth. prefetch() issues the first D blocks early (before the act-quant
// staging, or before the dependent-launch wait: weights are never written by a kernel).
// This warp's weight ring and FP8 scale bytes in the kernel's dynamic shared memory sm (mma_smem_bytes layout).
// ring_bytes: the rings' stride (kMmaRingBytes, or what a segment's D stages take: the wgmma up, run_wg_pos).
__device__ __forceinline__ u8* mma_warp_ring(unsigned char* sm, int K, int rows_staged, int ring_bytes = kMmaRingBytes) {
  return sm + mma_ring_offset(K, rows_staged) + (threadIdx.x >> 5) * ring_bytes;
}
__device__ __forceinline__ u8* mma_warp_scales(unsigned char* sm, int K, int rows_staged, int ring_bytes = kMmaRingBytes) {
  return sm + mma_ring_offset(K, rows_staged) + kMmaWarps * ring_bytes + (threadIdx.x >> 5) * mma_scale_stride(K);
}

// Tiled: the weights in tile order (wtile_off; the act-quant weights on sm_89+) or row-major (the weight-only paths'
// weights on every arch). Po: FP4 words in pair order (kernels/cuda/common.cuh fp4_pair_order: the weight-only
// experts' codes, row-major), decoded by e2m1_pairs_po.
template <bool FP4, int NW, bool Tiled = bool(SMELT_W_TILED), bool Po = false>
struct MmaSegment {
  static_assert(!Po || (FP4 && !Tiled), "pair order: row-major FP4 words");
  static constexpr int SB = NW * 16 * (FP4 ? 16 : 32);  // bytes of a stage (one 32-block of 16 rows x NW)
  // Stages: as many as the ring holds, at most 16 (a power of two: the ring slot wraps by a mask); 8 for two
  // FP4 matrices, whose unrolled ring would otherwise push the scale registers to local memory.
  static constexpr int DMAX = FP4 && NW == 2 ? (Po ? SMELT_MMA_WO_PAIR_STAGES : SMELT_MMA_FP4_PAIR_STAGES) : 16;
  static constexpr int D = kMmaRingBytes / SB < DMAX ? kMmaRingBytes / SB : DMAX;
  static_assert((D & (D - 1)) == 0 && D >= 4, "D: a power of two of at least one group");
  // FP4: the scale words through a ring in shared memory (see scsrc below) where the warp's scale area holds it
  static constexpr bool kSmemScales = FP4 && SMELT_MMA_FP4_SMEM_SCALES && D * 16 * NW <= kMmaScaleMin;
  const u8* src[NW];  // this lane's copy source of block 0 (FP8: row lane / 2, half lane % 2; FP4: row lane % 16)
  const u8* sA[NW];
  const u8* sB[NW];
  int src_bytes[NW], bstr[NW], sh, b0_, b1_;  // bstr: bytes from a block of the tile to the next (wtile_off)
  u8* ring;
  // FP4: this lane's copy (its matrix's source, block stride and byte count, its shared destination in slot 0),
  // chosen once in init() so that issue_fp4_group costs no selects or 64-bit address arithmetic per block.
  const u8* wsrc;
  int wstr, wbytes;
  u32 wdst;
  bool wlane;
  // Block scales. FP4 (a byte per row and block): a register ring beside the weight ring, static slots. FP8 (one byte
  // per block for all 16 rows): the segment's bytes in shared memory, loaded once by prefetch(): a register ring in
  // the rolled FP8 loop had to shift down each group, and each move waited for the newest scale loads to land, so
  // only ~one group of blocks was really in flight per warp.
  // FP4: the ring holds each scale row's bytes of 4 blocks as a word (scw[slot / 4][row], rows: matrix m's g at 2m,
  // g + 8 at 2m + 1), loaded a word at a time where they are 4-aligned (words_) and byte by byte elsewhere; the
  // permutes that make each block's scale word run when its group is consumed (group_scales), by when the loads
  // have long landed (a byte a block and row, permuted at issue, had the issue wait for them: 16 loads a group).
  u32 scw[FP4 && !kSmemScales ? D / 4 : 1][2 * NW];
  u8* scl;  // FP8: [NW][K/32] scale bytes of this warp's segment, block b at scl[m * nb + b - b0]
  int nb_;
  bool words_;  // FP4: the scale rows and the segment's first block 4-aligned (issue_fp4_group's word loads)
  // FP4 (kSmemScales): the scale words go through a ring in shared memory instead of the register ring scw: scl
  // holds D / 4 slots of 16 NW words (a word a matrix row: its 4 blocks of the slot), copied by 4-byte cp.async in the
  // copy group of the slot's first block (byte loads and a shared store where the rows are not 4-aligned). The
  // register ring's __ldg words sat in registers for a ring's length and were waited for at group_scales:
  // bench_mma_gemv's "wgp5" probe put the up's scale loads and decode at 6.6 of its 32.3 us (session 29). scsrc: this
  // lane's copy source (matrix lane / 16, row lane % 16 of the tile).
  const u8* scsrc;

  // warp_ring / warp_scales: mma_ring_offset(K, rows) + warp * kMmaRingBytes and
  // mma_ring_offset(K, rows) + kMmaWarps * kMmaRingBytes + warp * mma_scale_stride(K) in the kernel's shared memory.
  // row_step: matrix m's tile starts at row n0 + m * row_step (0: NW matrices of the same rows, the experts' gate and
  // up; 16: one matrix walked as NW tiles of 16 rows at once, sharing the activation loads, scales and loop).
  __device__ __forceinline__ void init(const u8* const* w, const u8* const* ws, i64 n0, i64 N, int K, int blk,
                                       u8* warp_ring, u8* warp_scales, int row_step = 0) {
    const int lane = threadIdx.x & 31, g = lane >> 2;
    const int nb = K / 32;
    const int crow = FP4 ? (lane & 15) : (lane >> 1);
    sh = blk_log2(blk);
    ring = warp_ring;
    scl = warp_scales;
    nb_ = nb;
    const i64 ncols = (K + blk - 1) >> sh;
#pragma unroll
    for (int m = 0; m < NW; ++m) {
      const i64 nm = n0 + i64(m) * row_step;  // rows past N read as 0 (no copy) and keep pointers at row n0 (< N)
      const bool vA = nm + g < N, vB = nm + g + 8 < N;
      const bool cv = nm + crow < N && (!FP4 || NW == 2 || lane < 16);
      src_bytes[m] = cv ? 16 : 0;
      const i64 row = cv ? nm + crow : n0;
      if constexpr (Tiled) {
        // Tile order (wtile_off): block b of the tile at b * (its rows x BB), its rows one after another: every copy
        // instruction of the warp reads one contiguous run. nm is a multiple of 16.
        const i64 nr = N - nm < 16 ? N - nm : 16;
        src[m] = FP4 ? w[m] + nm * (K / 2) + (lane & 15) * 16 : w[m] + nm * K + lane * 16;
        bstr[m] = int(nr > 0 ? nr : 16) * (FP4 ? 16 : 32);
        if (!cv) src[m] = w[m] + n0 * (FP4 ? K / 2 : K);
      } else {
        src[m] = FP4 ? w[m] + row * (K / 2) : w[m] + row * K + (lane & 1) * 16;
        bstr[m] = FP4 ? 16 : 32;
      }
      if (FP4) {
        sA[m] = ws[m] + (vA ? nm + g : n0) * nb;
        sB[m] = ws[m] + (vB ? nm + g + 8 : n0) * nb;
      } else {
        sA[m] = sB[m] = ws[m] + ((nm < N ? nm : n0) >> sh) * ncols;
      }
    }
    if constexpr (FP4) {
      // constant indices only (a lane-dependent ws[m] put the caller's pointer arrays in local memory)
      const bool hi = NW == 2 && lane >= 16;
      const int r = lane & 15;
      const i64 nm = hi ? n0 + i64(NW - 1) * row_step : n0;
      scsrc = (hi ? ws[NW - 1] : ws[0]) + (nm + r < N ? nm + r : n0) * nb;
    }
    if (!FP4) {
      wdst = smem_addr(ring) + (lane >> 1) * 32 + (lane & 1) * 16;
    } else {
      const bool hi = NW == 2 && lane >= 16;
      wsrc = hi ? src[NW - 1] : src[0];
      wstr = hi ? bstr[NW - 1] : bstr[0];
      wbytes = hi ? src_bytes[NW - 1] : src_bytes[0];
      wlane = NW == 2 || lane < 16;  // one matrix: lanes 16..31 copy nothing (their slot 0 address is lane - 16's)
      wdst = smem_addr(ring) + (hi ? 256 : 0) + (lane & 15) * 16;
    }
  }

  // init() for one matrix w (scales ws) walked as NW tiles of 16 rows at once from row n0 (the linears' TPW tiles).
  __device__ __forceinline__ void init_tiles(const u8* w, const u8* ws, i64 n0, i64 N, int K, int blk, u8* warp_ring,
                                             u8* warp_scales) {
    const u8* wm[NW];
    const u8* sm[NW];
#pragma unroll
    for (int m = 0; m < NW; ++m) wm[m] = w, sm[m] = ws;
    init(wm, sm, n0, N, K, blk, warp_ring, warp_scales, 16);
  }

  // FP4: blocks bn .. bn + n - 1 into slots j0 .. j0 + n - 1 (call unrolled: j0, n constants, multiples of 4), one
  // commit group a block, the copies predicated on b < b1_ (no branch; immediate offsets from per-group bases: the
  // per-block issue this replaced spent ~35 instructions a block on 64-bit address arithmetic, SASS, H200), and the
  // group's scale words into scw. Words past b1_ (4-aligned rows: the row's next blocks; else 0) are never folded.
  __device__ __forceinline__ void issue_fp4_group(int j0, int n, int bn) {
    const u8* sp[2 * NW];
#pragma unroll
    for (int m = 0; m < NW; ++m) sp[2 * m] = sA[m] + bn, sp[2 * m + 1] = sB[m] + bn;
    const u8* wp = wsrc + i64(bn) * wstr;
#pragma unroll
    for (int q = 0; q < n; q += 4) {
      if constexpr (kSmemScales) {  // the slot's words, in the copy group of block q
        const int lane = threadIdx.x & 31;
        const u32 dst = smem_addr(scl) + (((j0 + q) / 4) * 16 * NW + lane) * 4;
        if (lane < 16 * NW) {
          if (words_) {
            cp_async4_zfill(dst, scsrc + bn + q, bn + q < b1_ ? 4 : 0);
          } else {
            u32 b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) b[i] = bn + q + i < b1_ ? u32(__ldg(scsrc + bn + q + i)) : 0u;
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(dst), "r"(prmt(prmt(b[0], b[1], 0x0040u), prmt(b[2], b[3], 0x0040u), 0x5410u))
                         : "memory");
          }
        }
        (void)sp;
      } else if (words_) {
        u32* v = scw[(j0 + q) / 4];  // q, j0 constants once unrolled: registers
        const bool ok = bn + q < b1_;
#pragma unroll
        for (int k = 0; k < 2 * NW; ++k) v[k] = ok ? __ldg(reinterpret_cast<const u32*>(sp[k] + q)) : 0u;
      } else {
        u32* v = scw[(j0 + q) / 4];
#pragma unroll
        for (int k = 0; k < 2 * NW; ++k) {
          u32 b[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) b[i] = bn + q + i < b1_ ? u32(__ldg(sp[k] + q + i)) : 0u;
          v[k] = prmt(prmt(b[0], b[1], 0x0040u), prmt(b[2], b[3], 0x0040u), 0x5410u);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        cp_async16_pf_if<SMELT_MMA_L2PF>(wdst + (j0 + q + i) * SB, wp + (q + i) * wstr, wbytes,
                                         bn + q + i < b1_ && wlane);
        cp_async_commit();
      }
    }
  }

  // FP4: the scale words of the G blocks in slots j0 .. j0 + G - 1 (j0 a multiple of 4): block j's bytes (matrix m
  // row g at 2m, row g + 8 at 2m + 1) from byte j % 4 of its group's row words.
  template <int G>
  __device__ __forceinline__ void group_scales(int j0, u32* scale) const {
    static_assert(G % 4 == 0, "whole scale words");
#pragma unroll
    for (int q = 0; q < G; q += 4) {
      u32 v[2 * NW];
      if constexpr (kSmemScales) {  // rows g, g + 8 of each matrix from the shared ring
        const int g = (threadIdx.x & 31) >> 2;
        const u32* w = reinterpret_cast<const u32*>(scl) + ((j0 + q) / 4) * 16 * NW;
#pragma unroll
        for (int m = 0; m < NW; ++m) v[2 * m] = w[m * 16 + g], v[2 * m + 1] = w[m * 16 + g + 8];
      } else {
#pragma unroll
        for (int k = 0; k < 2 * NW; ++k) v[k] = scw[(j0 + q) / 4][k];
      }
      // t: matrix 0's rows g / g + 8, blocks 0, 1 | 2, 3 interleaved; u: matrix 1's.
      const u32 t0 = prmt(v[0], v[1], 0x5140u), t1 = prmt(v[0], v[1], 0x7362u);
      if constexpr (NW == 2) {
        const u32 u0 = prmt(v[2], v[3], 0x5140u), u1 = prmt(v[2], v[3], 0x7362u);
        scale[q] = prmt(t0, u0, 0x5410u), scale[q + 1] = prmt(t0, u0, 0x7632u);
        scale[q + 2] = prmt(t1, u1, 0x5410u), scale[q + 3] = prmt(t1, u1, 0x7632u);
      } else {
        scale[q] = t0 & 0xFFFFu, scale[q + 1] = t0 >> 16, scale[q + 2] = t1 & 0xFFFFu, scale[q + 3] = t1 >> 16;
      }
    }
  }

  // The chains' end: each lane of a quad summed every 4th block (its column pair); the quad's four partial sums added
  // (lanes tig ^ 1, then tig ^ 2), every lane holding the result.
  __device__ __forceinline__ static void quad_sum(float (*acc)[2]) {
#pragma unroll
    for (int m = 0; m < NW; ++m)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        acc[m][i] = __fadd_rn(acc[m][i], __shfl_xor_sync(0xFFFFFFFFu, acc[m][i], 1));
        acc[m][i] = __fadd_rn(acc[m][i], __shfl_xor_sync(0xFFFFFFFFu, acc[m][i], 2));
      }
  }

  // FP4, a chain of the 4 blocks in ring slots j0q .. j0q + 3 (j0q a multiple of 4: one scale word a row): the weight
  // scales of its block jt (byte jt of the slot's words) decoded, matrix m's rows g, g + 8 at ws[2m], ws[2m + 1].
  __device__ __forceinline__ void chain_scales(int j0q, int jt, float* ws) const {
    const int g = (threadIdx.x & 31) >> 2;
    u32 v[2 * NW];
    if constexpr (kSmemScales) {
      const u32* w = reinterpret_cast<const u32*>(scl) + (j0q / 4) * 16 * NW;
#pragma unroll
      for (int m = 0; m < NW; ++m) v[2 * m] = w[m * 16 + g], v[2 * m + 1] = w[m * 16 + g + 8];
    } else {
#pragma unroll
      for (int k = 0; k < 2 * NW; ++k) v[k] = scw[j0q / 4][k];
    }
    const u32 sel = u32(jt) | (u32(jt + 4) << 4);
    u32 sw = prmt(v[0], v[1], sel);
    if constexpr (NW == 2) sw = prmt(sw, prmt(v[2], v[3], sel), 0x5410u);
    e8m0x4_decode<2 * NW>(sw, ws);
  }

  // FP8: blocks bn .. bn + n - 1 into ring slots slot0 .. slot0 + n - 1 (call unrolled: n constant), one commit group
  // a block, empty past the segment; predicated copies from per-group bases, as issue_fp4_group.
  __device__ __forceinline__ void issue_fp8_group(int slot0, int n, int bn) {
    const u8* wp[NW];
#pragma unroll
    for (int m = 0; m < NW; ++m) wp[m] = src[m] + i64(bn) * bstr[m];
    const u32 dst = wdst + slot0 * SB;
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const bool ok = bn + i < b1_;
#pragma unroll
      for (int m = 0; m < NW; ++m)
        cp_async16_pf_if<SMELT_MMA_L2PF>(dst + i * SB + m * 512, wp[m] + i * bstr[m], src_bytes[m], ok);
      cp_async_commit();
    }
  }

  // Blocks b0 .. b0 + D - 1 into slots 0 .. D - 1 (FP4: their scale words into scw); FP8: the segment's scale
  // bytes into shared memory (visible to the warp after run()'s first __syncwarp).
  __device__ __forceinline__ void prefetch(int b0, int b1) {
    b0_ = b0, b1_ = b1;
    if constexpr (FP4) {
      u64 p = 0;
#pragma unroll
      for (int m = 0; m < NW; ++m) p |= reinterpret_cast<u64>(sA[m]) | reinterpret_cast<u64>(sB[m]);
      words_ = ((u64(b0) | u64(nb_) | p) & 3) == 0;  // the rule's splits of the V4.1 shapes: nb 160, 72, b0 % 4 == 0
      issue_fp4_group(0, D, b0);
    } else {
      issue_fp8_group(0, D, b0);
      const int lane = threadIdx.x & 31;
      for (int i = lane; i < b1 - b0; i += 32)
#pragma unroll
        for (int m = 0; m < NW; ++m) scl[m * nb_ + i] = __ldg(sA[m] + (((b0 + i) * 32) >> sh));
    }
  }

  // NZ: NaN weight codes count as 0 (the exact kernels' rule). The plain pass multiplies the codes as they are
  // (a NaN code makes its rows' sums NaN: E4M3 has no inf and the staged codes hold no NaN); run_checked() redoes a
  // segment whose sums came out NaN with NZ, so the common path pays nothing for the rule.
  // HL (NC = 1): the weight-only activations, staged by mma_stage_wo as two token rows, hi (lanes g = 0) and lo
  // (g = 1): the block sum is column 0 + column 1 and xsl[b * 8] is the block's factor 2^-s.
  template <int NC, bool NZ, bool HL = false>
  __device__ __forceinline__ void consume(int slot, int b, u32 scale, const u8* xrow, const float* xsl,
                                          float (*acc)[2 * NC]) const {
    static_assert(!HL || NC == 1, "hi / lo columns: one token row");
    const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    uint4 xv = make_uint4(0u, 0u, 0u, 0u);  // this lane's 8 activations of the block as f16: k tig * 8 .. + 7
    if (xrow) xv = *reinterpret_cast<const uint4*>(xrow + b * 64 + tig * 16);
    const float xs0 = xsl[b * 8], xs1 = NC == 2 ? xsl[b * 8 + 1] : 0.f;
    if constexpr (FP4) {
      // f16 MMAs straight from the nibbles: wo_e2m1_pairs gives the weights as f16 * 2^-14 in four instructions a
      // pair, e2m1_pairs_po in under two from words in pair order (the E4M3 route cost a 6-instruction lookup per
      // four values plus sm_90's f16 conversions of both fragments); the activations' E4M3 codes are exact in f16.
      // The block sum is c * 2^14: folded into the activation scale (both powers of two: the same rounding as
      // (bsum * xs) * ws).
      const u32 xb[4] = {xv.x, xv.y, xv.z, xv.w};  // staged pre-paired (kStageF16Paired)
      const float xf0 = __fmul_rn(xs0, 16384.f), xf1 = __fmul_rn(xs1, 16384.f);
      float ws[2 * NW];
      e8m0x4_decode<2 * NW>(scale, ws);  // bytes: matrix m row g at 2m, row g + 8 at 2m + 1
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        const u8* st = ring + slot * SB + m * 256 + tig * 4;
        u32 pa[4], pb[4];
        e2m1_pairs<Po>(*reinterpret_cast<const u32*>(st + g * 16), pa);        // row g: (n0,n4) (n1,n5) (n2,n6) (n3,n7)
        e2m1_pairs<Po>(*reinterpret_cast<const u32*>(st + (g + 8) * 16), pb);  // row g + 8
        float c[4] = {0.f, 0.f, 0.f, 0.f};
        wo_mma(c, pa[0], pb[0], pa[1], pb[1], xb[0], xb[1]);
        wo_mma(c, pa[2], pb[2], pa[3], pb[3], xb[2], xb[3]);
        if constexpr (HL) mma_fold_hl(acc[m], c, xf0, ws[2 * m], ws[2 * m + 1]);
        else mma_fold<NC>(acc[m], c, xf0, xf1, ws[2 * m], ws[2 * m + 1]);
      }
    } else {
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        const u8* st = ring + slot * SB + m * 512 + tig * 8;
        const uint2 ra = *reinterpret_cast<const uint2*>(st + g * 32);
        const uint2 rb = *reinterpret_cast<const uint2*>(st + (g + 8) * 32);
        u32 a0 = ra.x, a2 = ra.y, a1 = rb.x, a3 = rb.y;
        if (NZ) {
          a0 = e4m3x4_nan_to_zero(a0), a2 = e4m3x4_nan_to_zero(a2);
          a1 = e4m3x4_nan_to_zero(a1), a3 = e4m3x4_nan_to_zero(a3);
        }
        // The E4M3 weight pairs (w0,w1) (w2,w3) of a0 and (w4,w5) (w6,w7) of a2 become f16 (exact; NaN codes f16 NaN)
        // and meet the staged f16 activations (x0,x1) .. (x6,x7): two f16 MMAs, the second accumulating on the first
        // (what sm_90 makes of the E4M3 mma.sync, without its conversions of the activations and its + 0).
        u32 f[8];
        if constexpr (HL) {
          // Weight-only (sm_80 has no E4M3 cvt): wo_e4m3_pairs, pairs (w0,w2) (w1,w3) | (w4,w6) (w5,w7) as values *
          // 2^-8 (NaN codes f16 NaN), against activations staged in that order (mma_stage_wo<false>).
          wo_e4m3_pairs(a0, f[0], f[1]);
          wo_e4m3_pairs(a1, f[2], f[3]);
          wo_e4m3_pairs(a2, f[4], f[5]);
          wo_e4m3_pairs(a3, f[6], f[7]);
        } else {
          e4m3x4_f16(a0, f[0], f[1]);  // row g: k 0-1, 2-3
          e4m3x4_f16(a1, f[2], f[3]);  // row g + 8
          e4m3x4_f16(a2, f[4], f[5]);  // row g: k 4-5, 6-7
          e4m3x4_f16(a3, f[6], f[7]);
        }
        float c[4] = {0.f, 0.f, 0.f, 0.f};
        wo_mma(c, f[0], f[2], f[1], f[3], xv.x, xv.y);
        wo_mma(c, f[4], f[6], f[5], f[7], xv.z, xv.w);
        const float wa = e8m0_decode(scl[m * nb_ + b - b0_]);
        if constexpr (HL) mma_fold_hl(acc[m], c, __fmul_rn(xs0, 256.f), wa, wa);
        else mma_fold<NC>(acc[m], c, xs0, xs1, wa, wa);
      }
    }
  }

  // The FP4 ring's groups in K order: f(bb, j0) for blocks bb + j0 .. bb + j0 + G - 1 (ring slots j0 .. j0 + G - 1,
  // a constant once unrolled), once their copies have landed for the whole warp. f consumes them and refills the slots.
  template <class F>
  __device__ __forceinline__ void fp4_groups(int b0, int b1, F&& f) {
    constexpr int G = SMELT_MMA_GROUP;
    for (int bb = b0; bb < b1; bb += D) {
#pragma unroll
      for (int j0 = 0; j0 < D; j0 += G) {
        if (bb + j0 >= b1) break;  // uniform
        cp_async_wait<D - G>();
        __syncwarp();
        f(bb, j0);
      }
    }
  }

  // f(j) for the blocks b + j of a group of G (j < G) that lie before b1: a group wholly inside the segment without a
  // check per block, so that ptxas interleaves its blocks' loads, conversions and MMAs (SMELT_MMA_FULL_GROUPS).
  template <class F>
  __device__ __forceinline__ static void consume_group(int b, int b1, F&& f) {
    constexpr int G = SMELT_MMA_GROUP;
    if (SMELT_MMA_FULL_GROUPS && b + G <= b1) {
#pragma unroll
      for (int j = 0; j < G; ++j) f(j);
    } else {
#pragma unroll
      for (int j = 0; j < G; ++j)
        if (b + j < b1) f(j);
    }
  }

  // Blocks [b0, b1) folded into acc, in K order; expects prefetch(b0, b1) done. One wait per group of G = 4
  // blocks (their shared loads and MMAs overlap).
  // FP8: a rolled loop over groups (run-time ring slot, the scales in shared memory): the fully unrolled ring (D / G
  // groups, x2 for the NZ pass, x2 row variants) was 170 KB of SASS.
  // FP4: the unrolled ring (static slots and scale registers): its E2M1 -> E4M3 lookups make it bound by issue, not
  // by instruction fetch, and the rolled loop measured 6-10% slower for it (moe up / down, H200).
  template <int NC, bool NZ, bool HL = false>
  __device__ __forceinline__ void run(int b0, int b1, const u8* xrow, const float* xsl, float (*acc)[2 * NC]) {
    constexpr int G = SMELT_MMA_GROUP;
    static_assert(D % G == 0, "the ring holds whole groups");
    if constexpr (FP4) {
      fp4_groups(b0, b1, [&](int bb, int j0) {
        u32 scale[G];
        group_scales<G>(j0, scale);
        consume_group(bb + j0, b1, [&](int j) { consume<NC, NZ, HL>(j0 + j, bb + j0 + j, scale[j], xrow, xsl, acc); });
        __syncwarp();
        issue_fp4_group(j0, G, bb + j0 + D);
      });
    } else {
      int slot = 0;
#pragma unroll 1
      for (int b = b0; b < b1; b += G) {
        cp_async_wait<D - G>();  // this lane's copies of blocks b .. b + G - 1 have landed ...
        __syncwarp();            // ... and every lane's
        consume_group(b, b1, [&](int j) { consume<NC, NZ, HL>(slot + j, b + j, 0u, xrow, xsl, acc); });
        __syncwarp();  // the slots read by all lanes before they are refilled
        issue_fp8_group(slot, G, b + D);
        slot = (slot + G) & (D - 1);
      }
    }
  }

  // FP4 on mma.sync, one token row: run<1, false, HL>'s sums with run_wg_pos's chains (SMELT_MMA_HL_CHAIN for the
  // weight-only ring of the sm_80 path, HL; SMELT_MMA_AQ_CHAIN for the act-quant one of sm_89 / sm_120). The 4 blocks
  // of a group add into A accumulators (A 1: one; 2: blocks 0, 1 | 2, 3, two shorter MMA chains), block b's
  // activations in token columns 2 (b % 4) (HL: its hi halves) and 2 (b % 4) + 1 (HL: its lo halves; else zeros) of
  // the MMA's 8 and zeros in the others, so that C column pair p holds the block sum of the chain's block at p (the
  // other blocks add exact zero products) and a lane (tig) folds one block of four: one scale decode and fold a
  // matrix a chain instead of a block. Every lane (HL; else every even g) loads one block's 8 activations a chain
  // (lanes g: column g; the per-block kernel had lanes g 0 (and 1) load all four). The quad adds its four partial sums
  // at the end: another fp32 order than run's, the same block sums and factors. xhi: the slot's staged row (HL: its
  // hi row, the lo row xstride after), nullptr for no activations (the sums are 0).
  template <int A, bool HL>
  __device__ __forceinline__ void run_chain(int b0, int b1, const u8* xhi, int xstride, const float* xsl,
                                            float (*acc)[2]) {
    static_assert(FP4, "the FP4 ring's chains");
    static_assert(A == 1 || A == 2, "one or two accumulators a chain");
    constexpr int G = SMELT_MMA_GROUP;
    static_assert(D % G == 0 && G % 4 == 0, "the ring holds whole groups of whole chains");
    const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3, p = g >> 1;
    // column g: HL hi (g even) or lo of its block; else the block's codes (g even) or zeros
    const u8* xr = !xhi || (!HL && (g & 1)) ? nullptr : xhi + (HL ? (g & 1) * xstride : 0) + tig * 16;
    fp4_groups(b0, b1, [&](int bb, int j0) {
#pragma unroll
      for (int q = 0; q < G; q += 4) {
        const int bf = bb + j0 + q, jp = (p - bf) & 3, jt = (tig - bf) & 3, bt = bf + jt;
        // this lane's B column: its block jp's 8 activations (blocks past the segment: zeros, never folded)
        uint4 xv = make_uint4(0u, 0u, 0u, 0u);
        if (xr && bf + jp < b1) xv = *reinterpret_cast<const uint4*>(xr + (bf + jp) * 64);
        // its fold's factors: block jt's weight scales and activation factor (powers of two, as consume's)
        float ws[2 * NW];
        chain_scales(j0 + q, jt, ws);
        const float xf = __fmul_rn(xsl[(bt < b1 ? bt : b1 - 1) * 8], 16384.f);
        float c[A][NW][4];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
          for (int m = 0; m < NW; ++m) c[a][m][0] = c[a][m][1] = c[a][m][2] = c[a][m][3] = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool mine = j == jp;
          const u32 xb[4] = {mine ? xv.x : 0u, mine ? xv.y : 0u, mine ? xv.z : 0u, mine ? xv.w : 0u};
#pragma unroll
          for (int m = 0; m < NW; ++m) {
            const u8* st = ring + (j0 + q + j) * SB + m * 256 + tig * 4;
            u32 pa[4], pb[4];
            e2m1_pairs<Po>(*reinterpret_cast<const u32*>(st + g * 16), pa);
            e2m1_pairs<Po>(*reinterpret_cast<const u32*>(st + (g + 8) * 16), pb);
            float* cm = c[j * A / 4][m];
            wo_mma(cm, pa[0], pb[0], pa[1], pb[1], xb[0], xb[1]);
            wo_mma(cm, pa[2], pb[2], pa[3], pb[3], xb[2], xb[3]);
          }
        }
        if (q + 4 == G) {  // every block of the group read from the ring: refill its slots
          __syncwarp();
          issue_fp4_group(j0, G, bb + j0 + D);
        }
        if (bt < b1) {
#pragma unroll
          for (int m = 0; m < NW; ++m) {
            float cc[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) cc[i] = A == 1 || jt < 2 ? c[0][m][i] : c[A - 1][m][i];
            if constexpr (HL) mma_fold_hl(acc[m], cc, xf, ws[2 * m], ws[2 * m + 1]);
            else mma_fold<1>(acc[m], cc, xf, 0.f, ws[2 * m], ws[2 * m + 1]);
          }
        }
      }
    });
    quad_sum(acc);
  }

#if SMELT_WGMMA
  // FP4, one token row, sm_90a: run()'s ring, with each block's sums by wgmma (m64n8k32 E4M3, A from registers) over
  // the four warps of a warpgroup, which walk the same blocks of their 4 x 16 rows (every call warpgroup-uniform).
  // The nibbles become E4M3 codes * 2^-6 (e2m1x8_e4m3: 7 instructions for 8 weights, where the f16 pairs cost 16)
  // and meet the activation codes (staged kStageE4m3Split) in the tensor core; sm_90 has no E4M3 mma.sync. x0: the
  // smem address of block 0 of the token row; the block sum is c * 2^6, folded into the activation scale (powers of
  // two). acc[m] = rows g, g + 8 of matrix m (lanes tig == 0 hold token row 0).
  __device__ __forceinline__ void run_wg(int b0, int b1, u32 x0, const float* xsl, float (*acc)[2]) {
    static_assert(FP4, "the wgmma path is FP4's");
    constexpr int G = SMELT_MMA_GROUP;
    static_assert(D % G == 0 && G >= 2, "the ring holds whole groups");
    const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const u32 dlo = wgmma_desc_col01_lo(x0);
    // Block j of the group: its words to E4M3 fragments, then its wgmmas (also for blocks past b1: stale slots, bytes
    // after the staged row; not folded), so that no wgmma sits under a branch (ptxas serializes those).
    auto mma = [&](int j0, int j, int b, u32 (*a)[4], float (*c)[4]) {
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        const u8* st = ring + (j0 + j) * SB + m * 256 + tig * 4;
        e2m1x8_e4m3(*reinterpret_cast<const u32*>(st + g * 16), a[m][0], a[m][2]);
        e2m1x8_e4m3(*reinterpret_cast<const u32*>(st + (g + 8) * 16), a[m][1], a[m][3]);
      }
#if SMELT_MMA_PROBE == 3  // timing probe ("wgp3"): no wgmma, the sums made from the fragments
#pragma unroll
      for (int m = 0; m < NW; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) c[m][i] = __uint_as_float(a[m][i] & 0x3F7FFFFFu);
      (void)dlo;
      return;
#endif
      wgmma_fence();
#pragma unroll
      for (int m = 0; m < NW; ++m) wgmma_e4m3_64x8x32(c[m], a[m], wgmma_desc(dlo + 4 * u32(b)));
      wgmma_commit();
    };
    // A block's fold in two halves: its factors (activation scale x weight scale of each row, what mma_fold<1>
    // multiplies: the same bits) before the wait for its wgmmas, the adds and FMAs after it (wgmma_ready is a compiler
    // barrier, so the decode and the scale's shared load had sat behind the wait). H200, alone: the V4.1 up 32.6 ->
    // 32.1 us, down 15.3 -> 15.1; the decode step unchanged (docs/performance.md "Session 29", where bench_mma_gemv's
    // "wgp*" probes put the ring alone at 23.2 us and the whole up without the FP4 scale words' loads, permutes and
    // decode at 25.8; session 30 moved the words to a shared-memory ring and the step did not change: what costs is
    // this per-block fold after each wait, not where the words wait).
    auto factors = [&](int b, u32 scale, float* f) {
      float ws[2 * NW];
#if SMELT_MMA_PROBE == 5  // timing probe ("wgp5"): the whole fold with every weight scale 1 (no scale loads, decode)
      (void)scale;
#pragma unroll
      for (int i = 0; i < 2 * NW; ++i) ws[i] = 1.f;
#else
      e8m0x4_decode<2 * NW>(scale, ws);
#endif
      const float xf = __fmul_rn(xsl[(b < b1 ? b : b1 - 1) * 8], 64.f);  // blocks past the segment are not folded
#pragma unroll
      for (int i = 0; i < 2 * NW; ++i) f[i] = __fmul_rn(xf, ws[i]);
    };
    auto fold = [&](const float* f, float (*c)[4]) {
#if SMELT_MMA_PROBE == 2  // timing probe ("wgp2"): the wgmmas, no fold
      (void)f, (void)c;
      return;
#elif SMELT_MMA_PROBE == 4  // timing probe ("wgp4"): the wgmmas, their results used by one add (kept live)
      (void)f;
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        wgmma_ready(c[m][0]);
        acc[m][0] += c[m][0];
      }
      return;
#endif
#pragma unroll
      for (int m = 0; m < NW; ++m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) wgmma_ready(c[m][i]);
        mma_fold_cols(acc[m], c[m], f[2 * m], f[2 * m + 1]);
      }
    };
#if SMELT_MMA_PROBE == 1  // timing probe (bench_mma_gemv "wgp1"): the ring's copies and waits alone, no sums
    fp4_groups(b0, b1, [&](int bb, int j0) { issue_fp4_group(j0, G, bb + j0 + D); });
    return;
#endif
    fp4_groups(b0, b1, [&](int bb, int j0) {
      u32 scale[G];
      group_scales<G>(j0, scale);
      // Two blocks in flight: block j's wgmmas run while block j + 1's words convert (double-buffered fragments
      // and sums; a wait for all of them after each block left every warp idle for the MMA's latency).
      u32 a[2][NW][4];
      float c[2][NW][4];
      float f[2 * NW];
      mma(j0, 0, bb + j0, a[0], c[0]);
#pragma unroll
      for (int j = 1; j < G; ++j) {
        mma(j0, j, bb + j0 + j, a[j & 1], c[j & 1]);
        if (j == G - 1) {  // the group's words and scales are in registers: refill its slots
          __syncwarp();
          issue_fp4_group(j0, G, bb + j0 + D);
        }
        factors(bb + j0 + j - 1, scale[j - 1], f);
        wgmma_wait<1>();  // block j - 1's sums
        if (bb + j0 + j - 1 < b1) fold(f, c[(j - 1) & 1]);
      }
      factors(bb + j0 + G - 1, scale[G - 1], f);
      wgmma_wait<0>();
      if (bb + j0 + G - 1 < b1) fold(f, c[(G - 1) & 1]);
    });
  }

  // run_wg with the activations staged kStageE4m3Pos (x0: the row's smem address): the 4 blocks of a chain add into one
  // accumulator, block b's sums in column pair b % 4, so a lane (tig) folds one block of each 4 (the one at its column
  // pair: its two rows' factors, one wait and two FMAs a matrix a chain instead of a block), and the quad's four
  // partial sums are added at the end. So each lane sums every 4th block in K order and the quad adds its four sums:
  // another fp32 order than run_wg's (one accumulator in K order), the same block sums and factors.
  // A 2: blocks 0, 1 | 2, 3 of a chain in two accumulators, issued 0, 2, 1, 3 (two dependent pairs instead of one
  // chain of four; a lane folds the accumulator holding its block).
  template <int A>
  __device__ __forceinline__ void run_wg_pos(int b0, int b1, u32 x0, int plane, const float* xsl, float (*acc)[2]) {
    static_assert(FP4, "the wgmma path is FP4's");
    static_assert(A == 1 || A == 2, "one or two accumulators a chain");
    constexpr int G = SMELT_MMA_GROUP;
    static_assert(D % G == 0 && G % 4 == 0, "the ring holds whole groups of whole chains");
    const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    // both descriptor offsets a plane (N = 8 is one core matrix of columns: only the k step is used)
    const u32 off = u32(plane) >> 4, dlo = ((x0 & 0x3FFFFu) >> 4) | (off << 16);
    fp4_groups(b0, b1, [&](int bb, int j0) {
#pragma unroll
      for (int q = 0; q < G; q += 4) {
        const int bf = bb + j0 + q, jt = (tig - bf) & 3, bt = bf + jt;  // this lane's block of the chain
        // Its factors before the chain
        float ws[2 * NW], f[2 * NW];
        chain_scales(j0 + q, jt, ws);
        const float xf = __fmul_rn(xsl[(bt < b1 ? bt : b1 - 1) * 8], 64.f);  // blocks past the segment: not folded
#pragma unroll
        for (int i = 0; i < 2 * NW; ++i) f[i] = __fmul_rn(xf, ws[i]);
        u32 a[4][NW][4];
        float c[A][NW][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = A == 2 ? ((i & 1) << 1) | (i >> 1) : i;  // the block: 0, 1, 2, 3 or (A 2) 0, 2, 1, 3
#pragma unroll
          for (int m = 0; m < NW; ++m) {
            const u8* st = ring + (j0 + q + j) * SB + m * 256 + tig * 4;
            e2m1x8_e4m3(*reinterpret_cast<const u32*>(st + g * 16), a[j][m][0], a[j][m][2]);
            e2m1x8_e4m3(*reinterpret_cast<const u32*>(st + (g + 8) * 16), a[j][m][1], a[j][m][3]);
          }
          wgmma_fence();
          const u64 desc = wgmma_desc(dlo + u32(mma_pos_start16(bf + j)), off);
#pragma unroll
          for (int m = 0; m < NW; ++m) {
            if (j % (4 / A) == 0) wgmma_e4m3_64x8x32(c[j * A / 4][m], a[j][m], desc);
            else wgmma_e4m3_64x8x32_acc(c[j * A / 4][m], a[j][m], desc);
          }
          wgmma_commit();
        }
        if (q + 4 == G) {  // the group's words and scales are in registers: refill its slots
          __syncwarp();
          issue_fp4_group(j0, G, bb + j0 + D);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int m = 0; m < NW; ++m) {
          float cc[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int x = 0; x < A; ++x) wgmma_ready(c[x][m][i]);
            cc[i] = A == 1 || jt < 2 ? c[0][m][i] : c[A - 1][m][i];
          }
          if (bt < b1) mma_fold_cols(acc[m], cc, f[2 * m], f[2 * m + 1]);
        }
      }
    });
    quad_sum(acc);
  }

  // FP8, one token row, sm_90a: run()'s rolled FP8 ring with each block's sums by wgmma over the four warps of a
  // warpgroup (64 rows: warp q of it rows 16 q ..), the E4M3 weight codes straight from the ring as the A fragments
  // (no conversion: the mma.sync path spends 8 cvt a block and lane on f16 pairs) against the activation codes staged
  // kStageE4m3SplitK. NZ: NaN weight codes as 0 (run_wg8_checked). As run_wg, every block of a group runs its wgmmas
  // (blocks past b1 on stale slots, not folded); acc[m] = rows g, g + 8 of matrix m (lanes tig == 0 hold them).
  template <bool NZ>
  __device__ __forceinline__ void run_wg8(int b0, int b1, u32 x0, const float* xsl, float (*acc)[2]) {
    static_assert(!FP4, "run_wg is FP4's");
    constexpr int G = SMELT_MMA_GROUP;
    static_assert(D % G == 0 && G >= 2, "the ring holds whole groups");
    const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
    const u32 dlo = wgmma_desc_col01_lo(x0);
    auto mma = [&](int slot, int b, float (*c)[4]) {
      u32 a[NW][4];
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        const u8* st = ring + slot * SB + m * 512 + tig * 8;
        const uint2 ra = *reinterpret_cast<const uint2*>(st + g * 32);
        const uint2 rb = *reinterpret_cast<const uint2*>(st + (g + 8) * 32);
        a[m][0] = ra.x, a[m][1] = rb.x, a[m][2] = ra.y, a[m][3] = rb.y;
        if (NZ)
#pragma unroll
          for (int i = 0; i < 4; ++i) a[m][i] = e4m3x4_nan_to_zero(a[m][i]);
      }
      wgmma_fence();
#pragma unroll
      for (int m = 0; m < NW; ++m) wgmma_e4m3_64x8x32(c[m], a[m], wgmma_desc(dlo + 4 * u32(b)));
      wgmma_commit();
    };
    // As run_wg: the block's factors (xs * w, one weight scale a matrix) before the wait, the sums after it.
    auto factors = [&](int b, float* f) {
      const int bc = b < b1 ? b : b1 - 1;  // blocks past the segment are not folded: any scale byte of it
      const float xs = xsl[bc * 8];
#pragma unroll
      for (int m = 0; m < NW; ++m) f[m] = __fmul_rn(xs, e8m0_decode(scl[m * nb_ + bc - b0_]));
    };
    auto fold = [&](const float* f, float (*c)[4]) {
#pragma unroll
      for (int m = 0; m < NW; ++m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) wgmma_ready(c[m][i]);
        mma_fold_cols(acc[m], c[m], f[m], f[m]);
      }
    };
    int slot = 0;
#pragma unroll 1
    for (int b = b0; b < b1; b += G) {
      cp_async_wait<D - G>();  // this lane's copies of blocks b .. b + G - 1 have landed ...
      __syncwarp();            // ... and every lane's
      float c[2][NW][4];       // two blocks in flight, as run_wg
      float f[NW];
      mma(slot, b, c[0]);
#pragma unroll
      for (int j = 1; j < G; ++j) {
        mma(slot + j, b + j, c[j & 1]);
        if (j == G - 1) {  // the group's fragments are in registers: refill its slots
          __syncwarp();
          issue_fp8_group(slot, G, b + D);
        }
        factors(b + j - 1, f);
        wgmma_wait<1>();
        if (b + j - 1 < b1) fold(f, c[(j - 1) & 1]);
      }
      factors(b + G - 1, f);
      wgmma_wait<0>();
      if (b + G - 1 < b1) fold(f, c[(G - 1) & 1]);
      slot = (slot + G) & (D - 1);
    }
  }
  // run_wg8, then the NZ pass over the segment again when any of the warpgroup's sums is NaN (run_checked's rule; the
  // pass and its wgmmas are warpgroup-uniform: the four warps vote together through shared flag words).
  __device__ __forceinline__ void run_wg8_checked(int b0, int b1, u32 x0, const float* xsl, float (*acc)[2],
                                                  int* wg_flag) {
    run_wg8<false>(b0, b1, x0, xsl, acc);
    float t = 0.f;
#pragma unroll
    for (int m = 0; m < NW; ++m) t += acc[m][0] + acc[m][1];
    if (threadIdx.x & 3) t = 0.f;  // lanes tig != 0 fold the MMA's unused columns (bytes after the block)
    // A warpgroup barrier (named barrier 1 + warpgroup index, 128 threads) around the flag: set, then read by all four.
    const int wgi = (threadIdx.x >> 7);
    if ((threadIdx.x & 127) == 0) wg_flag[wgi] = 0;
    asm volatile("bar.sync %0, 128;" ::"r"(1 + wgi) : "memory");
    if (__any_sync(0xffffffffu, t != t) && (threadIdx.x & 31) == 0) wg_flag[wgi] = 1;
    asm volatile("bar.sync %0, 128;" ::"r"(1 + wgi) : "memory");
    const bool redo = wg_flag[wgi] != 0;
    asm volatile("bar.sync %0, 128;" ::"r"(1 + wgi) : "memory");  // every read before the next call's reset
    if (!redo) return;
#pragma unroll
    for (int m = 0; m < NW; ++m) acc[m][0] = acc[m][1] = 0.f;
    prefetch(b0, b1);
    run_wg8<true>(b0, b1, x0, xsl, acc);
  }
#endif

  // run(), then, FP8 only, the NZ pass over the segment again when any of the warp's sums is NaN (a NaN weight code;
  // or a NaN scale or activation, which the NZ pass reproduces as the exact kernels do).
  template <int NC>
  __device__ __forceinline__ void run_checked(int b0, int b1, const u8* xrow, const float* xsl, float (*acc)[2 * NC]) {
    run<NC, false>(b0, b1, xrow, xsl, acc);
    if (FP4) return;
    float t = 0.f;
#pragma unroll
    for (int m = 0; m < NW; ++m)
#pragma unroll
      for (int i = 0; i < 2 * NC; ++i) t += acc[m][i];
    if (!__any_sync(0xffffffffu, t != t)) return;
#pragma unroll
    for (int m = 0; m < NW; ++m)
#pragma unroll
      for (int i = 0; i < 2 * NC; ++i) acc[m][i] = 0.f;
    prefetch(b0, b1);
    run<NC, true>(b0, b1, xrow, xsl, acc);
  }
};

// Blocks [b0, b1) of segment s of S over nb blocks.
__device__ __forceinline__ void mma_seg_range(int nb, int s, int S, int& b0, int& b1) {
  b0 = int(i64(s) * nb / S);
  b1 = int(i64(s + 1) * nb / S);
}

// K-split combine: every warp of the block stores its n partials (n <= 4) in part, then the warp of segment 0 of
// each tile adds the other segments' in segment order. Call with all threads (S > 1 only); synchronises twice.
// WR: warps that walk one tile together (4 on the wgmma path: segment s of warp w's tile is warp w + s * WR's).
template <int NV>
__device__ __forceinline__ void mma_combine(float* part, float* v, int S, int WR = 1) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < NV; ++i) part[(warp * 4 + i) * 32 + lane] = v[i];
  __syncthreads();
  if ((warp / WR) % S == 0)
    for (int s = 1; s < S; ++s)
#pragma unroll
      for (int i = 0; i < NV; ++i) v[i] = __fadd_rn(v[i], part[((warp + s * WR) * 4 + i) * 32 + lane]);
  __syncthreads();
}

}  // namespace smelt_dev
