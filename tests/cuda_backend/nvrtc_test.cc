// smelt_nvrtc without a GPU: a trivial kernel compiles for every production arch (cubins are ELF, PTX names
// its target), the on-disk cache is hit the second time, every embedded kernel family compiles for sm_90, and
// errors are one line naming the file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "compiler/cuda/nvrtc.h"
#include "frontends/error.h"

namespace cc = smelt::cuda_compile;
namespace fs = std::filesystem;

namespace {

// No toolkit headers: kernels are self-contained CUDA C++.
const cc::KernelSource kTrivial{"smelt_test", "tests/cuda_backend/trivial.cu", R"(
extern "C" __global__ void smelt_test_axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)"};

class NvrtcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cc::available()) GTEST_SKIP() << "built without the CUDA toolkit";
    dir_ = fs::temp_directory_path() / ("smelt_nvrtc_cache_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    setenv("SMELT_KERNEL_CACHE", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
    unsetenv("SMELT_KERNEL_CACHE");
  }
  fs::path dir_;
};

bool is_elf(const std::vector<uint8_t>& b) { return b.size() > 64 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F'; }

}  // namespace

TEST_F(NvrtcTest, TrivialKernelForEveryArch) {
  for (const char* arch : {"sm_80", "sm_90", "sm_120"}) {
    cc::Image img = cc::compile(kTrivial, arch);
    EXPECT_EQ(img.arch, arch);
    EXPECT_EQ(img.format, "cubin");
    EXPECT_TRUE(is_elf(img.bytes)) << arch;
  }
  cc::Image ptx = cc::compile(kTrivial, "compute_120");
  EXPECT_EQ(ptx.format, "ptx");
  std::string text(ptx.bytes.begin(), ptx.bytes.end());
  EXPECT_NE(text.find(".target sm_120"), std::string::npos);
  EXPECT_NE(text.find("smelt_test_axpy"), std::string::npos);
}

TEST_F(NvrtcTest, SecondCompileHitsTheCache) {
  cc::Image first = cc::compile(kTrivial, "sm_90");
  ASSERT_TRUE(is_elf(first.bytes));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir_)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  // Replace the cached cubin with a marker: a cache hit returns the marker, a recompile would not.
  std::string marker = "\x7f" "ELF smelt cache marker";
  { std::ofstream(files[0], std::ios::binary | std::ios::trunc) << marker; }
  cc::Image second = cc::compile(kTrivial, "sm_90");
  EXPECT_EQ(std::string(second.bytes.begin(), second.bytes.end()), marker);
  EXPECT_EQ(second.source_hash, first.source_hash);
  // A different arch or extra option is a different key: compiled afresh.
  EXPECT_TRUE(is_elf(cc::compile(kTrivial, "sm_80").bytes));
  cc::Image opt = cc::compile(kTrivial, "sm_90", {"-DSMELT_TEST_OPTION=1"});
  EXPECT_NE(std::string(opt.bytes.begin(), opt.bytes.end()), marker);
  // A changed source is a different key too.
  cc::KernelSource edited = kTrivial;
  edited.text += "\n// edited\n";
  cc::Image fresh = cc::compile(edited, "sm_90");
  EXPECT_TRUE(is_elf(fresh.bytes));
  EXPECT_NE(fresh.source_hash, first.source_hash);
}

TEST_F(NvrtcTest, ErrorsAreOneLineNamingTheFile) {
  cc::KernelSource bad{"smelt_test", "tests/cuda_backend/bad.cu", "extern \"C\" __global__ void k() { undeclared(); }\n"};
  try {
    cc::compile(bad, "sm_90");
    FAIL() << "expected an error";
  } catch (const smelt::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tests/cuda_backend/bad.cu"), std::string::npos) << m;
    EXPECT_NE(m.find("undeclared"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_THROW(cc::compile(kTrivial, "sm90"), smelt::Error);
  EXPECT_THROW(cc::kernel_source("no_such_family"), smelt::Error);
}

// Every kernels/<family>/*.cu of the tree compiles with NVRTC and no toolkit headers.
TEST_F(NvrtcTest, EveryEmbeddedFamilyCompiles) {
  for (const auto& src : cc::kernel_sources()) {
    const cc::KernelSource& module = cc::kernel_source(src.family);
    SCOPED_TRACE(module.file);
    EXPECT_TRUE(is_elf(cc::compile(module, "sm_90").bytes));
  }
}
