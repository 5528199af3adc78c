// The cpu handlers of smelt.concat and the DeepSeek-V4.1 DSpark ops (docs/ops.md, section DSpark), which the
// dspark_draft program runs. Plan validation (op_checks.cc) has checked the widths; the handlers check the
// values that arrive at run time (the block's input id, the position) before they use them.
#include <cstring>

#include "kernels/dspark/reference.h"
#include "runtime/cpu/backend.h"

namespace smelt::runtime::cpu {

namespace {

[[noreturn]] void fail(const PreparedOp& p, const std::string& msg) { p.plan->fail(*p.ref, msg); }

void run_concat(const PreparedOp& p, const ExecContext& c) {
  const int64_t w = p.out_w[0];
  for (int64_t r = 0; r < c.rows; ++r) {
    float* y = p.out[0] + r * w;
    for (size_t k = 0; k < 4 && p.in[k]; ++k) {
      std::memcpy(y, p.in[k] + r * p.in_w[k], sizeof(float) * size_t(p.in_w[k]));
      y += p.in_w[k];
    }
  }
}

// The block's rows are positions p0 .. p0+rows-1 = t+1 .. t+B: the ring must hold the forward's KV of t.
void run_dspark_attention(const PreparedOp& p, const ExecContext& c) {
  if (c.p0 < 1)
    fail(p, "a draft block needs the main model's position t = p0 - 1 >= 0, got p0 = " + std::to_string(c.p0));
  kernels::dspark::DraftAttentionArgs a = p.dspark_attention;
  a.block = c.rows;
  a.t = c.p0 - 1;
  kernels::dspark::draft_attention(a, p.out[0]);
}

void run_dspark_head(const PreparedOp& p, const ExecContext& c) {
  const int64_t v = p.in_w[0];
  const int32_t id = p.in_i[2][0];  // row 0: the token the drafts continue
  if (id < 0 || id >= v) fail(p, "input token id " + std::to_string(id) + " is outside [0, " + std::to_string(v) + ")");
  std::memcpy(p.out[0], p.in[0], sizeof(float) * size_t(c.rows) * size_t(v));
  kernels::dspark::DraftHeadArgs a = p.dspark_head;
  a.block = c.rows;
  kernels::dspark::draft_head(a, id, p.in[1], p.out[0], p.out_i[1], p.out[2]);
}

}  // namespace

void prepare_op_dspark(const Plan& plan, const OpRef& op, PreparedOp& p) {
  switch (op.spec->kind) {
    case OpKind::Concat:
      p.run = run_concat;
      break;
    case OpKind::DsparkAttention: {
      p.run = run_dspark_attention;
      kernels::dspark::DraftAttentionArgs& a = p.dspark_attention;
      a.heads = int(op.i("heads"));
      a.head_dim = int(op.i("head_dim"));
      a.window = int(op.i("window"));
      a.scale = float(op.f("scale"));
      a.q = p.in[0];
      a.draft_kv = p.in[1];
      a.sink = p.w[0];
      a.ring = p.state[0];
      break;
    }
    case OpKind::DsparkHead: {
      p.run = run_dspark_head;
      kernels::dspark::DraftHeadArgs& a = p.dspark_head;
      a.vocab = int(p.in_w[0]);
      a.dim = int(p.in_w[1]);
      a.rank = int(plan.weight_shape(op.weights[0])[1]);
      a.markov_embed = p.w[0];
      a.markov_head = p.w[1];
      a.proj = p.w[2];
      break;
    }
    default:
      break;
  }
}

}  // namespace smelt::runtime::cpu
