// Rig helpers (compiler/rig.h) against hand-computed values: ranks on GPUs, per-rank archs, memory-proportional
// shares, the headroom arithmetic and the byte formatting used in the refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "compiler/rig.h"
#include "frontends/error.h"

namespace smelt {
namespace {

cuda_compile::Target rig_file(const std::string& json) {
  std::string path = (std::filesystem::temp_directory_path() / ("smelt_rig_test_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path) << json;
  cuda_compile::Target t = cuda_compile::parse_target(path);
  std::filesystem::remove(path);
  return t;
}

const char* kMixed = R"({"name": "m", "gpus": [{"arch": "sm_80", "memory_gb": 80, "count": 4},
                                               {"arch": "sm_120", "memory_gb": 96}]})";

TEST(Rig, RanksMapToGpusInOrder) {
  cuda_compile::Target t = rig_file(kMixed);
  EXPECT_EQ(rig::rank_gpus(t, 5, 1), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(rig::rank_gpus(t, 2, 2), (std::vector<int>{0, 1, 2, 3}));  // GPU 4 unused
  EXPECT_EQ(rig::rank_archs(t, rig::rank_gpus(t, 5, 1)), "sm_80,sm_80,sm_80,sm_80,sm_120");
  try {
    rig::rank_gpus(t, 3, 2);
    FAIL() << "a rig of 5 GPUs took 6 ranks";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--target m: the rig has 5 GPU(s), but --tp 3 --pp 2 needs 6 (one per rank)");
  }
}

TEST(Rig, BuiltInAndArchListTargets) {
  cuda_compile::Target h200 = cuda_compile::parse_target("h200");
  EXPECT_EQ(rig::rank_gpus(h200, 2, 2), (std::vector<int>{0, 0, 0, 0}));  // every rank on an H200
  EXPECT_EQ(rig::rank_archs(h200, rig::rank_gpus(h200, 2, 1)), "sm_90,sm_90");
  cuda_compile::Target list = cuda_compile::parse_target("sm_120,sm_80");
  EXPECT_TRUE(rig::rank_gpus(list, 4, 1).empty());  // no GPU per rank: no memory check
  EXPECT_EQ(rig::rank_archs(list, {}), "sm_80+sm_120");
  EXPECT_TRUE(rig::rank_gpus(cuda_compile::parse_target("cpu"), 2, 1).empty());
  EXPECT_EQ(rig::rank_archs(cuda_compile::parse_target("cpu"), {}), "");
}

TEST(Rig, SharesFollowMemoryWhenAGroupDiffers) {
  cuda_compile::Target t = rig_file(kMixed);
  EXPECT_EQ(rig::memory_shares(t, rig::rank_gpus(t, 5, 1), 5, 1), "5,5,5,5,6");  // 80:96
  EXPECT_EQ(rig::memory_shares(t, rig::rank_gpus(t, 4, 1), 4, 1), "");          // four equal cards: even
  EXPECT_EQ(rig::memory_shares(t, rig::rank_gpus(t, 1, 5), 1, 5), "");          // no TP
  // TP2 x PP2 on 80, 80 | 80, 96: the stages differ, so one share per rank; 80:96 = 5:6, 80:80 = 5:5.
  cuda_compile::Target u = rig_file(R"({"gpus": [{"arch": "sm_80", "memory_gb": 80, "count": 3},
                                                 {"arch": "sm_120", "memory_gb": 96}]})");
  EXPECT_EQ(rig::memory_shares(u, rig::rank_gpus(u, 2, 2), 2, 2), "5,5,5,6");
}

TEST(Rig, HeadroomIsFivePercentAndOneGiB) {
  cuda_compile::Target t = rig_file(kMixed);
  EXPECT_EQ(rig::headroom(t, 64000000000ull), 3200000000ull + 1073741824ull);
  EXPECT_EQ(rig::available(t, 64000000000ull), 64000000000ull - 3200000000ull - 1073741824ull);
  EXPECT_EQ(rig::available(t, 1000000ull), 0u);  // smaller than the headroom
  cuda_compile::Target z = rig_file(R"({"headroom_fraction": 0, "headroom_gb": 0.5,
                                        "gpus": [{"arch": "sm_80", "memory_gb": 2}]})");
  EXPECT_EQ(rig::available(z, 2000000000ull), 1500000000ull);
  EXPECT_THROW(rig_file(R"({"headroom_fraction": 1, "gpus": [{"arch": "sm_80", "memory_gb": 2}]})"), Error);
}

TEST(Rig, Text) {
  EXPECT_EQ(rig::bytes_text(59726258176ull), "59.73 GB");
  EXPECT_EQ(rig::bytes_text(41200000ull), "41.2 MB");
  EXPECT_EQ(rig::bytes_text(300000ull), "300.0 kB");
  EXPECT_EQ(rig::bytes_text(0), "0 B");
  rig::RankMemory r;
  r.weights = 2000000000ull, r.states = 1500000, r.arena = 2500, r.kernels = 0;
  EXPECT_EQ(r.total(), 2001502500ull);
  EXPECT_EQ(rig::breakdown(r), "weights 2.00 GB + states 1.5 MB + arena 2.5 kB + kernels 0 B");
  cuda_compile::Target t = rig_file(R"({"gpus": [{"arch": "sm_120", "memory_gb": 96, "name": "RTX"}]})");
  EXPECT_EQ(rig::gpu_text(t, 0), "GPU 0 (RTX, sm_120, 96.00 GB)");
}

}  // namespace
}  // namespace smelt
