// The cuda launchers of the V4 ops of docs/ops.md (V4.1 ops: ops_v41.cc, DSpark: ops_dspark.cc): which
// kernels of kernels/<family>/<family>.cu an op runs and with which arguments, mirroring the cpu backend's
// handlers (runtime/cpu/ops*.cc). Kernel argument types must match the kernels' parameters exactly (int =
// int32_t, i64 = int64_t, pointers = DevPtr, structs with the kernels' layout).
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <set>

#include "runtime/cpu/backend.h"
#include "runtime/cuda/ops_common.h"
#include "runtime/cuda/side_stream.h"
#include "runtime/cuda/ops_mma.h"
#include "runtime/cuda/ops_wo_mma.h"

namespace smelt::runtime::cuda {

using detail::cdiv;
using detail::Ctx;
using detail::ptr;
using detail::weight;

namespace detail {

InvFreq inv_freq_arg(const Ctx& c, bool v41) {
  InvFreq f;
  std::vector<float> v = cpu::inv_freq(c.op(), v41);
  if (v.size() > 256) c.fail("rope_dim " + std::to_string(2 * v.size()) + " exceeds the cuda kernels' 512");
  std::copy(v.begin(), v.end(), f.v);
  return f;
}

LinearW linear_format(const Ctx& c, const DeviceWeight* w, const DeviceWeight* s, const char* what) {
  LinearW f;
  if (!w) c.fail(std::string("weight ") + what + " is missing");
  switch (w->dtype) {
    case smelt::plan::DType::F32: f.fmt = "f32"; break;
    case smelt::plan::DType::BF16: f.fmt = "bf16"; break;
    case smelt::plan::DType::F16: f.fmt = "f16"; break;
    case smelt::plan::DType::F8_E4M3:
      f.fmt = "fp8";
      f.quant = true;
      if (!s) c.fail(std::string("FP8 weight ") + what + " has no scale");
      f.blk = fp8_weight_block(w->shape, s->shape);
      if (f.blk == 0) c.fail(std::string("FP8 weight ") + what + " has scales of a shape no block size explains");
      break;
    case smelt::plan::DType::I8:
      f.fmt = "fp4";
      f.quant = true;
      if (!s) c.fail(std::string("FP4 weight ") + what + " has no scale");
      break;
    default:
      c.fail(std::string("weight ") + what + " has dtype " + std::string(plan_dtype_name(w->dtype)) +
             ", which no cuda linear kernel takes");
  }
  return f;
}

void act_quant(Ctx& c, DevPtr x, int rows, int K, DevPtr& xu, DevPtr& xs) {
  if (K % 32) c.fail("activation quantization needs K % 32 == 0, got " + std::to_string(K));
  xu = c.scratch(uint64_t(rows) * K * 4);
  xs = c.scratch(uint64_t(rows) * (K / 32) * 4);
  c.go("smelt_act_quant_b32", cdiv(K / 32, 8), unsigned(rows), 1, 256, 0, x, int(K), int(K), xu, xs);
}

bool decode_kernels() {
  static const bool on = !env_off("SMELT_CUDA_DECODE_KERNELS");
  return on;
}

bool mma_kernels_on(int arch, int min_arch) {
  static const bool on = !env_off("SMELT_CUDA_MMA");
  return on && decode_kernels() && arch >= min_arch;
}
bool mma_kernels(const OpLaunch& l, int min_arch) { return mma_kernels_on(l.arch, min_arch); }

bool prefill_mma() {
  static const bool on = !env_off("SMELT_CUDA_PREFILL_MMA");
  return on;
}

int gemv_cpb(int nb, int64_t cols, unsigned blocks) {
  // ~2 items per thread per group, but enough groups to give every block work. SMELT_GEMV_ITEMS (1..8) overrides
  // the 2 for tuning runs: more items per group = more weight bytes per fold of nb serial adds, but more shared
  // memory (past kGemvMaxSmem the callers fall back to the slow path, so watch the per-op table).
  static const int items = [] {
    const char* v = std::getenv("SMELT_GEMV_ITEMS");
    const int i = v ? std::atoi(v) : 2;
    return i >= 1 && i <= 8 ? i : 2;
  }();
  int cpb = std::max(1, items * kGemvThreads / nb);
  cpb = int(std::min<int64_t>(cpb, std::max<int64_t>(1, cols / int64_t(blocks))));
  return std::min(cpb, 32);
}

unsigned gemv_smem(int K, int rows_staged, int cpb, int terms_per_item, bool fp8) {  // gemv_aq.cuh gemv_smem_bytes
  const int x_bytes = fp8 ? 8 : 4;  // XStage: FP8 weights stage the activation units as doubles
  return unsigned(rows_staged * (K * x_bytes + (K / 32) * 4) + 2 * cpb * terms_per_item * (K / 32 + 1) * 4);
}

std::string weight_only_kernel(const LinearW& f, int rows) {
  // One row: the _r1 kernels (the same bits, fewer registers; SMELT_CUDA_DECODE_KERNELS=0 switches them off).
  return std::string("smelt_linear_") + f.fmt + (rows == 1 && decode_kernels() ? "_r1" : "");
}

// Columns a warp for the one-row weight-only kernels (_r1): 4 once there are >= 12 warps an SM that way, 2 once there
// are >= 16, else 1. The 12: V4.1's wo_a (8 groups x 1024 columns) at 4 a warp is 256 blocks, one wave at 3 an SM,
// where 2 a warp made 512 blocks in 1.3 waves: 22.7 -> 19.0 us a launch, the step -3 to -5 us (H200, session 13).
int r1_cols(const OpLaunch& l, int64_t columns) {
  const int64_t sms = l.sms > 0 ? l.sms : 132;
  return columns >= 4 * 12 * sms ? 4 : (columns >= 2 * 16 * sms ? 2 : 1);
}

// $var's columns a warp (1, 2 or 4) for the _r1 kernels, overriding r1_cols in A/B runs (any grid gives the same
// bits); 0 when unset or another value.
int forced_r1_cols(const char* var) {
  const char* v = std::getenv(var);
  const int c = v ? std::atoi(v) : 0;
  return c == 1 || c == 2 || c == 4 ? c : 0;
}

// Blocks (x) of 256 threads for weight_only_kernel over N columns a group, G groups: a warp per column, but the
// _r1 kernels take 4 or 2 columns a warp (one activation load for all, r1_cols; SMELT_CUDA_LINEAR_R1_COLS overrides).
unsigned weight_only_blocks(const OpLaunch& l, int rows, int64_t N, int G) {
  static const int forced = forced_r1_cols("SMELT_CUDA_LINEAR_R1_COLS");
  int cw = 1;
  if (rows == 1 && decode_kernels()) {
    cw = forced ? forced : r1_cols(l, N * G);
    while (G > 1 && N % cw) cw /= 2;  // as the kernel: a warp's columns share their FP8 scale row
  }
  return unsigned(cdiv(N, 8 * cw));
}

// Blocks (x) of the one-row weight-only expert kernels (kernels/moe/moe.cu *_r1) over N columns a slot, G slots,
// `matrices` weight rows streamed a column (up: w1 and w3), counted as columns: the V4.1 FP8 shared expert's up
// (2304 columns) takes 2 a warp instead of 1, 0.164 -> 0.117 ms a step on the --numerics fp32 slice (H200; 4 a warp:
// 0.146), while the V4 bf16 experts keep their 4 (1.167 ms a step; 1 a warp: 1.273). SMELT_CUDA_EXPERT_R1_COLS (1, 2
// or 4) overrides the choice for A/B runs; any grid gives the same bits.
unsigned expert_r1_blocks(const OpLaunch& l, int64_t N, int G, int matrices) {
  static const int forced = forced_r1_cols("SMELT_CUDA_EXPERT_R1_COLS");
  return unsigned(cdiv(N, 8 * (forced ? forced : r1_cols(l, N * G * matrices))));
}

// The tensor-core weight-only GEMVs (sm_80+) of a linear (G = 1) or grouped linear: the ring kernels where they are
// switched on and take the call (ops_mma.cc), else the wo_mma ones (ops_wo_mma.cc); false: neither took it.
bool try_linear_weight_only_mma(Ctx& c, DevPtr x, DevPtr y, const LinearW& f, DevPtr wp, DevPtr sp, int rows, int K,
                                int N, int G, float scale_after, int round) {
  return mma_kernels(c.l, 80) && (try_linear_wo_ring(c, x, y, f, wp, sp, rows, K, N, G, scale_after, round) ||
                                  try_linear_wo_mma(c, x, y, f, wp, sp, rows, K, N, G, scale_after, round));
}

void linear(Ctx& c, DevPtr x, DevPtr y, const DeviceWeight* w, const DeviceWeight* s, int rows, int K, int N, bool aq,
            float scale_after, int round, const char* what) {
  const LinearW f = linear_format(c, w, s, what);
  if (K % 8) c.fail("the cuda linear kernels need K % 8 == 0, got K = " + std::to_string(K));
  const DevPtr wp = ptr(w), sp = ptr(s);
  if (f.quant) c.reads(w, aq);
  if (aq && f.quant) {
    const DevPtr wz = wgmma_linear_zeroed(c, f, K, N);
    if (rows <= 8 && mma_kernels(c.l, 89) && try_linear_mma(c, x, y, f, wp, sp, rows, K, N, scale_after, round, wz))
      return;  // tensor-core block sums (ops_mma.cc)
    if (rows <= 2 && decode_kernels() && K % 32 == 0) {
      // Decode: act quant + GEMV in one launch laid out for bandwidth, same bits (kernels/linear/gemv_aq.cuh).
      const int cpb = gemv_cpb(K / 32, N, gemv_blocks(c.l));
      const unsigned smem = gemv_smem(K, 1, cpb, 1, f.fmt == std::string("fp8"));
      if (smem <= kGemvMaxSmem) {
        const std::string name = std::string("smelt_gemv_") + f.fmt + "_aq";
        c.go(name.c_str(), std::min<unsigned>(cdiv(N, cpb), gemv_blocks(c.l)), unsigned(rows), 1, kGemvThreads, smem, x,
             y, wp, sp, int(K), int(N), int(f.blk), scale_after, int(round), cpb);
        return;
      }
    }
    // Chunks the call above did not take (more rows than 8, or than the staging of K fits: K = 5120 takes 3) through
    // the same kernels in groups of the most rows that fit: the weights are read once a group instead of once, by
    // kernels far faster per byte than the exact chunk kernels below (H200, V4.1 slice, a 64-row prefill chunk: the
    // linears and Engram's projection 172 -> 26 ms; docs/performance.md "Session 19"). A row's sums are then the
    // ones decode gives it.
    const int g = linear_mma_rows(c.l, K);
    if (rows > 1 && g >= 1 && N >= 1 && prefill_mma() && mma_kernels(c.l, 89)) {
      for (int r0 = 0; r0 < rows; r0 += g)
        try_linear_mma(c, x + DevPtr(r0) * DevPtr(K) * 4, y + DevPtr(r0) * DevPtr(N) * 4, f, wp, sp,
                       std::min(g, rows - r0), K, N, scale_after, round);
      return;
    }
    DevPtr xu, xs;
    act_quant(c, x, rows, K, xu, xs);
    const std::string name = std::string("smelt_linear_") + f.fmt + "_aq";
    c.go(name.c_str(), cdiv(N, 8), 1, 1, 256, 0, xu, xs, y, wp, sp, int(rows), int(K), int(N), int(f.blk),
         scale_after, int(round));
    return;
  }
  if (try_linear_weight_only_mma(c, x, y, f, wp, sp, rows, K, N, 1, scale_after, round)) return;
  const std::string name = weight_only_kernel(f, rows);
  c.go(name.c_str(), weight_only_blocks(c.l, rows, N, 1), 1, 1, 256, 0, x, y, wp, sp, int(rows), int(K), int(N),
       int(f.blk), scale_after, int(round));
}

}  // namespace detail

namespace {

struct U64Pack {
  uint64_t v[480];
};

using detail::is_round;

// Whether rows of len values take the register norm kernels (smelt_rms_norm_regs, smelt_hc_collapse_norm: up to 8
// values a thread, weights loaded before the dependent-launch wait; the same bits as smelt_rms_norm at the same block).
bool rms_norm_regs(int len) {
  return detail::decode_kernels() && int64_t(len) <= 8 * int64_t(detail::rms_norm_threads(len));
}

// smelt.rms_norm's kernel over `segs` segments of len values (y may be x), the output rounded to bf16 when `round`;
// `role` names the weight in errors.
void rms_norm(Ctx& c, DevPtr x, DevPtr y, const DeviceWeight* w, unsigned segs, int len, float eps, bool round,
              const char* role = "weight") {
  const char* name = rms_norm_regs(len) ? (round ? "smelt_rms_norm_regs_bf16" : "smelt_rms_norm_regs")
                                        : (round ? "smelt_rms_norm_bf16" : "smelt_rms_norm");
  c.go(name, segs, 1, 1, detail::rms_norm_threads(len), 0, x, y, ptr(w), detail::float_dt(c, w, role), len, eps);
}

// Decode (one row) attention split over the key list, same bits (kernels/attention/attention_decode.cu): tiles x
// heads blocks instead of one block per head. The scratch is carved whatever the row count, so prepare sizes it.
bool split_attention(Ctx& c, const AttnArgs& a) {
  const OpLaunch& l = c.l;
  const int64_t H = c.op().i("heads");
  const int64_t lc = (a.ratio > 0 && a.pool) ? (a.idx ? int64_t(a.k) : l.plan->max_seq_len() / a.ratio + 1) : 0;
  const int64_t Lmax = std::max<int64_t>(a.window, 0) + lc;
  const int64_t tiles = (Lmax + 63) / 64;
  // A single tile: one block per head. Two or more (window-only layers: 128 keys = 2 tiles) already pay: the
  // one-block kernel walks them serially on H multiprocessors (~60 us a launch measured at H = 64, hd = 512).
  if (tiles < 2 || H * tiles * a.hd * 4 > (int64_t(64) << 20)) return false;
  const DevPtr sc = c.scratch(uint64_t(H * Lmax) * 4), tmax = c.scratch(uint64_t(H * tiles) * 4);
  const DevPtr psum = c.scratch(uint64_t(H * tiles) * 4), nmax = c.scratch(uint64_t(H * tiles) * 4);
  const DevPtr pv = c.scratch(uint64_t(H * tiles * a.hd) * 4);
  if (l.rows != 1 || !detail::decode_kernels()) return false;
  // Scores: 8 heads a block (they share the K=V rows), spb slots a block: short lists (2 tiles) in parts of 8
  // slots so ~128 blocks run, not 16; up to 16 tiles the tiles kernel folds the tile maxima from the scores, past
  // that whole tiles (the scores kernel writes them). Tiles: hpb heads a block, the fewest K=V re-reads that still
  // give >= 128 blocks; z covers 256 channels each. Merge: a thread per channel.
  const unsigned hg = unsigned((H + 7) / 8), hz = unsigned((a.hd + 255) / 256);
  const int spb = tiles <= 4 ? 8 : tiles <= 16 ? 16 : 64;
  int hpb = 8;
  while (hpb > 1 && tiles * ((H + hpb - 1) / hpb) * hz < 128) hpb /= 2;
  c.go("smelt_attn_dec_scores", unsigned(tiles * (64 / spb)), hg, 1, 256, 0, a, l.step, int(H), int(Lmax), int(tiles),
       spb, sc, tmax);
  c.go("smelt_attn_dec_tiles", unsigned(tiles), unsigned((H + hpb - 1) / hpb), hz, 256, 0, a, l.step, int(H),
       int(Lmax), int(tiles), hpb, sc, spb == 64 ? tmax : DevPtr(0), psum, nmax, pv);
  const unsigned mz = unsigned((a.hd + 127) / 128);
  if ((l.tail_kv || l.tail_rope) && !c.dry) {  // the window KV update and inverse rope after it in the same launch
    AttnTail t;
    InvFreq f;
    if (const OpLaunch* kv = l.tail_kv) {
      t.kv = kv->in[0], t.ring = kv->state[0], t.R = int32_t(kv->state_rows[0]), t.kv_hd = int32_t(kv->in_w[0]);
      kv->seam_done = true;
    }
    if (const OpLaunch* rope = l.tail_rope) {
      const Ctx cr{*rope, false};
      f = detail::inv_freq_arg(cr, detail::attr_s(*rope->op, "variant") == "v41");
      t.y = rope->out[0], t.rope_dim = int32_t(rope->op->i("rope_dim"));
      t.inverse = int32_t(rope->op->i("inverse") != 0), t.rround = int32_t(is_round(*rope->op));
      rope->seam_done = true;
    }
    c.go("smelt_attn_dec_merge_tail", unsigned(H), mz, 1, 128, 0, a, l.step, int(tiles), psum, nmax, pv,
         int(is_round(c.op())), l.out[0], t, f);
  } else {
    c.go("smelt_attn_dec_merge", unsigned(H), mz, 1, 128, 0, a, l.step, int(tiles), psum, nmax, pv,
         int(is_round(c.op())), l.out[0]);
  }
  c.round_done = true;
  return true;
}

// Expert weights as the kernels address them: base + e * stride when evenly spaced, else a table of device
// addresses written into scratch by smelt_write_u64 (captured with the graph).
ExpertW expert_weights(Ctx& c, int n_experts, bool scaled) {
  ExpertW ew{};
  const OpLaunch& l = c.l;
  const int per = scaled ? 6 : 3;
  auto at = [&](int e, int j) -> DevPtr {  // j: 0 w1, 1 s1, 2 w2, 3 s2, 4 w3, 5 s3
    if (!scaled && (j & 1)) return 0;
    const DeviceWeight* w = weight(l, size_t(e) * per + (scaled ? j : j / 2));
    return ptr(w);
  };
  bool even = true;
  for (int j = 0; j < 6; ++j) {
    ew.base[j] = at(0, j);
    ew.stride[j] = n_experts > 1 ? int64_t(at(1, j) - at(0, j)) : 0;
    for (int e = 2; e < n_experts && even; ++e) even = at(e, j) == at(0, j) + uint64_t(e) * uint64_t(ew.stride[j]);
  }
  const uint64_t n = uint64_t(n_experts) * 6;
  if (c.dry) {
    c.scratch(n * 8);  // reserve the table in any case: the layout is only known at run time
    return ew;
  }
  DevPtr table = c.scratch(n * 8);
  if (even) return ew;
  ew.table = table;
  for (uint64_t first = 0; first < n; first += 480) {
    U64Pack pack{};
    const int cnt = int(std::min<uint64_t>(480, n - first));
    for (int k = 0; k < cnt; ++k) pack.v[k] = at(int((first + k) / 6), int((first + k) % 6));
    c.go("smelt_write_u64", 1, 1, 1, 256, 0, table, int(first), cnt, pack);
  }
  return ew;
}

// The routed experts (el) and the swiglu_mlp op after them (l.fuse_shared: the shared expert on the same x) in one up
// and one down launch (ops_mma.h try_experts_mma_with_shared); the shared expert's h is carved from this op's scratch,
// which must hold it. False: nothing launched, each op runs its own kernels.
bool try_experts_with_shared(Ctx& c, const detail::ExpertsLaunch& el) {
  const OpLaunch& l2 = *c.l.fuse_shared;
  const OpRef& op2 = *l2.op;
  // Both with the model's numerics (act quant: the wgmma pair), or both weight-only (the ring pair).
  const int model = detail::model_rounding(c.op());
  if (!op2.scaled || detail::model_rounding(op2) != model) return false;
  Ctx c2{l2, false};  // the shared op's weights and formats (it launches nothing)
  const DeviceWeight* w1 = weight(l2, 0);
  if (!w1 || w1->shape.size() != 2) return false;
  const detail::LinearW f = detail::linear_format(c2, w1, weight(l2, 1), "w1");
  const ExpertW ew = expert_weights(c2, 1, true);  // one expert: base pointers, no table
  const int F = int(w1->shape[0]);
  // Its h is carved here, past what the prepare run (no pairs) sized: given back when no pair runs, so that the
  // op's own kernels carve what they were sized for.
  const uint64_t used = c.used;
  const DevPtr h = c.scratch(uint64_t(F) * 4);
  const detail::ExpertsLaunch s{l2.in[0], 0, 0, h, l2.out[0], ew, int(l2.in_w[0]), F, 1, 1, f,
                                float(op2.f("swiglu_limit")), false, is_round(op2)};
  const bool ok = c.used <= c.l.scratch_bytes && (model ? detail::try_experts_mma_with_shared(c, el, s)
                                                        : detail::try_experts_wo_ring_with_shared(c, el, s));
  if (!ok) c.used = used;
  return ok;
}

// moe_experts (topk slots per row) and swiglu_mlp (one expert, no routing).
void run_experts(Ctx& c, bool routed) {
  const OpLaunch& l = c.l;
  const OpRef& op = c.op();
  if (!routed && l.shared_done && !c.dry) {  // the moe_experts op before it ran this op's kernels in its own
    l.shared_done = false;
    c.round_done = true;  // its down kernel applied the op's round
    return;
  }
  const int rows = l.rows, D = int(l.in_w[0]);
  const bool scaled = op.scaled;
  const int n_experts = routed ? int(op.i("n_experts")) : 1;
  const int topk = routed ? int(op.i("topk")) : 1;
  const float limit = float(op.f("swiglu_limit"));
  const DeviceWeight* w1 = weight(l, 0);
  const DeviceWeight* s1 = scaled ? weight(l, 1) : nullptr;
  if (!w1 || w1->shape.empty()) c.fail("expert weight w1 is missing");
  const int F = int(w1->shape[0]);
  const detail::LinearW f = detail::linear_format(c, w1, s1, "w1");
  if (scaled && !f.quant) c.fail("scaled expert weights must be FP8 or FP4");
  if (topk > 32) c.fail("topk " + std::to_string(topk) + " exceeds the cuda combine's 32");
  ExpertW ew = expert_weights(c, n_experts, scaled);
  // The routed tensor-core experts' slot counters (kernels/moe/moe_mma.cu slot_count_group): the down, launched early,
  // starts a slot's tiles once the up has counted every tile of that slot, not when the whole up grid has ended.
  // The launchers keep them where they measured faster (the weight-only ring's and mma.sync's; ops_mma.cc uncounted_ew), elsewhere
  // only with $SMELT_CUDA_SLOT_WAIT=all; $SMELT_CUDA_SLOT_WAIT=0: the grid-wide wait everywhere (A/B timing).
  static const bool slot_wait = !env_off("SMELT_CUDA_SLOT_WAIT");
  if (routed && scaled && slot_wait) ew.slot_done = c.zeroed(uint64_t(topk + 1) * 4);
  DevPtr idx = routed ? l.in[2] : 0;
  const DevPtr rw = routed ? l.in[1] : 0;
  const int RT = rows * topk;
  if (routed && op.i("n_routed") > 0) {  // expert parallel: this rank's experts only, by local id
    const DevPtr local = c.scratch(uint64_t(RT) * 4);
    c.go("smelt_moe_local_idx", cdiv(RT, 256), 1, 1, 256, 0, idx, local, RT, int(op.i("expert_begin")), n_experts);
    idx = local;
  }
  const DevPtr h = c.scratch(uint64_t(RT) * F * 4);
  const DevPtr out = routed ? c.scratch(uint64_t(RT) * D * 4) : l.out[0];
  // The routed experts' first kernel (up) is launched once the routing has finished, not early by programmatic
  // dependent launch: it can do nothing before its wait (its experts come from the routing), and launched early it
  // cost the V4.1-Flash slice's decode step 1.623 -> 1.514 ms (tensor-core path) and 1.804 -> 1.612 ms (weight-only
  // path; SMELT_CUDA_PDL_OFF sweeps, docs/performance.md). The shared expert, whose kernels load weights before
  // their wait, keeps it (off: +70 us).
  // $SMELT_CUDA_EXPERTS_PDL=1: launched early all the same (A/B timing; session 17, the up waiting for the routing
  // before anything: 1.170-1.172 -> 1.231-1.234 ms, the sm_80 path 1.291 -> 1.307).
  static const bool early = env_is("SMELT_CUDA_EXPERTS_PDL", "1");
  c.after_previous = routed && !early;
  // The shared expert on the side stream (smelt-schedule-streams marks it under fp32 numerics): its down is launched
  // once its up has finished, not early by dependent launch, so that its waiting blocks do not hold the
  // multiprocessors the main stream's routed experts are launched onto. H200, V4.1 slice, sm_80-path plan: 1.295 ->
  // 1.283-1.285 ms with it on the side stream, 1.249-1.251 with this too (session 18).
  // $SMELT_CUDA_SIDE_EXPERT_PDL=1: launched early all the same (A/B timing).
  static const bool side_early = env_is("SMELT_CUDA_SIDE_EXPERT_PDL", "1");
  c.serial_rest = !routed && l.side && !side_early;
  // Routed: the slots' outputs into l.out[0], times the routing weights unless up applied them (the model's
  // numerics do); swiglu_mlp's down kernel wrote l.out[0] itself.
  auto combine = [&](int weighted) {
    if (routed)
      c.go("smelt_moe_combine", cdiv(D, 256), unsigned(rows), 1, 256, 0, out, rw, idx, topk, n_experts, D, weighted,
           l.out[0]);
  };
  const detail::ExpertsLaunch el{l.in[0], idx, rw, h, out, ew, D, F, topk, n_experts, f, limit, routed, is_round(op)};
  // The routed experts with the shared expert after them in their kernels (l.fuse_shared, one row, kernels of sm_`arch`
  // and up): true when they ran, the shared op then launching nothing.
  auto paired = [&](int arch, int weighted) {
    if (!routed || !l.fuse_shared || c.dry) return false;
    l.fuse_shared->shared_done = false;
    if (rows != 1 || !detail::mma_kernels(l, arch) || !try_experts_with_shared(c, el)) return false;
    combine(weighted);
    l.fuse_shared->shared_done = true;
    return true;
  };
  // V4.1 with the model's numerics: act quant, exact GEMMs, bf16 roundings. Under numerics = "fp32" the
  // reference runs plain fp32 on the dequantized weights (no act quant): the weight-only kernels below.
  // The act-quant kernels below read every expert's w1, w2, w3 in tile order (sm_89+), the others row-major; the
  // weight-only FP4 experts' tensor-core kernels (the ring, wo_mma, the ring pair with the shared expert) read the
  // codes in pair order (kernels/cuda/common.cuh fp4_pair_order: half the decode instructions), so where they run
  // (`pairs`) the CUDA-core kernels below must not take these weights.
  const bool wo_fp4 = scaled && !detail::model_rounding(op) && std::string(f.fmt) == "fp4" && D % 32 == 0 && F % 32 == 0;
  if (scaled)
    for (int e = 0; e < n_experts; ++e)
      for (int j : {0, 2, 4}) {
        const DeviceWeight* w = weight(l, size_t(e) * 6 + j);
        if (wo_fp4) c.reads_fp4_pairs(w);
        else c.reads(w, detail::model_rounding(op) != 0);
      }
  const bool pairs = wo_fp4 && detail::mma_kernels(l, 80);
  if (!c.dry && pairs != w1->fp4_pairs)
    c.fail(std::string("FP4 expert weights are ") + (w1->fp4_pairs ? "" : "not ") +
           "in pair order but this launch's kernels " + (pairs ? "need" : "cannot read") + " it");
  if (scaled && detail::model_rounding(op)) {
    if (paired(89, 0)) return;
    if (rows == 1 && detail::mma_kernels(l, 89) && detail::try_experts_mma(c, el)) {  // tensor-core block sums
      combine(0);
      c.round_done = !routed;  // swiglu_mlp: the down kernel rounded l.out[0] when the op asks
      return;
    }
    // A chunk (prefill, draft verification): the same decode kernels a row at a time, its slots' x, idx, rw, h and out
    // (H200, V4.1 slice, a 64-row prefill chunk: routed and shared experts 263 -> ~20 ms against the exact chunk
    // kernels below, which read every selected expert once per slot at a fraction of the bandwidth).
    auto row_launch = [&](int r) {
      detail::ExpertsLaunch a = el;
      const DevPtr slots = DevPtr(r) * DevPtr(topk);
      a.x = l.in[0] + DevPtr(r) * DevPtr(D) * 4;
      if (routed) a.idx = idx + slots * 4, a.rw = rw + slots * 4;
      a.h = h + slots * DevPtr(F) * 4;
      a.out = out + (routed ? slots : DevPtr(r)) * DevPtr(D) * 4;
      return a;
    };
    if (rows > 1 && detail::prefill_mma() && detail::mma_kernels(l, 89) && detail::try_experts_mma(c, row_launch(0))) {
      for (int r = 1; r < rows; ++r) detail::try_experts_mma(c, row_launch(r));
      combine(0);
      c.round_done = !routed;
      return;
    }
    if (D % 32 || F % 32) c.fail("FP8/FP4 experts need dim and inter multiples of 32");
    const int rb = detail::model_rounding(op);
    const unsigned blocks = detail::gemv_blocks(l);
    const int cpb_up = detail::gemv_cpb(D / 32, int64_t(RT) * F, blocks);
    const int cpb_down = detail::gemv_cpb(F / 32, int64_t(RT) * D, blocks);
    const bool fp8 = f.fmt == std::string("fp8");
    const unsigned smem_up = detail::gemv_smem(D, 1, cpb_up, 2, fp8), smem_down = detail::gemv_smem(F, RT, cpb_down, 1, fp8);
    if (rows == 1 && detail::decode_kernels() && smem_up <= detail::kGemvMaxSmem && smem_down <= detail::kGemvMaxSmem) {
      // Decode: every (slot, column) of the selected experts in one launch each, same bits (kernels/moe/moe_decode.cu).
      // Each kernel act-quantizes its input rows while staging them.
      const std::string up = std::string("smelt_moe_up_") + f.fmt + "_aq_dec";
      c.go(up.c_str(), std::min<unsigned>(cdiv(int64_t(RT) * F, cpb_up), blocks), 1, 1, detail::kGemvThreads, smem_up,
           l.in[0], D, F, topk, idx, n_experts, rw, ew, int(f.blk), limit, rb, h, cpb_up);
      const std::string down = std::string("smelt_moe_down_") + f.fmt + "_aq_dec";
      c.go(down.c_str(), std::min<unsigned>(cdiv(int64_t(RT) * D, cpb_down), blocks), 1, 1, detail::kGemvThreads,
           smem_down, h, D, F, topk, idx, n_experts, ew, int(f.blk), rb, int(!routed && is_round(op)), out, cpb_down);
      combine(0);
      c.round_done = !routed;  // swiglu_mlp: the down kernel rounded l.out[0] when the op asks
      return;
    }
    DevPtr xu, xs, hu, hs;
    detail::act_quant(c, l.in[0], rows, D, xu, xs);
    const std::string up = std::string("smelt_moe_up_") + f.fmt + "_aq";
    c.go(up.c_str(), cdiv(F, 8), unsigned(RT), 1, 256, 0, xu, xs, D, F, topk, idx, n_experts, rw, ew, int(f.blk),
         limit, rb, h);
    detail::act_quant(c, h, RT, F, hu, hs);
    const std::string down = std::string("smelt_moe_down_") + f.fmt + "_aq";
    c.go(down.c_str(), cdiv(D, 8), unsigned(RT), 1, 256, 0, hu, hs, D, F, topk, idx, n_experts, ew, int(f.blk), rb,
         out);
    combine(0);
    return;
  }
  if (D % 8 || F % 8) c.fail("the cuda expert kernels need dim and inter multiples of 8");
  if (scaled && paired(80, 1)) return;  // weight-only: the ring pair (sm_80+)
  if (!(scaled && detail::mma_kernels(l, 80) &&
        (detail::try_experts_wo_ring(c, el) || detail::try_experts_wo_mma(c, el)))) {  // else tensor cores
    if (pairs)
      c.fail("FP4 experts (dim " + std::to_string(D) + ", inter " + std::to_string(F) + ", " + std::to_string(RT) +
             " slots): no weight-only tensor-core kernel takes this launch, and the CUDA-core ones cannot read the "
             "weights in pair order");
    // One row: 1, 2 or 4 columns a warp with weight loads in flight, the same bits (kernels/moe/moe.cu *_r1);
    // SMELT_CUDA_DECODE_KERNELS=0 keeps the warp-per-column kernels.
    const bool r1 = rows == 1 && detail::decode_kernels();
    const std::string sfx = r1 ? "_r1" : "";
    const std::string up = std::string("smelt_moe_up_") + f.fmt + sfx;
    c.go(up.c_str(), r1 ? detail::expert_r1_blocks(l, F, RT, 2) : unsigned(cdiv(F, 8)), unsigned(RT), 1, 256, 0,
         l.in[0], D, F, topk, idx, n_experts, ew, int(f.blk), limit, h);
    const std::string down = std::string("smelt_moe_down_") + f.fmt + sfx;
    c.go(down.c_str(), r1 ? detail::expert_r1_blocks(l, D, RT, 1) : unsigned(cdiv(D, 8)), unsigned(RT), 1, 256, 0,
         h, D, F, topk, idx, n_experts, ew, int(f.blk), out);
  }
  combine(1);
}

// A seam from its head op (backend.cc plan_seams): [the add,] the hc_expand and the next hc_collapse in one
// smelt_hc_seam* launch, when this run's buffers allow it (side_stream.h seam_launch_allowed: a written buffer may
// share bytes with a read one only as the same column). Else false: the ops launch their own kernels.
bool run_seam(Ctx& c) {
  const OpLaunch& l = c.l;
  if (!l.seam_collapse || c.dry) return false;
  const bool add = l.op->spec->kind == OpKind::Add;
  const OpLaunch& e = add ? *l.seam_expand : l;
  const OpLaunch& k = *l.seam_collapse;
  const int rows = l.rows, D = int(e.in_w[1]), n = int(e.op->i("hc_mult"));
  SeamBuffers sb;
  sb.y = add ? l.out[0] : e.in[1], sb.X = e.in[0], sb.out = e.out[0], sb.u = k.out[0];
  sb.post = e.in[2], sb.comb = e.in[3], sb.pre = k.in[1];
  if (add) sb.a = l.in[0], sb.b = l.in[1];
  sb.add = add, sb.rows = rows, sb.D = D, sb.n = n;
  const bool ok = seam_launch_allowed(sb);
  if (!ok) {
    static int told = 0;  // $SMELT_CUDA_SEAMS=why: say which seams ran unfused (the first 16 times)
    static const bool why = env_is("SMELT_CUDA_SEAMS", "why");
    if (why && told++ < 16) {
      std::fprintf(stderr, "seam at %s unfused (rows %d): offsets vs X", l.op->where().c_str(), rows);
      for (DevPtr q : {sb.y, sb.out, sb.u, sb.post, sb.comb, sb.pre, sb.a, sb.b})
        std::fprintf(stderr, " %lld", q ? (long long)(q - sb.X) : 0LL);
      std::fprintf(stderr, " (y out u post comb pre a b)\n");
    }
    return false;
  }
  const bool R = is_round(*e.op);
  if (add)
    c.go(R ? "smelt_hc_seam_add_bf16" : "smelt_hc_seam_add", cdiv(D, 256), unsigned(rows), 1, 256, 0, sb.a, sb.b,
         sb.y, sb.X, sb.post, sb.comb, sb.pre, n, D, sb.out, sb.u);
  else
    c.go(R ? "smelt_hc_seam_bf16" : "smelt_hc_seam", cdiv(D, 256), unsigned(rows), 1, 256, 0, sb.y, sb.X, sb.post,
         sb.comb, sb.pre, n, D, sb.out, sb.u);
  if (add) e.seam_done = true;
  k.seam_done = true;
  c.round_done = true;
  return true;
}

// A seam's later op (its hc_expand after the add, its hc_collapse) whose kernel the seam's head launched this run
// (run_seam), or an attention tail's op that the attention's merge ran (split_attention): nothing to launch, the
// output rounded as the op would have.
bool ran_in_seam(Ctx& c) {
  if (!c.l.seam_done || c.dry) return false;
  c.l.seam_done = false;
  c.round_done = true;
  return true;
}

void run_v4(Ctx& c) {
  const OpLaunch& l = c.l;
  const OpRef& op = c.op();
  const int rows = l.rows;
  const unsigned R = unsigned(rows);
  switch (op.spec->kind) {
    case OpKind::Embedding: {
      const DeviceWeight* t = weight(l, 0);
      const int64_t vocab = t && !t->shape.empty() ? t->shape[0] : 0;
      const int D = int(l.out_w[0]);
      c.go("smelt_embedding", cdiv(D, 256), R, 1, 256, 0, l.in[0], ptr(t), detail::float_dt(c, t, "embed"), vocab, D,
           l.out[0]);
      break;
    }
    case OpKind::HcInit: {
      const int D = int(l.in_w[0]);
      c.go("smelt_hc_init", cdiv(D, 256), R, unsigned(op.i("hc_mult")), 256, 0, l.in[0], l.out[0], D);
      break;
    }
    case OpKind::HcMix: {
      const int n = int(op.i("hc_mult")), len = int(l.in_w[0]), outs = (2 + n) * n;
      if (n > 8) c.fail("hc_mult " + std::to_string(n) + " exceeds the cuda kernels' 8");
      const DeviceWeight *fn = weight(l, 0), *base = weight(l, 1), *scale = weight(l, 2);
      const bool v41 = op.s("variant") == "v41";
      if (v41 && n <= 5 && len <= 32 * 1024 && detail::decode_kernels()) {
        // The logits' 1024 partial sums per output over 4 blocks each (96 at hc_mult 4), then their fold and the
        // Sinkhorn in one block per row: the bits of the two kernels below (kernels/hc/hc.cu).
        const DevPtr part = c.scratch(uint64_t(rows) * (outs + 1) * 32 * 8);
        c.go("smelt_hc_mix_partials", unsigned(outs * 4), R, 1, 256, 0, l.in[0], len, ptr(fn),
             detail::float_dt(c, fn, "fn"), int(1024), part);
        c.go("smelt_hc_mix_sinkhorn", R, 1, 1, 128, 0, part, len, int(1024), float(op.f("norm_eps")), n, ptr(base),
             detail::float_dt(c, base, "base"), ptr(scale), detail::float_dt(c, scale, "scale"),
             int(op.i("sinkhorn_iters")), float(op.f("hc_eps")), l.out[0], l.out[1], l.out[2]);
        break;
      }
      const DevPtr m = c.scratch(uint64_t(rows) * outs * 4);
      c.go("smelt_hc_mix_logits", unsigned(outs), R, 1, 1024, 0, l.in[0], len, ptr(fn), detail::float_dt(c, fn, "fn"),
           float(op.f("norm_eps")), int(v41), m);
      // A warp per row (lane per element of comb, same bits) while n * n fits a warp; SMELT_CUDA_DECODE_KERNELS=0:
      // the serial kernel.
      const bool warp = n <= 5 && detail::decode_kernels();
      c.go(warp ? "smelt_hc_sinkhorn_warp" : "smelt_hc_sinkhorn", warp ? cdiv(rows, 4) : cdiv(rows, 32), 1, 1,
           warp ? 128 : 32, 0, m, rows, n, ptr(base), detail::float_dt(c, base, "base"), ptr(scale),
           detail::float_dt(c, scale, "scale"), int(op.i("sinkhorn_iters")), float(op.f("hc_eps")), l.out[0],
           l.out[1], l.out[2]);
      break;
    }
    case OpKind::HcCollapse: {
      if (ran_in_seam(c)) break;
      const int D = int(l.out_w[0]), n = int(op.i("hc_mult"));
      const DeviceWeight* norm = weight(l, 0);  // the rms_norm smelt-fuse-hc-norm folded in
      c.round_done = is_round(op);  // the kernels below round their output in the same pass
      if (!norm) {
        c.go(c.round_done ? "smelt_hc_collapse_bf16" : "smelt_hc_collapse", cdiv(D, 256), R, 1, 256, 0, l.in[0],
             l.in[1], n, D, l.out[0]);
        break;
      }
      const bool cr = detail::attr_s(op, "collapse_round") == "bf16";
      const float eps = float(op.f("norm_eps"));
      if (rms_norm_regs(D)) {  // one launch, the two kernels' bits
        const std::string name = std::string("smelt_hc_collapse_norm") + (cr ? "_cr" : "") + (c.round_done ? "_bf16" : "");
        c.go(name.c_str(), R, 1, 1, detail::rms_norm_threads(D), 0, l.in[0], l.in[1], n, l.out[0], ptr(norm),
             detail::float_dt(c, norm, "norm"), D, eps);
        break;
      }
      c.go(cr ? "smelt_hc_collapse_bf16" : "smelt_hc_collapse", cdiv(D, 256), R, 1, 256, 0, l.in[0], l.in[1], n, D,
           l.out[0]);
      rms_norm(c, l.out[0], l.out[0], norm, R, D, eps, c.round_done, "norm");  // in place (the kernels allow it)
      break;
    }
    case OpKind::HcExpand: {
      if (ran_in_seam(c)) break;
      if (run_seam(c)) break;
      const int D = int(l.in_w[1]);
      c.round_done = is_round(op);
      c.go(c.round_done ? "smelt_hc_expand_bf16" : "smelt_hc_expand", cdiv(D, 256), R, unsigned(op.i("hc_mult")), 256,
           0, l.in[0], l.in[1], l.in[2], l.in[3], D, l.out[0]);
      break;
    }
    case OpKind::HcHead: {
      const int n = int(op.i("hc_mult")), D = int(l.out_w[0]);
      const DevPtr m = c.scratch(uint64_t(rows) * n * 4);
      const DeviceWeight *fn = weight(l, 0), *base = weight(l, 1), *scale = weight(l, 2);
      c.go("smelt_hc_mix_logits", unsigned(n), R, 1, 1024, 0, l.in[0], int(n * D), ptr(fn),
           detail::float_dt(c, fn, "fn"), float(op.f("norm_eps")), int(0), m);
      c.go("smelt_hc_head_collapse", cdiv(D, 256), R, 1, 256, 0, l.in[0], m, n, D, ptr(base),
           detail::float_dt(c, base, "base"), ptr(scale), detail::float_dt(c, scale, "scale"), float(op.f("hc_eps")),
           l.out[0]);
      break;
    }
    case OpKind::RmsNorm: {
      const int groups = int(op.i("groups")), len = int(l.in_w[0] / groups);
      c.round_done = is_round(op);
      rms_norm(c, l.in[0], l.out[0], weight(l, 0), unsigned(rows * groups), len, float(op.f("eps")), c.round_done);
      break;
    }
    case OpKind::Linear: {
      const bool aq = !detail::attr_s(op, "act_quant").empty();
      detail::linear(c, l.in[0], l.out[0], weight(l, 0), weight(l, 1), rows, int(l.in_w[0]), int(l.out_w[0]), aq,
                     float(detail::attr_f(op, "scale_after", 1.0)), int(is_round(op)), "weight");
      c.round_done = true;
      break;
    }
    case OpKind::GroupedLinear: {
      const int G = int(op.i("groups")), K = int(l.in_w[0] / G), N = int(l.out_w[0] / G);
      const detail::LinearW f = detail::linear_format(c, weight(l, 0), weight(l, 1), "weight");
      if (f.quant) c.reads(weight(l, 0), false);
      if (K % 8) c.fail("the cuda linear kernels need K % 8 == 0, got " + std::to_string(K));
      if (detail::try_linear_weight_only_mma(c, l.in[0], l.out[0], f, ptr(weight(l, 0)), ptr(weight(l, 1)), rows, K,
                                             N, G, 1.f, int(is_round(op)))) {
        c.round_done = true;
        break;
      }
      const std::string name = detail::weight_only_kernel(f, rows);  // FP8 wo_a: exact dequant, fp32 (as cpu)
      c.go(name.c_str(), detail::weight_only_blocks(l, rows, N, G), unsigned(G), 1, 256, 0, l.in[0], l.out[0],
           ptr(weight(l, 0)), ptr(weight(l, 1)), rows, K, N, int(f.blk), 1.0f, int(is_round(op)));
      c.round_done = true;
      break;
    }
    case OpKind::Rope: {
      if (ran_in_seam(c)) break;
      const InvFreq f = detail::inv_freq_arg(c, detail::attr_s(op, "variant") == "v41");
      c.round_done = is_round(op);
      const int heads = int(op.i("heads")), hd = int(op.i("head_dim")), rd = int(op.i("rope_dim"));
      if (detail::decode_kernels()) {  // a thread per channel or rotated pair, one pass (same bits)
        c.go(c.round_done ? "smelt_rope_units_bf16" : "smelt_rope_units", R, cdiv(int64_t(heads) * (hd - rd / 2), 256),
             1, 256, 0, l.in[0], l.out[0], l.step, heads, hd, rd, int(op.i("inverse") != 0), f);
        break;
      }
      // a row's heads over up to 16 blocks
      c.go(c.round_done ? "smelt_rope_bf16" : "smelt_rope", R, unsigned(std::min(heads, 16)), 1, 128, 0, l.in[0],
           l.out[0], l.step, heads, hd, rd, int(op.i("inverse") != 0), f);
      break;
    }
    case OpKind::WindowKvUpdate:
      if (ran_in_seam(c)) break;
      c.go("smelt_window_kv_update", R, 1, 1, 128, 0, l.in[0], rows, int(l.in_w[0]), l.step, l.state[0],
           int(l.state_rows[0]));
      break;
    case OpKind::Compressor: {
      const int ratio = int(op.i("ratio")), hd = int(op.i("head_dim")), cw = (op.i("overlap") ? 2 : 1) * hd;
      if (hd > 1024) c.fail("compressor head_dim " + std::to_string(hd) + " exceeds the cuda kernel's 1024");
      const DevPtr kv = c.scratch(uint64_t(rows) * cw * 4), gate = c.scratch(uint64_t(rows) * cw * 4);
      detail::linear(c, l.in[0], kv, weight(l, 0), nullptr, rows, int(l.in_w[0]), cw, false, 1.f, 0, "wkv");
      detail::linear(c, l.in[0], gate, weight(l, 1), nullptr, rows, int(l.in_w[0]), cw, false, 1.f, 0, "wgate");
      const InvFreq f = detail::inv_freq_arg(c, false);
      const DeviceWeight *ape = weight(l, 2), *norm = weight(l, 3);
      c.go("smelt_compressor_emit", unsigned(rows / ratio + 1), 1, 1, 256, 0, kv, gate, rows, l.step, l.state[0],
           int(l.state_rows[0]), l.state[1], int64_t(l.state_rows[1]), ptr(ape), detail::float_dt(c, ape, "ape"),
           ptr(norm), detail::float_dt(c, norm, "norm"), ratio, hd, int(op.i("overlap") != 0), float(op.f("eps")),
           int(op.i("rope_dim")), f);
      c.go("smelt_compressor_ring_store", R, 1, 1, 256, 0, kv, gate, rows, cw, l.step, l.state[0],
           int(l.state_rows[0]));
      break;
    }
    case OpKind::IndexerTopk: {
      const int H = int(op.i("heads")), hd = int(op.i("head_dim")), topk = int(op.i("topk"));
      const int64_t S = l.state_rows[0];
      if (topk > 2048) c.fail("topk " + std::to_string(topk) + " exceeds the cuda kernel's 2048");
      if (int64_t(H) * hd * 4 > 48 * 1024) c.fail("indexer queries exceed 48 KiB of shared memory");
      const DevPtr scores = c.scratch(uint64_t(rows) * uint64_t(S) * 4);
      c.go("smelt_indexer_scores", cdiv(S, 8), R, 1, 256, unsigned(H * hd * 4), l.in[0], l.in[1], l.state[0], S,
           l.step, H, hd, int(op.i("ratio")), float(std::pow(double(hd), -0.5)), float(std::pow(double(H), -0.5)),
           scores);
      c.go("smelt_indexer_topk", R, 1, 1, 1024, 0, scores, S, l.step, int(op.i("ratio")), topk, int(0), DevPtr(0),
           int(0), int(1), l.out[0]);
      break;
    }
    case OpKind::SparseAttention: {
      AttnArgs a{};
      a.q = l.in[0], a.chunk_kv = l.in[1], a.idx = l.in[2], a.k = l.in[2] ? int32_t(l.in_w[2]) : 0;
      a.sink = ptr(weight(l, 0)), a.sink_dt = detail::float_dt(c, weight(l, 0), "sink");
      a.ring = l.state[0], a.R = int32_t(l.state_rows[0]), a.window = int32_t(op.i("window"));
      a.ratio = int32_t(op.i("ratio")), a.pool = l.state[1], a.pool_rows = l.state[1] ? l.state_rows[1] : 0;
      a.hd = int32_t(op.i("head_dim")), a.scale = float(op.f("scale"));
      a.v41 = op.s("numerics") == "v41", a.rb = detail::model_rounding(op), a.dspark = 0;
      if (a.hd > 512) c.fail("head_dim " + std::to_string(a.hd) + " exceeds the cuda attention kernel's 512");
      if (split_attention(c, a)) break;
      c.go("smelt_sparse_attention", R, unsigned(op.i("heads")), 1, 128, 0, a, l.step, rows, l.out[0]);
      break;
    }
    case OpKind::MoeRoute: {
      const DeviceWeight *gate = weight(l, 0), *bias = weight(l, 1), *t2e = weight(l, 2);
      const int E = gate && !gate->shape.empty() ? int(gate->shape[0]) : 0;
      const int K = int(op.i("topk"));
      const std::string& s = op.s("scoring");
      const int scoring = s == "softmax" ? 1 : s == "sigmoid" ? 2 : 0;
      int t64 = 0;
      int64_t vocab = 0;
      if (t2e) {
        if (t2e->dtype != smelt::plan::DType::I32 && t2e->dtype != smelt::plan::DType::I64)
          c.fail("tid2eid must be I32 or I64 on the device");
        t64 = t2e->dtype == smelt::plan::DType::I64;
        vocab = t2e->shape.empty() ? 0 : t2e->shape[0];
      }
      if (E * 8 > 48 * 1024) c.fail("too many experts for the cuda router's shared memory");
      // Gate dots over many blocks (their gate rows and x staged in shared memory), parallel selection: the same
      // outputs. Two experts a block while their rows fit 96 KiB, else one.
      const int D = int(l.in_w[0]), gsz = detail::float_dt(c, gate, "gate") == 0 ? 4 : 2;
      auto dots_smem = [&](int warps) { return unsigned((int64_t(warps) * D * gsz + 15) / 16 * 16 + int64_t(D) * 4); };
      const int gwarps = dots_smem(2) <= 96 * 1024 ? 2 : 1;
      if (detail::decode_kernels() && dots_smem(gwarps) <= 96 * 1024 && (3 * E + K) * 4 <= 48 * 1024) {
        const DevPtr dots = c.scratch(uint64_t(rows) * E * 4);
        c.go("smelt_moe_gate_dots", cdiv(E, gwarps), R, 1, unsigned(32 * gwarps), dots_smem(gwarps), l.in[0], D,
             ptr(gate), detail::float_dt(c, gate, "gate"), E, dots);
        c.go("smelt_moe_route_select", R, 1, 1, 256, unsigned((3 * E + K) * 4), dots, E, ptr(bias),
             detail::float_dt(c, bias, "bias"), ptr(t2e), t64, vocab, l.in[1], K, scoring,
             int(op.i("norm_topk_prob") != 0), float(op.f("route_scale")), float(detail::attr_f(op, "gate_temp", 1.0)),
             l.out[0], l.out[1]);
        break;
      }
      c.go("smelt_moe_route", R, 1, 1, 256, unsigned(2 * E * 4), l.in[0], int(l.in_w[0]), ptr(gate),
           detail::float_dt(c, gate, "gate"), E, ptr(bias), detail::float_dt(c, bias, "bias"), ptr(t2e), t64, vocab,
           l.in[1], K, scoring, int(op.i("norm_topk_prob") != 0), float(op.f("route_scale")),
           float(detail::attr_f(op, "gate_temp", 1.0)), l.out[0], l.out[1]);
      break;
    }
    case OpKind::MoeExperts: run_experts(c, true); break;
    case OpKind::SwigluMlp: run_experts(c, false); break;
    case OpKind::Add: {
      if (run_seam(c)) break;
      const int64_t n = int64_t(rows) * l.in_w[0];
      c.round_done = is_round(op);
      c.go(c.round_done ? "smelt_add_bf16" : "smelt_add", unsigned(std::min<int64_t>(cdiv(n, 256), 4096)), 1, 1, 256, 0,
           l.in[0], l.in[1], l.out[0], n);
      break;
    }
    default:
      if (!detail::run_v41(c) && !detail::run_dspark(c)) c.fail("has no cuda launcher");
  }
}

void run(Ctx& c) {
  run_v4(c);
  if (c.round_done || !is_round(c.op())) return;
  for (size_t j = 0; j < std::size(c.l.out); ++j) {
    if (!c.l.out[j] || j >= c.op().spec->outputs.size() || c.op().spec->outputs[j].type != 'f') continue;
    const int64_t n = int64_t(c.l.rows) * c.l.out_w[j];
    c.go("smelt_round_bf16_rows", unsigned(std::min<int64_t>(cdiv(n, 256), 4096)), 1, 1, 256, 0, c.l.out[j], n);
  }
}

}  // namespace

void prepare_op(const Plan& plan, const OpRef& op, int64_t max_rows, Prepare& out) {
  // A dry run over a launch description built from the plan: same code path, no launches.
  OpLaunch l;
  l.plan = &plan;
  l.op = &op;
  l.rows = int(max_rows);
  for (size_t j = 0; j < op.inputs.size() && j < 4; ++j)
    if (op.inputs[j] >= 0) l.in_w[j] = plan.row_elems(op.inputs[j]), l.in[j] = 1;
  for (size_t j = 0; j < op.outputs.size() && j < 3; ++j)
    if (op.outputs[j] >= 0) l.out_w[j] = plan.row_elems(op.outputs[j]), l.out[j] = 1;
  std::vector<DeviceWeight> ws(op.weights.size());
  for (size_t j = 0; j < op.weights.size(); ++j) {
    if (op.weights[j] < 0) {
      l.w.push_back(nullptr);
      continue;
    }
    ws[j].ptr = 0;
    ws[j].dtype = plan.fb().weights()->Get(op.weights[j])->dtype();
    ws[j].shape = plan.weight_shape(op.weights[j]);
    ws[j].id = op.weights[j];
    l.w.push_back(&ws[j]);
  }
  for (size_t j = 0; j < op.states.size() && j < 4; ++j)
    if (op.states[j] >= 0) {
      const std::vector<int64_t> s = plan.state_shape(op.states[j]);
      l.state[j] = 1, l.state_rows[j] = s[0], l.state_cols[j] = s.size() > 1 ? s[1] : 1;
    }
  Ctx c{l, true};
  c.prep = &out;
  run(c);
  out.scratch_bytes = c.used;
  out.zeroed_bytes = c.zeroed_used;
}

void run_op(const OpLaunch& l) {
  Ctx c{l, false};
  run(c);
}

bool fp4_pair_order_on(int arch) { return detail::mma_kernels_on(arch, 80); }

bool has_launcher(const std::string& name) {
  static const std::set<std::string> names = {
      "smelt.embedding", "smelt.hc_init", "smelt.hc_mix", "smelt.hc_collapse", "smelt.hc_expand", "smelt.hc_head",
      "smelt.rms_norm", "smelt.linear", "smelt.grouped_linear", "smelt.rope", "smelt.window_kv_update",
      "smelt.compressor", "smelt.indexer_topk", "smelt.sparse_attention", "smelt.moe_route", "smelt.moe_experts",
      "smelt.swiglu_mlp", "smelt.add", "smelt.fake_quant", "smelt.kv_compressor", "smelt.indexer_v41",
      "smelt.engram_hash", "smelt.engram", "smelt.engram_lookup", "smelt.engram_gate",
      "smelt.indexer_scores", "smelt.indexer_select", "smelt.hc_mean", "smelt.capture", "smelt.concat",
      "smelt.dspark_attention", "smelt.dspark_head",
      // Collectives: the backend runs them through NCCL (runtime/cuda/nccl.cc), not a launcher here.
      "smelt.all_reduce", "smelt.all_gather", "smelt.send", "smelt.recv"};
  return names.count(name) > 0;
}

}  // namespace smelt::runtime::cuda
