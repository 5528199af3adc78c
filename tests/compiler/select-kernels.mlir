// smelt-select-kernels: cpu.<op> on every compute op for the cpu target, cuda.<op> for a GPU target (every op
// here has a cuda launcher); unknown targets and missing rig files are refused.
// RUN: smelt-opt %s --smelt-select-kernels | FileCheck %s
// RUN: smelt-opt %s --smelt-select-kernels=target=cpu | FileCheck %s
// RUN: smelt-opt %s --smelt-select-kernels=target=h200 | FileCheck %s --check-prefix=CUDA
// RUN: smelt-opt %s --smelt-select-kernels=target=sm_80+sm_120 | FileCheck %s --check-prefix=CUDA
// RUN: not smelt-opt %s --smelt-select-kernels=target=no-such-rig.json 2>&1 | FileCheck %s --check-prefix=RIG
// RUN: not smelt-opt %s --smelt-select-kernels=target=tpu 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// CHECK: module attributes {smelt.passes = ["smelt-select-kernels{target=cpu}"]}
// CHECK: smelt.weight @head
// CHECK-NOT: kernel
// CHECK: smelt.embedding {{.*}}kernel = "cpu.embedding"
// CHECK: smelt.sparse_attention {{.*}}kernel = "cpu.sparse_attention"
// CHECK: smelt.window_kv_update {{.*}}kernel = "cpu.window_kv_update"
// CHECK: smelt.linear {{.*}}kernel = "cpu.linear"
// CUDA: smelt.embedding {{.*}}kernel = "cuda.embedding"
// CUDA: smelt.sparse_attention {{.*}}kernel = "cuda.sparse_attention"
// CUDA: smelt.window_kv_update {{.*}}kernel = "cuda.window_kv_update"
// CUDA: smelt.linear {{.*}}kernel = "cuda.linear"
// RIG: error: smelt-select-kernels: no-such-rig.json: cannot read the rig file
// UNKNOWN: error: smelt-select-kernels: --target tpu: unknown target (expected cpu, h200, a list of archs such as sm_80,sm_120, or a rig FILE.json)
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
