// Mixture-of-experts routing and expert FFNs (DeepSeek-V4: sqrtsoftplus scores, correction bias,
// hash routing, SwiGLU with clamps).
#pragma once
#include <cstdint>

namespace smelt::kernels {

enum class Scoring { SqrtSoftplus, Softmax, Sigmoid };

struct MoeRouteArgs {
  int rows = 0;
  int dim = 0;
  int n_experts = 0;
  int topk = 0;
  Scoring scoring = Scoring::SqrtSoftplus;
  bool norm_topk_prob = true;
  float route_scale = 1.f;
  const float* x = nullptr;        // [rows, dim]
  const float* gate = nullptr;     // [n_experts, dim]
  const float* bias = nullptr;     // [n_experts] selection-only correction bias, or nullptr
  const int32_t* tid2eid = nullptr;  // [vocab, topk] hash routing table, or nullptr
  const int32_t* ids = nullptr;    // [rows] token ids (hash routing)
};

// weights [rows, topk], idx [rows, topk]. Top-k ties go to the lower expert index.
void moe_route(const MoeRouteArgs& a, float* weights, int32_t* idx);

// y = (silu(min(x w1^T, limit)) * clamp(x w3^T, -limit, limit)) w2^T; limit <= 0 disables both clamps.
void swiglu_mlp(const float* x, int rows, int dim, int inter, const float* w1, const float* w2, const float* w3,
                float limit, float* y);

// y[r] = sum_i weights[r,i] * expert_{idx[r,i]}(x[r]); w1/w2/w3 are per-expert pointer arrays.
void moe_experts(const float* x, int rows, int dim, int inter, const float* const* w1, const float* const* w2,
                 const float* const* w3, int n_experts, const float* weights, const int32_t* idx, int topk,
                 float limit, float* y);

}  // namespace smelt::kernels
