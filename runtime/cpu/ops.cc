// One handler per op of docs/ops.md: each calls its reference kernel with the pointers and attributes
// resolved at load. Plan validation has already checked every width, so handlers only check the values
// that arrive at run time (token ids, expert and pool indices) before they are used as indices.
#include <algorithm>
#include <cstring>

#include "kernels/embedding/reference.h"
#include "kernels/bf16.h"
#include "kernels/hc/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/rms_norm/reference.h"
#include "kernels/rope/reference.h"
#include "runtime/cpu/backend.h"

namespace smelt::runtime::cpu {

namespace {

[[noreturn]] void fail(const PreparedOp& p, const std::string& msg) { p.plan->fail(*p.ref, msg); }

// Values used as indices must lie in [lo, hi).
void check_indices(const PreparedOp& p, const int32_t* v, int64_t n, int64_t lo, int64_t hi, const char* what) {
  for (int64_t k = 0; k < n; ++k)
    if (v[k] < lo || v[k] >= hi)
      fail(p, std::string(what) + " " + std::to_string(v[k]) + " is outside [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + ")");
}

void run_embedding(const PreparedOp& p, const ExecContext& c) {
  check_indices(p, p.in_i[0], c.rows, 0, p.w_rows[0], "token id");
  kernels::embedding(p.in_i[0], c.rows, p.w[0], p.w_rows[0], int(p.out_w[0]), p.out[0]);
}

void run_hc_init(const PreparedOp& p, const ExecContext& c) {
  int64_t d = p.in_w[0];
  for (int r = 0; r < c.rows; ++r)
    for (int k = 0; k < p.hc_mult; ++k)
      std::memcpy(p.out[0] + (r * p.hc_mult + k) * d, p.in[0] + r * d, d * sizeof(float));
}

void run_hc_mix(const PreparedOp& p, const ExecContext& c) {
  kernels::hc_mix(p.in[0], c.rows, p.hc_mult, int(p.in_w[0] / p.hc_mult), p.w[0], p.w[1], p.w[2], p.sinkhorn_iters,
                  p.hc_eps, p.eps, p.out[0], p.out[1], p.out[2]);
}

void run_hc_mix_v41(const PreparedOp& p, const ExecContext& c) {
  kernels::hc_mix_v41(p.in[0], c.rows, p.hc_mult, int(p.in_w[0] / p.hc_mult), p.w[0], p.w[1], p.w[2],
                      p.sinkhorn_iters, p.hc_eps, p.eps, p.out[0], p.out[1], p.out[2]);
}

void run_hc_collapse(const PreparedOp& p, const ExecContext& c) {
  kernels::hc_collapse(p.in[0], p.in[1], c.rows, p.hc_mult, int(p.out_w[0]), p.out[0]);  // no pre: one-hot
  if (!p.w[0]) return;
  // The rms_norm smelt-fuse-hc-norm folded in: on the collapse rounded as `collapse_round` says (the op's `round`
  // is the norm's, applied to the output after this).
  if (p.collapse_round_bf16) kernels::round_bf16_inplace(p.out[0], size_t(c.rows) * size_t(p.out_w[0]));
  kernels::rms_norm(p.out[0], p.w[0], p.out[0], c.rows, int(p.out_w[0]), 1, p.eps);
}

void run_hc_expand(const PreparedOp& p, const ExecContext& c) {
  kernels::hc_expand(p.in[0], p.in[1], p.in[2], p.in[3], c.rows, p.hc_mult, int(p.in_w[1]), p.out[0]);
}

void run_hc_head(const PreparedOp& p, const ExecContext& c) {
  kernels::hc_head(p.in[0], c.rows, p.hc_mult, int(p.out_w[0]), p.w[0], p.w[1], p.w[2], p.hc_eps, p.eps, p.out[0]);
}

void run_rms_norm(const PreparedOp& p, const ExecContext& c) {
  kernels::rms_norm(p.in[0], p.w[0], p.out[0], c.rows, int(p.in_w[0]), p.groups, p.eps);
}

void run_linear(const PreparedOp& p, const ExecContext& c) {
  if (p.qw.weight)
    kernels::linear_quant(p.in[0], c.rows, int(p.in_w[0]), int(p.out_w[0]), p.qw, p.act_quant, p.out[0]);
  else
    kernels::linear(p.in[0], p.w[0], p.out[0], c.rows, int(p.in_w[0]), int(p.out_w[0]));
  if (p.scale_after != 1.f)
    for (int64_t k = 0, n = c.rows * p.out_w[0]; k < n; ++k) p.out[0][k] *= p.scale_after;
}

void run_grouped_linear(const PreparedOp& p, const ExecContext& c) {
  kernels::grouped_linear(p.in[0], p.w[0], p.out[0], c.rows, p.groups, int(p.in_w[0] / p.groups),
                          int(p.out_w[0] / p.groups));
}

void run_rope(const PreparedOp& p, const ExecContext& c) {
  if (p.out[0] != p.in[0]) std::memcpy(p.out[0], p.in[0], c.rows * p.in_w[0] * sizeof(float));
  kernels::rope(p.out[0], c.rows, p.heads, p.head_dim, p.rope_dim, p.inv_freq.data(), c.positions, p.inverse);
}

void run_window_kv_update(const PreparedOp& p, const ExecContext& c) {
  kernels::window_kv_update(p.in[0], c.rows, int(p.in_w[0]), c.p0, p.state[0], p.window);
}

void run_compressor(const PreparedOp& p, const ExecContext& c) {
  kernels::compressor(p.compressor, p.in[0], c.rows, c.p0, p.state[0], p.state[1], p.state_rows[1]);
}

void run_indexer_topk(const PreparedOp& p, const ExecContext& c) {
  kernels::IndexerArgs a = p.indexer;
  a.rows = c.rows;
  a.p0 = c.p0;
  kernels::indexer_topk(a, p.out_i[0]);
}

void run_sparse_attention(const PreparedOp& p, const ExecContext& c) {
  kernels::SparseAttentionArgs a = p.attention;
  a.rows = c.rows;
  a.p0 = c.p0;
  if (a.idx) check_indices(p, a.idx, int64_t(c.rows) * a.k, -1, p.state_rows[1], "compressed entry index");
  kernels::sparse_attention(a, p.out[0]);
}

void run_moe_route(const PreparedOp& p, const ExecContext& c) {
  kernels::MoeRouteArgs a = p.route;
  a.rows = c.rows;
  if (a.tid2eid) check_indices(p, a.ids, c.rows, 0, p.w_rows[2], "token id (hash routing)");
  kernels::moe_route(a, p.out[0], p.out_i[1]);
}

void run_moe_experts(const PreparedOp& p, const ExecContext& c) {
  // An expert-parallel rank holds experts expert_begin .. +n_experts; the route names any expert of the model.
  check_indices(p, p.in_i[2], int64_t(c.rows) * p.topk, 0, p.n_routed, "expert index");
  if (!p.q1.empty())
    kernels::moe_experts_v41(p.in[0], c.rows, int(p.in_w[0]), p.inter, p.q1.data(), p.q2.data(), p.q3.data(),
                             p.n_experts, p.in[1], p.in_i[2], p.topk, p.limit, p.out[0], p.model_numerics,
                             p.expert_begin);
  else
    kernels::moe_experts(p.in[0], c.rows, int(p.in_w[0]), p.inter, p.w1.data(), p.w2.data(), p.w3.data(),
                         p.n_experts, p.in[1], p.in_i[2], p.topk, p.limit, p.out[0], p.expert_begin);
}

void run_swiglu_mlp(const PreparedOp& p, const ExecContext& c) {
  if (!p.q1.empty())
    kernels::swiglu_mlp_v41(p.in[0], c.rows, int(p.in_w[0]), p.inter, p.q1[0], p.q2[0], p.q3[0], p.limit, p.out[0],
                            p.model_numerics);
  else
    kernels::swiglu_mlp(p.in[0], c.rows, int(p.in_w[0]), p.inter, p.w[0], p.w[1], p.w[2], p.limit, p.out[0]);
}

void run_add(const PreparedOp& p, const ExecContext& c) {
  int64_t n = c.rows * p.in_w[0];
  for (int64_t k = 0; k < n; ++k) p.out[0][k] = p.in[0][k] + p.in[1][k];
}

}  // namespace

std::vector<float> inv_freq(const OpRef& op, bool v41) {
  kernels::RopeParams r;
  r.rope_dim = int(op.i("rope_dim"));
  r.theta = op.f("theta");
  r.yarn_factor = op.f("yarn_factor");
  r.yarn_beta_fast = op.f("yarn_beta_fast");
  r.yarn_beta_slow = op.f("yarn_beta_slow");
  r.yarn_original_max_pos = double(op.i("yarn_original_max_pos"));
  return v41 ? kernels::rope_inv_freq_v41(r) : kernels::rope_inv_freq(r);
}

namespace {

kernels::Scoring scoring(const std::string& s) {
  if (s == "softmax") return kernels::Scoring::Softmax;
  if (s == "sigmoid") return kernels::Scoring::Sigmoid;
  return kernels::Scoring::SqrtSoftplus;
}

}  // namespace

void prepare_op(const Plan& plan, const OpRef& op, PreparedOp& p) {
  if (is_collective(op.spec->kind)) return prepare_op_collective(plan, op, p);
  switch (op.spec->kind) {
    case OpKind::Embedding:
      p.run = run_embedding;
      break;
    case OpKind::HcInit:
      p.run = run_hc_init;
      p.hc_mult = int(op.i("hc_mult"));
      break;
    case OpKind::HcMix:
      p.run = op.s("variant") == "v41" ? run_hc_mix_v41 : run_hc_mix;
      p.hc_mult = int(op.i("hc_mult"));
      p.sinkhorn_iters = int(op.i("sinkhorn_iters"));
      p.hc_eps = float(op.f("hc_eps"));
      p.eps = float(op.f("norm_eps"));
      break;
    case OpKind::HcCollapse:
      p.run = run_hc_collapse;
      p.hc_mult = int(op.i("hc_mult"));
      p.eps = float(op.f("norm_eps"));
      p.collapse_round_bf16 = op.s("collapse_round") == "bf16";
      break;
    case OpKind::HcExpand:
      p.run = run_hc_expand;
      p.hc_mult = int(op.i("hc_mult"));
      break;
    case OpKind::HcHead:
      p.run = run_hc_head;
      p.hc_mult = int(op.i("hc_mult"));
      p.hc_eps = float(op.f("hc_eps"));
      p.eps = float(op.f("norm_eps"));
      break;
    case OpKind::RmsNorm:
      p.run = run_rms_norm;
      p.groups = int(op.i("groups"));
      p.eps = float(op.f("eps"));
      break;
    case OpKind::Linear:
      p.run = run_linear;
      prepare_op_v41(plan, op, p);  // quantized weight, act_quant, scale_after
      break;
    case OpKind::GroupedLinear:
      p.run = run_grouped_linear;
      p.groups = int(op.i("groups"));
      prepare_op_v41(plan, op, p);  // an FP8 weight is dequantized here, once
      break;
    case OpKind::Rope:
      p.run = run_rope;
      p.heads = int(op.i("heads"));
      p.head_dim = int(op.i("head_dim"));
      p.rope_dim = int(op.i("rope_dim"));
      p.inverse = op.i("inverse") != 0;
      p.inv_freq = inv_freq(op, op.s("variant") == "v41");
      break;
    case OpKind::WindowKvUpdate:
      p.run = run_window_kv_update;
      p.window = int(op.i("window"));
      break;
    case OpKind::Compressor: {
      p.run = run_compressor;
      p.inv_freq = inv_freq(op, false);
      kernels::CompressorArgs& a = p.compressor;
      a.ratio = int(op.i("ratio"));
      a.head_dim = int(op.i("head_dim"));
      a.overlap = op.i("overlap") != 0;
      a.in_dim = int(p.in_w[0]);
      a.wkv = p.w[0];
      a.wgate = p.w[1];
      a.ape = p.w[2];
      a.norm = p.w[3];
      a.eps = float(op.f("eps"));
      a.rope_dim = int(op.i("rope_dim"));
      a.inv_freq = p.inv_freq.data();
      break;
    }
    case OpKind::IndexerTopk: {
      p.run = run_indexer_topk;
      kernels::IndexerArgs& a = p.indexer;
      a.heads = int(op.i("heads"));
      a.head_dim = int(op.i("head_dim"));
      a.ratio = int(op.i("ratio"));
      a.topk = int(op.i("topk"));
      a.q = p.in[0];
      a.w = p.in[1];
      a.keys = p.state[0];
      break;
    }
    case OpKind::SparseAttention: {
      p.run = run_sparse_attention;
      kernels::SparseAttentionArgs& a = p.attention;
      a.heads = int(op.i("heads"));
      a.head_dim = int(op.i("head_dim"));
      a.scale = float(op.f("scale"));
      a.q = p.in[0];
      a.chunk_kv = p.in[1];
      a.idx = p.in_i[2];
      a.k = p.in_i[2] ? int(p.in_w[2]) : 0;
      a.sink = p.w[0];
      a.ring = p.state[0];
      a.window = int(op.i("window"));
      a.ratio = int(op.i("ratio"));
      a.pool = p.state[1];
      a.numerics_v41 = op.s("numerics") == "v41";
      break;
    }
    case OpKind::MoeRoute: {
      p.run = run_moe_route;
      kernels::MoeRouteArgs& a = p.route;
      a.dim = int(p.in_w[0]);
      a.n_experts = int(p.w_rows[0]);
      a.topk = int(op.i("topk"));
      a.scoring = scoring(op.s("scoring"));
      a.norm_topk_prob = op.i("norm_topk_prob") != 0;
      a.route_scale = float(op.f("route_scale"));
      a.x = p.in[0];
      a.ids = p.in_i[1];
      a.gate = p.w[0];
      a.bias = p.w[1];
      a.tid2eid = p.w_i[2];
      // The hash table is data: its expert ids are checked once here, not per token.
      if (a.tid2eid) {
        int64_t n = p.w_rows[2] * a.topk;
        for (int64_t k = 0; k < n; ++k)
          if (a.tid2eid[k] < 0 || a.tid2eid[k] >= a.n_experts)
            plan.fail(op, "tid2eid holds expert " + std::to_string(a.tid2eid[k]) + " at element " + std::to_string(k) +
                              ", outside [0, " + std::to_string(a.n_experts) + ")");
      }
      break;
    }
    case OpKind::MoeExperts:
      p.run = run_moe_experts;
      p.n_experts = int(op.i("n_experts"));
      p.expert_begin = int(op.i("expert_begin"));
      p.n_routed = int(op.i("n_routed") ? op.i("n_routed") : op.i("n_experts"));
      p.topk = int(op.i("topk"));
      p.limit = float(op.f("swiglu_limit"));
      p.inter = int(plan.weight_shape(op.weights[0])[0]);
      break;
    case OpKind::SwigluMlp:
      p.run = run_swiglu_mlp;
      p.limit = float(op.f("swiglu_limit"));
      p.inter = int(p.w_rows[0]);
      prepare_op_v41(plan, op, p);  // quantized weights
      break;
    case OpKind::Add:
      p.run = run_add;
      break;
    default:
      prepare_op_v41(plan, op, p);
      break;
  }
}

}  // namespace smelt::runtime::cpu
