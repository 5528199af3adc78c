// Verifiers of the DeepSeek-V4.1 DSpark ops (docs/ops.md, section DSpark) and of smelt.concat (the DSpark
// target capture joins the target layers' means): local shape rules and weight shapes.
#include "compiler/dialect/dialect.h"
#include "compiler/dialect/verify_util.h"

namespace smelt {

using mlir::failure;
using mlir::LogicalResult;
using mlir::success;
using ST = mlir::SymbolTableCollection;
using namespace verify_util;

LogicalResult ConcatOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  const size_t n = getXs().size();
  if (n < 2 || n > 4) return emitOpError() << "takes 2 to 4 inputs, got " << n;
  int64_t total = 0;
  for (mlir::Value x : getXs()) total += cols(x);
  return expect_cols(*this, getY(), total, "result (the inputs' columns summed)");
}

LogicalResult ConcatOp::verifySymbolUses(ST&) { return success(); }

LogicalResult DsparkAttentionOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getHeads(), "heads")) ||
      failed(expect_positive(*this, getHeadDim(), "head_dim")) || failed(expect_positive(*this, getWindow(), "window")))
    return failure();
  if (!(getScale().convertToDouble() > 0)) return emitOpError() << "scale must be positive";
  if (failed(expect_cols(*this, getQ(), getHeads() * getHeadDim(), "q (heads * head_dim)")) ||
      failed(expect_cols(*this, getKv(), getHeadDim(), "kv (head_dim)")))
    return failure();
  return expect_cols(*this, getO(), cols(getQ()), "result");
}

LogicalResult DsparkAttentionOp::verifySymbolUses(ST& st) {
  return expect_weight(*this, st, "sink", getSinkAttr(), {getHeads()});
}

LogicalResult DsparkHeadOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_cols(*this, getIds(), 1, "ids")) ||
      failed(expect_cols(*this, getDraftIds(), 1, "draft_ids")) ||
      failed(expect_cols(*this, getConfidence(), 1, "confidence")))
    return failure();
  return expect_cols(*this, getBiasedLogits(), cols(getLogits()), "biased_logits");
}

// markov_embed / markov_head [V, rank] with V the logits' width; proj [1, D + rank] with D the width of x.
LogicalResult DsparkHeadOp::verifySymbolUses(ST& st) {
  const int64_t V = cols(getLogits()), D = cols(getX());
  if (failed(expect_weight(*this, st, "markov_embed", getMarkovEmbedAttr(), {V, -1}))) return failure();
  const int64_t rank = dim(*this, st, getMarkovEmbedAttr(), 1);
  if (failed(expect_weight(*this, st, "markov_head", getMarkovHeadAttr(), {V, rank}))) return failure();
  return expect_weight(*this, st, "proj", getProjAttr(), {1, rank < 0 ? -1 : D + rank});
}

}  // namespace smelt
