// The cuda backend's start-up decisions, without a GPU: the missing-driver sentence, and which cubin arch a
// plan offers a GPU (or the one sentence refusing it), on a plan compiled for --target sm_80,sm_120.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/launch.h"
#include "runtime/cuda/nccl.h"
#include "runtime/inspect.h"

namespace cuda = smelt::runtime::cuda;

TEST(CudaDriver, MissingDriverIsOneSentence) {
  try {
    cuda::load_driver("libsmelt_no_such_driver.so.1");
    FAIL() << "expected an error";
  } catch (const smelt::Error& e) {
    EXPECT_STREQ(e.what(), "no CUDA driver found (libsmelt_no_such_driver.so.1): the cuda backend needs an NVIDIA GPU");
  }
}

TEST(Nccl, MissingLibraryIsOneSentence) {
  try {
    cuda::load_nccl("libsmelt_no_such_nccl.so.2");
    FAIL() << "expected an error";
  } catch (const smelt::Error& e) {
    EXPECT_STREQ(e.what(), "no NCCL found (libsmelt_no_such_nccl.so.2): partitioned plans on the cuda backend need it");
  }
}

// NCCL answers its version without a GPU: every symbol the backend binds is there (CUDA's copy, when installed).
TEST(Nccl, BindsEverySymbol) {
  const std::string lib = "/usr/local/cuda/lib64/libnccl.so.2";
  if (FILE* f = std::fopen(lib.c_str(), "rb")) {
    std::fclose(f);
  } else {
    GTEST_SKIP() << lib << " not installed";
  }
  const cuda::Nccl& n = cuda::load_nccl(lib);
  int version = 0;
  ASSERT_EQ(n.ncclGetVersion(&version), 0);
  EXPECT_GE(version, 21900);  // NCCL_VERSION_CODE of 2.19
  EXPECT_NE(std::string(n.ncclGetErrorString(1)), "");
}

// The collectives run through NCCL, so a cuda target accepts partitioned plans (smelt-select-kernels asks this).
TEST(Nccl, CollectivesHaveCudaLaunchers) {
  for (const char* op : {"smelt.all_reduce", "smelt.all_gather", "smelt.send", "smelt.recv"})
    EXPECT_TRUE(cuda::has_launcher(op)) << op;
}

#ifdef SMELT_CUDA_TEST_PLAN
TEST(CudaPlan, ArchChoiceAndRefusal) {
  smelt::runtime::Plan plan = smelt::runtime::Plan::load(SMELT_CUDA_TEST_PLAN);
  EXPECT_EQ(cuda::choose_arch(plan, "NVIDIA A100", 8, 0), "sm_80");
  EXPECT_EQ(cuda::choose_arch(plan, "NVIDIA A10", 8, 6), "sm_80");  // same major, newer minor: binary compatible
  EXPECT_EQ(cuda::choose_arch(plan, "NVIDIA RTX PRO 6000", 12, 0), "sm_120");
  try {
    cuda::choose_arch(plan, "NVIDIA H200", 9, 0);
    FAIL() << "expected an error";
  } catch (const smelt::Error& e) {
    EXPECT_EQ(std::string(e.what()), std::string(SMELT_CUDA_TEST_PLAN) +
                                         ": this plan has kernels for sm_80, sm_120; this GPU (NVIDIA H200) is sm_90: "
                                         "compile with --target sm_90 or h200");
  }
}

TEST(CudaPlan, InspectListsTheCubinsPerArch) {
  smelt::runtime::Plan plan = smelt::runtime::Plan::load(SMELT_CUDA_TEST_PLAN);
  auto j = smelt::runtime::inspect_json(plan);
  ASSERT_TRUE(j.contains("kernels"));
  for (const char* arch : {"sm_80", "sm_120", "compute_80", "compute_120"}) {
    ASSERT_TRUE(j["kernels"].contains(arch)) << arch;
    ASSERT_TRUE(j["kernels"][arch].contains("backend")) << arch;
    EXPECT_GT(j["kernels"][arch]["backend"].get<uint64_t>(), 1000u) << arch;
  }
  EXPECT_FALSE(j["kernels"].contains("sm_90"));
  EXPECT_EQ(j["kernels"]["sm_80"].size(), j["kernels"]["sm_120"].size());
  // Every op was given a cuda kernel.
  for (const auto& op : plan.ops()) {
    std::string k = plan.fb().ops()->Get(op.index)->kernel()->str();
    EXPECT_EQ(k.rfind("cuda.", 0), 0u) << op.where() << ": " << k;
  }
}
#endif

#ifdef SMELT_CUDA_TEST_PLAN
// The backend maps entry points to modules from the cubins' symbol tables, so it never asks a module for a
// name it lacks (compute-sanitizer counts such misses as errors).
TEST(CudaPlan, CubinSymbolTablesNameTheEntryPoints) {
  smelt::runtime::Plan plan = smelt::runtime::Plan::load(SMELT_CUDA_TEST_PLAN);
  int cubins = 0;
  for (const auto* k : *plan.fb().kernels()) {
    if (!k->format() || k->format()->str() != "cubin") continue;
    ++cubins;
    std::vector<uint8_t> image(k->image()->begin(), k->image()->end());
    std::vector<std::string> names = cuda::cubin_functions(image);
    const std::string family = k->name()->str();
    ASSERT_FALSE(names.empty()) << family << " " << k->arch()->str();
    auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
    if (family == "linear") {
      EXPECT_TRUE(has("smelt_linear_f32") && has("smelt_linear_fp8_aq") && has("smelt_act_quant_b32"));
      EXPECT_FALSE(has("smelt_rms_norm"));
    }
    if (family == "backend") {
      EXPECT_TRUE(has("smelt_round_bf16"));
    }
    if (family == "rms_norm") {
      EXPECT_TRUE(has("smelt_rms_norm") && !has("smelt_linear_f32"));
    }
    for (const std::string& n : names) EXPECT_EQ(n.rfind("smelt_", 0), 0u) << family << ": " << n;
  }
  EXPECT_GT(cubins, 10);
  EXPECT_TRUE(cuda::cubin_functions(std::vector<uint8_t>(100, 7)).empty());  // not an ELF
}
#endif

#ifdef SMELT_CUDA_TEST_PLAN
namespace {

// A launcher that only records which kernels an op launches and whether by programmatic dependent launch.
struct RecordingLauncher : cuda::Launcher {
  std::vector<std::pair<std::string, bool>> launches;
  void launch(const cuda::OpLaunch&, const char* name, unsigned, unsigned, unsigned, unsigned, unsigned, void**,
              bool programmatic) override {
    launches.emplace_back(name, programmatic);
  }
};

}  // namespace

// The shared expert (swiglu_mlp): on the main stream both its kernels may be launched early (programmatic dependent
// launch; its up loads weights before its wait); on the side stream its down is launched only once its up has
// finished, so that the down's waiting blocks do not hold the multiprocessor slots the routed experts are launched
// onto (runtime/cuda/ops.cc run_experts, docs/performance.md "Session 18").
TEST(CudaLaunchers, SideStreamSharedExpertDownWaitsForItsUp) {
  smelt::runtime::Plan plan = smelt::runtime::Plan::load(SMELT_CUDA_TEST_PLAN);
  const smelt::runtime::OpRef* op = nullptr;
  for (const auto& o : plan.ops())
    if (o.spec->kind == smelt::runtime::OpKind::SwigluMlp) {
      op = &o;
      break;
    }
  ASSERT_NE(op, nullptr) << "the tiny plan has a shared expert";
  std::vector<cuda::DeviceWeight> w(op->weights.size());
  cuda::OpLaunch l;
  for (size_t j = 0; j < w.size(); ++j) {
    const int id = op->weights[j];
    ASSERT_GE(id, 0);
    w[j].id = id;
    w[j].ptr = 0x100000ull * (j + 1);
    w[j].dtype = plan.fb().weights()->Get(id)->dtype();
    w[j].shape = plan.weight_shape(id);
    l.w.push_back(&w[j]);
  }
  RecordingLauncher rec;
  l.plan = &plan;
  l.op = op;
  l.rows = 1;
  l.step = 0x1000;
  l.in[0] = 0x10000000, l.in_w[0] = plan.row_elems(op->inputs[0]);
  l.out[0] = 0x20000000, l.out_w[0] = plan.row_elems(op->outputs[0]);
  l.scratch = 0x30000000;
  l.backend = &rec;
  l.sms = 108;
  l.arch = 80;
  cuda::run_op(l);
  ASSERT_GE(rec.launches.size(), 2u);
  for (const auto& [name, programmatic] : rec.launches) EXPECT_TRUE(programmatic) << "main stream: " << name;
  const size_t n = rec.launches.size();
  rec.launches.clear();
  l.side = true;
  cuda::run_op(l);
  ASSERT_EQ(rec.launches.size(), n);
  EXPECT_TRUE(rec.launches[0].second) << rec.launches[0].first;
  for (size_t k = 1; k < n; ++k) EXPECT_FALSE(rec.launches[k].second) << "side stream: " << rec.launches[k].first;
}
#endif
