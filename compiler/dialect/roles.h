// Which attributes of a compute op name weights and states, in the order docs/ops.md lists them (= the
// order of the plan's id lists). Shared by smelt-verify and plan emission so the two cannot drift.
#pragma once
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace smelt {

// A weight or state reference of one op: the role (attribute name, or "e3.w2" for expert weights), the
// symbol (null when an optional reference is absent), and for states the kinds the role accepts.
struct SymbolUse {
  std::string role;
  mlir::FlatSymbolRefAttr ref;
  llvm::SmallVector<llvm::StringRef, 2> kinds;  // states only
};

// True for the smelt ops that compute (everything but smelt.weight / smelt.state).
bool is_compute_op(mlir::Operation* op);

// Weight references in plan order; optional ones that are absent come back with a null ref.
llvm::SmallVector<SymbolUse> weight_uses(mlir::Operation* op);
// State references in plan order (same convention).
llvm::SmallVector<SymbolUse> state_uses(mlir::Operation* op);

// True for a model-level attribute (eps, heads, ratio, ...); false for weight / state references and the
// bookkeeping attributes layer, kernel and offsets.
bool is_model_attr(mlir::NamedAttribute a);

}  // namespace smelt
