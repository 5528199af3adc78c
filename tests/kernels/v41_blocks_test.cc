// V4.1 kernels, part 2: the CSA2 KV compressor, the FP4/FP8 experts and the Engram block. Oracles: float64
// re-derivations that round to bf16 exactly where the reference stores bf16 (through the separately tested
// quant helpers), chunked-vs-one-shot equality, and the accumulation order of the routed experts.
#include <cmath>

#include "frontends/error.h"
#include "kernels/bf16.h"
#include "kernels/compressor/reference.h"
#include "kernels/engram/reference.h"
#include "kernels/moe/reference.h"
#include "kernels/rope/reference.h"
#include "tests/kernels/v41_testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

float bf(double v) { return quant::bf16_round(float(v)); }

// Rounded-to-bf16 rms_norm in double: bf16(w * x / sqrt(mean x^2 + eps)).
std::vector<float> rms_bf16(const std::vector<float>& x, const float* w, double eps) {
  double ms = 0;
  for (float v : x) ms += double(v) * v;
  const double r = 1 / std::sqrt(ms / double(x.size()) + eps);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf(w[i] * (x[i] * r));
  return y;
}

// RoPE of the trailing rope_dim channels at `pos` in double, rounded to bf16.
void rope_bf16(std::vector<float>& x, int rope_dim, const std::vector<float>& inv_freq, int64_t pos) {
  const size_t off = x.size() - size_t(rope_dim);
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double ang = double(float(pos) * inv_freq[i]);  // the reference's fp32 angle
    const double a = x[off + 2 * i], b = x[off + 2 * i + 1], c = std::cos(ang), d = std::sin(ang);
    x[off + 2 * i] = bf(a * c - b * d);
    x[off + 2 * i + 1] = bf(a * d + b * c);
  }
}

// ---- kv_compressor_v41 ----------------------------------------------------------------------------------------

struct Comp {
  int ratio, hd = 32, dI = 32, rd = 16, D = 48;
  Vec wkv, wgate, norm, wk, k_norm;
  std::vector<float> inv_freq;
  explicit Comp(int r, uint64_t seed) : ratio(r) {
    Rng rng(seed);
    auto bf_all = [](Vec v) {
      round_bf16_inplace(v.data(), v.size());
      return v;
    };
    wkv = bf_all(rng.normal(size_t(hd) * D, 1 / std::sqrt(48.0)));
    if (r == 2) wgate = bf_all(rng.normal(size_t(hd) * D, 1 / std::sqrt(48.0)));
    norm = bf_all(rng.uniform(hd, 0.8, 1.2));
    wk = bf_all(rng.normal(size_t(dI) * hd, 1 / std::sqrt(32.0)));
    k_norm = bf_all(rng.uniform(dI, 0.8, 1.2));
    RopeParams p;
    p.rope_dim = rd, p.theta = 160000, p.yarn_factor = 16, p.yarn_original_max_pos = 65536;
    inv_freq = rope_inv_freq_v41(p);
  }
  KvCompressorV41Args args(int ring_rows = 0) const {
    KvCompressorV41Args a;
    a.ratio = ratio, a.head_dim = hd, a.index_head_dim = dI, a.rope_dim = rd, a.in_dim = D;
    a.wkv = wkv.data(), a.wgate = ratio == 2 ? wgate.data() : nullptr, a.norm = norm.data();
    a.wk = wk.data(), a.k_norm = k_norm.data(), a.eps = 1e-20f, a.inv_freq = inv_freq.data();
    a.ring_rows = ring_rows;
    return a;
  }
  // Float64 oracle of entry j: (compressed KV row, index key row).
  std::pair<Vec, Vec> entry(const Vec& x, int64_t j) const {
    std::vector<float> latent(hd);
    for (int c = 0; c < hd; ++c) {
      if (ratio == 1) {
        double s = 0;
        for (int k = 0; k < D; ++k) s += double(x[size_t(j) * D + k]) * wkv[size_t(c) * D + k];
        latent[c] = bf(s);
      } else {
        double kv[2] = {0, 0}, g[2] = {0, 0};
        for (int t = 0; t < 2; ++t)
          for (int k = 0; k < D; ++k) {
            kv[t] += double(x[size_t(2 * j + t) * D + k]) * wkv[size_t(c) * D + k];
            g[t] += double(x[size_t(2 * j + t) * D + k]) * wgate[size_t(c) * D + k];
          }
        const double m = std::max(g[0], g[1]), e0 = std::exp(g[0] - m), e1 = std::exp(g[1] - m);
        latent[c] = bf((kv[0] * e0 + kv[1] * e1) / (e0 + e1));
      }
    }
    latent = rms_bf16(latent, norm.data(), 1e-20);
    std::vector<float> key(dI);
    for (int i = 0; i < dI; ++i) {
      double s = 0;
      for (int c = 0; c < hd; ++c) s += double(latent[c]) * wk[size_t(i) * hd + c];
      key[i] = bf(s);
    }
    key = rms_bf16(key, k_norm.data(), 1e-20);
    rope_bf16(key, rd, inv_freq, j * ratio);
    quant::qdq_index(key.data(), dI);
    rope_bf16(latent, rd, inv_freq, j * ratio);
    quant::qdq_compressed_kv(latent.data(), hd);
    return {latent, key};
  }
};

TEST(V41Compressor, EntriesMatchTheFloat64Formula) {
  for (int ratio : {1, 2}) {
    Comp c(ratio, 100 + ratio);
    Rng rng(ratio);
    const int T = 40, n = T / ratio;
    Vec x = rng.normal(size_t(T) * c.D);
    round_bf16_inplace(x.data(), x.size());
    Vec pool(size_t(n) * c.hd), ipool(size_t(n) * c.dI), ring(size_t(2) * 2 * c.hd);
    kv_compressor_v41(c.args(), x.data(), T, 0, ring.data(), pool.data(), ipool.data(), n);
    // The pre-quantization bf16 values agree with the oracle except at rare rounding boundaries, and equal
    // inputs quantize equally: most rows must match bit for bit.
    int rows_equal = 0;
    for (int j = 0; j < n; ++j) {
      const auto [kv, key] = c.entry(x, j);
      rows_equal += std::equal(kv.begin(), kv.end(), &pool[size_t(j) * c.hd]) &&
                    std::equal(key.begin(), key.end(), &ipool[size_t(j) * c.dI]);
    }
    EXPECT_GE(rows_equal, n * 9 / 10) << "ratio " << ratio;
  }
}

TEST(V41Compressor, ChunkingDoesNotChangeTheEntries) {
  for (int ratio : {1, 2})
    for (int ring_rows : {0, 5}) {
      Comp c(ratio, 7);
      Rng rng(9);
      const int T = 23, n = 24;
      Vec x = rng.normal(size_t(T) * c.D);
      round_bf16_inplace(x.data(), x.size());
      const int R = ring_rows ? ring_rows : ratio;
      Vec pool1(size_t(n) * c.hd, -7), ipool1(size_t(n) * c.dI, -7), ring1(size_t(R) * 2 * c.hd);
      kv_compressor_v41(c.args(ring_rows), x.data(), T, 0, ring1.data(), pool1.data(), ipool1.data(), n);
      Vec pool2(pool1.size(), -7), ipool2(ipool1.size(), -7), ring2(ring1.size());
      int64_t p = 0;
      for (int len : {1, 4, 3, 1, 7, 2, 5}) {  // odd boundaries: groups split across chunks
        kv_compressor_v41(c.args(ring_rows), x.data() + p * c.D, len, p, ring2.data(), pool2.data(), ipool2.data(),
                          n);
        p += len;
      }
      ASSERT_EQ(p, T);
      expect_bit_identical(pool2, pool1, "compressed KV");
      expect_bit_identical(ipool2, ipool1, "index keys");
      // Entries beyond the last completed group stay untouched.
      EXPECT_EQ(pool1[size_t(T / ratio) * c.hd], -7.0f);
    }
}

TEST(V41Compressor, OptionalKeysAndBounds) {
  Comp c(1, 3);
  Rng rng(4);
  Vec x = rng.normal(size_t(4) * c.D), pool(size_t(4) * c.hd), ipool(size_t(4) * c.dI, -3);
  KvCompressorV41Args a = c.args();
  a.wk = nullptr;
  kv_compressor_v41(a, x.data(), 4, 0, nullptr, pool.data(), ipool.data(), 4);
  for (float v : ipool) ASSERT_EQ(v, -3.0f);  // no wk: no index keys
  EXPECT_THROW(kv_compressor_v41(a, x.data(), 4, 1, nullptr, pool.data(), ipool.data(), 4), smelt::Error);
  a.ratio = 3;
  EXPECT_THROW(kv_compressor_v41(a, x.data(), 4, 0, nullptr, pool.data(), ipool.data(), 4), smelt::Error);
}

// ---- experts --------------------------------------------------------------------------------------------------

struct Expert {
  std::vector<uint8_t> w[3], s[3];  // w1, w2, w3
  Vec deq[3];
  QuantWeight q[3];
  // w2_boost raises w2's scales by that many powers of two (an expert with much larger outputs).
  Expert(Rng& rng, int dim, int inter, WeightFormat f, int w2_boost = 0) {
    const int outs[3] = {inter, dim, inter}, ins[3] = {dim, inter, dim};
    for (int i = 0; i < 3; ++i) {
      deq[i].resize(size_t(outs[i]) * ins[i]);
      if (f == WeightFormat::FP4_E2M1) {
        w[i] = bytes(rng, size_t(outs[i]) * ins[i] / 2, 0, 255);
        s[i] = bytes(rng, size_t(outs[i]) * (ins[i] / 32), 121 + (i == 1) * w2_boost, 123 + (i == 1) * w2_boost);
        quant::dequant_fp4_weight(w[i].data(), s[i].data(), outs[i], ins[i], deq[i].data());
      } else {
        w[i] = e4m3_codes(rng, size_t(outs[i]) * ins[i]);
        s[i] = bytes(rng, size_t((outs[i] + 31) / 32) * (ins[i] / 32), 116, 118);
        quant::dequant_fp8_weight(w[i].data(), s[i].data(), outs[i], ins[i], 32, deq[i].data());
      }
      q[i] = {w[i].data(), s[i].data(), f, 32};
    }
  }
  // Float64 oracle, rounding to bf16 where the reference does; `weight` < 0: no routing weight.
  Vec run(const Vec& x, int rows, int dim, int inter, float limit, const Vec& weight) const {
    const DVec g = quant_linear_oracle(x, rows, dim, inter, deq[0]), u = quant_linear_oracle(x, rows, dim, inter, deq[2]);
    Vec a(size_t(rows) * inter);
    for (int r = 0; r < rows; ++r)
      for (int f = 0; f < inter; ++f) {
        double gv = bf(g[size_t(r) * inter + f]), uv = bf(u[size_t(r) * inter + f]);
        uv = std::clamp(uv, -double(limit), double(limit));
        gv = std::min(gv, double(limit));
        double v = gv / (1 + std::exp(-gv)) * uv;
        if (!weight.empty()) v *= weight[r];
        a[size_t(r) * inter + f] = bf(v);
      }
    const DVec y = quant_linear_oracle(a, rows, inter, dim, deq[1]);
    Vec out(y.size());
    for (size_t i = 0; i < y.size(); ++i) out[i] = bf(y[i]);
    return out;
  }
};

// Elements equal to the oracle: all but a few, the rest within 2 bf16 ulps.
void expect_mostly_equal(const Vec& got, const Vec& want, const char* what) {
  size_t equal = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    equal += got[i] == want[i];
    EXPECT_NEAR(got[i], want[i], std::fabs(want[i]) * 0x1p-6 + 1e-6) << what << " " << i;
  }
  EXPECT_GE(equal, want.size() * 95 / 100) << what;
}

TEST(V41Moe, SharedExpertMatchesTheFormula) {
  Rng rng(31);
  const int rows = 6, dim = 64, inter = 96;
  Expert e(rng, dim, inter, WeightFormat::FP8_E4M3);
  Vec x = rng.normal(size_t(rows) * dim);
  round_bf16_inplace(x.data(), x.size());
  for (float limit : {10.0f, 0.25f}) {  // 0.25: both clamps active on many elements
    Vec y(size_t(rows) * dim);
    swiglu_mlp_v41(x.data(), rows, dim, inter, e.q[0], e.q[1], e.q[2], limit, y.data());
    expect_mostly_equal(y, e.run(x, rows, dim, inter, limit, {}), "shared expert");
  }
}

TEST(V41Moe, RoutedExpertsWeightBeforeW2AndSumInExpertOrder) {
  Rng rng(32);
  const int rows = 5, dim = 64, inter = 32, E = 4, K = 3;
  std::vector<Expert> ex;
  // Expert 3's outputs are ~2^18 larger, so float32 sums of its output with the others round, and the
  // summation order shows.
  for (int i = 0; i < E; ++i) ex.emplace_back(rng, dim, inter, WeightFormat::FP4_E2M1, i == 3 ? 18 : 0);
  std::vector<QuantWeight> w1, w2, w3;
  for (auto& e : ex) w1.push_back(e.q[0]), w2.push_back(e.q[1]), w3.push_back(e.q[2]);
  Vec x = rng.normal(size_t(rows) * dim);
  round_bf16_inplace(x.data(), x.size());
  // Each row lists its experts in descending order; the sum must still run in ascending expert order.
  const std::vector<int32_t> idx = {3, 1, 0, 2, 1, 0, 3, 2, 1, 3, 2, 0, 2, 1, 0};
  const Vec weights = rng.uniform(size_t(rows) * K, 0.2, 1.5);
  Vec y(size_t(rows) * dim);
  moe_experts_v41(x.data(), rows, dim, inter, w1.data(), w2.data(), w3.data(), E, weights.data(), idx.data(), K, 10.f,
                  y.data());
  // Per (row, expert) outputs from the kernel itself with top-1 (0 + y_e = y_e), checked against the oracle.
  std::vector<Vec> per(size_t(rows) * K);
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < K; ++t) {
      Vec one(dim);
      const int32_t e = idx[size_t(r) * K + t];
      moe_experts_v41(&x[size_t(r) * dim], 1, dim, inter, w1.data(), w2.data(), w3.data(), E,
                      &weights[size_t(r) * K + t], &e, 1, 10.f, one.data());
      expect_mostly_equal(one, ex[size_t(e)].run(Vec(x.begin() + r * dim, x.begin() + (r + 1) * dim), 1, dim, inter,
                                                 10.f, {weights[size_t(r) * K + t]}),
                          "routed expert");
      per[size_t(r) * K + t] = one;
    }
  size_t order_matters = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<int> slot(K);
    for (int t = 0; t < K; ++t) slot[t] = t;
    std::sort(slot.begin(), slot.end(), [&](int a, int b) { return idx[size_t(r) * K + a] < idx[size_t(r) * K + b]; });
    for (int d = 0; d < dim; ++d) {
      float asc = 0, listed = 0;
      for (int t = 0; t < K; ++t) asc += per[size_t(r) * K + slot[t]][d];
      for (int t = 0; t < K; ++t) listed += per[size_t(r) * K + t][d];
      ASSERT_EQ(y[size_t(r) * dim + d], asc) << r << " " << d;
      order_matters += asc != listed;
    }
  }
  EXPECT_GT(order_matters, 0u) << "the case should distinguish the summation orders";
}

TEST(V41Moe, GateTemperatureDividesTheLogits) {
  // Dividing the logits by 2 is exact, and so is halving the gate weights: both routes must agree bit for bit.
  Rng rng(33);
  const int rows = 6, dim = 32, E = 8, K = 2;
  const Vec x = rng.normal(size_t(rows) * dim), gate = rng.normal(size_t(E) * dim), bias = rng.normal(E, 0.1);
  Vec half = gate;
  for (float& v : half) v *= 0.5f;
  MoeRouteArgs a;
  a.rows = rows, a.dim = dim, a.n_experts = E, a.topk = K, a.route_scale = 1.5f, a.x = x.data(), a.bias = bias.data();
  a.gate = gate.data(), a.gate_temp = 2.0f;
  Vec w1(size_t(rows) * K), w2(w1.size());
  std::vector<int32_t> i1(w1.size()), i2(w1.size());
  moe_route(a, w1.data(), i1.data());
  a.gate = half.data(), a.gate_temp = 1.0f;
  moe_route(a, w2.data(), i2.data());
  EXPECT_EQ(i1, i2);
  expect_bit_identical(w1, w2, "routing weights");
}

// ---- Engram ---------------------------------------------------------------------------------------------------

TEST(V41Engram, MatchesTheFloat64Formula) {
  Rng rng(41);
  const int T = 5, n = 4, D = 64, hd = 32, cols = 6, rows_tab = 50, K = cols * hd, N = (n + 1) * D;
  const auto table = e4m3_codes(rng, size_t(rows_tab) * hd), tscale = bytes(rng, rows_tab, 124, 128);
  const auto wkv = e4m3_codes(rng, size_t(N) * K), wscale = bytes(rng, size_t(N / 32) * (K / 32), 114, 116);
  Vec qw = rng.uniform(size_t(n) * D, 0.8, 1.2), kw = rng.uniform(size_t(n) * D, 0.8, 1.2);
  round_bf16_inplace(qw.data(), qw.size());
  round_bf16_inplace(kw.data(), kw.size());
  Vec X = rng.normal(size_t(T) * n * D);
  round_bf16_inplace(X.data(), X.size());
  std::vector<int32_t> hashes(size_t(T) * cols);
  for (auto& h : hashes) h = rng.integer(0, rows_tab - 1);
  engram::EngramArgs a;
  a.rows = T, a.hc_mult = n, a.dim = D, a.head_dim = hd, a.cols = cols, a.eps = 1e-20f;
  a.table = table.data(), a.table_scale = tscale.data(), a.table_rows = rows_tab;
  a.wkv = wkv.data(), a.wkv_scale = wscale.data(), a.q_weight = qw.data(), a.k_weight = kw.data();
  a.hashes = hashes.data();
  Vec out(X.size());
  engram::engram_forward(a, X.data(), out.data());

  Vec e(size_t(T) * K), wdeq(size_t(N) * K);
  for (int r = 0; r < T; ++r)
    for (int c = 0; c < cols; ++c)
      for (int i = 0; i < hd; ++i) {
        const int32_t row = hashes[size_t(r) * cols + c];
        e[size_t(r) * K + c * hd + i] =
            quant::e4m3_decode(table[size_t(row) * hd + i]) * std::ldexp(1.0f, int(tscale[size_t(row)]) - 127);
      }
  quant::dequant_fp8_weight(wkv.data(), wscale.data(), N, K, 32, wdeq.data());
  const DVec kv = quant_linear_oracle(e, T, K, N, wdeq);
  Vec want(X.size());
  for (int r = 0; r < T; ++r)
    for (int c = 0; c < n; ++c) {
      double dot = 0, hh = 0, kk = 0;
      for (int d = 0; d < D; ++d) {
        const double h = X[(size_t(r) * n + c) * D + d], k = bf(kv[size_t(r) * N + size_t(c) * D + d]);
        dot += h * double(qw[size_t(c) * D + d]) * kw[size_t(c) * D + d] * k;
        hh += h * h, kk += k * k;
      }
      dot *= 1 / std::sqrt(hh / D + 1e-20) / std::sqrt(kk / D + 1e-20) / std::sqrt(double(D));
      const double gate = 1 / (1 + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6)), dot)));
      for (int d = 0; d < D; ++d)
        want[(size_t(r) * n + c) * D + d] =
            bf(X[(size_t(r) * n + c) * D + d] + gate * double(bf(kv[size_t(r) * N + size_t(n) * D + d])));
    }
  expect_mostly_equal(out, want, "engram");
  hashes[3] = rows_tab;  // a row outside the table
  EXPECT_THROW(engram::engram_forward(a, X.data(), out.data()), smelt::Error);
}

// The TP split (smelt-partition): each rank looks up only its row range of the table (zeros elsewhere); the
// ranks' rows summed in rank order are the whole table's rows bit for bit (x + 0 = x), so the gate on them gives
// engram_forward's output exactly.
TEST(V41Engram, RowRangesSumToTheWholeLookup) {
  Rng rng(43);
  const int T = 7, n = 2, D = 64, hd = 64, cols = 4, rows_tab = 50, K = cols * hd, N = (n + 1) * D;
  const auto table = e4m3_codes(rng, size_t(rows_tab) * hd), tscale = bytes(rng, size_t(rows_tab) * 2, 120, 130);
  const auto wkv = e4m3_codes(rng, size_t(N) * K), wscale = bytes(rng, size_t(N / 32) * (K / 32), 114, 116);
  Vec qw = rng.uniform(size_t(n) * D, 0.8, 1.2), kw = rng.uniform(size_t(n) * D, 0.8, 1.2);
  Vec X = rng.normal(size_t(T) * n * D);
  round_bf16_inplace(X.data(), X.size());
  std::vector<int32_t> hashes(size_t(T) * cols);
  for (auto& h : hashes) h = rng.integer(0, rows_tab - 1);
  hashes[0] = 0, hashes[1] = 6, hashes[2] = 7, hashes[3] = rows_tab - 1;  // both sides of every cut
  engram::EngramArgs a;
  a.rows = T, a.hc_mult = n, a.dim = D, a.head_dim = hd, a.cols = cols, a.eps = 1e-20f;
  a.table = table.data(), a.table_scale = tscale.data(), a.table_rows = rows_tab;
  a.wkv = wkv.data(), a.wkv_scale = wscale.data(), a.q_weight = qw.data(), a.k_weight = kw.data();
  a.hashes = hashes.data();
  Vec whole(X.size());
  engram::engram_forward(a, X.data(), whole.data());

  const int cuts[] = {0, 7, 30, rows_tab};  // uneven ranges, as uneven shares give
  Vec sum(size_t(T) * K, -0.0f);  // the all_reduce's exact identity (it starts from group[0]'s value)
  std::vector<int> contributors(sum.size(), 0);
  for (int k = 0; k < 3; ++k) {
    engram::EngramArgs r = a;
    r.row_begin = cuts[k], r.table_rows = cuts[k + 1] - cuts[k], r.rows_total = rows_tab;
    r.table = table.data() + size_t(cuts[k]) * hd, r.table_scale = tscale.data() + size_t(cuts[k]) * (hd / 32);
    Vec e(sum.size());
    engram::engram_lookup(r, e.data());
    for (size_t i = 0; i < e.size(); ++i) sum[i] += e[i], contributors[i] += e[i] != 0.0f;
  }
  Vec want(sum.size());  // the oracle: every hashed row decoded in the test (E4M3 x 2^(e-127), exact)
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < cols; ++c)
      for (int i = 0; i < hd; ++i) {
        const int32_t row = hashes[size_t(t) * cols + c];
        want[size_t(t) * K + c * hd + i] = quant::e4m3_decode(table[size_t(row) * hd + i]) *
                                           std::ldexp(1.0f, int(tscale[size_t(row) * 2 + i / 32]) - 127);
      }
  expect_bit_identical(sum, want, "joined rows");
  for (int c : contributors) EXPECT_LE(c, 1);
  Vec out(X.size());
  engram::engram_gate(a, sum.data(), X.data(), out.data());
  expect_bit_identical(out, whole, "gate on the joined rows");
  engram::EngramArgs r = a;
  r.table_rows = 7, r.rows_total = rows_tab;
  hashes[5] = rows_tab;  // outside the whole table: refused even by a rank that does not hold it
  Vec e(sum.size());
  EXPECT_THROW(engram::engram_lookup(r, e.data()), smelt::Error);
}

}  // namespace
}  // namespace smelt::kernels
