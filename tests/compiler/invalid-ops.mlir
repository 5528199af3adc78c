// Op verifiers: local shape rules, and weight shapes against the referenced smelt.weight.
// RUN: smelt-opt %s -split-input-file -verify-diagnostics

func.func @static_rows(%x: tensor<4x16xf32>) {
  // expected-error @below {{operand #0 must have a dynamic row count (tensor<?xN>)}}
  %y = smelt.rms_norm %x {eps = 1.0e-6} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @rms_groups(%x: tensor<?x16xf32>) {
  // expected-error @below {{columns 16 are not a multiple of groups 3}}
  %y = smelt.rms_norm %x {eps = 1.0e-6, groups = 3 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

smelt.weight @w : tensor<8x15xf32> from "w" file 0 offset 0
func.func @linear_weight(%x: tensor<?x16xf32>) {
  // expected-error @below {{weight 'weight' @w has shape [8,15] but this op needs [8,16]}}
  %y = smelt.linear %x {weight = @w} : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return
}

// -----

smelt.weight @w : tensor<16x8xf32> from "w" file 0 offset 0
func.func @grouped_linear_weight(%x: tensor<?x16xf32>) {
  // expected-error @below {{weight 'weight' @w has shape [16,8] but this op needs [12,8]}}
  %y = smelt.grouped_linear %x {weight = @w, groups = 2 : i64} : (tensor<?x16xf32>) -> tensor<?x12xf32>
  return
}

// -----

func.func @rope_layout(%x: tensor<?x16xf32>) {
  // expected-error @below {{x (heads * head_dim) must have 24 columns, got 16}}
  %y = smelt.rope %x {heads = 3 : i64, head_dim = 8 : i64, rope_dim = 4 : i64, theta = 1.0e4, yarn_factor = 0.0, yarn_beta_fast = 0.0, yarn_beta_slow = 0.0, yarn_original_max_pos = 0 : i64, inverse = 0 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @rope_dim(%x: tensor<?x16xf32>) {
  // expected-error @below {{rope_dim must be even and in (0, head_dim=8], got 5}}
  %y = smelt.rope %x {heads = 2 : i64, head_dim = 8 : i64, rope_dim = 5 : i64, theta = 1.0e4, yarn_factor = 0.0, yarn_beta_fast = 0.0, yarn_beta_slow = 0.0, yarn_original_max_pos = 0 : i64, inverse = 0 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

smelt.weight @fn : tensor<8x32xf32> from "fn" file 0 offset 0
smelt.weight @base : tensor<8xf32> from "base" file 0 offset 0
smelt.weight @scale : tensor<3xf32> from "scale" file 0 offset 0
func.func @hc_mix_comb(%X: tensor<?x32xf32>) {
  // expected-error @below {{comb must have 4 columns, got 2}}
  %pre, %post, %comb = smelt.hc_mix %X {fn = @fn, base = @base, scale = @scale, hc_mult = 2 : i64, sinkhorn_iters = 3 : i64, hc_eps = 1.0e-6, norm_eps = 1.0e-6} : (tensor<?x32xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
  return
}

// -----

smelt.weight @fn : tensor<6x32xf32> from "fn" file 0 offset 0
smelt.weight @base : tensor<8xf32> from "base" file 0 offset 0
smelt.weight @scale : tensor<3xf32> from "scale" file 0 offset 0
func.func @hc_mix_fn(%X: tensor<?x32xf32>) {
  // expected-error @below {{weight 'fn' @fn has shape [6,32] but this op needs [8,32]}}
  %pre, %post, %comb = smelt.hc_mix %X {fn = @fn, base = @base, scale = @scale, hc_mult = 2 : i64, sinkhorn_iters = 3 : i64, hc_eps = 1.0e-6, norm_eps = 1.0e-6} : (tensor<?x32xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x4xf32>)
  return
}

// -----

func.func @hc_expand_streams(%X: tensor<?x48xf32>, %y: tensor<?x16xf32>, %post: tensor<?x2xf32>, %comb: tensor<?x4xf32>) {
  // expected-error @below {{streams must have 32 columns, got 48}}
  %r = smelt.hc_expand %X, %y, %post, %comb {hc_mult = 2 : i64} : (tensor<?x48xf32>, tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x4xf32>) -> tensor<?x48xf32>
  return
}

// -----

func.func @window_only_with_pool(%q: tensor<?x32xf32>, %kv: tensor<?x16xf32>) {
  // expected-error @below {{a window-only attention (ratio 0) takes neither idx nor a pool}}
  %o = smelt.sparse_attention %q, %kv {sink = @s, window_ring = @w, pool = @p, heads = 2 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x32xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @attention_kv(%q: tensor<?x32xf32>, %kv: tensor<?x8xf32>) {
  // expected-error @below {{kv (head_dim) must have 16 columns, got 8}}
  %o = smelt.sparse_attention %q, %kv {sink = @s, window_ring = @w, heads = 2 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x32xf32>, tensor<?x8xf32>) -> tensor<?x32xf32>
  return
}

// -----

smelt.weight @sink : tensor<3xf32> from "sink" file 0 offset 0
func.func @attention_sink(%q: tensor<?x32xf32>, %kv: tensor<?x16xf32>) {
  // expected-error @below {{weight 'sink' @sink has shape [3] but this op needs [2]}}
  %o = smelt.sparse_attention %q, %kv {sink = @sink, window_ring = @w, heads = 2 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x32xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
  return
}

// -----

smelt.weight @wkv : tensor<16x32xf32> from "wkv" file 0 offset 0
func.func @compressor_overlap(%x: tensor<?x32xf32>) {
  // expected-error @below {{weight 'wkv' @wkv has shape [16,32] but this op needs [32,32]}}
  smelt.compressor %x {wkv = @wkv, wgate = @wkv, ape = @a, norm = @n, compressor_ring = @r, pool = @p, ratio = 4 : i64, head_dim = 16 : i64, overlap = 1 : i64, eps = 1.0e-6, rope_dim = 8 : i64, theta = 1.6e5, yarn_factor = 0.0, yarn_beta_fast = 0.0, yarn_beta_slow = 0.0, yarn_original_max_pos = 0 : i64} : (tensor<?x32xf32>) -> ()
  return
}

// -----

func.func @indexer_topk(%q: tensor<?x32xf32>, %w: tensor<?x4xf32>) {
  // expected-error @below {{idx (topk) must have 3 columns, got 2}}
  %i = smelt.indexer_topk %q, %w {index_pool = @p, heads = 4 : i64, head_dim = 8 : i64, ratio = 4 : i64, topk = 3 : i64} : (tensor<?x32xf32>, tensor<?x4xf32>) -> tensor<?x2xi32>
  return
}

// -----

func.func @route_scoring(%x: tensor<?x16xf32>) {
  // expected-error @below {{unknown scoring 'relu' (expected sqrtsoftplus, softmax or sigmoid)}}
  %w, %i = smelt.moe_route %x {gate = @g, topk = 2 : i64, scoring = "relu", norm_topk_prob = true, route_scale = 1.0} : (tensor<?x16xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return
}

// -----

func.func @route_hash_needs_ids(%x: tensor<?x16xf32>) {
  // expected-error @below {{hash routing needs both the ids operand and a tid2eid weight (or neither)}}
  %w, %i = smelt.moe_route %x {gate = @g, tid2eid = @t, topk = 2 : i64, scoring = "sqrtsoftplus", norm_topk_prob = true, route_scale = 1.0} : (tensor<?x16xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return
}

// -----

smelt.weight @g : tensor<4x16xf32> from "g" file 0 offset 0
smelt.weight @b : tensor<5xf32> from "b" file 0 offset 0
func.func @route_bias(%x: tensor<?x16xf32>) {
  // expected-error @below {{weight 'bias' @b has shape [5] but this op needs [4]}}
  %w, %i = smelt.moe_route %x {gate = @g, bias = @b, topk = 2 : i64, scoring = "sqrtsoftplus", norm_topk_prob = true, route_scale = 1.0} : (tensor<?x16xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return
}

// -----

func.func @experts_count(%x: tensor<?x16xf32>, %w: tensor<?x2xf32>, %i: tensor<?x2xi32>) {
  // expected-error @below {{expects 3 * n_experts = 6 expert weights (e0.w1, e0.w2, e0.w3, e1.w1, ...), got 3}}
  %y = smelt.moe_experts %x, %w, %i {experts = [@a, @b, @c], n_experts = 2 : i64, topk = 2 : i64, swiglu_limit = 10.0} : (tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2xi32>) -> tensor<?x16xf32>
  return
}

// -----

smelt.weight @w1 : tensor<20x16xf32> from "w1" file 0 offset 0
smelt.weight @w2 : tensor<16x20xf32> from "w2" file 0 offset 0
smelt.weight @w3 : tensor<21x16xf32> from "w3" file 0 offset 0
func.func @experts_shapes(%x: tensor<?x16xf32>, %w: tensor<?x1xf32>, %i: tensor<?x1xi32>) {
  // expected-error @below {{weight 'e0.w3' @w3 has shape [21,16] but this op needs [20,16]}}
  %y = smelt.moe_experts %x, %w, %i {experts = [@w1, @w2, @w3], n_experts = 1 : i64, topk = 1 : i64, swiglu_limit = 10.0} : (tensor<?x16xf32>, tensor<?x1xf32>, tensor<?x1xi32>) -> tensor<?x16xf32>
  return
}

// -----

// expected-error @below {{state @s has unknown kind 'ring' (expected window_ring, compressor_ring, compressed_pool, index_pool or engram_history)}}
smelt.state @s "ring" layer 0 : tensor<4x16xf32>

// -----

// expected-error @below {{weight @w needs a static shape}}
smelt.weight @w : tensor<?x16xf32> from "w" file 0 offset 0

// -----

func.func @add_shapes(%a: tensor<?x16xf32>, %b: tensor<?x8xf32>) {
  // expected-error @below {{b must have 16 columns, got 8}}
  %c = smelt.add %a, %b : (tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<?x16xf32>
  return
}
