// Builds the V4 forward exactly as docs/ops.md lists it. Every op is created generically by name with its
// attributes, then the whole module is verified (op verifiers + weight shapes), so a mistake here surfaces
// as a verifier error naming the op, not as a wrong plan.
#include "compiler/import/importer.h"

#include <array>
#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"

#include "compiler/dialect/dialect.h"
#include "compiler/import/builder.h"

namespace smelt {

namespace import_detail {

using mlir::NamedAttribute;
using mlir::Value;

namespace {

mlir::Type element_type(mlir::MLIRContext* ctx, DType d) {
  mlir::Builder b(ctx);
  switch (d) {
    case DType::F32: return b.getF32Type();
    case DType::BF16: return b.getBF16Type();
    case DType::F16: return b.getF16Type();
    case DType::F64: return b.getF64Type();
    case DType::I64: return b.getI64Type();
    case DType::I32: return b.getI32Type();
    case DType::I16: return b.getI16Type();
    case DType::I8: return b.getI8Type();
    case DType::U8: return b.getIntegerType(8, /*isSigned=*/false);
    case DType::BOOL: return b.getI1Type();
    case DType::F8_E4M3: return b.getType<mlir::Float8E4M3FNType>();
    case DType::F8_E5M2: return b.getType<mlir::Float8E5M2Type>();
    case DType::F8_E8M0: return b.getType<mlir::Float8E8M0FNUType>();
  }
  return {};
}

}  // namespace

const TensorInfo& Builder::tensor(const std::string& name) const {
  auto it = m_.tensors.find(name);
  if (it == m_.tensors.end()) throw Error(m_.dir + ": the model has no tensor '" + name + "'");
  return it->second;
}

mlir::FlatSymbolRefAttr Builder::weight(const std::string& name) {
  if (auto it = symbols_.find(name); it != symbols_.end()) return it->second;
  const TensorInfo& t = tensor(name);
  mlir::Type elem = element_type(&ctx_, t.dtype);
  bool quantized = t.dtype == DType::F8_E4M3 || t.dtype == DType::F8_E5M2 || t.dtype == DType::F8_E8M0 ||
                   (t.dtype == DType::I8 && name.find(".experts.") != std::string::npos);
  if (quantized && !allow_quantized_)
    throw Error(m_.dir + ": tensor '" + name + "' is stored as " + std::string(dtype_name(t.dtype)) +
                " (quantized); the compiler does not lower quantized weights yet");
  auto src = m_.source_names.find(name);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPoint(forward_);
  WeightOp::create(b_, b_.getUnknownLoc(), b_.getStringAttr(name),
                   mlir::TypeAttr::get(mlir::RankedTensorType::get(t.shape, elem)),
                   b_.getStringAttr(src != m_.source_names.end() ? src->second : t.name),
                   b_.getI64IntegerAttr(t.file), b_.getI64IntegerAttr(int64_t(t.offset)), b_.getStringAttr(""),
                   /*source_shape=*/nullptr);
  return symbols_[name] = mlir::FlatSymbolRefAttr::get(&ctx_, name);
}

mlir::FlatSymbolRefAttr Builder::state(const std::string& name, llvm::StringRef kind, int64_t rows, int64_t width) {
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPoint(forward_);
  auto type = mlir::RankedTensorType::get({rows, width}, b_.getF32Type());
  states_.push_back(StateOp::create(b_, b_.getUnknownLoc(), b_.getStringAttr(name), b_.getStringAttr(kind),
                                    b_.getI64IntegerAttr(layer_), mlir::TypeAttr::get(type)));
  return symbols_[name] = mlir::FlatSymbolRefAttr::get(&ctx_, name);
}

mlir::Operation* Builder::make(llvm::StringRef name, mlir::ValueRange operands, mlir::TypeRange results,
                                llvm::ArrayRef<NamedAttribute> attrs) {
  std::string where = layer_ >= 0 ? "layers." + std::to_string(layer_) : std::string(name.drop_front(6));
  mlir::OperationState st(mlir::NameLoc::get(b_.getStringAttr(where)), name);
  st.addOperands(operands);
  st.addTypes(results);
  st.addAttributes(attrs);
  if (layer_ >= 0) st.addAttribute("layer", b_.getI64IntegerAttr(layer_));
  return b_.create(st);
}

Value Builder::begin(int64_t vocab) {
  auto loc = mlir::NameLoc::get(b_.getStringAttr(m_.dir));
  owned_ = mlir::ModuleOp::create(loc);
  module_ = *owned_;
  b_.setInsertionPointToEnd(module_.getBody());
  auto ftype = b_.getFunctionType({irows(1)}, {rows(vocab)});
  forward_ = mlir::func::FuncOp::create(b_, loc, "forward", ftype);
  mlir::Block* body = forward_.addEntryBlock();
  b_.setInsertionPointToStart(body);
  return body->getArgument(0);
}

mlir::OwningOpRef<mlir::ModuleOp> Builder::finish(Value logits, llvm::StringRef family) {
  mlir::func::ReturnOp::create(b_, mlir::NameLoc::get(b_.getStringAttr(m_.dir)), logits);
  for (mlir::Operation* s : states_) s->moveBefore(forward_);  // weights, then states, then @forward

  // Module attributes: what the plan records about the model and the checkpoint.
  namespace fs = std::filesystem;
  std::string dir = fs::absolute(fs::path(m_.dir)).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  llvm::SmallVector<mlir::Attribute> files;
  auto u64 = b_.getIntegerType(64, /*isSigned=*/false);
  for (const SafetensorsFile& f : m_.checkpoint.files()) {
    fs::path rel = fs::path(f.path()).lexically_relative(fs::path(m_.dir));
    if (rel.empty() || *rel.begin() == "..") rel = fs::path(f.path()).filename();
    files.push_back(b_.getDictionaryAttr({str("path", rel.string()),
                                          b_.getNamedAttr("size", b_.getIntegerAttr(u64, f.file_size())),
                                          b_.getNamedAttr("header_hash", b_.getIntegerAttr(u64, f.header_hash()))}));
  }
  module_->setAttr("smelt.model_family", b_.getStringAttr(family));
  // Compact JSON: the same normalised config as config_to_json, readable as one line in the IR.
  module_->setAttr("smelt.config", b_.getStringAttr(nlohmann::ordered_json::parse(config_to_json(c_)).dump()));
  module_->setAttr("smelt.checkpoint_files", b_.getArrayAttr(files));
  module_->setAttr("smelt.model_dir", b_.getStringAttr(dir));
  module_->setAttr("smelt.max_seq_len", b_.getI64IntegerAttr(max_seq_len_));

  // Any verifier error here is an importer bug or a model the graph cannot express: report it as one line.
  std::string diag;
  {
    mlir::ScopedDiagnosticHandler handler(&ctx_, [&](mlir::Diagnostic& d) {
      if (diag.empty()) diag = d.str();
      return mlir::success();
    });
    if (mlir::failed(mlir::verify(module_))) throw Error(m_.dir + ": the imported graph is invalid: " + diag);
  }
  return std::move(owned_);
}

namespace {

// The V4 forward of docs/ops.md.
class Importer : Builder {
 public:
  using Builder::Builder;
  mlir::OwningOpRef<mlir::ModuleOp> run();

 private:
  Value linear(Value x, const std::string& w) { return make1("smelt.linear", x, rows(rows_of(w)), {ref("weight", w)}); }
  Value rms_norm(Value x, const std::string& w, int64_t groups = 1) {
    llvm::SmallVector<NamedAttribute> a{f64("eps", c_.rms_norm_eps), i64("groups", groups)};
    if (!w.empty()) a.push_back(ref("weight", w));
    return make1("smelt.rms_norm", x, x.getType(), a);
  }
  Value rope(Value x, int64_t heads, int64_t head_dim, const RopeParams& r, bool inverse) {
    llvm::SmallVector<NamedAttribute> a{i64("heads", heads), i64("head_dim", head_dim),
                                        i64("rope_dim", c_.qk_rope_head_dim), i64("inverse", inverse)};
    rope_attrs(a, r);
    return make1("smelt.rope", x, x.getType(), a);
  }
  // pre, post, comb
  std::array<Value, 3> hc_mix(Value X, const std::string& site);
  void compressor(Value a, const std::string& prefix, int ratio, int64_t head_dim, const std::string& ring,
                  const std::string& pool);
  Value layer(Value X, Value ids, int L);

  std::string prefix_;  // "layers.L." of the layer being built
  RopeParams main_rope_{}, compress_rope_{};
};

std::array<Value, 3> Importer::hc_mix(Value X, const std::string& site) {
  const int64_t n = c_.hc_mult;
  const std::string p = prefix_ + "hc_" + site + "_";
  mlir::Operation* op = make("smelt.hc_mix", X, {rows(n), rows(n), rows(n * n)},
                             {ref("fn", p + "fn"), ref("base", p + "base"), ref("scale", p + "scale"),
                              i64("hc_mult", n), i64("sinkhorn_iters", c_.hc_sinkhorn_iters), f64("hc_eps", c_.hc_eps),
                              f64("norm_eps", c_.rms_norm_eps)});
  return {op->getResult(0), op->getResult(1), op->getResult(2)};
}

void Importer::compressor(Value a, const std::string& p, int ratio, int64_t head_dim, const std::string& ring,
                          const std::string& pool) {
  const int64_t overlap = ratio == 4 ? 1 : 0;  // CSA windows overlap by one window
  llvm::SmallVector<NamedAttribute> attrs{
      ref("wkv", p + "wkv.weight"), ref("wgate", p + "wgate.weight"), ref("ape", p + "ape"),
      ref("norm", p + "norm.weight"), b_.getNamedAttr("compressor_ring", symbols_.at(ring)),
      b_.getNamedAttr("pool", symbols_.at(pool)), i64("ratio", ratio), i64("head_dim", head_dim),
      i64("overlap", overlap), f64("eps", c_.rms_norm_eps), i64("rope_dim", c_.qk_rope_head_dim)};
  rope_attrs(attrs, compress_rope_);
  make("smelt.compressor", a, {}, attrs);
}

Value Importer::layer(Value X, Value ids, int L) {
  layer_ = L;
  prefix_ = "layers." + std::to_string(L) + ".";
  const std::string& p = prefix_;
  const int64_t n = c_.hc_mult, H = c_.num_attention_heads, hd = c_.head_dim;
  const int ratio = c_.compress_ratio(L);
  const bool csa = ratio == 4;
  const RopeParams& rp = ratio > 0 ? compress_rope_ : main_rope_;

  // States of this layer
  state(p + "window", "window_ring", c_.sliding_window, hd);
  if (ratio > 0) {
    const int64_t cw = 1 + (csa ? 1 : 0);
    state(p + "compressor_ring", "compressor_ring", 2 * ratio, 2 * cw * hd);
    state(p + "pool", "compressed_pool", max_seq_len_ / ratio, hd);
  }
  if (csa) {
    state(p + "index_ring", "compressor_ring", 2 * ratio, 2 * 2 * c_.index_head_dim);
    state(p + "index_pool", "index_pool", max_seq_len_ / ratio, c_.index_head_dim);
  }

  // Attention
  auto [pre, post, comb] = hc_mix(X, "attn");
  Value u = make1("smelt.hc_collapse", {X, pre}, rows(c_.hidden_size), {i64("hc_mult", n)});
  Value a = rms_norm(u, p + "attn_norm.weight");
  Value cq = rms_norm(linear(a, p + "attn.wq_a.weight"), p + "attn.q_norm.weight");
  Value q = rms_norm(linear(cq, p + "attn.wq_b.weight"), "", H);
  q = rope(q, H, hd, rp, false);
  Value kv = rope(rms_norm(linear(a, p + "attn.wkv.weight"), p + "attn.kv_norm.weight"), 1, hd, rp, false);
  if (ratio > 0) compressor(a, p + "attn.compressor.", ratio, hd, p + "compressor_ring", p + "pool");
  Value idx;
  if (csa) {
    const int64_t HI = c_.index_n_heads, dI = c_.index_head_dim;
    compressor(a, p + "attn.indexer.compressor.", ratio, dI, p + "index_ring", p + "index_pool");
    Value qi = rope(linear(cq, p + "attn.indexer.wq_b.weight"), HI, dI, compress_rope_, false);
    Value wi = linear(a, p + "attn.indexer.weights_proj.weight");
    idx = make1("smelt.indexer_topk", {qi, wi}, irows(c_.index_topk),
                {b_.getNamedAttr("index_pool", symbols_.at(p + "index_pool")), i64("heads", HI), i64("head_dim", dI),
                 i64("ratio", ratio), i64("topk", c_.index_topk)});
  }
  llvm::SmallVector<NamedAttribute> attn_attrs{
      ref("sink", p + "attn.attn_sink"), b_.getNamedAttr("window_ring", symbols_.at(p + "window")),
      i64("heads", H), i64("head_dim", hd), i64("window", c_.sliding_window), i64("ratio", ratio),
      f64("scale", 1.0 / std::sqrt(double(hd)))};
  if (ratio > 0) attn_attrs.push_back(b_.getNamedAttr("pool", symbols_.at(p + "pool")));
  llvm::SmallVector<Value> attn_in{q, kv};
  if (idx) attn_in.push_back(idx);
  Value o = make1("smelt.sparse_attention", attn_in, rows(H * hd), attn_attrs);
  make("smelt.window_kv_update", kv, {},
       {b_.getNamedAttr("window_ring", symbols_.at(p + "window")), i64("window", c_.sliding_window)});
  o = rope(o, H, hd, rp, true);
  const std::string wo_a = p + "attn.wo_a.weight";
  Value g = make1("smelt.grouped_linear", o, rows(rows_of(wo_a)), {ref("weight", wo_a), i64("groups", c_.o_groups)});
  Value y = linear(g, p + "attn.wo_b.weight");
  X = make1("smelt.hc_expand", {X, y, post, comb}, X.getType(), {i64("hc_mult", n)});

  // MoE
  auto [pre2, post2, comb2] = hc_mix(X, "ffn");
  Value f = rms_norm(make1("smelt.hc_collapse", {X, pre2}, rows(c_.hidden_size), {i64("hc_mult", n)}),
                     p + "ffn_norm.weight");
  const bool hash = c_.hash_moe.at(L);
  const int64_t k = c_.num_experts_per_tok;
  llvm::SmallVector<NamedAttribute> route_attrs{
      ref("gate", p + "ffn.gate.weight"), i64("topk", k), str("scoring", c_.scoring_func),
      b_.getNamedAttr("norm_topk_prob", b_.getBoolAttr(c_.norm_topk_prob)),
      f64("route_scale", c_.routed_scaling_factor)};
  llvm::SmallVector<Value> route_in{f};
  if (hash) {
    route_in.push_back(ids);
    route_attrs.push_back(ref("tid2eid", p + "ffn.gate.tid2eid"));
  } else if (m_.has(p + "ffn.gate.bias")) {
    route_attrs.push_back(ref("bias", p + "ffn.gate.bias"));
  }
  mlir::Operation* route = make("smelt.moe_route", route_in, {rows(k), irows(k)}, route_attrs);
  llvm::SmallVector<mlir::Attribute> experts;
  for (int e = 0; e < c_.n_routed_experts; ++e)
    for (const char* w : {"w1", "w2", "w3"})
      experts.push_back(weight(p + "ffn.experts." + std::to_string(e) + "." + w + ".weight"));
  Value routed = make1("smelt.moe_experts", {f, route->getResult(0), route->getResult(1)}, f.getType(),
                       {b_.getNamedAttr("experts", b_.getArrayAttr(experts)), i64("n_experts", c_.n_routed_experts),
                        i64("topk", k), f64("swiglu_limit", c_.swiglu_limit)});
  const std::string sp = p + "ffn.shared_experts.";
  Value shared = make1("smelt.swiglu_mlp", f, f.getType(),
                       {ref("w1", sp + "w1.weight"), ref("w2", sp + "w2.weight"), ref("w3", sp + "w3.weight"),
                        f64("swiglu_limit", c_.swiglu_limit)});
  y = make1("smelt.add", {routed, shared}, f.getType(), {});
  X = make1("smelt.hc_expand", {X, y, post2, comb2}, X.getType(), {i64("hc_mult", n)});
  layer_ = -1;
  return X;
}

mlir::OwningOpRef<mlir::ModuleOp> Importer::run() {
  const std::string cfg = m_.dir + "/config.json";
  const int layers = c_.num_hidden_layers;
  if ((int)c_.compress_ratios.size() != layers || (int)c_.hash_moe.size() != layers)
    throw Error(cfg + ": compress_ratios and the hash-MoE layer list need one entry per layer (" +
                std::to_string(layers) + ")");
  if (c_.sliding_window <= 0) throw Error(cfg + ": sliding_window must be positive");
  if (c_.n_shared_experts < 1) throw Error(cfg + ": n_shared_experts must be at least 1 (the graph has a shared MLP)");
  max_seq_len_ = o_.max_seq_len > 0 ? o_.max_seq_len : default_max_seq_len(c_);
  for (int L = 0; L < layers; ++L)
    if (c_.compress_ratios[L] > 0 && max_seq_len_ < c_.compress_ratios[L])
      throw Error("max_seq_len " + std::to_string(max_seq_len_) + " is shorter than layer " + std::to_string(L) +
                  "'s compress ratio " + std::to_string(c_.compress_ratios[L]));
  main_rope_ = {c_.rope_theta, 0.0, 0.0, 0.0, 0};
  compress_rope_ = {c_.compress_rope_theta, 0.0, 0.0, 0.0, 0};
  if (c_.yarn.enabled)
    compress_rope_ = {c_.compress_rope_theta, c_.yarn.factor, c_.yarn.beta_fast, c_.yarn.beta_slow,
                      int64_t(c_.yarn.original_max_position_embeddings)};

  Value ids = begin(rows_of("head.weight"));
  Value x = make1("smelt.embedding", ids, rows(c_.hidden_size), {ref("embed", "embed.weight")});
  Value X = make1("smelt.hc_init", x, rows(c_.hc_mult * c_.hidden_size), {i64("hc_mult", c_.hc_mult)});
  if (o_.progress) o_.progress("importing " + std::to_string(layers) + " layers");
  for (int L = 0; L < layers; ++L) X = layer(X, ids, L);
  Value h = make1("smelt.hc_head", X, rows(c_.hidden_size),
                  {ref("fn", "hc_head_fn"), ref("base", "hc_head_base"), ref("scale", "hc_head_scale"),
                   i64("hc_mult", c_.hc_mult), f64("hc_eps", c_.hc_eps), f64("norm_eps", c_.rms_norm_eps)});
  Value logits = linear(rms_norm(h, "norm.weight"), "head.weight");
  return finish(logits, "deepseek_v4");
}

}  // namespace
}  // namespace import_detail

int64_t default_max_seq_len(const ModelConfig& c) {
  int64_t n = 4096;
  if (c.max_position_embeddings > 0) n = std::min(n, c.max_position_embeddings);
  return n;
}

mlir::OwningOpRef<mlir::ModuleOp> import_model(mlir::MLIRContext& ctx, const ModelDescription& m,
                                               const ImportOptions& options) {
  mlir::DialectRegistry registry;
  register_dialects(registry);
  ctx.appendDialectRegistry(registry);
  ctx.loadAllAvailableDialects();
  if (m.config.family == ModelFamily::DeepseekV41) return import_detail::import_v41(ctx, m, options);
  if (m.config.family != ModelFamily::DeepseekV4)
    throw Error(m.dir + "/config.json: model_type '" + m.config.model_type + "': no importer for this family");
  return import_detail::Importer(ctx, m, options).run();
}

void register_dialects(mlir::DialectRegistry& registry) {
  registry.insert<SmeltDialect, mlir::func::FuncDialect>();
}

}  // namespace smelt
