#include "compiler/passes/engram_ops.h"

namespace smelt::engram_ops {

namespace {
void copy_attrs(mlir::OperationState& st, mlir::Operation* from, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto a = from->getAttr(n)) st.addAttribute(n, a);
}
}  // namespace

mlir::Operation* build_lookup(mlir::OpBuilder& b, EngramOp op, mlir::Attribute table, mlir::Attribute table_scale,
                              int64_t row_begin, int64_t rows_total) {
  const int64_t hd = op.getHeadDim(), cols = op.getCols();
  mlir::OperationState st(op.getLoc(), "smelt.engram_lookup");
  st.addOperands(op.getHashes());
  st.addTypes(mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, cols * hd}, b.getF32Type()));
  st.addAttribute("table", table);
  st.addAttribute("table_scale", table_scale);
  st.addAttribute("layer_index", b.getI64IntegerAttr(op.getLayerIndex()));
  st.addAttribute("head_dim", b.getI64IntegerAttr(hd));
  st.addAttribute("cols", b.getI64IntegerAttr(cols));
  st.addAttribute("row_begin", b.getI64IntegerAttr(row_begin));
  st.addAttribute("rows_total", b.getI64IntegerAttr(rows_total));
  copy_attrs(st, op, {"layer", "numerics"});
  return b.create(st);
}

mlir::Operation* replace_with_gate(mlir::OpBuilder& b, mlir::Operation* op, mlir::Value streams, mlir::Value e,
                                   bool with_wkv) {
  mlir::OperationState st(op->getLoc(), "smelt.engram_gate");
  st.addOperands({streams, e});
  st.addTypes(op->getResult(0).getType());
  if (with_wkv) copy_attrs(st, op, {"wkv", "wkv_scale"});
  copy_attrs(st, op, {"q_weight", "k_weight", "hc_mult", "dim", "head_dim", "cols", "eps", "layer", "round", "numerics"});
  mlir::Operation* gate = b.create(st);
  op->getResult(0).replaceAllUsesWith(gate->getResult(0));
  op->erase();
  return gate;
}

}  // namespace smelt::engram_ops
