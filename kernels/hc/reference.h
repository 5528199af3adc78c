// Manifold-constrained hyper-connections (mHC): the n-copy residual stream of DeepSeek-V4.
#pragma once

namespace smelt::kernels {

// m = fn . (z * rsqrt(mean(z^2) + norm_eps)) with z = X row (n*dim values), then
// pre = sigmoid(m[0:n]*scale[0] + base[0:n]) + hc_eps; post = 2*sigmoid(m[n:2n]*scale[1] + base[n:2n]);
// comb[a][k] = m[2n + a*n + k]*scale[2] + base[...]; softmax over k, + hc_eps; column-normalise;
// then (iters-1) x (row-normalise, column-normalise), each with + hc_eps in the divisor.
// Outputs: pre [rows, n], post [rows, n], comb [rows, n*n] (comb[a*n + k]).
void hc_mix(const float* X, int rows, int n, int dim, const float* fn, const float* base, const float* scale,
            int sinkhorn_iters, float hc_eps, float norm_eps, float* pre, float* post, float* comb);

// u[r] = sum_c pre[r, c] * X[r, c, :]
void hc_collapse(const float* X, const float* pre, int rows, int n, int dim, float* u);

// out[r, k, :] = post[r, k] * y[r, :] + sum_a comb[r, a*n + k] * X[r, a, :]. out must not alias X.
void hc_expand(const float* X, const float* y, const float* post, const float* comb, int rows, int n, int dim,
               float* out);

// V4 final collapse: pre = sigmoid((fn . normed z) * scale[0] + base) + hc_eps; out = sum_c pre[c] X[c].
void hc_head(const float* X, int rows, int n, int dim, const float* fn, const float* base, const float* scale,
             float hc_eps, float norm_eps, float* out);

}  // namespace smelt::kernels
