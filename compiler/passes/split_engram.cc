// smelt-split-engram: smelt.engram -> smelt.engram_lookup (the table rows of its hashes) -> smelt.linear (the wkv
// projection) -> smelt.engram_gate without wkv; a TP rank's smelt.engram_gate with wkv loses it the same way. The
// lookup and the projection depend only on the token ids, not on the stream they gate, so a GPU backend can run
// them on its side stream (smelt-schedule-streams side-ops=...,smelt.engram_lookup) instead of between two layers.
// The linear computes what the fused op computed inside (model numerics: FP8 activation quant, bf16 output; fp32:
// dequantized weight in fp32), so the plan's results do not change. In GPU targets' default pipeline
// (compiler/driver.cc): with smelt-schedule-streams' early-engram placement the side projection makes the H200
// slice's step faster (docs/performance.md "Session 24").
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/passes/engram_ops.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTSPLITENGRAM
#include "compiler/passes/Passes.h.inc"

namespace {

// The wkv projection of e as a smelt.linear before `at`: [rows, (hc_mult + 1) * dim].
mlir::Value project(mlir::OpBuilder& b, mlir::Operation* at, mlir::Value e, mlir::Attribute wkv, mlir::Attribute scale,
                    int64_t n, int64_t d) {
  mlir::OperationState st(at->getLoc(), "smelt.linear");
  st.addOperands(e);
  st.addTypes(mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, (n + 1) * d}, b.getF32Type()));
  st.addAttribute("weight", wkv);
  st.addAttribute("scale", scale);
  auto numerics = at->getAttrOfType<mlir::StringAttr>("numerics");
  if (!numerics || numerics.getValue() != "fp32") {  // the model's numerics: what the fused op's linear does
    st.addAttribute("act_quant", b.getStringAttr("fp8_e4m3_b32"));
    st.addAttribute("round", b.getStringAttr("bf16"));
  }
  if (auto layer = at->getAttr("layer")) st.addAttribute("layer", layer);
  return b.create(st)->getResult(0);
}

struct SplitEngram : impl::SmeltSplitEngramBase<SplitEngram> {
  using SmeltSplitEngramBase::SmeltSplitEngramBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::SmallVector<EngramOp> whole;
    llvm::SmallVector<EngramGateOp> gates;
    module.walk([&](EngramOp op) { whole.push_back(op); });
    module.walk([&](EngramGateOp op) {
      if (op.getWkvAttr()) gates.push_back(op);
    });
    for (EngramOp op : whole) {
      WeightOp table = mlir::SymbolTable::lookupNearestSymbolFrom<WeightOp>(op, op.getTableAttr());
      if (!table) {
        op.emitError() << "smelt-split-engram: table " << op.getTableAttr() << " is not a smelt.weight";
        return signalPassFailure();
      }
      mlir::OpBuilder b(op);
      mlir::Value e = engram_ops::build_lookup(b, op, op.getTableAttr(), op.getTableScaleAttr(), 0,
                                               table.getTensorType().getDimSize(0))
                          ->getResult(0);
      mlir::Value kv = project(b, op, e, op.getWkvAttr(), op.getWkvScaleAttr(), op.getHcMult(), op.getDim());
      engram_ops::replace_with_gate(b, op, op.getStreams(), kv, /*with_wkv=*/false);
    }
    for (EngramGateOp op : gates) {
      mlir::OpBuilder b(op);
      mlir::Value kv = project(b, op, op.getE(), op.getWkvAttr(), op.getWkvScaleAttr(), op.getHcMult(), op.getDim());
      engram_ops::replace_with_gate(b, op, op.getStreams(), kv, /*with_wkv=*/false);
    }
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
