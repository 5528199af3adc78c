// GPU tests (ctest label "gpu") of the small decode kernels that replace latency-bound ones with the same bits:
// smelt_rope_units, smelt_rms_norm_regs, smelt_hc_mix_partials + smelt_hc_mix_sinkhorn, the staged
// smelt_moe_gate_dots + smelt_moe_route_select and smelt_moe_combine. Each is compared bit for bit with the kernel
// it replaces (kept as the SMELT_CUDA_DECODE_KERNELS=0 path, itself checked against the C++ references in
// test_kernels_gpu*.cc) or, for the combine, with the same float sums on the host, at the V4.1-Flash decode
// shapes (hidden 5120, 64 x 512 heads with rope 64, hc_mult 4, 384 experts top-6) and at odd ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/bf16.h"
#include "kernels/rope/reference.h"
#include "runtime/cuda/kernel_args.h"
#include "tests/kernels_cuda/bits.h"
#include "tests/kernels_cuda/harness.h"

namespace {

using smelt::runtime::cuda::InvFreq;
using smelt::test_cuda::DevPtr;
using smelt::test_cuda::gpu;
using smelt::test_cuda::bf16_bits;
using smelt::test_cuda::expect_bits_equal;
using smelt::test_cuda::randn;

unsigned cdiv(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// ---- rope ------------------------------------------------------------------------------------------------------

TEST(CudaSmallDecodeKernels, RopeUnitsEqualsRope) {
  NEED_GPU();
  smelt::kernels::RopeParams rp;
  rp.rope_dim = 64, rp.theta = 10000.0, rp.yarn_factor = 16.0, rp.yarn_original_max_pos = 65536.0;
  const std::vector<float> inv41 = smelt::kernels::rope_inv_freq_v41(rp);
  rp.rope_dim = 32;
  const std::vector<float> inv32 = smelt::kernels::rope_inv_freq(rp);
  struct Shape {
    int heads, hd, rd;
  };
  // V4.1-Flash q (64 x 512, rope 64) and kv (1 x 512); 96 / 32 and an odd non-rotated part (67 - 32 = 35).
  for (const Shape sh : {Shape{64, 512, 64}, Shape{1, 512, 64}, Shape{2, 96, 32}, Shape{3, 67, 32}})
    for (int rows : {1, 3})
      for (int64_t p0 : {int64_t(4095), int64_t(1000003)}) {
        const std::vector<float>& inv = sh.rd == 64 ? inv41 : inv32;
        InvFreq f{};
        std::copy(inv.begin(), inv.end(), f.v);
        const size_t n = size_t(rows) * sh.heads * sh.hd;
        auto x = randn(n, 61 + sh.hd, 2.f);
        DevPtr dx = gpu().put(x), a = gpu().alloc(n * 4), b = gpu().alloc(n * 4);
        DevPtr st = smelt::test_cuda::step_info(gpu(), p0, rows);
        for (int inverse : {0, 1})
          for (int round : {0, 1}) {
            const std::string what = "heads " + std::to_string(sh.heads) + " hd " + std::to_string(sh.hd) + " rows " +
                                     std::to_string(rows) + " p0 " + std::to_string(p0) + " inverse " +
                                     std::to_string(inverse) + " round " + std::to_string(round);
            const char* old_k = round ? "smelt_rope_bf16" : "smelt_rope";
            const char* new_k = round ? "smelt_rope_units_bf16" : "smelt_rope_units";
            const unsigned units = cdiv(int64_t(sh.heads) * (sh.hd - sh.rd / 2), 256);
            // The runtime's launches: rows x min(heads, 16) blocks of 128; rows x ceil(units / 256) of 256.
            gpu().launch("rope", old_k, rows, unsigned(std::min(sh.heads, 16)), 1, 128, 0, dx, a, st, sh.heads, sh.hd,
                         sh.rd, inverse, f);
            gpu().launch("rope", new_k, rows, units, 1, 256, 0, dx, b, st, sh.heads, sh.hd, sh.rd, inverse, f);
            const auto want = gpu().get<float>(a, n);
            expect_bits_equal(gpu().get<float>(b, n), want, what);
            // In place, and another block size.
            DevPtr c = gpu().put(x);
            gpu().launch("rope", new_k, rows, cdiv(int64_t(sh.heads) * (sh.hd - sh.rd / 2), 96), 1, 96, 0, c, c, st,
                         sh.heads, sh.hd, sh.rd, inverse, f);
            expect_bits_equal(gpu().get<float>(c, n), want, what + " in place");
          }
      }
}

// ---- rms_norm --------------------------------------------------------------------------------------------------

TEST(CudaSmallDecodeKernels, RmsNormRegsEqualsRmsNorm) {
  NEED_GPU();
  // 5120 (hidden), 1280, 512 and grouped 4 x 128 norms; the runtime's block size (~4 values a thread).
  struct Shape {
    int len, groups;
  };
  for (const Shape sh : {Shape{5120, 1}, Shape{1280, 1}, Shape{512, 1}, Shape{128, 4}, Shape{200, 1}})
    for (int rows : {1, 3})
      for (int wdt : {-1, 0, 1}) {  // no weight, F32, BF16
        const int len = sh.len, segs = rows * sh.groups;
        const unsigned threads = unsigned(std::clamp<int64_t>(int64_t(cdiv(cdiv(len, 4), 32)) * 32, 32, 1024));
        const size_t n = size_t(segs) * len;
        auto x = randn(n, 71 + len, 1.5f);
        x[3] = 0.f, x[4] = 1e-30f, x[5] = -300.f;
        auto w = randn(len, 72);
        DevPtr dx = gpu().put(x), a = gpu().alloc(n * 4), b = gpu().alloc(n * 4);
        DevPtr dw = wdt < 0 ? DevPtr(0) : wdt == 0 ? gpu().put(w) : gpu().put(bf16_bits(w));
        const int dt = wdt < 0 ? 0 : wdt;
        for (int round : {0, 1}) {
          const std::string what = "len " + std::to_string(len) + " groups " + std::to_string(sh.groups) + " rows " +
                                   std::to_string(rows) + " wdt " + std::to_string(wdt) + " round " +
                                   std::to_string(round);
          gpu().launch("rms_norm", round ? "smelt_rms_norm_bf16" : "smelt_rms_norm", segs, 1, 1, threads, 0, dx, a, dw,
                       dt, len, 1e-6f);
          gpu().launch("rms_norm", round ? "smelt_rms_norm_regs_bf16" : "smelt_rms_norm_regs", segs, 1, 1, threads, 0,
                       dx, b, dw, dt, len, 1e-6f);
          const auto want = gpu().get<float>(a, n);
          expect_bits_equal(gpu().get<float>(b, n), want, what);
          DevPtr c = gpu().put(x);  // in place
          gpu().launch("rms_norm", round ? "smelt_rms_norm_regs_bf16" : "smelt_rms_norm_regs", segs, 1, 1, threads, 0,
                       c, c, dw, dt, len, 1e-6f);
          expect_bits_equal(gpu().get<float>(c, n), want, what + " in place");
        }
      }
}

// smelt.hc_collapse with a folded norm (smelt-fuse-hc-norm): smelt_hc_collapse_norm{,_cr}{,_bf16} against
// smelt_hc_collapse{,_bf16} then smelt_rms_norm_regs{,_bf16}, bit for bit: every rounding combination, with and
// without pre (V4.1's one-hot first collapse), hc_mult 4 at hidden 5120, 1 and 3 rows, and odd shapes.
TEST(CudaSmallDecodeKernels, HcCollapseNormEqualsCollapseThenNorm) {
  NEED_GPU();
  struct Shape {
    int n, D;
  };
  for (const Shape sh : {Shape{4, 5120}, Shape{4, 200}, Shape{2, 1000}})
    for (int rows : {1, 3})
      for (bool with_pre : {true, false})
        for (int wdt : {0, 1}) {  // F32, BF16 norm weight
          const int n = sh.n, D = sh.D;
          const unsigned threads = unsigned(std::clamp<int64_t>(int64_t(cdiv(cdiv(D, 4), 32)) * 32, 32, 1024));
          auto X = randn(size_t(rows) * n * D, 81 + D, 1.5f), pre = randn(size_t(rows) * n, 82, 0.7f), w = randn(D, 83);
          X[7] = 1e-30f, X[9] = -250.f;
          DevPtr dX = gpu().put(X), dpre = with_pre ? gpu().put(pre) : DevPtr(0);
          DevPtr dw = wdt == 0 ? gpu().put(w) : gpu().put(bf16_bits(w));
          DevPtr u = gpu().alloc(size_t(rows) * D * 4), a = gpu().alloc(size_t(rows) * D * 4),
                 b = gpu().alloc(size_t(rows) * D * 4);
          for (int cr : {0, 1})
            for (int round : {0, 1}) {
              const std::string what = "n " + std::to_string(n) + " D " + std::to_string(D) + " rows " +
                                       std::to_string(rows) + (with_pre ? " pre" : " one-hot") + " wdt " +
                                       std::to_string(wdt) + " cr " + std::to_string(cr) + " round " +
                                       std::to_string(round);
              gpu().launch("hc", cr ? "smelt_hc_collapse_bf16" : "smelt_hc_collapse", cdiv(D, 256), rows, 1, 256, 0,
                           dX, dpre, n, D, u);
              gpu().launch("rms_norm", round ? "smelt_rms_norm_regs_bf16" : "smelt_rms_norm_regs", rows, 1, 1,
                           threads, 0, u, a, dw, wdt, D, 1e-6f);
              const std::string fused =
                  std::string("smelt_hc_collapse_norm") + (cr ? "_cr" : "") + (round ? "_bf16" : "");
              gpu().launch("rms_norm", fused.c_str(), rows, 1, 1, threads, 0, dX, dpre, n, b, dw, wdt, D, 1e-6f);
              expect_bits_equal(gpu().get<float>(b, size_t(rows) * D), gpu().get<float>(a, size_t(rows) * D), what);
            }
        }
}

// The sublayer seam (smelt_hc_seam*, run by the cuda backend for [add ->] hc_expand -> hc_collapse): every output
// (the add's sum, the expanded streams, the collapse) bit for bit the separate kernels' (smelt_add, smelt_hc_expand,
// smelt_hc_collapse and their _bf16 entry points), at the V4.1-Flash shape and odd ones, with and without pre, and in
// place as the backend allows it (the collapse's output on the sum's bytes, on a stream of X).
TEST(CudaSmallDecodeKernels, HcSeamEqualsAddExpandCollapse) {
  NEED_GPU();
  struct Shape {
    int n, D;
  };
  for (const Shape sh : {Shape{4, 5120}, Shape{4, 300}, Shape{2, 1000}, Shape{8, 64}})
    for (int rows : {1, 3})
      for (bool with_pre : {true, false})
        for (int round : {0, 1})
          for (int add : {0, 1}) {
            const int n = sh.n, D = sh.D;
            const std::string what = "n " + std::to_string(n) + " D " + std::to_string(D) + " rows " +
                                     std::to_string(rows) + (with_pre ? " pre" : " one-hot") + " round " +
                                     std::to_string(round) + " add " + std::to_string(add);
            auto X = randn(size_t(rows) * n * D, 91 + D, 1.5f), a = randn(size_t(rows) * D, 92, 0.8f),
                 b = randn(size_t(rows) * D, 93, 0.8f), pre = randn(size_t(rows) * n, 94, 0.7f),
                 post = randn(size_t(rows) * n, 95, 0.9f), comb = randn(size_t(rows) * n * n, 96, 0.5f);
            X[5] = 1e-30f, X[11] = -300.f, a[3] = 3e38f, b[3] = 3e38f;  // a subnormal product, an overflowing sum
            const size_t nd = size_t(rows) * n * D, d1 = size_t(rows) * D;
            DevPtr dX = gpu().put(X), da = gpu().put(a), db = gpu().put(b), dpost = gpu().put(post),
                   dcomb = gpu().put(comb), dpre = with_pre ? gpu().put(pre) : DevPtr(0);
            const char* sfx = round ? "_bf16" : "";
            // The separate kernels.
            DevPtr y0 = add ? gpu().alloc(d1 * 4) : da, o0 = gpu().alloc(nd * 4), u0 = gpu().alloc(d1 * 4);
            const int64_t cnt = int64_t(d1);
            if (add)
              gpu().launch("elementwise", (std::string("smelt_add") + sfx).c_str(), 4, 1, 1, 256, 0, da, db, y0, cnt);
            gpu().launch("hc", (std::string("smelt_hc_expand") + sfx).c_str(), cdiv(D, 256), rows, n, 256, 0, dX, y0,
                         dpost, dcomb, D, o0);
            gpu().launch("hc", (std::string("smelt_hc_collapse") + sfx).c_str(), cdiv(D, 256), rows, 1, 256, 0, o0,
                         dpre, n, D, u0);
            const auto ey = gpu().get<float>(y0, d1), eo = gpu().get<float>(o0, nd), eu = gpu().get<float>(u0, d1);
            // The seam on addend A (add) or sum y (else), streams X, into o and u; then every output against the
            // separate kernels'.
            auto seam = [&](DevPtr A, DevPtr y, DevPtr Xp, DevPtr o, DevPtr u, const std::string& how) {
              if (add)
                gpu().launch("hc", (std::string("smelt_hc_seam_add") + sfx).c_str(), cdiv(D, 256), rows, 1, 256, 0, A,
                             db, y, Xp, dpost, dcomb, dpre, n, D, o, u);
              else
                gpu().launch("hc", (std::string("smelt_hc_seam") + sfx).c_str(), cdiv(D, 256), rows, 1, 256, 0, y, Xp,
                             dpost, dcomb, dpre, n, D, o, u);
              if (add) expect_bits_equal(gpu().get<float>(y, d1), ey, what + ": sum" + how);
              expect_bits_equal(gpu().get<float>(o, nd), eo, what + ": streams" + how);
              expect_bits_equal(gpu().get<float>(u, d1), eu, what + ": collapse" + how);
            };
            seam(da, add ? gpu().alloc(d1 * 4) : da, dX, gpu().alloc(nd * 4), gpu().alloc(d1 * 4), "");
            // In place, as run_seam allows it: the collapse's output on an addend (add), on the input sum (more
            // rows) or on a stream of X (one row), which the kernel reads before it writes.
            DevPtr Aa = gpu().put(a), ya = add ? gpu().alloc(d1 * 4) : Aa, Xa = gpu().put(X);
            seam(Aa, ya, Xa, gpu().alloc(nd * 4), add ? Aa : (rows == 1 ? Xa + DevPtr(n - 1) * DevPtr(D) * 4 : ya),
                 ", in place");
          }
}

// ---- hc_mix (V4.1) ---------------------------------------------------------------------------------------------

TEST(CudaSmallDecodeKernels, HcMixSplitEqualsLogitsAndWarpSinkhorn) {
  NEED_GPU();
  struct Shape {
    int n, D, iters;
  };
  // V4.1-Flash (hc_mult 4, hidden 5120, 20 iterations), a short row (most virtual threads empty), n = 2 and 5.
  for (const Shape sh : {Shape{4, 5120, 20}, Shape{4, 64, 20}, Shape{2, 300, 3}, Shape{5, 1000, 1}})
    for (int rows : {1, 2})
      for (int wdt : {0, 1}) {  // F32 / BF16 fn, base and scale
        const int n = sh.n, len = n * sh.D, outs = (2 + n) * n;
        auto X = randn(size_t(rows) * len, 81 + sh.D), fn = randn(size_t(outs) * len, 82, 0.02f);
        auto base = randn(outs, 83, 0.5f), scale = randn(3, 84, 0.5f);
        DevPtr dX = gpu().put(X);
        DevPtr dfn = wdt ? gpu().put(bf16_bits(fn)) : gpu().put(fn);
        DevPtr db = wdt ? gpu().put(bf16_bits(base)) : gpu().put(base);
        DevPtr ds = wdt ? gpu().put(bf16_bits(scale)) : gpu().put(scale);
        DevPtr m = gpu().alloc(size_t(rows) * outs * 4);
        DevPtr part = gpu().alloc(size_t(rows) * (outs + 1) * 32 * 8);
        auto outs_of = [&](DevPtr pre, DevPtr post, DevPtr comb) {
          std::vector<float> v = gpu().get<float>(pre, size_t(rows) * n);
          auto q = gpu().get<float>(post, size_t(rows) * n), c = gpu().get<float>(comb, size_t(rows) * n * n);
          v.insert(v.end(), q.begin(), q.end());
          v.insert(v.end(), c.begin(), c.end());
          return v;
        };
        DevPtr p0 = gpu().alloc(size_t(rows) * n * 4), q0 = gpu().alloc(size_t(rows) * n * 4),
               c0 = gpu().alloc(size_t(rows) * n * n * 4);
        gpu().launch("hc", "smelt_hc_mix_logits", outs, rows, 1, 1024, 0, dX, len, dfn, wdt, 1e-6f, 1, m);
        gpu().launch("hc", "smelt_hc_sinkhorn_warp", cdiv(rows, 4), 1, 1, 128, 0, m, rows, n, db, wdt, ds, wdt,
                     sh.iters, 1e-6f, p0, q0, c0);
        const auto want = outs_of(p0, q0, c0);
        for (int bt : {256, 128, 64}) {  // the runtime's 256; 8 and 16 blocks an output
          DevPtr p1 = gpu().alloc(size_t(rows) * n * 4), q1 = gpu().alloc(size_t(rows) * n * 4),
                 c1 = gpu().alloc(size_t(rows) * n * n * 4);
          gpu().launch("hc", "smelt_hc_mix_partials", unsigned(outs * (1024 / bt)), rows, 1, bt, 0, dX, len, dfn, wdt,
                       1024, part);
          gpu().launch("hc", "smelt_hc_mix_sinkhorn", rows, 1, 1, 128, 0, part, len, 1024, 1e-6f, n, db, wdt, ds, wdt,
                       sh.iters, 1e-6f, p1, q1, c1);
          expect_bits_equal(outs_of(p1, q1, c1), want,
                      "n " + std::to_string(n) + " D " + std::to_string(sh.D) + " rows " + std::to_string(rows) +
                          " wdt " + std::to_string(wdt) + " block " + std::to_string(bt));
        }
      }
}

// ---- routing ---------------------------------------------------------------------------------------------------

// The runtime's shared memory of smelt_moe_gate_dots (runtime/cuda/ops.cc MoeRoute).
unsigned gate_dots_smem(int warps, int D, int gsz) {
  return unsigned((int64_t(warps) * D * gsz + 15) / 16 * 16 + int64_t(D) * 4);
}

TEST(CudaSmallDecodeKernels, StagedRouterEqualsTheOneBlockRouter) {
  NEED_GPU();
  const int K = 6, vocab = 50;
  // 384 experts: V4.1-Flash (route_select's picks from registers); 600: more than a lane's kRouteRegs (its picks from
  // shared memory). D 5120: V4.1-Flash; 37: rows not a multiple of 16 bytes (the staging's 4- and 2-byte loads).
  for (int E : {384, 600})
    for (int D : {5120, 37})
      for (int gdt : {0, 1})
        for (int warps : {2, 1}) {
          const int rows = 3, gsz = gdt ? 2 : 4;
          auto x = randn(size_t(rows) * D, 101);
          auto gate = randn(size_t(E) * D, 102, 0.05f);
          for (int c = 0; c < D; ++c) gate[size_t(9) * D + c] = gate[size_t(200) * D + c];  // ties: the lower expert
          auto bias = randn(E, 103, 0.01f);
          DevPtr dx = gpu().put(x), dg = gdt ? gpu().put(bf16_bits(gate)) : gpu().put(gate), db = gpu().put(bias);
          std::vector<int32_t> t2e(size_t(vocab) * K);
          std::mt19937 rng(104);
          for (auto& v : t2e) v = int32_t(rng() % (E + 8)) - 4;  // some out of range: -1 slots
          std::vector<int64_t> t2e64(t2e.begin(), t2e.end());
          DevPtr dt32 = gpu().put(t2e), dt64 = gpu().put(t2e64);
          DevPtr ids = gpu().put(std::vector<int32_t>{7, -1, 49});
          for (int mode = 0; mode < 4; ++mode) {  // 0 bias, 1 no bias, 2 tid2eid i32, 3 tid2eid i64
            for (int scoring : {0, 1, 2}) {
              const DevPtr bias_p = mode == 0 ? db : DevPtr(0), t2e_p = mode == 2 ? dt32 : mode == 3 ? dt64 : DevPtr(0);
              const int t64 = mode == 3;
              const float temp = scoring == 2 ? 1.25f : 1.0f;
              DevPtr w0 = gpu().alloc(rows * K * 4), i0 = gpu().alloc(rows * K * 4), w1 = gpu().alloc(rows * K * 4),
                     i1 = gpu().alloc(rows * K * 4), dots = gpu().alloc(size_t(rows) * E * 4);
              gpu().launch("moe", "smelt_moe_route", rows, 1, 1, 256, unsigned(2 * E * 4), dx, D, dg, gdt, E, bias_p, 0,
                           t2e_p, t64, int64_t(vocab), ids, K, scoring, 1, 2.5f, temp, w0, i0);
              gpu().launch("moe", "smelt_moe_gate_dots", cdiv(E, warps), rows, 1, 32 * warps,
                           gate_dots_smem(warps, D, gsz), dx, D, dg, gdt, E, dots);
              gpu().launch("moe", "smelt_moe_route_select", rows, 1, 1, 256, unsigned((3 * E + K) * 4), dots, E, bias_p,
                           0, t2e_p, t64, int64_t(vocab), ids, K, scoring, 1, 2.5f, temp, w1, i1);
              const std::string what = "E " + std::to_string(E) + " D " + std::to_string(D) + " gdt " +
                                       std::to_string(gdt) + " warps " + std::to_string(warps) + " mode " +
                                       std::to_string(mode) + " scoring " + std::to_string(scoring);
              EXPECT_EQ(gpu().get<int32_t>(i1, rows * K), gpu().get<int32_t>(i0, rows * K)) << what;
              expect_bits_equal(gpu().get<float>(w1, rows * K), gpu().get<float>(w0, rows * K), what + " weights");
            }
          }
        }
}

// A NaN score sends route_select to the serial scan (NaN breaks the argmax order): the same picks as the one-block
// router.
TEST(CudaSmallDecodeKernels, StagedRouterWithNanScores) {
  NEED_GPU();
  const int E = 384, K = 6, D = 5120, rows = 2;
  auto x = randn(size_t(rows) * D, 111);
  auto gate = randn(size_t(E) * D, 112, 0.05f);
  gate[size_t(17) * D + 5] = std::numeric_limits<float>::quiet_NaN();
  auto bias = randn(E, 113, 0.01f);
  DevPtr dx = gpu().put(x), dg = gpu().put(gate), db = gpu().put(bias), ids = gpu().put(std::vector<int32_t>(rows, 0));
  DevPtr w0 = gpu().alloc(rows * K * 4), i0 = gpu().alloc(rows * K * 4), w1 = gpu().alloc(rows * K * 4),
         i1 = gpu().alloc(rows * K * 4), dots = gpu().alloc(size_t(rows) * E * 4);
  gpu().launch("moe", "smelt_moe_route", rows, 1, 1, 256, unsigned(2 * E * 4), dx, D, dg, 0, E, db, 0, DevPtr(0), 0,
               int64_t(0), ids, K, 0, 1, 2.5f, 1.0f, w0, i0);
  gpu().launch("moe", "smelt_moe_gate_dots", E / 2, rows, 1, 64, gate_dots_smem(2, D, 4), dx, D, dg, 0, E, dots);
  gpu().launch("moe", "smelt_moe_route_select", rows, 1, 1, 256, unsigned((3 * E + K) * 4), dots, E, db, 0, DevPtr(0),
               0, int64_t(0), ids, K, 0, 1, 2.5f, 1.0f, w1, i1);
  EXPECT_EQ(gpu().get<int32_t>(i1, rows * K), gpu().get<int32_t>(i0, rows * K));
  expect_bits_equal(gpu().get<float>(w1, rows * K), gpu().get<float>(w0, rows * K), "weights");
}

// ---- combine ---------------------------------------------------------------------------------------------------

// y[r, d] = the row's valid slots in ascending expert order (duplicates once), times the weight when weighted:
// float adds and multiplies, exact on the host too.
TEST(CudaSmallDecodeKernels, CombineEqualsHostSums) {
  NEED_GPU();
  const int D = 5120, n_experts = 384;
  for (int topk : {6, 10})
    for (int weighted : {0, 1}) {
      const int rows = 3;
      std::vector<int32_t> idx(size_t(rows) * topk);
      std::mt19937 rng(121 + topk);
      for (auto& e : idx) e = int32_t(rng() % n_experts);
      idx[1] = idx[0];           // a duplicate: summed once
      idx[2] = -1;               // invalid slots
      idx[3] = n_experts + 3;
      for (int t = 0; t < topk; ++t) idx[size_t(2) * topk + t] = -1;  // a row with no valid slot
      auto out = randn(size_t(rows) * topk * D, 122), rw = randn(size_t(rows) * topk, 123);
      std::vector<float> want(size_t(rows) * D);
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < D; ++d) {
          float s = 0.f;
          int last = -1;
          for (;;) {
            int best = -1, bt = -1;
            for (int t = 0; t < topk; ++t) {
              const int e = idx[size_t(r) * topk + t];
              if (e > last && e < n_experts && (best < 0 || e < best)) best = e, bt = t;
            }
            if (best < 0) break;
            last = best;
            const float v = out[(size_t(r) * topk + bt) * D + d];
            const volatile float p = v * rw[size_t(r) * topk + bt];
            const volatile float q = s + (weighted ? float(p) : v);
            s = q;
          }
          want[size_t(r) * D + d] = s;
        }
      DevPtr dout = gpu().put(out), drw = gpu().put(rw), didx = gpu().put(idx), y = gpu().alloc(want.size() * 4);
      gpu().launch("moe", "smelt_moe_combine", cdiv(D, 256), rows, 1, 256, 0, dout, drw, didx, topk, n_experts, D,
                   weighted, y);
      expect_bits_equal(gpu().get<float>(y, want.size()), want,
                  "topk " + std::to_string(topk) + " weighted " + std::to_string(weighted));
    }
}

}  // namespace
