// GPU tests (ctest label "gpu"): each cuda kernel family against its C++ reference kernel
// (kernels/<family>/reference.h) on random inputs, plus row-count invariance (row 0 of a 7-row chunk equals
// the same row run alone, bit for bit). Tolerances, with their reason:
// - exact: quantized formats and act-quant GEMMs (integer block sums), fake quant, top-k indices, routing
//   indices, elementwise ops written with the reference's rounding steps;
// - 1e-5 relative to sum |terms|: fp32 dot products in a different (fixed) summation order;
// - 1e-5 absolute on O(1) values: expf / sincosf (CUDA, <= 2 ulp) vs the C library.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/attention/reference.h"
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
using smelt::runtime::cuda::AttnArgs;
using smelt::test_cuda::Gpu;
using smelt::test_cuda::e8m0_codes;
using smelt::test_cuda::fp8_codes;
using smelt::test_cuda::expect_bits_equal;
using smelt::test_cuda::gpu;
using smelt::test_cuda::randn;
namespace k = smelt::kernels;
namespace q = smelt::kernels::quant;


std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = q::bf16_from_f32(v[i]);
  return b;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = q::bf16_to_f32(b[i]);
  return v;
}

// ---- linear ----------------------------------------------------------------------------------------------------

TEST(CudaKernels, LinearBf16MatchesReferenceAndIsRowInvariant) {
  NEED_GPU();
  const int rows = 7, K = 512, N = 300;
  auto x = randn(size_t(rows) * K, 1);
  auto wb = to_bf16(randn(size_t(N) * K, 2, 0.05f));
  auto wf = from_bf16(wb);
  std::vector<float> ref(size_t(rows) * N);
  k::linear(x.data(), wf.data(), ref.data(), rows, K, N);
  DevPtr dx = gpu().put(x), dw = gpu().put(wb), dy = gpu().alloc(ref.size() * 4), dy1 = gpu().alloc(N * 4);
  gpu().launch("linear", "smelt_linear_bf16", (N + 7) / 8, 1, 1, 256, 0, dx, dy, dw, DevPtr(0), rows, K, N, 32, 1.0f, 0);
  gpu().launch("linear", "smelt_linear_bf16", (N + 7) / 8, 1, 1, 256, 0, dx, dy1, dw, DevPtr(0), 1, K, N, 32, 1.0f, 0);
  auto y = gpu().get<float>(dy, ref.size());
  auto y1 = gpu().get<float>(dy1, N);
  for (int r = 0; r < rows; ++r)
    for (int n = 0; n < N; ++n) {
      double mag = 0;
      for (int kk = 0; kk < K; ++kk) mag += std::fabs(double(x[r * K + kk]) * wf[size_t(n) * K + kk]);
      ASSERT_NEAR(y[r * N + n], ref[r * N + n], 1e-5 * mag + 1e-30) << r << "," << n;
    }
  expect_bits_equal(y.data(), y1.data(), N, "row 0 (7 rows vs 1 row)");
}


TEST(CudaKernels, LinearFp8AndFp4ActQuantAreBitExact) {
  NEED_GPU();
  const int rows = 7, K = 256, N = 96;
  auto x = randn(size_t(rows) * K, 3, 2.f);
  x[5] = 0.f, x[6] = 1e-7f, x[7] = 600.f;  // floor, tiny and saturating values
  for (bool fp4 : {false, true}) {
    auto w = fp4 ? fp8_codes(size_t(N) * K / 2, 4) : fp8_codes(size_t(N) * K, 4);  // FP4: any byte is valid
    auto s = fp4 ? e8m0_codes(size_t(N) * (K / 32), 5) : e8m0_codes(size_t(N / 32) * (K / 32), 5);
    std::vector<float> ref(size_t(rows) * N);
    if (fp4) q::fp4_linear(x.data(), rows, K, w.data(), s.data(), N, ref.data(), false, 32);
    else q::fp8_linear(x.data(), rows, K, w.data(), s.data(), N, 32, ref.data(), false, 32);
    DevPtr dx = gpu().put(x), dw = gpu().put_aq(w, N, fp4 ? K / 2 : K, fp4), ds = gpu().put(s);
    DevPtr xu = gpu().alloc(size_t(rows) * K * 4), xs = gpu().alloc(size_t(rows) * K / 32 * 4);
    DevPtr dy = gpu().alloc(ref.size() * 4), dy1 = gpu().alloc(N * 4);
    gpu().launch("linear", "smelt_act_quant_b32", 1, rows, 1, 256, 0, dx, K, K, xu, xs);
    const char* name = fp4 ? "smelt_linear_fp4_aq" : "smelt_linear_fp8_aq";
    gpu().launch("linear", name, N / 8, 1, 1, 256, 0, xu, xs, dy, dw, ds, rows, K, N, 32, 1.0f, 0);
    gpu().launch("linear", name, N / 8, 1, 1, 256, 0, xu, xs, dy1, dw, ds, 1, K, N, 32, 1.0f, 0);
    auto y = gpu().get<float>(dy, ref.size());
    expect_bits_equal(y.data(), ref.data(), ref.size(), fp4 ? "fp4 linear" : "fp8 linear");
    auto y1 = gpu().get<float>(dy1, N);
    expect_bits_equal(y1.data(), ref.data(), N, "row 0 alone");
  }
}

// ---- quant -----------------------------------------------------------------------------------------------------

TEST(CudaKernels, FakeQuantIsBitExactInEveryMode) {
  NEED_GPU();
  const int rows = 5, heads = 2, width = 256;
  auto x = randn(size_t(rows) * width, 6, 3.f);
  x[0] = 0.f, x[1] = -0.f, x[2] = 1e-30f, x[3] = 1e6f, x[40] = -447.99f, x[41] = 5.9999f;
  for (int mode = 0; mode < 3; ++mode)
    for (int channels : {128, 64}) {
      std::vector<float> ref = x;
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h) {
          float* v = ref.data() + r * width + h * (width / heads);
          if (mode == 0) q::qdq_window_kv(v, channels);
          else if (mode == 1) q::qdq_compressed_kv(v, channels);
          else q::qdq_index(v, channels);
        }
      DevPtr d = gpu().put(x);
      gpu().launch("quant", "smelt_fake_quant", 4, 1, 1, 128, 0, d, rows, width, heads, channels, mode);
      auto y = gpu().get<float>(d, x.size());
      expect_bits_equal(y.data(), ref.data(), x.size(), "fake_quant");
    }
}

// ---- rms_norm, rope, hc ------------------------------------------------------------------------------------------

TEST(CudaKernels, RmsNormGroupedWithBf16Weight) {
  NEED_GPU();
  const int rows = 7, cols = 512, groups = 4, len = cols / groups;
  auto x = randn(size_t(rows) * cols, 7);
  auto wb = to_bf16(randn(len, 8));
  auto wf = from_bf16(wb);
  std::vector<float> ref(x.size());
  k::rms_norm(x.data(), wf.data(), ref.data(), rows, cols, groups, 1e-6f);
  DevPtr dx = gpu().put(x), dw = gpu().put(wb), dy = gpu().alloc(x.size() * 4);
  gpu().launch("rms_norm", "smelt_rms_norm", rows * groups, 1, 1, 256, 0, dx, dy, dw, 1, len, 1e-6f);
  auto y = gpu().get<float>(dy, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-6 * std::fabs(ref[i]) + 1e-30) << i;
}

TEST(CudaKernels, RopeInterleavedPartial) {
  NEED_GPU();
  const int rows = 3, heads = 2, hd = 64, rd = 32;
  k::RopeParams p;
  p.rope_dim = rd, p.theta = 10000.0, p.yarn_factor = 4.0;
  auto inv = k::rope_inv_freq(p);
  auto x = randn(size_t(rows) * heads * hd, 9);
  std::vector<float> ref = x;
  std::vector<int64_t> pos = {1000, 1001, 1002};
  k::rope(ref.data(), rows, heads, hd, rd, inv.data(), pos.data(), false);
  struct {
    float v[256];
  } f{};
  std::copy(inv.begin(), inv.end(), f.v);
  DevPtr dx = gpu().put(x), dy = gpu().alloc(x.size() * 4), st = smelt::test_cuda::step_info(gpu(), 1000, rows);
  gpu().launch("rope", "smelt_rope", rows, 1, 1, 128, 0, dx, dy, st, heads, hd, rd, 0, f);
  auto y = gpu().get<float>(dy, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-5) << i;
}

TEST(CudaKernels, HcMixSinkhornMatchesReference) {
  NEED_GPU();
  const int rows = 3, n = 4, D = 64, len = n * D, outs = (2 + n) * n;
  auto X = randn(size_t(rows) * len, 10);
  auto fn = randn(size_t(outs) * len, 11, 0.05f), base = randn(outs, 12, 0.5f), scale = randn(3, 13, 0.5f);
  std::vector<float> pre(rows * n), post(rows * n), comb(rows * n * n);
  k::hc_mix(X.data(), rows, n, D, fn.data(), base.data(), scale.data(), 3, 1e-6f, 1e-6f, pre.data(), post.data(),
            comb.data());
  DevPtr dX = gpu().put(X), dfn = gpu().put(fn), db = gpu().put(base), ds = gpu().put(scale);
  DevPtr m = gpu().alloc(rows * outs * 4), dpre = gpu().alloc(pre.size() * 4), dpost = gpu().alloc(post.size() * 4),
         dcomb = gpu().alloc(comb.size() * 4);
  gpu().launch("hc", "smelt_hc_mix_logits", outs, rows, 1, 256, 0, dX, len, dfn, 0, 1e-6f, 0, m);
  gpu().launch("hc", "smelt_hc_sinkhorn", 1, 1, 1, 32, 0, m, rows, n, db, 0, ds, 0, 3, 1e-6f, dpre, dpost, dcomb);
  auto gp = gpu().get<float>(dpre, pre.size()), gq = gpu().get<float>(dpost, post.size()),
       gc = gpu().get<float>(dcomb, comb.size());
  for (size_t i = 0; i < pre.size(); ++i) ASSERT_NEAR(gp[i], pre[i], 1e-5) << i;
  for (size_t i = 0; i < post.size(); ++i) ASSERT_NEAR(gq[i], post[i], 1e-5) << i;
  for (size_t i = 0; i < comb.size(); ++i) ASSERT_NEAR(gc[i], comb[i], 1e-5) << i;
}

// ---- attention, indexer, routing -------------------------------------------------------------------------------


TEST(CudaKernels, SparseAttentionWindowPlusSelectedEntries) {
  NEED_GPU();
  const int rows = 3, H = 4, hd = 64, window = 8, ratio = 4, pool_rows = 16, kk = 4;
  const int64_t p0 = 20;
  auto qv = randn(size_t(rows) * H * hd, 14), kv = randn(size_t(rows) * hd, 15), ring = randn(size_t(window) * hd, 16);
  auto pool = randn(size_t(pool_rows) * hd, 17), sink = randn(H, 18);
  std::vector<int32_t> idx = {0, 3, -1, 5, 2, 4, 1, 5, 5, -1, 0, 1};
  k::SparseAttentionArgs a;
  a.rows = rows, a.heads = H, a.head_dim = hd, a.p0 = p0, a.scale = 0.125f, a.q = qv.data(), a.sink = sink.data();
  a.chunk_kv = kv.data(), a.ring = ring.data(), a.window = window, a.ratio = ratio, a.pool = pool.data();
  a.idx = idx.data(), a.k = kk;
  std::vector<float> ref(qv.size());
  k::sparse_attention(a, ref.data());
  AttnArgs g{};
  g.q = gpu().put(qv), g.chunk_kv = gpu().put(kv), g.idx = gpu().put(idx), g.k = kk, g.sink = gpu().put(sink);
  g.ring = gpu().put(ring), g.R = window, g.window = window, g.ratio = ratio, g.pool = gpu().put(pool);
  g.pool_rows = pool_rows, g.hd = hd, g.scale = 0.125f;
  DevPtr st = smelt::test_cuda::step_info(gpu(), p0, rows), out = gpu().alloc(ref.size() * 4),
         out1 = gpu().alloc(size_t(H) * hd * 4);
  gpu().launch("attention", "smelt_sparse_attention", rows, H, 1, 128, 0, g, st, rows, out);
  gpu().launch("attention", "smelt_sparse_attention", 1, H, 1, 128, 0, g, st, 1, out1);
  auto o = gpu().get<float>(out, ref.size()), o1 = gpu().get<float>(out1, size_t(H) * hd);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(o[i], ref[i], 1e-5) << i;
  expect_bits_equal(o.data(), o1.data(), size_t(H) * hd, "row 0 (3 rows vs 1 row)");
}

TEST(CudaKernels, IndexerTopkExactWithTies) {
  NEED_GPU();
  const int rows = 4, H = 4, hd = 64, ratio = 4, topk = 8;
  const int64_t S = 32, p0 = 60;
  std::mt19937 r(19);
  auto small = [&](size_t n, int lo, int hi) {  // small integers: every score is exact, ties are common
    std::vector<float> v(n);
    for (auto& x : v) x = float(lo + int(r() % unsigned(hi - lo + 1)));
    return v;
  };
  auto qv = small(size_t(rows) * H * hd, -1, 1), keys = small(size_t(S) * hd, -1, 1), w = small(size_t(rows) * H, -1, 2);
  k::IndexerArgs a;
  a.rows = rows, a.heads = H, a.head_dim = hd, a.ratio = ratio, a.topk = topk, a.p0 = p0;
  a.q = qv.data(), a.w = w.data(), a.keys = keys.data();
  std::vector<int32_t> ref(size_t(rows) * topk);
  k::indexer_topk(a, ref.data());
  DevPtr dq = gpu().put(qv), dw = gpu().put(w), dk = gpu().put(keys), sc = gpu().alloc(size_t(rows) * S * 4);
  DevPtr st = smelt::test_cuda::step_info(gpu(), p0, rows), di = gpu().alloc(ref.size() * 4);
  gpu().launch("indexer", "smelt_indexer_scores", unsigned((S + 7) / 8), rows, 1, 256, unsigned(H * hd * 4), dq, dw, dk,
               S, st, H, hd, ratio, float(std::pow(double(hd), -0.5)), float(std::pow(double(H), -0.5)), sc);
  gpu().launch("indexer", "smelt_indexer_topk", rows, 1, 1, 1024, 0, sc, S, st, ratio, topk, 0, DevPtr(0), 0, 1, di);
  auto got = gpu().get<int32_t>(di, ref.size());
  EXPECT_EQ(got, ref);
}

TEST(CudaKernels, MoeRouteSqrtSoftplusWithBias) {
  NEED_GPU();
  const int rows = 5, D = 64, E = 16, K = 4;
  auto x = randn(size_t(rows) * D, 20);
  auto gb = to_bf16(randn(size_t(E) * D, 21, 0.2f));
  auto gf = from_bf16(gb);
  auto bias = randn(E, 22, 0.1f);
  k::MoeRouteArgs a;
  a.rows = rows, a.dim = D, a.n_experts = E, a.topk = K, a.x = x.data(), a.gate = gf.data(), a.bias = bias.data();
  a.route_scale = 2.5f;
  std::vector<float> rw(size_t(rows) * K);
  std::vector<int32_t> ri(size_t(rows) * K);
  k::moe_route(a, rw.data(), ri.data());
  DevPtr dx = gpu().put(x), dg = gpu().put(gb), db = gpu().put(bias), dw = gpu().alloc(rw.size() * 4),
         di = gpu().alloc(ri.size() * 4);
  gpu().launch("moe", "smelt_moe_route", rows, 1, 1, 256, unsigned(2 * E * 4), dx, D, dg, 1, E, db, 0, DevPtr(0), 0,
               int64_t(0), DevPtr(0), K, 0, 1, 2.5f, 1.0f, dw, di);
  EXPECT_EQ(gpu().get<int32_t>(di, ri.size()), ri);
  auto gw = gpu().get<float>(dw, rw.size());
  for (size_t i = 0; i < rw.size(); ++i) ASSERT_NEAR(gw[i], rw[i], 1e-5) << i;
}

}  // namespace
