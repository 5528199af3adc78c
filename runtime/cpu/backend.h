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
#include "kernels/dspark/reference.h"
#include "kernels/engram/hash.h"
#include "kernels/engram/reference.h"
#include "kernels/indexer/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/moe/reference.h"
#include "runtime/cpu/collectives.h"
#include "runtime/plan.h"
#include "runtime/weights.h"

namespace smelt::runtime::cpu {

// What smelt.capture ops recorded: per name, the rows of every chunk run while capturing, in order.
struct CaptureTable {
  struct Entry {
    std::string name;
    std::vector<int64_t> row_shape;  // the shape of one row (default: [row_elems])
    int64_t rows = 0;
    std::vector<float> data;         // rows x prod(row_shape)
  };
  std::vector<Entry> entries;  // in the order the names were first captured
  void append(const std::string& name, const std::vector<int64_t>& row_shape, const float* x, int rows,
              int64_t row_elems);
};

struct ExecContext {
  int64_t p0 = 0;                      // tokens of this sequence already seen
  int rows = 0;                        // rows of this chunk (positions p0 .. p0+rows-1)
  const int64_t* positions = nullptr;  // [rows] absolute positions (RoPE)
  CaptureTable* captures = nullptr;    // where smelt.capture writes; nullptr = not capturing
  Communicator* comm = nullptr;        // the ranks' exchange (collectives); nullptr = a plan without them
  int rank = 0;                        // this backend's global rank index
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
  const float* w[8] = {};               // float weights
  const int32_t* w_i[8] = {};           // integer weights
  const uint8_t* w_raw[8] = {};         // quantized weights and scales (F8_E4M3, I8, F8_E8M0), as stored
  int64_t w_rows[8] = {};               // first dimension of each weight
  float* state[4] = {};
  int64_t state_rows[4] = {};
  bool round_bf16 = false;              // round every float output to bf16 after the op (`round`)
  bool collapse_round_bf16 = false;     // hc_collapse with a folded norm: its collapse rounded first
  bool model_numerics = true;           // false: `numerics = "fp32"` (the V4.1 ops' internal roundings off)
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
  int n_experts = 0, topk = 0, inter = 0, expert_begin = 0, n_routed = 0;  // moe (EP: n_routed > n_experts)
  // V4.1
  kernels::QuantWeight qw;                          // linear on a quantized weight (qw.weight != nullptr)
  bool act_quant = false;
  float scale_after = 1.f;
  std::vector<kernels::QuantWeight> q1, q2, q3;     // quantized experts / shared expert
  std::vector<float> owned;                         // a weight dequantized at load (wo_a)
  kernels::KvCompressorV41Args kv_compressor;
  kernels::IndexerV41Args indexer_v41;
  kernels::IndexerScoresArgs indexer_scores;        // the TP halves of both indexers
  kernels::IndexerSelectArgs indexer_select;
  kernels::engram::EngramArgs engram;
  kernels::engram::EngramHashLayout hash_layout;
  int64_t hash_pad = 0, hash_vocab = 0;             // pad_id's compressed id; compressed vocab size
  int fq_mode = 0, fq_channels = 0;                 // fake_quant: mode index, quantized channels per head
  int layer_index = 0;                              // engram: its column block of the hash ids
  std::string capture_name;
  std::vector<int64_t> capture_shape;
  // V4.1 DSpark
  kernels::dspark::DraftAttentionArgs dspark_attention;
  kernels::dspark::DraftHeadArgs dspark_head;
  // Collectives
  std::vector<int64_t> group, widths;
  int peer = 0;
  int64_t tag = 0;
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
  // Runs plan.programs()[index] over `rows` rows at positions p0 .. p0+rows-1: its input buffers must be
  // filled first (buffer_i32 / buffer_f32), its outputs are read afterwards. Programs write no state.
  void run_program(size_t index, int64_t p0, int rows);
  int32_t* buffer_i32(int id) { return reinterpret_cast<int32_t*>(buffer(id)); }
  const float* buffer_f32(int id) const { return reinterpret_cast<const float*>(buffer(id)); }
  const float* logits() const;
  // Buffer `id` of the last chunk (rows x row_elems at its arena offset), for tests and tools.
  const uint8_t* buffer_bytes(int id) const { return buffer(id); }

  // While on, smelt.capture ops append their rows to captures() (off by default: no copies).
  void set_capturing(bool on) { capturing_ = on; }
  CaptureTable& captures() { return captures_; }

  // The communicator the collective ops use, and this plan's rank in it (partitioned plans).
  void attach(Communicator* comm, int rank) {
    comm_ = comm;
    rank_ = rank;
  }

  void reset_state();  // zero every state (a new sequence)
  uint64_t state_bytes() const;

  // Debugging tools (cuda_gpu_compare bisect): op `k` of the main program alone over `rows` rows at p0, on
  // whatever its input buffers and states hold (its `round` applied); writable buffers and states.
  void run_op(size_t k, int64_t p0, int rows);
  uint8_t* buffer_data(int id) { return buffer(id); }
  float* state_data(int id) { return states_[size_t(id)].data(); }
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
  std::vector<std::vector<PreparedOp>> program_ops_;  // per plan program
  std::vector<int64_t> positions_;
  CaptureTable captures_;
  bool capturing_ = false;
  Communicator* comm_ = nullptr;
  int rank_ = 0;

  uint8_t* buffer(int id) const;
  void prepare(const OpRef& op, const Weights& weights, PreparedOp& po);
  void run_ops(const std::vector<PreparedOp>& ops, int64_t p0, int rows);
};

// Fills `p` for op `op` (runtime/cpu/ops.cc). Pointers into the arena, states and weights are resolved
// by the caller; this sets the handler and the per-op attributes and kernel arguments.
void prepare_op(const Plan& plan, const OpRef& op, PreparedOp& p);
// The same for the V4.1 ops (runtime/cpu/ops_v41.cc), and for the V4.1 forms of linear / grouped_linear /
// moe_experts / swiglu_mlp (quantized weights).
void prepare_op_v41(const Plan& plan, const OpRef& op, PreparedOp& p);
// The same for smelt.concat and the DSpark ops (runtime/cpu/ops_dspark.cc).
void prepare_op_dspark(const Plan& plan, const OpRef& op, PreparedOp& p);
// The same for the collectives (runtime/cpu/ops_collectives.cc).
void prepare_op_collective(const Plan& plan, const OpRef& op, PreparedOp& p);

// The RoPE inverse frequencies of a rope / compressor op (`v41`: the official V4.1 table).
std::vector<float> inv_freq(const OpRef& op, bool v41);

// A quantized weight of the plan (weight id `w_id` at bytes `w`, its scale `s_id` at bytes `s`) as the
// kernels take it: FP4 for I8 storage, else FP8 with the block its scale shape implies.
kernels::QuantWeight quant_weight(const Plan& plan, int w_id, const uint8_t* w, int s_id, const uint8_t* s);

}  // namespace smelt::runtime::cpu
