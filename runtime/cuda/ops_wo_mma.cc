// Tensor-core weight-only decode GEMVs (ops_wo_mma.h): K-split and grid choices. The K split (ks) depends on K, N,
// the groups and the GPU only, never on the row count, so a row's bits are the same in a decode step and in a
// longer chunk; the staged chunk (cb) depends on the rows but only moves where blocks are staged, not the sums.
#include "runtime/cuda/ops_wo_mma.h"

#include <algorithm>
#include <array>
#include <string>

namespace smelt::runtime::cuda::detail {

namespace {

// kernels/linear/gemv_wo_mma.cuh: 8 warps a CTA, a float4 per lane per warp for the K-part fold, per staged row
// S * 128 + 16 bytes of f16 halves and S floats of block factors (S = ks * cb blocks).
constexpr int kWoWarps = 8;
constexpr int kWoRedBytes = kWoWarps * 32 * 16;
constexpr unsigned kWoSmemMax = 48 * 1024;  // no opt-in: two CTAs (their registers) fit every target's SM
unsigned wo_smem(int R, int S) { return unsigned(kWoRedBytes + R * (S * 128 + 16 + S * 4)); }

int wo_sms(const OpLaunch& l) { return l.sms > 0 ? l.sms : 132; }

// K-parts per tile: the fewest (1, 2, 4, 8) giving ~12 warps per multiprocessor, each K-part keeping >= 8 blocks
// (one ring of loads in flight). Was ~16: the V4.1-Flash routed down (1920 tiles over 6 slots) then split K in 2,
// and unsplit measured 1.568-1.572 -> 1.557-1.561 ms a step on the sm_80 path (SMELT_CUDA_WO_EXPERTS sweep, session
// 14; the routed up, 1728 tiles, measured the same either way).
int wo_ks(int64_t items, int nb, int sms) {
  int ks = 1;
  while (ks < kWoWarps && items * ks < 12 * int64_t(sms) && nb / (2 * ks) >= 8) ks *= 2;
  return ks;
}

// Blocks per K-part per staged chunk: all of them when they fit in kWoSmemMax, else as many as fit (0: none).
int wo_cb(int R, int ks, int nb) {
  const int nbp = (nb + ks - 1) / ks;
  const int S = (int(kWoSmemMax) - kWoRedBytes) / R - 16;
  return std::min(nbp, std::max(0, S / (132 * ks)));
}

}  // namespace

// Measured on the H200 (docs/performance.md "Tensor-core weight-only decode"): the FP4 experts are faster than the
// CUDA-core kernels (0.51 vs 0.83 ms a step on the V4.1-Flash slice), the FP8 linears and FP8 experts are not yet
// (0.92 vs 0.74 ms: too few CTAs and per-block f16 conversion), so those stay on the CUDA-core kernels unless
// SMELT_CUDA_WO_MMA=all.
bool wo_mma_all() {
  static const bool on = env_is("SMELT_CUDA_WO_MMA", "all");
  return on;
}

bool try_linear_wo_mma(Ctx& c, DevPtr x, DevPtr y, const LinearW& f, DevPtr w, DevPtr s, int rows, int K, int N,
                       int G, float scale_after, int round) {
  if (!wo_mma_all()) return false;
  const std::string fmt = f.fmt;
  // Decode and verification chunks (rows <= 8, the MMA's n); longer chunks keep the CUDA-core kernels (the kernel
  // takes any row count in groups of 8, but would re-stage the activations for every group of tiles).
  if ((fmt != "fp8" && fmt != "fp4") || rows < 1 || rows > 8 || K % 32 || N < 1 || G < 1 || G > 65535) return false;
  const int nb = K / 32, sms = wo_sms(c.l), tiles = (N + 15) / 16;
  const int ks = wo_ks(int64_t(tiles) * G, nb, sms);
  const int R = std::min(rows, 8), cb = wo_cb(R, ks, nb);
  if (cb < 1) return false;
  const int groups = (tiles + kWoWarps / ks - 1) / (kWoWarps / ks);
  const unsigned gx = unsigned(std::min(groups, std::max(1, 2 * sms / G)));
  const std::string name = "smelt_linear_" + fmt + "_wo_mma";
  // Rows in groups of 8 (the MMA's n): grid y; each group's rows stage and multiply alone.
  for (int r0 = 0; r0 < rows; r0 += 8 * 65535) {
    const int rg = std::min(rows - r0, 8 * 65535), nr = std::min(rg, 8);
    const unsigned gy = unsigned((rg + 7) / 8);
    c.go(name.c_str(), gx, gy, unsigned(G), kWoWarps * 32, wo_smem(nr, ks * wo_cb(nr, ks, nb)),
         DevPtr(x + uint64_t(r0) * G * K * 4), DevPtr(y + uint64_t(r0) * G * N * 4), w, s, int(rg), int(K), int(N),
         int(f.blk), scale_after, int(round), int(ks), int(wo_cb(nr, ks, nb)));
  }
  return true;
}

bool try_experts_wo_mma(Ctx& c, const ExpertsLaunch& a) {
  const std::string fmt = a.f.fmt;
  if (fmt != "fp4" && !wo_mma_all()) return false;
  const int rows = c.l.rows, RT = rows * a.topk;
  if ((fmt != "fp8" && fmt != "fp4") || a.D % 32 || a.F % 32 || RT < 1 || RT > 65535) return false;
  const int sms = wo_sms(c.l);
  const int up_items = (a.F + 7) / 8, down_items = (a.D + 15) / 16;
  // From topk (one row's slots), not from rows: the row-count invariance of the K split.
  int ks_up = wo_ks(int64_t(up_items) * a.topk, a.D / 32, sms);
  int ks_down = wo_ks(int64_t(down_items) * a.topk, a.F / 32, sms);
  // $SMELT_CUDA_WO_EXPERTS=KS_UP,KS_DOWN,CTAS (tuning; 0 keeps the rule): the K splits and the CTAs a multiprocessor
  // (over the slots). Session 14's sweep: docs/performance.md.
  static const std::array<int, 3> forced = env_ints3("SMELT_CUDA_WO_EXPERTS");
  ks_up = split_or(forced[0], ks_up);
  ks_down = split_or(forced[1], ks_down);
  const int per_sm = forced[2] > 0 ? forced[2] : 2;
  const int cb_up = wo_cb(1, ks_up, a.D / 32), cb_down = wo_cb(1, ks_down, a.F / 32);
  if (cb_up < 1 || cb_down < 1) return false;
  const int cta_cap = std::max(1, (per_sm * sms + a.topk - 1) / a.topk);
  const unsigned gx_up = unsigned(std::min((up_items + kWoWarps / ks_up - 1) / (kWoWarps / ks_up), cta_cap));
  const unsigned gx_down = unsigned(std::min((down_items + kWoWarps / ks_down - 1) / (kWoWarps / ks_down), cta_cap));
  const std::string up = "smelt_moe_up_" + fmt + "_wo_mma", down = "smelt_moe_down_" + fmt + "_wo_mma";
  c.go(up.c_str(), gx_up, unsigned(RT), 1, kWoWarps * 32, wo_smem(1, ks_up * cb_up), a.x, a.D, a.F, a.topk, a.idx,
       a.n_experts, a.ew, int(a.f.blk), a.limit, a.h, ks_up, cb_up);
  c.go(down.c_str(), gx_down, unsigned(RT), 1, kWoWarps * 32, wo_smem(1, ks_down * cb_down), a.h, a.D, a.F, a.topk,
       a.idx, a.n_experts, a.ew, int(a.f.blk), a.out, ks_down, cb_down);
  return true;
}

}  // namespace smelt::runtime::cuda::detail
