// The cuda backend's own kernels (runtime/cuda/backend.cc), not tied to any op: synthetic weights for
// `--synthetic-weights SEED` and the `round = "bf16"` attribute every op may carry. No toolkit headers.

#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

// splitmix64 of (seed, index): a counter-based generator, so every element is independent of the launch shape.
__device__ __forceinline__ u64 smelt_mix(u64 seed, u64 i) {
  u64 z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-amp, amp) (amp = 0.02 * sqrt(3): standard deviation 0.02, like an initialised model).
__device__ __forceinline__ float smelt_uniform(u64 seed, u64 i, float amp) {
  float u = float(smelt_mix(seed, i) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f) * amp;
}

extern "C" __global__ void smelt_synth_f32(float* p, u64 n, u64 seed, float amp) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    p[i] = smelt_uniform(seed, i, amp);
}

// bf16 = the top 16 bits of the float (the values are exact multiples well inside bf16's range).
extern "C" __global__ void smelt_synth_bf16(unsigned short* p, u64 n, u64 seed, float amp) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    float f = smelt_uniform(seed, i, amp);
    p[i] = (unsigned short)(__float_as_uint(f) >> 16);
  }
}

// Raw bytes: E4M3 codes with exponent field <= 7 (|x| < 2, never NaN), E8M0 scales in [lo, hi] (127 = 2^0),
// packed FP4 (every nibble is a valid E2M1 code).
extern "C" __global__ void smelt_synth_e4m3(unsigned char* p, u64 n, u64 seed) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    u32 r = (u32)smelt_mix(seed, i);
    p[i] = (unsigned char)((r & 0x80u) | (((r >> 8) & 7u) << 3) | ((r >> 16) & 7u));
  }
}

extern "C" __global__ void smelt_synth_e8m0(unsigned char* p, u64 n, u64 seed, u32 lo, u32 hi) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    p[i] = (unsigned char)(lo + (u32)(smelt_mix(seed, i) % (u64)(hi - lo + 1)));
}

extern "C" __global__ void smelt_synth_bytes(unsigned char* p, u64 n, u64 seed) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    p[i] = (unsigned char)smelt_mix(seed, i);
}

// Integers uniform in [0, range) (range 0: zeros), e.g. a hash-routing table tid2eid.
extern "C" __global__ void smelt_synth_i32(int* p, u64 n, u64 seed, u32 range) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    p[i] = range ? (int)(smelt_mix(seed, i) % range) : 0;
}

// x <- bf16(x), round to nearest even; NaN stays NaN (what kernels/bf16.h does on the cpu).
extern "C" __global__ void smelt_round_bf16(float* x, u64 n) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    u32 u = __float_as_uint(x[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      x[i] = __uint_as_float((u | 0x00400000u) & 0xffff0000u);
      continue;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    x[i] = __uint_as_float(u & 0xffff0000u);
  }
}

// Busy-waits `ns` nanoseconds of GPU time (the global timer): `smelt-run bench` holds the stream with it while the
// host queues a profiled step, so the per-kernel events measure GPU time, not launch gaps.
extern "C" __global__ void smelt_spin_ns(u64 ns) {
  SMELT_KERNEL_PROLOGUE();
  u64 t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Row-major quantized weights -> tile order (tile_order_off), 16 bytes a thread: `rows` rows of RB bytes (RB % 16 ==
// 0), matrices of N rows one after another (experts stacked), BB bytes a 32-block (32 FP8, 16 FP4). src != dst.
extern "C" __global__ void smelt_tile_weight(const uint4* src, uint4* dst, u64 rows, u64 N, u64 RB, u32 BB) {
  SMELT_KERNEL_PROLOGUE();
  const u64 cpr = RB / 16, chunks = rows * cpr;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < chunks; i += (u64)gridDim.x * blockDim.x) {
    const u64 row = i / cpr, c = (i - row * cpr) * 16;
    const u64 m = row / N, n = row - m * N;
    const u64 off = m * N * RB + (u64)tile_order_off((i64)n, (i64)(c / BB), (i64)N, (i64)RB, (i64)BB) + c % BB;
    dst[off / 16] = src[i];
  }
}

// Packed FP4 codes, row-major -> pair order (kernels/cuda/common.cuh fp4_pair_order), in place, a 32-bit word a
// thread: the weight-only tensor-core experts' layout (runtime/cuda/device_weights.cc).
extern "C" __global__ void smelt_fp4_pair_order(u32* w, u64 words) {
  SMELT_KERNEL_PROLOGUE();
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x)
    w[i] = fp4_pair_order(w[i]);
}
