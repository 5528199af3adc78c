// Shared helpers of the cuda launchers (runtime/cuda/ops*.cc): one code path per op serves both prepare_op
// (a dry run that only sums the scratch the op carves) and run_op (the real launches), so the two can never
// disagree about scratch sizes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "frontends/error.h"
#include "runtime/cuda/kernel_args.h"
#include "runtime/cuda/launch.h"
#include "runtime/plan.h"

namespace smelt::runtime::cuda::detail {

struct Ctx {
  const OpLaunch& l;
  bool dry = false;            // prepare: no launches, no device pointers
  uint64_t used = 0;           // scratch bytes carved so far
  uint64_t zeroed_used = 0;    // zeroed bytes carved so far
  bool round_done = false;     // the op applied its `round` attribute itself
  bool after_previous = false; // the next go() without programmatic dependent launch (Launcher::launch)
  bool serial_rest = false;    // every go() after the op's first one without it (a side-stream shared expert's down)
  int launched = 0;            // go() calls that launched a kernel
  Prepare* prep = nullptr;     // prepare: where the weights' readers are recorded

  // Prepare: quantized weight w is read by act-quant kernels (tile order on sm_89+) or by weight-only ones.
  void reads(const DeviceWeight* w, bool act_quant) {
    if (prep && w && w->id >= 0) (act_quant ? prep->act_quant_weights : prep->weight_only_weights).push_back(w->id);
  }
  // Prepare: FP4 weight w is read only by the weight-only tensor-core expert kernels (pair order where they run).
  void reads_fp4_pairs(const DeviceWeight* w) {
    if (prep && w && w->id >= 0) prep->fp4_pair_weights.push_back(w->id);
  }

  const OpRef& op() const { return *l.op; }
  [[noreturn]] void fail(const std::string& msg) const { l.plan->fail(*l.op, msg); }

  // A piece of the op's scratch, 256-byte aligned.
  DevPtr scratch(uint64_t bytes) {
    const uint64_t off = (used + 255) / 256 * 256;
    used = off + bytes;
    return dry ? 0 : l.scratch + off;
  }
  // A piece of the op's zeroed memory (OpLaunch::zeroed), 256-byte aligned: the op's kernels must leave it zeroed.
  // 0 in prepare, and where the backend gave the op none or too little (a run that carves more than its prepare
  // did): its launchers then take the paths without it.
  DevPtr zeroed(uint64_t bytes) {
    const uint64_t off = (zeroed_used + 255) / 256 * 256;
    zeroed_used = off + bytes;
    return dry || !l.zeroed || off + bytes > l.zeroed_bytes ? 0 : l.zeroed + off;
  }

  template <class... Ts>
  void go(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned shmem, const Ts&... args) {
    const bool programmatic = !after_previous && !(serial_rest && launched > 0);
    after_previous = false;
    if (dry || gx == 0 || gy == 0 || gz == 0) return;
    ++launched;
    void* a[] = {const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
    l.backend->launch(l, name, gx, gy, gz, block, shmem, a, programmatic);
  }
};

inline unsigned cdiv(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// An attribute, "" / 0 / default when the op's spec does not list it (older plans, other ops).
inline std::string attr_s(const OpRef& op, const char* name) {
  auto it = op.attrs.find(name);
  return it == op.attrs.end() ? std::string() : it->second.s;
}
inline int64_t attr_i(const OpRef& op, const char* name, int64_t dflt = 0) {
  auto it = op.attrs.find(name);
  return it == op.attrs.end() ? dflt : it->second.i;
}
inline double attr_f(const OpRef& op, const char* name, double dflt = 0.0) {
  auto it = op.attrs.find(name);
  return it == op.attrs.end() ? dflt : it->second.f;
}
// Whether the op rounds its output to bf16 (its `round` attribute).
inline bool is_round(const OpRef& op) { return attr_s(op, "round") == "bf16"; }
// The V4.1 ops' internal bf16 roundings, off under numerics = "fp32".
inline int model_rounding(const OpRef& op) { return attr_s(op, "numerics") == "fp32" ? 0 : 1; }

// Float weight dtype code of the kernels (common.cuh WDType): 0 F32, 1 BF16, 2 F16.
inline int float_dt(const Ctx& c, const DeviceWeight* w, const char* what) {
  if (!w) return 0;
  switch (w->dtype) {
    case smelt::plan::DType::F32: return 0;
    case smelt::plan::DType::BF16: return 1;
    case smelt::plan::DType::F16: return 2;
    default:
      c.fail(std::string("weight ") + what + " has dtype " + std::string(plan_dtype_name(w->dtype)) +
             "; the cuda kernels take F32, BF16 or F16 here");
  }
}
inline DevPtr ptr(const DeviceWeight* w) { return w ? w->ptr : 0; }
inline const DeviceWeight* weight(const OpLaunch& l, size_t j) { return j < l.w.size() ? l.w[j] : nullptr; }

InvFreq inv_freq_arg(const Ctx& c, bool v41);

// Kernel-side layout of linear weights: format suffix and FP8 block.
struct LinearW {
  const char* fmt = "f32";  // f32 | bf16 | f16 | fp8 | fp4
  bool quant = false;
  int blk = 32;
};
LinearW linear_format(const Ctx& c, const DeviceWeight* w, const DeviceWeight* s, const char* what);

// The expert FFN's buffers and shapes as run_experts hands them to the tensor-core launchers (ops_mma.cc,
// ops_wo_mma.cc): up (swiglu into h [slots, F]) and down (into out [slots, D]); the caller combines the slots.
// round: swiglu_mlp's `round = "bf16"` (its down kernel writes the op's output).
struct ExpertsLaunch {
  DevPtr x, idx, rw, h, out;
  ExpertW ew;
  int D, F, topk, n_experts;
  LinearW f;
  float limit;
  bool routed, round;
};

// A forced K split (a tuning switch) when it is one the tensor-core kernels take (1, 2, 4, 8; at most `most`), else
// the rule's.
inline int split_or(int forced, int rule, int most = 8) {
  return (forced == 1 || forced == 2 || forced == 4 || forced == 8) && forced <= most ? forced : rule;
}

// The decode GEMVs (kernels/linear/gemv_aq.cuh): block size and the most shared memory the launchers ask for
// (sm_120 allows 99 KiB).
constexpr int kGemvThreads = 512;
constexpr unsigned kGemvMaxSmem = 96 * 1024;
// smelt_rms_norm's block: ~4 values a thread, from len only (row-count invariant): 5120 -> 1024 threads, 128 -> 32.
inline unsigned rms_norm_threads(int64_t len) {
  return unsigned(std::clamp<int64_t>(cdiv(cdiv(len, 4), 32) * 32, 32, 1024));
}
// Blocks of a decode GEMV: two per multiprocessor (all resident at once: <= 64 registers per thread), each
// staging its activation row once and walking column groups.
inline unsigned gemv_blocks(const OpLaunch& l) { return unsigned(2 * (l.sms > 0 ? l.sms : 132)); }
// $SMELT_CUDA_DECODE_KERNELS=0: the warp-per-column kernels at decode too (A/B timing, bisecting).
bool decode_kernels();
// Tensor-core decode kernels (mma.sync) on an arch of at least `min_arch` (80: f16 MMA, 89: FP8 MMA), unless
// $SMELT_CUDA_MMA=0 asks for the CUDA-core kernels, which give the cpu backend's bits exactly (the tensor-core
// block sums are within a stated tolerance of them, not bit-identical: docs/performance.md "Tensor-core decode").
bool mma_kernels(const OpLaunch& l, int min_arch);
bool mma_kernels_on(int arch, int min_arch);  // the same for a GPU of `arch` (the backend's load-time choices)
// Chunks of several rows (prefill, draft verification) through the one-row-at-a-time tensor-core decode kernels:
// the act-quant linears in groups of up to 8 rows, the act-quant experts a row at a time (unless
// $SMELT_CUDA_PREFILL_MMA=0: the exact CUDA-core chunk kernels, for A/B timing).
bool prefill_mma();
int gemv_cpb(int nb, int64_t cols, unsigned blocks);  // output columns per block group
unsigned gemv_smem(int K, int rows_staged, int cpb, int terms_per_item, bool fp8);
// The warp-per-column linear kernel for format f (weight-only dequant, fp32 math) at `rows` rows.
std::string weight_only_kernel(const LinearW& f, int rows);

// y = x W^T on `rows` rows (x row stride K), through the linear family's kernels; act quant when `aq` (needs
// a quantized weight), bf16 output when `round`.
void linear(Ctx& c, DevPtr x, DevPtr y, const DeviceWeight* w, const DeviceWeight* s, int rows, int K, int N, bool aq,
            float scale_after, int round, const char* what);
// xu / xs scratch + smelt_act_quant_b32 of x [rows, K].
void act_quant(Ctx& c, DevPtr x, int rows, int K, DevPtr& xu, DevPtr& xs);

// Ops of ops_v41.cc / ops_dspark.cc (false: not theirs).
bool run_v41(Ctx& c);
bool run_dspark(Ctx& c);

}  // namespace smelt::runtime::cuda::detail
