// GPU tests (ctest label "gpu") of the decode kernels, which must give exactly the bits of the kernels they
// replace at one row (the GEMVs include the act quant of their input): the act-quant GEMVs against kernels/quant (an independent exact oracle) and the
// warp-per-column kernels; the MoE decode GEMVs, the split router and the split attention against the one-launch
// kernels (which test_kernels_gpu.cc checks against the C++ references). Shapes exercise partial column groups, more groups
// than blocks (persistent blocks, both term buffers), invalid expert slots, and lists of several tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/bf16.h"
#include "kernels/indexer/reference.h"
#include "kernels/quant/reference.h"
#include "kernels/rope/reference.h"
#include "runtime/cuda/kernel_args.h"
#include "tests/kernels_cuda/bits.h"
#include "tests/kernels_cuda/harness.h"

namespace {

using smelt::test_cuda::DevPtr;
using smelt::runtime::cuda::AttnArgs;
using smelt::runtime::cuda::ExpertW;
using smelt::runtime::cuda::InvFreq;
using smelt::test_cuda::Gpu;
using smelt::test_cuda::e8m0_codes;
using smelt::test_cuda::fp8_codes;
using smelt::test_cuda::gemv_aq_smem;
using smelt::test_cuda::gpu;
using smelt::test_cuda::bf16_bits;
using smelt::test_cuda::expect_bits_equal;
using smelt::test_cuda::randn;
namespace q = smelt::kernels::quant;


TEST(CudaDecodeKernels, GemvActQuantEqualsQuantReferenceBitForBit) {
  NEED_GPU();
  for (bool fp4 : {false, true})
    for (int K : {256, 1280})
      for (int cpb : {1, 3, 7}) {
        const int rows = 2, N = 200;  // N % cpb != 0 for 3 and 7
        auto x = randn(size_t(rows) * K, 3 + K, 2.f);
        x[5] = 0.f, x[6] = 1e-7f, x[7] = 600.f;
        auto w = fp4 ? fp8_codes(size_t(N) * K / 2, 4) : fp8_codes(size_t(N) * K, 4);
        auto s = fp4 ? e8m0_codes(size_t(N) * (K / 32), 5) : e8m0_codes(size_t((N + 31) / 32) * (K / 32), 5);
        std::vector<float> ref(size_t(rows) * N);
        if (fp4) q::fp4_linear(x.data(), rows, K, w.data(), s.data(), N, ref.data(), false, 32);
        else q::fp8_linear(x.data(), rows, K, w.data(), s.data(), N, 32, ref.data(), false, 32);
        DevPtr dx = gpu().put(x), dw = gpu().put_aq(w, N, fp4 ? K / 2 : K, fp4), ds = gpu().put(s);
        DevPtr xu = gpu().alloc(size_t(rows) * K * 4), xs = gpu().alloc(size_t(rows) * K / 32 * 4);
        DevPtr dy = gpu().alloc(ref.size() * 4), dr = gpu().alloc(ref.size() * 4);
        gpu().launch("linear", "smelt_act_quant_b32", (K / 32 + 7) / 8, rows, 1, 256, 0, dx, K, K, xu, xs);
        const std::string what = std::string(fp4 ? "fp4" : "fp8") + " K " + std::to_string(K) + " cpb " +
                                 std::to_string(cpb);
        // 5 blocks walk ceil(200 / cpb) column groups.
        gpu().launch("linear", fp4 ? "smelt_gemv_fp4_aq" : "smelt_gemv_fp8_aq", 5, rows, 1, 512, gemv_aq_smem(K, 1, cpb, 1, fp4),
                     dx, dy, dw, ds, K, N, 32, 1.0f, 0, cpb);
        auto y = gpu().get<float>(dy, ref.size());
        expect_bits_equal(y.data(), ref.data(), ref.size(), what);
        // scale_after and the bf16 output, against the warp-per-column kernel.
        gpu().launch("linear", fp4 ? "smelt_gemv_fp4_aq" : "smelt_gemv_fp8_aq", 5, rows, 1, 512, gemv_aq_smem(K, 1, cpb, 1, fp4),
                     dx, dy, dw, ds, K, N, 32, 0.75f, 1, cpb);
        gpu().launch("linear", fp4 ? "smelt_linear_fp4_aq" : "smelt_linear_fp8_aq", (N + 7) / 8, 1, 1, 256, 0, xu, xs,
                     dr, dw, ds, rows, K, N, 32, 0.75f, 1);
        y = gpu().get<float>(dy, ref.size());
        auto r = gpu().get<float>(dr, ref.size());
        expect_bits_equal(y.data(), r.data(), ref.size(), what + " scaled, bf16");
      }
}

// FP8 blocks holding NaN weight codes take the integer path of block_dot_staged (e4m3_units maps NaN to 0, as the
// warp-per-column kernel's block_dot_exact does); the other blocks of the same columns take the DFMA path.
TEST(CudaDecodeKernels, GemvFp8NanCodesMatchTheWarpPerColumnKernel) {
  NEED_GPU();
  const int rows = 1, K = 512, N = 64, cpb = 3;
  auto x = randn(size_t(K), 77, 2.f);
  auto w = fp8_codes(size_t(N) * K, 78);
  for (int n = 0; n < N; n += 5) w[size_t(n) * K + size_t(n % 16) * 32 + 7] = (n & 1) ? 0xFF : 0x7F;
  auto s = e8m0_codes(size_t((N + 31) / 32) * (K / 32), 79);
  DevPtr dx = gpu().put(x), dw = gpu().put_aq(w, N, K, false), ds = gpu().put(s);
  DevPtr xu = gpu().alloc(size_t(K) * 4), xs = gpu().alloc(size_t(K) / 32 * 4);
  DevPtr dy = gpu().alloc(size_t(N) * 4), dr = gpu().alloc(size_t(N) * 4);
  gpu().launch("linear", "smelt_act_quant_b32", (K / 32 + 7) / 8, rows, 1, 256, 0, dx, K, K, xu, xs);
  gpu().launch("linear", "smelt_gemv_fp8_aq", 5, rows, 1, 512, gemv_aq_smem(K, 1, cpb, 1, false), dx, dy, dw, ds, K, N, 32,
               1.0f, 0, cpb);
  gpu().launch("linear", "smelt_linear_fp8_aq", (N + 7) / 8, 1, 1, 256, 0, xu, xs, dr, dw, ds, rows, K, N, 32, 1.0f, 0);
  auto y = gpu().get<float>(dy, size_t(N)), r = gpu().get<float>(dr, size_t(N));
  expect_bits_equal(y.data(), r.data(), size_t(N), "fp8 with NaN codes");
}

// The one-row linears (smelt_linear_*_r1, decode) give the 4-row kernels' bits: plain (N = 37: a last group of
// columns with one valid) and grouped (G = 3, N = 36: groups start inside FP8 scale blocks), every weight
// format, K not a multiple of 256 (a lane's chain ends early), 1, 2 and 4 columns a warp and a looping grid.
TEST(CudaDecodeKernels, OneRowLinearsEqualTheGeneralKernelsBitForBit) {
  NEED_GPU();
  const int K = 328;  // K % 8 == 0; FP8 blocks of 32 / FP4 scales per 32 need K % 32 only for FP4
  for (const int G : {1, 3}) {
    for (const char* fmt : {"f32", "bf16", "f16", "fp8", "fp4"}) {
      const int N = G == 1 ? 37 : 36;
      const std::string f = fmt;
      const int Kf = f == "fp4" ? 320 : K;
      size_t wbytes = size_t(G) * N * Kf * (f == "f32" ? 4 : (f == "bf16" || f == "f16") ? 2 : f == "fp8" ? 1 : 0);
      if (f == "fp4") wbytes = size_t(G) * N * Kf / 2;
      std::vector<uint8_t> w(wbytes);
      std::mt19937 r(9);
      for (auto& b : w) b = uint8_t(r());
      if (f == "f32" || f == "bf16" || f == "f16")  // finite values: clear the exponent's top bit of every element
        for (size_t i = 0; i < w.size(); ++i) {
          const size_t el = f == "f32" ? 4 : 2;
          if (i % el == el - 1) w[i] &= 0xBF;
        }
      if (f == "fp8") w = fp8_codes(w.size(), 9);
      const size_t sn = f == "fp8" ? size_t(G) * ((N + 31) / 32) * ((Kf + 31) / 32) : size_t(G) * N * (Kf / 32);
      auto s = e8m0_codes(sn, 10);
      auto x = randn(size_t(G) * Kf, 11, 1.f);
      DevPtr dx = gpu().put(x), dw = gpu().put(w), ds = gpu().put(s);
      DevPtr y0 = gpu().alloc(size_t(G) * N * 4), y1 = gpu().alloc(size_t(G) * N * 4);
      const std::string general = "smelt_linear_" + f, one = general + "_r1";
      for (int round : {0, 1}) {
        gpu().launch("linear", general.c_str(), (N + 7) / 8, G, 1, 256, 0, dx, y0, dw, ds, 1, Kf, N, 32, 0.5f, round);
        auto a = gpu().get<float>(y0, size_t(G) * N);
        // 1, 2 and 4 columns a warp (grids of 5, 3 and 2 blocks), and one block looping over groups of 4.
        for (unsigned grid : {(N + 7) / 8, (N + 15) / 16, (N + 31) / 32, 1}) {
          gpu().launch("linear", one.c_str(), grid, G, 1, 256, 0, dx, y1, dw, ds, 1, Kf, N, 32, 0.5f, round);
          auto b = gpu().get<float>(y1, size_t(G) * N);
          expect_bits_equal(b.data(), a.data(), a.size(),
                            f + " G " + std::to_string(G) + " round " + std::to_string(round) + " grid " +
                                std::to_string(grid));
        }
      }
    }
  }
}

// smelt_linear_fp8_r1 (--numerics fp32 plans, V4 plans, V4.1 wo_a at decode) at the V4.1-Flash shapes gives the
// warp-per-column kernel's bits, whatever the columns a warp (grids for 1, 2, 4 and a looping grid): random E4M3
// codes with NaN codes in some columns, E8M0 scales 2^-9 .. 2^-2 with some blocks at the edges of the fast decode
// (codes 0, 134, 135, 140, 254, 255), a bf16 `round` and a scale_after case. Sampled plain columns also against a
// float64 sum of the dequantized weights (independent of both kernels).
TEST(CudaDecodeKernels, OneRowFp8LinearRealShapesEqualTheGeneralKernelBitForBit) {
  NEED_GPU();
  struct Shape {
    int N, K, G;
  };
  // wq_a, wq_b, wkv, wo_b, indexer wq_b, wo_a (8 groups), Engram wkv
  const Shape shapes[] = {{1280, 5120, 1}, {32768, 1280, 1}, {512, 5120, 1},  {5120, 8192, 1},
                          {4096, 1280, 1}, {1024, 4096, 8},  {25600, 6144, 1}};
  uint32_t seed = 300;
  for (const Shape& sh : shapes) {
    const int N = sh.N, K = sh.K, G = sh.G, rows_w = G * N, sc = K / 32;
    auto x = randn(size_t(G) * K, ++seed, 1.f);
    x[1] = 0.f, x[2] = -0.f, x[3] = 1e-40f, x[size_t(G) * K - 2] = 300.f;
    auto w = fp8_codes(size_t(rows_w) * K, ++seed);
    const int nan_cols[] = {3, 100, rows_w - 1};
    for (int n : nan_cols) w[size_t(n) * K + (n == rows_w - 1 ? K - 1 : 43)] = (n & 1) ? 0xFF : 0x7F;
    auto s = e8m0_codes(size_t(rows_w / 32) * sc, ++seed, 118);
    const uint8_t edge[] = {140, 0, 255, 134, 135, 254};  // scale blocks (b, b): rows 32 b .., K 32 b ..
    for (int b = 0; b < 6; ++b) s[size_t(b) * sc + b] = edge[b];
    DevPtr dx = gpu().put(x), dw = gpu().put(w), ds = gpu().put(s);
    DevPtr y0 = gpu().alloc(size_t(rows_w) * 4), y1 = gpu().alloc(size_t(rows_w) * 4);
    const std::string shape = std::to_string(N) + " x " + std::to_string(K) + " G " + std::to_string(G);
    for (int variant = 0; variant < 2; ++variant) {
      const float scale_after = variant ? 0.375f : 1.f;
      const int round = variant;
      gpu().launch("linear", "smelt_linear_fp8", unsigned((N + 7) / 8), unsigned(G), 1, 256, 0, dx, y0, dw, ds, 1, K,
                   N, 32, scale_after, round);
      auto a = gpu().get<float>(y0, size_t(rows_w));
      for (unsigned grid : {unsigned((N + 7) / 8), unsigned((N + 15) / 16), unsigned((N + 31) / 32), 37u}) {
        gpu().launch("linear", "smelt_linear_fp8_r1", grid, unsigned(G), 1, 256, 0, dx, y1, dw, ds, 1, K, N, 32,
                     scale_after, round);
        auto b = gpu().get<float>(y1, size_t(rows_w));
        expect_bits_equal(b.data(), a.data(), a.size(),
                          shape + " variant " + std::to_string(variant) + " grid " + std::to_string(grid));
      }
      for (int n : nan_cols) ASSERT_TRUE(std::isnan(a[size_t(n)])) << shape << " column " << n;
      if (variant) continue;
      for (int n = 6 * 32; n < rows_w; n += 997) {  // past the edge-scale blocks; no NaN codes there
        if (n == 100 || n == rows_w - 1) continue;
        const int g = n / N;
        double ref = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
          const double p = double(x[size_t(g) * K + k]) * q::e4m3_decode(w[size_t(n) * K + k]) *
                           q::e8m0_decode(s[size_t(n / 32) * sc + k / 32]);
          ref += p, mag += std::fabs(p);
        }
        ASSERT_NEAR(a[size_t(n)], ref, 1e-5 * mag + 1e-30) << shape << " column " << n;
      }
    }
  }
}

// The one-row weight-only expert kernels (smelt_moe_{up,down}_<fmt>_r1: --numerics fp32 plans, V4 plans at decode)
// give the warp-per-column kernels' bits for every format: routed slots with an invalid one, the shared expert (idx
// null), columns not a multiple of the 1 / 2 / 4 a warp takes, grids for each and a looping one; and the V4.1
// shared expert's FP8 shape with NaN codes and edge scales.
TEST(CudaDecodeKernels, OneRowWeightOnlyExpertsEqualTheWarpPerColumnKernelsBitForBit) {
  NEED_GPU();
  struct Case {
    const char* fmt;
    int D, F, E;
    std::vector<int32_t> idx;  // empty: the shared expert
  };
  const std::vector<Case> cases = {
      {"f32", 72, 40, 4, {2, -1, 0}},      {"bf16", 136, 56, 4, {3, 1, 9}},  {"f16", 72, 40, 3, {0, 2}},
      {"fp8", 328, 200, 5, {4, 0, -1, 2}}, {"fp4", 320, 96, 4, {1, 3, 0}},   {"fp8", 264, 104, 1, {}},
      {"bf16", 96, 48, 1, {}},             {"fp8", 5120, 2304, 1, {}},
  };
  uint32_t seed = 500;
  for (const Case& cs : cases) {
    const std::string f = cs.fmt;
    const int D = cs.D, F = cs.F, E = cs.E, topk = cs.idx.empty() ? 1 : int(cs.idx.size());
    const size_t eb = f == "f32" ? 4 : (f == "bf16" || f == "f16") ? 2 : 1;
    auto weights = [&](int rows, int cols) {  // one expert's matrix [rows, cols] and its scales
      size_t n = f == "fp4" ? size_t(rows) * cols / 2 : size_t(rows) * cols * eb;
      std::vector<uint8_t> w;
      if (f == "fp8" || f == "fp4") {
        w = fp8_codes(n, ++seed);
      } else {
        w.resize(n);
        std::mt19937 r(++seed);
        for (auto& b : w) b = uint8_t(r());
        for (size_t i = eb - 1; i < w.size(); i += eb) w[i] &= 0xBF;  // finite: the exponent's top bit cleared
      }
      if (f == "fp8" && rows * cols > 1000000) {  // the real shape: NaN codes in a few columns
        w[size_t(7) * cols + 11] = 0x7F;
        w[size_t(rows - 1) * cols + cols - 1] = 0xFF;
      }
      const size_t sn = f == "fp8" ? size_t((rows + 31) / 32) * ((cols + 31) / 32) : size_t(rows) * (cols / 32);
      auto s = e8m0_codes(f == "fp4" || f == "fp8" ? sn : 1, ++seed);
      if (f == "fp8" && sn > 6) s[0] = 0, s[1] = 255, s[2] = 134, s[3] = 135;  // the fast decode's edges
      return std::make_pair(w, s);
    };
    std::vector<uint8_t> b[6];
    int64_t stride[6] = {};
    for (int e = 0; e < E; ++e) {
      auto w1 = weights(F, D), w2 = weights(D, F), w3 = weights(F, D);
      const std::vector<uint8_t>* parts[6] = {&w1.first, &w1.second, &w2.first, &w2.second, &w3.first, &w3.second};
      for (int j = 0; j < 6; ++j) {
        stride[j] = int64_t(parts[j]->size());
        b[j].insert(b[j].end(), parts[j]->begin(), parts[j]->end());
      }
    }
    ExpertW ew{{gpu().put(b[0]), gpu().put(b[1]), gpu().put(b[2]), gpu().put(b[3]), gpu().put(b[4]), gpu().put(b[5])},
               {stride[0], stride[1], stride[2], stride[3], stride[4], stride[5]},
               0};
    auto x = randn(size_t(D), ++seed, 1.f);
    auto hv = randn(size_t(topk) * F, ++seed, 0.5f);
    DevPtr dx = gpu().put(x), dh = gpu().put(hv), didx = cs.idx.empty() ? DevPtr(0) : gpu().put(cs.idx);
    DevPtr h0 = gpu().alloc(size_t(topk) * F * 4), h1 = gpu().alloc(size_t(topk) * F * 4);
    DevPtr o0 = gpu().alloc(size_t(topk) * D * 4), o1 = gpu().alloc(size_t(topk) * D * 4);
    const int blk = 32;
    const float limit = f == "bf16" ? 0.f : 1.5f;
    const std::string what = f + " D " + std::to_string(D) + " F " + std::to_string(F) + " E " + std::to_string(E);
    gpu().launch("moe", ("smelt_moe_up_" + f).c_str(), unsigned((F + 7) / 8), unsigned(topk), 1, 256, 0, dx, D, F,
                 topk, didx, E, ew, blk, limit, h0);
    gpu().launch("moe", ("smelt_moe_down_" + f).c_str(), unsigned((D + 7) / 8), unsigned(topk), 1, 256, 0, dh, D, F,
                 topk, didx, E, ew, blk, o0);
    const auto hu = gpu().get<float>(h0, size_t(topk) * F), ou = gpu().get<float>(o0, size_t(topk) * D);
    // 1, 2 and 4 columns a warp, and 2 blocks looping.
    for (int cw : {1, 2, 4, 0}) {
      const unsigned gu = cw ? unsigned((F + 8 * cw - 1) / (8 * cw)) : 2u;
      const unsigned gd = cw ? unsigned((D + 8 * cw - 1) / (8 * cw)) : 2u;
      gpu().launch("moe", ("smelt_moe_up_" + f + "_r1").c_str(), gu, unsigned(topk), 1, 256, 0, dx, D, F, topk, didx, E,
                   ew, blk, limit, h1);
      gpu().launch("moe", ("smelt_moe_down_" + f + "_r1").c_str(), gd, unsigned(topk), 1, 256, 0, dh, D, F, topk, didx,
                   E, ew, blk, o1);
      const auto hr = gpu().get<float>(h1, size_t(topk) * F), orr = gpu().get<float>(o1, size_t(topk) * D);
      expect_bits_equal(hr.data(), hu.data(), hu.size(), what + " up, " + std::to_string(cw) + " columns a warp");
      expect_bits_equal(orr.data(), ou.data(), ou.size(), what + " down, " + std::to_string(cw) + " columns a warp");
    }
    if (f == "fp8" && D == 5120) {
      ASSERT_TRUE(std::isnan(ou[size_t(D - 1)])) << "the NaN code of w2's last row";
    }
  }
}

// The warp-per-row Sinkhorn gives the serial kernel's bits: hc_mult 1..5, iterations 0, 1, 20, rows 1 and 37,
// f32 base / scale, logits with a wide spread (large exponents in the softmax).
TEST(CudaDecodeKernels, SinkhornWarpEqualsTheSerialKernelBitForBit) {
  NEED_GPU();
  for (int n = 1; n <= 5; ++n)
    for (int rows : {1, 37})
      for (int iters : {0, 1, 20}) {
        const int outs = (2 + n) * n;
        auto m = randn(size_t(rows) * outs, uint32_t(100 + n * 7 + rows + iters), 3.f);
        auto base = randn(size_t(outs), uint32_t(200 + n), 0.5f);
        std::vector<float> scale = {0.7f, 1.3f, 2.1f};
        DevPtr dm = gpu().put(m), db = gpu().put(base), dsc = gpu().put(scale);
        DevPtr p0 = gpu().alloc(size_t(rows) * n * 4), q0 = gpu().alloc(size_t(rows) * n * 4);
        DevPtr c0 = gpu().alloc(size_t(rows) * n * n * 4);
        DevPtr p1 = gpu().alloc(size_t(rows) * n * 4), q1 = gpu().alloc(size_t(rows) * n * 4);
        DevPtr c1 = gpu().alloc(size_t(rows) * n * n * 4);
        const int f32 = 0;  // WFormat kWF32: the base / scale dtype code (hc kernels' wload)
        const float eps = 1e-6f;
        gpu().launch("hc", "smelt_hc_sinkhorn", (rows + 31) / 32, 1, 1, 32, 0, dm, rows, n, db, f32, dsc, f32, iters,
                     eps, p0, q0, c0);
        gpu().launch("hc", "smelt_hc_sinkhorn_warp", (rows + 3) / 4, 1, 1, 128, 0, dm, rows, n, db, f32, dsc, f32,
                     iters, eps, p1, q1, c1);
        const std::string what = "n " + std::to_string(n) + " rows " + std::to_string(rows) + " iters " +
                                 std::to_string(iters);
        auto a = gpu().get<float>(c0, size_t(rows) * n * n), b = gpu().get<float>(c1, size_t(rows) * n * n);
        expect_bits_equal(b.data(), a.data(), a.size(), what + " comb");
        a = gpu().get<float>(p0, size_t(rows) * n), b = gpu().get<float>(p1, size_t(rows) * n);
        expect_bits_equal(b.data(), a.data(), a.size(), what + " pre");
        a = gpu().get<float>(q0, size_t(rows) * n), b = gpu().get<float>(q1, size_t(rows) * n);
        expect_bits_equal(b.data(), a.data(), a.size(), what + " post");
      }
}

// Not a check: the V4.1-Flash dense GEMV shapes once each, for a profiler (ncu --kernel-name smelt_gemv_fp8_aq ...
// test_kernels_gpu --gtest_also_run_disabled_tests --gtest_filter='*RealShapes*'). Grid and cpb as the launcher.
TEST(CudaDecodeKernels, DISABLED_GemvRealShapes) {
  NEED_GPU();
  const int sms = 132, blocks = 2 * sms;
  const int shapes[][2] = {{8192, 5120}, {5120, 1536}, {1536, 32768}, {5120, 512}};
  for (const auto& kn : shapes) {
    const int K = kn[0], N = kn[1], nb = K / 32;
    int cpb = std::max(1, 2 * 512 / nb);
    cpb = std::min(std::min(cpb, std::max(1, N / blocks)), 32);
    auto x = randn(size_t(K), 5, 1.f);
    DevPtr dx = gpu().put(x), dw = gpu().put(fp8_codes(size_t(N) * K, 6));
    DevPtr ds = gpu().put(e8m0_codes(size_t((N + 31) / 32) * (K / 32), 7)), dy = gpu().alloc(size_t(N) * 4);
    const unsigned grid = unsigned(std::min((N + cpb - 1) / cpb, blocks));
    for (int rep = 0; rep < 2; ++rep)
      gpu().launch("linear", "smelt_gemv_fp8_aq", grid, 1, 1, 512, gemv_aq_smem(K, 1, cpb, 1, false), dx, dy, dw, ds, K, N, 32,
                   1.0f, 0, cpb);
    // The weight-only warp-per-column kernel (wo_a, --numerics fp32 plans) on the same weights.
    gpu().launch("linear", "smelt_linear_fp8", unsigned((N + 7) / 8), 1, 1, 256, 0, dx, dy, dw, ds, 1, K, N, 32, 1.0f, 0);
  }
}

TEST(CudaDecodeKernels, MoeDecodeGemvsEqualTheSlotKernels) {
  NEED_GPU();
  const int E = 5, D = 256, F = 96, topk = 3;
  const std::vector<int32_t> idx = {4, -1, 1};  // an invalid slot gives zeros in both
  for (bool fp4 : {false, true})
    for (int variant = 0; variant < 2; ++variant) {
      const int rb = variant == 0 ? 1 : 0;
      const float limit = variant == 0 ? 0.f : 0.05f;
      // Experts' tensors evenly spaced: w1 [F, D], w2 [D, F], w3 [F, D] with their scales.
      const size_t w1n = fp4 ? size_t(F) * D / 2 : size_t(F) * D, w2n = w1n;
      const size_t s1n = fp4 ? size_t(F) * (D / 32) : size_t((F + 31) / 32) * (D / 32);
      const size_t s2n = fp4 ? size_t(D) * (F / 32) : size_t(D / 32) * ((F + 31) / 32);
      const int pk = fp4 ? 2 : 1;  // weight bytes a row: D / pk (w1, w3), F / pk (w2)
      DevPtr w1 = gpu().put_aq(fp8_codes(E * w1n, 21), F, D / pk, fp4), w2 = gpu().put_aq(fp8_codes(E * w2n, 22), D, F / pk, fp4),
             w3 = gpu().put_aq(fp8_codes(E * w1n, 23), F, D / pk, fp4);
      DevPtr s1 = gpu().put(e8m0_codes(E * s1n, 24)), s2 = gpu().put(e8m0_codes(E * s2n, 25)), s3 = gpu().put(e8m0_codes(E * s1n, 26));
      ExpertW ew{{w1, s1, w2, s2, w3, s3},
                 {int64_t(w1n), int64_t(s1n), int64_t(w2n), int64_t(s2n), int64_t(w1n), int64_t(s1n)},
                 0};
      auto x = randn(D, 27, 1.f);
      std::vector<float> rwv = {0.5f, 0.25f, 1.5f};
      DevPtr dx = gpu().put(x), didx = gpu().put(idx), rw = variant == 0 ? gpu().put(rwv) : DevPtr(0);
      DevPtr xu = gpu().alloc(D * 4), xs = gpu().alloc(D / 32 * 4);
      gpu().launch("linear", "smelt_act_quant_b32", 1, 1, 1, 256, 0, dx, D, D, xu, xs);
      const std::string f = fp4 ? "fp4" : "fp8", what = f + " variant " + std::to_string(variant);
      DevPtr h0 = gpu().alloc(topk * F * 4), h1 = gpu().alloc(topk * F * 4);
      gpu().launch("moe", ("smelt_moe_up_" + f + "_aq").c_str(), F / 8, topk, 1, 256, 0, xu, xs, D, F, topk, didx, E,
                   rw, ew, 32, limit, rb, h0);
      const int cpb_up = 5;
      gpu().launch("moe", ("smelt_moe_up_" + f + "_aq_dec").c_str(), 7, 1, 1, 512, gemv_aq_smem(D, 1, cpb_up, 2, fp4), dx, D, F,
                   topk, didx, E, rw, ew, 32, limit, rb, h1, cpb_up);
      auto a = gpu().get<float>(h0, topk * F), b = gpu().get<float>(h1, topk * F);
      expect_bits_equal(b.data(), a.data(), a.size(), what + " up");
      DevPtr hu = gpu().alloc(topk * F * 4), hs = gpu().alloc(topk * F / 32 * 4);
      gpu().launch("linear", "smelt_act_quant_b32", 1, topk, 1, 256, 0, h0, F, F, hu, hs);
      DevPtr o0 = gpu().alloc(topk * D * 4), o1 = gpu().alloc(topk * D * 4);
      gpu().launch("moe", ("smelt_moe_down_" + f + "_aq").c_str(), D / 8, topk, 1, 256, 0, hu, hs, D, F, topk, didx, E,
                   ew, 32, rb, o0);
      const int cpb_down = 6;
      gpu().launch("moe", ("smelt_moe_down_" + f + "_aq_dec").c_str(), 9, 1, 1, 512, gemv_aq_smem(F, topk, cpb_down, 1, fp4), h0,
                   D, F, topk, didx, E, ew, 32, rb, 0, o1, cpb_down);
      a = gpu().get<float>(o0, topk * D), b = gpu().get<float>(o1, topk * D);
      expect_bits_equal(b.data(), a.data(), a.size(), what + " down");
    }
}

// The split kernels serve 8 heads a block in the scores (one K=V load for 8 dots; spb slots a block) and hpb heads'
// P.V per channel in the tiles kernel, and must keep every number of the one-block kernel. Shapes: the V4.1-Flash decode (64 heads x 512, window 128 + top-k
// 512 = 10 full tiles), a partial last tile, heads not a multiple of 8, hd not a multiple of 256 (the tiles kernel's
// last z block part empty), window only (2 tiles), V4 (fp32 sums) and V4.1 (double sums, rb 0 / 1).
TEST(CudaDecodeKernels, SplitAttentionEqualsTheOneBlockKernel) {
  NEED_GPU();
  struct Case {
    int H, hd, window, ratio, pool_rows, kk;  // kk = 0: every visible compressed entry (V4 / no indexer)
    int64_t p0;
    int v41, rb;
    const char* what;
  };
  const Case cases[] = {
      {4, 512, 16, 2, 400, 300, 700, 1, 1, "v41 top-k"},
      {4, 512, 16, 2, 400, 0, 700, 0, 1, "v4 all visible"},
      {64, 512, 128, 4, 1100, 512, 4096, 1, 1, "v41 flash shape, 10 tiles"},
      {64, 512, 128, 4, 1100, 500, 4096, 1, 0, "v41 partial last tile, fp32 numerics"},
      {12, 320, 128, 4, 200, 0, 300, 0, 1, "v4 12 heads hd 320"},
      {20, 192, 128, 4, 200, 100, 77, 1, 1, "v41 20 heads hd 192, window not full"},
      {64, 512, 128, 0, 0, 0, 4096, 1, 1, "v41 window only"},
      {64, 512, 128, 0, 0, 0, 4096, 0, 1, "v4 window only"},
  };
  for (const Case& cs : cases) {
    const int H = cs.H, hd = cs.hd, window = cs.window;
    const int64_t p0 = cs.p0;
    auto qv = randn(size_t(H) * hd, 31, 0.3f), kv = randn(hd, 32), ring = randn(size_t(window) * hd, 33);
    auto pool = randn(size_t(std::max(cs.pool_rows, 1)) * hd, 34), sink = randn(H, 35);
    std::mt19937 r(36);
    std::vector<int32_t> idx(std::max(cs.kk, 1));
    const int vis = cs.ratio ? int((p0 + 1) / cs.ratio) : 0;
    for (auto& v : idx) v = int32_t(r() % (vis + 20)) - 10;  // some invalid, some not yet visible
    AttnArgs g{};
    g.q = gpu().put(qv), g.chunk_kv = gpu().put(kv), g.idx = cs.kk ? gpu().put(idx) : 0, g.k = cs.kk;
    g.sink = gpu().put(sink), g.ring = gpu().put(ring), g.R = window, g.window = window, g.ratio = cs.ratio;
    g.pool = cs.ratio ? gpu().put(pool) : 0, g.pool_rows = cs.pool_rows, g.hd = hd, g.scale = 0.05f;
    g.v41 = cs.v41, g.rb = cs.rb;
    const int Lmax = window + (cs.ratio ? (cs.kk ? cs.kk : int(p0 / cs.ratio) + 1) : 0), tiles = (Lmax + 63) / 64;
    DevPtr st = smelt::test_cuda::step_info(gpu(), p0, 1);
    DevPtr out0 = gpu().alloc(size_t(H) * hd * 4), out1 = gpu().alloc(size_t(H) * hd * 4);
    DevPtr sc = gpu().alloc(size_t(H) * Lmax * 4), tmax = gpu().alloc(size_t(H) * tiles * 4);
    DevPtr psum = gpu().alloc(size_t(H) * tiles * 4), nmax = gpu().alloc(size_t(H) * tiles * 4);
    DevPtr pv = gpu().alloc(size_t(H) * tiles * hd * 4);
    const unsigned hg = unsigned((H + 7) / 8), hz = unsigned((hd + 255) / 256);
    gpu().launch("attention", "smelt_sparse_attention", 1, H, 1, 128, 0, g, st, 1, out0);
    auto a = gpu().get<float>(out0, size_t(H) * hd);
    // Every scores part size (spb < 64: the tiles kernel folds the tile maxima from sc) and heads per tiles block.
    const int shapes[][2] = {{8, 1}, {8, 2}, {16, 8}, {32, 4}, {64, 8}, {64, 2}};  // {spb, hpb}
    for (const auto& sh : shapes) {
      const int spb = sh[0], hpb = sh[1];
      // Poison what a previous shape left, so every number must be written again.
      const std::vector<float> junk(size_t(H) * std::max<int>(Lmax, tiles * hd), 12345.f);
      gpu().upload(out1, junk.data(), size_t(H) * hd * 4);
      gpu().upload(sc, junk.data(), size_t(H) * Lmax * 4);
      gpu().upload(tmax, junk.data(), size_t(H) * tiles * 4);
      gpu().upload(pv, junk.data(), size_t(H) * tiles * hd * 4);
      gpu().launch("attention", "smelt_attn_dec_scores", tiles * (64 / spb), hg, 1, 256, 0, g, st, H, Lmax, tiles, spb,
                   sc, tmax);
      gpu().launch("attention", "smelt_attn_dec_tiles", tiles, unsigned((H + hpb - 1) / hpb), hz, 256, 0, g, st, H,
                   Lmax, tiles, hpb, sc, spb == 64 ? tmax : DevPtr(0), psum, nmax, pv);
      gpu().launch("attention", "smelt_attn_dec_merge", H, unsigned((hd + 127) / 128), 1, 128, 0, g, st, tiles, psum,
                   nmax, pv, 0, out1);
      auto b = gpu().get<float>(out1, size_t(H) * hd);
      expect_bits_equal(b.data(), a.data(), a.size(),
                        std::string(cs.what) + " spb " + std::to_string(spb) + " hpb " + std::to_string(hpb));
    }
  }
}

// smelt_attn_dec_merge_tail (the merge with the layer's window KV update and inverse rope in the same launch,
// runtime/cuda/backend.cc plan_attn_tails) against the three kernels it replaces, launched one after another: the
// attention's output, the rope's output and the ring bit for bit, for the rope into its own buffer and in place,
// rounded or not, with the V4.1-Flash shape and a small one; the kv update alone and the rope alone too.
TEST(CudaDecodeKernels, AttnMergeTailEqualsMergeThenKvUpdateThenRope) {
  NEED_GPU();
  struct Case {
    int H, hd, rd, window, ratio, pool_rows, kk;
    int64_t p0;
    const char* what;
  };
  const Case cases[] = {
      {64, 512, 64, 128, 4, 1100, 512, 4097, "v41 flash shape, 10 tiles"},
      {64, 512, 64, 128, 0, 0, 0, 4130, "v41 window only"},
      {20, 192, 64, 128, 4, 200, 100, 77, "20 heads hd 192, window not full"},
  };
  for (const Case& cs : cases) {
    const int H = cs.H, hd = cs.hd, window = cs.window, n = H * hd;
    auto qv = randn(size_t(n), 41, 0.3f), kv = randn(hd, 42), ring = randn(size_t(window) * hd, 43);
    auto pool = randn(size_t(std::max(cs.pool_rows, 1)) * hd, 44), sink = randn(H, 45);
    std::mt19937 r(46);
    std::vector<int32_t> idx(std::max(cs.kk, 1));
    const int vis = cs.ratio ? int((cs.p0 + 1) / cs.ratio) : 0;
    for (auto& v : idx) v = int32_t(r() % (vis + 20)) - 10;
    AttnArgs g{};
    g.q = gpu().put(qv), g.chunk_kv = gpu().put(kv), g.idx = cs.kk ? gpu().put(idx) : 0, g.k = cs.kk;
    g.sink = gpu().put(sink), g.ring = gpu().put(ring), g.R = window, g.window = window, g.ratio = cs.ratio;
    g.pool = cs.ratio ? gpu().put(pool) : 0, g.pool_rows = cs.pool_rows, g.hd = hd, g.scale = 0.05f;
    g.v41 = 1, g.rb = 1;
    const int Lmax = window + (cs.ratio ? (cs.kk ? cs.kk : int(cs.p0 / cs.ratio) + 1) : 0), tiles = (Lmax + 63) / 64;
    DevPtr st = smelt::test_cuda::step_info(gpu(), cs.p0, 1);
    DevPtr sc = gpu().alloc(size_t(H) * Lmax * 4), tmax = gpu().alloc(size_t(H) * tiles * 4);
    DevPtr psum = gpu().alloc(size_t(H) * tiles * 4), nmax = gpu().alloc(size_t(H) * tiles * 4);
    DevPtr pv = gpu().alloc(size_t(H) * tiles * hd * 4);
    gpu().launch("attention", "smelt_attn_dec_scores", tiles * 4, unsigned((H + 7) / 8), 1, 256, 0, g, st, H, Lmax,
                 tiles, 16, sc, tmax);
    gpu().launch("attention", "smelt_attn_dec_tiles", tiles, unsigned((H + 7) / 8), unsigned((hd + 255) / 256), 256, 0,
                 g, st, H, Lmax, tiles, 8, sc, DevPtr(0), psum, nmax, pv);
    smelt::kernels::RopeParams rp;
    rp.rope_dim = cs.rd, rp.theta = 10000.0, rp.yarn_factor = 16.0, rp.yarn_original_max_pos = 65536.0;
    const std::vector<float> inv = smelt::kernels::rope_inv_freq_v41(rp);
    InvFreq f{};
    std::copy(inv.begin(), inv.end(), f.v);
    const std::vector<float> junk(size_t(n), 12345.f);
    for (int parts : {3, 1, 2})  // kv update and rope, kv update alone, rope alone
      for (int in_place : {0, 1})
        for (int rround : {1, 0}) {
          if (parts == 1 && (in_place || !rround)) continue;  // no rope: one case
          const bool with_kv = parts != 2, with_rope = parts != 1;
          const std::string what = std::string(cs.what) + (with_kv ? " kv" : "") + (with_rope ? " rope" : "") +
                                   (in_place ? " in place" : "") + (rround ? " rounded" : "");
          DevPtr out[2], y[2], rg[2];
          for (int v = 0; v < 2; ++v) {
            out[v] = gpu().put(junk), rg[v] = gpu().put(ring);
            y[v] = in_place ? out[v] : gpu().put(junk);
          }
          // the three kernels, as the ops launch them
          gpu().launch("attention", "smelt_attn_dec_merge", H, unsigned((hd + 127) / 128), 1, 128, 0, g, st, tiles,
                       psum, nmax, pv, 0, out[0]);
          if (with_kv) gpu().launch("attention", "smelt_window_kv_update", 1, 1, 1, 128, 0, g.chunk_kv, 1, hd, st, rg[0],
                                    window);
          if (with_rope)
            gpu().launch("rope", rround ? "smelt_rope_units_bf16" : "smelt_rope_units", 1,
                         unsigned((int64_t(H) * (hd - cs.rd / 2) + 255) / 256), 1, 256, 0, out[0], y[0], st, H, hd,
                         cs.rd, 1, f);
          // the fused one
          smelt::runtime::cuda::AttnTail t;
          if (with_kv) t.kv = g.chunk_kv, t.ring = rg[1], t.R = window, t.kv_hd = hd;
          if (with_rope) t.y = y[1], t.rope_dim = cs.rd, t.inverse = 1, t.rround = rround;
          gpu().launch("attention", "smelt_attn_dec_merge_tail", H, unsigned((hd + 127) / 128), 1, 128, 0, g, st, tiles,
                       psum, nmax, pv, 0, out[1], t, f);
          if (!in_place) {
            auto a = gpu().get<float>(out[0], size_t(n)), b = gpu().get<float>(out[1], size_t(n));
            expect_bits_equal(b.data(), a.data(), a.size(), what + ": attention output");
          }
          if (with_rope) {
            auto a = gpu().get<float>(y[0], size_t(n)), b = gpu().get<float>(y[1], size_t(n));
            expect_bits_equal(b.data(), a.data(), a.size(), what + ": rope output");
          }
          auto a = gpu().get<float>(rg[0], size_t(window) * hd), b = gpu().get<float>(rg[1], size_t(window) * hd);
          expect_bits_equal(b.data(), a.data(), a.size(), what + ": ring");
        }
  }
}

// smelt_indexer_v41_scores (8 heads a pass, warp_sum8) against its arithmetic written out in double / float here:
// per lane a double chain over c = lane, lane + 32, ..., warp_sum's butterfly over the 32 lane sums, then the
// float steps in head order. Bit for bit, 64 heads (8-head passes only) and 12 (one pass + 4 single heads), rb 0,
// 1, 2, entries past a row's visible count left alone.
TEST(CudaDecodeKernels, IndexerV41ScoresBitForBit) {
  NEED_GPU();
  using smelt::kernels::round_bf16;
  const int hd = 128, S = 300, rows = 2, ratio = 4;
  const int64_t p0 = 1100;  // visible: 275, 275 (row 1: (1102) / 4 = 275)
  for (int H : {64, 12})
    for (int rb : {0, 1, 2}) {
      auto qv = randn(size_t(rows) * H * hd, 81 + H, 0.5f), w = randn(size_t(rows) * H, 82);
      auto keys = randn(size_t(S) * hd, 83);
      std::vector<float> want(size_t(rows) * S, 0.f);
      for (int i = 0; i < rows; ++i) {
        const int64_t visible = (p0 + i + 1) / ratio;
        for (int64_t j = 0; j < visible && j < S; ++j) {
          float s = 0.f;
          for (int h = 0; h < H; ++h) {
            double lanes[32];
            for (int L = 0; L < 32; ++L) {
              double d = 0.0;
              for (int c = L; c < hd; c += 32)
                d += double(qv[(size_t(i) * H + h) * hd + c]) * double(keys[size_t(j) * hd + c]);
              lanes[L] = d;
            }
            for (int o = 16; o >= 1; o >>= 1) {
              double nx[32];
              for (int L = 0; L < 32; ++L) nx[L] = lanes[L] + lanes[L ^ o];
              std::copy(nx, nx + 32, lanes);
            }
            float qk = float(lanes[0]);
            if (rb) qk = round_bf16(qk);
            float t = std::fmax(qk, 0.f) * w[size_t(i) * H + h];
            s = s + (rb ? round_bf16(t) : t);
          }
          want[size_t(i) * S + j] = rb == 1 ? round_bf16(s) : s;
        }
      }
      DevPtr dq = gpu().put(qv), dw = gpu().put(w), dk = gpu().put(keys);
      DevPtr st = smelt::test_cuda::step_info(gpu(), p0, rows), sc = gpu().put(std::vector<float>(want.size(), 0.f));
      gpu().launch("indexer", "smelt_indexer_v41_scores", unsigned((S + 7) / 8), rows, 1, 256, unsigned(H * hd * 4), dq,
                   dw, dk, int64_t(S), st, H, hd, ratio, rb, sc);
      auto got = gpu().get<float>(sc, want.size());
      expect_bits_equal(got.data(), want.data(), want.size(), "indexer_v41_scores H " + std::to_string(H) + " rb " +
                                                                  std::to_string(rb));
    }
}

// smelt_fake_quant (a thread per element, group amax by shuffles) at decode shapes with the launcher's grid (a
// thread per element, 128 a block) and a 4-block grid-stride launch, against kernels/quant bit for bit.
TEST(CudaDecodeKernels, FakeQuantDecodeShapesBitForBit) {
  NEED_GPU();
  struct Case {
    int rows, heads, seg, channels, mode;
  };
  for (const Case& cs : {Case{1, 1, 512, 448, 0}, Case{1, 64, 512, 448, 1}, Case{1, 64, 128, 128, 2},
                         Case{3, 5, 96, 48, 1}}) {
    const int width = cs.heads * cs.seg;
    auto x = randn(size_t(cs.rows) * width, 91 + cs.mode, 3.f);
    x[3] = -0.f, x[17] = 1e-30f, x[64] = 1e6f;
    // E2M1 modes: a NaN is skipped by the group's amax and saturates to 6 * s (E4M3 keeps NaN, whose bits the host
    // and the device spell differently).
    if (cs.mode != 0) x[40] = std::nanf("");
    std::vector<float> ref = x;
    for (int r = 0; r < cs.rows; ++r)
      for (int h = 0; h < cs.heads; ++h) {
        float* v = ref.data() + size_t(r) * width + size_t(h) * cs.seg;
        if (cs.mode == 0) q::qdq_window_kv(v, cs.channels);
        else if (cs.mode == 1) q::qdq_compressed_kv(v, cs.channels);
        else q::qdq_index(v, cs.channels);
      }
    const unsigned grid = unsigned((int64_t(cs.rows) * cs.heads * cs.channels + 127) / 128);
    for (unsigned g : {grid, 4u}) {
      DevPtr d = gpu().put(x);
      gpu().launch("quant", "smelt_fake_quant", g, 1, 1, 128, 0, d, cs.rows, width, cs.heads, cs.channels, cs.mode);
      auto y = gpu().get<float>(d, x.size());
      expect_bits_equal(y.data(), ref.data(), x.size(), "fake_quant mode " + std::to_string(cs.mode) + " grid " +
                                                            std::to_string(g));
    }
  }
}

// warp_sum_d's butterfly over 32 lane values (the value every lane ends with).
double butterfly(double* v) {
  for (int o = 16; o >= 1; o >>= 1) {
    double nx[32];
    for (int L = 0; L < 32; ++L) nx[L] = v[L] + v[L ^ o];
    std::copy(nx, nx + 32, v);
  }
  return v[0];
}
// block_sum_d over 256 threads of thread t's chain sum_{c = t, t + 256, ...} x[c]^2.
double block_sumsq(const float* x, int n) {
  double lanes[32], warps[32] = {};
  for (int w = 0; w < 8; ++w) {
    for (int L = 0; L < 32; ++L) {
      double d = 0.0;
      for (int c = w * 32 + L; c < n; c += 256) d += double(x[c]) * double(x[c]);
      lanes[L] = d;
    }
    warps[w] = butterfly(lanes);
  }
  return butterfly(warps);
}
// rms_norm_shared with fp32 output (rb = 0).
void rms_norm_host(float* v, int n, const float* w, float eps) {
  const float ms = float(block_sumsq(v, n) / double(n));
  const float r = 1.f / std::sqrt(ms + eps);
  for (int c = 0; c < n; ++c) v[c] = w[c] * (v[c] * r);
}

// smelt_kv_compressor_emit's index key against its arithmetic
// written out here, bit for bit: ratio 1, fp32 numerics (rb = 0), rope_dim 0, so every step is a correctly rounded
// float / double operation (no expf / sincosf). hd 512 / dI 128 (V4.1-Flash), hd 1024 / dI 1000 (4 outputs a
// thread), F32 and BF16 wk.
TEST(CudaDecodeKernels, KvCompressorIndexKeyBitForBit) {
  NEED_GPU();
  struct Case {
    int hd, dI, wk_dt;
  };
  for (const Case& cs : {Case{512, 128, 0}, Case{512, 128, 1}, Case{1024, 1000, 0}}) {
    const int hd = cs.hd, dI = cs.dI, cap = 8;
    const int64_t p0 = 5;  // entry j = 5
    const float eps = 1e-6f;
    auto kv = randn(hd, 101), norm = randn(hd, 102), kn = randn(dI, 103), wk = randn(size_t(dI) * hd, 104, 0.05f);
    std::vector<uint16_t> wk16(wk.size());
    if (cs.wk_dt)
      for (size_t i = 0; i < wk.size(); ++i) {
        wk[i] = smelt::kernels::round_bf16(wk[i]);
        uint32_t u;
        std::memcpy(&u, &wk[i], 4);
        wk16[i] = uint16_t(u >> 16);
      }
    std::vector<float> latent(kv), key(dI);
    rms_norm_host(latent.data(), hd, norm.data(), eps);
    for (int o = 0; o < dI; ++o) {
      double acc = 0.0;
      for (int c = 0; c < hd; ++c) acc += double(latent[c]) * double(wk[size_t(o) * hd + c]);
      key[o] = float(acc);
    }
    rms_norm_host(key.data(), dI, kn.data(), eps);
    DevPtr dkv = gpu().put(kv), dn = gpu().put(norm), dkn = gpu().put(kn);
    DevPtr dwk = cs.wk_dt ? gpu().put(wk16) : gpu().put(wk), st = smelt::test_cuda::step_info(gpu(), p0, 1);
    DevPtr pool = gpu().put(std::vector<float>(size_t(cap) * hd, 0.f));
    DevPtr ipool = gpu().put(std::vector<float>(size_t(cap) * dI, 0.f));
    gpu().launch("compressor", "smelt_kv_compressor_emit", 2, 1, 1, 256, 0, dkv, DevPtr(0), 1, st, DevPtr(0), 1, pool,
                 ipool, int64_t(cap), dn, 0, dwk, cs.wk_dt, dkn, 0, 1, hd, dI, eps, 0, 0, InvFreq{});
    auto gp = gpu().get<float>(pool, size_t(cap) * hd), gi = gpu().get<float>(ipool, size_t(cap) * dI);
    const std::string what = "hd " + std::to_string(hd) + " dI " + std::to_string(dI);
    expect_bits_equal(gp.data() + p0 * hd, latent.data(), size_t(hd), what + " pool");
    expect_bits_equal(gi.data() + p0 * dI, key.data(), size_t(dI), what + " index key");
  }
}

// Not a check: smelt_kv_compressor_emit at the V4.1-Flash shape (hd 512, index key dI 128 from bf16 wk) timed per
// launch: model numerics with wk rotated over 64 MB (as in a decode step, where the other weights evict it from the
// L2) and resident; fp32 numerics; and without the index key. H200 (session 7), element-wise loads of each thread's
// wk row: 52 / 43 / 7.5 / 4.3 us (uncoalesced: every warp load touches 32 lines, served one a cycle); 16-byte loads:
// 28 / 15 / 7.6 / 4.9 us; in batches of 8 with the next in flight: 22.7 / 14.4 / 7.5 / 4.3 us.
TEST(CudaDecodeKernels, DISABLED_KvCompressorEmitTiming) {
  NEED_GPU();
  const int hd = 512, dI = 128, cap = 8, copies = 512;
  auto kv = randn(hd, 201), norm = randn(hd, 202), kn = randn(dI, 203);
  const std::vector<uint16_t> wk16 = bf16_bits(randn(size_t(dI) * hd, 204, 0.05f));
  DevPtr wk = gpu().alloc(wk16.size() * 2 * copies);
  for (int i = 0; i < copies; ++i) gpu().upload(wk + uint64_t(i) * wk16.size() * 2, wk16.data(), wk16.size() * 2);
  DevPtr dkv = gpu().put(kv), dn = gpu().put(norm), dkn = gpu().put(kn), st = smelt::test_cuda::step_info(gpu(), 5, 1);
  DevPtr pool = gpu().alloc(size_t(cap) * hd * 4), ipool = gpu().alloc(size_t(cap) * dI * 4);
  int rb = 1;
  InvFreq f{};
  for (int i = 0; i < 32; ++i) f.v[i] = std::pow(10000.f, -float(i) / 32.f);
  auto launch = [&](DevPtr w) {
    gpu().launch("compressor", "smelt_kv_compressor_emit", 2, 1, 1, 256, 0, dkv, DevPtr(0), 1, st, DevPtr(0), 1, pool,
                 ipool, int64_t(cap), dn, 0, w, 1, dkn, 0, 1, hd, dI, 1e-6f, 64, rb, f);
  };
  launch(wk);  // compiles the family
  gpu().set_sync(false);
  // rb 0 (no bf16 roundings, no fake quant) and no wk (no index key) tell where the time goes.
  for (int variant = 0; variant < 4; ++variant) {
    rb = variant & 1 ? 0 : 1;
    const bool key = variant < 2, rotate = variant == 0;
    const int n = 2000;
    for (int i = 0; i < 200; ++i) launch(key ? wk : DevPtr(0));  // clock warm-up
    const float ms = gpu().time_ms([&] {
      for (int i = 0; i < n; ++i) launch(!key ? DevPtr(0) : rotate ? wk + uint64_t(i % copies) * wk16.size() * 2 : wk);
    });
    std::printf("[ emit ] rb %d, %s: %.2f us a launch\n", rb,
                !key ? "no index key" : rotate ? "wk rotated over 64 MB" : "wk resident", 1000.0 * ms / n);
  }
  gpu().set_sync(true);
}

TEST(CudaDecodeKernels, SplitRouterEqualsTheOneBlockRouter) {
  NEED_GPU();
  for (int D : {320, 5120})  // 5120: the V4.1-Flash hidden size (a lane's chain of 160 past the unroll of 16)
    for (int gdt : {0, 1}) {  // F32 and BF16 gate
      const int rows = 3, E = 384, K = 6;
      auto x = randn(size_t(rows) * D, 41);
      auto gate = randn(size_t(E) * D, 42, 0.05f);
      for (int c = 0; c < D; ++c) gate[size_t(7) * D + c] = gate[size_t(300) * D + c];  // equal scores: lower expert first
      const std::vector<uint16_t> gate16 = bf16_bits(gate);
      auto bias = randn(E, 43, 0.01f);
      std::vector<float> xr(x);
      for (int c = 0; c < D; ++c) xr[size_t(2) * D + c] = 0.f;  // a row of equal scores everywhere
      DevPtr dx = gpu().put(xr), dg = gdt ? gpu().put(gate16) : gpu().put(gate), db = gpu().put(bias);
      DevPtr ids = gpu().put(std::vector<int32_t>(rows, 1));
      for (int scoring : {0, 1, 2}) {
        DevPtr w0 = gpu().alloc(rows * K * 4), i0 = gpu().alloc(rows * K * 4), w1 = gpu().alloc(rows * K * 4),
               i1 = gpu().alloc(rows * K * 4), dots = gpu().alloc(size_t(rows) * E * 4);
        gpu().launch("moe", "smelt_moe_route", rows, 1, 1, 256, unsigned(2 * E * 4), dx, D, dg, gdt, E, db, 0,
                     DevPtr(0), 0, int64_t(0), ids, K, scoring, 1, 2.5f, 1.0f, w0, i0);
        // The runtime's launch: 2 warps a block, their gate rows and the x row in shared memory.
        const unsigned gsm = unsigned((2 * D * (gdt ? 2 : 4) + 15) / 16 * 16 + D * 4);
        gpu().launch("moe", "smelt_moe_gate_dots", (E + 1) / 2, rows, 1, 64, gsm, dx, D, dg, gdt, E, dots);
        gpu().launch("moe", "smelt_moe_route_select", rows, 1, 1, 256, unsigned((3 * E + K) * 4), dots, E, db, 0, DevPtr(0), 0,
                     int64_t(0), ids, K, scoring, 1, 2.5f, 1.0f, w1, i1);
        auto a = gpu().get<int32_t>(i0, rows * K), b = gpu().get<int32_t>(i1, rows * K);
        EXPECT_EQ(a, b) << "scoring " << scoring;
        auto wa = gpu().get<float>(w0, rows * K), wb = gpu().get<float>(w1, rows * K);
        expect_bits_equal(wb.data(), wa.data(), wa.size(), "route weights, scoring " + std::to_string(scoring));
      }
    }
}

// The `_bf16` entry points fold an op's `round = "bf16"` into the kernel: the plain kernel's output rounded
// (kernels/bf16.h round_bf16 on the host), bit for bit.
TEST(CudaDecodeKernels, RoundingEntryPointsEqualKernelThenRound) {
  NEED_GPU();
  const int rows = 2, n = 4, D = 300;
  auto rounded = [](std::vector<float> v) {
    for (auto& x : v) x = smelt::kernels::round_bf16(x);
    return v;
  };
  auto X = randn(size_t(rows) * n * D, 51), y = randn(size_t(rows) * D, 52), pre = randn(size_t(rows) * n, 53);
  auto post = randn(size_t(rows) * n, 54), comb = randn(size_t(rows) * n * n, 55), w = randn(D, 56);
  DevPtr dX = gpu().put(X), dy = gpu().put(y), dpre = gpu().put(pre), dpost = gpu().put(post), dcomb = gpu().put(comb);
  DevPtr dw = gpu().put(w), a = gpu().alloc(size_t(rows) * n * D * 4), b = gpu().alloc(size_t(rows) * n * D * 4);
  auto check = [&](size_t count, const char* what) {
    auto va = gpu().get<float>(a, count), vb = gpu().get<float>(b, count);
    auto ra = rounded(va);
    expect_bits_equal(vb.data(), ra.data(), count, what);
  };
  gpu().launch("rms_norm", "smelt_rms_norm", rows, 1, 1, 256, 0, dy, a, dw, 0, D, 1e-6f);
  gpu().launch("rms_norm", "smelt_rms_norm_bf16", rows, 1, 1, 256, 0, dy, b, dw, 0, D, 1e-6f);
  check(size_t(rows) * D, "rms_norm");
  gpu().launch("hc", "smelt_hc_collapse", (D + 255) / 256, rows, 1, 256, 0, dX, dpre, n, D, a);
  gpu().launch("hc", "smelt_hc_collapse_bf16", (D + 255) / 256, rows, 1, 256, 0, dX, dpre, n, D, b);
  check(size_t(rows) * D, "hc_collapse");
  gpu().launch("hc", "smelt_hc_expand", (D + 255) / 256, rows, n, 256, 0, dX, dy, dpost, dcomb, D, a);
  gpu().launch("hc", "smelt_hc_expand_bf16", (D + 255) / 256, rows, n, 256, 0, dX, dy, dpost, dcomb, D, b);
  check(size_t(rows) * n * D, "hc_expand");
  // rope over 2 heads of 96 with 32 rotated channels, out of place and in place.
  InvFreq f{};
  for (int i = 0; i < 16; ++i) f.v[i] = std::pow(10000.f, -float(i) / 16.f);
  DevPtr st = smelt::test_cuda::step_info(gpu(), 37, rows);
  gpu().launch("rope", "smelt_rope", rows, 1, 1, 128, 0, dX, a, st, 2, 96, 32, 0, f);
  gpu().launch("rope", "smelt_rope_bf16", rows, 2, 1, 128, 0, dX, b, st, 2, 96, 32, 0, f);  // a block per head
  check(size_t(rows) * 192, "rope");
  DevPtr c = gpu().put(X);
  gpu().launch("rope", "smelt_rope_bf16", rows, 3, 1, 128, 0, c, c, st, 2, 96, 32, 0, f);  // one block idle
  {
    auto va = gpu().get<float>(a, size_t(rows) * 192), vc = gpu().get<float>(c, size_t(rows) * 192);
    auto ra = rounded(va);
    expect_bits_equal(vc.data(), ra.data(), ra.size(), "rope in place");
  }
  const int64_t cnt = int64_t(rows) * D;
  gpu().launch("elementwise", "smelt_add", 4, 1, 1, 256, 0, dy, dX, a, cnt);
  gpu().launch("elementwise", "smelt_add_bf16", 4, 1, 1, 256, 0, dy, dX, b, cnt);
  check(size_t(cnt), "add");
}

}  // namespace

// smelt_engram_gate (256 threads: 20 steps a thread, loaded at once) and smelt_engram_gate_wide (1024 threads, 5
// steps; what the launcher runs) at the V4.1-Flash decode shape (4 streams x 5120) and at D = 7000 (several load
// rounds, a partial last one), F32 and BF16 weights, rb 0 / 1, in place as the plan runs it. The three sums are written
// out here with the kernel's order (thread t's double chain over d = t, t + threads, ..., then block_sum_d's trees)
// and so is every float step after them, except expf: the device's expf may differ from the host's by an ulp or two,
// so the gate must be 1 / (1 + e) for one e within 3 ulp of the host's, the same e for all D outputs of the (row,
// stream), each output bit for bit.
TEST(CudaDecodeKernels, EngramGateDecodeShapeBitForBit) {
  NEED_GPU();
  using smelt::kernels::round_bf16;
  const int n = 4, rows = 2;
  for (const int T : {256, 1024})
    for (int D : {5120, 7000})
      for (int wdt : {0, 1})
        for (int rb : {0, 1}) {
          auto X = randn(size_t(rows) * n * D, 121, 0.5f), kv = randn(size_t(rows) * (n + 1) * D, 122);
          auto qw = randn(size_t(n) * D, 123, 0.2f), kw = randn(size_t(n) * D, 124, 0.2f);
          std::vector<uint16_t> qw16(qw.size()), kw16(kw.size());
          if (wdt)
            for (size_t k = 0; k < qw.size(); ++k) {
              qw[k] = round_bf16(qw[k]), kw[k] = round_bf16(kw[k]);
              uint32_t u, v;
              std::memcpy(&u, &qw[k], 4), std::memcpy(&v, &kw[k], 4);
              qw16[k] = uint16_t(u >> 16), kw16[k] = uint16_t(v >> 16);
            }
          for (float& v : kv) v = round_bf16(v);  // the kv projection's bf16 outputs
          const float eps = 1e-6f, inv = float(std::pow(double(D), -0.5));
          DevPtr dX = gpu().put(X), dkv = gpu().put(kv);
          DevPtr dq = wdt ? gpu().put(qw16) : gpu().put(qw), dk = wdt ? gpu().put(kw16) : gpu().put(kw);
          gpu().launch("engram", T == 1024 ? "smelt_engram_gate_wide" : "smelt_engram_gate", n, rows, 1, T, 0, dX, dkv,
                       dq, wdt, dk, wdt, D, eps, inv, rb, dX);
          auto y = gpu().get<float>(dX, X.size());
          for (int r = 0; r < rows; ++r)
            for (int c = 0; c < n; ++c) {
              const float* h = X.data() + (size_t(r) * n + c) * D;
              const float* key = kv.data() + size_t(r) * (n + 1) * D + size_t(c) * D;
              const float* value = kv.data() + size_t(r) * (n + 1) * D + size_t(n) * D;
              double sums[3][32] = {}, lanes[3][32];
              for (int w = 0; w < T / 32; ++w) {
                for (int L = 0; L < 32; ++L) {
                  double dot = 0.0, hh = 0.0, kk = 0.0;
                  for (int d = w * 32 + L; d < D; d += T) {
                    const float wq = qw[size_t(c) * D + d] * kw[size_t(c) * D + d];
                    const float hw = h[d] * wq;
                    dot += double(hw * key[d]);
                    hh += double(h[d]) * double(h[d]);
                    kk += double(key[d]) * double(key[d]);
                  }
                  lanes[0][L] = dot, lanes[1][L] = hh, lanes[2][L] = kk;
                }
                for (int j = 0; j < 3; ++j) sums[j][w] = butterfly(lanes[j]);
              }
              const double dot = butterfly(sums[0]), hh = butterfly(sums[1]), kk = butterfly(sums[2]);
              const float rh = 1.f / std::sqrt(float(hh / double(D)) + eps), rk = 1.f / std::sqrt(float(kk / double(D)) + eps);
              const float rstd = rh * rk;
              const float g = (float(dot) * rstd) * inv;
              const float mag = std::sqrt(std::fabs(g) > 1e-6f ? std::fabs(g) : 1e-6f);
              const float e0 = std::exp(-std::copysign(mag, g));
              const float* got = y.data() + (size_t(r) * n + c) * D;
              bool found = false;
              for (int k = -3; k <= 3 && !found; ++k) {
                float e = e0;
                for (int s = 0; s < std::abs(k); ++s) e = std::nextafter(e, k > 0 ? 2.f * e + 1.f : 0.f);
                const float gate = 1.f / (1.f + e);
                bool all = true;
                for (int d = 0; d < D && all; ++d) {
                  const float gv = gate * value[d];
                  float v = h[d] + gv;
                  if (rb) v = round_bf16(v);
                  uint32_t a, b;
                  std::memcpy(&a, &v, 4), std::memcpy(&b, &got[d], 4);
                  all = a == b;
                }
                found = all;
              }
              EXPECT_TRUE(found) << "engram gate threads " << T << " D " << D << " wdt " << wdt << " rb " << rb
                                 << " row " << r << " stream " << c;
            }
        }
}

// The V4.1 indexer at the decode shape (32 index heads x 128, S = 2065 compressed entries at ratio 2 and position
// 4129, top-k 512; candidate blocks of 64, 16 kept) against the cpu reference: the selection kernels keep their keys
// in registers up to 4096 entries (and the candidate blocks' scores, folded once); S = 5000 at ratio 1 takes the
// uncached path. rb 1 (bf16 scores: many ties, broken by index) and 0.
TEST(CudaDecodeKernels, IndexerV41SelectionDecodeShape) {
  NEED_GPU();
  namespace k = smelt::kernels;
  struct Case {
    int S, ratio;
    int64_t p0;
  };
  const int H = 32, hd = 128, topk = 512, bs = 64, CB = 16, rows = 1;
  for (const Case& cs : {Case{2065, 2, 4129}, Case{5000, 1, 4999}})
    for (int rb : {1, 0}) {
      const int S = cs.S;
      auto bf = [](std::vector<float> v) {
        for (float& x : v) x = smelt::kernels::round_bf16(x);
        return v;
      };
      auto qv = bf(randn(size_t(rows) * H * hd, 131, 0.3f)), w = bf(randn(size_t(rows) * H, 132));
      auto keys = bf(randn(size_t(S) * hd, 133));
      k::IndexerV41Args a;
      a.rows = rows, a.heads = H, a.head_dim = hd, a.ratio = cs.ratio, a.topk = topk, a.p0 = cs.p0, a.q = qv.data();
      a.w = w.data(), a.keys = keys.data(), a.model_numerics = rb != 0;
      a.candidate_blocks = CB, a.candidate_block_size = bs, a.is_candidate_source = true;
      std::vector<int32_t> idx_src(size_t(rows) * topk), cand(size_t(rows) * CB), idx_con(idx_src.size());
      k::indexer_v41(a, idx_src.data(), cand.data());
      a.is_candidate_source = false, a.cand_in = cand.data();
      k::indexer_v41(a, idx_con.data(), nullptr);
      DevPtr dq = gpu().put(qv), dw = gpu().put(w), dk = gpu().put(keys);
      DevPtr st = smelt::test_cuda::step_info(gpu(), cs.p0, rows);
      DevPtr sc = gpu().alloc(size_t(rows) * S * 4), di = gpu().alloc(size_t(rows) * topk * 4);
      DevPtr dc = gpu().alloc(size_t(rows) * CB * 4);
      const std::string what = "S " + std::to_string(S) + " rb " + std::to_string(rb);
      gpu().launch("indexer", "smelt_indexer_v41_scores", unsigned((S + 7) / 8), rows, 1, 256, unsigned(H * hd * 4),
                   dq, dw, dk, int64_t(S), st, H, hd, cs.ratio, rb, sc);
      gpu().launch("indexer", "smelt_indexer_candidates", rows, 1, 1, 1024, 0, sc, int64_t(S), st, cs.ratio, bs, CB,
                   dc);
      EXPECT_EQ(gpu().get<int32_t>(dc, cand.size()), cand) << "candidate blocks, " << what;
      gpu().launch("indexer", "smelt_indexer_topk", rows, 1, 1, 1024, 0, sc, int64_t(S), st, cs.ratio, topk, 1,
                   DevPtr(0), 0, bs, di);
      EXPECT_EQ(gpu().get<int32_t>(di, idx_src.size()), idx_src) << "source top-k, " << what;
      gpu().launch("indexer", "smelt_indexer_topk", rows, 1, 1, 1024, 0, sc, int64_t(S), st, cs.ratio, topk, 1, dc, CB,
                   bs, di);
      EXPECT_EQ(gpu().get<int32_t>(di, idx_con.size()), idx_con) << "consumer top-k, " << what;
    }
}
