// The cpu backend: runs a plan's ops over one chunk of rows with the float32 reference kernels.
//
// Memory: one arena of plan.arena_bytes; buffer b of the current chunk is rows x row_elems at
// arena + b.offset. Per-sequence state (plan.states) is F32, zero-initialised, owned here.
// At construction each op is prepared once into a PreparedOp (handler + resolved pointers + attributes),
// so run() is a tight loop over plain structs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/reference.h"
#include "kernels/compressor/reference.h"
#include "kernels/indexer/reference.h"
#include "kernels/moe/reference.h"
#include "runtime/plan.h"
#include "runtime/weights.h"

namespace smelt::runtime::cpu {

struct ExecContext {
  int64_t p0 = 0;                      // tokens of this sequence already seen
  int rows = 0;                        // rows of this chunk (positions p0 .. p0+rows-1)
  const int64_t* positions = nullptr;  // [rows] absolute positions (RoPE)
};

struct PreparedOp;
using Handler = void (*)(const PreparedOp&, const ExecContext&);

struct PreparedOp {
  Handler run = nullptr;
  const Plan* plan = nullptr;  // with `ref`, names the plan and the op in runtime errors
  const OpRef* ref = nullptr;
  // Arena operands by their position in the op's lists (row 0 of the chunk); nullptr = absent.
  float* in[4] = {};
  int32_t* in_i[4] = {};
  float* out[3] = {};
  int32_t* out_i[3] = {};
  int64_t in_w[4] = {}, out_w[3] = {};  // row_elems
  const float* w[4] = {};               // float weights
  const int32_t* w_i[4] = {};           // integer weights
  int64_t w_rows[4] = {};               // first dimension of each weight
  float* state[2] = {};
  int64_t state_rows[2] = {};
  // Attributes the simple ops use.
  int hc_mult = 0, sinkhorn_iters = 0, groups = 1, heads = 0, head_dim = 0, rope_dim = 0, window = 0;
  bool inverse = false;
  float eps = 0.f, hc_eps = 0.f, limit = 0.f;
  std::vector<float> inv_freq;  // rope
  // Ready-made kernel arguments (only rows / p0 / positions change per chunk).
  kernels::SparseAttentionArgs attention;
  kernels::CompressorArgs compressor;
  kernels::IndexerArgs indexer;
  kernels::MoeRouteArgs route;
  std::vector<const float*> w1, w2, w3;  // moe experts
  int n_experts = 0, topk = 0, inter = 0;
};

class CpuBackend {
 public:
  CpuBackend(const Plan& plan, const Weights& weights);
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  // The chunk's token ids go here (max_rows entries) before run().
  int32_t* token_ids();
  // Runs every op over `rows` rows at positions p0 .. p0+rows-1; afterwards logits() holds [rows, vocab].
  void run(int64_t p0, int rows);
  const float* logits() const;

  void reset_state();  // zero every state (a new sequence)
  uint64_t state_bytes() const;
  uint64_t arena_bytes() const { return arena_size_; }

 private:
  const Plan& plan_;
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], FreeDeleter> arena_;
  uint64_t arena_size_ = 0;
  std::vector<std::vector<float>> states_;
  std::vector<PreparedOp> ops_;
  std::vector<int64_t> positions_;

  uint8_t* buffer(int id) const;
};

// Fills `p` for op `op` (runtime/cpu/ops.cc). Pointers into the arena, states and weights are resolved
// by the caller; this sets the handler and the per-op attributes and kernel arguments.
void prepare_op(const Plan& plan, const OpRef& op, PreparedOp& p);

}  // namespace smelt::runtime::cpu
