// Dialect registration, the generated op definitions and the module-level symbol ops' verifiers.
#include "compiler/dialect/dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

#include "compiler/dialect/SmeltDialect.cpp.inc"
#include "compiler/dialect/transform.h"
#include "compiler/dialect/verify_util.h"

#define GET_OP_CLASSES
#include "compiler/dialect/SmeltOps.cpp.inc"

namespace smelt {

void SmeltDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/dialect/SmeltOps.cpp.inc"
      >();
}

int64_t cols(mlir::Value v) {
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(v.getType());
  if (!t || t.getRank() != 2 || t.isDynamicDim(1)) return -1;
  return t.getDimSize(1);
}

mlir::LogicalResult verify_rows(mlir::Operation* op) {
  auto check = [&](mlir::Value v, llvm::StringRef what, unsigned i) -> mlir::LogicalResult {
    auto t = llvm::cast<mlir::RankedTensorType>(v.getType());  // ODS already checked rank 2
    if (!t.isDynamicDim(0))
      return op->emitOpError() << what << " #" << i << " must have a dynamic row count (tensor<?xN>), got "
                               << t;
    if (t.isDynamicDim(1) || t.getDimSize(1) <= 0)
      return op->emitOpError() << what << " #" << i << " must have a static positive column count, got " << t;
    return mlir::success();
  };
  if (auto r = op->getAttrOfType<mlir::StringAttr>("round"); r && !r.getValue().empty() && r.getValue() != "bf16")
    return op->emitOpError() << "unknown round '" << r.getValue() << "' (expected bf16)";
  if (auto n = op->getAttrOfType<mlir::StringAttr>("numerics");
      n && n.getValue() != "fp32" && !(n.getValue() == "v41" && op->getName().getStringRef() == "smelt.sparse_attention"))
    return op->emitOpError() << "unknown numerics '" << n.getValue() << "' (expected fp32)";
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (mlir::failed(check(v, "operand", i))) return mlir::failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (mlir::failed(check(v, "result", i))) return mlir::failure();
  return mlir::success();
}

mlir::LogicalResult WeightOp::verify() {
  auto t = getTensorType();
  if (!t.hasStaticShape()) return emitOpError() << "weight @" << getSymName() << " needs a static shape, got " << t;
  if (getFile() < 0) return emitOpError() << "weight @" << getSymName() << " has a negative file index";
  if (getOffset() < 0) return emitOpError() << "weight @" << getSymName() << " has a negative byte offset";
  // A transform (docs/plan.md) must parse and turn the stored shape (source_shape) into this weight's type.
  std::vector<int64_t> stored(t.getShape().begin(), t.getShape().end()), result;
  if (auto ss = getSourceShape()) stored.assign(ss->begin(), ss->end());
  std::vector<transform::Step> steps;
  std::string err = transform::parse(getTransform().str(), steps);
  if (err.empty()) err = transform::apply_shape(steps, stored, result);
  if (!err.empty()) return emitOpError() << "weight @" << getSymName() << " transform '" << getTransform() << "': " << err;
  if (!llvm::equal(result, t.getShape()))
    return emitOpError() << "weight @" << getSymName() << " transform '" << getTransform() << "' turns the stored shape "
                         << verify_util::shape_str(stored) << " into " << verify_util::shape_str(result) << ", not "
                         << verify_util::shape_str(t.getShape());
  return mlir::success();
}

mlir::LogicalResult StateOp::verify() {
  static const llvm::StringRef kinds[] = {"window_ring", "compressor_ring", "compressed_pool", "index_pool",
                                          "engram_history"};
  if (!llvm::is_contained(kinds, getKind()))
    return emitOpError() << "state @" << getSymName() << " has unknown kind '" << getKind()
                         << "' (expected window_ring, compressor_ring, compressed_pool, index_pool or engram_history)";
  if (!getTensorType().hasStaticShape())
    return emitOpError() << "state @" << getSymName() << " needs a static shape, got " << getType();
  if (getLayer() < 0) return emitOpError() << "state @" << getSymName() << " has a negative layer";
  return mlir::success();
}

}  // namespace smelt
