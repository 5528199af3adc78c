// The halves of smelt.engram, built by smelt-partition (a TP rank's lookup of its table rows) and
// smelt-split-engram (the lookup and the wkv projection ahead of the gate).
#pragma once
#include "mlir/IR/Builders.h"

#include "compiler/dialect/dialect.h"

namespace smelt::engram_ops {

// smelt.engram_lookup of op's hashes at b's insertion point: rows [row_begin, row_begin + table rows) of a table of
// rows_total rows, e [T, cols * head_dim].
mlir::Operation* build_lookup(mlir::OpBuilder& b, EngramOp op, mlir::Attribute table, mlir::Attribute table_scale,
                              int64_t row_begin, int64_t rows_total);

// smelt.engram_gate on (streams, e) at b's insertion point with op's gate attributes (op: smelt.engram or
// smelt.engram_gate; with_wkv: its wkv and wkv_scale too, else e is already projected); replaces op's result and
// erases op.
mlir::Operation* replace_with_gate(mlir::OpBuilder& b, mlir::Operation* op, mlir::Value streams, mlir::Value e,
                                   bool with_wkv);

}  // namespace smelt::engram_ops
