// smelt-plan-memory: live ranges in program order, first fit, 64-byte aligned buffers of max-rows rows.
// RUN: smelt-opt %s -split-input-file '--smelt-plan-memory=max-rows=2 side-live=none' | FileCheck %s
// RUN: smelt-opt %s -split-input-file --smelt-plan-memory=max-rows=2 | FileCheck %s --check-prefix=DEFAULT
// RUN: not smelt-opt %s -split-input-file --smelt-plan-memory=max-rows=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: smelt-opt %s -split-input-file '--smelt-plan-memory=max-rows=2 side-live=all' | FileCheck %s --check-prefix=ALL
// RUN: smelt-opt %s -split-input-file '--smelt-plan-memory=max-rows=2 side-live=results' | FileCheck %s --check-prefix=RESULTS
// RUN: not smelt-opt %s -split-input-file '--smelt-plan-memory=max-rows=2 side-live=some' 2>&1 | FileCheck %s --check-prefix=BAD

// Worked by hand (op index: 0 embedding, 1 attention, 2 window update, 3 linear, 4 return):
//   ids  64 B (2 x 1 x 4, aligned), live [-1, 0] -> 0
//   %x  128 B, live [0, 2]: overlaps ids            -> 64
//   %o  128 B, live [1, 3]: overlaps %x [64, 192)    -> 192 (0..128 would overlap %x)
//   %l   64 B, live [3, 4]: overlaps only %o          -> 0
// CHECK-LABEL: module attributes {smelt.arena_bytes = 320 : i64, smelt.max_rows = 2 : i64, smelt.passes = ["smelt-plan-memory{max-rows=2 seam-live=true side-live=none}"]}
// CHECK: func.func @forward(%{{.*}}: tensor<?x1xi32> {smelt.offset = 0 : i64})
// CHECK: smelt.embedding {{.*}}offsets = array<i64: 64>
// CHECK: smelt.sparse_attention {{.*}}offsets = array<i64: 192>
// CHECK: smelt.window_kv_update
// CHECK-NOT: offsets
// CHECK: smelt.linear {{.*}}offsets = array<i64: 0>
// ZERO: error: smelt-plan-memory: max-rows must be positive, got 0
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

// An op's outputs never share memory with each other or with its inputs, even where the inputs die:
//   %X  2 x 32 x 4 = 256 B, live [-1, 1] -> 0
//   %pre, %post, %comb 64 B each (aligned), all defined at 0 -> 256, 320, 384; %post and %comb are
//   never used, so they are dead after op 0
//   %u  2 x 16 x 4 = 128 B, live [1, 2]: overlaps %X and %pre (closed ranges), not %post / %comb -> 320
// CHECK-LABEL: module attributes {smelt.arena_bytes = 448 : i64
// CHECK: func.func @forward(%{{.*}}: tensor<?x32xf32> {smelt.offset = 0 : i64})
// CHECK: smelt.hc_mix {{.*}}offsets = array<i64: 256, 320, 384>
// CHECK: smelt.hc_collapse {{.*}}offsets = array<i64: 320>
module {
  smelt.weight @fn : tensor<8x32xf32> from "fn" file 0 offset 0
  smelt.weight @base : tensor<8xf32> from "base" file 0 offset 0
  smelt.weight @scale : tensor<3xf32> from "scale" file 0 offset 0
  func.func @forward(%X: tensor<?x32xf32>) -> tensor<?x16xf32> {
    %pre, %post, %comb = smelt.hc_mix %X {fn = @fn, base = @base, scale = @scale, hc_mult = 2 : i64, sinkhorn_iters = 3 : i64, hc_eps = 1.0e-6, norm_eps = 1.0e-6} : (tensor<?x32xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x4xf32>)
    %u = smelt.hc_collapse %X, %pre {hc_mult = 2 : i64} : (tensor<?x32xf32>, tensor<?x2xf32>) -> tensor<?x16xf32>
    return %u : tensor<?x16xf32>
  }
}

// -----

// A side-stream op (stream = 1) runs beside the main ops after it until the first main op that reads a result of it
// or of a later side op (the add, op 4). side-live=results keeps what it writes live until then, all also what it
// reads (results is the default), none neither. Ops: 0 %s (side), 1 %a, 2 %t (side, reads %s), 3 %b, 4 %c = add, 5 return;
// 128 B each.
//   none:    %x [-1, 1] -> 0; %s [0, 2] -> 128; %a [1, 3] -> 256; %t [2, 4] -> 0; %b [3, 4] takes %s's bytes, 128,
//            while the side stream may still read them (the runtime then holds %b back); %c [4, 5] -> 256 (arena 384)
//   results: %s extended to 4, so %b -> 384 (arena 512)
//   all:     %x extended to 4 too, so %t -> 384 and %b -> 512 (arena 640)
// CHECK-LABEL: module attributes {smelt.arena_bytes = 384 : i64
// CHECK: func.func @forward(%{{.*}}: tensor<?x16xf32> {smelt.offset = 0 : i64})
// CHECK-NEXT: smelt.linear {{.*}}offsets = array<i64: 128>, stream = 1 : i64
// CHECK-NEXT: smelt.linear {{.*}}offsets = array<i64: 256>,
// CHECK-NEXT: smelt.linear {{.*}}offsets = array<i64: 0>, stream = 1 : i64
// CHECK-NEXT: smelt.linear {{.*}}offsets = array<i64: 128>,
// CHECK-NEXT: smelt.add {{.*}}offsets = array<i64: 256>
// DEFAULT: smelt.passes = ["smelt-plan-memory{max-rows=2 seam-live=true side-live=results}"]
// RESULTS-LABEL: module attributes {smelt.arena_bytes = 512 : i64
// RESULTS: smelt.linear {{.*}}offsets = array<i64: 0>, stream = 1 : i64
// RESULTS-NEXT: smelt.linear {{.*}}offsets = array<i64: 384>,
// RESULTS-NEXT: smelt.add {{.*}}offsets = array<i64: 256>
// ALL-LABEL: module attributes {smelt.arena_bytes = 640 : i64
// ALL: smelt.linear {{.*}}offsets = array<i64: 384>, stream = 1 : i64
// ALL-NEXT: smelt.linear {{.*}}offsets = array<i64: 512>,
// BAD: error: smelt-plan-memory: side-live must be all, results or none, got 'some'
module {
  smelt.weight @w : tensor<16x16xf32> from "w" file 0 offset 0
  func.func @forward(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
    %s = smelt.linear %x {weight = @w, stream = 1 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %a = smelt.linear %x {weight = @w} : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %t = smelt.linear %s {weight = @w, stream = 1 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %b = smelt.linear %a {weight = @w} : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %c = smelt.add %b, %t : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    return %c : tensor<?x16xf32>
  }
}
