// smelt-verify on V4.1 modules: a layer may read an earlier KV source's pool (CSA2 sharing), but not a later
// one's, and writers own their state.
// RUN: smelt-opt %s -split-input-file -verify-diagnostics --smelt-verify | FileCheck %s

// CHECK-LABEL: module attributes {smelt.max_seq_len = 32 : i64, smelt.passes = ["smelt-verify"]}
// CHECK: smelt.kv_compressor
module attributes {smelt.max_seq_len = 32 : i64} {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @wkv : tensor<16x16xf32> from "wkv" file 0 offset 0
  smelt.weight @norm : tensor<16xf32> from "norm" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "sink" file 0 offset 0
  smelt.state @pool0 "compressed_pool" layer 0 : tensor<32x16xf32>
  smelt.state @w0 "window_ring" layer 0 : tensor<4x16xf32>
  smelt.state @w1 "window_ring" layer 1 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    smelt.kv_compressor %x {layer = 0 : i64, wkv = @wkv, norm = @norm, pool = @pool0, ratio = 1 : i64, head_dim = 16 : i64, index_head_dim = 0 : i64, rope_dim = 4 : i64, theta = 1.6e5, yarn_factor = 0.0, yarn_beta_fast = 32.0, yarn_beta_slow = 1.0, yarn_original_max_pos = 65536 : i64, eps = 1.0e-20} : (tensor<?x16xf32>) -> ()
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @w0, pool = @pool0, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 1 : i64, scale = 0.25, numerics = "v41"} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @w0, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    %p = smelt.sparse_attention %o, %x {layer = 1 : i64, sink = @sink, window_ring = @w1, pool = @pool0, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 1 : i64, scale = 0.25, numerics = "v41"} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 1 : i64, window_ring = @w1, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %p : tensor<?x16xf32>
  }
}

// -----

module attributes {smelt.max_seq_len = 32 : i64} {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @wkv : tensor<16x16xf32> from "wkv" file 0 offset 0
  smelt.weight @norm : tensor<16xf32> from "norm" file 0 offset 0
  smelt.weight @sink : tensor<1xf32> from "sink" file 0 offset 0
  smelt.state @pool1 "compressed_pool" layer 1 : tensor<32x16xf32>
  smelt.state @w0 "window_ring" layer 0 : tensor<4x16xf32>
  smelt.state @w1 "window_ring" layer 1 : tensor<4x16xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{uses state @pool1 of layer 1 from layer 0}}
    smelt.kv_compressor %x {layer = 0 : i64, wkv = @wkv, norm = @norm, pool = @pool1, ratio = 1 : i64, head_dim = 16 : i64, index_head_dim = 0 : i64, rope_dim = 4 : i64, theta = 1.6e5, yarn_factor = 0.0, yarn_beta_fast = 32.0, yarn_beta_slow = 1.0, yarn_original_max_pos = 65536 : i64, eps = 1.0e-20} : (tensor<?x16xf32>) -> ()
    // expected-error @below {{uses state @pool1 of layer 1 from layer 0}}
    %o = smelt.sparse_attention %x, %x {layer = 0 : i64, sink = @sink, window_ring = @w0, pool = @pool1, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 1 : i64, scale = 0.25, numerics = "v41"} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 0 : i64, window_ring = @w0, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    %p = smelt.sparse_attention %o, %x {layer = 1 : i64, sink = @sink, window_ring = @w1, pool = @pool1, heads = 1 : i64, head_dim = 16 : i64, window = 4 : i64, ratio = 1 : i64, scale = 0.25, numerics = "v41"} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    smelt.window_kv_update %x {layer = 1 : i64, window_ring = @w1, window = 4 : i64} : (tensor<?x16xf32>) -> ()
    return %p : tensor<?x16xf32>
  }
}

// -----

module {
  smelt.weight @embed : tensor<8x16xf32> from "embed.weight" file 0 offset 0
  smelt.weight @map : tensor<8xf32> from "map" file 0 offset 0
  smelt.state @h "engram_history" layer 0 : tensor<3x1xf32>
  func.func @forward(%ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
    %x = smelt.embedding %ids {embed = @embed} : (tensor<?x1xi32>) -> tensor<?x16xf32>
    // expected-error @below {{weight 'token_map' @map has element type 'f32'; expected an integer (i32 / i64) type}}
    %h = smelt.engram_hash %ids {token_map = @map, history = @h, layers = array<i64: 1>, vocab = 13 : i64, heads = 1 : i64, max_ngram = 3 : i64, compressed_vocab = 8 : i64, pad_id = 2 : i64} : (tensor<?x1xi32>) -> tensor<?x2xi32>
    return %x : tensor<?x16xf32>
  }
}
