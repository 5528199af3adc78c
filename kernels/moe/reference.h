// Mixture-of-experts routing and expert FFNs (DeepSeek-V4: sqrtsoftplus scores, correction bias,
// hash routing, SwiGLU with clamps).
#pragma once
#include <cstdint>

#include "kernels/linear/reference.h"

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
  float gate_temp = 1.f;           // V4.1: logits divided by it before scoring (1 = V4, no division)
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

// y[r] = sum_i weights[r,i] * expert_{idx[r,i]}(x[r]); w1/w2/w3 are per-expert pointer arrays. With
// expert_begin (expert-parallel plans) the arrays hold experts expert_begin .. expert_begin+n_experts-1 and
// rows routed to other experts get nothing from them (both kernels below).
void moe_experts(const float* x, int rows, int dim, int inter, const float* const* w1, const float* const* w2,
                 const float* const* w3, int n_experts, const float* weights, const int32_t* idx, int topk,
                 float limit, float* y, int expert_begin = 0);

// ---- V4.1 (official inference code `Expert` / `MoE.forward`) ------------------------------------------
// model_numerics false (smelt-numerics{mode=fp32}): no activation quantization and no bf16 rounding below.
// One expert on quantized weights (w1/w3 [inter, dim], w2 [dim, inter]; routed experts FP4, the shared
// expert FP8 with 32x32 blocks), every linear with FP8 activation quantization:
//   g = bf16(x w1^T), u = bf16(x w3^T) (the GEMMs' bf16 outputs, then fp32);
//   limit > 0: u = clamp(u, -limit, limit), g = min(g, limit);
//   a = silu(g) * u in fp32; routed: a = routing_weight * a (fp32); a = bf16(a); y = bf16(a w2^T).

// Shared expert: y [rows, dim] (bf16 values).
void swiglu_mlp_v41(const float* x, int rows, int dim, int inter, const QuantWeight& w1, const QuantWeight& w2,
                    const QuantWeight& w3, float limit, float* y, bool model_numerics = true);

// Routed experts: y[r] = fp32 sum of expert outputs (each bf16, weighted before w2 as above) in ascending
// expert order, starting from 0. Not rounded: the reference adds the shared expert's bf16 output in fp32
// and rounds the total to bf16 (the caller's `add` with round). w1/w2/w3 are per-expert arrays.
void moe_experts_v41(const float* x, int rows, int dim, int inter, const QuantWeight* w1, const QuantWeight* w2,
                     const QuantWeight* w3, int n_experts, const float* weights, const int32_t* idx, int topk,
                     float limit, float* y, bool model_numerics = true, int expert_begin = 0);

}  // namespace smelt::kernels
