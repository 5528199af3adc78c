// Custom assembly of the module-level symbols: weights (stored type, source name, file, offset, optional
// transform) and states (kind, layer, f32 type).
// RUN: smelt-opt %s | smelt-opt | FileCheck %s

// CHECK: smelt.weight @layers.0.attn.wq_a.weight : tensor<24x32xbf16> from "model.layers.0.self_attn.q_a_proj.weight" file 1 offset 4096{{$}}
smelt.weight @"layers.0.attn.wq_a.weight" : tensor<24x32xbf16> from "model.layers.0.self_attn.q_a_proj.weight" file 1 offset 4096
// CHECK: smelt.weight @w8 : tensor<6x8xf8E4M3FN> from "w8" file 0 offset 64 transform "rows(0:4,zero:2)" {source_shape = array<i64: 4, 8>}
smelt.weight @w8 : tensor<6x8xf8E4M3FN> from "w8" file 0 offset 64 transform "rows(0:4,zero:2)" {source_shape = array<i64: 4, 8>}
// CHECK: smelt.weight @t : tensor<64x6xi64> from "t" file 0 offset 128{{$}}
smelt.weight @t : tensor<64x6xi64> from "t" file 0 offset 128 transform ""
// CHECK: smelt.state @layers.3.index_pool "index_pool" layer 3 : tensor<1024x128xf32>
smelt.state @layers.3.index_pool "index_pool" layer 3 : tensor<1024x128xf32>
