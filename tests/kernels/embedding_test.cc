#include "kernels/embedding/reference.h"

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

TEST(Embedding, CopiesTheRowOfEachId) {
  Rng rng(1);
  const int vocab = 11, dim = 7;
  Vec table = rng.normal(size_t(vocab) * dim);
  const std::vector<int32_t> ids = {3, 0, 10, 3};
  Vec out(ids.size() * dim, -1.0f);
  embedding(ids.data(), int(ids.size()), table.data(), vocab, dim, out.data());
  for (size_t r = 0; r < ids.size(); ++r)
    for (int d = 0; d < dim; ++d) EXPECT_EQ(out[r * dim + d], table[size_t(ids[r]) * dim + d]) << r << "," << d;
}

}  // namespace
}  // namespace smelt::kernels
