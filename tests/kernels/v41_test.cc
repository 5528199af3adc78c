// V4.1 kernels, part 1: bf16 rounding, RoPE frequencies, quantized linears, mHC, sparse attention numerics and
// the two-level indexer. Oracles: hand-computed values at the rounding points, float64 re-derivations of the
// formulas, and constructed cases for the discrete rules (top-k ties, candidate blocks, index-list layout).
#include <cmath>
#include <limits>
#include <numbers>

#include "frontends/error.h"
#include "kernels/attention/reference.h"
#include "kernels/bf16.h"
#include "kernels/hc/reference.h"
#include "kernels/indexer/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/quant/reference.h"
#include "kernels/rope/reference.h"
#include "tests/kernels/v41_testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- bf16 -----------------------------------------------------------------------------------------------------

TEST(V41Bf16, RoundsToNearestEven) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);                  // tie, 1.0 is even
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);    // tie, 1 + 2^-7 is odd: up
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_bf16(-1.0f - 3 * 0x1p-8f), -1.0f - 0x1p-6f);
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::max()), kInf);  // past the largest bf16
  EXPECT_EQ(round_bf16(-kInf), -kInf);
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  const float snan = std::numeric_limits<float>::signaling_NaN();
  EXPECT_TRUE(std::isnan(round_bf16(snan)));
  EXPECT_TRUE(std::isnan(round_bf16(-snan)));
  EXPECT_EQ(round_bf16(0x1p-130f + 0x1p-145f), 0x1p-130f);  // bf16 subnormals (down to 2^-133)
  EXPECT_EQ(round_bf16(0x1p-140f), 0.0f);
  Rng rng(7);
  Vec v = rng.normal(20000, 100.0);
  for (float x : v) ASSERT_EQ(round_bf16(x), bf16_oracle(x)) << x;
  Vec w = v;
  round_bf16_inplace(w.data(), w.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(w[i], bf16_oracle(v[i]));
}

// ---- RoPE frequencies -----------------------------------------------------------------------------------------

TEST(V41Rope, FrequenciesFollowTheReferenceFormula) {
  RopeParams p;
  p.rope_dim = 64;
  p.theta = 160000;
  p.yarn_factor = 16;
  p.yarn_original_max_pos = 65536;
  const auto f = rope_inv_freq_v41(p);
  // The YaRN band from the formula in double: dims below `low` keep their frequency, above `high` divide by 16.
  auto corr = [&](double rot) { return 64 * std::log(65536 / (rot * 2 * std::numbers::pi)) / (2 * std::log(160000.0)); };
  const int low = std::max(int(std::floor(corr(32))), 0), high = std::min(int(std::ceil(corr(1))), 63);
  ASSERT_LT(low, high);
  for (int i = 0; i < 32; ++i) {
    const float plain = 1.0f / std::pow(160000.0f, float(2 * i) / 64.0f);
    if (i <= low) {
      EXPECT_EQ(f[i], plain) << i;  // ramp 0: freqs * 1 + freqs / 16 * 0, exactly
    }
    if (i >= high) {
      EXPECT_EQ(f[i], plain / 16.0f) << i;  // ramp 1: freqs / 16, rounded once
    }
    const double ramp = std::clamp((i - low) / double(high - low), 0.0, 1.0);
    const double want = std::pow(160000.0, -2.0 * i / 64) * (ramp / 16 + (1 - ramp));
    EXPECT_NEAR(f[i], want, 4e-7 * want) << i;
  }
  p.yarn_factor = 0;  // no YaRN: the plain table, identical to V4's
  const auto g = rope_inv_freq_v41(p), v4 = rope_inv_freq(p);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(g[i], v4[i]);
}

TEST(V41Rope, RotationIsTheComplexProduct) {
  // (a+bi)(c+di) = (ac-bd) + (ad+bc)i with c+di = e^{i pos f}, and the conjugate for the inverse.
  const float inv_freq[1] = {0.37f};
  const int64_t pos = 5;
  float x[2] = {0.75f, -1.25f};
  rope(x, 1, 1, 2, 2, inv_freq, &pos, false);
  const float ang = 0.37f * 5.0f, c = std::cos(ang), d = std::sin(ang);
  EXPECT_EQ(x[0], 0.75f * c - (-1.25f) * d);
  EXPECT_EQ(x[1], 0.75f * d + (-1.25f) * c);
  float y[2] = {0.75f, -1.25f};
  rope(y, 1, 1, 2, 2, inv_freq, &pos, true);
  EXPECT_EQ(y[0], 0.75f * c + (-1.25f) * d);
  EXPECT_EQ(y[1], (-1.25f) * c - 0.75f * d);
}

// ---- quantized linears ----------------------------------------------------------------------------------------

TEST(V41Linear, Fp8AndFp4WeightsWithActivationQuant) {
  Rng rng(11);
  const int rows = 3, in = 96, out = 40;
  const Vec x = rng.normal(size_t(rows) * in);
  // FP8, 32x32 blocks.
  const auto w8 = e4m3_codes(rng, size_t(out) * in);
  const auto s8 = bytes(rng, size_t((out + 31) / 32) * (in / 32), 118, 124);
  Vec d8(size_t(out) * in), y(size_t(rows) * out), yb(size_t(rows) * out);
  quant::dequant_fp8_weight(w8.data(), s8.data(), out, in, 32, d8.data());
  linear_quant(x.data(), rows, in, out, w8.data(), WeightFormat::FP8_E4M3, s8.data(), 32, true, y.data());
  expect_close(y, quant_linear_oracle(x, rows, in, out, d8), 1e-6, "fp8 linear");
  linear_quant(x.data(), rows, in, out, w8.data(), WeightFormat::FP8_E4M3, s8.data(), 32, true, yb.data(), true);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(yb[i], bf16_oracle(y[i]));
  // FP4 (packed, one scale per row per 32).
  const auto w4 = bytes(rng, size_t(out) * in / 2, 0, 255);
  const auto s4 = bytes(rng, size_t(out) * (in / 32), 120, 126);
  Vec d4(size_t(out) * in);
  quant::dequant_fp4_weight(w4.data(), s4.data(), out, in, d4.data());
  linear_quant(x.data(), rows, in, out, QuantWeight{w4.data(), s4.data(), WeightFormat::FP4_E2M1, 32}, true,
               y.data());
  expect_close(y, quant_linear_oracle(x, rows, in, out, d4), 1e-6, "fp4 linear");
  // Without activation quantization: x . dequant(W).
  linear_quant(x.data(), rows, in, out, w4.data(), WeightFormat::FP4_E2M1, s4.data(), 32, false, y.data());
  DVec want(size_t(rows) * out);
  for (int r = 0; r < rows; ++r)
    for (int n = 0; n < out; ++n)
      for (int k = 0; k < in; ++k) want[size_t(r) * out + n] += double(x[size_t(r) * in + k]) * d4[size_t(n) * in + k];
  expect_close(y, want, 1e-6, "dequantized linear");
  EXPECT_THROW(linear_quant(x.data(), rows, in, out, w4.data(), WeightFormat::FP4_E2M1, s4.data(), 128, true,
                            y.data()),
               smelt::Error);
}

// ---- mHC ------------------------------------------------------------------------------------------------------

TEST(V41Hc, MixMatchesTheFormulaAndTheV4Mix) {
  Rng rng(5);
  const int rows = 4, n = 4, dim = 64, len = n * dim, outs = (2 + n) * n, iters = 20;
  const Vec X = rng.normal(size_t(rows) * len), fn = rng.normal(size_t(outs) * len, 1.0 / 32);
  const Vec base = rng.normal(outs, 0.5), scale = rng.uniform(3, 0.5, 1.5);
  const float hc_eps = 1e-6f, norm_eps = 1e-20f;
  Vec pre(rows * n), post(rows * n), comb(rows * n * n), pre4(rows * n), post4(rows * n), comb4(rows * n * n);
  hc_mix_v41(X.data(), rows, n, dim, fn.data(), base.data(), scale.data(), iters, hc_eps, norm_eps, pre.data(),
             post.data(), comb.data());
  hc_mix(X.data(), rows, n, dim, fn.data(), base.data(), scale.data(), iters, hc_eps, norm_eps, pre4.data(),
         post4.data(), comb4.data());
  DVec wpre(rows * n), wpost(rows * n), wcomb(rows * n * n);
  for (int r = 0; r < rows; ++r) {
    const float* z = &X[size_t(r) * len];
    double ms = 0;
    for (int i = 0; i < len; ++i) ms += double(z[i]) * z[i];
    const double rs = 1 / std::sqrt(ms / len + norm_eps);
    std::vector<double> m(outs), c(n * n);
    for (int o = 0; o < outs; ++o) {
      for (int i = 0; i < len; ++i) m[o] += double(z[i]) * fn[size_t(o) * len + i];
      m[o] *= rs;  // project first, then scale
    }
    auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
    for (int i = 0; i < n; ++i) {
      wpre[r * n + i] = sig(m[i] * scale[0] + base[i]) + hc_eps;
      wpost[r * n + i] = 2 * sig(m[n + i] * scale[1] + base[n + i]);
    }
    for (int a = 0; a < n; ++a) {
      double mx = -1e300, s = 0;
      for (int k = 0; k < n; ++k) mx = std::max(mx, c[a * n + k] = m[2 * n + a * n + k] * scale[2] + base[2 * n + a * n + k]);
      for (int k = 0; k < n; ++k) s += c[a * n + k] = std::exp(c[a * n + k] - mx);
      for (int k = 0; k < n; ++k) c[a * n + k] = c[a * n + k] / s + hc_eps;
    }
    for (int it = 0; it < iters; ++it) {
      if (it > 0)
        for (int a = 0; a < n; ++a) {
          double s = 0;
          for (int k = 0; k < n; ++k) s += c[a * n + k];
          for (int k = 0; k < n; ++k) c[a * n + k] /= s + hc_eps;
        }
      for (int k = 0; k < n; ++k) {
        double s = 0;
        for (int a = 0; a < n; ++a) s += c[a * n + k];
        for (int a = 0; a < n; ++a) c[a * n + k] /= s + hc_eps;
      }
    }
    for (int i = 0; i < n * n; ++i) wcomb[r * n * n + i] = c[i];
  }
  expect_close(pre, wpre, 2e-6, "pre");
  expect_close(post, wpost, 2e-6, "post");
  expect_close(comb, wcomb, 2e-5, "comb");
  for (int i = 0; i < rows * n; ++i) EXPECT_NEAR(pre[i], pre4[i], 1e-6);  // the same math, other rounding
}

TEST(V41Hc, CollapseWithoutPreTakesCopyZero) {
  Rng rng(3);
  const Vec X = rng.normal(2 * 4 * 8);
  Vec u(2 * 8);
  hc_collapse(X.data(), nullptr, 2, 4, 8, u.data());
  for (int r = 0; r < 2; ++r)
    for (int d = 0; d < 8; ++d) EXPECT_EQ(u[r * 8 + d], X[r * 32 + d]);
}

// ---- sparse attention, V4.1 numerics --------------------------------------------------------------------------

// Float64 oracle of the reference's online softmax over a list of slots (nullptr = empty), 64 per block, with
// bf16 probabilities relative to the running max in P.V.
DVec online_softmax_oracle(const float* q, const std::vector<const float*>& slots, int hd, double scale,
                           double sink) {
  double mx = -1e30, den = 0;
  DVec acc(hd);
  for (size_t b0 = 0; b0 < slots.size(); b0 += 64) {
    const size_t b1 = std::min(slots.size(), b0 + 64);
    std::vector<double> s(b1 - b0, -INFINITY);
    double bm = -INFINITY;
    for (size_t t = b0; t < b1; ++t)
      if (slots[t]) {
        double d = 0;
        for (int c = 0; c < hd; ++c) d += double(q[c]) * slots[t][c];
        bm = std::max(bm, s[t - b0] = d * scale);
      }
    const double nm = std::max(mx, bm), rescale = std::exp(mx - nm);
    mx = nm;
    den *= rescale;
    for (double& v : acc) v *= rescale;
    for (size_t t = b0; t < b1; ++t) {
      if (!slots[t]) continue;
      const double p = std::exp(s[t - b0] - mx);
      den += p;
      const double pb = quant::bf16_round(float(p));
      for (int c = 0; c < hd; ++c) acc[c] += pb * slots[t][c];
    }
  }
  den += std::exp(sink - mx);
  for (double& v : acc) v /= den;
  return acc;
}

TEST(V41Attention, HandComputedBf16Probabilities) {
  // Two keys with scores 0 and ln 3 (q = (ln 3, 0), scale 1): p = (1/3, 1) relative to the max. P.V uses
  // bf16(1/3) = 0.333984375, the denominator the fp32 1/3; the sink adds exp(0 - ln 3) = 1/3. The second value
  // channel holds 1 and -c with c just below 1/3, so the output channel amplifies the rounding of p.
  const float c = 0.3330078125f;
  const float kv[4] = {0.0f, 1.0f, 1.0f, -c};  // row 0: score 0, row 1: score ln 3
  const float sink[1] = {0.0f};
  SparseAttentionArgs a;
  a.rows = 2, a.heads = 1, a.head_dim = 2, a.p0 = 0, a.scale = 1.0f, a.sink = sink;
  a.chunk_kv = kv, a.window = 2, a.numerics_v41 = true;
  const Vec q = {0, 0, float(std::log(3.0)), 0};
  Vec out(4);
  a.q = q.data();
  sparse_attention(a, out.data());
  const double p0 = std::exp(-double(float(std::log(3.0))));  // ~1/3
  const double den = p0 + 1 + p0;
  EXPECT_EQ(out[2], bf16_oracle(float(1.0 / den)));
  EXPECT_EQ(out[3], bf16_oracle(float((double(quant::bf16_round(float(p0))) - c) / den)));
  EXPECT_NE(out[3], bf16_oracle(float((p0 - c) / den)));  // fp32 probabilities would give another value
}

struct AttnCase {
  int T, H, hd, window, ratio, k;
  int64_t p0;
  Vec q, kv, ring, pool, sink;
  std::vector<int32_t> idx;
  SparseAttentionArgs args() const {
    SparseAttentionArgs a;
    a.rows = T, a.heads = H, a.head_dim = hd, a.p0 = p0, a.scale = float(1 / std::sqrt(double(hd)));
    a.q = q.data(), a.sink = sink.data(), a.chunk_kv = kv.data(), a.ring = ring.data(), a.window = window;
    a.ratio = ratio, a.pool = pool.data(), a.idx = idx.empty() ? nullptr : idx.data(), a.k = k;
    a.numerics_v41 = true;
    return a;
  }
};

TEST(V41Attention, OnlineSoftmaxOverBlocksOf64) {
  // Window 40 + 100 compressed entries: up to 140 slots, three blocks, the largest scores late so that the
  // running max moves between blocks.
  Rng rng(21);
  AttnCase c{3, 2, 16, 40, 1, 100, 137, {}, {}, {}, {}, {}, {}};
  c.q = rng.normal(size_t(c.T) * c.H * c.hd, 2.0);
  c.kv = rng.normal(size_t(c.T) * c.hd);
  c.ring = rng.normal(size_t(c.window) * c.hd);
  c.pool = rng.normal(size_t(140) * c.hd);
  for (int j = 90; j < 140; ++j)
    for (int d = 0; d < c.hd; ++d) c.pool[size_t(j) * c.hd + d] *= 2.5f;
  c.sink = rng.normal(c.H);
  c.idx.assign(size_t(c.T) * c.k, -1);
  for (int i = 0; i < c.T; ++i)
    for (int t = 0; t < 95; ++t) c.idx[size_t(i) * c.k + t] = 40 + t;  // ascending, then -1 padding
  Vec out(size_t(c.T) * c.H * c.hd);
  sparse_attention(c.args(), out.data());
  for (int i = 0; i < c.T; ++i) {
    const int64_t p = c.p0 + i;
    std::vector<const float*> slots;  // decode layout: position p - window + 1 + s
    for (int s = 0; s < c.window; ++s) {
      const int64_t pos = p - c.window + 1 + s;
      slots.push_back(pos >= c.p0 ? &c.kv[size_t(pos - c.p0) * c.hd] : &c.ring[size_t(pos % c.window) * c.hd]);
    }
    for (int t = 0; t < c.k; ++t) {
      const int32_t j = c.idx[size_t(i) * c.k + t];
      slots.push_back(j >= 0 ? &c.pool[size_t(j) * c.hd] : nullptr);
    }
    for (int h = 0; h < c.H; ++h) {
      const DVec want = online_softmax_oracle(&c.q[(size_t(i) * c.H + h) * c.hd], slots, c.hd, 1 / std::sqrt(16.0),
                                              c.sink[h]);
      for (int d = 0; d < c.hd; ++d) {
        const float got = out[(size_t(i) * c.H + h) * c.hd + d];
        EXPECT_EQ(got, round_bf16(got));
        EXPECT_NEAR(got, want[d], std::fabs(want[d]) * 0x1p-7 + 1e-6) << i << " " << h << " " << d;  // 1 bf16 ulp
      }
    }
  }
}

TEST(V41Attention, PrefillAndDecodeLayoutsAgreeOnceTheWindowIsFull) {
  // Row T-1 of a prefill (p0 = 0) with T >= window against the same query as a one-token decode at p = T-1.
  Rng rng(8);
  const int T = 24, hd = 8, H = 2, window = 16;
  AttnCase pre{T, H, hd, window, 2, 4, 0, rng.normal(size_t(T) * H * hd), rng.normal(size_t(T) * hd), {}, {},
               rng.normal(H), {}};
  pre.pool = rng.normal(size_t(T / 2) * hd);
  pre.idx.assign(size_t(T) * 4, -1);
  for (int i = 0; i < T; ++i)
    for (int t = 0; t < std::min(4, (i + 1) / 2); ++t) pre.idx[size_t(i) * 4 + t] = t * ((i + 1) / 2) / 4;
  Vec out(size_t(T) * H * hd);
  sparse_attention(pre.args(), out.data());
  AttnCase dec = pre;
  dec.T = 1, dec.p0 = T - 1;
  dec.q.assign(pre.q.end() - H * hd, pre.q.end());
  dec.kv.assign(pre.kv.end() - hd, pre.kv.end());
  dec.ring.assign(size_t(window) * hd, 0.f);
  for (int pos = T - window; pos < T - 1; ++pos)
    std::copy_n(&pre.kv[size_t(pos) * hd], hd, &dec.ring[size_t(pos % window) * hd]);
  dec.idx.assign(pre.idx.end() - 4, pre.idx.end());
  Vec one(size_t(H) * hd);
  sparse_attention(dec.args(), one.data());
  expect_bit_identical(one, Vec(out.end() - H * hd, out.end()), "last prefill row vs decode");
}

TEST(V41Attention, NothingValidGivesZero) {
  const float sink[1] = {3.0f}, kv[2] = {1, 1}, q[2] = {1, 1};
  const int32_t idx[2] = {-1, -1};
  SparseAttentionArgs a;
  a.rows = 1, a.heads = 1, a.head_dim = 2, a.p0 = 0, a.scale = 1, a.q = q, a.sink = sink, a.chunk_kv = kv;
  a.window = 0, a.ratio = 1, a.pool = kv, a.idx = idx, a.k = 2, a.numerics_v41 = true;
  float out[2] = {7, 7};
  sparse_attention(a, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
}

// ---- indexer --------------------------------------------------------------------------------------------------

// One head of dim 1, weight 1: score(j) = bf16(relu(bf16(q * k_j))), so keys set the scores directly.
struct Idx41 {
  int rows, ratio, topk;
  int64_t p0;
  Vec q, w, keys;
  int CB = 0, CBS = 0;
  bool source = false;
  std::vector<int32_t> cand_in;
  IndexerV41Args args() const {
    IndexerV41Args a;
    a.rows = rows, a.heads = 1, a.head_dim = 1, a.ratio = ratio, a.topk = topk, a.p0 = p0;
    a.q = q.data(), a.w = w.data(), a.keys = keys.data();
    a.candidate_blocks = CB, a.candidate_block_size = CBS, a.is_candidate_source = source;
    a.cand_in = cand_in.empty() ? nullptr : cand_in.data();
    return a;
  }
};

TEST(V41Indexer, TopkTiesSortedAscendingAndPadded) {
  // 10 visible entries; scores with a tie at the boundary: the lower index wins, the output is ascending.
  Idx41 c{2, 1, 4, 8, {1, 1}, {1, 1}, {0.5f, 3, 2, 0.5f, 2, 2, -1, 0, 2, 1}, 0, 0, false, {}};
  std::vector<int32_t> idx(2 * 4);
  indexer_v41(c.args(), idx.data(), nullptr);
  // Row 0 (p = 8) sees 9 entries: 3 (j=1), then the 2s at j = 2, 4, 5 (8 is visible too but loses the tie).
  EXPECT_EQ(std::vector<int32_t>(idx.begin(), idx.begin() + 4), (std::vector<int32_t>{1, 2, 4, 5}));
  // Row 1 (p = 9) sees all 10: same picks (j = 8 still loses to the lower indices).
  EXPECT_EQ(std::vector<int32_t>(idx.begin() + 4, idx.end()), (std::vector<int32_t>{1, 2, 4, 5}));
  // Few visible entries: all of them, then -1. Negative scores are clamped to 0 by the ReLU, and 0 ties.
  Idx41 d{1, 2, 4, 4, {1}, {1}, {-1, -2, 5}, 0, 0, false, {}};
  indexer_v41(d.args(), idx.data(), nullptr);
  EXPECT_EQ(std::vector<int32_t>(idx.begin(), idx.begin() + 4), (std::vector<int32_t>{0, 1, -1, -1}));
}

TEST(V41Indexer, ScoresRoundToBf16) {
  // q.k = 1 + 2^-9 rounds to 1 in bf16 and ties with an exact 1: the lower index wins.
  Idx41 c{1, 1, 1, 1, {1}, {1}, {1.0f + 0x1p-9f, 1.0f}, 0, 0, false, {}};
  int32_t idx[1];
  indexer_v41(c.args(), idx, nullptr);
  EXPECT_EQ(idx[0], 0);
  c.keys = {1.0f, 1.0f + 0x1p-9f};
  indexer_v41(c.args(), idx, nullptr);
  EXPECT_EQ(idx[0], 0);
  // Each head's relu(q.k) * w is rounded to bf16 before the head sum. Three heads, head_dim 2, w = 1 + 2^-8:
  // entry 0 (key (1, 0)) has q.k = 1 in every head, products round to 1, score 3 (unrounded products would
  // sum to 3 + 3*2^-8 and round to 3 + 2^-6); entry 1 (key (0, 3)) scores only in head 0: bf16(3 (1 + 2^-8))
  // = 3 + 2^-6. So entry 1 must win (with unrounded products the two would tie and entry 0 would win).
  IndexerV41Args a;
  const float w1 = 1.0f + 0x1p-8f;
  const Vec q = {1, 1, 1, 0, 1, 0}, w = {w1, w1, w1}, keys = {1, 0, 0, 3};
  a.rows = 1, a.heads = 3, a.head_dim = 2, a.ratio = 1, a.topk = 1, a.p0 = 1, a.q = q.data(), a.w = w.data();
  a.keys = keys.data();
  indexer_v41(a, idx, nullptr);
  EXPECT_EQ(idx[0], 1);
}

TEST(V41Indexer, CandidateBlocks) {
  // 14 entries in blocks of 4: [0-3] [4-7] [8-11] [12-13], keep 2 blocks. Block maxima 5, 9, 1, 0.5; the newest
  // block (3) is forced in, so blocks 1 and 3 are chosen.
  Vec keys = {1, 5, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0.5f, 0};
  Idx41 src{1, 1, 3, 13, {1}, {1}, keys, 2, 4, true, {}};
  int32_t idx[3], cand[2];
  indexer_v41(src.args(), idx, cand);
  EXPECT_EQ(cand[0], 1);
  EXPECT_EQ(cand[1], 3);
  // The source's own top-3 is unrestricted: 9 (j=4), 5 (j=1), 1 (j=0 beats j=8 on the tie), ascending.
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 3), (std::vector<int32_t>{0, 1, 4}));
  // Consumer with the source's candidates: only entries 4-7 and 12-13 compete: 9 (j=4), 0.5 (j=12), then the
  // zeros of 5, 6, 7, 13 tie and the lowest, 5, wins.
  Idx41 use{1, 1, 3, 13, {1}, {1}, keys, 2, 4, false, {1, 3}};
  indexer_v41(use.args(), idx, nullptr);
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 3), (std::vector<int32_t>{4, 5, 12}));
  // Fewer finite entries than k: masked visible entries stay selectable (lowest index first), as the reference's
  // top-k over -inf does; with one candidate block of 2 entries and k = 4, entries 0 and 1 fill up.
  Idx41 few{1, 1, 4, 13, {1}, {1}, keys, 2, 4, false, {3, -1}};
  int32_t idx4[4];
  indexer_v41(few.args(), idx4, nullptr);
  EXPECT_EQ(std::vector<int32_t>(idx4, idx4 + 4), (std::vector<int32_t>{0, 1, 12, 13}));
  // No visible entry yet: no candidate block, no index.
  Idx41 none{1, 2, 2, 0, {1}, {1}, {1}, 2, 4, true, {}};
  int32_t idx2[2];
  indexer_v41(none.args(), idx2, cand);
  EXPECT_EQ(cand[0], -1);
  EXPECT_EQ(cand[1], -1);
  EXPECT_EQ(idx2[0], -1);
  // A block whose entries are all -inf is never kept even if fewer than CB blocks exist: one visible block.
  Idx41 one{1, 1, 2, 2, {1}, {1}, {1, 2, 3}, 4, 4, true, {}};
  int32_t c4[4];
  indexer_v41(one.args(), idx2, c4);
  EXPECT_EQ(std::vector<int32_t>(c4, c4 + 4), (std::vector<int32_t>{0, -1, -1, -1}));
}

}  // namespace
}  // namespace smelt::kernels
