// smelt-select-kernels: one kernel per compute op. The cpu backend has exactly one kernel per op (the float32
// reference kernel), so the choice is by name. On a cuda target every op must have a launcher
// (runtime/cuda/ops*.cc, which picks the kernel variant by shape and arch at load); the kernel is "cuda.<op>".
#include <set>

#include "compiler/cuda/target.h"
#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "compiler/passes/passes.h"
#include "frontends/error.h"
#include "runtime/cuda/launch.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTSELECTKERNELS
#include "compiler/passes/Passes.h.inc"

namespace {

struct SelectKernels : impl::SmeltSelectKernelsBase<SelectKernels> {
  using SmeltSelectKernelsBase::SmeltSelectKernelsBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    cuda_compile::Target t;
    try {
      t = cuda_compile::parse_target(target);
    } catch (const Error& e) {
      module.emitError() << "smelt-select-kernels: " << e.what();
      return signalPassFailure();
    }
    mlir::Builder b(&getContext());
    std::set<std::string> missing;
    module.walk([&](mlir::Operation* op) {
      if (!is_compute_op(op)) return;
      llvm::StringRef name = op->getName().getStringRef();
      std::string full = name.str();
      name.consume_front("smelt.");
      if (t.cuda && !smelt::runtime::cuda::has_launcher(full)) missing.insert(full);
      op->setAttr("kernel", b.getStringAttr((t.cuda ? "cuda." : "cpu.") + name.str()));
    });
    if (!missing.empty()) {
      std::string list;
      for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
      module.emitError() << "smelt-select-kernels: target " << t.name << ": no cuda kernel yet for " << list;
      return signalPassFailure();
    }
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
