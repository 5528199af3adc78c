// Dialect registration, the generated op definitions and the module-level symbol ops' verifiers.
#include "compiler/dialect/dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

#include "compiler/dialect/SmeltDialect.cpp.inc"

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
