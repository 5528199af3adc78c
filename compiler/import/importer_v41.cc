// The DeepSeek-V4.1 forward (docs/ops.md, section DeepSeek-V4.1; architecture spec section 2), as the
// official inference code's Transformer.forward runs it: Engram before its layers, the pipelined hc `pre`
// (each site collapses with the pre computed one site earlier; no hc_head), CSA2 sharing (KV sources own the
// compressed pools and index keys, index sources the top-k, the candidate source the candidate blocks; every
// other compressed layer reads the most recent source's), FP8/FP4 linears with activation quantization, and
// `round = "bf16"` wherever the reference holds a bf16 tensor.
// DSpark (importer_v41 also builds it when the checkpoint has the stages): the main forward captures
// main_hidden (smelt.hc_mean of the target layers' input streams), projects it to main_x and writes each
// stage's window ring with main_x's KV at the chunk's positions (the reference's prefill seeding and its
// per-step ring write, done for every chunk); func.func @dspark_draft runs the three stages and the head on a
// draft block (see dspark_draft below).
#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

#include "compiler/import/builder.h"
#include "kernels/engram/hash.h"

namespace smelt::import_detail {

namespace {

using mlir::NamedAttribute;
using mlir::Value;

constexpr const char* kActQuant = "fp8_e4m3_b32";

bool is_quantized(DType d) { return d == DType::F8_E4M3 || d == DType::I8; }

class ImporterV41 : Builder {
 public:
  ImporterV41(mlir::MLIRContext& ctx, const ModelDescription& m, const ImportOptions& o) : Builder(ctx, m, o) {
    allow_quantized_ = true;
  }
  mlir::OwningOpRef<mlir::ModuleOp> run();

 private:
  NamedAttribute bf16() { return str("round", "bf16"); }
  bool has_target(int L) const {
    return std::find(c_.dspark_target_layer_ids.begin(), c_.dspark_target_layer_ids.end(), L) !=
           c_.dspark_target_layer_ids.end();
  }

  // A linear named `p` (p.weight, and p.scale when stored FP8 / FP4), rounded to bf16 unless `fp32_out`.
  Value linear(Value x, const std::string& p, bool fp32_out = false, double scale_after = 1.0) {
    const std::string w = p + ".weight";
    llvm::SmallVector<NamedAttribute> a{ref("weight", w)};
    if (is_quantized(tensor(w).dtype)) a.append({ref("scale", p + ".scale"), str("act_quant", kActQuant)});
    if (scale_after != 1.0) a.push_back(f64("scale_after", scale_after));
    if (!fp32_out) a.push_back(bf16());
    return make1("smelt.linear", x, rows(rows_of(w)), a);
  }
  Value rms_norm(Value x, const std::string& w) {
    return make1("smelt.rms_norm", x, x.getType(), {f64("eps", c_.rms_norm_eps), i64("groups", 1), ref("weight", w), bf16()});
  }
  Value rope(Value x, int64_t heads, int64_t head_dim, const RopeParams& r, bool inverse) {
    llvm::SmallVector<NamedAttribute> a{i64("heads", heads), i64("head_dim", head_dim),
                                        i64("rope_dim", c_.qk_rope_head_dim), i64("inverse", inverse),
                                        str("variant", "v41"), bf16()};
    rope_attrs(a, r);
    return make1("smelt.rope", x, x.getType(), a);
  }
  Value fake_quant(Value x, llvm::StringRef mode) { return make1("smelt.fake_quant", x, x.getType(), {str("mode", mode)}); }
  Value collapse(Value X, Value pre) {
    llvm::SmallVector<Value> in{X};
    if (pre) in.push_back(pre);  // none: the one-hot initial pre (copy 0)
    return make1("smelt.hc_collapse", in, rows(c_.hidden_size), {i64("hc_mult", c_.hc_mult), bf16()});
  }
  std::array<Value, 3> hc_mix(Value X, const std::string& site);
  Value expand(Value X, Value y, Value post, Value comb) {
    return make1("smelt.hc_expand", {X, y, post, comb}, X.getType(), {i64("hc_mult", c_.hc_mult), bf16()});
  }
  void check_schedule();
  void kv_compressor(Value a, int L);
  Value moe(Value f, int n_experts, int topk);
  // One block; returns the stream and the ffn pre it hands on.
  std::pair<Value, Value> block(Value X, Value pre_in, int L);
  // DSpark: the checks, the ring seeding in @forward, and @dspark_draft.
  void check_dspark();
  // The Engram tables' rows against the rows the hash addresses (the sums of its primes): a mismatch would make the
  // lookups read other rows, or past a table.
  void check_engram_rows();
  Value window_kv(Value x, const std::string& attn);
  void seed_dspark();
  void dspark_draft(int64_t vocab);
  std::pair<Value, Value> dspark_stage(Value X, Value pre_in, int s);

  std::string p_;  // "layers.L."
  RopeParams main_rope_{}, compress_rope_{};
  Value hashes_;          // Engram hash ids of every Engram layer
  std::vector<int> kv_source_;  // per layer: the KV source whose pools it reads (-1: none)
  Value idx_, cand_;      // the most recent index source's top-k, the candidate source's blocks
  bool dspark_ = false;         // the checkpoint has DSpark stages: build the seeding and @dspark_draft
  std::vector<Value> targets_;  // the DSpark target captures (hc_mean), in layer order
};

std::array<Value, 3> ImporterV41::hc_mix(Value X, const std::string& site) {
  const int64_t n = c_.hc_mult;
  const std::string p = p_ + "hc_" + site + "_";
  mlir::Operation* op = make("smelt.hc_mix", X, {rows(n), rows(n), rows(n * n)},
                             {ref("fn", p + "fn"), ref("base", p + "base"), ref("scale", p + "scale"),
                              i64("hc_mult", n), i64("sinkhorn_iters", c_.hc_sinkhorn_iters), f64("hc_eps", c_.hc_eps),
                              f64("norm_eps", c_.rms_norm_eps), str("variant", "v41")});
  return {op->getResult(0), op->getResult(1), op->getResult(2)};
}

// The CSA2 schedule must be one the shared state can express: every compressed layer reads a KV source
// and an index source of its own ratio at or before it; the candidate level stays within one ratio.
void ImporterV41::check_schedule() {
  const std::string cfg = m_.dir + "/config.json";
  const int layers = c_.num_hidden_layers;
  kv_source_.assign(layers, -1);
  int kv = -1, index = -1;
  for (int L = 0; L < layers; ++L) {
    const int r = c_.compress_ratio(L);
    const std::string where = cfg + ": layer " + std::to_string(L) + " (compress ratio " + std::to_string(r) + ")";
    if (r < 0 || r > 2) throw Error(where + ": V4.1 compress ratios are 0, 1 or 2");
    if (c_.is_kv_source(L)) {
      if (r == 0) throw Error(where + ": a KV source (kv_source_layer_ids) needs a compress ratio > 0");
      kv = L;
    }
    if (c_.is_index_source(L)) {
      if (r == 0) throw Error(where + ": an index source (index_source_layer_ids) needs a compress ratio > 0");
      index = L;
    }
    if (r == 0) continue;
    if (kv < 0 || c_.compress_ratio(kv) != r)
      throw Error(where + ": no KV source of the same ratio at or before it (kv_source_layer_ids)");
    if (index < 0 || c_.compress_ratio(index) != r)
      throw Error(where + ": no index source of the same ratio at or before it (index_source_layer_ids)");
    kv_source_[L] = kv;
  }
  const int cs = c_.candidate_source_layer_id;
  if (cs >= 0) {
    if (cs >= layers || !c_.is_index_source(cs))
      throw Error(cfg + ": candidate_source_layer_id " + std::to_string(cs) + " is not an index source");
    if (c_.candidate_topk_blocks <= 0 || c_.candidate_block_size <= 0)
      throw Error(cfg + ": candidate_topk_blocks and candidate_block_size must be positive");
    for (int L = cs + 1; L < layers; ++L)
      if (c_.is_index_source(L) && c_.compress_ratio(L) != c_.compress_ratio(cs))
        throw Error(cfg + ": index source " + std::to_string(L) + " would take candidate blocks of layer " +
                    std::to_string(cs) + ", which has another compress ratio");
  }
}

// A KV source: compressed KV (pool) and index keys (index_pool) of this layer, from the attention input.
void ImporterV41::kv_compressor(Value a, int L) {
  const int ratio = c_.compress_ratio(L);
  const int64_t hd = c_.head_dim, dI = c_.index_head_dim;
  const std::string p = p_ + "attn.";
  llvm::SmallVector<NamedAttribute> attrs{
      ref("wkv", p + "compressor.wkv.weight"), ref("norm", p + "compressor.norm.weight"),
      ref("wk", p + "indexer.wk.weight"), ref("k_norm", p + "indexer.k_norm.weight"),
      sym("pool", p_ + "pool"), sym("index_pool", p_ + "index_pool"), i64("ratio", ratio), i64("head_dim", hd),
      i64("index_head_dim", dI), i64("rope_dim", c_.qk_rope_head_dim), f64("eps", c_.rms_norm_eps)};
  if (ratio == 2) attrs.append({ref("wgate", p + "compressor.wgate.weight"), sym("ring", p_ + "compressor_ring")});
  rope_attrs(attrs, compress_rope_);
  make("smelt.kv_compressor", a, {}, attrs);
}

// MoE: router in fp32, routed FP4 experts and the FP8 shared expert with the reference's rounding points.
Value ImporterV41::moe(Value f, int n_experts, int topk) {
  const std::string p = p_ + "ffn.";
  const int64_t k = topk;
  llvm::SmallVector<NamedAttribute> route_attrs{
      ref("gate", p + "gate.weight"), i64("topk", k), str("scoring", c_.scoring_func),
      // the reference normalises only when more than one expert is picked
      b_.getNamedAttr("norm_topk_prob", b_.getBoolAttr(c_.norm_topk_prob && k > 1)),
      f64("route_scale", c_.routed_scaling_factor)};
  if (m_.has(p + "gate.bias")) route_attrs.push_back(ref("bias", p + "gate.bias"));
  if (c_.gate_temp != 1.0) route_attrs.push_back(f64("gate_temp", c_.gate_temp));
  mlir::Operation* route = make("smelt.moe_route", f, {rows(k), irows(k)}, route_attrs);

  auto require_quantized = [&](const std::string& w) {
    if (!is_quantized(tensor(w).dtype))
      throw Error(m_.dir + ": tensor '" + w + "' is stored as " + std::string(dtype_name(tensor(w).dtype)) +
                  "; V4.1 experts are imported from the release's FP8 / FP4 storage only");
  };
  llvm::SmallVector<mlir::Attribute> experts;
  for (int e = 0; e < n_experts; ++e)
    for (const char* w : {"w1", "w2", "w3"}) {
      const std::string ep = p + "experts." + std::to_string(e) + "." + w;
      require_quantized(ep + ".weight");
      experts.push_back(weight(ep + ".weight"));
      experts.push_back(weight(ep + ".scale"));
    }
  Value routed = make1("smelt.moe_experts", {f, route->getResult(0), route->getResult(1)}, f.getType(),
                       {b_.getNamedAttr("experts", b_.getArrayAttr(experts)), i64("n_experts", n_experts),
                        i64("topk", k), f64("swiglu_limit", c_.swiglu_limit), str("act_quant", kActQuant),
                        str("variant", "v41")});
  const std::string sp = p + "shared_experts.";
  llvm::SmallVector<NamedAttribute> shared_attrs{f64("swiglu_limit", c_.swiglu_limit), str("act_quant", kActQuant),
                                                 str("variant", "v41"), bf16()};
  for (const char* w : {"w1", "w2", "w3"}) {
    require_quantized(sp + w + ".weight");
    shared_attrs.append({ref(w, sp + w + ".weight"), ref(std::string(w) + "_scale", sp + w + ".scale")});
  }
  Value shared = make1("smelt.swiglu_mlp", f, f.getType(), shared_attrs);
  return make1("smelt.add", {routed, shared}, f.getType(), {bf16()});  // fp32 sum, then bf16
}

std::pair<Value, Value> ImporterV41::block(Value X, Value pre_in, int L) {
  layer_ = L;
  p_ = "layers." + std::to_string(L) + ".";
  const int64_t n = c_.hc_mult, D = c_.hidden_size, H = c_.num_attention_heads, hd = c_.head_dim;
  const int ratio = c_.compress_ratio(L);
  const RopeParams& rp = ratio > 0 ? compress_rope_ : main_rope_;

  state(p_ + "window", "window_ring", c_.sliding_window, hd);
  if (c_.is_kv_source(L)) {
    if (ratio == 2) state(p_ + "compressor_ring", "compressor_ring", ratio, 2 * hd);
    state(p_ + "pool", "compressed_pool", max_seq_len_ / ratio, hd);
    state(p_ + "index_pool", "index_pool", max_seq_len_ / ratio, c_.index_head_dim);
  }

  if (int e = c_.engram_index(L); e >= 0) {
    const std::string ep = p_ + "engram.";
    const int64_t cols = int64_t(c_.engram_max_ngram_size - 1) * c_.engram_n_heads;
    X = make1("smelt.engram", {X, hashes_}, X.getType(),
              {ref("table", ep + "embed.weight"), ref("table_scale", ep + "embed.scale"), ref("wkv", ep + "wkv.weight"),
               ref("wkv_scale", ep + "wkv.scale"), ref("q_weight", ep + "q_weight"), ref("k_weight", ep + "k_weight"),
               i64("layer_index", e), i64("hc_mult", n), i64("dim", D), i64("head_dim", c_.engram_head_dim),
               i64("cols", cols), f64("eps", c_.rms_norm_eps), bf16()});
  }
  // DSpark target capture: the block's input stream (after Engram), averaged over the hc copies.
  if (dspark_ && has_target(L)) targets_.push_back(make1("smelt.hc_mean", X, rows(D), {i64("hc_mult", n)}));

  // Attention, collapsed with the pre handed on by the previous block's FFN site.
  auto [pre_a, post_a, comb_a] = hc_mix(X, "attn");
  Value a = rms_norm(collapse(X, pre_in), p_ + "attn_norm.weight");
  Value cq = rms_norm(linear(a, p_ + "attn.wq_a"), p_ + "attn.q_norm.weight");
  Value q = rope(linear(cq, p_ + "attn.wq_b"), H, hd, rp, false);  // V4.1: no per-head q norm
  Value kv = rms_norm(linear(a, p_ + "attn.wkv"), p_ + "attn.kv_norm.weight");
  kv = fake_quant(rope(kv, 1, hd, rp, false), "fp8_e4m3_b32");
  if (c_.is_kv_source(L)) kv_compressor(a, L);
  if (c_.is_index_source(L)) {
    const int64_t HI = c_.index_n_heads, dI = c_.index_head_dim;
    const std::string ip = p_ + "attn.indexer.";
    Value qi = fake_quant(rope(linear(cq, ip + "wq_b"), HI, dI, compress_rope_, false), "fp4_e2m1_b32_ue8m0");
    // head_dim^-0.5 * heads^-0.5, as the reference computes it in double
    Value wi = linear(a, ip + "weights_proj", false, std::pow(double(dI), -0.5) * std::pow(double(HI), -0.5));
    const int cs = c_.candidate_source_layer_id;
    const bool source = L == cs, consumer = cs >= 0 && cs < L;
    const int64_t cb = source || consumer ? c_.candidate_topk_blocks : 0;
    llvm::SmallVector<Value> in{qi, wi};
    if (consumer) in.push_back(cand_);
    llvm::SmallVector<mlir::Type> out{irows(c_.index_topk)};
    if (source) out.push_back(irows(cb));
    // Index keys are owner-keyed: this indexer always scores against its KV source's own key pool. The
    // released reference (spec §2.5) instead reads one shared slot that only a KV source's *emitted*
    // group updates, so on decode steps where a ratio-2 group is incomplete layers 2/8/14 score against
    // the keys published last (layer 20's). HF, vLLM and prefill behave like us; the goldens carry both
    // decodes (`decode_logits` = quirk, `decode_logits_owner_keyed` = ours). No fixture needs the quirk,
    // so it is not implemented.
    mlir::Operation* op =
        make("smelt.indexer_v41", in, out,
             {sym("index_pool", "layers." + std::to_string(kv_source_[L]) + ".index_pool"), i64("heads", HI),
              i64("head_dim", dI), i64("ratio", ratio), i64("topk", c_.index_topk), i64("candidate_blocks", cb),
              i64("candidate_block_size", cb > 0 ? c_.candidate_block_size : 0), i64("is_candidate_source", source)});
    idx_ = op->getResult(0);
    if (source) cand_ = op->getResult(1);
  }
  llvm::SmallVector<NamedAttribute> attn{
      ref("sink", p_ + "attn.attn_sink"), sym("window_ring", p_ + "window"), i64("heads", H), i64("head_dim", hd),
      i64("window", c_.sliding_window), i64("ratio", ratio), f64("scale", 1.0 / std::sqrt(double(hd))),
      str("numerics", "v41"), bf16()};
  llvm::SmallVector<Value> attn_in{q, kv};
  if (ratio > 0) {
    attn.push_back(sym("pool", "layers." + std::to_string(kv_source_[L]) + ".pool"));
    attn_in.push_back(idx_);
  }
  Value o = make1("smelt.sparse_attention", attn_in, rows(H * hd), attn);
  make("smelt.window_kv_update", kv, {}, {sym("window_ring", p_ + "window"), i64("window", c_.sliding_window)});
  o = rope(o, H, hd, rp, true);
  const std::string wo_a = p_ + "attn.wo_a";
  llvm::SmallVector<NamedAttribute> ga{ref("weight", wo_a + ".weight"), i64("groups", c_.o_groups), bf16()};
  if (is_quantized(tensor(wo_a + ".weight").dtype)) ga.push_back(ref("scale", wo_a + ".scale"));  // dequantized at load
  Value g = make1("smelt.grouped_linear", o, rows(rows_of(wo_a + ".weight")), ga);
  X = expand(X, linear(g, p_ + "attn.wo_b"), post_a, comb_a);

  // FFN, collapsed with this block's attention pre; its own pre goes to the next block.
  auto [pre_f, post_f, comb_f] = hc_mix(X, "ffn");
  Value f = rms_norm(collapse(X, pre_a), p_ + "ffn_norm.weight");
  X = expand(X, moe(f, c_.n_routed_experts, c_.num_experts_per_tok), post_f, comb_f);
  if (o_.capture_intermediates) {
    const std::string b = "block" + std::to_string(L) + ".";
    make("smelt.capture", X, {}, {str("name", b + "stream"), b_.getNamedAttr("row_shape", b_.getDenseI64ArrayAttr({n, D}))});
    make("smelt.capture", pre_f, {}, {str("name", b + "pre_mix"), b_.getNamedAttr("row_shape", b_.getDenseI64ArrayAttr({n}))});
  }
  layer_ = -1;
  return {X, pre_f};
}

void ImporterV41::check_engram_rows() {
  kernels::engram::EngramHashConfig h;
  h.layer_ids = c_.engram_layer_ids;
  h.vocab_size = c_.engram_vocab_size;
  h.max_ngram = c_.engram_max_ngram_size;
  h.n_heads = c_.engram_n_heads;
  h.compressed_vocab_size = c_.engram_compressed_vocab_size;
  const std::string cfg = m_.dir + "/config.json";
  kernels::engram::EngramHashLayout L;
  try {
    L = kernels::engram::make_hash_layout(h);
  } catch (const Error& e) {
    throw Error(cfg + ": " + e.what());
  }
  for (size_t e = 0; e < c_.engram_layer_ids.size(); ++e)
    if (c_.engram_num_embeddings[e] != L.rows[e])
      throw Error(cfg + ": engram_num_embeddings[" + std::to_string(e) + "] is " +
                  std::to_string(c_.engram_num_embeddings[e]) + " but the hash of Engram layer " +
                  std::to_string(c_.engram_layer_ids[e]) + " addresses " + std::to_string(L.rows[e]) +
                  " rows (the sum of its primes above engram_vocab_size " + std::to_string(c_.engram_vocab_size) +
                  " - 1): the table and the hash disagree");
}

// ---- DSpark ----------------------------------------------------------------------------------------------

// DSpark is built when the checkpoint has its stages (num_nextn_predict_layers > 0 and mtp.0.main_proj);
// the config must then describe a drafter the graph can express.
void ImporterV41::check_dspark() {
  const std::string cfg = m_.dir + "/config.json";
  const int stages = c_.num_nextn_predict_layers;
  dspark_ = stages > 0 && m_.has("mtp.0.main_proj.weight");
  if (!dspark_) return;
  const auto& targets = c_.dspark_target_layer_ids;
  if (c_.dspark_block_size < 1) throw Error(cfg + ": dspark_block_size must be positive");
  if (c_.dspark_noise_token_id < 0 || c_.dspark_noise_token_id >= c_.vocab_size)
    throw Error(cfg + ": dspark_noise_token_id " + std::to_string(c_.dspark_noise_token_id) + " is not a token id");
  if (targets.empty() || targets.size() > 4)
    throw Error(cfg + ": dspark_target_layer_ids needs 1 to 4 layers, has " + std::to_string(targets.size()));
  for (int L : targets)
    if (L < 0 || L >= c_.num_hidden_layers)
      throw Error(cfg + ": dspark_target_layer_ids has " + std::to_string(L) + ", not a backbone layer");
  for (size_t s = 0; s < c_.mtp_compress_ratios.size(); ++s)
    if (c_.mtp_compress_ratios[s] != 0)
      throw Error(cfg + ": DSpark stage " + std::to_string(s) + " has compress ratio " +
                  std::to_string(c_.mtp_compress_ratios[s]) + "; the drafter's stages are window-only (0)");
  if (c_.dspark_num_experts_per_tok < 1 || c_.dspark_num_experts_per_tok > c_.dspark_n_routed_experts)
    throw Error(cfg + ": dspark_num_experts_per_tok must be in [1, dspark_n_routed_experts]");
}

// kv_norm(wkv(x)) RoPE'd at the chunk's positions and FP8 fake-quantized: a window K=V (`attn` = "<p>.attn.").
Value ImporterV41::window_kv(Value x, const std::string& attn) {
  Value kv = rms_norm(linear(x, attn + "wkv"), attn + "kv_norm.weight");
  return fake_quant(rope(kv, 1, c_.head_dim, main_rope_, false), "fp8_e4m3_b32");
}

// In @forward, after the backbone: main_x = main_norm(main_proj(main_hidden)) and, per stage, its window KV
// stored in the stage's ring at the chunk's positions. The draft block at t+1.. then reads positions <= t.
void ImporterV41::seed_dspark() {
  const int n_layers = c_.num_hidden_layers;
  layer_ = n_layers;
  Value hidden = targets_.size() == 1
                     ? targets_[0]
                     : make1("smelt.concat", targets_, rows(int64_t(targets_.size()) * c_.hidden_size), {});
  Value main_x = rms_norm(linear(hidden, "mtp.0.main_proj"), "mtp.0.main_norm.weight");
  for (int s = 0; s < c_.num_nextn_predict_layers; ++s) {
    layer_ = n_layers + s;
    const std::string p = "mtp." + std::to_string(s) + ".";
    state(p + "window", "window_ring", c_.sliding_window, c_.head_dim);
    Value kv = window_kv(main_x, p + "attn.");
    make("smelt.window_kv_update", kv, {}, {sym("window_ring", p + "window"), i64("window", c_.sliding_window)});
  }
  layer_ = -1;
}

// One stage: a V4.1 block whose attention is the draft block's (window ring + the block's own KV, no mask).
std::pair<Value, Value> ImporterV41::dspark_stage(Value X, Value pre_in, int s) {
  layer_ = c_.num_hidden_layers + s;
  p_ = "mtp." + std::to_string(s) + ".";
  const int64_t H = c_.num_attention_heads, hd = c_.head_dim;
  auto [pre_a, post_a, comb_a] = hc_mix(X, "attn");
  Value a = rms_norm(collapse(X, pre_in), p_ + "attn_norm.weight");
  Value cq = rms_norm(linear(a, p_ + "attn.wq_a"), p_ + "attn.q_norm.weight");
  Value q = rope(linear(cq, p_ + "attn.wq_b"), H, hd, main_rope_, false);
  Value kv = window_kv(a, p_ + "attn.");
  Value o = make1("smelt.dspark_attention", {q, kv}, rows(H * hd),
                  {ref("sink", p_ + "attn.attn_sink"), sym("window_ring", p_ + "window"), i64("heads", H),
                   i64("head_dim", hd), i64("window", c_.sliding_window), f64("scale", 1.0 / std::sqrt(double(hd))),
                   bf16()});
  o = rope(o, H, hd, main_rope_, true);
  const std::string wo_a = p_ + "attn.wo_a";
  llvm::SmallVector<NamedAttribute> ga{ref("weight", wo_a + ".weight"), i64("groups", c_.o_groups), bf16()};
  if (is_quantized(tensor(wo_a + ".weight").dtype)) ga.push_back(ref("scale", wo_a + ".scale"));
  Value g = make1("smelt.grouped_linear", o, rows(rows_of(wo_a + ".weight")), ga);
  X = expand(X, linear(g, p_ + "attn.wo_b"), post_a, comb_a);
  auto [pre_f, post_f, comb_f] = hc_mix(X, "ffn");
  Value f = rms_norm(collapse(X, pre_a), p_ + "ffn_norm.weight");
  X = expand(X, moe(f, c_.dspark_n_routed_experts, c_.dspark_num_experts_per_tok), post_f, comb_f);
  layer_ = -1;
  return {X, pre_f};
}

// func.func @dspark_draft(%ids: [B,1]) -> (draft ids [B,1], confidence [B,1], logits [B,V]): the block
// [y_t, noise, ...] at positions t+1 .. t+B (the runtime's chunk) through the stages, then the head.
void ImporterV41::dspark_draft(int64_t vocab) {
  mlir::OpBuilder::InsertionGuard guard(b_);
  auto loc = mlir::NameLoc::get(b_.getStringAttr(m_.dir));
  b_.setInsertionPointToEnd(module_.getBody());
  auto ftype = b_.getFunctionType({irows(1)}, {irows(1), rows(1), rows(vocab)});
  auto draft = mlir::func::FuncOp::create(b_, loc, "dspark_draft", ftype);
  mlir::Block* body = draft.addEntryBlock();
  b_.setInsertionPointToStart(body);
  Value ids = body->getArgument(0);
  Value x = make1("smelt.embedding", ids, rows(c_.hidden_size), {ref("embed", "embed.weight"), bf16()});
  Value X = make1("smelt.hc_init", x, rows(c_.hc_mult * c_.hidden_size), {i64("hc_mult", c_.hc_mult)});
  Value pre;  // the one-hot initial pre
  const int stages = c_.num_nextn_predict_layers;
  for (int s = 0; s < stages; ++s) std::tie(X, pre) = dspark_stage(X, pre, s);
  const std::string last = "mtp." + std::to_string(stages - 1) + ".";
  Value u = collapse(X, pre);
  Value logits = linear(rms_norm(u, last + "norm.weight"), "head", /*fp32_out=*/true);
  mlir::Operation* head =
      make("smelt.dspark_head", {logits, u, ids}, {rows(vocab), irows(1), rows(1)},
           {ref("markov_embed", last + "markov_head.embed.weight"), ref("markov_head", last + "markov_head.head.weight"),
            ref("proj", last + "confidence_head.proj.weight")});
  mlir::func::ReturnOp::create(b_, loc, mlir::ValueRange{head->getResult(1), head->getResult(2), head->getResult(0)});
}

mlir::OwningOpRef<mlir::ModuleOp> ImporterV41::run() {
  const std::string cfg = m_.dir + "/config.json";
  const int layers = c_.num_hidden_layers;
  if ((int)c_.compress_ratios.size() != layers)
    throw Error(cfg + ": compress_ratios needs one entry per backbone layer (" + std::to_string(layers) + ")");
  if (c_.sliding_window <= 0) throw Error(cfg + ": sliding_window must be positive");
  if (c_.n_shared_experts != 1) throw Error(cfg + ": V4.1 has exactly one shared expert (n_shared_experts 1)");
  if (c_.hc_mult <= 0) throw Error(cfg + ": hc_mult must be positive");
  check_schedule();
  check_dspark();
  max_seq_len_ = o_.max_seq_len > 0 ? o_.max_seq_len : default_max_seq_len(c_);
  if (max_seq_len_ < 2) throw Error("max_seq_len " + std::to_string(max_seq_len_) + " is shorter than a compressed group");
  main_rope_ = {c_.rope_theta, 0.0, 0.0, 0.0, 0};
  compress_rope_ = {c_.compress_rope_theta, 0.0, 0.0, 0.0, 0};
  if (c_.yarn.enabled)
    compress_rope_ = {c_.compress_rope_theta, c_.yarn.factor, c_.yarn.beta_fast, c_.yarn.beta_slow,
                      int64_t(c_.yarn.original_max_position_embeddings)};

  Value ids = begin(rows_of("head.weight"));
  Value x = make1("smelt.embedding", ids, rows(c_.hidden_size), {ref("embed", "embed.weight"), bf16()});
  if (!c_.engram_layer_ids.empty()) {
    // The compressed token map is tokenizer-derived data beside the checkpoint (load_model attaches and
    // checks it); without one only the identity map of a model whose compressed vocab covers every token id
    // (the test models) can be expressed.
    const bool has_map = m_.has(kEngramTokenMapTensor);
    if (!has_map && c_.engram_compressed_vocab_size < c_.vocab_size)
      throw Error(cfg + ": Engram needs the compressed token map (engram_compressed_vocab_size " +
                  std::to_string(c_.engram_compressed_vocab_size) + " < vocab_size " + std::to_string(c_.vocab_size) +
                  "), which the checkpoint does not carry: make it with `scripts/make_engram_token_map.py " + m_.dir +
                  "` (writes " + kEngramTokenMapFile + " there; needs `pip install tokenizers`) or pass "
                  "--engram-token-map FILE");
    check_engram_rows();
    layer_ = 0;  // the history is owned by the first layer's state slot; the op itself runs before the layers
    state("engram.history", "engram_history", c_.engram_max_ngram_size, 1);
    layer_ = -1;
    const int64_t cols = int64_t(c_.engram_layer_ids.size()) * (c_.engram_max_ngram_size - 1) * c_.engram_n_heads;
    llvm::SmallVector<int64_t> ls(c_.engram_layer_ids.begin(), c_.engram_layer_ids.end());
    llvm::SmallVector<NamedAttribute> a{
        sym("history", "engram.history"), b_.getNamedAttr("layers", b_.getDenseI64ArrayAttr(ls)),
        i64("vocab", c_.engram_vocab_size), i64("heads", c_.engram_n_heads), i64("max_ngram", c_.engram_max_ngram_size),
        i64("compressed_vocab", c_.engram_compressed_vocab_size), i64("pad_id", c_.engram_pad_token_id)};
    if (has_map) a.push_back(ref("token_map", kEngramTokenMapTensor));
    hashes_ = make1("smelt.engram_hash", ids, irows(cols), a);
  }
  Value X = make1("smelt.hc_init", x, rows(c_.hc_mult * c_.hidden_size), {i64("hc_mult", c_.hc_mult)});
  if (o_.progress)
    o_.progress("importing " + std::to_string(layers) + " V4.1 layers" +
                (dspark_ ? " and the " + std::to_string(c_.num_nextn_predict_layers) + " DSpark stages (@dspark_draft)"
                         : std::string(" (no DSpark stages)")));
  Value pre;  // the one-hot initial pre
  for (int L = 0; L < layers; ++L) std::tie(X, pre) = block(X, pre, L);
  if (dspark_) seed_dspark();
  Value h = rms_norm(collapse(X, pre), "norm.weight");  // V4.1 has no hc_head: the last ffn pre collapses
  Value logits = linear(h, "head", /*fp32_out=*/true);
  if (dspark_) dspark_draft(rows_of("head.weight"));
  return finish(logits, "deepseek_v41");
}

}  // namespace

mlir::OwningOpRef<mlir::ModuleOp> import_v41(mlir::MLIRContext& ctx, const ModelDescription& m, const ImportOptions& o) {
  return ImporterV41(ctx, m, o).run();
}

}  // namespace smelt::import_detail
