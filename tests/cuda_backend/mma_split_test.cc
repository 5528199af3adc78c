// The tensor-core GEMVs' K splits (runtime/cuda/mma_split.h): the cluster rule on the V4.1-Flash decode shapes of an
// H200 (132 multiprocessors, 2 blocks each: 264), worked out by hand from the rule's text, and its invariants over a
// sweep of shapes. The GPU tests run the kernels with these splits (CudaMmaKernels.*Clusters*).
#include "runtime/cuda/mma_split.h"

#include <gtest/gtest.h>

namespace {

using smelt::runtime::cuda::mma_cluster_split;
using smelt::runtime::cuda::mma_groups;
using smelt::runtime::cuda::mma_ksplit;

struct Case {
  const char* what;
  int64_t tiles;
  int nb, S, C;
};

TEST(MmaSplit, ClusterRuleOnTheV41FlashShapes) {
  const Case cases[] = {
      {"wq_a 5120 -> 1280: 80 tiles (S 8 C 3 ties S 4 C 6: the larger S)", 80, 160, 8, 3},
      {"wkv 5120 -> 512: 32 tiles, C 5 keeps 4 blocks a segment", 32, 160, 8, 5},
      {"wo_b 8192 -> 5120: 320 tiles, S 8 would need 320 blocks", 320, 256, 2, 3},
      {"wq_b 1280 -> 32768: 2048 tiles fill the grid at S 1", 2048, 40, 1, 1},
      {"shared expert up 5120 -> 2304", 144, 160, 2, 7},
      {"shared expert down 2304 -> 5120 (32-row tiles)", 160, 72, 4, 3},
  };
  for (const Case& c : cases) {
    const auto sp = mma_cluster_split(c.tiles, c.nb, 264);
    EXPECT_EQ(sp.S, c.S) << c.what;
    EXPECT_EQ(sp.C, c.C) << c.what;
  }
}

TEST(MmaSplit, ClusterRuleKeepsOneRoundAndFourBlocksASegment) {
  for (unsigned blocks : {2u, 168u, 264u})
    for (int64_t tiles = 1; tiles <= 4096; tiles += tiles < 64 ? 1 : 37)
      for (int nb : {1, 3, 8, 32, 40, 72, 160, 256}) {
        const auto sp = mma_cluster_split(tiles, nb, blocks);
        const int S0 = mma_ksplit(tiles, nb, blocks);
        ASSERT_TRUE(sp.S == 1 || sp.S == 2 || sp.S == 4 || sp.S == 8);
        ASSERT_GE(sp.C, 1);
        ASSERT_LE(sp.C, 8);
        ASSERT_GE(sp.S * sp.C, S0) << "never fewer segments than the one-round rule";
        if (sp.C > 1) {
          ASSERT_LE(mma_groups(tiles, sp.S) * sp.C, int64_t(blocks)) << tiles << " " << nb;
          ASSERT_GE(nb / (sp.S * sp.C), 4) << tiles << " " << nb;
        } else {
          ASSERT_EQ(sp.S, S0) << "without a cluster, the one-round rule";
        }
      }
}

}  // namespace
