#include "kernels/moe/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/common.h"
#include "kernels/linear/reference.h"

namespace smelt::kernels {

void moe_route(const MoeRouteArgs& a, float* weights, int32_t* idx) {
  const int E = a.n_experts, K = a.topk;
  std::vector<float> s(E), sel(E);
  std::vector<int32_t> order(E);
  for (int r = 0; r < a.rows; ++r) {
    const float* x = a.x + int64_t(r) * a.dim;
    for (int e = 0; e < E; ++e) s[e] = detail::dot(x, a.gate + int64_t(e) * a.dim, a.dim);
    if (a.gate_temp != 1.f)
      for (int e = 0; e < E; ++e) s[e] = s[e] / a.gate_temp;
    switch (a.scoring) {
      case Scoring::SqrtSoftplus:
        for (int e = 0; e < E; ++e) s[e] = std::sqrt(detail::softplus(s[e]));
        break;
      case Scoring::Sigmoid:
        for (int e = 0; e < E; ++e) s[e] = detail::sigmoid(s[e]);
        break;
      case Scoring::Softmax: {
        float mx = s[0], sum = 0.0f;
        for (int e = 1; e < E; ++e) mx = std::fmax(mx, s[e]);
        for (int e = 0; e < E; ++e) sum += (s[e] = std::exp(s[e] - mx));
        for (int e = 0; e < E; ++e) s[e] /= sum;
        break;
      }
    }
    int32_t* ri = idx + int64_t(r) * K;
    float* rw = weights + int64_t(r) * K;
    if (a.tid2eid) {
      // Hash layers: the experts are fixed per token id; the gate still provides their weights.
      std::memcpy(ri, a.tid2eid + int64_t(a.ids[r]) * K, sizeof(int32_t) * size_t(K));
    } else {
      // The correction bias steers which experts are picked, never how much they weigh.
      for (int e = 0; e < E; ++e) sel[e] = a.bias ? s[e] + a.bias[e] : s[e];
      for (int e = 0; e < E; ++e) order[e] = e;
      std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t u, int32_t v) {
        return sel[u] > sel[v] || (sel[u] == sel[v] && u < v);
      });
      std::memcpy(ri, order.data(), sizeof(int32_t) * size_t(K));
    }
    float sum = 0.0f;
    for (int t = 0; t < K; ++t) {
      rw[t] = ri[t] >= 0 && ri[t] < E ? s[ri[t]] : 0.0f;  // a bad table entry weighs nothing
      sum += rw[t];
    }
    for (int t = 0; t < K; ++t) {
      if (a.norm_topk_prob) rw[t] = rw[t] / (sum + 1e-20f);
      rw[t] = rw[t] * a.route_scale;
    }
  }
}

void swiglu_mlp(const float* x, int rows, int dim, int inter, const float* w1, const float* w2, const float* w3,
                float limit, float* y) {
  std::vector<float> g(size_t(rows) * inter), u(size_t(rows) * inter);
  linear(x, w1, g.data(), rows, dim, inter);
  linear(x, w3, u.data(), rows, dim, inter);
  for (size_t i = 0; i < g.size(); ++i) {
    float gi = g[i], ui = u[i];
    if (limit > 0.0f) {  // comparisons, not fmin/fmax, so a NaN stays visible as in torch.clamp
      gi = gi > limit ? limit : gi;
      ui = ui > limit ? limit : (ui < -limit ? -limit : ui);
    }
    g[i] = detail::silu(gi) * ui;
  }
  linear(g.data(), w2, y, rows, inter, dim);
}

void moe_experts(const float* x, int rows, int dim, int inter, const float* const* w1, const float* const* w2,
                 const float* const* w3, int n_experts, const float* weights, const int32_t* idx, int topk,
                 float limit, float* y, int expert_begin) {
  std::fill(y, y + int64_t(rows) * dim, 0.0f);
  std::vector<int64_t> hits;  // (row, slot) pairs routed to the current expert, as r * topk + t
  std::vector<float> xb, yb;
  // Experts in ascending order, so each row accumulates its experts in a fixed order (the oracle's too).
  for (int e = 0; e < n_experts; ++e) {
    hits.clear();
    for (int64_t rt = 0; rt < int64_t(rows) * topk; ++rt)
      if (idx[rt] == e + expert_begin) hits.push_back(rt);
    if (hits.empty()) continue;
    const int m = int(hits.size());
    xb.resize(size_t(m) * dim);
    yb.resize(size_t(m) * dim);
    for (int i = 0; i < m; ++i)
      std::memcpy(xb.data() + int64_t(i) * dim, x + (hits[i] / topk) * dim, sizeof(float) * size_t(dim));
    swiglu_mlp(xb.data(), m, dim, inter, w1[e], w2[e], w3[e], limit, yb.data());
    for (int i = 0; i < m; ++i) {
      float* yr = y + (hits[i] / topk) * dim;
      const float* o = yb.data() + int64_t(i) * dim;
      const float w = weights[hits[i]];
      for (int d = 0; d < dim; ++d) yr[d] += o[d] * w;
    }
  }
}

namespace {

// The reference's Expert.forward on `rows` gathered rows: y [rows, dim] (bf16 values). weights: one routing
// weight per row, or nullptr (shared expert).
void expert_v41(const float* x, int rows, int dim, int inter, const QuantWeight& w1, const QuantWeight& w2,
                const QuantWeight& w3, float limit, const float* weights, float* y, bool mn) {
  std::vector<float> g(size_t(rows) * inter), u(size_t(rows) * inter);
  linear_quant(x, rows, dim, inter, w1, mn, g.data(), /*bf16_out=*/mn);
  linear_quant(x, rows, dim, inter, w3, mn, u.data(), /*bf16_out=*/mn);
  for (int r = 0; r < rows; ++r)
    for (int f = 0; f < inter; ++f) {
      float gv = g[size_t(r) * inter + f], uv = u[size_t(r) * inter + f];
      if (limit > 0.0f) {
        uv = std::clamp(uv, -limit, limit);  // up: both sides
        gv = std::min(gv, limit);            // gate: from above only
      }
      float act = detail::silu(gv) * uv;
      if (weights) act = weights[r] * act;  // the routing weight before w2, in fp32
      g[size_t(r) * inter + f] = round_bf16_if(mn, act);
    }
  linear_quant(g.data(), rows, inter, dim, w2, mn, y, /*bf16_out=*/mn);
}

}  // namespace

void swiglu_mlp_v41(const float* x, int rows, int dim, int inter, const QuantWeight& w1, const QuantWeight& w2,
                    const QuantWeight& w3, float limit, float* y, bool model_numerics) {
  expert_v41(x, rows, dim, inter, w1, w2, w3, limit, nullptr, y, model_numerics);
}

void moe_experts_v41(const float* x, int rows, int dim, int inter, const QuantWeight* w1, const QuantWeight* w2,
                     const QuantWeight* w3, int n_experts, const float* weights, const int32_t* idx, int topk,
                     float limit, float* y, bool model_numerics, int expert_begin) {
  std::fill(y, y + int64_t(rows) * dim, 0.0f);
  std::vector<int> tok;
  std::vector<float> xs, ws, ys;
  // Expert by expert in ascending order, as MoE.forward: each token's sum gains its experts in that order.
  for (int e = 0; e < n_experts; ++e) {
    tok.clear();
    ws.clear();
    for (int r = 0; r < rows; ++r)
      for (int t = 0; t < topk; ++t)
        if (idx[int64_t(r) * topk + t] == e + expert_begin) {
          tok.push_back(r);
          ws.push_back(weights[int64_t(r) * topk + t]);
          break;
        }
    if (tok.empty()) continue;
    const int m = int(tok.size());
    xs.resize(size_t(m) * dim);
    ys.resize(size_t(m) * dim);
    for (int i = 0; i < m; ++i) std::memcpy(xs.data() + int64_t(i) * dim, x + int64_t(tok[i]) * dim, sizeof(float) * dim);
    expert_v41(xs.data(), m, dim, inter, w1[e], w2[e], w3[e], limit, ws.data(), ys.data(), model_numerics);
    for (int i = 0; i < m; ++i) {
      float* yr = y + int64_t(tok[i]) * dim;
      const float* ye = ys.data() + int64_t(i) * dim;
      for (int d = 0; d < dim; ++d) yr[d] += ye[d];
    }
  }
}

}  // namespace smelt::kernels
