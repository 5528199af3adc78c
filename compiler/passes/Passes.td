// smelt passes. Each runs on the module; options follow mlir-opt conventions: smelt-plan-memory{max-rows=64}.
#ifndef SMELT_PASSES_TD
#define SMELT_PASSES_TD

include "mlir/Pass/PassBase.td"

def SmeltVerify : Pass<"smelt-verify", "::mlir::ModuleOp"> {
  let summary = "Whole-module checks beyond the op verifiers";
  let description = [{
    Every weight / state reference resolves to a smelt.weight / smelt.state of the right kind and shape,
    @forward has the expected signature, and each layer's schedule is sane (one attention, the window ring
    updated after it, pools written by a compressor before they are read, each state written once).
  }];
}

def SmeltNumerics : Pass<"smelt-numerics", "::mlir::ModuleOp"> {
  let summary = "Keep (mode=model) or turn off (mode=fp32) the model's own rounding and quantization steps";
  let description = [{
    mode=fp32 removes every `round` and `act_quant`, erases smelt.fake_quant (its result becomes its input) and
    sets `numerics = "fp32"` on the ops whose kernels round inside (kv_compressor, indexer_v41, engram,
    hc_mean, quantized moe_experts / swiglu_mlp, sparse_attention's "v41"). Weights stay as stored
    (dequantized exactly). Used to compare partitioned plans at 1e-5 and to tell quantization effects apart.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"model\"", "model | fp32">,
  ];
}

def SmeltPadHeads : Pass<"smelt-pad-heads", "::mlir::ModuleOp"> {
  let summary = "Pad attention output groups to a multiple of tp (virtual heads, exact)";
  let description = [{
    For every attention of @forward with G output groups where G % tp != 0 or G < tp: G' = ceil(G/tp)*tp groups,
    the padded groups duplicating real ones in wq_b rows, attn_sink and wo_a rows (weights and block scales),
    with zero wo_b columns (scale 1.0), all as weight transforms (docs/partition.md). The DSpark drafter stays
    replicated and is not padded.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1", "tensor-parallel size the groups must divide">,
  ];
}

def SmeltPartition : Pass<"smelt-partition", "::mlir::ModuleOp"> {
  let summary = "Split @forward (and @dspark_draft) into one function per rank: TP shards and PP stages";
  let description = [{
    Produces func.func @rank{r}_forward (and @rank{r}_dspark_draft on the last stage) with smelt.rank =
    {index, stage, tp_rank, arch, share}; sharded weights get per-rank symbols `<name>.tp<r>` (transforms of the
    checkpoint tensor); collectives (all_reduce, all_gather, send, recv) join the ranks. docs/partition.md.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1", "tensor-parallel size of every stage">,
    Option<"pp", "pp", "int64_t", /*default=*/"1", "pipeline stages">,
    ListOption<"shares", "shares", "int64_t", "relative share of every TP rank, or of every rank (tp*pp values, stage-major; default: even)">,
    ListOption<"stages", "stages", "int64_t", "layers per stage (default: balanced by weight bytes)">,
    ListOption<"archs", "archs", "std::string", "arch of every rank, or one for all (default cpu)">,
  ];
}

def SmeltSelectKernels : Pass<"smelt-select-kernels", "::mlir::ModuleOp"> {
  let summary = "Choose a kernel for every compute op";
  let description = [{ Sets `kernel = "cpu.<op>"` on every compute op for the cpu target, `cuda.<op>` for a GPU
    target (docs/targets.md), refusing ops that have no cuda launcher. }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"", "cpu | h200 | sm_80+sm_120 | a rig FILE.json">,
  ];
}

def SmeltFuseHcNorm : Pass<"smelt-fuse-hc-norm", "::mlir::ModuleOp"> {
  let summary = "Fold the rms_norm that is an hc_collapse's only reader into the collapse (one kernel, not two)";
  let description = [{
    hc_collapse -> rms_norm (one group, on the same stream, the collapse's only reader) becomes one hc_collapse
    with `norm` = the norm's weight, `norm_eps` its eps, `collapse_round` the collapse's `round` and `round` the
    norm's. Same results (the cpu backend runs the two references in turn; the cuda kernel computes each value as
    the two kernels do). Not in a default pipeline (--pipeline): one launch less a pair, but on the H200 V4.1 slice
    the one-block fused kernel made the decode step slower (1.172 -> 1.205 ms; docs/performance.md, Session 17).
  }];
}

def SmeltSplitEngram : Pass<"smelt-split-engram", "::mlir::ModuleOp"> {
  let summary = "Split smelt.engram into lookup, wkv linear and gate (the first two depend only on the ids)";
  let description = [{
    smelt.engram -> smelt.engram_lookup -> smelt.linear (wkv) -> smelt.engram_gate without wkv; a TP rank's
    smelt.engram_gate with wkv gets the linear the same way. Same results; the lookup and the projection no longer
    wait for the stream they gate, so smelt-schedule-streams can put them on the side stream
    (side-ops=...,smelt.engram_lookup, a default). In GPU targets' default pipeline since session 24: with
    early-engram's placement the side projection made the H200 slice's step faster (docs/performance.md).
  }];
}

def SmeltScheduleStreams : Pass<"smelt-schedule-streams", "::mlir::ModuleOp"> {
  let summary = "Mark the ops a GPU backend may run on its side stream (stream = 1)";
  let description = [{
    Sets `stream = 1` on every compute op named in side-ops (default: smelt.hc_mix, whose outputs are read only
    by the next hc_collapse / hc_expand, the attention's kv and indexer projections, which run beside the q
    path, and under fp32 numerics the quantized shared expert, beside the routed experts); `OP@NAME` narrows an
    entry to the ops with a weight under NAME, `OP#MODE` to those whose `numerics` is MODE, and with follow
    (default) an op whose every operand comes from a marked op is marked too (the kv branch's norm and rope after
    smelt.linear@attn.wkv), unless it references states (an op with states is marked only when selected). With
    hoist (default) each marked op moves up to just after its operands' producers, the previous marked op and the
    previous op that shares one of its states, so that the arena gives its buffers to it alone; with sink-mix
    (default) a marked smelt.hc_mix then moves down past the side ops before its first user (the attention's kv
    branch and indexer projections run first on the in-order side stream: the attention waits for them); with
    early-engram (default) a marked smelt.engram_lookup (smelt-split-engram) and its projection move up to just
    after the previous layer's attention hc_mix, so that the 157 MB projection runs beside that layer's attention
    end and FFN instead of between two layers. The cuda runtime runs them on a
    second stream, starting each after the last op it depends on and making the main stream wait where a later op
    needs its results, its buffers or its states (runtime/cuda/side_stream.h), so any op may be marked. Part of the
    default pipeline for GPU targets; the cpu backend ignores the attribute.
  }];
  let options = [
    ListOption<"sideOps", "side-ops", "std::string",
               "op names to mark, OP@NAME for the OP ops with a weight under NAME (smelt.linear@attn.wkv), "
               "OP#MODE for those with numerics = MODE (smelt.swiglu_mlp#fp32); default smelt.hc_mix, the kv / "
               "indexer projections, smelt.swiglu_mlp#fp32, smelt.engram_hash and smelt.engram_lookup "
               "(schedule_streams.cc); none: no op">,
    Option<"follow", "follow", "bool", /*default=*/"true",
           "also mark an op whose every operand comes from a marked op (unless it has states)">,
    Option<"hoist", "hoist", "bool", /*default=*/"true",
           "move each marked op up to just after its operands' producers and the previous marked op">,
    Option<"sinkMix", "sink-mix", "bool", /*default=*/"true",
           "then move each marked smelt.hc_mix down past the side ops before its first user (the kv branch, the "
           "indexer projections; not a side-stream shared expert), so that those run first">,
    Option<"earlyEngram", "early-engram", "bool", /*default=*/"true",
           "then move each marked smelt.engram_lookup and the marked ops fed only by it (its projection) up to "
           "just after the previous layer's first marked smelt.hc_mix (its attention's), where the side stream "
           "has a sublayer to run them">,
  ];
}

def SmeltPlanMemory : Pass<"smelt-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Place every activation of @forward in one arena (liveness + first-fit)";
  let description = [{
    Each SSA value of @forward gets a buffer of max_rows * row_elems * elem_size bytes (64-byte aligned).
    Buffers whose live ranges overlap never overlap in memory; an op's outputs never alias its inputs or
    each other. side-live=results keeps what a side-stream op (`stream = 1`) writes live until the first main op
    that reads a result of it or of a later side op (the default), all also what it reads, none neither: program
    order alone, and the runtime holds back a main op that would overwrite a running side op's buffers. H200 V4.1
    slice (docs/performance.md, Sessions 18-19): results took the sm_80-path plan 1.251 -> 1.213 ms a step and left
    the sm_90 plan at 1.176.
    Results: `offsets` on each op, `smelt.offset` on the ids argument, `smelt.arena_bytes` and
    `smelt.max_rows` on the module.
  }];
  let options = [
    Option<"maxRows", "max-rows", "int64_t", /*default=*/"64", "largest chunk (rows) the arena is sized for">,
    Option<"sideLive", "side-live", "std::string", /*default=*/"\"results\"",
           "how long a side-stream op's buffers live: none (program order), results (what it writes, until its "
           "join), all (its operands too)">,
    Option<"seamLive", "seam-live", "bool", /*default=*/"true",
           "keep the operands of an hc_expand (and of the add it expands) live until the hc_collapse of its "
           "streams, so that the cuda runtime can run the three as one launch">,
  ];
}

#endif  // SMELT_PASSES_TD
