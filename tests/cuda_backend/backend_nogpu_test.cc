// The cuda backend's start-up decisions, without a GPU: the missing-driver sentence, and which cubin arch a
// plan offers a GPU (or the one sentence refusing it), on a plan compiled for --target sm_80,sm_120.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "runtime/cuda/backend.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/kernel_args.h"
#include "runtime/cuda/launch.h"
#include "runtime/cuda/mma_split.h"
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

// A launcher that only records which kernels an op launches and whether by programmatic dependent launch, and
// (args) each launch's first `keep` arguments as their first 8 bytes.
struct RecordingLauncher : cuda::Launcher {
  std::vector<std::pair<std::string, bool>> launches;
  std::vector<std::vector<uint64_t>> args;
  int keep = 0;
  std::map<std::string, int> ew_arg;  // kernel name -> the index of its ExpertW argument, copied into ew
  std::vector<cuda::ExpertW> ew;      // per launch (zeros where the kernel is not in ew_arg)
  void launch(const cuda::OpLaunch&, const char* name, unsigned, unsigned, unsigned, unsigned, unsigned, void** a,
              bool programmatic) override {
    launches.emplace_back(name, programmatic);
    cuda::ExpertW e{};
    if (auto it = ew_arg.find(name); it != ew_arg.end()) std::memcpy(&e, a[it->second], sizeof(e));
    ew.push_back(e);
    std::vector<uint64_t> v;
    for (int i = 0; i < keep; ++i) {
      uint64_t x = 0;
      std::memcpy(&x, a[i], sizeof(x));
      v.push_back(x);
    }
    args.push_back(v);
  }
};

// An OpLaunch of op over `rows` rows with stand-in addresses: weight j at 0x100000 (j + 1), input i at
// 0x10000000 (i + 1), output i at 0x80000000 (i + 1), nothing dereferenced (the recording launcher runs nothing).
struct FakeLaunch {
  std::vector<cuda::DeviceWeight> w;
  cuda::OpLaunch l;
  FakeLaunch(const smelt::runtime::Plan& plan, const smelt::runtime::OpRef& op, int rows, cuda::Launcher& rec, int arch,
             int sms) : w(op.weights.size()) {
    for (size_t j = 0; j < w.size(); ++j) {
      const int id = op.weights[j];
      if (id < 0) {
        l.w.push_back(nullptr);
        continue;
      }
      w[j].id = id;
      w[j].ptr = 0x100000ull * (j + 1);
      w[j].dtype = plan.fb().weights()->Get(id)->dtype();
      w[j].shape = plan.weight_shape(id);
      l.w.push_back(&w[j]);
    }
    l.plan = &plan;
    l.op = &op;
    l.rows = rows;
    l.step = 0x1000;
    for (size_t i = 0; i < op.inputs.size() && i < 4; ++i)
      if (op.inputs[i] >= 0) l.in[i] = 0x10000000ull * (i + 1), l.in_w[i] = plan.row_elems(op.inputs[i]);
    for (size_t i = 0; i < op.outputs.size() && i < 3; ++i)
      if (op.outputs[i] >= 0) l.out[i] = 0x80000000ull * (i + 1), l.out_w[i] = plan.row_elems(op.outputs[i]);
    l.scratch = 0x300000000ull;
    l.backend = &rec;
    l.sms = sms;
    l.arch = arch;
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
  RecordingLauncher rec;
  FakeLaunch f(plan, *op, 1, rec, 80, 108);
  for (const auto* w : f.l.w) ASSERT_NE(w, nullptr);
  cuda::OpLaunch& l = f.l;
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

// The one-row FP8 wgmma linears' K split (runtime/cuda/mma_split.h) on the V4.1-Flash shapes (K x N) for an H200's 264
// block slots: one round of the grid, >= 8 blocks of 32 a segment, S = 1 or even (the kernel's two warpgroups a tile
// past S = 1), the zeroed memory only where blocks share a tile; and where the tiles fill the grid at S = 1 it stays.
TEST(CudaLaunchers, WgmmaLinearSplitsFillOneRound) {
  namespace rc = smelt::runtime::cuda;
  const int shapes[][2] = {{5120, 1280}, {1280, 32768}, {5120, 512}, {8192, 5120}, {1280, 4096}, {6144, 25600}};
  for (const auto& sh : shapes) {
    const int K = sh[0], N = sh[1], nb = K / 32;
    const int64_t tiles = rc::mma_wg_linear_tiles(N);
    const int S = rc::mma_wg_linear_ksplit(tiles, nb, 264);
    const std::string what = std::to_string(K) + " x " + std::to_string(N) + ", S " + std::to_string(S);
    EXPECT_TRUE(S == 1 || (S % 2 == 0 && S <= 8)) << what;
    EXPECT_LE(rc::mma_wg_linear_groups(tiles, S), 264) << what;
    if (S > 1) {
      EXPECT_GE(nb / S, 8) << what;
    }
    if (S > 1 && S < 8) {  // the next split would not fit in one round or would leave segments shorter than 8 blocks
      EXPECT_TRUE(tiles * (S + 2) / 2 > 264 || nb / (S + 2) < 8) << what;
    }
    EXPECT_EQ(rc::mma_wg_linear_zeroed_bytes(tiles, S) > 0, S > 2) << what;
  }
  EXPECT_EQ(rc::mma_wg_linear_ksplit(512, 40, 264), 1);  // wq_b: 256 blocks of two tiles
  EXPECT_EQ(rc::mma_wg_linear_ksplit(80, 256, 264), 6);  // wo_b: 240 blocks, three a tile
  EXPECT_EQ(rc::mma_wg_linear_ksplit(20, 160, 264), 8);  // wq_a: 80 blocks, four a tile (the cap)
}

#ifdef SMELT_CUDA_TEST_PLAN_V41
// Chunks of several rows (prefill, draft verification) on sm_89+ run the decode tensor-core kernels
// (runtime/cuda/ops.cc, docs/performance.md "Session 19"): an act-quant linear in groups of the most rows whose
// staging fits shared memory (ops_mma.cc linear_mma_rows; K = 256 here: 8), each group's x and y offset by its first
// row; the FP4 experts a row at a time, each row's x offset by the row. A row alone is one launch of the same
// kernel (on sm_90 the one-row wgmma kernel). smelt_gemv_fp8_mma's arguments: x, y, w, s, rows, ...; the experts' up:
// x, ...
TEST(CudaLaunchers, ChunksRunTheDecodeTensorCoreKernels) {
  smelt::runtime::Plan plan = smelt::runtime::Plan::load(SMELT_CUDA_TEST_PLAN_V41);
  const smelt::runtime::OpRef *lin = nullptr, *moe = nullptr;
  for (const auto& o : plan.ops()) {
    if (!lin && o.spec->kind == smelt::runtime::OpKind::Linear && o.attrs.count("act_quant")) lin = &o;
    if (!moe && o.spec->kind == smelt::runtime::OpKind::MoeExperts) moe = &o;
  }
  ASSERT_NE(lin, nullptr) << "the V4.1 tiny backbone has act-quant linears";
  ASSERT_NE(moe, nullptr) << "and routed experts";
  for (int arch : {89, 90}) {
    RecordingLauncher rec;
    rec.keep = 5;
    const int K = int(plan.row_elems(lin->inputs[0])), N = int(plan.row_elems(lin->outputs[0]));
    ASSERT_EQ(K % 32, 0);
    {
      FakeLaunch one(plan, *lin, 1, rec, arch, 132);
      cuda::run_op(one.l);
      ASSERT_EQ(rec.launches.size(), 1u);
      // one FP8 row on sm_90: the wgmma kernel (x, y, w, s, K, N, ...)
      const bool wg = arch == 90;
      EXPECT_EQ(rec.launches[0].first, wg ? "smelt_gemv_fp8_wgmma" : "smelt_gemv_fp8_mma");
      EXPECT_EQ(uint32_t(rec.args[0][4]), wg ? uint32_t(K) : 1u);
    }
    rec.launches.clear(), rec.args.clear();
    const int rows = 19;  // groups of 8, 8, 3
    FakeLaunch chunk(plan, *lin, rows, rec, arch, 132);
    cuda::run_op(chunk.l);
    ASSERT_EQ(rec.launches.size(), 3u) << "arch " << arch;
    const int want[3] = {8, 8, 3};
    for (int g = 0; g < 3; ++g) {
      EXPECT_EQ(rec.launches[size_t(g)].first, "smelt_gemv_fp8_mma");
      EXPECT_EQ(uint32_t(rec.args[size_t(g)][4]), uint32_t(want[g])) << "group " << g;
      EXPECT_EQ(rec.args[size_t(g)][0], chunk.l.in[0] + uint64_t(8 * g) * K * 4) << "group " << g << " x";
      EXPECT_EQ(rec.args[size_t(g)][1], chunk.l.out[0] + uint64_t(8 * g) * N * 4) << "group " << g << " y";
    }

    // The experts: the row kernels' up and down per row (wgmma on sm_90, mma.sync on sm_89), then one combine.
    const std::string up = arch == 90 ? "smelt_moe_up_fp4_wgmma" : "smelt_moe_up_fp4_mma";
    const std::string down = arch == 90 ? "smelt_moe_down_fp4_wgmma" : "smelt_moe_down_fp4_mma";
    const int D = int(plan.row_elems(moe->inputs[0]));
    for (int r : {1, 3}) {
      rec.launches.clear(), rec.args.clear();
      FakeLaunch ex(plan, *moe, r, rec, arch, 132);
      cuda::run_op(ex.l);
      std::vector<uint64_t> xs;
      int ups = 0, downs = 0, combines = 0;
      for (size_t k = 0; k < rec.launches.size(); ++k) {
        const std::string& n = rec.launches[k].first;
        if (n == up) ++ups, xs.push_back(rec.args[k][0]);
        if (n == down) ++downs;
        if (n == "smelt_moe_combine") ++combines;
      }
      EXPECT_EQ(ups, r) << "arch " << arch << ", rows " << r;
      EXPECT_EQ(downs, r) << "arch " << arch << ", rows " << r;
      EXPECT_EQ(combines, 1) << "arch " << arch << ", rows " << r;
      for (int i = 0; i < int(xs.size()); ++i) EXPECT_EQ(xs[size_t(i)], ex.l.in[0] + uint64_t(i) * D * 4) << "row " << i;
    }

    // The slot counters (kernels/moe/moe_mma.cu slot_count_group): with the op's zeroed memory every row's mma.sync up
    // and down get the same counters (the down of a row zeroes them before the next row's up counts), without it none;
    // the wgmma kernels none either way (ops_mma.cc uncounted_ew: slower there).
    rec.ew_arg = {{up, 7}, {down, 6}};
    for (int r : {1, 3})
      for (bool zeroed : {false, true}) {
        rec.launches.clear(), rec.args.clear(), rec.ew.clear();
        FakeLaunch ex(plan, *moe, r, rec, arch, 132);
        if (zeroed) ex.l.zeroed = 0x400000000ull, ex.l.zeroed_bytes = 1 << 20;
        cuda::run_op(ex.l);
        int counted = 0;
        for (size_t k = 0; k < rec.launches.size(); ++k) {
          if (!rec.ew_arg.count(rec.launches[k].first)) continue;
          EXPECT_EQ(rec.ew[k].slot_done, zeroed && arch != 90 ? ex.l.zeroed : 0)
              << rec.launches[k].first << ", rows " << r;
          ++counted;
        }
        EXPECT_EQ(counted, 2 * r) << "arch " << arch << ", rows " << r;
      }
    rec.ew_arg.clear();
  }
}

// The routed experts ask for their slot counters' zeroed memory when the plan is loaded (Prepare::zeroed_bytes: topk + 1
// words), the shared expert for none.
TEST(CudaLaunchers, RoutedExpertsAskForSlotCounters) {
  smelt::runtime::Plan plan = smelt::runtime::Plan::load(SMELT_CUDA_TEST_PLAN_V41);
  int routed = 0, shared = 0;
  for (const auto& o : plan.ops()) {
    const bool moe = o.spec->kind == smelt::runtime::OpKind::MoeExperts;
    if (!moe && o.spec->kind != smelt::runtime::OpKind::SwigluMlp) continue;
    cuda::Prepare p;
    cuda::prepare_op(plan, o, plan.max_rows(), p);
    if (moe) {
      EXPECT_EQ(p.zeroed_bytes, uint64_t(o.i("topk") + 1) * 4);
      ++routed;
    } else {
      EXPECT_EQ(p.zeroed_bytes, 0u);
      ++shared;
    }
  }
  EXPECT_GT(routed, 0);
  EXPECT_GT(shared, 0);
}
#endif

#if defined(SMELT_CUDA_TEST_PLAN_V41) && defined(SMELT_CUDA_TEST_PLAN_V41_FP32)
// Which layout each expert weight asks for at load (Prepare, backend.cc): with the model's numerics the act-quant
// kernels' (tile order on sm_89+); under --numerics fp32 the weight-only FP4 experts' tensor-core kernels' pair order
// (kernels/cuda/common.cuh fp4_pair_order), never also row-major for another reader. Pair order only where those
// kernels run (sm_80+).
TEST(CudaLaunchers, WeightOnlyFp4ExpertsAskForPairOrder) {
  EXPECT_TRUE(cuda::fp4_pair_order_on(80));
  EXPECT_TRUE(cuda::fp4_pair_order_on(120));
  EXPECT_FALSE(cuda::fp4_pair_order_on(75));
  for (const bool fp32 : {false, true}) {
    SCOPED_TRACE(fp32 ? "numerics fp32" : "model numerics");
    smelt::runtime::Plan plan = smelt::runtime::Plan::load(fp32 ? SMELT_CUDA_TEST_PLAN_V41_FP32 : SMELT_CUDA_TEST_PLAN_V41);
    std::vector<int> pairs, aq, wo, expert_w;
    for (const auto& o : plan.ops()) {
      cuda::Prepare p;
      cuda::prepare_op(plan, o, plan.max_rows(), p);
      pairs.insert(pairs.end(), p.fp4_pair_weights.begin(), p.fp4_pair_weights.end());
      aq.insert(aq.end(), p.act_quant_weights.begin(), p.act_quant_weights.end());
      wo.insert(wo.end(), p.weight_only_weights.begin(), p.weight_only_weights.end());
      if (o.spec->kind == smelt::runtime::OpKind::MoeExperts && plan.fb().weights()->Get(o.weights[0])->dtype() ==
                                                                      smelt::plan::DType::I8)
        for (size_t j = 0; j < o.weights.size(); ++j)
          if (j % 6 == 0 || j % 6 == 2 || j % 6 == 4) expert_w.push_back(o.weights[j]);
    }
    ASSERT_FALSE(expert_w.empty()) << "the plan has FP4 routed experts";
    auto has = [](const std::vector<int>& v, int id) { return std::find(v.begin(), v.end(), id) != v.end(); };
    for (int id : expert_w) {
      EXPECT_EQ(has(pairs, id), fp32) << plan.weight_name(id);
      EXPECT_EQ(has(aq, id), !fp32) << plan.weight_name(id);
      EXPECT_FALSE(has(wo, id)) << plan.weight_name(id);
    }
    if (!fp32) EXPECT_TRUE(pairs.empty());
  }
}
#endif
