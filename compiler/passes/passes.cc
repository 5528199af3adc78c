// Registration of the smelt passes and the module's record of the passes it has been through.
#include "compiler/passes/passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace smelt {

namespace {
#define GEN_PASS_REGISTRATION
#include "compiler/passes/Passes.h.inc"
}  // namespace

void register_passes() {
  static bool done = false;
  if (done) return;
  done = true;
  registerSmeltPasses();
}

void record_pass(mlir::ModuleOp module, llvm::StringRef name) {
  mlir::Builder b(module.getContext());
  llvm::SmallVector<mlir::Attribute> names;
  if (auto old = module->getAttrOfType<mlir::ArrayAttr>("smelt.passes")) names.assign(old.begin(), old.end());
  names.push_back(b.getStringAttr(name));
  module->setAttr("smelt.passes", b.getArrayAttr(names));
}

void record_pass(mlir::ModuleOp module, mlir::Pass& pass) {
  std::string text;
  llvm::raw_string_ostream os(text);
  pass.printAsTextualPipeline(os);
  record_pass(module, text);
}

}  // namespace smelt
