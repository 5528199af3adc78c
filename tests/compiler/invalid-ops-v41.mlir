// Op verifiers of the DeepSeek-V4.1 ops and attributes: local rules and quantized weight storage.
// RUN: smelt-opt %s -split-input-file -verify-diagnostics

func.func @round(%x: tensor<?x16xf32>) {
  // expected-error @below {{unknown round 'fp16' (expected bf16)}}
  %y = smelt.rms_norm %x {eps = 1.0e-6, round = "fp16"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

smelt.weight @w : tensor<8x16xf8E4M3FN> from "w.weight" file 0 offset 0
func.func @fp8_without_scale(%x: tensor<?x16xf32>) {
  // expected-error @below {{weight 'weight' @w is quantized ('f8E4M3FN') but has no scale}}
  %y = smelt.linear %x {weight = @w} : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return
}

// -----

smelt.weight @w : tensor<64x64xf8E4M3FN> from "w.weight" file 0 offset 0
smelt.weight @s : tensor<3x2xf8E8M0FNU> from "w.scale" file 0 offset 4096
func.func @fp8_scale_shape(%x: tensor<?x64xf32>) {
  // expected-error @below {{scale of 'weight' @s has shape [3,2], which is no power-of-two block (>= 32) of the [64,64] weight}}
  %y = smelt.linear %x {weight = @w, scale = @s, act_quant = "fp8_e4m3_b32"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

smelt.weight @w : tensor<8x16xi8> from "w.weight" file 0 offset 0
smelt.weight @s : tensor<8x1xf8E8M0FNU> from "w.scale" file 0 offset 128
func.func @fp4_packed_width(%x: tensor<?x64xf32>) {
  // expected-error @below {{weight 'weight' @w has shape [8,16] but this op needs [8,32]}}
  %y = smelt.linear %x {weight = @w, scale = @s, act_quant = "fp8_e4m3_b32"} : (tensor<?x64xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @act_quant_without_scale(%x: tensor<?x16xf32>) {
  // expected-error @below {{act_quant needs a quantized weight (one with a scale)}}
  %y = smelt.linear %x {weight = @w, act_quant = "fp8_e4m3_b32"} : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @fake_quant_mode(%x: tensor<?x64xf32>) {
  // expected-error @below {{unknown mode 'int4' (expected fp8_e4m3_b32, fp4_e2m1_g16_e4m3 or fp4_e2m1_b32_ue8m0)}}
  %y = smelt.fake_quant %x {mode = "int4"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @kv_compressor_gate(%x: tensor<?x64xf32>) {
  // expected-error @below {{ratio 2 needs a wgate weight, ratio 1 takes none}}
  smelt.kv_compressor %x {wkv = @wkv, norm = @norm, pool = @pool, ring = @ring, ratio = 2 : i64, head_dim = 32 : i64, index_head_dim = 32 : i64, rope_dim = 8 : i64, theta = 1.6e5, yarn_factor = 0.0, yarn_beta_fast = 32.0, yarn_beta_slow = 1.0, yarn_original_max_pos = 65536 : i64, eps = 1.0e-20} : (tensor<?x64xf32>) -> ()
  return
}

// -----

smelt.state @ip "index_pool" layer 0 : tensor<16x32xf32>
func.func @indexer_scores_width(%q: tensor<?x64xf32>, %w: tensor<?x2xf32>) {
  // expected-error @below {{index_pool @ip of shape [16,32] does not give one score per row (8) of head_dim 32}}
  %s = smelt.indexer_scores %q, %w {index_pool = @ip, heads = 2 : i64, head_dim = 32 : i64, ratio = 1 : i64, variant = "v41", heads_total = 4 : i64} : (tensor<?x64xf32>, tensor<?x2xf32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @indexer_scores_heads_total(%q: tensor<?x64xf32>, %w: tensor<?x2xf32>) {
  // expected-error @below {{heads_total 1 is below this rank's heads 2}}
  %s = smelt.indexer_scores %q, %w {index_pool = @ip, heads = 2 : i64, head_dim = 32 : i64, ratio = 1 : i64, variant = "v4", heads_total = 1 : i64} : (tensor<?x64xf32>, tensor<?x2xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @indexer_select_v4_candidates(%s: tensor<?x16xf32>) {
  // expected-error @below {{only v41 has a candidate level}}
  %i, %c = smelt.indexer_select %s {ratio = 1 : i64, topk = 4 : i64, variant = "v4", candidate_blocks = 2 : i64, candidate_block_size = 2 : i64, is_candidate_source = 1 : i64} : (tensor<?x16xf32>) -> (tensor<?x4xi32>, tensor<?x2xi32>)
  return
}

// -----

func.func @indexer_cand_out(%q: tensor<?x64xf32>, %w: tensor<?x2xf32>) {
  // expected-error @below {{only a candidate source produces cand_out}}
  %i, %c = smelt.indexer_v41 %q, %w {index_pool = @ip, heads = 2 : i64, head_dim = 32 : i64, ratio = 1 : i64, topk = 4 : i64, candidate_blocks = 2 : i64, candidate_block_size = 2 : i64, is_candidate_source = 0 : i64} : (tensor<?x64xf32>, tensor<?x2xf32>) -> (tensor<?x4xi32>, tensor<?x2xi32>)
  return
}

// -----

func.func @engram_hash_width(%ids: tensor<?x1xi32>) {
  // expected-error @below {{hashes (layers * (max_ngram-1) * heads) must have 8 columns, got 6}}
  %h = smelt.engram_hash %ids {history = @h, layers = array<i64: 1, 2>, vocab = 13 : i64, heads = 2 : i64, max_ngram = 3 : i64, compressed_vocab = 64 : i64, pad_id = 2 : i64} : (tensor<?x1xi32>) -> tensor<?x6xi32>
  return
}

// -----

smelt.weight @t : tensor<40x32xbf16> from "t" file 0 offset 0
func.func @engram_table(%X: tensor<?x128xf32>, %h: tensor<?x4xi32>) {
  // expected-error @below {{table @t must be f8E4M3FN (FP8 rows with per-32 scales)}}
  %y = smelt.engram %X, %h {table = @t, table_scale = @ts, wkv = @wkv, wkv_scale = @wkvs, q_weight = @q, k_weight = @k, layer_index = 1 : i64, hc_mult = 2 : i64, dim = 64 : i64, head_dim = 32 : i64, cols = 2 : i64, eps = 1.0e-20} : (tensor<?x128xf32>, tensor<?x4xi32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @capture_shape(%x: tensor<?x128xf32>) {
  // expected-error @below {{row_shape has 64 elements but x has 128 columns}}
  smelt.capture %x {name = "block0.stream", row_shape = array<i64: 2, 32>} : (tensor<?x128xf32>) -> ()
  return
}

// -----

smelt.weight @w1 : tensor<32x16xi8> from "w1" file 0 offset 0
smelt.weight @w2 : tensor<32x16xi8> from "w2" file 0 offset 0
smelt.weight @w3 : tensor<32x16xi8> from "w3" file 0 offset 0
func.func @experts_list(%x: tensor<?x32xf32>, %w: tensor<?x1xf32>, %i: tensor<?x1xi32>) {
  // expected-error @below {{expects 6 * n_experts = 6 expert weights (e0.w1, e0.w1.scale, e0.w2, e0.w2.scale, e0.w3, e0.w3.scale, e1.w1, ...), got 3}}
  %y = smelt.moe_experts %x, %w, %i {experts = [@w1, @w2, @w3], n_experts = 1 : i64, topk = 1 : i64, swiglu_limit = 10.0, act_quant = "fp8_e4m3_b32", variant = "v41"} : (tensor<?x32xf32>, tensor<?x1xf32>, tensor<?x1xi32>) -> tensor<?x32xf32>
  return
}

// -----

smelt.weight @t : tensor<20x32xf8E4M3FN> from "t" file 0 offset 0
smelt.weight @ts : tensor<20x1xf8E8M0FNU> from "ts" file 0 offset 0
func.func @engram_lookup_range(%h: tensor<?x4xi32>) {
  // expected-error @below {{table rows 15 + 20 exceed rows_total 30}}
  %e = smelt.engram_lookup %h {table = @t, table_scale = @ts, layer_index = 0 : i64, head_dim = 32 : i64, cols = 2 : i64, row_begin = 15 : i64, rows_total = 30 : i64} : (tensor<?x4xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @engram_lookup_width(%h: tensor<?x4xi32>) {
  // expected-error @below {{e (cols * head_dim) must have 64 columns, got 32}}
  %e = smelt.engram_lookup %h {table = @t, table_scale = @ts, layer_index = 0 : i64, head_dim = 32 : i64, cols = 2 : i64, row_begin = 0 : i64, rows_total = 30 : i64} : (tensor<?x4xi32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @engram_gate_width(%X: tensor<?x128xf32>, %e: tensor<?x32xf32>) {
  // expected-error @below {{e (cols * head_dim) must have 64 columns, got 32}}
  %y = smelt.engram_gate %X, %e {wkv = @wkv, wkv_scale = @wkvs, q_weight = @q, k_weight = @k, hc_mult = 2 : i64, dim = 64 : i64, head_dim = 32 : i64, cols = 2 : i64, eps = 1.0e-20} : (tensor<?x128xf32>, tensor<?x32xf32>) -> tensor<?x128xf32>
  return
}
