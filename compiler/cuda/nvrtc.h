// NVRTC compilation of the kernel sources (kernels/<family>/*.cu) for one arch. A library of its own (no MLIR)
// so the compiler's emitter and the kernel tests share it. Runs at plan time only: the runtime never compiles.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace smelt::cuda_compile {

// Every kernels/<family>/*.cu, embedded into the binary at build time (CMake generates the table).
struct KernelSource {
  std::string family;  // folder name, e.g. "rms_norm"
  std::string file;    // path from the repository root, e.g. "kernels/rms_norm/rms_norm.cu"
  std::string text;
};
const std::vector<KernelSource>& kernel_sources();
const KernelSource& kernel_source(const std::string& family);  // throws smelt::Error if unknown

struct Image {
  std::string arch;    // sm_80 | sm_90 | sm_120 (cubin) or compute_XX (ptx)
  std::string format;  // cubin | ptx
  uint64_t source_hash = 0;
  std::vector<uint8_t> bytes;
  std::string log;     // NVRTC's log (warnings)
};

// Compiles `src` for `arch` ("sm_80" -> cubin; "compute_80" -> PTX). Uses the on-disk kernel cache
// ($SMELT_KERNEL_CACHE, default ~/.cache/smelt/kernels) keyed by source hash, options, arch and NVRTC version.
// Throws smelt::Error with the file name and NVRTC's log on failure.
Image compile(const KernelSource& src, const std::string& arch, const std::vector<std::string>& extra_options = {});

// Whether this build has NVRTC (false: GPU targets fail with one sentence).
bool available();

}  // namespace smelt::cuda_compile
