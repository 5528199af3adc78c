// smelt-numerics{mode=model|fp32}: the switch between the V4.1 model's own numerics (bf16 rounding points,
// FP8 activation quantization, FP8/FP4 fake quantization of attention state: the default, what the official
// inference code computes) and plain float32 math on the same (exactly dequantized) weights.
#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTNUMERICS
#include "compiler/passes/Passes.h.inc"

namespace {

// Ops whose kernels hold rounding or quantization steps inside (docs/ops.md, DeepSeek-V4.1).
bool rounds_inside(mlir::Operation* op) {
  if (llvm::isa<KvCompressorOp, IndexerV41Op, IndexerScoresOp, EngramOp, EngramLookupOp, EngramGateOp, HcMeanOp>(op)) return true;
  if (auto e = llvm::dyn_cast<MoeExpertsOp>(op)) return e.getVariant() && *e.getVariant() == "v41";
  if (auto s = llvm::dyn_cast<SwigluMlpOp>(op)) return bool(s.getW1ScaleAttr());
  if (auto a = llvm::dyn_cast<SparseAttentionOp>(op)) return a.getNumerics() && *a.getNumerics() == "v41";
  return false;
}

struct Numerics : impl::SmeltNumericsBase<Numerics> {
  using SmeltNumericsBase::SmeltNumericsBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    if (mode != "model" && mode != "fp32") {
      module.emitError() << "smelt-numerics: unknown mode '" << mode << "' (expected model or fp32)";
      return signalPassFailure();
    }
    if (mode == "fp32") {
      mlir::Builder b(&getContext());
      llvm::SmallVector<FakeQuantOp> fake;
      module.walk([&](mlir::Operation* op) {
        if (!is_compute_op(op)) return;
        if (auto fq = llvm::dyn_cast<FakeQuantOp>(op)) return fake.push_back(fq);
        op->removeAttr("round");
        op->removeAttr("act_quant");
        if (rounds_inside(op)) op->setAttr("numerics", b.getStringAttr("fp32"));
      });
      for (FakeQuantOp fq : fake) {
        fq.getY().replaceAllUsesWith(fq.getX());
        fq.erase();
      }
    }
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
