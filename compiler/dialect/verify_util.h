// Helpers shared by the op verifiers (ops.cc, ops_v41.cc): column and weight-shape checks with messages
// that name the role and the shapes.
#pragma once
#include <string>

#include "compiler/dialect/dialect.h"

namespace smelt::verify_util {

std::string shape_str(llvm::ArrayRef<int64_t> s);

mlir::LogicalResult expect_cols(mlir::Operation* op, mlir::Value v, int64_t want, llvm::StringRef what);
mlir::LogicalResult expect_positive(mlir::Operation* op, int64_t v, llvm::StringRef what);
mlir::LogicalResult check_rope_dims(mlir::Operation* op, int64_t head_dim, int64_t rope_dim, double theta);

// The smelt.weight a reference names, or null (unresolved references are smelt-verify's to report).
WeightOp lookup_weight(mlir::Operation* op, mlir::SymbolTableCollection& st, mlir::FlatSymbolRefAttr ref);

// Checks a referenced weight's shape (-1 = any extent); an absent reference passes.
mlir::LogicalResult expect_weight(mlir::Operation* op, mlir::SymbolTableCollection& st, llvm::StringRef role,
                                  mlir::FlatSymbolRefAttr ref, llvm::ArrayRef<int64_t> want);
// Dimension i of a referenced weight, or -1.
int64_t dim(mlir::Operation* op, mlir::SymbolTableCollection& st, mlir::FlatSymbolRefAttr ref, unsigned i);

// A linear weight of logical shape [n, k] in any of its storages: float [n, k] without a scale; f8E4M3FN
// [n, k] with f8E8M0FNU scales [ceil(n/b), ceil(k/b)] for a power-of-two block b >= 32; i8 [n, k/2]
// (packed FP4) with f8E8M0FNU scales [n, ceil(k/32)]. Sets *quantized.
mlir::LogicalResult expect_linear_weight(mlir::Operation* op, mlir::SymbolTableCollection& st, llvm::StringRef role,
                                         mlir::FlatSymbolRefAttr weight, mlir::FlatSymbolRefAttr scale, int64_t n,
                                         int64_t k, bool* quantized = nullptr);

// An optional string attribute's value must be one of `allowed` ("" = absent is always allowed).
mlir::LogicalResult expect_one_of(mlir::Operation* op, llvm::StringRef attr, llvm::ArrayRef<llvm::StringRef> allowed);

}  // namespace smelt::verify_util
