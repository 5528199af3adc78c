// smelt.embedding: out[r, :] = table[ids[r], :] (table F32 / BF16 / F16). An id outside [0, vocab) gives a
// zero row (the device cannot throw; the cpu backend reports it). grid (ceil(D/256), rows), block 256.
#include "kernels/cuda/common.cuh"

using namespace smelt_dev;

extern "C" __global__ void smelt_embedding(const i32* ids, const void* table, int dt, i64 vocab, int D, float* out) {
  SMELT_KERNEL_PROLOGUE();
  const i64 r = blockIdx.y;
  const i64 id = ids[r];
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  out[r * D + d] = (id >= 0 && id < vocab) ? ldw(table, id * D + d, dt) : 0.f;
}
