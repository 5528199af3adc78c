// smelt-verify: whole-module checks. The first module is valid; each later one breaks one rule.
// RUN: smelt-opt %s -split-input-file -verify-diagnostics --smelt-verify | FileCheck %s

// CHECK-LABEL: module attributes {smelt.passes = ["smelt-verify"]}
// CHECK: smelt.sparse_attention
module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "layers.0.attn.attn_sink" file 0 offset 512
  smelt.weight @head : tensor<8x16xf32> from "head.weight" file 0 offset 516
  smelt.state @window "window_ring" layer 0 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x8xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @window, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    %l = smelt.linear %o {weight = @head} : (tensor<?x16xf32>) -> tensor<?x8xf32>
    return %l : tensor<?x8xf32>
  }
}

// -----

// expected-error @below {{smelt-verify: the module has no func.func @forward}}
module {
  func.func @main() {
    return
  }
}

// -----

module {
  // expected-error @below {{@forward must have the type (tensor<?x1xi32>) -> tensor<?xVxf32>}}
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x1xi32> {
    return %ids : tensor<?x1xi32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.state @window "window_ring" layer 0 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{weight 'sink' refers to @missing, which is not defined in the module}}
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @missing, window_ring = @window, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %o : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.state @window "window_ring" layer 0 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{weight 'sink' refers to @window, which is a smelt.state, not a smelt.weight}}
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @window, window_ring = @window, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %o : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "layers.0.attn.attn_sink" file 0 offset 512
  smelt.state @window "index_pool" layer 0 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{state 'window_ring' @window has kind index_pool; expected window_ring}}
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @window, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    // expected-error @below {{state 'window_ring' @window has kind index_pool; expected window_ring}}
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %o : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "layers.0.attn.attn_sink" file 0 offset 512
  smelt.state @window "window_ring" layer 0 : tensor<5x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{state 'window_ring' @window has shape [5,16] but this op needs [4,16]}}
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @window, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    // expected-error @below {{state 'window_ring' @window has shape [5,16] but this op needs [4,16]}}
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %o : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "layers.0.attn.attn_sink" file 0 offset 512
  smelt.state @window "window_ring" layer 0 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{updates the window ring before the layer's sparse_attention reads it}}
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @window, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %o : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "layers.0.attn.attn_sink" file 0 offset 512
  // expected-error @below {{state @window is never written (no compressor / window_kv_update)}}
  smelt.state @window "window_ring" layer 0 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{layer 0 never updates its window ring (no smelt.window_kv_update)}}
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @window, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %o : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "layers.0.attn.attn_sink" file 0 offset 512
  smelt.state @window "window_ring" layer 0 : tensor<4x16xf32>
  // expected-error @below {{state @pool is never written}}
  smelt.state @pool "compressed_pool" layer 0 : tensor<16x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{reads state @pool before any compressor in this layer writes it}}
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @window, pool = @pool, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 8 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %o : tensor<?x16xf32>
  }
}

// -----

module {
  // expected-warning @below {{weight @spare is never used}}
  smelt.weight @spare : tensor<4xf32> from "spare" file 0 offset 0
  smelt.weight @embed : tensor<8x16xi32> from "embed.weight" file 0 offset 0
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    // expected-error @below {{weight 'embed' @embed has element type 'i32'; expected a float type}}
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    return %x : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "layers.0.attn.attn_sink" file 0 offset 512
  smelt.state @window0 "window_ring" layer 0 : tensor<4x16xf32>
  smelt.state @window1 "window_ring" layer 1 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    %o = smelt.sparse_attention %x, %x {layer = 1 : i64, sink = @sink, window_ring = @window1, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 1 : i64, window_ring = @window1, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    // expected-error @below {{of layer 0 is out of order}}
    %p = smelt.sparse_attention %o, %x {layer = 0 : i64, sink = @sink, window_ring = @window0, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 0 : i64, scale = 0.25} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    // expected-error @below {{of layer 0 is out of order}}
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @window0, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %p : tensor<?x16xf32>
  }
}
