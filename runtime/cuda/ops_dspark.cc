// The cuda launchers of the DSpark drafter's ops (docs/ops.md, section DSpark), mirroring
// runtime/cpu/ops_dspark.cc. smelt.concat is in ops_v41.cc.
#include "runtime/cuda/ops_common.h"

namespace smelt::runtime::cuda::detail {

bool run_dspark(Ctx& c) {
  const OpLaunch& l = c.l;
  const OpRef& op = c.op();
  const int rows = l.rows;
  switch (op.spec->kind) {
    case OpKind::DsparkAttention: {
      // Ring slots 0 .. min(window, t+1)-1 then the block's own rows, V4.1 numerics (p0 = t + 1 >= 1 is the
      // caller's contract; the kernel reads p0 from the step).
      AttnArgs a{};
      a.q = l.in[0], a.chunk_kv = l.in[1], a.idx = 0, a.k = 0;
      a.sink = ptr(weight(l, 0)), a.sink_dt = float_dt(c, weight(l, 0), "sink");
      a.ring = l.state[0], a.R = int32_t(l.state_rows[0]), a.window = int32_t(op.i("window"));
      a.ratio = 0, a.pool = 0, a.pool_rows = 0;
      a.hd = int32_t(op.i("head_dim")), a.scale = float(op.f("scale"));
      a.v41 = 1, a.rb = model_rounding(op), a.dspark = 1;
      if (a.hd > 512) c.fail("head_dim exceeds the cuda attention kernel's 512");
      c.go("smelt_sparse_attention", unsigned(rows), unsigned(op.i("heads")), 1, 128, 0, a, l.step, rows, l.out[0]);
      return true;
    }
    case OpKind::DsparkHead: {
      const int V = int(l.in_w[0]), D = int(l.in_w[1]);
      const DeviceWeight *embed = weight(l, 0), *head = weight(l, 1), *proj = weight(l, 2);
      const int rank = embed && embed->shape.size() > 1 ? int(embed->shape[1]) : 0;
      for (int i = 0; i < rows; ++i) {
        c.go("smelt_dspark_bias", cdiv(V, 8), 1, 1, 256, 0, l.in[0], l.out[0], V, rank, l.in[2], l.out[1], i, ptr(embed),
             float_dt(c, embed, "markov_embed"), ptr(head), float_dt(c, head, "markov_head"));
        c.go("smelt_dspark_pick", 1, 1, 1, 1024, 0, l.out[0], V, D, rank, l.in[2], l.out[1], i, l.in[1], ptr(embed),
             float_dt(c, embed, "markov_embed"), ptr(proj), float_dt(c, proj, "proj"), l.out[2]);
      }
      return true;
    }
    default:
      return false;
  }
}

}  // namespace smelt::runtime::cuda::detail
