// What the V4 and V4.1 importers share: building smelt ops generically by name with their attributes, the
// module's weight / state symbols, and the module scaffolding (@forward, module attributes, verification).
// Internal to compiler/import.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include "compiler/dialect/dialect.h"
#include "compiler/import/importer.h"

namespace smelt::import_detail {

// RoPE table parameters: theta and YaRN (factor 0 = none).
struct RopeParams {
  double theta, yarn_factor, beta_fast, beta_slow;
  int64_t original_max_pos;
};

class Builder {
 public:
  Builder(mlir::MLIRContext& ctx, const ModelDescription& m, const ImportOptions& o)
      : ctx_(ctx), m_(m), c_(m.config), o_(o), b_(&ctx) {}

 protected:
  using NamedAttribute = mlir::NamedAttribute;
  using Value = mlir::Value;

  // Attributes
  NamedAttribute i64(llvm::StringRef n, int64_t v) { return b_.getNamedAttr(n, b_.getI64IntegerAttr(v)); }
  NamedAttribute f64(llvm::StringRef n, double v) { return b_.getNamedAttr(n, b_.getF64FloatAttr(v)); }
  NamedAttribute str(llvm::StringRef n, llvm::StringRef v) { return b_.getNamedAttr(n, b_.getStringAttr(v)); }
  NamedAttribute ref(llvm::StringRef role, const std::string& weight_name) {
    return b_.getNamedAttr(role, weight(weight_name));
  }
  // A reference to a symbol already defined (a state).
  NamedAttribute sym(llvm::StringRef role, const std::string& name) { return b_.getNamedAttr(role, symbols_.at(name)); }
  void rope_attrs(llvm::SmallVectorImpl<NamedAttribute>& a, const RopeParams& r) {
    a.append({f64("theta", r.theta), f64("yarn_factor", r.yarn_factor), f64("yarn_beta_fast", r.beta_fast),
              f64("yarn_beta_slow", r.beta_slow), i64("yarn_original_max_pos", r.original_max_pos)});
  }

  mlir::RankedTensorType rows(int64_t n) {
    return mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, n}, b_.getF32Type());
  }
  mlir::RankedTensorType irows(int64_t n) {
    return mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, n}, b_.getI32Type());
  }

  const TensorInfo& tensor(const std::string& name) const;
  int64_t rows_of(const std::string& name) const { return tensor(name).shape.at(0); }

  // A smelt.weight for a checkpoint tensor (created on first use). Quantized storage (F8 / packed FP4) is
  // refused unless allow_quantized_.
  mlir::FlatSymbolRefAttr weight(const std::string& name);
  mlir::FlatSymbolRefAttr state(const std::string& name, llvm::StringRef kind, int64_t rows, int64_t width);

  mlir::Operation* make(llvm::StringRef name, mlir::ValueRange operands, mlir::TypeRange results,
                        llvm::ArrayRef<NamedAttribute> attrs);
  Value make1(llvm::StringRef name, mlir::ValueRange operands, mlir::Type result, llvm::ArrayRef<NamedAttribute> attrs) {
    return make(name, operands, result, attrs)->getResult(0);
  }

  // Creates the module and @forward (ids -> logits of width `vocab`); returns the ids argument.
  Value begin(int64_t vocab);
  // Returns the logits, sets the module attributes and verifies the module (errors as one line).
  mlir::OwningOpRef<mlir::ModuleOp> finish(Value logits, llvm::StringRef family);

  mlir::MLIRContext& ctx_;
  const ModelDescription& m_;
  const ModelConfig& c_;
  const ImportOptions& o_;
  mlir::OpBuilder b_;
  mlir::OwningOpRef<mlir::ModuleOp> owned_;
  mlir::ModuleOp module_;
  mlir::func::FuncOp forward_;
  int64_t layer_ = -1;  // layer of the ops being built (-1: embedding / head)
  std::map<std::string, mlir::FlatSymbolRefAttr> symbols_;
  std::vector<mlir::Operation*> states_;
  int64_t max_seq_len_ = 0;
  bool allow_quantized_ = false;
};

// The V4.1 forward (importer_v41.cc).
mlir::OwningOpRef<mlir::ModuleOp> import_v41(mlir::MLIRContext& ctx, const ModelDescription& m,
                                             const ImportOptions& o);

}  // namespace smelt::import_detail
