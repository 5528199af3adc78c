#include "kernels/hc/reference.h"

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Float64 mixing logits: m = fn . (z / sqrt(mean(z^2) + eps)).
DVec mix64(const float* z, int len, const Vec& fn, int outs, double eps) {
  double ms = 0.0;
  for (int i = 0; i < len; ++i) ms += double(z[i]) * z[i];
  const double r = 1.0 / std::sqrt(ms / len + eps);
  DVec m(outs);
  for (int o = 0; o < outs; ++o) {
    double s = 0.0;
    for (int i = 0; i < len; ++i) s += double(fn[size_t(o) * len + i]) * z[i] * r;
    m[o] = s;
  }
  return m;
}

struct Mix64 {
  DVec pre, post, comb;
};

Mix64 hc_mix64(const Vec& X, int rows, int n, int dim, const Vec& fn, const Vec& base, const Vec& scale, int iters,
               double hc_eps, double norm_eps) {
  Mix64 out;
  for (int r = 0; r < rows; ++r) {
    const DVec m = mix64(&X[size_t(r) * n * dim], n * dim, fn, (2 + n) * n, norm_eps);
    for (int i = 0; i < n; ++i) {
      out.pre.push_back(sigmoid64(m[i] * scale[0] + base[i]) + hc_eps);
      out.post.push_back(2 * sigmoid64(m[n + i] * scale[1] + base[n + i]));
    }
    // M[a][k]: softmax over k, + eps; then columns; then (iters - 1) x (rows, columns).
    std::vector<DVec> M(n, DVec(n));
    for (int a = 0; a < n; ++a) {
      double z = 0.0;
      for (int k = 0; k < n; ++k) z += std::exp(m[2 * n + a * n + k] * scale[2] + base[2 * n + a * n + k]);
      for (int k = 0; k < n; ++k)
        M[a][k] = std::exp(m[2 * n + a * n + k] * scale[2] + base[2 * n + a * n + k]) / z + hc_eps;
    }
    auto columns = [&] {
      for (int k = 0; k < n; ++k) {
        double s = 0.0;
        for (int a = 0; a < n; ++a) s += M[a][k];
        for (int a = 0; a < n; ++a) M[a][k] /= s + hc_eps;
      }
    };
    columns();
    for (int it = 1; it < iters; ++it) {
      for (int a = 0; a < n; ++a) {
        double s = 0.0;
        for (int k = 0; k < n; ++k) s += M[a][k];
        for (int k = 0; k < n; ++k) M[a][k] /= s + hc_eps;
      }
      columns();
    }
    for (int a = 0; a < n; ++a)
      for (int k = 0; k < n; ++k) out.comb.push_back(M[a][k]);
  }
  return out;
}

struct HcInputs {
  int rows = 3, n = 4, dim = 24;
  Vec X, fn, base, scale;
  explicit HcInputs(uint64_t seed, float comb_scale = 1.5f) {
    Rng rng(seed);
    X = rng.normal(size_t(rows) * n * dim, 2.0);
    // Scales chosen so the logits are O(1): sigmoid / softmax away from saturation, comb far from uniform.
    fn = rng.normal(size_t((2 + n) * n) * n * dim, 0.3);
    base = rng.normal(size_t((2 + n) * n), 0.5);
    scale = {0.8f, 1.2f, comb_scale};
  }
};

// Inputs to sigmoid/softmax come from float32 dots of length n*dim (~1e-6 relative); Sinkhorn divisions
// are contractive; 1e-5 relative leaves margin.
TEST(HcMix, MatchesFloat64) {
  HcInputs in(8);
  for (int iters : {1, 3, 20}) {
    Vec pre(in.rows * in.n), post(in.rows * in.n), comb(in.rows * in.n * in.n);
    hc_mix(in.X.data(), in.rows, in.n, in.dim, in.fn.data(), in.base.data(), in.scale.data(), iters, 1e-6f, 1e-6f,
           pre.data(), post.data(), comb.data());
    const Mix64 want = hc_mix64(in.X, in.rows, in.n, in.dim, in.fn, in.base, in.scale, iters, 1e-6, 1e-6);
    expect_close(pre, want.pre, 1e-5, "pre");
    expect_close(post, want.post, 1e-5, "post");
    expect_close(comb, want.comb, 1e-5, "comb");
  }
}

TEST(HcMix, CombIsNearlyDoublyStochasticAfterSinkhorn) {
  // Moderate comb logits (std ~1): Sinkhorn converges well within 20 passes. (Very peaked logits converge
  // more slowly; the float64 comparison above covers those.)
  HcInputs in(9, 0.3f);
  const int n = in.n;
  Vec pre(in.rows * n), post(in.rows * n), comb(in.rows * n * n);
  hc_mix(in.X.data(), in.rows, n, in.dim, in.fn.data(), in.base.data(), in.scale.data(), 20, 1e-6f, 1e-6f,
         pre.data(), post.data(), comb.data());
  for (int r = 0; r < in.rows; ++r) {
    const float* c = &comb[size_t(r) * n * n];
    for (int i = 0; i < n; ++i) {
      double row = 0.0, col = 0.0;
      for (int j = 0; j < n; ++j) row += c[i * n + j], col += c[j * n + i];
      EXPECT_NEAR(col, 1.0, 1e-5) << "column " << i;  // the last pass normalised columns (+eps: 1 - ~1e-6)
      EXPECT_NEAR(row, 1.0, 1e-3) << "row " << i;     // rows converge geometrically over 20 passes
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_GT(pre[r * n + i], 0.0f);
      EXPECT_LT(post[r * n + i], 2.0f);
    }
  }
}

TEST(HcCollapseExpandHead, MatchFloat64) {
  HcInputs in(10);
  const int rows = in.rows, n = in.n, dim = in.dim;
  Rng rng(11);
  const Vec pre = rng.uniform(size_t(rows) * n, 0.1, 1.0), post = rng.uniform(size_t(rows) * n, 0.0, 2.0);
  // A non-symmetric comb, so applying it untransposed would be caught.
  const Vec comb = rng.uniform(size_t(rows) * n * n, 0.0, 1.0), y = rng.normal(size_t(rows) * dim);

  Vec u(size_t(rows) * dim);
  hc_collapse(in.X.data(), pre.data(), rows, n, dim, u.data());
  DVec want_u(u.size());
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < dim; ++d)
      for (int c = 0; c < n; ++c) want_u[size_t(r) * dim + d] += double(pre[r * n + c]) * in.X[(size_t(r) * n + c) * dim + d];
  expect_close(u, want_u, 1e-5, "collapse");

  Vec out(in.X.size());
  hc_expand(in.X.data(), y.data(), post.data(), comb.data(), rows, n, dim, out.data());
  DVec want_x(out.size());
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < n; ++k)
      for (int d = 0; d < dim; ++d) {
        double s = double(post[r * n + k]) * y[size_t(r) * dim + d];
        for (int a = 0; a < n; ++a) s += double(comb[(size_t(r) * n + a) * n + k]) * in.X[(size_t(r) * n + a) * dim + d];
        want_x[(size_t(r) * n + k) * dim + d] = s;
      }
  expect_close(out, want_x, 1e-5, "expand");

  // hc_head: fn [n, n*dim], base [n], scale [1].
  const Vec fn = rng.normal(size_t(n) * n * dim, 0.3), base = rng.normal(n, 0.5), scale = {0.7f};
  Vec h(size_t(rows) * dim);
  hc_head(in.X.data(), rows, n, dim, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, h.data());
  DVec want_h(h.size());
  for (int r = 0; r < rows; ++r) {
    const DVec m = mix64(&in.X[size_t(r) * n * dim], n * dim, fn, n, 1e-6);
    for (int c = 0; c < n; ++c) {
      const double p = sigmoid64(m[c] * scale[0] + base[c]) + 1e-6;
      for (int d = 0; d < dim; ++d) want_h[size_t(r) * dim + d] += p * in.X[(size_t(r) * n + c) * dim + d];
    }
  }
  expect_close(h, want_h, 1e-5, "head");
}

TEST(HcMixAndHead, EpsFloorsPre) {
  // A very negative base drives sigmoid to 0, leaving pre = hc_eps exactly (too small to see otherwise).
  HcInputs in(24);
  const int rows = in.rows, n = in.n, dim = in.dim;
  const float hc_eps = 0.01f;
  Vec base = in.base;
  for (int i = 0; i < n; ++i) base[i] = -200.0f;
  Vec pre(size_t(rows) * n), post(size_t(rows) * n), comb(size_t(rows) * n * n);
  hc_mix(in.X.data(), rows, n, dim, in.fn.data(), base.data(), in.scale.data(), 2, hc_eps, 1e-6f, pre.data(),
         post.data(), comb.data());
  for (float p : pre) EXPECT_EQ(p, hc_eps);
  Rng rng(25);
  const Vec fn = rng.normal(size_t(n) * n * dim, 0.3), head_base(n, -200.0f), scale = {1.0f};
  Vec h(size_t(rows) * dim);
  hc_head(in.X.data(), rows, n, dim, fn.data(), head_base.data(), scale.data(), hc_eps, 1e-6f, h.data());
  DVec want(h.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < n; ++c)
      for (int d = 0; d < dim; ++d) want[size_t(r) * dim + d] += double(hc_eps) * in.X[(size_t(r) * n + c) * dim + d];
  expect_close(h, want, 1e-5, "head with pre = eps");
}

}  // namespace
}  // namespace smelt::kernels
