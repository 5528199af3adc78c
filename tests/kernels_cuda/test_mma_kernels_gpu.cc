// GPU tests (ctest label "gpu") of the tensor-core decode GEMVs (kernels/linear/linear_mma.cu, kernels/moe/
// moe_mma.cu, sm_89+) against the exact CUDA-core kernels they replace (smelt_gemv_*_aq, smelt_moe_*_aq_dec),
// which test_decode_kernels_gpu.cc checks against kernels/quant bit for bit.
//
// Tolerance. The MMA's block sum of 32 E4M3 x E4M3 products accumulates in hardware, not guaranteed exact; the
// products themselves are exact, so its error is bounded by a small multiple of 2^-23 times the block's sum of
// |products|. Splitting K into segments changes only the fp32 order of the term fold: at most ~2 nb 2^-24 times
// the sum of |terms|. With A = sum_b xs_b ws_b sum_k |x_k w_k| (float64, from kernels/quant's act quant and
// decoders) every output must satisfy |y_mma - y_exact| <= kTol * A, kTol = 2^-14 (>= 2 * 256 * 2^-24 + 2^-15 for
// K <= 8192); bf16 outputs may in addition differ by one bf16 ulp (2^-7 |y|). The tests print the largest
// |y_mma - y_exact| / A seen and how many outputs were bit-equal (all of them if the hardware sums are exact).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "kernels/quant/reference.h"
#include "runtime/cuda/kernel_args.h"
#include "runtime/cuda/mma_split.h"
#include "tests/kernels_cuda/bits.h"
#include "tests/kernels_cuda/counted_experts.h"
#include "tests/kernels_cuda/harness.h"

namespace {

using smelt::runtime::cuda::ExpertW;
using smelt::test_cuda::DevPtr;
using smelt::test_cuda::e8m0_codes;
using smelt::test_cuda::expect_bits_equal;
using smelt::test_cuda::fp8_codes;
using smelt::test_cuda::gemv_aq_smem;
using smelt::test_cuda::gpu;
using smelt::test_cuda::randn;
namespace q = smelt::kernels::quant;

constexpr double kTol = 1.0 / 16384;  // 2^-14
// The FP4 experts on wgmma (sm_90): Hopper's FP8 tensor cores do not keep the block sum to fp32. Their accumulation
// holds about 14 bits (DeepSeek-V3 report, 3.3.2: FP8 GEMM on H800 "retaining around 14 bits"), aligned to the
// largest product of the column, so next to a large product the small ones lose their low bits. The kernels stage the
// activations in two columns by magnitude (|x| >= 2 and the rest, summed after the MMA: gemv_mma.cuh
// wgmma_desc_col01_lo), which bounds that loss to a column's own largest product. Measured on the H200 with them:
// max |diff| / A = 5.0e-5 (small shapes), 1.2e-5 (V4.1-Flash shapes), 2.7e-5 (an outlier activation a block); with
// one column it was 1.5e-4, and the V4.1 tiny backbone's op test (gpu.v41_tiny_backbone.ops_mma, 1% of an op's
// scale) failed by up to 4%. The bound 2^-12 is 5x the measured; a layout or descriptor error gives O(1) of A.
constexpr double kTolWgmma = 1.0 / 4096;

bool has_fp8_mma() {
  const std::string a = gpu().arch();  // "sm_90"
  return a.size() > 3 && std::atoi(a.c_str() + 3) >= 89;
}
#define NEED_MMA()                                                 \
  NEED_GPU();                                                      \
  if (!has_fp8_mma()) GTEST_SKIP() << "FP8 mma.sync needs sm_89+"


// gemv_mma.cuh mma_smem_bytes with the default 8 KB rings (runtime/cuda/mma_split.h).
unsigned mma_smem(int K, int rows) { return smelt::runtime::cuda::mma_smem_bytes(K, rows); }

// |w| of weight (n, k) without its scale, and the scale: FP8 [N, K] blocks blk, FP4 packed [N, K/2] per 32.
struct Weights {
  bool fp4;
  int N, K, blk;
  std::vector<uint8_t> w, s;
  double absval(int64_t n, int64_t k) const {
    if (fp4) return std::fabs(q::e2m1_decode(uint8_t((w[size_t(n * K + k) / 2] >> (4 * (k & 1))) & 0xF)));
    const uint8_t c = w[size_t(n * K + k)];
    return (c & 0x7F) == 0x7F ? 0.0 : std::fabs(q::e4m3_decode(c));  // NaN codes count as 0 in both kernels
  }
  double scale(int64_t n, int64_t b) const {
    if (fp4) return q::e8m0_decode(s[size_t(n * (K / 32) + b)]);
    return q::e8m0_decode(s[size_t((n / blk) * ((K + blk - 1) / blk) + b * 32 / blk)]);
  }
};
Weights make_weights(bool fp4, int N, int K, int blk, uint32_t seed) {
  Weights W{fp4, N, K, blk, {}, {}};
  W.w = fp8_codes(fp4 ? size_t(N) * K / 2 : size_t(N) * K, seed);
  W.s = e8m0_codes(fp4 ? size_t(N) * (K / 32) : size_t((N + blk - 1) / blk) * ((K + blk - 1) / blk), seed + 1);
  return W;
}

// A[r * N + n] = sum_b xs_b ws_b sum_k |x_k w_k| of the act-quantized rows x [rows, K].
std::vector<double> abs_mass(const std::vector<float>& x, int rows, const Weights& W) {
  const int K = W.K, nb = K / 32;
  std::vector<uint8_t> xc(size_t(rows) * K);
  std::vector<float> xs(size_t(rows) * nb);
  q::act_quant(x.data(), rows, K, 32, xc.data(), xs.data());
  std::vector<double> xa(xc.size());
  for (size_t i = 0; i < xc.size(); ++i) {
    const float v = q::e4m3_decode(xc[i]);
    xa[i] = std::isnan(v) ? 0.0 : std::fabs(v);
  }
  std::vector<double> A(size_t(rows) * W.N, 0.0);
  for (int n = 0; n < W.N; ++n)
    for (int b = 0; b < nb; ++b) {
      double wa[32];
      for (int k = 0; k < 32; ++k) wa[k] = W.absval(n, b * 32 + k);
      const double ws = W.scale(n, b);
      for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int k = 0; k < 32; ++k) s += xa[size_t(r) * K + b * 32 + k] * wa[k];
        A[size_t(r) * W.N + n] += s * xs[size_t(r) * nb + b] * ws;
      }
    }
  return A;
}

struct Stats {
  double tol = kTol;  // the bound's factor of A
  double worst = 0;
  double worst_scale = 0;  // max |diff| / max |exact| of a call's outputs (the plan tests' measure)
  size_t equal = 0, total = 0;
  void print(const std::string& what) const {
    std::printf("[ mma ] %s: max |diff| / A = %.3g (bound %.3g), / the outputs' scale %.3g, bit-equal %zu of %zu\n",
                what.c_str(), worst, tol, worst_scale, equal, total);
  }
};

// |a - e| <= st.tol * A (+ one bf16 ulp of e when bf16): both finite or both NaN.
void expect_close(const std::vector<float>& a, const std::vector<float>& e, const std::vector<double>& A, bool bf16,
                  const std::string& what, Stats& st) {
  ASSERT_EQ(a.size(), e.size());
  double scale = 0;
  for (float v : e) scale = std::isfinite(v) ? std::max(scale, std::fabs(double(v))) : scale;
  for (size_t i = 0; i < a.size(); ++i) {
    ++st.total;
    if (std::memcmp(&a[i], &e[i], 4) == 0) {
      ++st.equal;
      continue;
    }
    const double d = std::fabs(double(a[i]) - double(e[i]));
    if (scale > 0 && std::isfinite(d)) st.worst_scale = std::max(st.worst_scale, d / scale);
    const double bound = st.tol * A[i] + (bf16 ? std::ldexp(std::fabs(double(e[i])), -7) : 0.0);
    if (A[i] > 0) st.worst = std::max(st.worst, (bf16 ? std::max(0.0, d - (bound - st.tol * A[i])) : d) / A[i]);
    ASSERT_LE(d, bound) << what << " element " << i << ": " << a[i] << " vs exact " << e[i] << ", A " << A[i];
  }
}

// K segments as the launcher picks them.
int ksplit(int64_t tiles, int nb, unsigned blocks) { return smelt::runtime::cuda::mma_ksplit(tiles, nb, blocks); }

void run_linear(bool fp4, int rows, int K, int N, int S, unsigned grid, int round, float scale_after, uint32_t seed,
                Stats& st) {
  const Weights W = make_weights(fp4, N, K, 128, seed);
  auto x = randn(size_t(rows) * K, seed + 7, 2.f);
  x[0] = 0.f, x[1] = 1e-7f, x[2] = 600.f;
  const auto A = abs_mass(x, rows, W);
  std::vector<double> As(A);
  for (auto& v : As) v *= std::fabs(scale_after);
  DevPtr dx = gpu().put(x), dw = gpu().put_aq(W.w, N, fp4 ? K / 2 : K, fp4), ds = gpu().put(W.s);
  DevPtr y0 = gpu().alloc(size_t(rows) * N * 4), y1 = gpu().alloc(size_t(rows) * N * 4);
  const std::string f = fp4 ? "fp4" : "fp8";
  // The exact kernel: one grid row per token row; cpb 4 columns per group.
  gpu().launch("linear", ("smelt_gemv_" + f + "_aq").c_str(), 8, rows, 1, 512, gemv_aq_smem(K, 1, 4, 1, fp4), dx, y0, dw, ds,
               K, N, 128, scale_after, round, 4);
  gpu().launch("linear", ("smelt_gemv_" + f + "_mma").c_str(), grid, 1, 1, 256, mma_smem(K, rows), dx, y1, dw, ds,
               rows, K, N, 128, scale_after, round, S);
  const std::string what = f + " rows " + std::to_string(rows) + " K " + std::to_string(K) + " N " +
                           std::to_string(N) + " S " + std::to_string(S) + " round " + std::to_string(round);
  expect_close(gpu().get<float>(y1, size_t(rows) * N), gpu().get<float>(y0, size_t(rows) * N), As, round != 0, what, st);
}

// Partial tiles (N % 16 != 0), rows 1..8, every K split, persistent blocks walking several groups, bf16 + scale.
TEST(CudaMmaKernels, GemvWithinToleranceOfTheExactKernel) {
  NEED_MMA();
  for (bool fp4 : {false, true}) {
    Stats st;
    for (int rows = 1; rows <= 8; ++rows)
      for (int S : {1, 2, 4, 8}) run_linear(fp4, rows, 512, 200, S, 3, 0, 1.f, 10 + rows, st);
    for (int S : {1, 8}) run_linear(fp4, 3, 1280, 77, S, 2, 1, 0.75f, 40, st);
    run_linear(fp4, 2, 96, 33, 8, 1, 0, 1.f, 41, st);  // more segments than blocks of 32 per segment
    st.print(std::string(fp4 ? "fp4" : "fp8") + " gemv, small shapes");
  }
}

// The V4.1-Flash shapes (K x N) with the launcher's split for an H200 (132 multiprocessors, 2 blocks each).
TEST(CudaMmaKernels, GemvRealShapes) {
  NEED_MMA();
  const int shapes[][2] = {{5120, 1536}, {1536, 32768}, {5120, 512}, {8192, 5120}};
  for (bool fp4 : {false, true}) {
    Stats st;
    for (const auto& sh : shapes)
      for (int rows : {1, 4}) {
        const int K = sh[0], N = sh[1];
        const int64_t tiles = (N + 15) / 16;
        const int S = ksplit(tiles, K / 32, 264);
        const unsigned grid = unsigned(std::min<int64_t>((tiles + 8 / S - 1) / (8 / S), 264));
        run_linear(fp4, rows, K, N, S, grid, 1, 1.f, 100 + K + rows, st);
      }
    st.print(std::string(fp4 ? "fp4" : "fp8") + " gemv, V4.1-Flash shapes");
  }
}

// FP8 NaN weight codes count as 0, as in the exact kernels (the MMA block is redone with them zeroed).
TEST(CudaMmaKernels, GemvFp8NanCodesCountAsZero) {
  NEED_MMA();
  const int rows = 2, K = 512, N = 40;
  Weights W = make_weights(false, N, K, 128, 77);
  for (int n = 0; n < N; n += 3) W.w[size_t(n) * K + size_t(n % 16) * 32 + 5] = (n & 1) ? 0xFF : 0x7F;
  auto x = randn(size_t(rows) * K, 78, 2.f);
  const auto A = abs_mass(x, rows, W);
  DevPtr dx = gpu().put(x), dw = gpu().put_aq(W.w, N, K, false), ds = gpu().put(W.s);
  DevPtr y0 = gpu().alloc(size_t(rows) * N * 4), y1 = gpu().alloc(size_t(rows) * N * 4);
  gpu().launch("linear", "smelt_gemv_fp8_aq", 4, rows, 1, 512, gemv_aq_smem(K, 1, 4, 1, false), dx, y0, dw, ds, K, N, 128,
               1.f, 0, 4);
  gpu().launch("linear", "smelt_gemv_fp8_mma", 2, 1, 1, 256, mma_smem(K, rows), dx, y1, dw, ds, rows, K, N, 128, 1.f,
               0, 2);
  Stats st;
  expect_close(gpu().get<float>(y1, size_t(rows) * N), gpu().get<float>(y0, size_t(rows) * N), A, false, "nan", st);
}

bool has_wgmma() { return gpu().arch() == "sm_90"; }

// The one-row FP8 linear on wgmma (smelt_gemv_fp8_wgmma, sm_90): within kTolWgmma of the exact kernel, and the same
// bits when run again (its K split across S / 2 blocks adds the partials in their order whichever block comes last,
// and the tile counts in its zeroed memory must be back at zero for the next launch).
void run_linear_wg(int K, int N, int blk, int S, unsigned grid, int round, float scale_after, uint32_t seed,
                   Stats& st, Weights* given = nullptr) {
  namespace rc = smelt::runtime::cuda;
  const Weights W = given ? *given : make_weights(false, N, K, blk, seed);
  auto x = randn(size_t(K), seed + 7, 2.f);
  x[0] = 0.f, x[1] = 1e-7f, x[2] = 600.f;
  const auto A = abs_mass(x, 1, W);
  std::vector<double> As(A);
  for (auto& v : As) v *= std::fabs(scale_after);
  DevPtr dx = gpu().put(x), dw = gpu().put_aq(W.w, N, K, false), ds = gpu().put(W.s);
  DevPtr y0 = gpu().alloc(size_t(N) * 4), y1 = gpu().alloc(size_t(N) * 4), y2 = gpu().alloc(size_t(N) * 4);
  const int64_t tiles = rc::mma_wg_linear_tiles(N);
  const uint64_t zb = rc::mma_wg_linear_zeroed_bytes(tiles, S), cb = rc::mma_wg_linear_partials_offset(tiles);
  DevPtr z = gpu().alloc(std::max<uint64_t>(zb, 256));
  const DevPtr cnt = zb ? z : 0, xpart = zb ? z + cb : 0;
  gpu().launch("linear", "smelt_gemv_fp8_aq", 8, 1, 1, 512, gemv_aq_smem(K, 1, 4, 1, false), dx, y0, dw, ds, K, N, blk,
               scale_after, round, 4);
  for (DevPtr y : {y1, y2})
    gpu().launch("linear", "smelt_gemv_fp8_wgmma", grid, 1, 1, 256, mma_smem(K, 1), dx, y, dw, ds, K, N, blk,
                 scale_after, round, S, xpart, cnt);
  const std::string what = "fp8 wgmma K " + std::to_string(K) + " N " + std::to_string(N) + " blk " +
                           std::to_string(blk) + " S " + std::to_string(S) + " grid " + std::to_string(grid);
  const auto v1 = gpu().get<float>(y1, size_t(N));
  expect_close(v1, gpu().get<float>(y0, size_t(N)), As, round != 0, what, st);
  expect_bits_equal(gpu().get<float>(y2, size_t(N)), v1, what + " (second launch)");
  if (zb) {
    for (uint32_t v : gpu().get<uint32_t>(cnt, size_t(tiles))) ASSERT_EQ(v, 0u) << what << ": a tile count left";
  }
}

// Partial tiles (N % 64 != 0, N % 16 != 0), every kind of split (two tiles a block, K over the two warpgroups, over
// 2, 3 and 8 blocks a tile), persistent grids smaller than the groups, bf16 + scale, 32- and 128-blocks of scales.
TEST(CudaMmaKernels, GemvFp8WgmmaWithinToleranceOfTheExactKernel) {
  NEED_MMA();
  if (!has_wgmma()) GTEST_SKIP() << "wgmma needs sm_90";
  namespace rc = smelt::runtime::cuda;
  Stats st{kTolWgmma};
  for (int S : {1, 2, 4, 6, 16})
    for (unsigned grid : {2u, 64u}) run_linear_wg(1024, 200, 128, S, grid, 0, 1.f, 10 + S, st);
  run_linear_wg(1280, 77, 32, 4, 3, 1, 0.75f, 40, st);
  run_linear_wg(96, 33, 32, 1, 1, 0, 1.f, 41, st);
  st.print("fp8 gemv on wgmma, small shapes");
  // The V4.1-Flash shapes (K x N: wq_a, wq_b, wkv, wo_b, the indexer's wq_b) with the launcher's split and grid.
  Stats real{kTolWgmma};
  const int shapes[][2] = {{5120, 1280}, {1280, 32768}, {5120, 512}, {8192, 5120}, {1280, 4096}};
  for (const auto& sh : shapes)
    for (int blk : {32, 128}) {
      const int K = sh[0], N = sh[1];
      const int64_t tiles = rc::mma_wg_linear_tiles(N);
      const int S = rc::mma_wg_linear_ksplit(tiles, K / 32, 264);
      const unsigned grid = unsigned(std::min<int64_t>(rc::mma_wg_linear_groups(tiles, S), 264));
      run_linear_wg(K, N, blk, S, grid, 1, 1.f, 100 + K + blk, real);
    }
  real.print("fp8 gemv on wgmma, V4.1-Flash shapes");
}

// NaN weight codes count as 0 on wgmma too (the warpgroup's segment redone with them zeroed).
TEST(CudaMmaKernels, GemvFp8WgmmaNanCodesCountAsZero) {
  NEED_MMA();
  if (!has_wgmma()) GTEST_SKIP() << "wgmma needs sm_90";
  const int K = 512, N = 140;
  Weights W = make_weights(false, N, K, 128, 77);
  for (int n = 0; n < N; n += 3) W.w[size_t(n) * K + size_t(n % 16) * 32 + 5] = (n & 1) ? 0xFF : 0x7F;
  Stats st{kTolWgmma};
  for (int S : {1, 2, 4}) run_linear_wg(K, N, 128, S, 2, 0, 1.f, 78, st, &W);
  st.print("fp8 gemv on wgmma, NaN codes");
}

// Experts: up (g, u, swiglu) and down of the selected experts against the _aq_dec kernels; an invalid slot.
// wg: the wgmma kernels (FP4, sm_90: smelt_moe_*_fp4_wgmma, 64-row tiles of a warpgroup, K split <= 2).
// outlier: x[k] *= outlier at k % 32 == 5 (an activation far above the rest of its block, as the models have).
// E experts' w1 / w2 / w3 (F x D, D x F, F x D; 128-blocks for FP8) on the GPU in the act-quant kernels' layout.
struct Experts {
  std::vector<Weights> w1, w2, w3;
  ExpertW ew;
};
Experts put_experts(bool fp4, int E, int D, int F, uint32_t seed) {
  Experts x;
  std::vector<uint8_t> b1, b2, b3, c1, c2, c3;
  for (int e = 0; e < E; ++e) {
    x.w1.push_back(make_weights(fp4, F, D, 128, seed + 10 * e));
    x.w2.push_back(make_weights(fp4, D, F, 128, seed + 10 * e + 3));
    x.w3.push_back(make_weights(fp4, F, D, 128, seed + 10 * e + 6));
    const Weights &w1 = x.w1.back(), &w2 = x.w2.back(), &w3 = x.w3.back();
    b1.insert(b1.end(), w1.w.begin(), w1.w.end()), c1.insert(c1.end(), w1.s.begin(), w1.s.end());
    b2.insert(b2.end(), w2.w.begin(), w2.w.end()), c2.insert(c2.end(), w2.s.begin(), w2.s.end());
    b3.insert(b3.end(), w3.w.begin(), w3.w.end()), c3.insert(c3.end(), w3.s.begin(), w3.s.end());
  }
  const int64_t wn1 = int64_t(x.w1[0].w.size()), sn1 = int64_t(x.w1[0].s.size());
  const int64_t wn2 = int64_t(x.w2[0].w.size()), sn2 = int64_t(x.w2[0].s.size());
  const int pk = fp4 ? 2 : 1;  // weight bytes a row: D / pk (w1, w3), F / pk (w2)
  x.ew = ExpertW{{gpu().put_aq(b1, F, D / pk, fp4), gpu().put(c1), gpu().put_aq(b2, D, F / pk, fp4), gpu().put(c2),
                  gpu().put_aq(b3, F, D / pk, fp4), gpu().put(c3)},
                 {wn1, sn1, wn2, sn2, wn1, sn1},
                 0};
  return x;
}

void run_moe(bool fp4, int E, int D, int F, const std::vector<int32_t>& idx, bool model, unsigned grid, uint32_t seed,
             Stats& st, bool wg = false, float outlier = 0.f) {
  const int topk = int(idx.size());
  const Experts ex = put_experts(fp4, E, D, F, seed);
  const std::vector<Weights>&w1 = ex.w1, &w2 = ex.w2, &w3 = ex.w3;
  const ExpertW& ew = ex.ew;
  auto x = randn(size_t(D), seed + 99, 1.f);
  if (outlier != 0.f)
    for (int k = 5; k < D; k += 32) x[size_t(k)] *= outlier;
  std::vector<float> rwv(idx.size());
  for (int t = 0; t < topk; ++t) rwv[size_t(t)] = 0.25f * float(t + 1);
  const int rb = model ? 1 : 0;
  const float limit = model ? 0.05f : 0.f;
  // E == 1: the shared expert (idx null).
  DevPtr dx = gpu().put(x), didx = E == 1 ? DevPtr(0) : gpu().put(idx), rw = model ? gpu().put(rwv) : DevPtr(0);
  const std::string f = fp4 ? "fp4" : "fp8";
  const std::string kind = wg ? "_wgmma" : "_mma";
  const std::string what = f + kind + " D " + std::to_string(D) + " F " + std::to_string(F) + (model ? " model" : " plain");
  DevPtr h0 = gpu().alloc(size_t(topk) * F * 4), h1 = gpu().alloc(size_t(topk) * F * 4);
  gpu().launch("moe", ("smelt_moe_up_" + f + "_aq_dec").c_str(), 16, 1, 1, 512, gemv_aq_smem(D, 1, 4, 2, fp4), dx, D, F,
               topk, didx, E, rw, ew, 128, limit, rb, h0, 4);
  // ops_mma.cc's splits: 16-row tiles of a warp, or (wg) 64-row tiles of a warpgroup (mma_split.h).
  namespace rc = smelt::runtime::cuda;
  const int64_t tiles_up = wg ? rc::mma_wg_tiles(topk, F, 1) : int64_t(topk) * ((F + 15) / 16);
  const int s_up = wg ? rc::mma_wg_ksplit(tiles_up, D / 32, 264) : ksplit(tiles_up, D / 32, 264);
  gpu().launch("moe", ("smelt_moe_up_" + f + kind).c_str(), grid, 1, 1, 256,
               wg ? smelt::runtime::cuda::mma_wg_up_smem(D) : mma_smem(D, 1), dx, D, F, topk, didx, E,
               rw, ew, 128, limit, rb, h1, s_up);
  auto he = gpu().get<float>(h0, size_t(topk) * F), hm = gpu().get<float>(h1, size_t(topk) * F);
  // Bound of h = silu(g) u (plain): |dh| <= 1.1 |dg| |u| + |g| |du| with |dg| <= kTol A_g (|silu'| < 1.1).
  std::vector<double> Ah(he.size(), 0.0);
  for (int t = 0; t < topk; ++t) {
    if (idx[size_t(t)] < 0 || idx[size_t(t)] >= E) continue;
    const int e = idx[size_t(t)];
    const auto Ag = abs_mass(x, 1, w1[size_t(e)]), Au = abs_mass(x, 1, w3[size_t(e)]);
    // |g| <= A_g, |u| <= A_u, |silu(g)| <= |g|: |dh| <= (1.1 + 1) tol A_g A_u.
    for (int j = 0; j < F; ++j) Ah[size_t(t) * F + j] = 2.2 * Ag[size_t(j)] * Au[size_t(j)];
  }
  for (int t = 0; t < topk; ++t) {
    if (idx[size_t(t)] >= 0 && idx[size_t(t)] < E) continue;
    for (int j = 0; j < F; ++j) EXPECT_EQ(hm[size_t(t) * F + j], 0.f) << what << " invalid slot " << t;
  }
  if (model) {
    // bf16 roundings of g and u before the clamps and silu: a one-ulp flip there moves h by ~2^-7 of its scale.
    for (size_t i = 0; i < he.size(); ++i)
      ASSERT_LE(std::fabs(double(hm[i]) - double(he[i])), std::ldexp(std::fabs(double(he[i])), -6) + 2 * st.tol * Ah[i] +
                                                                 1e-6)
          << what << " up element " << i;
  } else {
    expect_close(hm, he, Ah, false, what + " up", st);
  }
  // down from the same h (the exact kernel's).
  DevPtr o0 = gpu().alloc(size_t(topk) * D * 4), o1 = gpu().alloc(size_t(topk) * D * 4);
  gpu().launch("moe", ("smelt_moe_down_" + f + "_aq_dec").c_str(), 16, 1, 1, 512, gemv_aq_smem(F, topk, 4, 1, fp4), h0, D, F,
               topk, didx, E, ew, 128, rb, 0, o0, 4);
  // gemv_mma.cuh SMELT_MMA_DOWN_TPW = 2 rows of tiles
  const int64_t tiles_down = wg ? rc::mma_wg_tiles(topk, D, 2) : int64_t(topk) * ((D + 31) / 32);
  const int s_down = wg ? rc::mma_wg_ksplit(tiles_down, F / 32, 264) : ksplit(tiles_down, F / 32, 264);
  // wg: the launcher's size (rings of the stages the kernel uses), which the kernel checks
  const unsigned smem_down = wg ? rc::mma_smem_bytes(F, topk, rc::mma_wg_ring_bytes(2)) : mma_smem(F, topk);
  gpu().launch("moe", ("smelt_moe_down_" + f + kind).c_str(), grid, 1, 1, 256, smem_down, h0, D, F, topk, didx,
               E, ew, 128, rb, 0, o1, s_down);
  std::vector<double> Ad(size_t(topk) * D, 0.0);
  for (int t = 0; t < topk; ++t) {
    if (idx[size_t(t)] < 0 || idx[size_t(t)] >= E) continue;
    const std::vector<float> ht(he.begin() + int64_t(t) * F, he.begin() + int64_t(t + 1) * F);
    const auto a = abs_mass(ht, 1, w2[size_t(idx[size_t(t)])]);
    std::copy(a.begin(), a.end(), Ad.begin() + int64_t(t) * D);
  }
  expect_close(gpu().get<float>(o1, size_t(topk) * D), gpu().get<float>(o0, size_t(topk) * D), Ad, model,
               what + " down", st);
}

TEST(CudaMmaKernels, MoeWithinToleranceOfTheExactKernels) {
  NEED_MMA();
  for (bool fp4 : {false, true}) {
    Stats st;
    for (bool model : {false, true}) {
      run_moe(fp4, 5, 256, 96, {4, -1, 1}, model, 3, 200, st);      // an invalid slot; 3 persistent blocks
      run_moe(fp4, 3, 320, 224, {2, 0, 1, 2, 7}, model, 5, 300, st);  // 7 >= E: invalid; 5 slots
    }
    st.print(std::string(fp4 ? "fp4" : "fp8") + " experts, small shapes");
  }
}

// The V4.1-Flash expert shapes: 6 routed slots (D 5120, F 2304) and the shared expert (one slot, idx null).
TEST(CudaMmaKernels, MoeRealShapes) {
  NEED_MMA();
  for (bool fp4 : {false, true}) {
    Stats st;
    run_moe(fp4, 6, 5120, 2304, {5, 0, 3, 1, 4, 2}, true, 264, 400, st);
    run_moe(fp4, 1, 5120, 2304, {0}, false, 264, 500, st);
    st.print(std::string(fp4 ? "fp4" : "fp8") + " experts, V4.1-Flash shapes");
  }
}

// The FP4 experts on wgmma (sm_90; the plan's sm_90 cubins are sm_90a): the same bounds. Small shapes include tiles
// past F / D (96, 224 and 320 rows are not whole 64- or 128-row tiles), invalid slots and 3 or 5 persistent blocks.
TEST(CudaMmaKernels, MoeWgmmaWithinToleranceOfTheExactKernels) {
  NEED_MMA();
  if (!has_wgmma()) GTEST_SKIP() << "wgmma needs sm_90";
  Stats st{kTolWgmma};
  for (bool model : {false, true}) {
    run_moe(true, 5, 256, 96, {4, -1, 1}, model, 3, 200, st, true);
    run_moe(true, 3, 320, 224, {2, 0, 1, 2, 7}, model, 5, 300, st, true);
  }
  st.print("fp4 experts on wgmma, small shapes");
  Stats real{kTolWgmma};
  run_moe(true, 6, 5120, 2304, {5, 0, 3, 1, 4, 2}, true, 264, 400, real, true);
  run_moe(true, 1, 5120, 2304, {0}, false, 264, 500, real, true);
  real.print("fp4 experts on wgmma, V4.1-Flash shapes");
  Stats out{kTolWgmma}, out_mma;
  for (float o : {16.f, 256.f}) {
    run_moe(true, 6, 1024, 512, {5, 0, 3, 1, 4, 2}, false, 264, 600, out, true, o);
    run_moe(true, 6, 1024, 512, {5, 0, 3, 1, 4, 2}, false, 264, 600, out_mma, false, o);
  }
  out.print("fp4 experts on wgmma, an outlier a block");
  out_mma.print("fp4 experts on mma.sync, the same");
}

// The routed FP4 experts on wgmma and the shared FP8 expert in one launch each (smelt_moe_*_fp4_wgmma_with_fp8, what
// runtime/cuda/ops_mma.cc try_experts_mma_with_shared launches): every output the same bits as the two kernels'
// separate launches, at the V4.1-Flash shapes (the launcher's grids) and at small ones with tiles past F / D and
// persistent grids smaller than the groups (r / g blocks for the routed / shared parts).
void run_moe_with_shared(int D, int F, int F2, const std::vector<int32_t>& idx, int E, unsigned r_up, unsigned g_up,
                         unsigned r_down, unsigned g_down, uint32_t seed) {
  namespace rc = smelt::runtime::cuda;
  const int topk = int(idx.size());
  const Experts routed = put_experts(true, E, D, F, seed), shared = put_experts(false, 1, D, F2, seed + 1000);
  auto x = randn(size_t(D), seed + 99, 1.f);
  std::vector<float> rwv(idx.size());
  for (int t = 0; t < topk; ++t) rwv[size_t(t)] = 0.25f * float(t + 1);
  DevPtr dx = gpu().put(x), didx = gpu().put(idx), rw = gpu().put(rwv);
  const float limit = 0.05f, limit2 = 0.07f;
  const int s_up = rc::mma_wg_ksplit(rc::mma_wg_tiles(topk, F, 1), D / 32, 264);
  const int s_down = rc::mma_wg_ksplit(rc::mma_wg_tiles(topk, D, 2), F / 32, 264);
  const int s2_up = ksplit((F2 + 15) / 16, D / 32, 264), s2_down = ksplit((D + 31) / 32, F2 / 32, 264);
  const std::string what = "D " + std::to_string(D) + " F " + std::to_string(F) + " shared F " + std::to_string(F2);
  const size_t nh = size_t(topk) * F, no = size_t(topk) * D;
  DevPtr h0 = gpu().alloc(nh * 4), h1 = gpu().alloc(nh * 4), g0 = gpu().alloc(size_t(F2) * 4),
         g1 = gpu().alloc(size_t(F2) * 4);
  gpu().launch("moe", "smelt_moe_up_fp4_wgmma", r_up, 1, 1, 256, rc::mma_wg_up_smem(D), dx, D, F, topk, didx, E, rw,
               routed.ew, 128, limit, 1, h0, s_up);
  gpu().launch("moe", "smelt_moe_up_fp8_mma", g_up, 1, 1, 256, mma_smem(D, 1), dx, D, F2, 1, DevPtr(0), 1, DevPtr(0),
               shared.ew, 128, limit2, 1, g0, s2_up);
  gpu().launch("moe", "smelt_moe_up_fp4_wgmma_with_fp8", r_up + g_up, 1, 1, 256, rc::mma_wg_up_smem(D), dx, D, F, topk, didx,
               E, rw, routed.ew, 128, limit, 1, h1, s_up, int(r_up), F2, shared.ew, 128, limit2, g1, s2_up);
  expect_bits_equal(gpu().get<float>(h1, nh), gpu().get<float>(h0, nh), what + " routed up");
  expect_bits_equal(gpu().get<float>(g1, size_t(F2)), gpu().get<float>(g0, size_t(F2)), what + " shared up");
  DevPtr o0 = gpu().alloc(no * 4), o1 = gpu().alloc(no * 4), y0 = gpu().alloc(size_t(D) * 4),
         y1 = gpu().alloc(size_t(D) * 4);
  const unsigned smem_down = std::max(mma_smem(F, topk), mma_smem(F2, 1));
  gpu().launch("moe", "smelt_moe_down_fp4_wgmma", r_down, 1, 1, 256, mma_smem(F, topk), h0, D, F, topk, didx, E,
               routed.ew, 128, 1, 0, o0, s_down);
  gpu().launch("moe", "smelt_moe_down_fp8_mma", g_down, 1, 1, 256, mma_smem(F2, 1), g0, D, F2, 1, DevPtr(0), 1,
               shared.ew, 128, 1, 1, y0, s2_down);
  gpu().launch("moe", "smelt_moe_down_fp4_wgmma_with_fp8", r_down + g_down, 1, 1, 256, smem_down, h0, D, F, topk, didx,
               E, routed.ew, 128, 1, 0, o1, s_down, int(r_down), g0, F2, shared.ew, 128, 1, y1, s2_down);
  expect_bits_equal(gpu().get<float>(o1, no), gpu().get<float>(o0, no), what + " routed down");
  expect_bits_equal(gpu().get<float>(y1, size_t(D)), gpu().get<float>(y0, size_t(D)), what + " shared down (bf16)");

  // With the slot counters (ExpertW::slot_done, as runtime/cuda/ops.cc run_experts passes them): the paired up counts
  // its routed tiles, and the routed down, launched right after it by dependent launch, starts each slot on its count
  // instead of the grid-wide wait. The same bits, twice in a row (the down's last block zeroes the counters).
  ExpertW cw = routed.ew;
  cw.slot_done = gpu().put(std::vector<uint32_t>(size_t(topk) + 1, 0u));
  auto counted = [&](DevPtr h2, DevPtr g2, DevPtr o2) {
    gpu().launch("moe", "smelt_moe_up_fp4_wgmma_with_fp8", r_up + g_up, 1, 1, 256, rc::mma_wg_up_smem(D), dx, D, F, topk,
                 didx, E, rw, cw, 128, limit, 1, h2, s_up, int(r_up), F2, shared.ew, 128, limit2, g2, s2_up);
    gpu().launch("moe", "smelt_moe_down_fp4_wgmma", r_down, 1, 1, 256, mma_smem(F, topk), h2, D, F, topk, didx, E, cw,
                 128, 1, 0, o2, s_down);
  };
  smelt::test_cuda::expect_counted_runs(counted, h0, nh, g0, size_t(F2), o0, no, cw.slot_done, size_t(topk) + 1, what);
}

TEST(CudaMmaKernels, MoeWgmmaWithSharedExpertSameBits) {
  NEED_MMA();
  if (!has_wgmma()) GTEST_SKIP() << "wgmma needs sm_90";
  namespace rc = smelt::runtime::cuda;
  // The V4.1-Flash shapes at the launcher's grids: 216 + 144 blocks up, 240 + 160 down.
  const int64_t tu = rc::mma_wg_tiles(6, 2304, 1), td = rc::mma_wg_tiles(6, 5120, 2);
  const unsigned r_up = unsigned(std::min<int64_t>(rc::mma_wg_groups(tu, rc::mma_wg_ksplit(tu, 160, 264)), 264));
  const unsigned r_down = unsigned(std::min<int64_t>(rc::mma_wg_groups(td, rc::mma_wg_ksplit(td, 72, 264)), 264));
  auto sync_grid = [](int64_t tiles, int S) { return unsigned(std::min<int64_t>((tiles + 8 / S - 1) / (8 / S), 264)); };
  const unsigned g_up = sync_grid(144, ksplit(144, 160, 264)), g_down = sync_grid(160, ksplit(160, 72, 264));
  run_moe_with_shared(5120, 2304, 2304, {5, 0, 3, 1, 4, 2}, 6, r_up, g_up, r_down, g_down, 700);
  // Small: tiles past F (224) and D (320), an invalid slot, 3 / 2 persistent blocks for the parts.
  run_moe_with_shared(320, 224, 96, {2, 0, -1, 1}, 3, 3, 2, 3, 2, 800);
}

}  // namespace
