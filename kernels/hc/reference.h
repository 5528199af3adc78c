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

// V4.1 (official inference code `hc_mixes` + `hc_split_sinkhorn`): the projection comes first and the
// RMS statistic multiplies its result, m = (fn . z) * rsqrt(mean(z^2) + norm_eps), all float32; the
// split, sigmoids and Sinkhorn are those of hc_mix (same order of operations). Same outputs as hc_mix.
void hc_mix_v41(const float* X, int rows, int n, int dim, const float* fn, const float* base, const float* scale,
                int sinkhorn_iters, float hc_eps, float norm_eps, float* pre, float* post, float* comb);

// u[r] = sum_c pre[r, c] * X[r, c, :], summed in copy order c = 0 .. n-1 in float32 (the reference's
// order; V4.1 rounds u to bf16 afterwards). pre == nullptr means the one-hot initial pre of V4.1
// (copy 0 weighted 1, the others 0): u = X[r, 0, :].
void hc_collapse(const float* X, const float* pre, int rows, int n, int dim, float* u);

// V4.1 DSpark target capture (`smelt.hc_mean`): m[r] = bf16((sum_c X[r, c, :]) / n), summed in copy order in
// float32, as torch's mean over the copies of a bf16 stream.
void hc_mean(const float* X, int rows, int n, int dim, float* m, bool bf16 = true);  // bf16 false: fp32 mean

// out[r, k, :] = post[r, k] * y[r, :] + sum_a comb[r, a*n + k] * X[r, a, :]. out must not alias X.
void hc_expand(const float* X, const float* y, const float* post, const float* comb, int rows, int n, int dim,
               float* out);

// V4 final collapse: pre = sigmoid((fn . normed z) * scale[0] + base) + hc_eps; out = sum_c pre[c] X[c].
void hc_head(const float* X, int rows, int n, int dim, const float* fn, const float* base, const float* scale,
             float hc_eps, float norm_eps, float* out);

}  // namespace smelt::kernels
