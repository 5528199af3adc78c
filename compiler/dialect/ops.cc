// Compute op verifiers (local shape rules), weight shape checks against the referenced smelt.weight
// (verifySymbolUses) and the table of weight / state roles per op.
#include <cmath>

#include "llvm/ADT/TypeSwitch.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "compiler/dialect/verify_util.h"

namespace smelt {

using mlir::failure;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::success;
using mlir::Value;

std::string verify_util::shape_str(llvm::ArrayRef<int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return out + "]";
}

LogicalResult verify_util::expect_cols(Operation* op, Value v, int64_t want, llvm::StringRef what) {
  if (cols(v) != want)
    return op->emitOpError() << what << " must have " << want << " columns, got " << cols(v);
  return success();
}

LogicalResult verify_util::expect_positive(Operation* op, int64_t v, llvm::StringRef what) {
  if (v <= 0) return op->emitOpError() << what << " must be positive, got " << v;
  return success();
}

WeightOp verify_util::lookup_weight(Operation* op, mlir::SymbolTableCollection& st, mlir::FlatSymbolRefAttr ref) {
  return ref ? st.lookupNearestSymbolFrom<WeightOp>(op, ref) : WeightOp();
}

// Checks a referenced weight's shape (-1 = any extent). An unresolved reference or one naming something
// other than a smelt.weight is left to smelt-verify, which reports it with the module-wide picture.
LogicalResult verify_util::expect_weight(Operation* op, mlir::SymbolTableCollection& st, llvm::StringRef role,
                                         mlir::FlatSymbolRefAttr ref, llvm::ArrayRef<int64_t> want) {
  auto w = lookup_weight(op, st, ref);
  if (!w) return success();
  auto have = w.getTensorType().getShape();
  bool ok = have.size() == want.size();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || want[i] == have[i];
  if (!ok)
    return op->emitOpError() << "weight '" << role << "' " << ref << " has shape " << shape_str(have)
                             << " but this op needs " << shape_str(want);
  return success();
}

int64_t verify_util::dim(Operation* op, mlir::SymbolTableCollection& st, mlir::FlatSymbolRefAttr ref, unsigned i) {
  auto w = lookup_weight(op, st, ref);
  if (!w || w.getTensorType().getRank() <= i) return -1;
  return w.getTensorType().getDimSize(i);
}

LogicalResult verify_util::check_rope_dims(Operation* op, int64_t head_dim, int64_t rope_dim, double theta) {
  if (failed(expect_positive(op, head_dim, "head_dim"))) return failure();
  if (rope_dim <= 0 || rope_dim % 2 || rope_dim > head_dim)
    return op->emitOpError() << "rope_dim must be even and in (0, head_dim=" << head_dim << "], got " << rope_dim;
  if (!(theta > 0)) return op->emitOpError() << "theta must be positive, got " << theta;
  return success();
}

LogicalResult verify_util::expect_linear_weight(Operation* op, mlir::SymbolTableCollection& st, llvm::StringRef role,
                                                mlir::FlatSymbolRefAttr weight, mlir::FlatSymbolRefAttr scale, int64_t n,
                                                int64_t k, bool* quantized) {
  if (quantized) *quantized = false;
  auto w = lookup_weight(op, st, weight);
  if (!w) return success();
  mlir::Type e = w.getTensorType().getElementType();
  bool fp8 = llvm::isa<mlir::Float8E4M3FNType>(e), fp4 = e.isInteger(8);
  if (quantized) *quantized = fp8 || fp4;
  std::string srole = role.str() + ".scale";
  if (!fp8 && !fp4) {
    if (scale) return op->emitOpError() << "weight '" << role << "' " << weight << " is not quantized but has a scale";
    return expect_weight(op, st, role, weight, {n, k});
  }
  if (!scale)
    return op->emitOpError() << "weight '" << role << "' " << weight << " is quantized (" << e << ") but has no scale";
  auto s = lookup_weight(op, st, scale);
  if (s && !llvm::isa<mlir::Float8E8M0FNUType>(s.getTensorType().getElementType()))
    return op->emitOpError() << "scale of '" << role << "' " << scale << " must be f8E8M0FNU, got "
                             << s.getTensorType().getElementType();
  if (fp4) {
    if (k % 2) return op->emitOpError() << "packed FP4 weight '" << role << "' needs an even input width, got " << k;
    if (failed(expect_weight(op, st, role, weight, {n, k / 2}))) return failure();
    return expect_weight(op, st, srole, scale, {n, (k + 31) / 32});
  }
  if (failed(expect_weight(op, st, role, weight, {n, k}))) return failure();
  if (!s) return success();
  auto have = s.getTensorType().getShape();
  for (int64_t b = 32; b <= 4096; b *= 2)
    if (have.size() == 2 && have[0] == (n + b - 1) / b && have[1] == (k + b - 1) / b) return success();
  return op->emitOpError() << "scale of '" << role << "' " << scale << " has shape " << shape_str(have)
                           << ", which is no power-of-two block (>= 32) of the " << shape_str({n, k}) << " weight";
}

LogicalResult verify_util::expect_one_of(Operation* op, llvm::StringRef attr, llvm::ArrayRef<llvm::StringRef> allowed) {
  auto a = op->getAttrOfType<mlir::StringAttr>(attr);
  if (!a || a.getValue().empty() || llvm::is_contained(allowed, a.getValue())) return success();
  auto d = op->emitOpError() << "unknown " << attr << " '" << a.getValue() << "' (expected ";
  llvm::interleave(allowed, d, " or ");
  return d << ")";
}

using namespace verify_util;

//===--- local verifiers ---===//

LogicalResult EmbeddingOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  return expect_cols(*this, getIds(), 1, "ids");
}

LogicalResult HcInitOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getHcMult(), "hc_mult"))) return failure();
  return expect_cols(*this, getStreams(), getHcMult() * cols(getX()), "result");
}

LogicalResult HcMixOp::verify() {
  int64_t n = getHcMult();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, n, "hc_mult")) ||
      failed(expect_positive(*this, getSinkhornIters(), "sinkhorn_iters")) ||
      failed(expect_one_of(*this, "variant", {"v4", "v41"})))
    return failure();
  if (cols(getStreams()) % n) return emitOpError() << "streams columns " << cols(getStreams()) << " are not a multiple of hc_mult " << n;
  if (failed(expect_cols(*this, getPre(), n, "pre")) || failed(expect_cols(*this, getPost(), n, "post")))
    return failure();
  return expect_cols(*this, getComb(), n * n, "comb");
}

LogicalResult HcCollapseOp::verify() {
  int64_t n = getHcMult();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, n, "hc_mult")) ||
      failed(expect_one_of(*this, "collapse_round", {"bf16"})))
    return failure();
  if (bool(getNormAttr()) != bool(getNormEps()))
    return emitOpError() << "norm and norm_eps come together";
  if (getNormEps() && !(getNormEps()->convertToDouble() > 0)) return emitOpError() << "norm_eps must be positive";
  if (getCollapseRound() && !getNormAttr()) return emitOpError() << "collapse_round needs norm (else it is round)";
  if (getPre() && failed(expect_cols(*this, getPre(), n, "pre"))) return failure();
  return expect_cols(*this, getStreams(), n * cols(getU()), "streams");
}

LogicalResult HcExpandOp::verify() {
  int64_t n = getHcMult();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, n, "hc_mult"))) return failure();
  if (failed(expect_cols(*this, getStreams(), n * cols(getY()), "streams")) || failed(expect_cols(*this, getPost(), n, "post")) ||
      failed(expect_cols(*this, getComb(), n * n, "comb")))
    return failure();
  return expect_cols(*this, getResult(), cols(getStreams()), "result");
}

LogicalResult HcHeadOp::verify() {
  int64_t n = getHcMult();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, n, "hc_mult"))) return failure();
  return expect_cols(*this, getStreams(), n * cols(getH()), "streams");
}

LogicalResult RmsNormOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getGroups(), "groups"))) return failure();
  if (!(getEps().convertToDouble() > 0)) return emitOpError() << "eps must be positive";
  if (cols(getX()) % getGroups())
    return emitOpError() << "columns " << cols(getX()) << " are not a multiple of groups " << getGroups();
  return expect_cols(*this, getY(), cols(getX()), "result");
}

LogicalResult LinearOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_one_of(*this, "act_quant", {"fp8_e4m3_b32"}))) return failure();
  if (auto s = getScaleAfter(); s && !(std::isfinite(s->convertToDouble()) && s->convertToDouble() != 0))
    return emitOpError() << "scale_after must be finite and non-zero";
  if (getActQuant() && !getActQuant()->empty() && !getScale())
    return emitOpError() << "act_quant needs a quantized weight (one with a scale)";
  return success();
}

LogicalResult GroupedLinearOp::verify() {
  int64_t g = getGroups();
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, g, "groups"))) return failure();
  if (cols(getX()) % g || cols(getY()) % g)
    return emitOpError() << "input columns " << cols(getX()) << " and result columns " << cols(getY())
                         << " must both be multiples of groups " << g;
  return success();
}

LogicalResult RopeOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getHeads(), "heads")) ||
      failed(expect_one_of(*this, "variant", {"v4", "v41"})) ||
      failed(check_rope_dims(*this, getHeadDim(), getRopeDim(), getTheta().convertToDouble())))
    return failure();
  if (failed(expect_cols(*this, getX(), getHeads() * getHeadDim(), "x (heads * head_dim)"))) return failure();
  if (getInverse() != 0 && getInverse() != 1) return emitOpError() << "inverse must be 0 or 1";
  if (getYarnFactor().convertToDouble() < 0) return emitOpError() << "yarn_factor must be >= 0 (0 = no YaRN)";
  return expect_cols(*this, getY(), cols(getX()), "result");
}

LogicalResult WindowKvUpdateOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  return expect_positive(*this, getWindow(), "window");
}

LogicalResult CompressorOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getRatio(), "ratio")) ||
      failed(check_rope_dims(*this, getHeadDim(), getRopeDim(), getTheta().convertToDouble())))
    return failure();
  if (getOverlap() != 0 && getOverlap() != 1) return emitOpError() << "overlap must be 0 or 1";
  return success();
}

LogicalResult IndexerTopkOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getHeads(), "heads")) ||
      failed(expect_positive(*this, getHeadDim(), "head_dim")) || failed(expect_positive(*this, getRatio(), "ratio")) ||
      failed(expect_positive(*this, getTopk(), "topk")))
    return failure();
  if (failed(expect_cols(*this, getQ(), getHeads() * getHeadDim(), "q (heads * head_dim)")) ||
      failed(expect_cols(*this, getW(), getHeads(), "w (heads)")))
    return failure();
  return expect_cols(*this, getIdx(), getTopk(), "idx (topk)");
}

LogicalResult SparseAttentionOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getHeads(), "heads")) ||
      failed(expect_positive(*this, getHeadDim(), "head_dim")) || failed(expect_positive(*this, getWindow(), "window")))
    return failure();
  if (getRatio() < 0) return emitOpError() << "ratio must be >= 0 (0 = window only)";
  if (failed(expect_one_of(*this, "numerics", {"v41", "fp32"}))) return failure();
  if (!(getScale().convertToDouble() > 0)) return emitOpError() << "scale must be positive";
  if (failed(expect_cols(*this, getQ(), getHeads() * getHeadDim(), "q (heads * head_dim)")) ||
      failed(expect_cols(*this, getKv(), getHeadDim(), "kv (head_dim)")) ||
      failed(expect_cols(*this, getO(), cols(getQ()), "result")))
    return failure();
  if (getRatio() == 0 && (getIdx() || getPool()))
    return emitOpError() << "a window-only attention (ratio 0) takes neither idx nor a pool";
  if (getRatio() > 0 && !getPool()) return emitOpError() << "ratio " << getRatio() << " needs a pool state";
  return success();
}

LogicalResult MoeRouteOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getTopk(), "topk"))) return failure();
  static const llvm::StringRef scorings[] = {"sqrtsoftplus", "softmax", "sigmoid"};
  if (!llvm::is_contained(scorings, getScoring()))
    return emitOpError() << "unknown scoring '" << getScoring() << "' (expected sqrtsoftplus, softmax or sigmoid)";
  if (auto t = getGateTemp(); t && !(t->convertToDouble() > 0 && std::isfinite(t->convertToDouble())))
    return emitOpError() << "gate_temp must be positive";
  if (bool(getIds()) != bool(getTid2eid()))
    return emitOpError() << "hash routing needs both the ids operand and a tid2eid weight (or neither)";
  if (getIds() && failed(expect_cols(*this, getIds(), 1, "ids"))) return failure();
  if (failed(expect_cols(*this, getWeights(), getTopk(), "weights (topk)"))) return failure();
  return expect_cols(*this, getIdx(), getTopk(), "idx (topk)");
}

LogicalResult MoeExpertsOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_positive(*this, getNExperts(), "n_experts")) ||
      failed(expect_positive(*this, getTopk(), "topk")))
    return failure();
  const int64_t routed = getNRouted().value_or(getNExperts()), begin = getExpertBegin().value_or(0);
  if (routed < getNExperts() || begin < 0 || begin + getNExperts() > routed)
    return emitOpError() << "experts " << begin << ".." << begin + getNExperts() << " are not within n_routed " << routed;
  if (getTopk() > routed) return emitOpError() << "topk " << getTopk() << " exceeds the model's " << routed << " experts";
  if (failed(expect_one_of(*this, "act_quant", {"fp8_e4m3_b32"})) || failed(expect_one_of(*this, "variant", {"v41"})))
    return failure();
  // Quantized experts (each weight followed by its scale) are the v41 variant; act_quant is set unless
  // smelt-numerics{mode=fp32} turned the model's numerics off.
  const bool quant = getVariant() && *getVariant() == "v41";
  if (getActQuant() && !getActQuant()->empty() && !quant)
    return emitOpError() << "act_quant needs quantized experts (variant v41)";
  if (int64_t(getExperts().size()) != (quant ? 6 : 3) * getNExperts())
    return emitOpError() << "expects " << (quant ? 6 : 3) << " * n_experts = " << (quant ? 6 : 3) * getNExperts()
                         << (quant ? " expert weights (e0.w1, e0.w1.scale, e0.w2, e0.w2.scale, e0.w3, e0.w3.scale, "
                                   : " expert weights (e0.w1, e0.w2, e0.w3, ")
                         << "e1.w1, ...), got " << getExperts().size();
  if (failed(expect_cols(*this, getWeights(), getTopk(), "weights (topk)")) ||
      failed(expect_cols(*this, getIdx(), getTopk(), "idx (topk)")))
    return failure();
  return expect_cols(*this, getY(), cols(getX()), "result");
}

LogicalResult SwigluMlpOp::verify() {
  if (failed(verify_rows(*this)) || failed(expect_one_of(*this, "act_quant", {"fp8_e4m3_b32"})) ||
      failed(expect_one_of(*this, "variant", {"v41"})))
    return failure();
  const bool quant = bool(getW1ScaleAttr());
  if (bool(getW2ScaleAttr()) != quant || bool(getW3ScaleAttr()) != quant)
    return emitOpError() << "w1_scale, w2_scale and w3_scale: all or none";
  if (getActQuant() && !getActQuant()->empty() && !quant)
    return emitOpError() << "act_quant needs quantized weights (w1_scale, w2_scale, w3_scale)";
  return expect_cols(*this, getY(), cols(getX()), "result");
}

LogicalResult AddOp::verify() {
  if (failed(verify_rows(*this))) return failure();
  if (failed(expect_cols(*this, getB(), cols(getA()), "b"))) return failure();
  return expect_cols(*this, getC(), cols(getA()), "result");
}

//===--- weight shapes ---===//

using ST = mlir::SymbolTableCollection;
#define NO_SYMBOL_SHAPES(Op) \
  LogicalResult Op::verifySymbolUses(ST&) { return success(); }
NO_SYMBOL_SHAPES(HcInitOp)
NO_SYMBOL_SHAPES(HcExpandOp)
NO_SYMBOL_SHAPES(RopeOp)
NO_SYMBOL_SHAPES(WindowKvUpdateOp)
NO_SYMBOL_SHAPES(IndexerTopkOp)
NO_SYMBOL_SHAPES(AddOp)
#undef NO_SYMBOL_SHAPES

LogicalResult EmbeddingOp::verifySymbolUses(ST& st) {
  return expect_weight(*this, st, "embed", getEmbedAttr(), {-1, cols(getX())});
}

LogicalResult HcMixOp::verifySymbolUses(ST& st) {
  int64_t n = getHcMult(), mix = (2 + n) * n;
  if (failed(expect_weight(*this, st, "fn", getFnAttr(), {mix, cols(getStreams())})) ||
      failed(expect_weight(*this, st, "base", getBaseAttr(), {mix})))
    return failure();
  return expect_weight(*this, st, "scale", getScaleAttr(), {3});
}

LogicalResult HcHeadOp::verifySymbolUses(ST& st) {
  int64_t n = getHcMult();
  if (failed(expect_weight(*this, st, "fn", getFnAttr(), {n, cols(getStreams())})) ||
      failed(expect_weight(*this, st, "base", getBaseAttr(), {n})))
    return failure();
  return expect_weight(*this, st, "scale", getScaleAttr(), {1});
}

LogicalResult HcCollapseOp::verifySymbolUses(ST& st) {
  return expect_weight(*this, st, "norm", getNormAttr(), {cols(getU())});
}

LogicalResult RmsNormOp::verifySymbolUses(ST& st) {
  return expect_weight(*this, st, "weight", getWeightAttr(), {cols(getX()) / getGroups()});
}

LogicalResult LinearOp::verifySymbolUses(ST& st) {
  bool quantized = false;
  if (failed(expect_linear_weight(*this, st, "weight", getWeightAttr(), getScaleAttr(), cols(getY()), cols(getX()),
                                  &quantized)))
    return failure();
  return success();
}

LogicalResult GroupedLinearOp::verifySymbolUses(ST& st) {
  bool quantized = false;
  if (failed(expect_linear_weight(*this, st, "weight", getWeightAttr(), getScaleAttr(), cols(getY()),
                                  cols(getX()) / getGroups(), &quantized)))
    return failure();
  auto w = lookup_weight(*this, st, getWeightAttr());
  if (quantized && w && w.getTensorType().getElementType().isInteger(8))
    return emitOpError() << "wo_a-style grouped weights may be FP8 (dequantized at load), not packed FP4";
  return success();
}

LogicalResult CompressorOp::verifySymbolUses(ST& st) {
  int64_t c = 1 + getOverlap(), hd = getHeadDim(), d = cols(getX());
  if (failed(expect_weight(*this, st, "wkv", getWkvAttr(), {c * hd, d})) ||
      failed(expect_weight(*this, st, "wgate", getWgateAttr(), {c * hd, d})) ||
      failed(expect_weight(*this, st, "ape", getApeAttr(), {getRatio(), c * hd})))
    return failure();
  return expect_weight(*this, st, "norm", getNormAttr(), {hd});
}

LogicalResult SparseAttentionOp::verifySymbolUses(ST& st) {
  return expect_weight(*this, st, "sink", getSinkAttr(), {getHeads()});
}

LogicalResult MoeRouteOp::verifySymbolUses(ST& st) {
  if (failed(expect_weight(*this, st, "gate", getGateAttr(), {-1, cols(getX())}))) return failure();
  int64_t experts = dim(*this, st, getGateAttr(), 0);
  if (failed(expect_weight(*this, st, "bias", getBiasAttr(), {experts}))) return failure();
  return expect_weight(*this, st, "tid2eid", getTid2eidAttr(), {-1, getTopk()});
}

namespace {
// w1 / w3 [F, D] and w2 [D, F] (logical shapes), F taken from w1; with scales, quantized storage.
LogicalResult expect_swiglu(Operation* op, ST& st, const std::string& prefix, mlir::FlatSymbolRefAttr w1,
                            mlir::FlatSymbolRefAttr w2, mlir::FlatSymbolRefAttr w3, int64_t d,
                            mlir::FlatSymbolRefAttr s1 = {}, mlir::FlatSymbolRefAttr s2 = {},
                            mlir::FlatSymbolRefAttr s3 = {}) {
  int64_t f = dim(op, st, w1, 0);
  if (failed(expect_linear_weight(op, st, prefix + "w1", w1, s1, f, d)) ||
      failed(expect_linear_weight(op, st, prefix + "w2", w2, s2, d, f)))
    return failure();
  return expect_linear_weight(op, st, prefix + "w3", w3, s3, f, d);
}
}  // namespace

LogicalResult MoeExpertsOp::verifySymbolUses(ST& st) {
  auto refs = getExperts().getAsRange<mlir::FlatSymbolRefAttr>();
  llvm::SmallVector<mlir::FlatSymbolRefAttr> all(refs.begin(), refs.end());
  const bool quant = getVariant() && *getVariant() == "v41";  // quantized experts, as in verify() and roles.cc
  if (quant) {
    for (size_t e = 0; e + 5 < all.size(); e += 6)
      if (failed(expect_swiglu(*this, st, "e" + std::to_string(e / 6) + ".", all[e], all[e + 2], all[e + 4],
                               cols(getX()), all[e + 1], all[e + 3], all[e + 5])))
        return failure();
    return success();
  }
  for (size_t e = 0; e + 2 < all.size(); e += 3)
    if (failed(expect_swiglu(*this, st, "e" + std::to_string(e / 3) + ".", all[e], all[e + 1], all[e + 2],
                             cols(getX()))))
      return failure();
  return success();
}

LogicalResult SwigluMlpOp::verifySymbolUses(ST& st) {
  return expect_swiglu(*this, st, "", getW1Attr(), getW2Attr(), getW3Attr(), cols(getX()), getW1ScaleAttr(),
                       getW2ScaleAttr(), getW3ScaleAttr());
}

}  // namespace smelt
