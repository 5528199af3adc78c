// Verifiers of the collectives of partitioned modules (docs/ops.md, section Collectives): group lists of
// distinct global ranks, widths that add up, and the member's own width where its rank is known (the
// smelt.rank attribute of the enclosing function).
#include "mlir/Interfaces/FunctionInterfaces.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/verify_util.h"

namespace smelt {

using mlir::failure;
using mlir::LogicalResult;
using mlir::success;
using ST = mlir::SymbolTableCollection;
using namespace verify_util;

namespace {

LogicalResult check_group(mlir::Operation* op, llvm::ArrayRef<int64_t> group) {
  if (group.empty()) return op->emitOpError() << "group must list at least one rank";
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0) return op->emitOpError() << "group lists a negative rank " << group[i];
    for (size_t j = 0; j < i; ++j)
      if (group[j] == group[i]) return op->emitOpError() << "group lists rank " << group[i] << " twice";
  }
  return success();
}

// This function's global rank (smelt.rank = {index = ...}), or -1 outside a partitioned module.
int64_t own_rank(mlir::Operation* op) {
  auto f = op->getParentOfType<mlir::FunctionOpInterface>();
  auto d = f ? f->getAttrOfType<mlir::DictionaryAttr>("smelt.rank") : nullptr;
  auto i = d ? d.getAs<mlir::IntegerAttr>("index") : nullptr;
  return i ? i.getInt() : -1;
}

}  // namespace

LogicalResult AllReduceOp::verify() {
  if (failed(verify_rows(*this)) || failed(check_group(*this, getGroup()))) return failure();
  if (getX()) return expect_cols(*this, getY(), cols(getX()), "result (same as x)");
  return success();
}

LogicalResult AllReduceOp::verifySymbolUses(ST&) { return success(); }

LogicalResult AllGatherOp::verify() {
  if (failed(verify_rows(*this)) || failed(check_group(*this, getGroup()))) return failure();
  auto g = getGroup();
  auto w = getWidths();
  if (w.size() != g.size())
    return emitOpError() << "widths lists " << w.size() << " members but group lists " << g.size();
  int64_t total = 0;
  for (int64_t x : w) {
    if (x <= 0) return emitOpError() << "widths must be positive, got " << x;
    total += x;
  }
  if (int64_t me = own_rank(*this); me >= 0) {
    auto it = llvm::find(g, me);
    if (it == g.end()) return emitOpError() << "group does not list this function's rank " << me;
    if (failed(expect_cols(*this, getX(), w[it - g.begin()], "x (this member's width)"))) return failure();
  }
  return expect_cols(*this, getY(), total, "result (the widths summed)");
}

LogicalResult AllGatherOp::verifySymbolUses(ST&) { return success(); }

LogicalResult SendOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  if (getPeer() < 0 || getTag() < 0) return emitOpError() << "peer and tag must be >= 0";
  if (getPeer() == own_rank(*this)) return emitOpError() << "sends to its own rank " << getPeer();
  return success();
}

LogicalResult SendOp::verifySymbolUses(ST&) { return success(); }

LogicalResult RecvOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  if (getPeer() < 0 || getTag() < 0) return emitOpError() << "peer and tag must be >= 0";
  if (getPeer() == own_rank(*this)) return emitOpError() << "receives from its own rank " << getPeer();
  return success();
}

LogicalResult RecvOp::verifySymbolUses(ST&) { return success(); }

}  // namespace smelt
