// Verifiers of the DeepSeek-V4.1 ops (docs/ops.md, section DeepSeek-V4.1): local shape rules and weight
// shapes against the referenced smelt.weight symbols.
#include <cmath>

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/verify_util.h"

namespace smelt {

using mlir::failure;
using mlir::LogicalResult;
using mlir::success;
using ST = mlir::SymbolTableCollection;
using namespace verify_util;

LogicalResult FakeQuantOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  static const llvm::StringRef modes[] = {"fp8_e4m3_b32", "fp4_e2m1_g16_e4m3", "fp4_e2m1_b32_ue8m0"};
  if (!llvm::is_contained(modes, getMode()))
    return emitOpError() << "unknown mode '" << getMode()
                         << "' (expected fp8_e4m3_b32, fp4_e2m1_g16_e4m3 or fp4_e2m1_b32_ue8m0)";
  int64_t heads = getHeads().value_or(1), c = cols(getX());
  if (failed(expect_positive(*this, heads, "heads"))) return failure();
  if (c % heads) return emitOpError() << "columns " << c << " are not a multiple of heads " << heads;
  int64_t channels = getChannels().value_or(c / heads);
  if (channels <= 0 || channels > c / heads)
    return emitOpError() << "channels must be in (0, " << c / heads << "], got " << channels;
  return expect_cols(*this, getY(), c, "result");
}

LogicalResult KvCompressorOp::verify() {
  if (failed(verify_rows(*this)) || failed(check_rope_dims(*this, getHeadDim(), getRopeDim(), getTheta().convertToDouble())))
    return failure();
  const int64_t r = getRatio();
  if (r != 1 && r != 2) return emitOpError() << "ratio must be 1 or 2, got " << r;
  if ((r == 2) != bool(getWgateAttr())) return emitOpError() << "ratio 2 needs a wgate weight, ratio 1 takes none";
  if ((r == 2) != bool(getRingAttr())) return emitOpError() << "ratio 2 needs a ring state, ratio 1 takes none";
  if (bool(getWkAttr()) != bool(getKNormAttr()) || bool(getWkAttr()) != bool(getIndexPoolAttr()))
    return emitOpError() << "index keys need all of wk, k_norm and index_pool (or none)";
  if (getWkAttr() && (getIndexHeadDim() < getRopeDim() || failed(expect_positive(*this, getIndexHeadDim(), "index_head_dim"))))
    return emitOpError() << "index_head_dim must be at least rope_dim " << getRopeDim();
  if (!(getEps().convertToDouble() > 0)) return emitOpError() << "eps must be positive";
  return success();
}

LogicalResult KvCompressorOp::verifySymbolUses(ST& st) {
  const int64_t hd = getHeadDim(), dI = getIndexHeadDim(), d = cols(getX());
  if (failed(expect_weight(*this, st, "wkv", getWkvAttr(), {hd, d})) ||
      failed(expect_weight(*this, st, "wgate", getWgateAttr(), {hd, d})) ||
      failed(expect_weight(*this, st, "norm", getNormAttr(), {hd})) ||
      failed(expect_weight(*this, st, "wk", getWkAttr(), {dI, hd})))
    return failure();
  return expect_weight(*this, st, "k_norm", getKNormAttr(), {dI});
}

// The V4.1 indexer's candidate level (smelt.indexer_v41, smelt.indexer_select): candidate_blocks,
// is_candidate_source and the cand_in / cand_out lists. `allowed` false (the v4 variant): no candidate level at all.
template <typename Op>
LogicalResult verify_candidate_level(Op op, bool allowed) {
  const int64_t cb = op.getCandidateBlocks(), src = op.getIsCandidateSource();
  if (src != 0 && src != 1) return op.emitOpError() << "is_candidate_source must be 0 or 1";
  if (cb < 0) return op.emitOpError() << "candidate_blocks must be >= 0 (0 = no candidate level)";
  if (!allowed && (cb || src || op.getCandIn() || op.getCandOut()))
    return op.emitOpError() << "only v41 has a candidate level";
  if (cb > 0 && op.getCandidateBlockSize() <= 0) return op.emitOpError() << "candidate_block_size must be positive";
  if (src && !op.getCandOut()) return op.emitOpError() << "a candidate source produces cand_out";
  if (!src && op.getCandOut()) return op.emitOpError() << "only a candidate source produces cand_out";
  if ((op.getCandIn() || op.getCandOut()) && cb == 0)
    return op.emitOpError() << "candidate lists need candidate_blocks > 0";
  if (src && op.getCandIn()) return op.emitOpError() << "a candidate source takes no cand_in";
  if (op.getCandIn() && failed(expect_cols(op, op.getCandIn(), cb, "cand_in (candidate_blocks)"))) return failure();
  if (op.getCandOut() && failed(expect_cols(op, op.getCandOut(), cb, "cand_out (candidate_blocks)"))) return failure();
  return success();
}

LogicalResult IndexerV41Op::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getHeads(), "heads")) ||
      failed(expect_positive(*this, getHeadDim(), "head_dim")) || failed(expect_positive(*this, getRatio(), "ratio")) ||
      failed(expect_positive(*this, getTopk(), "topk")))
    return failure();
  if (failed(expect_cols(*this, getQ(), getHeads() * getHeadDim(), "q (heads * head_dim)")) ||
      failed(expect_cols(*this, getW(), getHeads(), "w (heads)")) ||
      failed(expect_cols(*this, getIdx(), getTopk(), "idx (topk)")))
    return failure();
  return verify_candidate_level(*this, true);
}

LogicalResult IndexerV41Op::verifySymbolUses(ST&) { return success(); }

LogicalResult EngramHashOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_cols(*this, getIds(), 1, "ids")) ||
      failed(expect_positive(*this, getVocab(), "vocab")) || failed(expect_positive(*this, getHeads(), "heads")) ||
      failed(expect_positive(*this, getCompressedVocab(), "compressed_vocab")))
    return failure();
  if (getMaxNgram() < 2) return emitOpError() << "max_ngram must be at least 2, got " << getMaxNgram();
  if (getLayers().empty()) return emitOpError() << "needs at least one Engram layer";
  if (getPadId() < 0) return emitOpError() << "pad_id must be >= 0";
  int64_t want = int64_t(getLayers().size()) * (getMaxNgram() - 1) * getHeads();
  return expect_cols(*this, getHashes(), want, "hashes (layers * (max_ngram-1) * heads)");
}

LogicalResult EngramHashOp::verifySymbolUses(ST& st) {
  return expect_weight(*this, st, "token_map", getTokenMapAttr(), {-1});
}

LogicalResult EngramOp::verify() {
  const int64_t n = getHcMult(), d = getDim(), hd = getHeadDim(), c = getCols();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, n, "hc_mult")) ||
      failed(expect_positive(*this, d, "dim")) || failed(expect_positive(*this, hd, "head_dim")) ||
      failed(expect_positive(*this, c, "cols")))
    return failure();
  if (hd % 32) return emitOpError() << "head_dim must be a multiple of 32 (one scale per 32 channels), got " << hd;
  if (getLayerIndex() < 0) return emitOpError() << "layer_index must be >= 0";
  if (cols(getHashes()) < (getLayerIndex() + 1) * c)
    return emitOpError() << "hashes have " << cols(getHashes()) << " columns, too few for layer_index "
                         << getLayerIndex() << " of " << c << " columns";
  if (!(getEps().convertToDouble() > 0)) return emitOpError() << "eps must be positive";
  if (failed(expect_cols(*this, getStreams(), n * d, "streams (hc_mult * dim)"))) return failure();
  return expect_cols(*this, getResult(), n * d, "result");
}

// The Engram table (smelt.engram, smelt.engram_lookup): FP8 rows [rows, hd] with E8M0 scales per 32 channels;
// `rows` gets the table's row count.
template <typename Op>
LogicalResult verify_engram_table(Op op, ST& st, int64_t hd, int64_t& rows) {
  auto table = lookup_weight(op, st, op.getTableAttr());
  if (table && !llvm::isa<mlir::Float8E4M3FNType>(table.getTensorType().getElementType()))
    return op.emitOpError() << "table " << op.getTableAttr() << " must be f8E4M3FN (FP8 rows with per-32 scales)";
  if (failed(expect_weight(op, st, "table", op.getTableAttr(), {-1, hd}))) return failure();
  rows = dim(op, st, op.getTableAttr(), 0);
  auto ts = lookup_weight(op, st, op.getTableScaleAttr());
  if (ts && !llvm::isa<mlir::Float8E8M0FNUType>(ts.getTensorType().getElementType()))
    return op.emitOpError() << "table_scale " << op.getTableScaleAttr() << " must be f8E8M0FNU";
  return expect_weight(op, st, "table_scale", op.getTableScaleAttr(), {rows, hd / 32});
}

// The gate's weights (smelt.engram, smelt.engram_gate): FP8 wkv [(n + 1) d, c hd] with 32x32 scales, q / k norms.
template <typename Op>
LogicalResult verify_engram_gate_weights(Op op, ST& st, int64_t n, int64_t d, int64_t hd, int64_t c) {
  bool quantized = false;
  if (failed(expect_linear_weight(op, st, "wkv", op.getWkvAttr(), op.getWkvScaleAttr(), (n + 1) * d, c * hd,
                                  &quantized)))
    return failure();
  auto wkv = lookup_weight(op, st, op.getWkvAttr());
  if (wkv && !llvm::isa<mlir::Float8E4M3FNType>(wkv.getTensorType().getElementType()))
    return op.emitOpError() << "wkv " << op.getWkvAttr() << " must be FP8 (f8E4M3FN with 32x32 block scales)";
  if (failed(expect_weight(op, st, "q_weight", op.getQWeightAttr(), {n, d}))) return failure();
  return expect_weight(op, st, "k_weight", op.getKWeightAttr(), {n, d});
}

LogicalResult EngramOp::verifySymbolUses(ST& st) {
  int64_t rows = 0;
  if (failed(verify_engram_table(*this, st, getHeadDim(), rows))) return failure();
  return verify_engram_gate_weights(*this, st, getHcMult(), getDim(), getHeadDim(), getCols());
}

// The TP halves of smelt.engram (smelt-partition): the lookup of a row range, and the gate on joined rows.
LogicalResult EngramLookupOp::verify() {
  const int64_t hd = getHeadDim(), c = getCols();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, hd, "head_dim")) ||
      failed(expect_positive(*this, c, "cols")) || failed(expect_positive(*this, getRowsTotal(), "rows_total")))
    return failure();
  if (hd % 32) return emitOpError() << "head_dim must be a multiple of 32 (one scale per 32 channels), got " << hd;
  if (getLayerIndex() < 0) return emitOpError() << "layer_index must be >= 0";
  if (getRowBegin() < 0 || getRowBegin() > getRowsTotal())
    return emitOpError() << "row_begin " << getRowBegin() << " is outside [0, rows_total " << getRowsTotal() << "]";
  if (cols(getHashes()) < (getLayerIndex() + 1) * c)
    return emitOpError() << "hashes have " << cols(getHashes()) << " columns, too few for layer_index "
                         << getLayerIndex() << " of " << c << " columns";
  return expect_cols(*this, getE(), c * hd, "e (cols * head_dim)");
}

LogicalResult EngramLookupOp::verifySymbolUses(ST& st) {
  int64_t rows = 0;
  if (failed(verify_engram_table(*this, st, getHeadDim(), rows))) return failure();
  if (getRowBegin() + rows > getRowsTotal())
    return emitOpError() << "table rows " << getRowBegin() << " + " << rows << " exceed rows_total " << getRowsTotal();
  return success();
}

LogicalResult EngramGateOp::verify() {
  const int64_t n = getHcMult(), d = getDim(), hd = getHeadDim(), c = getCols();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, n, "hc_mult")) ||
      failed(expect_positive(*this, d, "dim")) || failed(expect_positive(*this, hd, "head_dim")) ||
      failed(expect_positive(*this, c, "cols")))
    return failure();
  if (hd % 32) return emitOpError() << "head_dim must be a multiple of 32 (one scale per 32 channels), got " << hd;
  if (!(getEps().convertToDouble() > 0)) return emitOpError() << "eps must be positive";
  if (!getWkvAttr() && getWkvScaleAttr()) return emitOpError() << "wkv_scale without wkv";
  if (failed(getWkvAttr() ? expect_cols(*this, getE(), c * hd, "e (cols * head_dim)")
                          : expect_cols(*this, getE(), (n + 1) * d, "e (the projected keys and value, (hc_mult + 1) * dim)")) ||
      failed(expect_cols(*this, getStreams(), n * d, "streams (hc_mult * dim)")))
    return failure();
  return expect_cols(*this, getResult(), n * d, "result");
}

LogicalResult EngramGateOp::verifySymbolUses(ST& st) {
  if (getWkvAttr()) return verify_engram_gate_weights(*this, st, getHcMult(), getDim(), getHeadDim(), getCols());
  if (failed(expect_weight(*this, st, "q_weight", getQWeightAttr(), {getHcMult(), getDim()}))) return failure();
  return expect_weight(*this, st, "k_weight", getKWeightAttr(), {getHcMult(), getDim()});
}

// The TP halves of smelt.indexer_topk / smelt.indexer_v41 (smelt-partition): a rank's partial scores, the
// selection on the joined scores.
LogicalResult IndexerScoresOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getHeads(), "heads")) ||
      failed(expect_positive(*this, getHeadDim(), "head_dim")) || failed(expect_positive(*this, getRatio(), "ratio")) ||
      failed(expect_positive(*this, cols(getScores()), "scores width")))
    return failure();
  if (getVariant() != "v4" && getVariant() != "v41")
    return emitOpError() << "variant must be v4 or v41, got '" << getVariant() << "'";
  if (getHeadsTotal() < getHeads())
    return emitOpError() << "heads_total " << getHeadsTotal() << " is below this rank's heads " << getHeads();
  if (failed(expect_cols(*this, getQ(), getHeads() * getHeadDim(), "q (heads * head_dim)"))) return failure();
  return expect_cols(*this, getW(), getHeads(), "w (heads)");
}

LogicalResult IndexerScoresOp::verifySymbolUses(ST& st) {
  auto pool = st.lookupNearestSymbolFrom<StateOp>(*this, getIndexPoolAttr());
  if (!pool) return emitOpError() << "index_pool " << getIndexPoolAttr() << " is not a smelt.state";
  auto shape = pool.getTensorType().getShape();
  if (shape[0] != cols(getScores()) || shape[1] != getHeadDim())
    return emitOpError() << "index_pool " << getIndexPoolAttr() << " of shape " << shape_str(shape)
                         << " does not give one score per row (" << cols(getScores()) << ") of head_dim "
                         << getHeadDim();
  return success();
}

LogicalResult IndexerSelectOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getRatio(), "ratio")) ||
      failed(expect_positive(*this, getTopk(), "topk")) ||
      failed(expect_cols(*this, getIdx(), getTopk(), "idx (topk)")))
    return failure();
  const bool v41 = getVariant() == "v41";
  if (!v41 && getVariant() != "v4") return emitOpError() << "variant must be v4 or v41, got '" << getVariant() << "'";
  return verify_candidate_level(*this, v41);
}

LogicalResult IndexerSelectOp::verifySymbolUses(ST&) { return success(); }

LogicalResult HcMeanOp::verify() {
  int64_t n = getHcMult();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, n, "hc_mult"))) return failure();
  return expect_cols(*this, getStreams(), n * cols(getM()), "streams");
}

LogicalResult HcMeanOp::verifySymbolUses(ST&) { return success(); }

LogicalResult CaptureOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  if (getName().empty()) return emitOpError() << "needs a non-empty name";
  if (auto shape = getRowShape()) {
    int64_t n = 1;
    for (int64_t d : *shape) {
      if (d <= 0) return emitOpError() << "row_shape dimensions must be positive";
      n *= d;
    }
    if (n != cols(getX())) return emitOpError() << "row_shape has " << n << " elements but x has " << cols(getX()) << " columns";
  }
  return success();
}

LogicalResult CaptureOp::verifySymbolUses(ST&) { return success(); }

LogicalResult FakeQuantOp::verifySymbolUses(ST&) { return success(); }

}  // namespace smelt
