// A stand-in for libcuda.so.1 (tests/net only, found through LD_LIBRARY_PATH): two "GPUs" that can be counted
// and opened, and every other call fails with error 999 (CUDA_ERROR_UNKNOWN), so that a smelt-run process gets
// through the several-process rendezvous and then stops with one sentence where it would load the plan.
#include <stddef.h>

int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGetCount(int* n) { *n = 2; return 0; }
int cuDeviceGet(int* dev, int ordinal) { *dev = ordinal; return 0; }
int cuGetErrorName(int r, const char** s) { (void)r; *s = "CUDA_ERROR_UNKNOWN"; return 0; }
int cuGetErrorString(int r, const char** s) { (void)r; *s = "the fake driver of tests/net has no GPU"; return 0; }

// Arguments are ignored: the callers pass them in registers and the callee never reads them.
#define FAIL(name) \
  int name(void) { return 999; }
FAIL(cuDriverGetVersion)
FAIL(cuDeviceGetName)
FAIL(cuDeviceGetAttribute)
FAIL(cuDeviceTotalMem_v2)
FAIL(cuDevicePrimaryCtxRetain)
FAIL(cuDevicePrimaryCtxRelease_v2)
FAIL(cuCtxSetCurrent)
FAIL(cuCtxSynchronize)
FAIL(cuMemGetInfo_v2)
FAIL(cuMemAlloc_v2)
FAIL(cuMemFree_v2)
FAIL(cuMemAllocHost_v2)
FAIL(cuMemFreeHost)
FAIL(cuMemcpyHtoD_v2)
FAIL(cuMemcpyDtoH_v2)
FAIL(cuMemcpyDtoD_v2)
FAIL(cuMemcpyHtoDAsync_v2)
FAIL(cuMemcpyDtoHAsync_v2)
FAIL(cuMemcpyDtoDAsync_v2)
FAIL(cuMemsetD8Async)
FAIL(cuModuleLoadData)
FAIL(cuModuleUnload)
FAIL(cuModuleGetFunction)
FAIL(cuFuncSetAttribute)
FAIL(cuLaunchKernel)
FAIL(cuStreamCreate)
FAIL(cuStreamDestroy_v2)
FAIL(cuStreamSynchronize)
FAIL(cuStreamBeginCapture_v2)
FAIL(cuStreamEndCapture)
FAIL(cuGraphInstantiateWithFlags)
FAIL(cuGraphLaunch)
FAIL(cuGraphExecDestroy)
FAIL(cuGraphDestroy)
FAIL(cuEventCreate)
FAIL(cuEventDestroy_v2)
FAIL(cuEventRecord)
FAIL(cuEventSynchronize)
FAIL(cuEventElapsedTime_v2)
FAIL(cuMemcpy2DAsync_v2)
