// The device code of a cuda plan: every kernel family (kernels/<family>/*.cu) compiled by NVRTC to a cubin for
// each arch of the target plus PTX for each arch (forward compatibility). Stored in Plan.kernels.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "compiler/cuda/nvrtc.h"
#include "compiler/cuda/target.h"

namespace smelt::cuda_compile {

struct PlanKernel {
  std::string name;  // the family, e.g. "rms_norm"
  Image image;
};

// Families in name order, for each: the cubins in the target's arch order, then the PTX in that order. Every
// family is included: a launcher may use any of them, and unused modules cost only plan bytes. extra_options: NVRTC
// options for every compile (the plan's kernel defines, -DNAME=VALUE).
std::vector<PlanKernel> compile_kernels(const Target& target, const std::function<void(const std::string&)>& progress,
                                        const std::vector<std::string>& extra_options = {});

}  // namespace smelt::cuda_compile
