// Weight transforms (docs/plan.md) and the collectives of partitioned modules (docs/ops.md, Collectives).
// RUN: smelt-opt %s -split-input-file -verify-diagnostics

// expected-error @below {{weight @w transform 'rows(0:4,zero:2)' turns the stored shape [4,8] into [6,8], not [5,8]}}
smelt.weight @w : tensor<5x8xf32> from "w" file 0 offset 0 transform "rows(0:4,zero:2)" {source_shape = array<i64: 4, 8>}

// -----

// expected-error @below {{range 2:9 exceeds the 8 columns of its input}}
smelt.weight @w : tensor<4x7xf32> from "w" file 0 offset 0 transform "cols(2:9)" {source_shape = array<i64: 4, 8>}

// -----

// expected-error @below {{step 'dequant(fp8)' is not rows(...) or cols(...)}}
smelt.weight @w : tensor<4x8xf32> from "w" file 0 offset 0 transform "dequant(fp8)"

// -----

// expected-error @below {{cols(...) needs a 2-D tensor}}
smelt.weight @w : tensor<4xf32> from "w" file 0 offset 0 transform "cols(0:4)" {source_shape = array<i64: 4>}

// -----

// expected-error @below {{range '3:3' is empty or reversed}}
smelt.weight @w : tensor<0x8xf32> from "w" file 0 offset 0 transform "rows(3:3)" {source_shape = array<i64: 4, 8>}

// -----

// Steps apply left to right, each to the result of the previous one.
smelt.weight @ok : tensor<3x2xf32> from "w" file 0 offset 0 transform "rows(0:4,zero:2);rows(3:6);cols(6:8)" {source_shape = array<i64: 4, 8>}

// -----

func.func @group(%x: tensor<?x16xf32>) {
  // expected-error @below {{group lists rank 1 twice}}
  %y = smelt.all_reduce %x {group = array<i64: 1, 1>} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @reduce_width(%x: tensor<?x16xf32>) {
  // expected-error @below {{result (same as x) must have 16 columns, got 8}}
  %y = smelt.all_reduce %x {group = array<i64: 0, 1>} : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return
}

// -----

// A zero-width shard joins the all_reduce without an input.
func.func @reduce_zeros() {
  %y = smelt.all_reduce {group = array<i64: 0, 1>} : () -> tensor<?x8xf32>
  return
}

// -----

func.func @gather(%x: tensor<?x16xf32>) {
  // expected-error @below {{result (the widths summed) must have 28 columns, got 32}}
  %y = smelt.all_gather %x {group = array<i64: 0, 1>, widths = array<i64: 16, 12>} : (tensor<?x16xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @gather_own(%x: tensor<?x16xf32>) attributes {smelt.rank = {index = 1 : i64}} {
  // expected-error @below {{x (this member's width) must have 12 columns, got 16}}
  %y = smelt.all_gather %x {group = array<i64: 0, 1>, widths = array<i64: 16, 12>} : (tensor<?x16xf32>) -> tensor<?x28xf32>
  return
}

// -----

func.func @send_self(%x: tensor<?x16xf32>) attributes {smelt.rank = {index = 2 : i64}} {
  // expected-error @below {{sends to its own rank 2}}
  smelt.send %x {peer = 2 : i64, tag = 0 : i64} : (tensor<?x16xf32>) -> ()
  return
}

// -----

func.func @recv_tag() {
  // expected-error @below {{peer and tag must be >= 0}}
  %y = smelt.recv {peer = 0 : i64, tag = -1 : i64} : () -> tensor<?x16xf32>
  return
}
