// Plan emission: a module that went through smelt-plan-memory -> the plan file bytes (schemas/plan_file.h
// header + the schemas/plan.fbs flatbuffer). The same module gives byte-identical bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/cuda/kernels.h"
#include "mlir/IR/BuiltinOps.h"

namespace smelt {

struct EmitOptions {
  std::string target = "cpu";
  std::string target_json;  // the rig description, for file targets
  int64_t tp = 1, pp = 1;
  std::vector<cuda_compile::PlanKernel> kernels;  // cuda targets: Plan.kernels, in this order
  std::string kernel_defines;  // "NAME=VALUE,..." the kernels were compiled with (Plan.options "kernel_defines"; "" none)
};

// The compiler's version string recorded in every plan ("smelt 0.1.0").
std::string compiler_version();

// Throws smelt::Error naming what is missing (e.g. a module that was not planned) or inconsistent.
std::vector<uint8_t> emit_plan(mlir::ModuleOp module, const EmitOptions& options = {});

}  // namespace smelt
