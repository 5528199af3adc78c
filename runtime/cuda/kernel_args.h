// Host mirrors of the structs the kernels take by value (kernels/attention/attention.cu AttnArgs, kernels/moe/moe.cu
// ExpertW, the rope / compressor kernels' InvFreq): one definition for the launchers and the GPU kernel tests, laid
// out field for field as the device side (pointers as 64-bit device addresses). Header-only, no CUDA headers.
#pragma once
#include <cstdint>

namespace smelt::runtime::cuda {

using DevPtr = unsigned long long;  // CUdeviceptr (as runtime/cuda/launch.h)

struct AttnArgs {
  DevPtr q, chunk_kv, idx;
  int32_t k;
  DevPtr sink;
  int32_t sink_dt;
  DevPtr ring;
  int32_t R, window, ratio;
  DevPtr pool;
  int64_t pool_rows;
  int32_t hd;
  float scale;
  int32_t v41, rb, dspark;
};

// Expert weights: base + e * stride per tensor kind (w1, s1, w2, s2, w3, s3), or a device table of addresses.
struct ExpertW {
  uint64_t base[6];
  int64_t stride[6];
  DevPtr table;
  // kernels/moe/moe_mma.cu's slot counters ([topk + 1] u32 of the op's zeroed memory) or 0: the routed up counts its
  // finished tiles a slot, and the down, launched early, waits for its slots' counts instead of the whole up grid.
  DevPtr slot_done = 0;
};

// RoPE inverse frequencies by value.
struct InvFreq {
  float v[256] = {};
};

// kernels/attention/attention_decode.cu AttnTail: the window KV update and inverse rope the decode merge runs.
struct AttnTail {
  DevPtr kv = 0, ring = 0;
  int32_t R = 0, kv_hd = 0;
  DevPtr y = 0;
  int32_t rope_dim = 0, inverse = 0, rround = 0;
};
static_assert(sizeof(AttnTail) == 48, "AttnTail: the kernel's layout");

}  // namespace smelt::runtime::cuda
