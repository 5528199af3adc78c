#include "tests/kernels_cuda/harness.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "compiler/cuda/nvrtc.h"
#include "runtime/cuda/driver.h"
#include "frontends/error.h"

namespace smelt::test_cuda {

namespace {

using CUresult = int;
struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int*, int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGetAttribute)(int*, int, int);
  CUresult (*cuDevicePrimaryCtxRetain)(void**, int);
  CUresult (*cuDevicePrimaryCtxRelease)(int);
  CUresult (*cuCtxSetCurrent)(void*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(DevPtr*, size_t);
  CUresult (*cuMemFree)(DevPtr);
  CUresult (*cuMemsetD8)(DevPtr, unsigned char, size_t);
  CUresult (*cuMemcpyHtoD)(DevPtr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, DevPtr, size_t);
  CUresult (*cuModuleLoadData)(void**, const void*);
  CUresult (*cuModuleGetFunction)(void**, void*, const char*);
  CUresult (*cuLaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**);
  CUresult (*cuFuncSetAttribute)(void*, int, int);
  CUresult (*cuMemcpyDtoD)(DevPtr, DevPtr, size_t);
  CUresult (*cuEventCreate)(void**, unsigned);
  CUresult (*cuEventRecord)(void*, void*);
  CUresult (*cuEventSynchronize)(void*);
  CUresult (*cuEventElapsedTime)(float*, void*, void*);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, void*, int, size_t);
  CUresult (*cuLaunchKernelEx)(const runtime::cuda::LaunchConfig*, void*, void**, void**);  // optional
};
Api api;

void check(CUresult r, const std::string& what) {
  if (r != 0) throw Error("cuda test harness: " + what + " failed with CUresult " + std::to_string(r));
}

template <class F>
void sym(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) throw Error(std::string("cuda test harness: libcuda has no ") + name);
}

}  // namespace

Gpu::Gpu() {
  lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) return;
  sym(lib_, api.cuInit, "cuInit");
  sym(lib_, api.cuDeviceGet, "cuDeviceGet");
  sym(lib_, api.cuDeviceGetCount, "cuDeviceGetCount");
  sym(lib_, api.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  sym(lib_, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  sym(lib_, api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  sym(lib_, api.cuCtxSetCurrent, "cuCtxSetCurrent");
  sym(lib_, api.cuCtxSynchronize, "cuCtxSynchronize");
  sym(lib_, api.cuMemAlloc, "cuMemAlloc_v2");
  sym(lib_, api.cuMemFree, "cuMemFree_v2");
  sym(lib_, api.cuMemsetD8, "cuMemsetD8_v2");
  sym(lib_, api.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  sym(lib_, api.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  sym(lib_, api.cuModuleLoadData, "cuModuleLoadData");
  sym(lib_, api.cuModuleGetFunction, "cuModuleGetFunction");
  sym(lib_, api.cuLaunchKernel, "cuLaunchKernel");
  sym(lib_, api.cuFuncSetAttribute, "cuFuncSetAttribute");
  sym(lib_, api.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  sym(lib_, api.cuEventCreate, "cuEventCreate");
  sym(lib_, api.cuEventRecord, "cuEventRecord");
  sym(lib_, api.cuEventSynchronize, "cuEventSynchronize");
  sym(lib_, api.cuEventElapsedTime, "cuEventElapsedTime_v2");
  sym(lib_, api.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  api.cuLaunchKernelEx = reinterpret_cast<decltype(api.cuLaunchKernelEx)>(dlsym(lib_, "cuLaunchKernelEx"));
  int n = 0;
  if (api.cuInit(0) != 0 || api.cuDeviceGetCount(&n) != 0 || n < 1) return;
  check(api.cuDeviceGet(&dev_, 0), "cuDeviceGet");
  int major = 0, minor = 0;
  check(api.cuDeviceGetAttribute(&major, 75, dev_), "compute capability");  // CU_DEVICE_ATTRIBUTE_..._MAJOR
  check(api.cuDeviceGetAttribute(&minor, 76, dev_), "compute capability");
  arch_ = "sm_" + std::to_string(major * 10 + minor);
  check(api.cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
  check(api.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  ok_ = true;
}

Gpu::~Gpu() {
  if (!ok_) return;
  for (DevPtr p : allocs_) api.cuMemFree(p);
  api.cuDevicePrimaryCtxRelease(dev_);
}

DevPtr Gpu::alloc(size_t bytes) {
  DevPtr p = 0;
  check(api.cuMemAlloc(&p, bytes ? bytes : 16), "cuMemAlloc");
  check(api.cuMemsetD8(p, 0, bytes ? bytes : 16), "cuMemsetD8");
  allocs_.push_back(p);
  return p;
}

void Gpu::upload(DevPtr dst, const void* src, size_t bytes) { check(api.cuMemcpyHtoD(dst, src, bytes), "upload"); }

// SMELT_TEST_NVRTC_OPTIONS (space-separated, e.g. "-DSMELT_MMA_TPW=2"): the kernels' plan-time knobs under test.
static const std::vector<std::string>& test_nvrtc_options() {
  static const std::vector<std::string> opts = [] {
    std::vector<std::string> v;
    if (const char* o = std::getenv("SMELT_TEST_NVRTC_OPTIONS")) {
      std::istringstream in(o);
      for (std::string t; in >> t;) v.push_back(t);
    }
    return v;
  }();
  return opts;
}

bool Gpu::aq_weights_tiled() const {
  const auto& o = test_nvrtc_options();
  if (std::find(o.begin(), o.end(), "-DSMELT_W_TILED=0") != o.end()) return false;
  return std::atoi(arch_.c_str() + 3) >= 89;
}

DevPtr Gpu::put_aq(const std::vector<uint8_t>& w, int64_t N, int64_t RB, bool fp4) {
  return put(aq_weights_tiled() ? tile_order(w, N, RB, fp4 ? 16 : 32) : w);
}
void Gpu::download(void* dst, DevPtr src, size_t bytes) { check(api.cuMemcpyDtoH(dst, src, bytes), "download"); }

void* Gpu::function(const std::string& family, const char* name, unsigned shmem) {
  auto it = modules_.find(family);
  if (it == modules_.end()) {
    cuda_compile::Image img = cuda_compile::compile(cuda_compile::kernel_source(family), arch_, test_nvrtc_options());
    void* m = nullptr;
    check(api.cuModuleLoadData(&m, img.bytes.data()), "loading the " + family + " module");
    it = modules_.emplace(family, m).first;
  }
  void* f = nullptr;
  check(api.cuModuleGetFunction(&f, it->second, name), std::string("finding ") + name);
  // Past 48 KB of dynamic shared memory a kernel must opt in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8).
  if (shmem > 48 * 1024) check(api.cuFuncSetAttribute(f, 8, int(shmem)), std::string("raising the shared memory of ") + name);
  return f;
}

void Gpu::launch_raw(const std::string& family, const char* name, unsigned gx, unsigned gy, unsigned gz,
                     unsigned block, unsigned shmem, void** args) {
  void* f = function(family, name, shmem);
  if (pdl_) {
    runtime::cuda::LaunchAttribute attr{};
    attr.id = runtime::cuda::kLaunchAttrProgrammaticStreamSerialization;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const runtime::cuda::LaunchConfig cfg{gx, gy, gz, block, 1, 1, shmem, nullptr, &attr, 1};
    check(api.cuLaunchKernelEx(&cfg, f, args, nullptr), std::string("launching ") + name);
  } else {
    check(api.cuLaunchKernel(f, gx, gy, gz, block, 1, 1, shmem, nullptr, args, nullptr), std::string("launching ") + name);
  }
  if (sync_) check(api.cuCtxSynchronize(), std::string("running ") + name);
}

void Gpu::load_image(const std::string& family, const std::vector<uint8_t>& image) {
  void* m = nullptr;
  check(api.cuModuleLoadData(&m, image.data()), "loading the " + family + " image");
  modules_[family] = m;
}

bool Gpu::set_pdl(bool pdl) {
  pdl_ = pdl && api.cuLaunchKernelEx && std::atoi(arch_.c_str() + 3) >= 90;
  return pdl_ == pdl;
}

void Gpu::synchronize() { check(api.cuCtxSynchronize(), "synchronising"); }

void Gpu::copy(DevPtr dst, DevPtr src, size_t bytes) { check(api.cuMemcpyDtoD(dst, src, bytes), "device copy"); }

void Gpu::record_start() {
  for (auto& e : ev_)
    if (!e) check(api.cuEventCreate(&e, 0), "cuEventCreate");
  check(api.cuEventRecord(ev_[0], nullptr), "cuEventRecord");
}

float Gpu::record_stop_ms() {
  check(api.cuEventRecord(ev_[1], nullptr), "cuEventRecord");
  check(api.cuEventSynchronize(ev_[1]), "cuEventSynchronize");
  float ms = 0.f;
  check(api.cuEventElapsedTime(&ms, ev_[0], ev_[1]), "cuEventElapsedTime");
  return ms;
}

int Gpu::occupancy(const std::string& family, const char* name, unsigned block, unsigned shmem) {
  int n = 0;
  check(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, function(family, name, shmem), int(block), shmem),
        "occupancy");
  return n;
}

int Gpu::multiprocessors() {
  int n = 0;
  check(api.cuDeviceGetAttribute(&n, 16, dev_), "multiprocessor count");  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  return n;
}

DevPtr step_info(Gpu& g, int64_t p0, int rows) {
  struct {
    int64_t p0;
    int32_t rows, pad;
  } s{p0, rows, 0};
  DevPtr p = g.alloc(sizeof s);
  g.upload(p, &s, sizeof s);
  return p;
}

Gpu& gpu() {
  static Gpu g;
  return g;
}

}  // namespace smelt::test_cuda
