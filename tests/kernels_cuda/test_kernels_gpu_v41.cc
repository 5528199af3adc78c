// GPU tests (ctest label "gpu") of the kernel families the V4.1 plans use beyond test_kernels_gpu.cc, each against
// its C++ reference (kernels/<family>/reference.h): weight-only FP8 (32x32 blocks) / FP4 linears, grouped FP8
// linear, hc collapse / expand / mean, the V4 compressor, the V4.1 kv_compressor, indexer_v41, MoE experts and
// swiglu_mlp on quantized weights, Engram; with the model's numerics and with numerics = "fp32" (rb = 0).
// Tolerances, with their reason:
// - exact: elementwise kernels written with the reference's rounding steps, top-k / candidate indices;
// - 1e-5 relative to sum |terms|: fp32 dot products in another (fixed) summation order;
// - fp32 paths with expf / sincosf (CUDA <= 2 ulp vs the C library): 1e-4 of the output's largest value;
// - model numerics (bf16 roundings, FP8 / FP4 quantization after an expf or a dot in another order): a 1-ulp
//   difference before a rounding point moves a value by a whole step, so most elements must be equal and the
//   rest within a few steps (`mostly_equal`).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/common.h"
#include "kernels/compressor/reference.h"
#include "kernels/engram/reference.h"
#include "kernels/hc/reference.h"
#include "kernels/indexer/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/moe/reference.h"
#include "kernels/quant/reference.h"
#include "kernels/rms_norm/reference.h"
#include "kernels/rope/reference.h"
#include "runtime/cuda/kernel_args.h"
#include "tests/kernels_cuda/bits.h"
#include "tests/kernels_cuda/harness.h"

namespace {

using smelt::test_cuda::DevPtr;
using smelt::runtime::cuda::ExpertW;
using smelt::runtime::cuda::InvFreq;
using smelt::test_cuda::Gpu;
using smelt::test_cuda::e8m0_codes;
using smelt::test_cuda::fp8_codes;
using smelt::test_cuda::expect_bits_equal;
using smelt::test_cuda::gpu;
using smelt::test_cuda::randn;
namespace k = smelt::kernels;
namespace q = smelt::kernels::quant;

std::vector<float> bf16_values(std::vector<float> v) {
  for (auto& x : v) x = q::bf16_round(x);
  return v;
}

float max_abs(const std::vector<float>& v) {
  float m = 0.f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Every element within tol * max|ref| (fp32 paths).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double tol, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  const double bound = tol * std::max(1e-30f, max_abs(ref));
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], bound) << what << " element " << i << " (max |ref| " << max_abs(ref) << ")";
}

// Model numerics: at least `frac` of the elements within 1e-6 relative, every element within tol * max|ref|.
void mostly_equal(const std::vector<float>& got, const std::vector<float>& ref, double frac, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  const double bound = tol * std::max(1e-30f, max_abs(ref));
  size_t same = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    ASSERT_NEAR(got[i], ref[i], bound) << what << " element " << i << " (max |ref| " << max_abs(ref) << ")";
    same += std::fabs(got[i] - ref[i]) <= 1e-6 * std::fabs(ref[i]) + 1e-30;
  }
  EXPECT_GE(double(same), frac * double(ref.size())) << what << ": " << same << " of " << ref.size() << " equal";
}

// ---- linear: weight-only FP8 (32x32 blocks) and FP4, grouped FP8 ------------------------------------------------

TEST(CudaKernelsV41, LinearFp8AndFp4WeightOnlyMatchDequantizedLinear) {
  NEED_GPU();
  const int rows = 5, K = 256, N = 96;
  auto x = randn(size_t(rows) * K, 11);
  for (bool fp4 : {false, true}) {
    auto w = fp4 ? fp8_codes(size_t(N) * K / 2, 12) : fp8_codes(size_t(N) * K, 12);
    auto s = fp4 ? e8m0_codes(size_t(N) * (K / 32), 13) : e8m0_codes(size_t(N / 32) * (K / 32), 13);
    std::vector<float> ref(size_t(rows) * N), wd(size_t(N) * K);
    k::linear_quant(x.data(), rows, K, N, w.data(), fp4 ? k::WeightFormat::FP4_E2M1 : k::WeightFormat::FP8_E4M3,
                    s.data(), 32, /*act_quant=*/false, ref.data());
    if (fp4) q::dequant_fp4_weight(w.data(), s.data(), N, K, wd.data());
    else q::dequant_fp8_weight(w.data(), s.data(), N, K, 32, wd.data());
    DevPtr dx = gpu().put(x), dw = gpu().put(w), ds = gpu().put(s);
    DevPtr dy = gpu().alloc(ref.size() * 4), dy1 = gpu().alloc(size_t(N) * 4);
    const char* name = fp4 ? "smelt_linear_fp4" : "smelt_linear_fp8";
    gpu().launch("linear", name, N / 8, 1, 1, 256, 0, dx, dy, dw, ds, rows, K, N, 32, 1.0f, 0);
    gpu().launch("linear", name, N / 8, 1, 1, 256, 0, dx, dy1, dw, ds, 1, K, N, 32, 1.0f, 0);
    auto y = gpu().get<float>(dy, ref.size());
    for (int r = 0; r < rows; ++r)
      for (int n = 0; n < N; ++n) {
        double mag = 0;
        for (int c = 0; c < K; ++c) mag += std::fabs(double(x[r * K + c]) * wd[size_t(n) * K + c]);
        ASSERT_NEAR(y[r * N + n], ref[r * N + n], 1e-5 * mag + 1e-30) << name << " " << r << "," << n;
      }
    auto y1 = gpu().get<float>(dy1, N);
    expect_bits_equal(y.data(), y1.data(), N, "row 0 (5 rows vs 1 row)");
  }
}

TEST(CudaKernelsV41, GroupedLinearFp8MatchesDequantizedGroupedLinear) {
  NEED_GPU();
  const int rows = 3, G = 2, K = 128, N = 64;  // wo_a: [G*N, K] FP8, 32x32 block scales
  auto x = randn(size_t(rows) * G * K, 21);
  auto w = fp8_codes(size_t(G) * N * K, 22);
  auto s = e8m0_codes(size_t(G * N / 32) * (K / 32), 23);
  std::vector<float> wd(size_t(G) * N * K), ref(size_t(rows) * G * N);
  q::dequant_fp8_weight(w.data(), s.data(), G * N, K, 32, wd.data());
  k::grouped_linear(x.data(), wd.data(), ref.data(), rows, G, K, N);
  DevPtr dx = gpu().put(x), dw = gpu().put(w), ds = gpu().put(s), dy = gpu().alloc(ref.size() * 4);
  gpu().launch("linear", "smelt_linear_fp8", N / 8, G, 1, 256, 0, dx, dy, dw, ds, rows, K, N, 32, 1.0f, 0);
  auto y = gpu().get<float>(dy, ref.size());
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < G; ++g)
      for (int n = 0; n < N; ++n) {
        double mag = 0;
        for (int c = 0; c < K; ++c)
          mag += std::fabs(double(x[(r * G + g) * K + c]) * wd[(size_t(g) * N + n) * K + c]);
        const size_t o = size_t(r) * G * N + size_t(g) * N + n;
        ASSERT_NEAR(y[o], ref[o], 1e-5 * mag + 1e-30) << r << "," << g << "," << n;
      }
}

// ---- hc collapse / expand / mean -------------------------------------------------------------------------------

TEST(CudaKernelsV41, HcCollapseExpandMeanAreBitExact) {
  NEED_GPU();
  const int rows = 3, n = 4, D = 300;
  auto X = randn(size_t(rows) * n * D, 31), y = randn(size_t(rows) * D, 32);
  auto pre = randn(size_t(rows) * n, 33), post = randn(size_t(rows) * n, 34), comb = randn(size_t(rows) * n * n, 35);
  DevPtr dX = gpu().put(X), dy = gpu().put(y), dpre = gpu().put(pre), dpost = gpu().put(post), dcomb = gpu().put(comb);
  const unsigned gx = (D + 255) / 256;
  for (bool one_hot : {false, true}) {
    std::vector<float> ref(size_t(rows) * D);
    k::hc_collapse(X.data(), one_hot ? nullptr : pre.data(), rows, n, D, ref.data());
    DevPtr du = gpu().alloc(ref.size() * 4);
    gpu().launch("hc", "smelt_hc_collapse", gx, rows, 1, 256, 0, dX, one_hot ? DevPtr(0) : dpre, n, D, du);
    auto u = gpu().get<float>(du, ref.size());
    expect_bits_equal(u.data(), ref.data(), ref.size(), one_hot ? "hc_collapse (one-hot)" : "hc_collapse");
  }
  std::vector<float> ref(X.size());
  k::hc_expand(X.data(), y.data(), post.data(), comb.data(), rows, n, D, ref.data());
  DevPtr dout = gpu().alloc(ref.size() * 4);
  gpu().launch("hc", "smelt_hc_expand", gx, rows, n, 256, 0, dX, dy, dpost, dcomb, D, dout);
  auto out = gpu().get<float>(dout, ref.size());
  expect_bits_equal(out.data(), ref.data(), ref.size(), "hc_expand");
  for (int rb : {1, 0}) {
    std::vector<float> mref(size_t(rows) * D);
    k::hc_mean(X.data(), rows, n, D, mref.data(), rb != 0);
    DevPtr dm = gpu().alloc(mref.size() * 4);
    gpu().launch("hc", "smelt_hc_mean", gx, rows, 1, 256, 0, dX, n, D, rb, dm);
    auto m = gpu().get<float>(dm, mref.size());
    expect_bits_equal(m.data(), mref.data(), mref.size(), rb ? "hc_mean bf16" : "hc_mean fp32");
  }
}

// ---- compressors -----------------------------------------------------------------------------------------------

InvFreq inv_freq_arg(const std::vector<float>& f) {
  InvFreq a{};
  std::copy(f.begin(), f.end(), a.v);
  return a;
}

// V4 compressor (overlap, ratio 4) over two chunks: the second reads the first's rows from the ring.
TEST(CudaKernelsV41, CompressorV4OverlapAcrossChunks) {
  NEED_GPU();
  const int D = 64, r = 4, hd = 64, cw = 2 * hd, rope_dim = 16, R = 2 * r, pool_rows = 8;
  k::RopeParams rp;
  rp.rope_dim = rope_dim;
  const std::vector<float> inv = k::rope_inv_freq(rp);
  auto wkv = randn(size_t(cw) * D, 41, 0.1f), wgate = randn(size_t(cw) * D, 42, 0.1f);
  auto ape = randn(size_t(r) * cw, 43, 0.1f), norm = randn(size_t(hd), 44, 1.f);
  k::CompressorArgs a;
  a.ratio = r, a.head_dim = hd, a.overlap = true, a.in_dim = D, a.wkv = wkv.data(), a.wgate = wgate.data();
  a.ape = ape.data(), a.norm = norm.data(), a.eps = 1e-6f, a.rope_dim = rope_dim, a.inv_freq = inv.data();
  std::vector<float> ring(size_t(R) * 2 * cw, 0.f), pool(size_t(pool_rows) * hd, 0.f);
  DevPtr dring = gpu().alloc(ring.size() * 4), dpool = gpu().alloc(pool.size() * 4);
  DevPtr dape = gpu().put(ape), dnorm = gpu().put(norm);
  int64_t p0 = 0;
  for (int rows : {6, 11}) {
    auto x = randn(size_t(rows) * D, 45 + rows);
    std::vector<float> kv(size_t(rows) * cw), gate(size_t(rows) * cw);  // the linear kernels' job, done here
    k::linear(x.data(), wkv.data(), kv.data(), rows, D, cw);
    k::linear(x.data(), wgate.data(), gate.data(), rows, D, cw);
    k::compressor(a, x.data(), rows, p0, ring.data(), pool.data(), pool_rows);
    DevPtr dkv = gpu().put(kv), dg = gpu().put(gate), st = smelt::test_cuda::step_info(gpu(), p0, rows);
    gpu().launch("compressor", "smelt_compressor_emit", rows / r + 1, 1, 1, 256, 0, dkv, dg, rows, st, dring, R, dpool,
                 int64_t(pool_rows), dape, 0, dnorm, 0, r, hd, 1, 1e-6f, rope_dim, inv_freq_arg(inv));
    gpu().launch("compressor", "smelt_compressor_ring_store", rows, 1, 1, 256, 0, dkv, dg, rows, cw, st, dring, R);
    expect_close(gpu().get<float>(dpool, pool.size()), pool, 1e-4, "compressor pool");
    auto gring = gpu().get<float>(dring, ring.size());
    expect_bits_equal(gring.data(), ring.data(), ring.size(), "compressor ring");
    p0 += rows;
  }
}

// V4.1 kv_compressor, ratio 2 (ring across chunks) and ratio 1, with the index key; model numerics and fp32.
TEST(CudaKernelsV41, KvCompressorV41Ratio1And2) {
  NEED_GPU();
  const int D = 64, hd = 128, dI = 64, rope_dim = 32, cap = 16;
  k::RopeParams rp;
  rp.rope_dim = rope_dim, rp.theta = 160000.0, rp.yarn_factor = 16.0, rp.yarn_original_max_pos = 65536.0;
  const std::vector<float> inv = k::rope_inv_freq_v41(rp);
  auto wkv = bf16_values(randn(size_t(hd) * D, 51, 0.2f)), wgate = bf16_values(randn(size_t(hd) * D, 52, 0.2f));
  auto norm = bf16_values(randn(size_t(hd), 53, 1.f)), wk = bf16_values(randn(size_t(dI) * hd, 54, 0.1f));
  auto kn = bf16_values(randn(size_t(dI), 55, 1.f));
  DevPtr dnorm = gpu().put(norm), dwk = gpu().put(wk), dkn = gpu().put(kn);
  for (int ratio : {2, 1})
    for (int rb : {1, 0}) {
      k::KvCompressorV41Args a;
      a.ratio = ratio, a.head_dim = hd, a.index_head_dim = dI, a.rope_dim = rope_dim, a.in_dim = D;
      a.wkv = wkv.data(), a.wgate = ratio == 2 ? wgate.data() : nullptr, a.norm = norm.data(), a.wk = wk.data();
      a.k_norm = kn.data(), a.eps = 1e-20f, a.inv_freq = inv.data(), a.ring_rows = 2, a.model_numerics = rb != 0;
      std::vector<float> ring(size_t(2) * 2 * hd, 0.f), pool(size_t(cap) * hd, 0.f), ipool(size_t(cap) * dI, 0.f);
      DevPtr dring = gpu().alloc(ring.size() * 4), dpool = gpu().alloc(pool.size() * 4);
      DevPtr dipool = gpu().alloc(ipool.size() * 4);
      int64_t p0 = 0;
      for (int rows : {5, 1, 6}) {  // odd chunk ends: ratio-2 groups straddle chunks through the ring
        auto x = bf16_values(randn(size_t(rows) * D, 56 + rows + 10 * ratio));
        std::vector<float> kv(size_t(rows) * hd), gate(size_t(rows) * hd);  // fp32 projections (linear kernels)
        for (int t = 0; t < rows; ++t)
          for (int o = 0; o < hd; ++o) {
            kv[size_t(t) * hd + o] = k::detail::dot_exact(x.data() + t * D, wkv.data() + size_t(o) * D, D);
            gate[size_t(t) * hd + o] = k::detail::dot_exact(x.data() + t * D, wgate.data() + size_t(o) * D, D);
          }
        k::kv_compressor_v41(a, x.data(), rows, p0, ratio == 2 ? ring.data() : nullptr, pool.data(), ipool.data(), cap);
        DevPtr dkv = gpu().put(kv), dg = gpu().put(gate), st = smelt::test_cuda::step_info(gpu(), p0, rows);
        gpu().launch("compressor", "smelt_kv_compressor_emit", rows / ratio + 1, 1, 1, 256, 0, dkv,
                     ratio == 2 ? dg : DevPtr(0), rows, st, ratio == 2 ? dring : DevPtr(0), 2, dpool, dipool,
                     int64_t(cap), dnorm, 0, dwk, 0, dkn, 0, ratio, hd, dI, 1e-20f, rope_dim, rb, inv_freq_arg(inv));
        if (ratio == 2)
          gpu().launch("compressor", "smelt_compressor_ring_store", rows, 1, 1, 256, 0, dkv, dg, rows, hd, st, dring, 2);
        p0 += rows;
      }
      const std::string what = "kv_compressor ratio " + std::to_string(ratio) + (rb ? " model numerics" : " fp32");
      auto gp = gpu().get<float>(dpool, pool.size()), gi = gpu().get<float>(dipool, ipool.size());
      if (rb) {
        mostly_equal(gp, pool, 0.95, 0.25, (what + " pool").c_str());
        mostly_equal(gi, ipool, 0.95, 0.25, (what + " index pool").c_str());
      } else {
        expect_close(gp, pool, 1e-4, (what + " pool").c_str());
        expect_close(gi, ipool, 1e-4, (what + " index pool").c_str());
      }
      if (ratio == 2) {
        auto gr = gpu().get<float>(dring, ring.size());
        expect_bits_equal(gr.data(), ring.data(), ring.size(), (what + " ring").c_str());
      }
    }
}

// ---- indexer_v41 ------------------------------------------------------------------------------------------------

TEST(CudaKernelsV41, IndexerV41TopkAndCandidateBlocks) {
  NEED_GPU();
  const int H = 4, hd = 64, S = 48, rows = 6, topk = 8, bs = 4, CB = 3;
  const int64_t p0 = 30;  // ratio 1: rows see 31 .. 36 entries
  auto qv = bf16_values(randn(size_t(rows) * H * hd, 61)), w = bf16_values(randn(size_t(rows) * H, 62));
  auto keys = bf16_values(randn(size_t(S) * hd, 63));
  DevPtr dq = gpu().put(qv), dw = gpu().put(w), dk = gpu().put(keys), st = smelt::test_cuda::step_info(gpu(), p0, rows);
  DevPtr sc = gpu().alloc(size_t(rows) * S * 4), di = gpu().alloc(size_t(rows) * topk * 4);
  DevPtr dc = gpu().alloc(size_t(rows) * CB * 4);
  for (int rb : {1, 0}) {
    k::IndexerV41Args a;
    a.rows = rows, a.heads = H, a.head_dim = hd, a.ratio = 1, a.topk = topk, a.p0 = p0, a.q = qv.data(), a.w = w.data();
    a.keys = keys.data(), a.model_numerics = rb != 0;
    // Source (candidate blocks out), then a consumer restricted to them, then a plain one-level top-k.
    a.candidate_blocks = CB, a.candidate_block_size = bs, a.is_candidate_source = true;
    std::vector<int32_t> idx_src(size_t(rows) * topk), cand(size_t(rows) * CB), idx_con(idx_src.size()),
        idx_one(idx_src.size());
    k::indexer_v41(a, idx_src.data(), cand.data());
    a.is_candidate_source = false, a.cand_in = cand.data();
    k::indexer_v41(a, idx_con.data(), nullptr);
    a.candidate_blocks = 0, a.candidate_block_size = 0, a.cand_in = nullptr;
    k::indexer_v41(a, idx_one.data(), nullptr);

    gpu().launch("indexer", "smelt_indexer_v41_scores", unsigned((S + 7) / 8), rows, 1, 256, unsigned(H * hd * 4), dq,
                 dw, dk, int64_t(S), st, H, hd, 1, rb, sc);
    gpu().launch("indexer", "smelt_indexer_candidates", rows, 1, 1, 1024, 0, sc, int64_t(S), st, 1, bs, CB, dc);
    EXPECT_EQ(gpu().get<int32_t>(dc, cand.size()), cand) << "candidate blocks, rb " << rb;
    gpu().launch("indexer", "smelt_indexer_topk", rows, 1, 1, 1024, 0, sc, int64_t(S), st, 1, topk, 1, DevPtr(0), 0,
                 bs, di);
    EXPECT_EQ(gpu().get<int32_t>(di, idx_src.size()), idx_src) << "source top-k, rb " << rb;
    gpu().launch("indexer", "smelt_indexer_topk", rows, 1, 1, 1024, 0, sc, int64_t(S), st, 1, topk, 1, dc, CB, bs, di);
    EXPECT_EQ(gpu().get<int32_t>(di, idx_con.size()), idx_con) << "consumer top-k, rb " << rb;
    gpu().launch("indexer", "smelt_indexer_topk", rows, 1, 1, 1024, 0, sc, int64_t(S), st, 1, topk, 1, DevPtr(0), 0, 1,
                 di);
    EXPECT_EQ(gpu().get<int32_t>(di, idx_one.size()), idx_one) << "one-level top-k, rb " << rb;
  }
}

// The TP split of both indexers (smelt.indexer_scores / indexer_select): two ranks' partial scores (heads 0-1 and
// 2-3; V4.1: terms rounded, sum not, rb 2; V4: the model's head count in the weight scale) against the cpu
// indexer_scores, summed on the host (V4.1: rounded to bf16, the all_reduce's round), then the top-k kernel on the
// sum against the cpu indexer_select on the same sum and (V4.1) against the whole indexer_v41.
TEST(CudaKernelsV41, IndexerSplitPartialScoresAndSelection) {
  NEED_GPU();
  const int H = 4, half = 2, hd = 64, S = 48, rows = 6, topk = 8;
  const int64_t p0 = 30;  // ratio 1: rows see 31 .. 36 entries
  auto qv = bf16_values(randn(size_t(rows) * H * hd, 71)), w = bf16_values(randn(size_t(rows) * H, 72));
  auto keys = bf16_values(randn(size_t(S) * hd, 73));
  DevPtr dk = gpu().put(keys), st = smelt::test_cuda::step_info(gpu(), p0, rows);
  DevPtr di = gpu().alloc(size_t(rows) * topk * 4);
  for (int v41 : {1, 0}) {
    std::vector<float> sum(size_t(rows) * S, 0.f);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> qr, wr;
      for (int i = 0; i < rows; ++i) {
        qr.insert(qr.end(), qv.begin() + (i * H + r * half) * hd, qv.begin() + (i * H + r * half + half) * hd);
        wr.insert(wr.end(), w.begin() + i * H + r * half, w.begin() + i * H + r * half + half);
      }
      k::IndexerScoresArgs a;
      a.rows = rows, a.heads = half, a.head_dim = hd, a.ratio = 1, a.p0 = p0, a.width = S, a.q = qr.data();
      a.w = wr.data(), a.keys = keys.data(), a.v41 = v41 != 0, a.heads_total = H;
      std::vector<float> want(sum.size());
      k::indexer_scores(a, want.data());  // entries past a row's visible count: 0 (the kernels leave them)
      DevPtr dq = gpu().put(qr), dw = gpu().put(wr), sc = gpu().put(std::vector<float>(sum.size(), 0.f));
      if (v41)
        gpu().launch("indexer", "smelt_indexer_v41_scores", unsigned((S + 7) / 8), rows, 1, 256,
                     unsigned(half * hd * 4), dq, dw, dk, int64_t(S), st, half, hd, 1, 2, sc);
      else
        gpu().launch("indexer", "smelt_indexer_scores", unsigned((S + 7) / 8), rows, 1, 256, unsigned(half * hd * 4),
                     dq, dw, dk, int64_t(S), st, half, hd, 1, float(std::pow(double(hd), -0.5)),
                     float(std::pow(double(H), -0.5)), sc);
      std::vector<float> got = gpu().get<float>(sc, sum.size());
      expect_close(got, want, v41 ? 1e-6 : 1e-5, v41 ? "v41 partial scores" : "v4 partial scores");
      for (size_t x = 0; x < sum.size(); ++x) sum[x] += got[x];
    }
    if (v41)
      for (float& x : sum) x = q::bf16_round(x);
    k::IndexerSelectArgs s;
    s.rows = rows, s.ratio = 1, s.topk = topk, s.p0 = p0, s.width = S, s.scores = sum.data(), s.v41 = v41 != 0;
    std::vector<int32_t> want_idx(size_t(rows) * topk);
    k::indexer_select(s, want_idx.data(), nullptr);
    gpu().launch("indexer", "smelt_indexer_topk", rows, 1, 1, 1024, 0, gpu().put(sum), int64_t(S), st, 1, topk, v41,
                 DevPtr(0), 0, 1, di);
    EXPECT_EQ(gpu().get<int32_t>(di, want_idx.size()), want_idx) << "top-k on the joined scores, v41 " << v41;
    if (v41) {  // the whole indexer (TP1) picks the same entries
      k::IndexerV41Args a;
      a.rows = rows, a.heads = H, a.head_dim = hd, a.ratio = 1, a.topk = topk, a.p0 = p0, a.q = qv.data();
      a.w = w.data(), a.keys = keys.data();
      std::vector<int32_t> whole(want_idx.size());
      k::indexer_v41(a, whole.data(), nullptr);
      EXPECT_EQ(want_idx, whole) << "split vs whole indexer_v41";
    }
  }
}

// ---- experts on quantized weights ------------------------------------------------------------------------------

// Experts (w1, w3 [F, D], w2 [D, F]) stored back to back per tensor kind, as the backend lays them out.
struct Experts {
  int E, D, F;
  bool fp4;
  std::vector<std::vector<uint8_t>> w, s;  // per kind j (0 w1, 1 w2, 2 w3): all experts, expert-major
  std::vector<k::QuantWeight> q[3];
  ExpertW dev{}, dev_aq{};  // weight-only kernels' layout and the act-quant kernels' (Gpu::put_aq)
  Experts(int E_, int D_, int F_, bool fp4_, uint32_t seed) : E(E_), D(D_), F(F_), fp4(fp4_), w(3), s(3) {
    for (int j = 0; j < 3; ++j) {
      const int out = j == 1 ? D : F, in = j == 1 ? F : D;
      const size_t wb = fp4 ? size_t(out) * in / 2 : size_t(out) * in;
      const size_t sb = fp4 ? size_t(out) * (in / 32) : size_t(out / 32) * (in / 32);
      w[j] = fp8_codes(wb * E, seed + j);
      s[j] = e8m0_codes(sb * E, seed + 10 + j, fp4 ? 120 : 118);
      const DevPtr dw = gpu().put(w[j]), ds = gpu().put(s[j]), dwq = gpu().put_aq(w[j], out, fp4 ? in / 2 : in, fp4);
      const int slot = j == 0 ? 0 : j == 1 ? 2 : 4;  // w1, s1, w2, s2, w3, s3
      dev.base[slot] = dw, dev.stride[slot] = int64_t(wb);
      dev.base[slot + 1] = ds, dev.stride[slot + 1] = int64_t(sb);
      dev_aq.base[slot] = dwq, dev_aq.stride[slot] = int64_t(wb);
      dev_aq.base[slot + 1] = ds, dev_aq.stride[slot + 1] = int64_t(sb);
      for (int e = 0; e < E; ++e) {
        k::QuantWeight qw;
        qw.weight = w[j].data() + e * wb, qw.scale = s[j].data() + e * sb;
        qw.format = fp4 ? k::WeightFormat::FP4_E2M1 : k::WeightFormat::FP8_E4M3, qw.block = 32;
        q[j].push_back(qw);
      }
    }
  }
};

// The launcher's sequence (runtime/cuda/ops.cc run_experts): model numerics = act quant + exact GEMMs + bf16;
// numerics fp32 = weight-only kernels and a weighted combine.
std::vector<float> run_experts_gpu(const Experts& ex, const std::vector<float>& x, int rows, int topk, DevPtr idx,
                                   DevPtr rw, float limit, bool rb) {
  const int D = ex.D, F = ex.F, RT = rows * topk;
  const char* fmt = ex.fp4 ? "fp4" : "fp8";
  DevPtr dx = gpu().put(x), h = gpu().alloc(size_t(RT) * F * 4), out = gpu().alloc(size_t(RT) * D * 4);
  DevPtr y = gpu().alloc(size_t(rows) * D * 4);
  const bool routed = idx != 0;
  if (rb) {
    DevPtr xu = gpu().alloc(size_t(rows) * D * 4), xs = gpu().alloc(size_t(rows) * D / 32 * 4);
    DevPtr hu = gpu().alloc(size_t(RT) * F * 4), hs = gpu().alloc(size_t(RT) * F / 32 * 4);
    gpu().launch("linear", "smelt_act_quant_b32", (D / 32 + 7) / 8, rows, 1, 256, 0, dx, D, D, xu, xs);
    gpu().launch("moe", (std::string("smelt_moe_up_") + fmt + "_aq").c_str(), (F + 7) / 8, RT, 1, 256, 0, xu, xs, D, F,
                 topk, idx, ex.E, rw, ex.dev_aq, 32, limit, 1, h);
    gpu().launch("linear", "smelt_act_quant_b32", (F / 32 + 7) / 8, RT, 1, 256, 0, h, F, F, hu, hs);
    gpu().launch("moe", (std::string("smelt_moe_down_") + fmt + "_aq").c_str(), (D + 7) / 8, RT, 1, 256, 0, hu, hs, D,
                 F, topk, idx, ex.E, ex.dev_aq, 32, 1, routed ? out : y);
    if (routed)
      gpu().launch("moe", "smelt_moe_combine", (D + 255) / 256, rows, 1, 256, 0, out, rw, idx, topk, ex.E, D, 0, y);
  } else {
    gpu().launch("moe", (std::string("smelt_moe_up_") + fmt).c_str(), (F + 7) / 8, RT, 1, 256, 0, dx, D, F, topk, idx,
                 ex.E, ex.dev, 32, limit, h);
    gpu().launch("moe", (std::string("smelt_moe_down_") + fmt).c_str(), (D + 7) / 8, RT, 1, 256, 0, h, D, F, topk, idx,
                 ex.E, ex.dev, 32, routed ? out : y);
    if (routed)
      gpu().launch("moe", "smelt_moe_combine", (D + 255) / 256, rows, 1, 256, 0, out, rw, idx, topk, ex.E, D, 1, y);
  }
  return gpu().get<float>(y, size_t(rows) * D);
}

TEST(CudaKernelsV41, MoeExpertsV41Fp4ModelNumericsAndFp32) {
  NEED_GPU();
  const int rows = 5, D = 128, F = 64, E = 4, topk = 2;
  const float limit = 10.f;
  Experts ex(E, D, F, /*fp4=*/true, 71);
  auto x = bf16_values(randn(size_t(rows) * D, 72));
  const std::vector<int32_t> idx = {0, 2, 3, 1, 2, 2, 1, 0, 3, 2};  // row 2 lists expert 2 twice: counted once
  std::vector<float> w = randn(size_t(rows) * topk, 73, 0.5f);
  DevPtr didx = gpu().put(idx), dw = gpu().put(w);
  for (bool rb : {true, false}) {
    std::vector<float> ref(size_t(rows) * D);
    k::moe_experts_v41(x.data(), rows, D, F, ex.q[0].data(), ex.q[1].data(), ex.q[2].data(), E, w.data(), idx.data(),
                       topk, limit, ref.data(), rb);
    auto y = run_experts_gpu(ex, x, rows, topk, didx, dw, limit, rb);
    if (rb) mostly_equal(y, ref, 0.9, 0.05, "moe_experts v41 model numerics");
    else expect_close(y, ref, 1e-4, "moe_experts v41 fp32");
  }
}

TEST(CudaKernelsV41, SwigluMlpV41Fp8ModelNumericsAndFp32) {
  NEED_GPU();
  const int rows = 4, D = 128, F = 96;
  const float limit = 10.f;
  Experts ex(1, D, F, /*fp4=*/false, 81);
  auto x = bf16_values(randn(size_t(rows) * D, 82));
  for (bool rb : {true, false}) {
    std::vector<float> ref(size_t(rows) * D);
    k::swiglu_mlp_v41(x.data(), rows, D, F, ex.q[0][0], ex.q[1][0], ex.q[2][0], limit, ref.data(), rb);
    auto y = run_experts_gpu(ex, x, rows, 1, DevPtr(0), DevPtr(0), limit, rb);
    if (rb) mostly_equal(y, ref, 0.9, 0.05, "swiglu_mlp v41 model numerics");
    else expect_close(y, ref, 1e-4, "swiglu_mlp v41 fp32");
  }
}

// ---- engram ------------------------------------------------------------------------------------------------------

TEST(CudaKernelsV41, EngramGatherProjectGate) {
  NEED_GPU();
  const int rows = 3, n = 2, D = 64, hd = 32, cols = 4, stride = 8, trows = 50;
  const int K = cols * hd, N = (n + 1) * D;
  auto table = fp8_codes(size_t(trows) * hd, 91);
  auto tscale = e8m0_codes(size_t(trows) * (hd / 32), 92, 124);
  auto wkv = fp8_codes(size_t(N) * K, 93);
  auto wscale = e8m0_codes(size_t(N / 32) * (K / 32), 94, 116);
  auto qw = bf16_values(randn(size_t(n) * D, 95)), kw = bf16_values(randn(size_t(n) * D, 96));
  auto X = bf16_values(randn(size_t(rows) * n * D, 97));
  std::vector<int32_t> hashes(size_t(rows) * stride);
  std::mt19937 g(98);
  for (auto& h : hashes) h = int32_t(g() % trows);
  DevPtr dtable = gpu().put(table), dts = gpu().put(tscale), dwkv = gpu().put(wkv), dws = gpu().put(wscale);
  DevPtr dwkv_aq = gpu().put_aq(wkv, N, K, false);  // the act-quant kernel's layout
  DevPtr dqw = gpu().put(qw), dkw = gpu().put(kw), dh = gpu().put(hashes);  // F32 weights (dtype 0)
  for (int rb : {1, 0}) {
    k::engram::EngramArgs a;
    a.rows = rows, a.hc_mult = n, a.dim = D, a.head_dim = hd, a.cols = cols, a.eps = 1e-20f, a.table = table.data();
    a.table_scale = tscale.data(), a.table_rows = trows, a.wkv = wkv.data(), a.wkv_scale = wscale.data();
    a.q_weight = qw.data(), a.k_weight = kw.data(), a.hashes = hashes.data(), a.hash_stride = stride;
    a.model_numerics = rb != 0;
    std::vector<float> ref(X.size());
    k::engram::engram_forward(a, X.data(), ref.data());
    DevPtr dX = gpu().put(X), e = gpu().alloc(size_t(rows) * K * 4), kv = gpu().alloc(size_t(rows) * N * 4);
    gpu().launch("engram", "smelt_engram_gather", cols, rows, 1, 128, 0, dh, stride, dtable, dts, int64_t(trows), int64_t(0), hd, e);
    if (rb) {
      DevPtr xu = gpu().alloc(size_t(rows) * K * 4), xs = gpu().alloc(size_t(rows) * K / 32 * 4);
      gpu().launch("linear", "smelt_act_quant_b32", (K / 32 + 7) / 8, rows, 1, 256, 0, e, K, K, xu, xs);
      gpu().launch("linear", "smelt_linear_fp8_aq", (N + 7) / 8, 1, 1, 256, 0, xu, xs, kv, dwkv_aq, dws, rows, K, N, 32,
                   1.0f, 1);
    } else {
      gpu().launch("linear", "smelt_linear_fp8", (N + 7) / 8, 1, 1, 256, 0, e, kv, dwkv, dws, rows, K, N, 32, 1.0f, 0);
    }
    gpu().launch("engram", "smelt_engram_gate_wide", n, rows, 1, 1024, 0, dX, kv, dqw, 0, dkw, 0, D, 1e-20f,
                 float(std::pow(double(D), -0.5)), rb, dX);  // in place, as the plan runs it
    auto y = gpu().get<float>(dX, X.size());
    if (rb) mostly_equal(y, ref, 0.95, 0.02, "engram model numerics");
    else expect_close(y, ref, 1e-4, "engram fp32");
  }
}

// The decode launch shapes of hc_mix (V4.1: project first, 1024 threads a block, 20 Sinkhorn iterations with the
// matrix in registers) and rms_norm (1024 threads over a row of 5120), against the float references; the row
// count must not change a row's result (row 0 alone equals row 0 of three).
TEST(CudaKernelsV41, HcMixAndRmsNormAtDecodeShapes) {
  NEED_GPU();
  const int rows = 3, n = 4, D = 1280, len = n * D, outs = (2 + n) * n, iters = 20;
  auto X = randn(size_t(rows) * len, 91), fn = randn(size_t(outs) * len, 92, 0.02f);
  auto base = randn(outs, 93, 0.5f), scale = randn(3, 94, 0.5f);
  std::vector<float> pre(rows * n), post(rows * n), comb(rows * n * n);
  k::hc_mix_v41(X.data(), rows, n, D, fn.data(), base.data(), scale.data(), iters, 1e-6f, 1e-6f, pre.data(),
                post.data(), comb.data());
  DevPtr dX = gpu().put(X), dfn = gpu().put(fn), db = gpu().put(base), ds = gpu().put(scale);
  DevPtr m = gpu().alloc(rows * outs * 4), m1 = gpu().alloc(outs * 4), dpre = gpu().alloc(pre.size() * 4),
         dpost = gpu().alloc(post.size() * 4), dcomb = gpu().alloc(comb.size() * 4);
  gpu().launch("hc", "smelt_hc_mix_logits", outs, rows, 1, 1024, 0, dX, len, dfn, 0, 1e-6f, 1, m);
  gpu().launch("hc", "smelt_hc_mix_logits", outs, 1, 1, 1024, 0, dX, len, dfn, 0, 1e-6f, 1, m1);
  gpu().launch("hc", "smelt_hc_sinkhorn", 1, 1, 1, 32, 0, m, rows, n, db, 0, ds, 0, iters, 1e-6f, dpre, dpost, dcomb);
  auto gm = gpu().get<float>(m, size_t(rows) * outs), gm1 = gpu().get<float>(m1, outs);
  for (int o = 0; o < outs; ++o) ASSERT_EQ(gm[o], gm1[o]) << "logit " << o << " depends on the row count";
  auto gp = gpu().get<float>(dpre, pre.size()), gq = gpu().get<float>(dpost, post.size()),
       gc = gpu().get<float>(dcomb, comb.size());
  for (size_t i = 0; i < pre.size(); ++i) ASSERT_NEAR(gp[i], pre[i], 1e-5) << i;
  for (size_t i = 0; i < post.size(); ++i) ASSERT_NEAR(gq[i], post[i], 1e-5) << i;
  for (size_t i = 0; i < comb.size(); ++i) ASSERT_NEAR(gc[i], comb[i], 1e-5) << i;

  const int cols = 5120;
  auto x = randn(size_t(rows) * cols, 95), w = randn(cols, 96);
  std::vector<float> ref(x.size());
  k::rms_norm(x.data(), w.data(), ref.data(), rows, cols, 1, 1e-6f);
  DevPtr dx = gpu().put(x), dw = gpu().put(w), dy = gpu().alloc(x.size() * 4), dy1 = gpu().alloc(cols * 4);
  gpu().launch("rms_norm", "smelt_rms_norm", rows, 1, 1, 1024, 0, dx, dy, dw, 0, cols, 1e-6f);
  gpu().launch("rms_norm", "smelt_rms_norm", 1, 1, 1, 1024, 0, dx, dy1, dw, 0, cols, 1e-6f);
  auto y = gpu().get<float>(dy, x.size()), y1 = gpu().get<float>(dy1, cols);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-6 * std::fabs(ref[i]) + 1e-30) << i;
  for (int i = 0; i < cols; ++i) ASSERT_EQ(y[i], y1[i]) << i;
}

}  // namespace
