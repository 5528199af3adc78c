#include "kernels/embedding/reference.h"

#include <cstring>

namespace smelt::kernels {

void embedding(const int32_t* ids, int rows, const float* table, int64_t vocab, int dim, float* out) {
  for (int r = 0; r < rows; ++r)
    std::memcpy(out + int64_t(r) * dim, table + int64_t(ids[r]) * dim, sizeof(float) * size_t(dim));
}

}  // namespace smelt::kernels
