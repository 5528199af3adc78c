// Token embedding lookup. Reference (cpu backend) implementation.
#pragma once
#include <cstdint>

namespace smelt::kernels {

// out[r, :] = table[ids[r], :]. Ids outside [0, vocab) are a caller error (checked by the runtime).
void embedding(const int32_t* ids, int rows, const float* table, int64_t vocab, int dim, float* out);

}  // namespace smelt::kernels
