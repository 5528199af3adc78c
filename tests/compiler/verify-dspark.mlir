// The DSpark ops' verifiers (local shapes, weight shapes) and smelt-verify on a module with @dspark_draft: a
// stage's ring is written by @forward and read by the drafter only; the drafter writes no state.
// RUN: smelt-opt %s -split-input-file -verify-diagnostics --smelt-verify

func.func @concat_width(%a: tensor<?x4xf32>, %b: tensor<?x6xf32>) {
  // expected-error @below {{result (the inputs' columns summed) must have 10 columns, got 9}}
  %y = smelt.concat %a, %b : (tensor<?x4xf32>, tensor<?x6xf32>) -> tensor<?x9xf32>
  return
}

// -----

func.func @concat_arity(%a: tensor<?x4xf32>) {
  // expected-error @below {{takes 2 to 4 inputs, got 1}}
  %y = smelt.concat %a : (tensor<?x4xf32>) -> tensor<?x4xf32>
  return
}

// -----

smelt.weight @sink : tensor<2xf32> from "sink" file 0 offset 0
smelt.state @ring "window_ring" layer 0 : tensor<4x16xf32>
func.func @attention_kv_width(%q: tensor<?x32xf32>, %kv: tensor<?x8xf32>) {
  // expected-error @below {{kv (head_dim) must have 16 columns, got 8}}
  %o = smelt.dspark_attention %q, %kv {sink = @sink, window_ring = @ring, heads = 2 : i64, head_dim = 16 : i64, window = 4 : i64, scale = 0.25} : (tensor<?x32xf32>, tensor<?x8xf32>) -> tensor<?x32xf32>
  return
}

// -----

smelt.weight @sink : tensor<3xf32> from "sink" file 0 offset 0
smelt.state @ring "window_ring" layer 0 : tensor<4x16xf32>
func.func @attention_sink(%q: tensor<?x32xf32>, %kv: tensor<?x16xf32>) {
  // expected-error @below {{weight 'sink' @sink has shape [3] but this op needs [2]}}
  %o = smelt.dspark_attention %q, %kv {sink = @sink, window_ring = @ring, heads = 2 : i64, head_dim = 16 : i64, window = 4 : i64, scale = 0.25} : (tensor<?x32xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
  return
}

// -----

smelt.weight @me : tensor<10x4xf32> from "me" file 0 offset 0
smelt.weight @mh : tensor<10x4xf32> from "mh" file 0 offset 0
smelt.weight @proj : tensor<1x12xf32> from "proj" file 0 offset 0
func.func @head_proj(%l: tensor<?x10xf32>, %x: tensor<?x6xf32>, %ids: tensor<?x1xi32>) {
  // expected-error @below {{weight 'proj' @proj has shape [1,12] but this op needs [1,10]}}
  %b, %d, %c = smelt.dspark_head %l, %x, %ids {markov_embed = @me, markov_head = @mh, proj = @proj} : (tensor<?x10xf32>, tensor<?x6xf32>, tensor<?x1xi32>) -> (tensor<?x10xf32>, tensor<?x1xi32>, tensor<?x1xf32>)
  return
}

// -----

smelt.weight @me : tensor<9x4xf32> from "me" file 0 offset 0
smelt.weight @mh : tensor<10x4xf32> from "mh" file 0 offset 0
smelt.weight @proj : tensor<1x10xf32> from "proj" file 0 offset 0
func.func @head_vocab(%l: tensor<?x10xf32>, %x: tensor<?x6xf32>, %ids: tensor<?x1xi32>) {
  // expected-error @below {{weight 'markov_embed' @me has shape [9,4] but this op needs [10,?]}}
  %b, %d, %c = smelt.dspark_head %l, %x, %ids {markov_embed = @me, markov_head = @mh, proj = @proj} : (tensor<?x10xf32>, tensor<?x6xf32>, tensor<?x1xi32>) -> (tensor<?x10xf32>, tensor<?x1xi32>, tensor<?x1xf32>)
  return
}

// -----

// The drafter may not write state.
module attributes {smelt.max_seq_len = 32 : i64} {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "sink" file 0 offset 0
  smelt.weight @me : tensor<8x4xf32> from "me" file 0 offset 0
  smelt.weight @mh : tensor<8x4xf32> from "mh" file 0 offset 0
  smelt.weight @proj : tensor<1x20xf32> from "proj" file 0 offset 0
  smelt.state @w0 "window_ring" layer 0 : tensor<4x16xf32>
  smelt.state @d1 "window_ring" layer 1 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @w0, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @w0, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    smelt.window_kv_update %o {layer = 1 : i64, window_ring = @d1, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %o : tensor<?x16xf32>
  }
  func.func @dspark_draft(%ids: tensor<?x1xi32>) -> (tensor<?x1xi32>, tensor<?x1xf32>, tensor<?x8xf32>) {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    %o = smelt.dspark_attention %x, %x {layer = 1 : i64, sink = @sink, window_ring = @d1, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    // expected-error @below {{writes state; @dspark_draft only reads what @forward wrote}}
    smelt.window_kv_update %o {layer = 1 : i64, window_ring = @d1, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    %l = smelt.concat %o, %o : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
    %lg = smelt.hc_mean %l {hc_mult = 4 : i64} : (tensor<?x32xf32>) -> tensor<?x8xf32>
    %b, %d, %c = smelt.dspark_head %lg, %o, %ids {markov_embed = @me, markov_head = @mh, proj = @proj} : (tensor<?x8xf32>, tensor<?x16xf32>, tensor<?x1xi32>) -> (tensor<?x8xf32>, tensor<?x1xi32>, tensor<?x1xf32>)
    return %d, %c, %b : tensor<?x1xi32>, tensor<?x1xf32>, tensor<?x8xf32>
  }
}

// -----

// The drafter's attention belongs in @dspark_draft, and only @forward and @dspark_draft are entry points.
module attributes {smelt.max_seq_len = 32 : i64} {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "sink" file 0 offset 0
  smelt.state @w0 "window_ring" layer 0 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @w0, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    // expected-error @below {{belongs in @dspark_draft, not @forward}}
    %o = smelt.dspark_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @w0, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %o : tensor<?x16xf32>
  }
  // expected-error @below {{is an unknown entry point (expected @forward and optionally @dspark_draft)}}
  func.func @speculate(%ids: tensor<?x1xi32>) -> tensor<?x1xi32> {
    return %ids : tensor<?x1xi32>
  }
}
