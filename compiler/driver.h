// smelt-compile's work, as a library call: load the model, import (or resume from a dumped .mlir), run the
// pass pipeline one pass at a time (dumping after each, stopping at a phase), then write IR or the plan.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace smelt {

struct CompileOptions {
  std::string model_dir;
  std::string target = "cpu";
  int64_t tp = 1, pp = 1;
  std::string shares;        // --shares a,b,...: relative TP shares, tp values or tp*pp (default even; a rig:
                             // proportional to GPU memory when a TP group's GPUs differ)
  std::string archs;         // smelt-partition's archs (one per rank, or one for all); set from the target
  std::string stages;        // --stages l0,l1,...: layers per pipeline stage (default balanced by weight bytes)
  std::string output;        // -o: the plan, or the IR with compile_to
  std::string dump_dir;      // --dump-ir-after-all
  std::string compile_to;    // "" (plan) | import | verify | select-kernels | plan-memory
  std::string compile_from;  // a dumped .mlir to resume from
  int64_t max_rows = 64;
  int64_t max_seq_len = 0;   // 0: default_max_seq_len(config)
  std::string pipeline;      // "" = default_pipeline()
  std::string numerics = "model";  // model | fp32 (smelt-numerics{mode=fp32} after smelt-verify)
  bool capture_intermediates = false;  // V4.1: capture every block's stream / pre (smelt-run logits --captures)
  std::string engram_token_map;  // --engram-token-map: V4.1 Engram map file (default MODEL_DIR/engram_token_map.safetensors)
  std::vector<std::string> kernel_defines;  // --kernel-define NAME=VALUE: plan-time kernel knobs (kernel_knobs())
  std::function<void(const std::string&)> progress;  // progress lines (stderr in the tool)
};

// smelt-verify,smelt-select-kernels{target=cpu},smelt-plan-memory{max-rows=N}
std::string default_pipeline(const CompileOptions& o);

// Splits a pass pipeline at its top-level commas ("a,b{x=1,y=2}" -> "a", "b{x=1,y=2}").
std::vector<std::string> split_pipeline(const std::string& pipeline);

// The kernels' plan-time knobs that --kernel-define may set (kernels/linear/gemv_mma.cuh, kernels/cuda/common.cuh):
// those the runtime's launchers do not mirror (a knob that sizes a launch, such as SMELT_MMA_RING_BYTES, is not one),
// with what each does.
struct KernelKnob {
  const char* name;
  const char* what;
};
const std::vector<KernelKnob>& kernel_knobs();
// The NVRTC options of --kernel-define NAME=VALUE entries (-DNAME=VALUE, sorted by name): throws smelt::Error for a
// knob that is not in kernel_knobs(), a value that is not an integer, or a knob given twice.
std::vector<std::string> kernel_define_options(const std::vector<std::string>& defines);

// Runs a compile. Throws smelt::Error on any failure; its message may hold several lines (one per IR
// diagnostic), each meant to be printed after "error: ".
void compile(const CompileOptions& o);

}  // namespace smelt
