// Which attributes of a compute op name weights and states, in the order docs/ops.md lists them (= the
// order of the plan's id lists). Shared by smelt-verify and plan emission so the two cannot drift.
#pragma once
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace smelt {

// What element types a weight role accepts: float (f32/bf16/f16/f64), integer (i32/i64: tid2eid, token_map),
// quantized (float, f8E4M3FN, or i8 = packed FP4; the op verifier checks the combination with its scale) or
// scale (f8E8M0FNU block scales of a quantized weight).
enum class WeightClass { Float, Integer, Quantized, Scale };

// A weight or state reference of one op: the role (attribute name, or "e3.w2" / "e3.w2.scale" for expert
// weights), the symbol (null when an optional reference is absent), for weights the element-type class and
// for states the kinds the role accepts.
struct SymbolUse {
  std::string role;
  mlir::FlatSymbolRefAttr ref;
  llvm::SmallVector<llvm::StringRef, 2> kinds;  // states only
  WeightClass cls = WeightClass::Float;         // weights only
};

// True for the smelt ops that compute (everything but smelt.weight / smelt.state).
bool is_compute_op(mlir::Operation* op);

// Weight references in plan order; optional ones that are absent come back with a null ref. The scale of a
// linear / grouped_linear is listed only when present, so that V4 plans keep their one-weight lists.
llvm::SmallVector<SymbolUse> weight_uses(mlir::Operation* op);
// State references in plan order (same convention).
llvm::SmallVector<SymbolUse> state_uses(mlir::Operation* op);

// True for the ops that write the states they reference (compressors, window update, Engram history).
bool writes_states(mlir::Operation* op);

// True for a model-level attribute (eps, heads, ratio, ...); false for weight / state references and the
// bookkeeping attributes layer, kernel and offsets.
bool is_model_attr(mlir::NamedAttribute a);

}  // namespace smelt
