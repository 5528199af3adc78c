// Launchers of the tensor-core decode act-quant GEMVs (runtime/cuda/ops_mma.h).
#include "runtime/cuda/ops_mma.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "runtime/cuda/mma_split.h"

namespace smelt::runtime::cuda::detail {

namespace {

constexpr int kMmaWarps = 8;  // kernels/linear/gemv_mma.cuh: block of 256 threads

constexpr int kMmaDownTpw = 2;  // gemv_mma.cuh SMELT_MMA_DOWN_TPW: a down tile is 16 x 2 output rows
// Shared memory a block may use: sm_90 has 227 KB per multiprocessor (two blocks of up to ~110 KB stay resident),
// sm_89 / sm_120 99 KB a block (their opt-in limit; K = 8192 at one row takes 96.1 KB).
unsigned mma_smem_max(const OpLaunch& l) { return l.arch == 90 ? 110u * 1024 : 99u * 1024; }

// $var=KxN:S,... (tuning): the K split S of each listed linear shape (K x N) where ok(S).
std::map<std::pair<int64_t, int64_t>, int> env_shape_splits(const char* var, bool (*ok)(int)) {
  std::map<std::pair<int64_t, int64_t>, int> m;
  for (const std::string& item : env_names(var)) {
    long long K = 0, n = 0;
    int S = 0;
    if (std::sscanf(item.c_str(), "%lldx%lld:%d", &K, &n, &S) == 3 && ok(S)) m[{K, n}] = S;
  }
  return m;
}

// mma_split.h's rule; $SMELT_CUDA_KSPLIT=KxN:S,... (tuning) sets the split of those linear shapes.
int ksplit(int64_t tiles, int nb, unsigned blocks, int64_t N = 0) {
  static const std::map<std::pair<int64_t, int64_t>, int> forced =
      env_shape_splits("SMELT_CUDA_KSPLIT", [](int S) { return S == 1 || S == 2 || S == 4 || S == 8; });
  if (N > 0)
    if (auto it = forced.find({int64_t(nb) * 32, N}); it != forced.end()) return it->second;
  return mma_ksplit(tiles, nb, blocks);
}

// $SMELT_CUDA_EXPERT_SPLIT=S_UP,S_DOWN,BLOCKS (tuning; 0 keeps the rule): the K splits of the one-row expert kernels
// (smelt_moe_*_mma, *_wgmma (S <= 2), *_wo_ring) and their persistent grid's cap in blocks.
const std::array<int, 3>& expert_split() {
  static const std::array<int, 3> f = env_ints3("SMELT_CUDA_EXPERT_SPLIT");
  return f;
}
unsigned blocks_or(unsigned rule) { return expert_split()[2] > 0 ? unsigned(expert_split()[2]) : rule; }

unsigned grid(int64_t tiles, int S, unsigned blocks) {
  const int64_t groups = (tiles + kMmaWarps / S - 1) / (kMmaWarps / S);
  return unsigned(std::min<int64_t>(groups, blocks));
}

}  // namespace

int linear_mma_rows(const OpLaunch& l, int K) {
  if (K % 32) return 0;
  int rows = 8;
  while (rows >= 1 && mma_smem_bytes(K, rows) > mma_smem_max(l)) --rows;
  return rows;
}

// Which one-row FP8 linears take the wgmma kernel (linear_mma.cu smelt_gemv_fp8_wgmma, sm_90): the split rule's S
// for the shape, or 0 for the mma.sync kernel. $SMELT_CUDA_WGMMA_LINEAR (A/B timing): every shape by default; "short"
// the shapes whose tiles fill the grid without a cross-block split and whose K walk is short (nb <= 64), "fill" every
// shape without a cross-block split, "nolong" all but those at S = 1 with nb > 64, 0 none ($SMELT_CUDA_WGMMA=0: no
// wgmma kernel at all). Mixing the two kernels in a step measured slower than either alone (H200: "short" / "fill"
// 1.121-1.130 ms, "nolong" +5 us, none 1.103-1.108, all 1.092-1.099 at the cap of 16; docs/performance.md "Session
// 28"). $SMELT_CUDA_WGMMA_LINEAR_SMAX caps the rule's S (tuning; 8 by default).
static int wgmma_linear_split(int arch, const LinearW& f, int K, int N, unsigned blocks) {
  static const int mode = env_off("SMELT_CUDA_WGMMA") || env_off("SMELT_CUDA_WGMMA_LINEAR") ? 0
                          : env_is("SMELT_CUDA_WGMMA_LINEAR", "short")                       ? 1
                          : env_is("SMELT_CUDA_WGMMA_LINEAR", "fill")                        ? 2
                          : env_is("SMELT_CUDA_WGMMA_LINEAR", "nolong")                      ? 4
                                                                                             : 3;
  static const int smax = [] {
    const char* e = std::getenv("SMELT_CUDA_WGMMA_LINEAR_SMAX");
    const int v = e ? std::atoi(e) : 8;
    return v >= 1 && v <= 16 ? v : 8;
  }();
  // $SMELT_CUDA_WG_KSPLIT=KxN:S,... (tuning): S (1 or even, <= 16) for those shapes
  static const std::map<std::pair<int64_t, int64_t>, int> forced =
      env_shape_splits("SMELT_CUDA_WG_KSPLIT", [](int S) { return S == 1 || (S % 2 == 0 && S >= 2 && S <= 16); });
  if (!mode || arch != 90 || !f.quant || std::string(f.fmt) != "fp8" || K % 32 || N < 1) return 0;
  const auto it = forced.find({K, N});
  const int S = it != forced.end() ? it->second : mma_wg_linear_ksplit(mma_wg_linear_tiles(N), K / 32, blocks, smax);
  if (mode == 3) return S;
  if (mode == 4) return S == 1 && K / 32 > 64 ? 0 : S;  // all but the long one-tile-a-warpgroup walks (Engram's)
  if (S > 2 || (mode == 1 && K / 32 > 64)) return 0;
  return S;
}

DevPtr wgmma_linear_zeroed(Ctx& c, const LinearW& f, int K, int N) {
  // prepare does not know the arch: it carves what sm_90 would
  const int S = wgmma_linear_split(c.dry ? 90 : c.l.arch, f, K, N, gemv_blocks(c.l));
  const uint64_t bytes = S ? mma_wg_linear_zeroed_bytes(mma_wg_linear_tiles(N), S) : 0;
  return bytes ? c.zeroed(bytes) : 0;
}

bool try_linear_mma(Ctx& c, DevPtr x, DevPtr y, const LinearW& f, DevPtr w, DevPtr s, int rows, int K, int N,
                    float scale_after, int round, DevPtr wz) {
  if (!f.quant || rows < 1 || N < 1 || rows > linear_mma_rows(c.l, K)) return false;
  const unsigned smem = mma_smem_bytes(K, rows);
  const unsigned blocks = gemv_blocks(c.l);
  if (int S = rows == 1 ? wgmma_linear_split(c.l.arch, f, K, N, blocks) : 0) {
    const int64_t tiles = mma_wg_linear_tiles(N);
    if (S > 2 && !wz) S = 2;  // no memory for the partials: the block's two warpgroups split K
    const bool split = mma_wg_linear_zeroed_bytes(tiles, S) > 0;
    const DevPtr cnt = split ? wz : 0, xpart = split ? wz + mma_wg_linear_partials_offset(tiles) : 0;
    c.go("smelt_gemv_fp8_wgmma", unsigned(std::min<int64_t>(mma_wg_linear_groups(tiles, S), blocks)), 1, 1,
         kMmaWarps * 32, smem, x, y, w, s, K, N, int(f.blk), scale_after, round, S, xpart, cnt);
    return true;
  }
  const int64_t tiles = (int64_t(N) + 15) / 16;
  const int S = ksplit(tiles, K / 32, blocks, N);
  const std::string name = std::string("smelt_gemv_") + f.fmt + "_mma";
  c.go(name.c_str(), grid(tiles, S, blocks), 1, 1, kMmaWarps * 32, smem, x, y, w, s, rows, K, N, int(f.blk),
       scale_after, round, S);
  return true;
}

// FP4 experts on sm_90 by wgmma (moe_mma.cu smelt_moe_*_fp4_wgmma; the plan's sm_90 cubins are sm_90a), unless
// $SMELT_CUDA_WGMMA=0 (the mma.sync kernels, A/B timing).
bool wgmma_experts(const OpLaunch& l, const LinearW& f) {
  static const bool on = !env_off("SMELT_CUDA_WGMMA");
  return on && l.arch == 90 && std::string(f.fmt) == "fp4";
}

// The mma.sync expert kernels' tiles (up: 16 rows; down: kMmaDownTpw 16-row tiles a warp, tps_down a slot) and K
// splits (one round of the grid, or $SMELT_CUDA_EXPERT_SPLIT), shared by the act-quant and weight-only ring kernels.
struct SyncSplit {
  int64_t tiles_up, tiles_down;
  int tps_down, s_up, s_down;
};
SyncSplit sync_split(const ExpertsLaunch& a, unsigned blocks) {
  SyncSplit r;
  r.tps_down = (a.D + 16 * kMmaDownTpw - 1) / (16 * kMmaDownTpw);
  r.tiles_up = int64_t(a.topk) * ((a.F + 15) / 16);
  r.tiles_down = int64_t(a.topk) * r.tps_down;
  r.s_up = split_or(expert_split()[0], ksplit(r.tiles_up, a.D / 32, blocks));
  r.s_down = split_or(expert_split()[1], ksplit(r.tiles_down, a.F / 32, blocks));
  return r;
}

// The wgmma expert kernels' tiles (mma_split.h: 64-row up / 64 x kMmaDownTpw down tiles of a warpgroup), K splits
// (<= 2, or $SMELT_CUDA_EXPERT_SPLIT) and persistent grids.
struct WgSplit {
  int s_up, s_down;
  unsigned grid_up, grid_down;
};
WgSplit wg_split(const ExpertsLaunch& a, unsigned blocks) {
  const std::array<int, 3>& xs = expert_split();
  const int64_t tiles_up = mma_wg_tiles(a.topk, a.F, 1), tiles_down = mma_wg_tiles(a.topk, a.D, kMmaDownTpw);
  WgSplit r;
  r.s_up = split_or(xs[0], mma_wg_ksplit(tiles_up, a.D / 32, blocks), 2);
  r.s_down = split_or(xs[1], mma_wg_ksplit(tiles_down, a.F / 32, blocks), 2);
  r.grid_up = unsigned(std::min<int64_t>(mma_wg_groups(tiles_up, r.s_up), blocks));
  r.grid_down = unsigned(std::min<int64_t>(mma_wg_groups(tiles_down, r.s_down), blocks));
  return r;
}

// The routed experts' ExpertW for the launches that do not take the slot counters (run_experts) unless
// $SMELT_CUDA_SLOT_WAIT=all: the wgmma ones and the pairs. The ring and mma.sync launches pass a.ew as it is. H200,
// V4.1 slice, session 27, alternating rounds: after the weight-only ring up (the sm_80 path) the early down gains,
// 1.138-1.152 -> 1.130-1.145 ms a step; after the wgmma up it loses, paired with the shared expert 1.101-1.110 ->
// 1.108-1.115, unpaired 1.128 -> 1.136-1.139 (its 216 one-tile blocks end together, so the down's early blocks only
// crowd the up's last ones); the ring pair is not measured and goes as the wgmma pair.
ExpertW uncounted_ew(const ExpertsLaunch& a) {
  static const bool all = env_is("SMELT_CUDA_SLOT_WAIT", "all");
  ExpertW ew = a.ew;
  if (!all) ew.slot_done = 0;
  return ew;
}

// The FP4 wgmma down's shared memory: rings of the stages it uses (mma_wg_ring_bytes; SMELT_CUDA_WG_FULL_RING=1: the
// 8 KB a warp the kernels took before session 30, the A/B of the L1 this leaves).
unsigned wg_down_smem(const ExpertsLaunch& a) {
  static const bool full = env_is("SMELT_CUDA_WG_FULL_RING", "1");
  return full ? mma_smem_bytes(a.F, a.topk) : mma_smem_bytes(a.F, a.topk, mma_wg_ring_bytes(kMmaDownTpw));
}

bool try_experts_mma(Ctx& c, const ExpertsLaunch& a) {
  if (!a.f.quant || a.topk < 1 || a.topk > 8 || a.D % 32 || a.F % 32) return false;
  const bool wg = wgmma_experts(c.l, a.f);
  const unsigned smem_up = wg ? mma_wg_up_smem(a.D) : mma_smem_bytes(a.D, 1);
  const unsigned smem_down = wg ? wg_down_smem(a) : mma_smem_bytes(a.F, a.topk);
  if (smem_up > mma_smem_max(c.l) || smem_down > mma_smem_max(c.l)) return false;
  const unsigned blocks = blocks_or(gemv_blocks(c.l));
  const int rb = 1;  // the model's numerics (the caller's branch)
  if (wg) {
    const WgSplit w = wg_split(a, blocks);
    const ExpertW ew = uncounted_ew(a);
    c.go("smelt_moe_up_fp4_wgmma", w.grid_up, 1, 1, kMmaWarps * 32, smem_up, a.x, a.D, a.F, a.topk, a.idx,
         a.n_experts, a.rw, ew, int(a.f.blk), a.limit, rb, a.h, w.s_up);
    c.go("smelt_moe_down_fp4_wgmma", w.grid_down, 1, 1, kMmaWarps * 32, smem_down, a.h, a.D, a.F, a.topk, a.idx,
         a.n_experts, ew, int(a.f.blk), rb, int(!a.routed && a.round), a.out, w.s_down);
    return true;
  }
  const SyncSplit sp = sync_split(a, blocks);
  const std::string up = std::string("smelt_moe_up_") + a.f.fmt + "_mma";
  c.go(up.c_str(), grid(sp.tiles_up, sp.s_up, blocks), 1, 1, kMmaWarps * 32, smem_up, a.x, a.D, a.F, a.topk, a.idx,
       a.n_experts, a.rw, a.ew, int(a.f.blk), a.limit, rb, a.h, sp.s_up);
  const std::string down = std::string("smelt_moe_down_") + a.f.fmt + "_mma";
  c.go(down.c_str(), grid(sp.tiles_down, sp.s_down, blocks), 1, 1, kMmaWarps * 32, smem_down, a.h, a.D, a.F, a.topk,
       a.idx, a.n_experts, a.ew, int(a.f.blk), rb, int(!a.routed && a.round), a.out, sp.s_down);
  return true;
}

bool try_experts_mma_with_shared(Ctx& c, const ExpertsLaunch& a, const ExpertsLaunch& s) {
  if (!wgmma_experts(c.l, a.f) || !s.f.quant || std::string(s.f.fmt) != "fp8" || a.topk < 1 || a.topk > 8 ||
      s.topk != 1 || s.D != a.D || a.D % 32 || a.F % 32 || s.F % 32)
    return false;
  const unsigned smem_up = mma_wg_up_smem(a.D);  // also the shared part's mma_smem_bytes(D, 1)
  const unsigned smem_down = std::max(wg_down_smem(a), mma_smem_bytes(s.F, 1));
  if (smem_up > mma_smem_max(c.l) || smem_down > mma_smem_max(c.l)) return false;
  const unsigned blocks = blocks_or(gemv_blocks(c.l));
  const int rb = 1;
  // Each part's grid and split as its own launch takes them (try_experts_mma).
  const WgSplit w = wg_split(a, blocks);
  const int s_up = w.s_up, s_down = w.s_down;
  const unsigned r_up = w.grid_up, r_down = w.grid_down;
  const SyncSplit sp = sync_split(s, blocks);
  const ExpertW ew = uncounted_ew(a);
  const unsigned g_up = grid(sp.tiles_up, sp.s_up, blocks), g_down = grid(sp.tiles_down, sp.s_down, blocks);
  // The routed blocks first: they are the long ones, and the shared ones fill the slots they leave.
  c.go("smelt_moe_up_fp4_wgmma_with_fp8", r_up + g_up, 1, 1, kMmaWarps * 32, smem_up, a.x, a.D, a.F, a.topk, a.idx,
       a.n_experts, a.rw, ew, int(a.f.blk), a.limit, rb, a.h, s_up, int(r_up), s.F, s.ew, int(s.f.blk), s.limit,
       s.h, sp.s_up);
  static const bool up_only = !env_is("SMELT_CUDA_FUSE_SHARED", "1");  // the downs as two launches (=1: one)
  if (up_only) {
    c.go("smelt_moe_down_fp4_wgmma", r_down, 1, 1, kMmaWarps * 32, wg_down_smem(a), a.h, a.D, a.F, a.topk,
         a.idx, a.n_experts, ew, int(a.f.blk), rb, 0, a.out, s_down);
    c.go("smelt_moe_down_fp8_mma", g_down, 1, 1, kMmaWarps * 32, mma_smem_bytes(s.F, 1), s.h, s.D, s.F, 1, DevPtr(0), 1,
         s.ew, int(s.f.blk), rb, int(s.round), s.out, sp.s_down);
    return true;
  }
  c.go("smelt_moe_down_fp4_wgmma_with_fp8", r_down + g_down, 1, 1, kMmaWarps * 32, smem_down, a.h, a.D, a.F, a.topk,
       a.idx, a.n_experts, ew, int(a.f.blk), rb, 0, a.out, s_down, int(r_down), s.h, s.F, s.ew, int(s.f.blk),
       int(s.round), s.out, sp.s_down);
  return true;
}

// The weight-only ring down of launch a at its split (moe_mma.cu smelt_moe_down_*_wo_ring): its shared memory stages
// two rows for each slot a group's tiles span; round: its output rounded to bf16 (rb is 0 on this path).
unsigned wo_ring_down_smem(const ExpertsLaunch& a, const SyncSplit& sp) {
  return mma_smem_bytes(a.F, 2 * mma_wo_down_span(a.topk, sp.tps_down, kMmaWarps / sp.s_down));
}
void wo_ring_down(Ctx& c, const ExpertsLaunch& a, const SyncSplit& sp, unsigned blocks, int round) {
  const std::string down = std::string("smelt_moe_down_") + a.f.fmt + "_wo_ring";
  c.go(down.c_str(), grid(sp.tiles_down, sp.s_down, blocks), 1, 1, kMmaWarps * 32, wo_ring_down_smem(a, sp), a.h, a.D,
       a.F, a.topk, a.idx, a.n_experts, a.ew, int(a.f.blk), 0, round, a.out, sp.s_down);
}

// The weight-only FP8 / FP4 expert FFN of one row (moe_mma.cu smelt_moe_*_wo_ring, sm_80+): the act-quant kernels'
// ring with the activations as f16 hi / lo halves; the down stages the slots its group's tiles span (the kernel's
// count).
// FP4 by default; FP8 (the V4.1 shared expert: one slot, 144 tiles) measured slower than the CUDA-core r1 kernels
// (up 115-127 vs 108-116 us, down 72 vs 56, four launches eager; the step the same), so only with
// $SMELT_CUDA_WO_RING=all. $SMELT_CUDA_WO_RING=0: the wo_mma kernels for FP4 too (A/B timing). docs/performance.md
// "Session 15".
bool try_experts_wo_ring(Ctx& c, const ExpertsLaunch& a) {
  static const bool on = !env_off("SMELT_CUDA_WO_RING"), fp8 = env_is("SMELT_CUDA_WO_RING", "all");
  const std::string fmt = a.f.fmt;
  if (!on || c.l.rows != 1 || (fmt != "fp4" && !(fmt == "fp8" && fp8)) || a.topk < 1 || a.topk > 8 || a.D % 32 ||
      a.F % 32)
    return false;
  const unsigned blocks = blocks_or(gemv_blocks(c.l));
  const SyncSplit sp = sync_split(a, blocks);
  const unsigned smem_up = mma_smem_bytes(a.D, 2);
  if (smem_up > mma_smem_max(c.l) || wo_ring_down_smem(a, sp) > mma_smem_max(c.l)) return false;
  const std::string up = "smelt_moe_up_" + fmt + "_wo_ring";
  c.go(up.c_str(), grid(sp.tiles_up, sp.s_up, blocks), 1, 1, kMmaWarps * 32, smem_up, a.x, a.D, a.F, a.topk, a.idx,
       a.n_experts, DevPtr(0), a.ew, int(a.f.blk), a.limit, 0, a.h, sp.s_up);
  wo_ring_down(c, a, sp, blocks, 0);
  return true;
}

// The routed FP4 experts and the shared FP8 expert on the weight-only ring (sm_80+): one up launch (moe_mma.cu
// smelt_moe_up_fp4_wo_ring_with_fp8, each part at its own kernel's grid and split), the downs as their own ring kernels
// (as try_experts_mma_with_shared's default). The shared op's round is its down's.
bool try_experts_wo_ring_with_shared(Ctx& c, const ExpertsLaunch& a, const ExpertsLaunch& s) {
  static const bool on = !env_off("SMELT_CUDA_WO_RING");
  if (!on || c.l.rows != 1 || std::string(a.f.fmt) != "fp4" || std::string(s.f.fmt) != "fp8" || a.topk < 1 ||
      a.topk > 8 || s.topk != 1 || s.D != a.D || a.D % 32 || a.F % 32 || s.F % 32)
    return false;
  const unsigned blocks = blocks_or(gemv_blocks(c.l));
  const SyncSplit r = sync_split(a, blocks), sh = sync_split(s, blocks);
  const unsigned smem_up = mma_smem_bytes(a.D, 2);
  if (std::max({smem_up, wo_ring_down_smem(a, r), wo_ring_down_smem(s, sh)}) > mma_smem_max(c.l)) return false;
  const unsigned r_up = grid(r.tiles_up, r.s_up, blocks), g_up = grid(sh.tiles_up, sh.s_up, blocks);
  ExpertsLaunch ap = a;
  ap.ew = uncounted_ew(a);
  // The routed blocks first: they are the long ones, and the shared ones fill the slots they leave.
  c.go("smelt_moe_up_fp4_wo_ring_with_fp8", r_up + g_up, 1, 1, kMmaWarps * 32, smem_up, a.x, a.D, a.F, a.topk, a.idx,
       a.n_experts, ap.ew, int(a.f.blk), a.limit, a.h, r.s_up, int(r_up), s.F, s.ew, int(s.f.blk), s.limit, s.h,
       sh.s_up);
  wo_ring_down(c, ap, r, blocks, 0);
  wo_ring_down(c, s, sh, blocks, int(s.round));
  return true;
}

// The weight-only FP8 / FP4 linear and grouped linear of one row (linear_mma.cu smelt_linear_*_wo_ring, sm_80+) on
// the same ring, only with $SMELT_CUDA_LINEAR_RING=1: on the H200 it measured slower than the CUDA-core r1 kernels
// (V4.1 slice, session 19: sm_80-path plan 1.208 -> 1.305-1.313 ms a step, its 18 FP8 linears 0.31 -> 0.42 ms eager;
// wo_a on the sm_90 path 0.068 -> 0.101 ms), but sm_80 cards have half to two thirds of the H200's fp32 rate per byte
// of bandwidth (A100 19.5 TFLOP/s over 2.0 TB/s, CMP 170HX 12.6 over 1.6; H200 67 over 4.2), where
// the r1 kernels' FFMA decode weighs more: measure it there. The K split is the act-quant GEMVs' rule over
// every group's tiles; the grid a persistent (blocks / G, 1, G).
bool try_linear_wo_ring(Ctx& c, DevPtr x, DevPtr y, const LinearW& f, DevPtr w, DevPtr s, int rows, int K, int N,
                        int G, float scale_after, int round) {
  static const bool on = env_is("SMELT_CUDA_LINEAR_RING", "1");
  const std::string fmt = f.fmt;
  if (!on || rows != 1 || (fmt != "fp8" && fmt != "fp4") || K % 32 || N < 1 || G < 1 || G > 65535) return false;
  // A 16-row tile reads one FP8 scale row: tiles start at multiples of 16 of the whole weight's rows.
  if ((fmt == "fp8" && f.blk % 16) || (G > 1 && N % 16)) return false;
  const unsigned smem = mma_smem_bytes(K, 2);
  if (smem > mma_smem_max(c.l)) return false;
  const unsigned blocks = gemv_blocks(c.l);
  const int64_t tiles = (int64_t(N) + 15) / 16;
  const int S = ksplit(tiles * G, K / 32, blocks, G == 1 ? N : 0);
  const unsigned gx = std::min(grid(tiles, S, blocks), std::max(1u, blocks / unsigned(G)));
  const std::string name = "smelt_linear_" + fmt + "_wo_ring";
  c.go(name.c_str(), gx, 1, unsigned(G), kMmaWarps * 32, smem, x, y, w, s, K, N, int(f.blk), scale_after, round, S);
  return true;
}

}  // namespace smelt::runtime::cuda::detail
