// A hand-built partitioned model for the runtime tests: embedding -> column-parallel w1 -> row-parallel w2 ->
// all_reduce -> residual add -> vocab-split head -> all_gather, optionally cut into two pipeline stages
// (send/recv of the residual stream). Every rank reads the same checkpoint through load transforms
// (rows(...) / cols(...)), exactly like a compiler-partitioned plan would.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/runtime/plan_builder.h"

namespace smelt::runtime::testing {

struct Mlp {
  static constexpr int V = 11, D = 6, F = 10;
  int embed, w1, w2, head;
  // The base tensors; every rank's builder declares them identically so the checkpoint bytes agree.
  explicit Mlp(PlanBuilder& b) {
    Uniform u(99);
    b.max_rows = 8;
    b.max_seq_len = 32;
    embed = b.weight("embed.weight", {V, D}, u.vec(V * D, -1, 1));
    w1 = b.weight("w1.weight", {F, D}, u.vec(F * D, -0.5, 0.5));
    w2 = b.weight("w2.weight", {D, F}, u.vec(D * F, -0.5, 0.5));
    head = b.weight("head.weight", {V, D}, u.vec(V * D, -0.5, 0.5));
  }

  // The unsplit plan.
  static void single(PlanBuilder& b) {
    Mlp m(b);
    b.token_ids = b.buffer("ids", 1, plan::DType::I32);
    int x = b.buffer("x", D), h = b.buffer("h", F), y = b.buffer("y", D), z = b.buffer("z", D);
    b.logits = b.buffer("logits", V);
    b.op({"smelt.embedding", -1, {b.token_ids}, {x}, {m.embed}, {}, {}});
    b.op({"smelt.linear", 0, {x}, {h}, {m.w1}, {}, {}});
    b.op({"smelt.linear", 0, {h}, {y}, {m.w2}, {}, {}});
    b.op({"smelt.add", 0, {x, y}, {z}, {}, {}, {}});
    b.op({"smelt.linear", -1, {z}, {b.logits}, {m.head}, {}, {}});
  }

  // Rank (stage, t) of a tp x pp split (pp 1 or 2): this rank's slice [f0, f1) of F and [v0, v1) of V.
  // `f_cuts` / `v_cuts` hold tp+1 boundaries each.
  static void rank(PlanBuilder& b, int tp, int pp, int stage, int t, const std::vector<int>& f_cuts,
                   const std::vector<int>& v_cuts) {
    Mlp m(b);
    std::vector<int64_t> group;
    for (int k = 0; k < tp; ++k) group.push_back(stage * tp + k);
    const int self = stage * tp + t;
    b.token_ids = b.buffer("ids", 1, plan::DType::I32);
    int z = b.buffer("z", D);
    if (stage == 0) {
      int f0 = f_cuts[size_t(t)], f1 = f_cuts[size_t(t) + 1];
      int w1 = b.transformed("w1.part", m.w1, "rows(" + std::to_string(f0) + ":" + std::to_string(f1) + ")", {f1 - f0, D});
      int w2 = b.transformed("w2.part", m.w2, "cols(" + std::to_string(f0) + ":" + std::to_string(f1) + ")", {D, f1 - f0});
      int x = b.buffer("x", D), h = b.buffer("h", f1 - f0), yp = b.buffer("y.partial", D), y = b.buffer("y", D);
      b.op({"smelt.embedding", -1, {b.token_ids}, {x}, {m.embed}, {}, {}});
      b.op({"smelt.linear", 0, {x}, {h}, {w1}, {}, {}});
      b.op({"smelt.linear", 0, {h}, {yp}, {w2}, {}, {}});
      b.op({"smelt.all_reduce", 0, {yp}, {y}, {}, {}, {N("group", group)}});
      b.op({"smelt.add", 0, {x, y}, {z}, {}, {}, {}});
      if (pp == 2) b.op({"smelt.send", 0, {z}, {}, {}, {}, {I("peer", self + tp), I("tag", 7)}});
    } else {
      b.op({"smelt.recv", -1, {}, {z}, {}, {}, {I("peer", self - tp), I("tag", 7)}});
    }
    if (stage == pp - 1) {
      int v0 = v_cuts[size_t(t)], v1 = v_cuts[size_t(t) + 1];
      std::vector<int64_t> widths;
      for (int k = 0; k < tp; ++k) widths.push_back(v_cuts[size_t(k) + 1] - v_cuts[size_t(k)]);
      int head = b.transformed("head.part", m.head, "rows(" + std::to_string(v0) + ":" + std::to_string(v1) + ")", {v1 - v0, D});
      int lp = b.buffer("logits.part", v1 - v0);
      b.logits = b.buffer("logits", V);
      b.op({"smelt.linear", -1, {z}, {lp}, {head}, {}, {}});
      b.op({"smelt.all_gather", -1, {lp}, {b.logits}, {}, {}, {N("group", group), N("widths", widths)}});
    }
  }

  // Float64 logits of one token; the intermediate units [skip0, skip1) of h left out (a rank without them).
  static std::vector<double> expected(int id, int skip0 = 0, int skip1 = 0) {
    PlanBuilder b;
    Mlp m(b);
    auto w = [&](int k) { return std::vector<double>(b.values(k).begin(), b.values(k).end()); };
    std::vector<double> E = w(m.embed), W1 = w(m.w1), W2 = w(m.w2), H = w(m.head), x(D), h(F, 0.0), z(D);
    for (int d = 0; d < D; ++d) x[d] = E[id * D + d];
    for (int f = 0; f < F; ++f)
      for (int d = 0; d < D; ++d) h[f] += W1[f * D + d] * x[d];
    for (int d = 0; d < D; ++d) {
      z[d] = x[d];
      for (int f = 0; f < F; ++f)
        if (f < skip0 || f >= skip1) z[d] += W2[d * F + f] * h[f];
    }
    std::vector<double> out(V, 0.0);
    for (int v = 0; v < V; ++v)
      for (int d = 0; d < D; ++d) out[v] += H[v * D + d] * z[d];
    return out;
  }
};

// The ranks of a tp x pp split of Mlp (cuts: tp+1 boundaries of F and of V), in rank order.
struct MlpSplit {
  int tp, pp;
  std::vector<std::unique_ptr<PlanBuilder>> builders;
  std::vector<RankArg> ranks;
  MlpSplit(int tp_, int pp_, const std::vector<int>& f_cuts, const std::vector<int>& v_cuts) : tp(tp_), pp(pp_) {
    for (int s = 0; s < pp; ++s)
      for (int t = 0; t < tp; ++t) {
        builders.push_back(std::make_unique<PlanBuilder>());
        Mlp::rank(*builders.back(), tp, pp, s, t, f_cuts, v_cuts);
        ranks.push_back({builders.back().get()});
      }
  }
  // The partitioned plan file, its checkpoint in model_dir.
  void write(const std::string& path, const std::string& model_dir) const {
    PlanBuilder::write_bytes(path, partitioned_file(ranks, tp, pp, model_dir));
  }
};

}  // namespace smelt::runtime::testing
