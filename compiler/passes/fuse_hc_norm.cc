// smelt-fuse-hc-norm: hc_collapse -> rms_norm, where the norm is the collapse's only reader, becomes one hc_collapse
// carrying the norm (`norm`, `norm_eps`; the collapse's own rounding moves to `collapse_round`, the norm's to
// `round`). The cpu backend runs the two references in turn and the cuda kernel computes each value as the two
// kernels did, so the plan's results do not change; the GPU runs one launch instead of two. Opt-in (--pipeline): on
// the H200 V4.1 slice the fused one-block kernel made the step slower (docs/performance.md, Session 17).
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTFUSEHCNORM
#include "compiler/passes/Passes.h.inc"

namespace {

struct FuseHcNorm : impl::SmeltFuseHcNormBase<FuseHcNorm> {
  using SmeltFuseHcNormBase::SmeltFuseHcNormBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::SmallVector<RmsNormOp> norms;
    module.walk([&](RmsNormOp n) { norms.push_back(n); });
    for (RmsNormOp n : norms) {
      auto c = n.getX().getDefiningOp<HcCollapseOp>();
      if (!c || c.getNormAttr() || !c.getU().hasOneUse() || n.getGroups() != 1 || !n.getWeightAttr()) continue;
      // Same stream (a side op never merges with a main one) and the same kind of numerics.
      if (c->getAttr("stream") != n->getAttr("stream") || c->getAttr("numerics") != n->getAttr("numerics")) continue;
      c.setNormAttr(n.getWeightAttr());
      c.setNormEpsAttr(n.getEpsAttr());
      if (auto r = c.getRoundAttr()) c.setCollapseRoundAttr(r);
      c->removeAttr("round");
      if (auto r = n.getRoundAttr()) c.setRoundAttr(r);
      n.getY().replaceAllUsesWith(c.getU());
      n.erase();
    }
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
