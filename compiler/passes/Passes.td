// smelt passes. Each runs on the module; options follow mlir-opt conventions: smelt-plan-memory{max-rows=64}.
#ifndef SMELT_PASSES_TD
#define SMELT_PASSES_TD

include "mlir/Pass/PassBase.td"

def SmeltVerify : Pass<"smelt-verify", "::mlir::ModuleOp"> {
  let summary = "Whole-module checks beyond the op verifiers";
  let description = [{
    Every weight / state reference resolves to a smelt.weight / smelt.state of the right kind and shape,
    @forward has the expected signature, and each layer's schedule is sane (one attention, the window ring
    updated after it, pools written by a compressor before they are read, each state written once).
  }];
}

def SmeltSelectKernels : Pass<"smelt-select-kernels", "::mlir::ModuleOp"> {
  let summary = "Choose a kernel for every compute op";
  let description = [{ Sets `kernel = "cpu.<op>"` on every compute op for the cpu target. }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"", "cpu | h200 | a rig FILE.json">,
  ];
}

def SmeltPlanMemory : Pass<"smelt-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Place every activation of @forward in one arena (liveness + first-fit)";
  let description = [{
    Each SSA value of @forward gets a buffer of max_rows * row_elems * elem_size bytes (64-byte aligned).
    Buffers whose live ranges overlap never overlap in memory; an op's outputs never alias its inputs or
    each other. Results: `offsets` on each op, `smelt.offset` on the ids argument, `smelt.arena_bytes` and
    `smelt.max_rows` on the module.
  }];
  let options = [
    Option<"maxRows", "max-rows", "int64_t", /*default=*/"64", "largest chunk (rows) the arena is sized for">,
  ];
}

#endif  // SMELT_PASSES_TD
