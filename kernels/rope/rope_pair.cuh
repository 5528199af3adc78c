// The rotation of one interleaved RoPE pair, shared by the rope kernels (rope.cu) and the decode attention's merge,
// which applies the layer's inverse rope to its output in the same launch (attention_decode.cu): every rotated pair
// gets exactly these operations wherever it is computed.
#pragma once
#include "kernels/cuda/common.cuh"

namespace smelt_dev {

// Inverse frequencies by value (runtime/cuda/kernel_args.h InvFreq, computed on the host as the cpu backend does).
struct InvFreq {
  float v[256];  // rope_dim / 2 <= 256
};

// (a, b) rotated by inv_freq * pos (the negative angle when inverse) into v[0], v[1], rounded to bf16 when R.
template <bool R>
__device__ __forceinline__ void rope_pair(float a, float b, float inv_freq, float pos, int inverse, float* v) {
  const float angle = __fmul_rn(inv_freq, pos);
  float sn, cs;
  sincosf(angle, &sn, &cs);
  if (inverse) sn = -sn;
  const float o0 = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn)), o1 = __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
  v[0] = R ? round_bf16(o0) : o0;
  v[1] = R ? round_bf16(o1) : o1;
}

}  // namespace smelt_dev
