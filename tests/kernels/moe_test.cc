#include "kernels/moe/reference.h"

#include <algorithm>
#include <numeric>

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

MoeRouteArgs route_args(int rows, int dim, int E, int K, const Vec& x, const Vec& gate) {
  MoeRouteArgs a;
  a.rows = rows;
  a.dim = dim;
  a.n_experts = E;
  a.topk = K;
  a.x = x.data();
  a.gate = gate.data();
  return a;
}

TEST(MoeRoute, SqrtSoftplusHandComputed) {
  // dim 1, x = 1: the logits are the gate values themselves. softplus(100) must not overflow (threshold
  // 20: it is 100), softplus(0) = ln 2, softplus(-3) = ln(1 + e^-3), softplus(-100) ~ e^-100.
  const Vec x = {1.0f}, gate = {100.0f, 0.0f, 25.0f, -3.0f, -100.0f};
  MoeRouteArgs a = route_args(1, 1, 5, 5, x, gate);
  a.norm_topk_prob = false;
  a.route_scale = 2.0f;
  Vec w(5);
  std::vector<int32_t> idx(5);
  moe_route(a, w.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 2, 1, 3, 4}));
  EXPECT_FLOAT_EQ(w[0], 2 * 10.0f);
  EXPECT_FLOAT_EQ(w[1], 2 * 5.0f);
  EXPECT_NEAR(w[2], 2 * 0.8325546111576977, 1e-6);
  EXPECT_NEAR(w[3], 2 * std::sqrt(std::log1p(std::exp(-3.0))), 1e-6);
  EXPECT_NEAR(w[4], 0.0, 1e-20);
}

double score64(double l, Scoring s, const DVec& all) {
  switch (s) {
    case Scoring::SqrtSoftplus: return std::sqrt(std::log1p(std::exp(l)));
    case Scoring::Sigmoid: return 1.0 / (1.0 + std::exp(-l));
    case Scoring::Softmax: {
      double z = 0.0;
      for (double v : all) z += std::exp(v);
      return std::exp(l) / z;
    }
  }
  return 0.0;
}

TEST(MoeRoute, MatchesFloat64) {
  Rng rng(20);
  const int rows = 6, dim = 24, E = 16, K = 4;
  const Vec x = rng.normal(size_t(rows) * dim), gate = rng.normal(size_t(E) * dim, 0.4), bias = rng.normal(E, 0.3);
  for (Scoring sc : {Scoring::SqrtSoftplus, Scoring::Sigmoid, Scoring::Softmax}) {
    MoeRouteArgs a = route_args(rows, dim, E, K, x, gate);
    a.scoring = sc;
    a.bias = bias.data();
    a.route_scale = 1.5f;
    Vec w(size_t(rows) * K);
    std::vector<int32_t> idx(size_t(rows) * K);
    moe_route(a, w.data(), idx.data());
    DVec want_w;
    for (int r = 0; r < rows; ++r) {
      DVec logits(E), s(E), sel(E);
      for (int e = 0; e < E; ++e)
        for (int d = 0; d < dim; ++d) logits[e] += double(x[size_t(r) * dim + d]) * gate[size_t(e) * dim + d];
      for (int e = 0; e < E; ++e) s[e] = score64(logits[e], sc, logits), sel[e] = s[e] + bias[e];
      std::vector<int32_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t u, int32_t v) { return sel[u] > sel[v]; });
      // This seed leaves a clear gap at the cut, so float32 and float64 must agree on the selection.
      ASSERT_GT(sel[order[K - 1]] - sel[order[K]], 1e-4);
      for (int t = 0; t < K; ++t) EXPECT_EQ(idx[size_t(r) * K + t], order[t]) << "row " << r;
      double sum = 0.0;
      for (int t = 0; t < K; ++t) sum += s[order[t]];
      for (int t = 0; t < K; ++t) want_w.push_back(s[order[t]] / sum * 1.5);
    }
    expect_close(w, want_w, 1e-5, "weights");
  }
}

TEST(MoeRoute, BiasOnlyAffectsSelection) {
  // Expert 2 has the lowest score but a huge bias: it is picked first, yet weighs by its own score.
  const Vec x = {1.0f}, gate = {1.0f, 2.0f, -4.0f, 0.5f};
  const Vec bias = {0.0f, 0.0f, 100.0f, 0.0f};
  MoeRouteArgs a = route_args(1, 1, 4, 2, x, gate);
  a.bias = bias.data();
  Vec w(2);
  std::vector<int32_t> idx(2);
  moe_route(a, w.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{2, 1}));
  const double s2 = std::sqrt(std::log1p(std::exp(-4.0))), s1 = std::sqrt(std::log1p(std::exp(2.0)));
  EXPECT_NEAR(w[0], s2 / (s1 + s2), 1e-6);
  EXPECT_NEAR(w[1], s1 / (s1 + s2), 1e-6);
}

TEST(MoeRoute, TiesGoToTheLowerExpert) {
  const Vec x = {1.0f, 1.0f}, gate = {0, 0, 1, 1, 0, 0, 1, 1, 2, 0};  // experts 1 and 3 tie, 4 ties them too
  MoeRouteArgs a = route_args(1, 2, 5, 3, x, gate);
  Vec w(3);
  std::vector<int32_t> idx(3);
  moe_route(a, w.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 3, 4}));
}

TEST(MoeRoute, HashRoutingUsesTheTable) {
  Rng rng(21);
  const int rows = 3, dim = 8, E = 6, K = 2;
  const Vec x = rng.normal(size_t(rows) * dim), gate = rng.normal(size_t(E) * dim), bias = rng.normal(E, 10.0);
  const std::vector<int32_t> tid2eid = {0, 1, 5, 2, 3, 4, 4, 0};  // vocab 4
  const std::vector<int32_t> ids = {2, 0, 3};
  MoeRouteArgs a = route_args(rows, dim, E, K, x, gate);
  a.tid2eid = tid2eid.data();
  a.ids = ids.data();
  a.bias = bias.data();  // ignored: the table decides
  Vec w(size_t(rows) * K);
  std::vector<int32_t> idx(size_t(rows) * K);
  moe_route(a, w.data(), idx.data());
  DVec want_w;
  for (int r = 0; r < rows; ++r) {
    DVec s(K);
    for (int t = 0; t < K; ++t) {
      const int e = tid2eid[size_t(ids[r]) * K + t];
      EXPECT_EQ(idx[size_t(r) * K + t], e);
      double l = 0.0;
      for (int d = 0; d < dim; ++d) l += double(x[size_t(r) * dim + d]) * gate[size_t(e) * dim + d];
      s[t] = std::sqrt(std::log1p(std::exp(l)));
    }
    for (int t = 0; t < K; ++t) want_w.push_back(s[t] / (s[0] + s[1]));
  }
  expect_close(w, want_w, 1e-5, "hash weights");
}

// Float64 SwiGLU expert: w2 . (silu(min(w1 x, L)) * clamp(w3 x, -L, L)), clamps off for L <= 0.
DVec expert64(const float* x, int dim, int inter, const Vec& w1, const Vec& w2, const Vec& w3, double L,
              int* clamped = nullptr) {
  DVec h(inter), y(dim);
  for (int f = 0; f < inter; ++f) {
    double g = 0.0, u = 0.0;
    for (int d = 0; d < dim; ++d) g += double(x[d]) * w1[size_t(f) * dim + d], u += double(x[d]) * w3[size_t(f) * dim + d];
    if (L > 0) {
      if (clamped) *clamped += (g > L) + (std::fabs(u) > L);
      g = std::min(g, L);
      u = std::clamp(u, -L, L);
    }
    h[f] = g / (1.0 + std::exp(-g)) * u;
  }
  for (int d = 0; d < dim; ++d)
    for (int f = 0; f < inter; ++f) y[d] += double(w2[size_t(d) * inter + f]) * h[f];
  return y;
}

TEST(SwigluMlp, MatchesFloat64WithAndWithoutClamp) {
  Rng rng(22);
  const int rows = 4, dim = 16, inter = 24;
  const Vec x = rng.normal(size_t(rows) * dim), w1 = rng.normal(size_t(inter) * dim, 0.5),
            w3 = rng.normal(size_t(inter) * dim, 0.5), w2 = rng.normal(size_t(dim) * inter, 0.3);
  for (float limit : {0.0f, 1.0f}) {
    Vec y(size_t(rows) * dim);
    swiglu_mlp(x.data(), rows, dim, inter, w1.data(), w2.data(), w3.data(), limit, y.data());
    DVec want;
    int clamped = 0;
    for (int r = 0; r < rows; ++r) {
      const DVec yr = expert64(&x[size_t(r) * dim], dim, inter, w1, w2, w3, limit, &clamped);
      want.insert(want.end(), yr.begin(), yr.end());
    }
    if (limit > 0) {
      EXPECT_GT(clamped, 20) << "the clamp must actually bite in this test";
    }
    expect_close(y, want, 1e-5, "swiglu");
  }
}

TEST(MoeExperts, MatchesFloat64AndIsRowCountInvariant) {
  Rng rng(23);
  const int rows = 7, dim = 16, inter = 12, E = 5, K = 2;
  const float limit = 1.5f;
  std::vector<Vec> w1, w2, w3;
  std::vector<const float*> p1, p2, p3;
  for (int e = 0; e < E; ++e) {
    w1.push_back(rng.normal(size_t(inter) * dim, 0.5));
    w2.push_back(rng.normal(size_t(dim) * inter, 0.3));
    w3.push_back(rng.normal(size_t(inter) * dim, 0.5));
  }
  for (int e = 0; e < E; ++e) p1.push_back(w1[e].data()), p2.push_back(w2[e].data()), p3.push_back(w3[e].data());
  const Vec x = rng.normal(size_t(rows) * dim), weights = rng.uniform(size_t(rows) * K, 0.1, 1.0);
  std::vector<int32_t> idx;
  for (int r = 0; r < rows; ++r) {
    const int a = rng.integer(0, E - 1), b = (a + rng.integer(1, E - 1)) % E;
    idx.push_back(a), idx.push_back(b);
  }
  Vec y(size_t(rows) * dim);
  moe_experts(x.data(), rows, dim, inter, p1.data(), p2.data(), p3.data(), E, weights.data(), idx.data(), K, limit,
              y.data());
  DVec want(y.size());
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < K; ++t) {
      const int e = idx[size_t(r) * K + t];
      const DVec o = expert64(&x[size_t(r) * dim], dim, inter, w1[e], w2[e], w3[e], limit);
      for (int d = 0; d < dim; ++d) want[size_t(r) * dim + d] += weights[size_t(r) * K + t] * o[d];
    }
  expect_close(y, want, 1e-5, "experts");
  // Each row alone gives the same bits as inside the 7-row batch.
  Vec alone(y.size());
  for (int r = 0; r < rows; ++r)
    moe_experts(&x[size_t(r) * dim], 1, dim, inter, p1.data(), p2.data(), p3.data(), E, &weights[size_t(r) * K],
                &idx[size_t(r) * K], K, limit, &alone[size_t(r) * dim]);
  expect_bit_identical(alone, y, "row alone vs batch");
}

}  // namespace
}  // namespace smelt::kernels
