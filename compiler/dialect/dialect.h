// The smelt dialect: op classes generated from SmeltOps.td plus the helpers shared by the passes and
// plan emission.
#pragma once
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "compiler/dialect/SmeltDialect.h.inc"

#define GET_OP_CLASSES
#include "compiler/dialect/SmeltOps.h.inc"

namespace smelt {

// Column count of a row tensor value (tensor<?xNx...>), or -1 if it is not one.
int64_t cols(mlir::Value v);

// Verifies that every operand and result of a compute op is a row tensor: rank 2, dynamic row count,
// static positive column count.
mlir::LogicalResult verify_rows(mlir::Operation* op);

}  // namespace smelt
