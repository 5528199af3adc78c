// smelt-select-kernels: one kernel per compute op. The cpu backend has exactly one kernel per op (the float32
// reference kernel), so the choice is by name; the cuda backend will choose by shape and arch.
#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTSELECTKERNELS
#include "compiler/passes/Passes.h.inc"

namespace {

struct SelectKernels : impl::SmeltSelectKernelsBase<SelectKernels> {
  using SmeltSelectKernelsBase::SmeltSelectKernelsBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    llvm::StringRef t = target;
    if (t != "cpu") {
      if (t == "h200" || t == "cuda" || t.ends_with(".json"))
        module.emitError() << "smelt-select-kernels: target '" << t
                           << "' needs the cuda backend, which is not implemented yet (only target=cpu works)";
      else
        module.emitError() << "smelt-select-kernels: unknown target '" << t
                           << "' (expected cpu, h200 or a rig FILE.json)";
      return signalPassFailure();
    }
    mlir::Builder b(&getContext());
    module.walk([&](mlir::Operation* op) {
      if (!is_compute_op(op)) return;
      llvm::StringRef name = op->getName().getStringRef();
      name.consume_front("smelt.");
      op->setAttr("kernel", b.getStringAttr("cpu." + name.str()));
    });
    std::string text;
    llvm::raw_string_ostream os(text);
    printAsTextualPipeline(os);
    record_pass(module, text);
  }
};

}  // namespace
}  // namespace smelt
