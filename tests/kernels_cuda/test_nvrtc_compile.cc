// CI (no GPU needed): every kernel family compiles with NVRTC for every arch a plan may target, and entry
// point names are unique across families (the backend looks kernels up by name in all of the plan's modules).
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "compiler/cuda/nvrtc.h"

namespace {

using smelt::cuda_compile::kernel_source;
using smelt::cuda_compile::kernel_sources;

std::set<std::string> families() {
  std::set<std::string> f;
  for (const auto& s : kernel_sources()) f.insert(s.family);
  return f;
}

TEST(KernelsNvrtc, EveryFamilyCompilesForEveryArch) {
  if (!smelt::cuda_compile::available()) GTEST_SKIP() << "built without NVRTC";
  ASSERT_FALSE(families().empty());
  for (const std::string& fam : families())
    for (const char* arch : {"sm_80", "sm_90", "sm_120"}) {
      smelt::cuda_compile::Image img;
      ASSERT_NO_THROW(img = smelt::cuda_compile::compile(kernel_source(fam), arch)) << fam << " " << arch;
      EXPECT_GT(img.bytes.size(), 64u) << fam << " " << arch;
      EXPECT_EQ(img.format, "cubin");
    }
}

// The backend launches with programmatic dependent launch on sm_90+: a kernel may be scheduled before the previous
// one has finished, so each entry point's first statement must be SMELT_KERNEL_PROLOGUE() (its griddepcontrol.wait
// comes before any global memory access). A kernel without it could read its inputs before they are written.
TEST(KernelsNvrtc, EveryEntryPointStartsWithTheDependentLaunchPrologue) {
  const std::regex entry(R"(extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)[\s\\]*)?(smelt_[A-Za-z0-9_#]+)\([^{]*\{[\s\\]*([A-Za-z_]*))");
  int n = 0, entries = 0;
  for (const auto& s : kernel_sources()) {
    for (size_t at = s.text.find("extern \"C\" __global__"); at != std::string::npos;
         at = s.text.find("extern \"C\" __global__", at + 1))
      ++entries;
    for (std::sregex_iterator it(s.text.begin(), s.text.end(), entry), end; it != end; ++it, ++n)
      if ((*it)[2].str() == "SMELT_KERNEL_PROLOGUE_WEIGHTS_FIRST")  // reads weights, then waits in its body
        EXPECT_NE(s.text.find("grid_dep_wait();"), std::string::npos) << (*it)[1] << " (" << s.family << ")";
      else if ((*it)[2].str() == "SMELT_KERNEL_PROLOGUE_IN_BODY")  // waits and launches in its body
        EXPECT_TRUE(s.text.find("grid_dep_wait();") != std::string::npos &&
                    s.text.find("grid_dep_launch();") != std::string::npos)
            << (*it)[1] << " (" << s.family << ")";
      else
        EXPECT_EQ((*it)[2].str(), "SMELT_KERNEL_PROLOGUE") << (*it)[1] << " (" << s.family << ")";
  }
  EXPECT_EQ(n, entries) << "entry points the check could not parse";
  EXPECT_GT(n, 60);
}

TEST(KernelsNvrtc, PtxForTheOldestArch) {
  if (!smelt::cuda_compile::available()) GTEST_SKIP() << "built without NVRTC";
  for (const std::string& fam : families()) EXPECT_NO_THROW(smelt::cuda_compile::compile(kernel_source(fam), "compute_80")) << fam;
}

TEST(KernelsNvrtc, EntryPointsAreUniqueAndNamedByFamily) {
  std::map<std::string, std::string> seen;  // entry point -> family
  const std::regex entry(R"(extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)[\s\\]*)?(smelt_[a-z0-9_]+)\()");
  for (const auto& s : kernel_sources())
    for (std::sregex_iterator it(s.text.begin(), s.text.end(), entry), end; it != end; ++it) {
      const std::string name = (*it)[1];
      auto [at, fresh] = seen.emplace(name, s.family);
      EXPECT_TRUE(fresh) << name << " is defined by " << at->second << " and " << s.family;
    }
  // The families the launchers use, each with its main entry point.
  for (const char* name : {"smelt_linear_bf16", "smelt_linear_fp8_r1", "smelt_linear_fp8_aq", "smelt_linear_fp4_aq", "smelt_act_quant_b32",
                           "smelt_rms_norm", "smelt_rope", "smelt_hc_mix_logits", "smelt_hc_sinkhorn", "smelt_hc_sinkhorn_warp",
                           "smelt_sparse_attention", "smelt_window_kv_update", "smelt_compressor_emit",
                           "smelt_kv_compressor_emit", "smelt_indexer_topk", "smelt_moe_route", "smelt_moe_combine",
                           "smelt_fake_quant", "smelt_engram_hash", "smelt_engram_gate", "smelt_engram_gate_wide", "smelt_dspark_pick",
                           "smelt_embedding", "smelt_add", "smelt_write_u64", "smelt_sample_argmax",
                           "smelt_sample_weights", "smelt_sample_pick"})
    EXPECT_TRUE(seen.count(name)) << name;
}

}  // namespace
