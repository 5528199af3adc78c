#include "kernels/hc/reference.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/common.h"

namespace smelt::kernels {

namespace {

// m[o] = fn[o] . (z * rsqrt(mean(z^2) + eps)) for the n*dim values z of one stream row.
void mix_logits(const float* z, int len, const float* fn, int outs, float norm_eps, float* flat, float* m) {
  const float r = detail::rms_scale(detail::mean_square(z, len), norm_eps);
  for (int i = 0; i < len; ++i) flat[i] = z[i] * r;
  for (int o = 0; o < outs; ++o) m[o] = detail::dot(flat, fn + int64_t(o) * len, len);
}

// pre / post / Sinkhorn comb of one row from its (2+n)*n mix logits m.
void split_sinkhorn(const float* m, int n, const float* base, const float* scale, int sinkhorn_iters, float hc_eps,
                    float* pr, float* po, float* c, float* colsum) {
  for (int i = 0; i < n; ++i) {
    pr[i] = detail::sigmoid(m[i] * scale[0] + base[i]) + hc_eps;
    po[i] = 2.0f * detail::sigmoid(m[n + i] * scale[1] + base[n + i]);
  }
  // comb[a][k]: softmax over k for each a, + eps, then Sinkhorn starting with a column pass.
  for (int a = 0; a < n; ++a) {
    float* row = c + a * n;
    for (int k = 0; k < n; ++k) row[k] = m[2 * n + a * n + k] * scale[2] + base[2 * n + a * n + k];
    float mx = row[0];
    for (int k = 1; k < n; ++k) mx = std::fmax(mx, row[k]);
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - mx));
    for (int k = 0; k < n; ++k) row[k] = row[k] / sum + hc_eps;
  }
  auto normalise_columns = [&] {
    for (int k = 0; k < n; ++k) colsum[k] = 0.0f;
    for (int a = 0; a < n; ++a)
      for (int k = 0; k < n; ++k) colsum[k] += c[a * n + k];
    for (int a = 0; a < n; ++a)
      for (int k = 0; k < n; ++k) c[a * n + k] /= colsum[k] + hc_eps;
  };
  auto normalise_rows = [&] {
    for (int a = 0; a < n; ++a) {
      float s = 0.0f;
      for (int k = 0; k < n; ++k) s += c[a * n + k];
      for (int k = 0; k < n; ++k) c[a * n + k] /= s + hc_eps;
    }
  };
  normalise_columns();
  for (int it = 1; it < sinkhorn_iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
}

}  // namespace

void hc_mix(const float* X, int rows, int n, int dim, const float* fn, const float* base, const float* scale,
            int sinkhorn_iters, float hc_eps, float norm_eps, float* pre, float* post, float* comb) {
  const int len = n * dim, outs = (2 + n) * n;
  std::vector<float> flat(len), m(outs), colsum(n);
  for (int r = 0; r < rows; ++r) {
    mix_logits(X + int64_t(r) * len, len, fn, outs, norm_eps, flat.data(), m.data());
    split_sinkhorn(m.data(), n, base, scale, sinkhorn_iters, hc_eps, pre + int64_t(r) * n, post + int64_t(r) * n,
                   comb + int64_t(r) * n * n, colsum.data());
  }
}

void hc_mix_v41(const float* X, int rows, int n, int dim, const float* fn, const float* base, const float* scale,
                int sinkhorn_iters, float hc_eps, float norm_eps, float* pre, float* post, float* comb) {
  const int len = n * dim, outs = (2 + n) * n;
  std::vector<float> m(outs), colsum(n);
  for (int r = 0; r < rows; ++r) {
    const float* z = X + int64_t(r) * len;
    const float rs = detail::rms_scale(detail::mean_square(z, len), norm_eps);
    for (int o = 0; o < outs; ++o) m[o] = detail::dot_exact(z, fn + int64_t(o) * len, len) * rs;
    split_sinkhorn(m.data(), n, base, scale, sinkhorn_iters, hc_eps, pre + int64_t(r) * n, post + int64_t(r) * n,
                   comb + int64_t(r) * n * n, colsum.data());
  }
}

void hc_collapse(const float* X, const float* pre, int rows, int n, int dim, float* u) {
  for (int r = 0; r < rows; ++r) {
    const float* x = X + int64_t(r) * n * dim;
    float* o = u + int64_t(r) * dim;
    if (!pre) {  // V4.1's one-hot initial pre: copy 0
      for (int d = 0; d < dim; ++d) o[d] = x[d];
      continue;
    }
    const float* p = pre + int64_t(r) * n;
    for (int d = 0; d < dim; ++d) {
      float s = 0.0f;
      for (int c = 0; c < n; ++c) s += p[c] * x[int64_t(c) * dim + d];
      o[d] = s;
    }
  }
}

void hc_mean(const float* X, int rows, int n, int dim, float* m, bool bf16) {
  for (int r = 0; r < rows; ++r) {
    const float* x = X + int64_t(r) * n * dim;
    for (int d = 0; d < dim; ++d) {
      float s = 0.0f;
      for (int c = 0; c < n; ++c) s += x[int64_t(c) * dim + d];
      m[int64_t(r) * dim + d] = round_bf16_if(bf16, s / float(n));
    }
  }
}

void hc_expand(const float* X, const float* y, const float* post, const float* comb, int rows, int n, int dim,
               float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* x = X + int64_t(r) * n * dim;
    const float* yr = y + int64_t(r) * dim;
    const float* po = post + int64_t(r) * n;
    const float* c = comb + int64_t(r) * n * n;
    for (int k = 0; k < n; ++k) {
      float* o = out + (int64_t(r) * n + k) * dim;
      for (int d = 0; d < dim; ++d) {
        // comb is applied transposed: stream k gathers sum_a comb[a][k] * X[a].
        float s = 0.0f;
        for (int a = 0; a < n; ++a) s += c[a * n + k] * x[int64_t(a) * dim + d];
        o[d] = po[k] * yr[d] + s;
      }
    }
  }
}

void hc_head(const float* X, int rows, int n, int dim, const float* fn, const float* base, const float* scale,
             float hc_eps, float norm_eps, float* out) {
  const int len = n * dim;
  std::vector<float> flat(len), m(n), pre(n);
  for (int r = 0; r < rows; ++r) {
    mix_logits(X + int64_t(r) * len, len, fn, n, norm_eps, flat.data(), m.data());
    for (int c = 0; c < n; ++c) pre[c] = detail::sigmoid(m[c] * scale[0] + base[c]) + hc_eps;
    hc_collapse(X + int64_t(r) * len, pre.data(), 1, n, dim, out + int64_t(r) * dim);
  }
}

}  // namespace smelt::kernels
