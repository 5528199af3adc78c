// The cpu backend's DeepSeek-V4.1 ops and attributes: each runs what docs/ops.md says, checked against
// float64 math and format decoders written here, or, for the plumbing of the big V4.1 kernels (whose numerics
// have their own tests in tests/kernels), against the kernels called directly on the same inputs.
#include <gtest/gtest.h>

#include "kernels/bf16.h"
#include "kernels/hc/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/moe/reference.h"
#include "kernels/quant/reference.h"
#include "tests/runtime/v41_util.h"

namespace smelt::runtime {
namespace {

using testing::F;
using testing::I;
using testing::N;
using testing::S;
using testing::TempDir;
using testing::V41Scaffold;

const std::vector<int32_t> kIds = {3, 0, 7, 7, 1, 12, 5};

// Every element of `got` equal to `want`.
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << ": " << got[first] << " vs " << want[first];
}

// Logits of `ids` prefilled in chunks of `chunk` rows.
std::vector<float> run(V41Scaffold& m, const std::vector<int32_t>& ids, int chunk = 0) {
  TempDir dir;
  return m.open(dir)->prefill(ids, chunk);
}

TEST(V41Ops, Fp8LinearWithActQuantIsTheQuantKernel) {
  const int D = 64, Nout = 40;  // 40 rows: a ragged second block of scales
  V41Scaffold m(13, D);
  std::vector<uint8_t> w = testing::e4m3_codes(Nout * D, m.u), s = testing::e8m0_codes(2 * 2, m.u);
  int wid = m.b.raw_weight("w.weight", {Nout, D}, DType::F8_E4M3, w);
  int sid = m.b.raw_weight("w.scale", {2, 2}, DType::F8_E8M0, s);
  m.b.logits = m.b.buffer("logits", Nout);
  m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {wid, sid}, {}, {S("act_quant", "fp8_e4m3_b32"), S("round", "bf16")}});
  std::vector<float> got = run(m, kIds, 3), x = m.rows(kIds), want(kIds.size() * Nout);
  kernels::quant::fp8_linear(x.data(), int64_t(kIds.size()), D, w.data(), s.data(), Nout, 32, want.data(), true);
  expect_bits(got, want, "fp8 linear");
  // And it is a linear: close to x . dequant(w) in float64 (activation quantization costs < 2^-3 relative).
  for (size_t r = 0; r < kIds.size(); ++r)
    for (int n = 0; n < Nout; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < D; ++k) {
        double wv = testing::e4m3_value(w[n * D + k]) * testing::e8m0_value(s[(n / 32) * 2 + k / 32]);
        ref += x[r * D + k] * wv, mag += std::fabs(x[r * D + k] * wv);
      }
      ASSERT_NEAR(got[r * Nout + n], ref, 0.125 * mag + 1e-30) << r << "," << n;
    }
}

TEST(V41Ops, Fp4LinearIsTheQuantKernel) {
  const int D = 64, Nout = 24;
  V41Scaffold m(13, D);
  std::vector<uint8_t> w = testing::random_bytes(Nout * D / 2, m.u), s = testing::e8m0_codes(Nout * 2, m.u);
  int wid = m.b.raw_weight("w.weight", {Nout, D / 2}, DType::I8, w);
  int sid = m.b.raw_weight("w.scale", {Nout, 2}, DType::F8_E8M0, s);
  m.b.logits = m.b.buffer("logits", Nout);
  m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {wid, sid}, {}, {S("act_quant", "fp8_e4m3_b32")}});
  std::vector<float> got = run(m, kIds), x = m.rows(kIds), want(kIds.size() * Nout);
  kernels::quant::fp4_linear(x.data(), int64_t(kIds.size()), D, w.data(), s.data(), Nout, want.data(), false);
  expect_bits(got, want, "fp4 linear (no round)");
}

TEST(V41Ops, ScaleAfterAndRound) {
  const int D = 8, Nout = 5;
  V41Scaffold m(13, D);
  int wid = m.w("w.weight", {Nout, D});
  m.b.logits = m.b.buffer("logits", Nout);
  m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {wid, -1}, {}, {F("scale_after", 0.3), S("round", "bf16")}});
  std::vector<float> got = run(m, kIds), x = m.rows(kIds);
  for (size_t r = 0; r < kIds.size(); ++r)
    for (int n = 0; n < Nout; ++n) {
      double y = 0;
      for (int k = 0; k < D; ++k) y += double(x[r * D + k]) * m.b.values(wid)[n * D + k];
      float want = testing::bf16(float(y) * 0.3f);
      EXPECT_EQ(got[r * Nout + n], want) << r << "," << n;
      EXPECT_EQ(got[r * Nout + n], testing::bf16(got[r * Nout + n]));  // a bf16 value
    }
}

// hc_mix v41 with round: each of its float outputs rounded to bf16 (checked through pre + post).
TEST(V41Ops, HcMixV41IsTheV41KernelRounded) {
  const int n = 2, D = 4;
  V41Scaffold m(13, D);
  int X = m.b.buffer("X", n * D), pre = m.b.buffer("pre", n), post = m.b.buffer("post", n), comb = m.b.buffer("comb", n * n);
  int fn = m.w("fn", {(2 + n) * n, n * D}), base = m.w("base", {(2 + n) * n}), scale = m.w("scale", {3}, 0.5, 1.5);
  m.b.op({"smelt.hc_init", 0, {m.x}, {X}, {}, {}, {I("hc_mult", n)}});
  m.b.op({"smelt.hc_mix", 0, {X}, {pre, post, comb}, {fn, base, scale}, {},
          {I("hc_mult", n), I("sinkhorn_iters", 3), F("hc_eps", 1e-6), F("norm_eps", 1e-6), S("variant", "v41"),
           S("round", "bf16")}});
  m.b.logits = m.b.buffer("logits", n);
  m.b.op({"smelt.add", 0, {pre, post}, {m.b.logits}, {}, {}, {}});
  std::vector<float> got = run(m, kIds), x = m.rows(kIds);
  const size_t T = kIds.size();
  std::vector<float> Xs(T * n * D), p(T * n), q(T * n), c(T * n * n);
  for (size_t r = 0; r < T; ++r)
    for (int k = 0; k < n; ++k) std::memcpy(&Xs[(r * n + k) * D], &x[r * D], 4 * D);
  kernels::hc_mix_v41(Xs.data(), int(T), n, D, m.b.values(fn).data(), m.b.values(base).data(), m.b.values(scale).data(),
                      3, 1e-6f, 1e-6f, p.data(), q.data(), c.data());
  std::vector<float> want(T * n);
  for (size_t i = 0; i < want.size(); ++i) want[i] = testing::bf16(p[i]) + testing::bf16(q[i]);
  expect_bits(got, want, "hc_mix v41 + round");
}

TEST(V41Ops, HcCollapseWithoutPreTakesCopyZero) {
  const int n = 3, D = 5;
  V41Scaffold m(13, D);
  int X = m.b.buffer("X", n * D), Y = m.b.buffer("Y", n * D), post = m.b.buffer("post", n), comb = m.b.buffer("comb", n * n);
  m.b.op({"smelt.hc_init", 0, {m.x}, {X}, {}, {}, {I("hc_mult", n)}});
  // Make the copies differ: Y = expand(X, x, post, comb) with post/comb from an hc_mix.
  int pre = m.b.buffer("pre", n);
  int fn = m.w("fn", {(2 + n) * n, n * D}), base = m.w("base", {(2 + n) * n}), scale = m.w("scale", {3}, 0.5, 1.5);
  m.b.op({"smelt.hc_mix", 0, {X}, {pre, post, comb}, {fn, base, scale}, {},
          {I("hc_mult", n), I("sinkhorn_iters", 2), F("hc_eps", 1e-6), F("norm_eps", 1e-6)}});
  m.b.op({"smelt.hc_expand", 0, {X, m.x, post, comb}, {Y}, {}, {}, {I("hc_mult", n)}});
  m.b.logits = m.b.buffer("logits", D);
  m.b.op({"smelt.hc_collapse", 0, {Y, -1}, {m.b.logits}, {}, {}, {I("hc_mult", n)}});
  TempDir dir;
  auto s = m.open(dir);
  std::vector<float> got = s->prefill(kIds);
  const float* y = reinterpret_cast<const float*>(s->backend().buffer_bytes(Y));
  const size_t last = kIds.size() - 1;  // the backend's buffers hold the last chunk (one chunk here)
  for (int d = 0; d < D; ++d) EXPECT_EQ(got[last * D + d], y[(last * n + 0) * D + d]);
  bool copies_differ = false;
  for (int d = 0; d < D; ++d) copies_differ |= y[(last * n + 1) * D + d] != y[(last * n + 0) * D + d];
  EXPECT_TRUE(copies_differ);
}

TEST(V41Ops, FakeQuantModesAndChannels) {
  const int D = 64;
  struct Case {
    const char* mode;
    void (*qdq)(float*, int64_t);
    int heads, channels;
  };
  const Case cases[] = {{"fp8_e4m3_b32", kernels::quant::qdq_window_kv, 1, 0},
                        {"fp4_e2m1_g16_e4m3", kernels::quant::qdq_compressed_kv, 2, 16},
                        {"fp4_e2m1_b32_ue8m0", kernels::quant::qdq_index, 2, 0}};
  for (const Case& c : cases) {
    V41Scaffold m(13, D);
    m.b.logits = m.b.buffer("logits", D);
    m.b.op({"smelt.fake_quant", 0, {m.x}, {m.b.logits}, {}, {},
            {S("mode", c.mode), I("heads", c.heads), I("channels", c.channels)}});
    std::vector<float> got = run(m, kIds), want = m.rows(kIds);
    const int seg = D / c.heads, ch = c.channels ? c.channels : seg;
    for (size_t r = 0; r < kIds.size(); ++r)
      for (int h = 0; h < c.heads; ++h) c.qdq(&want[r * D + h * seg], ch);
    expect_bits(got, want, c.mode);
    if (c.channels) {  // the channels past `channels` of each head pass through
      std::vector<float> x = m.rows(kIds);
      for (int h = 0; h < c.heads; ++h)
        for (int i = c.channels; i < seg; ++i) EXPECT_EQ(got[h * seg + i], x[h * seg + i]);
    }
  }
}

TEST(V41Ops, GroupedLinearFp8IsDequantizedExactly) {
  const int G = 2, Kg = 32, R = 8, D = G * Kg;
  V41Scaffold m(13, D);
  std::vector<uint8_t> w = testing::e4m3_codes(G * R * Kg, m.u), s = testing::e8m0_codes(1, m.u);
  int wid = m.b.raw_weight("wo_a.weight", {G * R, Kg}, DType::F8_E4M3, w);
  int sid = m.b.raw_weight("wo_a.scale", {1, 1}, DType::F8_E8M0, s);
  m.b.logits = m.b.buffer("logits", G * R);
  m.b.op({"smelt.grouped_linear", 0, {m.x}, {m.b.logits}, {wid, sid}, {}, {I("groups", G), S("round", "bf16")}});
  std::vector<float> got = run(m, kIds), x = m.rows(kIds);
  for (size_t r = 0; r < kIds.size(); ++r)
    for (int g = 0; g < G; ++g)
      for (int o = 0; o < R; ++o) {
        double y = 0, mag = 0;
        for (int k = 0; k < Kg; ++k) {
          double t = double(x[r * D + g * Kg + k]) * testing::e4m3_value(w[(g * R + o) * Kg + k]) * testing::e8m0_value(s[0]);
          y += t, mag += std::fabs(t);
        }
        // A float32 sum rounded to bf16: the float64 sum's bf16 value or one bf16 step away.
        EXPECT_NEAR(got[r * G * R + g * R + o], testing::bf16(y), std::fabs(y) * 0.008 + 1e-6 * mag);
        EXPECT_EQ(got[r * G * R + g * R + o], testing::bf16(got[r * G * R + g * R + o]));
      }
}

TEST(V41Ops, QuantizedExpertsAndSharedExpertAreTheV41Kernels) {
  const int D = 32, Fi = 32, E = 3, K = 2;
  V41Scaffold m(13, D);
  int gate = m.w("gate.weight", {E, D}), bias = m.b.weight("gate.bias", {E}, m.u.vec(E, -0.1, 0.1));
  std::vector<int> experts;
  std::vector<kernels::QuantWeight> q1, q2, q3;
  std::vector<std::vector<uint8_t>> keep;
  keep.reserve(64);
  auto fp4 = [&](const std::string& name, int out, int in, std::vector<kernels::QuantWeight>& q) {
    keep.push_back(testing::random_bytes(size_t(out) * in / 2, m.u));
    experts.push_back(m.b.raw_weight(name + ".weight", {out, in / 2}, DType::I8, keep.back()));
    const uint8_t* w = keep.back().data();
    keep.push_back(testing::e8m0_codes(size_t(out) * (in / 32), m.u, 120, 124));
    experts.push_back(m.b.raw_weight(name + ".scale", {out, in / 32}, DType::F8_E8M0, keep.back()));
    q.push_back({w, keep.back().data(), kernels::WeightFormat::FP4_E2M1, 32});
  };
  for (int e = 0; e < E; ++e) {
    const std::string p = "experts." + std::to_string(e) + ".";
    fp4(p + "w1", Fi, D, q1), fp4(p + "w2", D, Fi, q2), fp4(p + "w3", Fi, D, q3);
  }
  std::vector<int> shared;
  std::vector<kernels::QuantWeight> sq;
  for (auto [out, in] : {std::pair{Fi, D}, {D, Fi}, {Fi, D}}) {
    keep.push_back(testing::e4m3_codes(size_t(out) * in, m.u));
    shared.push_back(m.b.raw_weight("shared.w" + std::to_string(shared.size() / 2 + 1) + ".weight", {out, in},
                                    DType::F8_E4M3, keep.back()));
    const uint8_t* w = keep.back().data();
    keep.push_back(testing::e8m0_codes(1, m.u, 120, 122));
    shared.push_back(m.b.raw_weight("shared.w" + std::to_string(shared.size() / 2 + 1) + ".scale", {1, 1},
                                    DType::F8_E8M0, keep.back()));
    sq.push_back({w, keep.back().data(), kernels::WeightFormat::FP8_E4M3, 32});
  }
  int rw = m.b.buffer("rw", K), ri = m.b.buffer("ri", K, plan::DType::I32), routed = m.b.buffer("routed", D);
  int sh = m.b.buffer("shared", D);
  m.b.logits = m.b.buffer("logits", D);
  m.b.op({"smelt.moe_route", 0, {m.x, -1}, {rw, ri}, {gate, bias, -1}, {},
          {I("topk", K), S("scoring", "sqrtsoftplus"), F("route_scale", 1.5)}});
  m.b.op({"smelt.moe_experts", 0, {m.x, rw, ri}, {routed}, experts, {},
          {I("n_experts", E), I("topk", K), F("swiglu_limit", 10), S("act_quant", "fp8_e4m3_b32"), S("variant", "v41")}});
  m.b.op({"smelt.swiglu_mlp", 0, {m.x}, {sh}, shared, {},
          {F("swiglu_limit", 10), S("act_quant", "fp8_e4m3_b32"), S("variant", "v41"), S("round", "bf16")}});
  m.b.op({"smelt.add", 0, {routed, sh}, {m.b.logits}, {}, {}, {S("round", "bf16")}});
  std::vector<float> got = run(m, kIds, 4), x = m.rows(kIds);
  const int T = int(kIds.size());
  kernels::MoeRouteArgs ra;
  ra.rows = T, ra.dim = D, ra.n_experts = E, ra.topk = K, ra.route_scale = 1.5f, ra.x = x.data();
  ra.gate = m.b.values(gate).data(), ra.bias = m.b.values(bias).data();
  std::vector<float> w(T * K), y(T * D), s(T * D), want(T * D);
  std::vector<int32_t> idx(T * K);
  kernels::moe_route(ra, w.data(), idx.data());
  kernels::moe_experts_v41(x.data(), T, D, Fi, q1.data(), q2.data(), q3.data(), E, w.data(), idx.data(), K, 10, y.data());
  kernels::swiglu_mlp_v41(x.data(), T, D, Fi, sq[0], sq[1], sq[2], 10, s.data());
  for (int i = 0; i < T * D; ++i) want[i] = testing::bf16(y[i] + testing::bf16(s[i]));  // fp32 add, then bf16
  expect_bits(got, want, "routed + shared");
}

}  // namespace
}  // namespace smelt::runtime
