// The `smelt` dialect: one op per entry of docs/ops.md, plus module-level symbols for weights (views into
// checkpoint files) and per-sequence state. Activations are row tensors tensor<?xNxf32> / tensor<?xKxi32>:
// the leading dim is the chunk's row count, known only at run time.
#ifndef SMELT_OPS_TD
#define SMELT_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def Smelt_Dialect : Dialect {
  let name = "smelt";
  let cppNamespace = "::smelt";
  let summary = "DeepSeek-V4-family model graphs at the level of the model's own vocabulary";
}

class Smelt_Op<string mnemonic, list<Trait> traits = []> : Op<Smelt_Dialect, mnemonic, traits>;

def Smelt_Rows : TensorRankOf<[F32], [2]>;
// i64 attributes read back as signed int64_t (the builtin I64Attr reads uint64_t).
def Smelt_I64 : TypedSignlessIntegerAttrBase<I64, "int64_t", "64-bit integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}
def Smelt_IRows : TensorRankOf<[I32], [2]>;

// Attributes every compute op may carry: the model layer (-1 / absent = embedding or head), the kernel chosen
// by smelt-select-kernels, the arena offsets of its results set by smelt-plan-memory, `round` ("bf16":
// every float result is rounded to bf16 after the op, where the V4.1 reference holds bf16; absent = none) and
// `numerics` ("fp32": the op's own model roundings and quantizations off, set by smelt-numerics{mode=fp32};
// sparse_attention also takes "v41", the official kernel's blocked softmax with bf16 probabilities).
defvar CommonAttrs = (ins OptionalAttr<Smelt_I64>:$layer, OptionalAttr<StrAttr>:$kernel,
                          OptionalAttr<DenseI64ArrayAttr>:$offsets, OptionalAttr<StrAttr>:$round,
                          OptionalAttr<StrAttr>:$numerics);

class Smelt_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Smelt_Op<mnemonic, !listconcat(traits, [DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===--------------------------------------------------------------------------------------------------===//
// Module-level symbols
//===--------------------------------------------------------------------------------------------------===//

def Smelt_WeightOp : Smelt_Op<"weight", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a checkpoint tensor, named by its canonical name";
  let description = [{
    `type` is the tensor as stored (dtype and shape). `source` is its name in the checkpoint, `file` an index
    into the module's `smelt.checkpoint_files`, `offset` the absolute byte offset of its first element and
    `transform` the recipe the plan applies at load ("" = as stored). With a transform (docs/plan.md "Weight
    transforms": head padding, partition shards) `type` is the result and `source_shape` the stored shape.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyRankedTensor>:$type, StrAttr:$source,
                       Smelt_I64:$file, Smelt_I64:$offset, DefaultValuedStrAttr<StrAttr, "">:$transform,
                       OptionalAttr<DenseI64ArrayAttr>:$source_shape);
  let assemblyFormat = [{
    $sym_name `:` $type `from` $source `file` $file `offset` $offset (`transform` $transform^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() { return ::llvm::cast<::mlir::RankedTensorType>(getType()); }
  }];
}

def Smelt_StateOp : Smelt_Op<"state", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "per-sequence model state (zero-initialised, addressed by absolute position)";
  let description = [{
    `kind` is one of window_ring, compressor_ring, compressed_pool, index_pool, engram_history
    (see docs/ops.md). `layer` is the owner; V4.1 layers read the pools of their KV source (an earlier layer).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$kind, Smelt_I64:$layer,
                       TypeAttrOf<TensorRankOf<[F32], [2]>>:$type);
  let assemblyFormat = "$sym_name $kind `layer` $layer `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() { return ::llvm::cast<::mlir::RankedTensorType>(getType()); }
  }];
}

//===--------------------------------------------------------------------------------------------------===//
// Compute ops (docs/ops.md; operand order = plan order)
//===--------------------------------------------------------------------------------------------------===//

def Smelt_EmbeddingOp : Smelt_ComputeOp<"embedding"> {
  let summary = "x = embed[ids]";
  let arguments = !con((ins Smelt_IRows:$ids, FlatSymbolRefAttr:$embed), CommonAttrs);
  let results = (outs Smelt_Rows:$x);
}

def Smelt_HcInitOp : Smelt_ComputeOp<"hc_init"> {
  let summary = "X = hc_mult copies of x";
  let arguments = !con((ins Smelt_Rows:$x, Smelt_I64:$hc_mult), CommonAttrs);
  let results = (outs Smelt_Rows:$streams);
}

def Smelt_HcMixOp : Smelt_ComputeOp<"hc_mix"> {
  let summary = "hyper-connection mapping: pre, post and the Sinkhorn-projected comb";
  let description = [{ `variant`: "v4" (default: normalise, then project) or "v41" (project, then rsqrt). }];
  let arguments = !con((ins Smelt_Rows:$streams, FlatSymbolRefAttr:$fn, FlatSymbolRefAttr:$base,
                            FlatSymbolRefAttr:$scale, Smelt_I64:$hc_mult, Smelt_I64:$sinkhorn_iters,
                            F64Attr:$hc_eps, F64Attr:$norm_eps, OptionalAttr<StrAttr>:$variant), CommonAttrs);
  let results = (outs Smelt_Rows:$pre, Smelt_Rows:$post, Smelt_Rows:$comb);
}

def Smelt_HcCollapseOp : Smelt_ComputeOp<"hc_collapse"> {
  let summary = "u = sum_i pre_i X_i (without pre: copy 0, the one-hot initial pre of V4.1), optionally rms-normed";
  let description = [{
    With `norm` (smelt-fuse-hc-norm folds the smelt.rms_norm that was the collapse's only reader): u = rms_norm(c;
    norm, norm_eps) of the collapse c, which is rounded first as `collapse_round` says; `round` is the output's.
  }];
  let arguments = !con((ins Smelt_Rows:$streams, Optional<Smelt_Rows>:$pre, Smelt_I64:$hc_mult,
                            OptionalAttr<FlatSymbolRefAttr>:$norm, OptionalAttr<F64Attr>:$norm_eps,
                            OptionalAttr<StrAttr>:$collapse_round), CommonAttrs);
  let results = (outs Smelt_Rows:$u);
}

def Smelt_HcExpandOp : Smelt_ComputeOp<"hc_expand"> {
  let summary = "X'_k = post_k y + sum_j comb[j,k] X_j";
  let arguments = !con((ins Smelt_Rows:$streams, Smelt_Rows:$y, Smelt_Rows:$post, Smelt_Rows:$comb,
                            Smelt_I64:$hc_mult), CommonAttrs);
  let results = (outs Smelt_Rows:$result);
}

def Smelt_HcHeadOp : Smelt_ComputeOp<"hc_head"> {
  let summary = "final collapse of the hc_mult streams";
  let arguments = !con((ins Smelt_Rows:$streams, FlatSymbolRefAttr:$fn, FlatSymbolRefAttr:$base,
                            FlatSymbolRefAttr:$scale, Smelt_I64:$hc_mult, F64Attr:$hc_eps, F64Attr:$norm_eps),
                       CommonAttrs);
  let results = (outs Smelt_Rows:$h);
}

def Smelt_RmsNormOp : Smelt_ComputeOp<"rms_norm"> {
  let summary = "rms norm per group of C/groups channels, optionally weighted";
  let arguments = !con((ins Smelt_Rows:$x, OptionalAttr<FlatSymbolRefAttr>:$weight, F64Attr:$eps,
                            DefaultValuedAttr<Smelt_I64, "1">:$groups), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_LinearOp : Smelt_ComputeOp<"linear"> {
  let summary = "y = x weight^T";
  let description = [{
    A quantized weight (f8E4M3FN [N, K] with f8E8M0FNU block scales, or i8 [N, K/2] packed FP4 with one
    scale per row per 32) names its `scale`; `act_quant` = "fp8_e4m3_b32" quantizes x per token in K-blocks
    of 32 first (the V4.1 reference does so for every FP8/FP4 weight). `scale_after` multiplies y.
  }];
  let arguments = !con((ins Smelt_Rows:$x, FlatSymbolRefAttr:$weight, OptionalAttr<FlatSymbolRefAttr>:$scale,
                            OptionalAttr<StrAttr>:$act_quant, OptionalAttr<F64Attr>:$scale_after), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_GroupedLinearOp : Smelt_ComputeOp<"grouped_linear"> {
  let summary = "block-diagonal linear: group g of x times rows [g*R, (g+1)*R) of weight";
  let arguments = !con((ins Smelt_Rows:$x, FlatSymbolRefAttr:$weight, OptionalAttr<FlatSymbolRefAttr>:$scale,
                            Smelt_I64:$groups), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_RopeOp : Smelt_ComputeOp<"rope"> {
  let summary = "interleaved RoPE on the last rope_dim channels of each head";
  let description = [{ `variant` "v41": the frequency table of the official V4.1 code (YaRN blend order). }];
  let arguments = !con((ins Smelt_Rows:$x, Smelt_I64:$heads, Smelt_I64:$head_dim, Smelt_I64:$rope_dim,
                            F64Attr:$theta, F64Attr:$yarn_factor, F64Attr:$yarn_beta_fast,
                            F64Attr:$yarn_beta_slow, Smelt_I64:$yarn_original_max_pos, Smelt_I64:$inverse,
                            OptionalAttr<StrAttr>:$variant),
                       CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_WindowKvUpdateOp : Smelt_ComputeOp<"window_kv_update"> {
  let summary = "store the chunk's kv rows in the window ring";
  let arguments = !con((ins Smelt_Rows:$kv, FlatSymbolRefAttr:$window_ring, Smelt_I64:$window), CommonAttrs);
}

def Smelt_CompressorOp : Smelt_ComputeOp<"compressor"> {
  let summary = "gated pooling of every `ratio` positions into one compressed entry";
  let arguments = !con((ins Smelt_Rows:$x, FlatSymbolRefAttr:$wkv, FlatSymbolRefAttr:$wgate,
                            FlatSymbolRefAttr:$ape, FlatSymbolRefAttr:$norm,
                            FlatSymbolRefAttr:$compressor_ring, FlatSymbolRefAttr:$pool,
                            Smelt_I64:$ratio, Smelt_I64:$head_dim, Smelt_I64:$overlap, F64Attr:$eps,
                            Smelt_I64:$rope_dim, F64Attr:$theta, F64Attr:$yarn_factor,
                            F64Attr:$yarn_beta_fast, F64Attr:$yarn_beta_slow, Smelt_I64:$yarn_original_max_pos),
                       CommonAttrs);
}

def Smelt_IndexerTopkOp : Smelt_ComputeOp<"indexer_topk"> {
  let summary = "lightning indexer: top-k visible compressed entries per query";
  let arguments = !con((ins Smelt_Rows:$q, Smelt_Rows:$w, FlatSymbolRefAttr:$index_pool, Smelt_I64:$heads,
                            Smelt_I64:$head_dim, Smelt_I64:$ratio, Smelt_I64:$topk), CommonAttrs);
  let results = (outs Smelt_IRows:$idx);
}

def Smelt_SparseAttentionOp : Smelt_ComputeOp<"sparse_attention"> {
  let summary = "attention over the window and (all or the indexed) compressed entries, with sink";
  let arguments = !con((ins Smelt_Rows:$q, Smelt_Rows:$kv, Optional<Smelt_IRows>:$idx,
                            FlatSymbolRefAttr:$sink, FlatSymbolRefAttr:$window_ring,
                            OptionalAttr<FlatSymbolRefAttr>:$pool, Smelt_I64:$heads, Smelt_I64:$head_dim,
                            Smelt_I64:$window, Smelt_I64:$ratio, F64Attr:$scale), CommonAttrs);
  let results = (outs Smelt_Rows:$o);
}

def Smelt_MoeRouteOp : Smelt_ComputeOp<"moe_route"> {
  let summary = "expert selection (learned top-k, or tid2eid[id] when hash-routed) and weights";
  let arguments = !con((ins Smelt_Rows:$x, Optional<Smelt_IRows>:$ids, FlatSymbolRefAttr:$gate,
                            OptionalAttr<FlatSymbolRefAttr>:$bias, OptionalAttr<FlatSymbolRefAttr>:$tid2eid,
                            Smelt_I64:$topk, StrAttr:$scoring, BoolAttr:$norm_topk_prob, F64Attr:$route_scale,
                            OptionalAttr<F64Attr>:$gate_temp),
                       CommonAttrs);
  let results = (outs Smelt_Rows:$weights, Smelt_IRows:$idx);
}

def Smelt_MoeExpertsOp : Smelt_ComputeOp<"moe_experts"> {
  let summary = "routed experts: sum_k weight_k * swiglu_expert[idx_k](x)";
  let description = [{
    `experts` lists e0.w1, e0.w2, e0.w3, e1.w1, ...; with `act_quant` (quantized experts) each weight is
    followed by its scale: e0.w1, e0.w1.scale, e0.w2, e0.w2.scale, e0.w3, e0.w3.scale, ... `variant` "v41":
    the reference's rounding points (routing weight applied before w2, bf16 expert outputs, fp32 sum).
    Expert-parallel ranks (smelt-partition) set `n_routed` (the model's expert count) and `expert_begin`: the
    list then holds experts expert_begin .. expert_begin+n_experts-1 and other rows' experts contribute nothing.
  }];
  let arguments = !con((ins Smelt_Rows:$x, Smelt_Rows:$weights, Smelt_IRows:$idx,
                            TypedArrayAttrBase<FlatSymbolRefAttr, "expert weights e0.w1, e0.w2, e0.w3, ...">:$experts,
                            Smelt_I64:$n_experts, Smelt_I64:$topk, F64Attr:$swiglu_limit,
                            OptionalAttr<StrAttr>:$act_quant, OptionalAttr<StrAttr>:$variant,
                            OptionalAttr<Smelt_I64>:$n_routed, OptionalAttr<Smelt_I64>:$expert_begin), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_SwigluMlpOp : Smelt_ComputeOp<"swiglu_mlp"> {
  let summary = "w2(silu(min(x w1^T, limit)) * clamp(x w3^T, -limit, limit))";
  let description = [{ With `act_quant` the weights are quantized and name their scales w1_scale, ... }];
  let arguments = !con((ins Smelt_Rows:$x, FlatSymbolRefAttr:$w1, FlatSymbolRefAttr:$w2, FlatSymbolRefAttr:$w3,
                            OptionalAttr<FlatSymbolRefAttr>:$w1_scale, OptionalAttr<FlatSymbolRefAttr>:$w2_scale,
                            OptionalAttr<FlatSymbolRefAttr>:$w3_scale, F64Attr:$swiglu_limit,
                            OptionalAttr<StrAttr>:$act_quant, OptionalAttr<StrAttr>:$variant), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_AddOp : Smelt_ComputeOp<"add"> {
  let summary = "c = a + b";
  let arguments = !con((ins Smelt_Rows:$a, Smelt_Rows:$b), CommonAttrs);
  let results = (outs Smelt_Rows:$c);
}

//===--------------------------------------------------------------------------------------------------===//
// DeepSeek-V4.1 ops (docs/ops.md, section DeepSeek-V4.1)
//===--------------------------------------------------------------------------------------------------===//

def Smelt_FakeQuantOp : Smelt_ComputeOp<"fake_quant"> {
  let summary = "quantize then dequantize (QAT fake quant of attention state)";
  let description = [{
    `mode`: fp8_e4m3_b32 (window K=V), fp4_e2m1_g16_e4m3 (compressed KV), fp4_e2m1_b32_ue8m0 (index q/k).
    Each row is `heads` segments (default 1); the QDQ covers the first `channels` values of each (default all).
  }];
  let arguments = !con((ins Smelt_Rows:$x, StrAttr:$mode, OptionalAttr<Smelt_I64>:$heads,
                            OptionalAttr<Smelt_I64>:$channels), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_KvCompressorOp : Smelt_ComputeOp<"kv_compressor"> {
  let summary = "V4.1 KV source: compressed KV entries (pool) and index keys (index_pool)";
  let arguments = !con((ins Smelt_Rows:$x, FlatSymbolRefAttr:$wkv, OptionalAttr<FlatSymbolRefAttr>:$wgate,
                            FlatSymbolRefAttr:$norm, OptionalAttr<FlatSymbolRefAttr>:$wk,
                            OptionalAttr<FlatSymbolRefAttr>:$k_norm, OptionalAttr<FlatSymbolRefAttr>:$ring,
                            FlatSymbolRefAttr:$pool, OptionalAttr<FlatSymbolRefAttr>:$index_pool,
                            Smelt_I64:$ratio, Smelt_I64:$head_dim, Smelt_I64:$index_head_dim, Smelt_I64:$rope_dim,
                            F64Attr:$theta, F64Attr:$yarn_factor, F64Attr:$yarn_beta_fast, F64Attr:$yarn_beta_slow,
                            Smelt_I64:$yarn_original_max_pos, F64Attr:$eps), CommonAttrs);
}

def Smelt_IndexerV41Op : Smelt_ComputeOp<"indexer_v41"> {
  let summary = "V4.1 indexer: bf16 scores, two-level (candidate block) top-k";
  let arguments = !con((ins Smelt_Rows:$q, Smelt_Rows:$w, Optional<Smelt_IRows>:$cand_in,
                            FlatSymbolRefAttr:$index_pool, Smelt_I64:$heads, Smelt_I64:$head_dim, Smelt_I64:$ratio,
                            Smelt_I64:$topk, Smelt_I64:$candidate_blocks, Smelt_I64:$candidate_block_size,
                            Smelt_I64:$is_candidate_source), CommonAttrs);
  let results = (outs Smelt_IRows:$idx, Optional<Smelt_IRows>:$cand_out);
}

def Smelt_EngramHashOp : Smelt_ComputeOp<"engram_hash"> {
  let summary = "Engram n-gram hash ids of every Engram layer (once per chunk)";
  let arguments = !con((ins Smelt_IRows:$ids, OptionalAttr<FlatSymbolRefAttr>:$token_map,
                            FlatSymbolRefAttr:$history, DenseI64ArrayAttr:$layers, Smelt_I64:$vocab,
                            Smelt_I64:$heads, Smelt_I64:$max_ngram, Smelt_I64:$compressed_vocab, Smelt_I64:$pad_id),
                       CommonAttrs);
  let results = (outs Smelt_IRows:$hashes);
}

def Smelt_EngramOp : Smelt_ComputeOp<"engram"> {
  let summary = "Engram: gated n-gram memory added to every hc copy of the stream";
  let arguments = !con((ins Smelt_Rows:$streams, Smelt_IRows:$hashes, FlatSymbolRefAttr:$table,
                            FlatSymbolRefAttr:$table_scale, FlatSymbolRefAttr:$wkv, FlatSymbolRefAttr:$wkv_scale,
                            FlatSymbolRefAttr:$q_weight, FlatSymbolRefAttr:$k_weight, Smelt_I64:$layer_index,
                            Smelt_I64:$hc_mult, Smelt_I64:$dim, Smelt_I64:$head_dim, Smelt_I64:$cols, F64Attr:$eps),
                       CommonAttrs);
  let results = (outs Smelt_Rows:$result);
}

// smelt.engram split in two for tensor parallelism (smelt-partition, docs/partition.md): each TP rank looks
// up the rows of its row range of the table (zeros for the others), an all_reduce joins the rows, and the
// gate runs on the joined rows. TP1 plans keep smelt.engram.
def Smelt_EngramLookupOp : Smelt_ComputeOp<"engram_lookup"> {
  let summary = "Engram table rows of this layer's hashes (a TP rank: its row range, zeros elsewhere)";
  let arguments = !con((ins Smelt_IRows:$hashes, FlatSymbolRefAttr:$table, FlatSymbolRefAttr:$table_scale,
                            Smelt_I64:$layer_index, Smelt_I64:$head_dim, Smelt_I64:$cols, Smelt_I64:$row_begin,
                            Smelt_I64:$rows_total), CommonAttrs);
  let results = (outs Smelt_Rows:$e);
}

// Without wkv (smelt-split-engram), e is already the projected keys and value [(hc_mult + 1) * dim]: a
// smelt.linear computes them, so that the lookup and the projection can run ahead of the stream they gate.
def Smelt_EngramGateOp : Smelt_ComputeOp<"engram_gate"> {
  let summary = "Engram after the lookup: wkv projection (unless already done) and the gated add to every hc copy";
  let arguments = !con((ins Smelt_Rows:$streams, Smelt_Rows:$e, OptionalAttr<FlatSymbolRefAttr>:$wkv,
                            OptionalAttr<FlatSymbolRefAttr>:$wkv_scale, FlatSymbolRefAttr:$q_weight,
                            FlatSymbolRefAttr:$k_weight,
                            Smelt_I64:$hc_mult, Smelt_I64:$dim, Smelt_I64:$head_dim, Smelt_I64:$cols, F64Attr:$eps),
                       CommonAttrs);
  let results = (outs Smelt_Rows:$result);
}

// smelt.indexer_topk / smelt.indexer_v41 split for tensor parallelism (smelt-partition, docs/partition.md): each
// TP rank scores the visible entries with its own heads, an all_reduce adds the partial scores, and the selection
// runs replicated on the joined scores. TP1 plans keep the whole indexer. variant: "v4" (indexer_topk's math:
// heads_total = the model's head count, in the heads^-0.5 weight scale) or "v41" (indexer_v41's).
def Smelt_IndexerScoresOp : Smelt_ComputeOp<"indexer_scores"> {
  let summary = "a TP rank's partial indexer scores (its heads) of every index pool entry";
  let arguments = !con((ins Smelt_Rows:$q, Smelt_Rows:$w, FlatSymbolRefAttr:$index_pool, Smelt_I64:$heads,
                            Smelt_I64:$head_dim, Smelt_I64:$ratio, StrAttr:$variant, Smelt_I64:$heads_total),
                       CommonAttrs);
  let results = (outs Smelt_Rows:$scores);
}

def Smelt_IndexerSelectOp : Smelt_ComputeOp<"indexer_select"> {
  let summary = "the indexer's top-k (and V4.1 candidate level) on joined scores";
  let arguments = !con((ins Smelt_Rows:$scores, Optional<Smelt_IRows>:$cand_in, Smelt_I64:$ratio, Smelt_I64:$topk,
                            StrAttr:$variant, Smelt_I64:$candidate_blocks, Smelt_I64:$candidate_block_size,
                            Smelt_I64:$is_candidate_source), CommonAttrs);
  let results = (outs Smelt_IRows:$idx, Optional<Smelt_IRows>:$cand_out);
}

def Smelt_HcMeanOp : Smelt_ComputeOp<"hc_mean"> {
  let summary = "m = mean over the hc copies (DSpark target capture), bf16";
  let arguments = !con((ins Smelt_Rows:$streams, Smelt_I64:$hc_mult), CommonAttrs);
  let results = (outs Smelt_Rows:$m);
}

def Smelt_CaptureOp : Smelt_ComputeOp<"capture"> {
  let summary = "copy the chunk's rows of x into the runtime's named capture table";
  let description = [{ `row_shape` (optional) is the shape of one row when written out, e.g. [hc_mult, D]. }];
  let arguments = !con((ins Smelt_Rows:$x, StrAttr:$name, OptionalAttr<DenseI64ArrayAttr>:$row_shape),
                       CommonAttrs);
}

def Smelt_ConcatOp : Smelt_ComputeOp<"concat"> {
  let summary = "y = the rows of x0, x1, ... side by side (2 to 4 inputs)";
  let arguments = !con((ins Variadic<Smelt_Rows>:$xs), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

//===--------------------------------------------------------------------------------------------------===//
// DeepSeek-V4.1 DSpark drafter (docs/ops.md, section DSpark; the @dspark_draft program)
//===--------------------------------------------------------------------------------------------------===//

def Smelt_DsparkAttentionOp : Smelt_ComputeOp<"dspark_attention"> {
  let summary = "the draft block's attention: window ring (positions <= p0-1) + the block's own kv, unmasked";
  let arguments = !con((ins Smelt_Rows:$q, Smelt_Rows:$kv, FlatSymbolRefAttr:$sink, FlatSymbolRefAttr:$window_ring,
                            Smelt_I64:$heads, Smelt_I64:$head_dim, Smelt_I64:$window, F64Attr:$scale), CommonAttrs);
  let results = (outs Smelt_Rows:$o);
}

def Smelt_DsparkHeadOp : Smelt_ComputeOp<"dspark_head"> {
  let summary = "Markov logits bias, greedy drafts one position after the other, confidence";
  let description = [{
    `logits` = head(norm(x)) of the block's rows (fp32), `x` the collapsed stream, `ids` the block's input
    ids (row 0: the token the drafts continue). Results: the logits with the Markov bias, the drafts, the
    confidences.
  }];
  let arguments = !con((ins Smelt_Rows:$logits, Smelt_Rows:$x, Smelt_IRows:$ids, FlatSymbolRefAttr:$markov_embed,
                            FlatSymbolRefAttr:$markov_head, FlatSymbolRefAttr:$proj), CommonAttrs);
  let results = (outs Smelt_Rows:$biased_logits, Smelt_IRows:$draft_ids, Smelt_Rows:$confidence);
}

//===--------------------------------------------------------------------------------------------------===//
// Collectives of partitioned modules (docs/ops.md, section Collectives; smelt-partition)
//===--------------------------------------------------------------------------------------------------===//

def Smelt_AllReduceOp : Smelt_ComputeOp<"all_reduce"> {
  let summary = "y = the members' x summed in `group` order (bit-identical on every member)";
  let description = [{ Without x this rank holds a zero-width shard and contributes zeros (plan input -1). }];
  let arguments = !con((ins Optional<Smelt_Rows>:$x, DenseI64ArrayAttr:$group), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_AllGatherOp : Smelt_ComputeOp<"all_gather"> {
  let summary = "y = the members' x side by side in `group` order; `widths` = every member's columns";
  let arguments = !con((ins Smelt_Rows:$x, DenseI64ArrayAttr:$group, DenseI64ArrayAttr:$widths), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

def Smelt_SendOp : Smelt_ComputeOp<"send"> {
  let summary = "send x to global rank `peer` (pipeline-stage boundary)";
  let arguments = !con((ins Smelt_Rows:$x, Smelt_I64:$peer, Smelt_I64:$tag), CommonAttrs);
}

def Smelt_RecvOp : Smelt_ComputeOp<"recv"> {
  let summary = "receive y from global rank `peer` (the matching send has the same tag)";
  let arguments = !con((ins Smelt_I64:$peer, Smelt_I64:$tag), CommonAttrs);
  let results = (outs Smelt_Rows:$y);
}

#endif  // SMELT_OPS_TD
