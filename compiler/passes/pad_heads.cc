// smelt-pad-heads{tp=N}: virtual-head padding (../shared/spec/seed-recipes.md §2). An attention with G output
// groups, G % N != 0 or G < N, gets G' = ceil(G/N)*N groups: padded group j duplicates real group j % G in wq_b
// rows, attn_sink and wo_a rows (weights and block scales), and wo_b gets zero columns for it (scale 1.0). A
// duplicated group computes finite copies of real values which the zero wo_b columns cancel exactly, and no
// zero block ever reaches an activation quantizer. Everything is a weight transform: nothing is copied.
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/passes/partition.h"
#include "compiler/passes/passes.h"
#include "compiler/passes/shard.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTPADHEADS
#include "compiler/passes/Passes.h.inc"

namespace {

struct PadHeads : impl::SmeltPadHeadsBase<PadHeads> {
  using SmeltPadHeadsBase::SmeltPadHeadsBase;

  std::string pad(mlir::SymbolTable& m, SparseAttentionOp attn) {
    partition::AttentionChain c;
    if (std::string err = partition::find_chain(attn, c); !err.empty()) return err;
    const int64_t G = c.groups, N = tp;
    if (G % N == 0 && G >= N) return "";
    const int64_t Gp = (G + N - 1) / N * N, hpg = c.heads / G, d = c.head_dim, R = c.rank;
    auto aq = c.wo_b.getActQuant();
    if (aq && !aq->empty() && ((G * R) % 32 || ((Gp - G) * R) % 32))
      return "layer " + std::to_string(attn.getLayer().value_or(-1)) + ": padding " + std::to_string(G) + " to " +
             std::to_string(Gp) + " output groups of " + std::to_string(R) + " wo_b input columns each would not keep " +
             "real and padded columns in whole FP8 activation blocks of 32; use --numerics fp32";
    // Input ranges of the padded tensor along the group dimension, `unit` elements per group.
    auto groups = [&](int64_t unit) {
      std::vector<shard::Range> r{{0, G * unit, false}};
      for (int64_t j = G; j < Gp; ++j) r.push_back({(j % G) * unit, (j % G + 1) * unit, false});
      return r;
    };
    auto lookup = [&](mlir::Operation* op, const char* a) {
      auto ref = llvm::dyn_cast_or_null<mlir::FlatSymbolRefAttr>(op->getAttr(a));
      return ref ? m.lookup<WeightOp>(ref.getValue()) : WeightOp();
    };
    struct Edit {
      mlir::Operation* op;
      const char *w, *s;
      int dim;
      std::vector<shard::Range> ranges;
    };
    std::vector<Edit> edits{{c.wq_b, "weight", "scale", 0, groups(hpg * d)},
                            {attn, "sink", "", 0, groups(hpg)},
                            {c.wo_a, "weight", "scale", 0, groups(R)},
                            {c.wo_b, "weight", "scale", 1, {{0, G * R, false}, {0, (Gp - G) * R, true}}}};
    for (Edit& e : edits) {
      shard::Quantized q{lookup(e.op, e.w), *e.s ? lookup(e.op, e.s) : WeightOp()};
      if (!q.weight) return "layer " + std::to_string(attn.getLayer().value_or(-1)) + ": attention weight missing";
      mlir::FlatSymbolRefAttr w, s;
      std::string what = "padding layer " + std::to_string(attn.getLayer().value_or(-1)) + " to " +
                         std::to_string(Gp) + " output groups";
      std::string err = shard::remap(m, q, e.dim, e.ranges, q.weight.getSymName().str(),
                                     q.scale ? q.scale.getSymName().str() : "", what, w, s);
      if (!err.empty()) return err;
    }
    partition::set_heads(c, Gp);
    return "";
  }

  void runOnOperation() override {
    mlir::ModuleOp m = getOperation();
    if (tp < 1) {
      m.emitError() << "smelt-pad-heads: tp must be >= 1, got " << int64_t(tp);
      return signalPassFailure();
    }
    auto f = m.lookupSymbol<mlir::func::FuncOp>("forward");
    if (!f) {
      m.emitError() << "smelt-pad-heads: the module has no @forward (pad before smelt-partition)";
      return signalPassFailure();
    }
    llvm::SmallVector<SparseAttentionOp> attns;
    f.walk([&](SparseAttentionOp a) { attns.push_back(a); });
    mlir::SymbolTable symbols(m);
    for (SparseAttentionOp a : attns)
      if (std::string err = pad(symbols, a); !err.empty()) {
        a.emitError() << "smelt-pad-heads: " << err;
        return signalPassFailure();
      }
    record_pass(m, *this);
  }
};

}  // namespace
}  // namespace smelt
