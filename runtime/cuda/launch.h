// The contract between the cuda backend (runtime/cuda/backend.cc: memory, weights, modules, graphs) and the
// per-op launchers (runtime/cuda/ops*.cc: which kernels an op runs, with which arguments).
//
// Kernels are CUDA C++ in kernels/<family>/*.cu, compiled by NVRTC at plan time (never at start-up) into one
// module per family per arch and stored in the plan (Plan.kernels). Entry points are `extern "C" __global__`.
// Activations are the plan's F32 / I32 row buffers in one device arena, exactly as on the cpu backend.
// Decode steps are replayed as CUDA graphs, so a launcher must not bake per-step values into kernel
// arguments: the chunk's first position lives in device memory (`step`) and kernels read it there. The
// row count IS a kernel argument: a graph is captured per row-count bucket.
#pragma once
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "runtime/plan.h"

namespace smelt::runtime::cuda {

using DevPtr = unsigned long long;  // CUdeviceptr, without pulling in cuda.h (loaded with dlopen)

// Per-chunk values kernels read from device memory (updated before every run / graph replay).
struct StepInfo {
  int64_t p0;    // absolute position of row 0
  int32_t rows;  // rows of this chunk (also passed by value)
  int32_t pad;
};

// A weight as the backend holds it on the device: the stored bytes (after the plan's transform), or, when a
// launcher asked for it at prepare time (see Prepare::want_f32), converted to F32.
struct DeviceWeight {
  DevPtr ptr = 0;
  smelt::plan::DType dtype = smelt::plan::DType::F32;
  std::vector<int64_t> shape;
  int id = -1;         // the plan's weight id
  bool tiled = false;  // in tile order (kernels/linear/gemv.cuh wtile_off): act-quant FP8 / FP4 weights on sm_89+
  // FP4 codes in pair order (kernels/cuda/common.cuh fp4_pair_order): the weight-only experts' on the tensor-core
  // kernels (sm_80+)
  bool fp4_pairs = false;
};

class Launcher;  // the backend's services to launchers (below)

// Everything a launcher needs to run one op of the plan over one chunk.
struct OpLaunch {
  const Plan* plan = nullptr;
  const OpRef* op = nullptr;
  int rows = 0;
  DevPtr step = 0;                       // StepInfo*
  DevPtr in[4] = {}, out[3] = {};        // arena buffers by operand position (0 = absent)
  int64_t in_w[4] = {}, out_w[3] = {};   // row_elems of each
  std::vector<const DeviceWeight*> w;    // weights by operand position (nullptr = absent; moe_experts has many)
  DevPtr state[4] = {};                  // F32 states, row-major [state_rows, state_cols]
  int64_t state_rows[4] = {}, state_cols[4] = {};
  void* stream = nullptr;                // CUstream
  bool side = false;                     // on the side stream (an op marked stream = 1, while the side stream is on)
  DevPtr scratch = 0;                    // per-op scratch, as large as the launcher asked at prepare time
  uint64_t scratch_bytes = 0;            // the region's size (the largest op's ask: more than this op's at few rows)
  DevPtr zeroed = 0;                     // this op's own memory, all zeros at every launch (Prepare::zeroed_bytes)
  uint64_t zeroed_bytes = 0;             // its size
  // A moe_experts op's swiglu_mlp successor on the same input (the shared expert), which this op's one-row decode
  // kernels may run too (backend.cc plan_fusions checked the pair; ops.cc run_experts decides per run), and on the
  // successor: `shared_done`, set by its predecessor each time it runs, when it did (the successor then launches
  // nothing).
  OpLaunch* fuse_shared = nullptr;
  mutable bool shared_done = false;
  // The head of a sublayer seam (backend.cc plan_seams): an add and the hc_expand of its sum, or an hc_expand, and the
  // hc_collapse of the expanded streams after it, which one smelt_hc_seam* launch runs (ops.cc run_seam decides per
  // run); on the later ops `seam_done`, set by the head each time it ran them (they then launch nothing).
  OpLaunch* seam_expand = nullptr;  // the hc_expand when the head is the add
  OpLaunch* seam_collapse = nullptr;
  mutable bool seam_done = false;
  // The head of an attention tail (backend.cc plan_attn_tails): a sparse_attention op and the main-stream
  // window_kv_update and / or inverse rope right after it, which its decode merge kernel runs too (ops.cc
  // split_attention decides per run); those ops then find `seam_done` set and launch nothing.
  OpLaunch* tail_kv = nullptr;
  OpLaunch* tail_rope = nullptr;
  Launcher* backend = nullptr;
  int sms = 0;                           // the GPU's multiprocessors (sizes persistent grids; 0 = unknown)
  int arch = 0;                          // the loaded cubins' arch, 90 for sm_90 (picks arch-only kernels; 0 = unknown)
};

// Backend services: look up a kernel function of the plan's modules and launch it on the op's stream.
class Launcher {
 public:
  virtual ~Launcher() = default;
  // `name` is the extern "C" entry point, e.g. "smelt_rms_norm_f32"; throws smelt::Error if no module of
  // the plan for this device's arch has it. `programmatic`: with programmatic dependent launch where the backend uses
  // it (the kernel may be scheduled while the previous one finishes); false: only once the previous one has finished.
  virtual void launch(const OpLaunch& l, const char* name, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                      unsigned block_x, unsigned shared_bytes, void** args, bool programmatic) = 0;
};

// Asked once per op when the plan is loaded: how much scratch the op needs at `max_rows` rows.
struct Prepare {
  uint64_t scratch_bytes = 0;
  // Memory of this op alone, zeroed once when the plan is loaded, that its kernels leave all zeros when they end
  // (the routed experts' slot counters: kernels/moe/moe_mma.cu slot_count_group).
  uint64_t zeroed_bytes = 0;
  // Quantized (FP8 / FP4) weights the op's act-quant kernels read (tile order on sm_89+) and those its weight-only
  // kernels read (row-major): plan weight ids.
  std::vector<int> act_quant_weights, weight_only_weights;
  // FP4 expert weights that only the weight-only tensor-core expert kernels read (pair order where they run:
  // fp4_pair_order_on)
  std::vector<int> fp4_pair_weights;
};

// runtime/cuda/ops*.cc: one entry per op name of docs/ops.md. `prepare` may be called before any `run`.
void prepare_op(const Plan& plan, const OpRef& op, int64_t max_rows, Prepare& out);
void run_op(const OpLaunch& l);
// Whether the weight-only FP4 experts run on the tensor-core kernels, which read their codes in pair order, on a
// GPU of this arch (90 for sm_90): the backend writes Prepare::fp4_pair_weights so at load where this holds.
bool fp4_pair_order_on(int arch);
// Whether an op name has a cuda launcher (the compiler refuses plans with ops that have none).
bool has_launcher(const std::string& op_name);
// The comma-separated items of $var (the backend's and launchers' list-valued switches: SMELT_CUDA_SKIP_KERNELS, ...).
std::set<std::string> env_names(const char* var);
// Whether $name is exactly `value` (switches with a named mode: SMELT_CUDA_WO_MMA=all, SMELT_CUDA_SIDE_JOIN=all).
bool env_is(const char* name, const char* value);
// Whether $name is "0" (the backend's and launchers' on-by-default switches: SMELT_CUDA_PDL, SMELT_CUDA_MMA, ...).
bool env_off(const char* name);
// $name = "A,B,C" (tuning switches of three integers: SMELT_CUDA_WO_EXPERTS, SMELT_CUDA_EXPERT_SPLIT): the three, or
// all 0 (keep the rules) when unset or not three integers.
std::array<int, 3> env_ints3(const char* name);

}  // namespace smelt::runtime::cuda
