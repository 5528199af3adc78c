// What smelt-pad-heads and smelt-partition share: new weight symbols made from existing ones by a transform step
// (docs/plan.md "Weight transforms"), with the block scales of quantized weights remapped exactly, and the
// proportional split of a dimension among ranks.
#pragma once
#include <string>
#include <vector>

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/transform.h"

namespace smelt::shard {

using transform::Range;

// The scale that goes with a weight use (null for float weights).
struct Quantized {
  WeightOp weight, scale;
};

// Makes the weight `name` (and `scale_name` for a quantized one) = `q` with `ranges` (logical elements of the
// unpacked tensor, along `dim`: 0 = rows, 1 = cols) appended to its transform. A name equal to the weight's own
// rewrites it in place. Block scales follow exactly: every block of the result must draw its non-zero elements
// from one block of the input (zero elements are free; an all-zero block gets scale 1.0); otherwise nothing is
// created and the reason comes back. `what` names the use in messages. Returns "" on success.
// `symbols` is the module's symbol table (kept up to date with the symbols made here).
std::string remap(mlir::SymbolTable& symbols, Quantized q, int dim, const std::vector<Range>& ranges,
                  const std::string& name, const std::string& scale_name, const std::string& what,
                  mlir::FlatSymbolRefAttr& weight_out, mlir::FlatSymbolRefAttr& scale_out);

// Makes the weight `name` = `w` cut to `range` along `dim` as stored, with no block-scale logic: for tensors
// whose scale is per row and cut by a second call alike (the Engram table and its table_scale).
mlir::FlatSymbolRefAttr slice(mlir::SymbolTable& symbols, WeightOp w, int dim, Range range, const std::string& name);

// The quantization block of a weight along `dim` in logical elements: 0 for float weights, the FP8 block, or for
// packed FP4 (i8 [N, K/2], one scale per row per 32) 1 along rows and 32 along cols.
int64_t block(Quantized q, int dim);

// Logical extent of dim `dim` (packed FP4 cols count elements, not bytes).
int64_t extent(Quantized q, int dim);

// Splits `units` among ranks in proportion to `shares` (largest remainder, ties to the lower rank). With min1
// every rank gets at least one unit (needs units >= shares.size()).
std::vector<int64_t> apportion(int64_t units, const std::vector<double>& shares, bool min1);

// The unit a dimension of `n` elements is split in: the quantization block `qblock` when > 0, else the largest
// power of two <= 32 that divides n and leaves at least `ranks` units (1 at worst).
int64_t split_unit(int64_t n, int64_t qblock, int64_t ranks);

// Contiguous [begin, end) element ranges of a dimension split by apportion() in units of `unit` (the last rank's
// range absorbs a remainder when n is not a multiple of unit).
std::vector<Range> split(int64_t n, int64_t unit, const std::vector<double>& shares, bool min1);

}  // namespace smelt::shard
