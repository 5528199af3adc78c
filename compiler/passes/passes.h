// The smelt passes (declared in Passes.td) and their registration for smelt-opt / smelt-compile.
#pragma once
#include <memory>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace smelt {

#define GEN_PASS_DECL
#include "compiler/passes/Passes.h.inc"

// Registers every smelt pass with the global pass registry (idempotent).
void register_passes();

// Appends `name` (the pass with its options, as text) to the module's `smelt.passes` record, which tells
// smelt-compile --compile-from which phases a dumped module has been through.
void record_pass(mlir::ModuleOp module, llvm::StringRef name);
// The same for a running pass: records it as it prints in a pipeline (name and options).
void record_pass(mlir::ModuleOp module, mlir::Pass& pass);

}  // namespace smelt
