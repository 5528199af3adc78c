#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

#include "frontends/error.h"

namespace smelt::runtime::cuda {

namespace {

template <typename F>
void bind(void* lib, const std::string& library, F& fn, const char* symbol) {
  void* p = dlsym(lib, symbol);
  if (!p)
    throw Error("the CUDA driver " + library + " lacks " + symbol + ": the cuda backend needs a CUDA 12 or newer driver");
  fn = reinterpret_cast<F>(p);
}

std::unique_ptr<Driver> open_driver(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw Error("no CUDA driver found (" + library + "): the cuda backend needs an NVIDIA GPU");
  auto d = std::make_unique<Driver>();
  Driver& x = *d;
#define SMELT_BIND(field, symbol) bind(lib, library, x.field, symbol)
  SMELT_BIND(cuInit, "cuInit");
  SMELT_BIND(cuDriverGetVersion, "cuDriverGetVersion");
  SMELT_BIND(cuGetErrorName, "cuGetErrorName");
  SMELT_BIND(cuGetErrorString, "cuGetErrorString");
  SMELT_BIND(cuDeviceGetCount, "cuDeviceGetCount");
  SMELT_BIND(cuDeviceGet, "cuDeviceGet");
  SMELT_BIND(cuDeviceGetName, "cuDeviceGetName");
  SMELT_BIND(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  SMELT_BIND(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  SMELT_BIND(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SMELT_BIND(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  SMELT_BIND(cuCtxSetCurrent, "cuCtxSetCurrent");
  SMELT_BIND(cuCtxSynchronize, "cuCtxSynchronize");
  SMELT_BIND(cuMemGetInfo, "cuMemGetInfo_v2");
  SMELT_BIND(cuMemAlloc, "cuMemAlloc_v2");
  SMELT_BIND(cuMemFree, "cuMemFree_v2");
  SMELT_BIND(cuMemAllocHost, "cuMemAllocHost_v2");
  SMELT_BIND(cuMemFreeHost, "cuMemFreeHost");
  SMELT_BIND(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  SMELT_BIND(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  SMELT_BIND(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  SMELT_BIND(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  SMELT_BIND(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  SMELT_BIND(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  SMELT_BIND(cuMemsetD8Async, "cuMemsetD8Async");
  SMELT_BIND(cuModuleLoadData, "cuModuleLoadData");
  SMELT_BIND(cuModuleUnload, "cuModuleUnload");
  SMELT_BIND(cuModuleGetFunction, "cuModuleGetFunction");
  SMELT_BIND(cuFuncSetAttribute, "cuFuncSetAttribute");
  SMELT_BIND(cuLaunchKernel, "cuLaunchKernel");
  x.cuStreamWaitEvent = reinterpret_cast<decltype(x.cuStreamWaitEvent)>(dlsym(lib, "cuStreamWaitEvent"));
  x.cuLaunchKernelEx = reinterpret_cast<decltype(x.cuLaunchKernelEx)>(dlsym(lib, "cuLaunchKernelEx"));
  SMELT_BIND(cuStreamCreate, "cuStreamCreate");
  SMELT_BIND(cuStreamDestroy, "cuStreamDestroy_v2");
  SMELT_BIND(cuStreamSynchronize, "cuStreamSynchronize");
  SMELT_BIND(cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  SMELT_BIND(cuStreamEndCapture, "cuStreamEndCapture");
  SMELT_BIND(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  SMELT_BIND(cuGraphLaunch, "cuGraphLaunch");
  SMELT_BIND(cuGraphExecDestroy, "cuGraphExecDestroy");
  SMELT_BIND(cuGraphDestroy, "cuGraphDestroy");
  x.cuGraphDebugDotPrint = reinterpret_cast<decltype(x.cuGraphDebugDotPrint)>(dlsym(lib, "cuGraphDebugDotPrint"));
  SMELT_BIND(cuEventCreate, "cuEventCreate");
  SMELT_BIND(cuEventDestroy, "cuEventDestroy_v2");
  SMELT_BIND(cuEventRecord, "cuEventRecord");
  SMELT_BIND(cuEventSynchronize, "cuEventSynchronize");
  SMELT_BIND(cuEventElapsedTime, "cuEventElapsedTime_v2");
  SMELT_BIND(cuMemcpy2DAsync, "cuMemcpy2DAsync_v2");
#undef SMELT_BIND
  CUresult r = x.cuInit(0);
  if (r == 100 /* CUDA_ERROR_NO_DEVICE */)
    throw Error("the CUDA driver found no GPU: the cuda backend needs an NVIDIA GPU");
  if (r != 0) {
    const char* name = "unknown";
    x.cuGetErrorName(r, &name);
    throw Error(std::string("the CUDA driver failed to initialise (") + name + "): check the GPU and driver");
  }
  return d;
}

std::mutex g_mutex;
std::map<std::string, std::unique_ptr<Driver>> g_drivers;
const Driver* g_default = nullptr;

}  // namespace

const Driver& load_driver(const std::string& library) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& slot = g_drivers[library];
  if (!slot) slot = open_driver(library);  // throws, leaving the slot empty for a later retry
  return *slot;
}

const Driver& driver() {
  if (g_default) return *g_default;
  const Driver& d = load_driver("libcuda.so.1");
  g_default = &d;
  return d;
}

void check(CUresult r, const char* what) {
  if (r == 0) return;
  const char* name = "unknown";
  const char* text = "";
  const Driver& d = driver();
  d.cuGetErrorName(r, &name);
  d.cuGetErrorString(r, &text);
  throw Error(std::string("CUDA error in ") + what + ": " + name + " (" + (text ? text : "") + ")");
}

}  // namespace smelt::runtime::cuda
