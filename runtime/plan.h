// A loaded and validated plan: the 32-byte header (schemas/plan_file.h), the flatbuffer payload checked
// by flatbuffers::Verifier, and a semantic check of everything the runtime will index with: ids in
// range, ops known and complete, buffer widths consistent with the weights and attributes of every op.
// A plan that passes load() cannot make the cpu backend read or write out of bounds.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontends/error.h"
#include "runtime/op_specs.h"
#include "runtime/transform.h"
#include "schemas/plan_generated.h"

namespace smelt::runtime {

struct AttrValue {
  AttrKind kind = AttrKind::Int;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
};

// One plan op after validation: ids copied out of the flatbuffer, attributes with defaults filled in.
struct OpRef {
  int index = 0;
  const OpSpec* spec = nullptr;
  std::string name;
  int layer = -1;
  std::vector<int> inputs, outputs, weights, states;
  std::map<std::string, AttrValue, std::less<>> attrs;
  bool scaled = false;  // the weight list is the scaled form (each weight followed by its scale)
  std::string program;  // "" = the main forward, else the Program it belongs to (named in errors)

  int64_t i(std::string_view attr) const;
  double f(std::string_view attr) const;
  const std::string& s(std::string_view attr) const;
  const std::vector<int64_t>& ints(std::string_view attr) const;
  std::string where() const;  // "op 3 (smelt.linear, layer 0)"
};

// A further entry point (schemas/plan.fbs Program), validated like the main op list: its ops never write
// state, every input of an op is written earlier in the program or is one of the program's inputs.
struct Program {
  std::string name;
  std::vector<OpRef> ops;
  std::vector<int> inputs, outputs;  // buffer ids
};

class Plan;

// Format 1.2: one rank of a partitioned plan with its own complete, validated plan.
struct Rank {
  int index = 0, stage = 0, tp_rank = 0;  // index = stage * tp + tp_rank
  std::string arch;
  double share = 1.0;
  std::unique_ptr<Plan> plan;
};

class Plan {
 public:
  static Plan load(const std::string& path);
  // Validates a plan file held in memory (tests, fuzzing); `name` is used in error messages.
  static Plan from_bytes(std::span<const uint8_t> file, const std::string& name);

  const std::string& path() const { return path_; }
  const smelt::plan::Plan& fb() const { return *fb_; }
  const std::vector<OpRef>& ops() const { return ops_; }
  const std::vector<Program>& programs() const { return programs_; }
  const Program* program(std::string_view name) const;  // nullptr when the plan has no such program
  uint32_t version_major() const { return major_; }
  uint32_t version_minor() const { return minor_; }

  // Options of this plan; a rank's plan falls back to the partitioned plan's. "" when absent.
  std::string option(std::string_view key) const;
  // A partitioned plan answers these for the rank whose logits it returns (last stage, TP rank 0).
  int64_t max_rows() const;
  int64_t max_seq_len() const;
  int token_ids() const { return fb_->token_ids(); }
  int logits() const { return fb_->logits(); }  // -1: a rank plan without the head (not the last stage)
  int64_t vocab() const;  // row_elems of the logits buffer

  // Format 1.2 partitioned plans (docs/plan.md "Partitioned plans"). A plan without ranks runs as the one
  // rank 0 of tp = pp = 1; a partitioned plan has no ops of its own and each Rank runs its nested plan.
  bool partitioned() const { return !ranks_.empty(); }
  const std::vector<Rank>& ranks() const { return ranks_; }  // sorted by index
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  // The plans that run: the ranks' plans in index order, or this plan alone.
  std::vector<const Plan*> rank_plans() const;
  int output_rank() const { return partitioned() ? (pp_ - 1) * tp_ : 0; }  // whose logits are the plan's
  // Within a rank's plan: its global rank index and the number of ranks (0 and 1 for a plain plan).
  int rank_index() const { return rank_index_; }
  int n_ranks() const { return n_ranks_; }

  // Shape of weight / state `id` (validated: every dim >= 0, product fits in int64).
  std::vector<int64_t> weight_shape(int id) const;
  // The stored tensor's shape (Weight.source_shape, else shape) and the parsed load transform (validated:
  // it turns the one into the other).
  std::vector<int64_t> weight_source_shape(int id) const;
  const std::vector<TransformStep>& weight_transform(int id) const { return transforms_[size_t(id)]; }
  std::vector<int64_t> state_shape(int id) const;
  int64_t row_elems(int buffer) const;
  std::string weight_name(int id) const;

  // Throws smelt::Error "<plan>: <msg>".
  [[noreturn]] void fail(const std::string& msg) const;
  [[noreturn]] void fail(const OpRef& op, const std::string& msg) const;

 private:
  Plan() = default;
  void validate();
  void validate_single();
  void validate_partitioned();
  // Cross-rank checks of one entry point ("" = the forward): every collective and send/recv can complete.
  void validate_exchange(const std::string& program);
  void validate_tables();
  OpRef validate_op(const smelt::plan::Op& op, int index, const std::string& program);
  void validate_programs();
  // Every op input written before it is read (`written`: the buffers set before the first op).
  void validate_dataflow(const std::vector<OpRef>& ops, std::vector<bool> written, const std::vector<int>& results,
                         const std::string& what);

  std::string path_;
  std::vector<uint8_t> bytes_;  // the whole file; the payload starts at plan_file::kHeaderSize
  const smelt::plan::Plan* fb_ = nullptr;
  uint32_t major_ = 0, minor_ = 0;
  std::vector<OpRef> ops_;
  std::vector<Program> programs_;
  std::vector<std::vector<TransformStep>> transforms_;  // per weight
  std::vector<Rank> ranks_;
  int tp_ = 1, pp_ = 1, rank_index_ = 0, n_ranks_ = 1;
  bool expect_logits_ = true;                          // false: a rank plan before the last stage
  std::map<std::string, std::string, std::less<>> inherited_options_;  // a rank's: the partitioned plan's

 public:
  Plan(Plan&& o) noexcept = default;
  Plan& operator=(Plan&& o) noexcept = default;
};

// Per-op width checks (runtime/op_checks.cc): every buffer's row_elems, every weight's and state's shape
// and every attribute value agree with each other as docs/ops.md says. Called by Plan::load.
void check_op_shapes(const Plan& plan, const OpRef& op);

// The DType spellings of the plan schema (same order as safetensors' DType).
std::string_view plan_dtype_name(smelt::plan::DType d);

// The block of an FP8 weight [n, k] whose E8M0 scales have shape `scale`: the smallest power of two b >= 32
// with scale == [ceil(n/b), ceil(k/b)] (any such b gives the same blocks), or 0 if there is none.
int fp8_weight_block(const std::vector<int64_t>& weight, const std::vector<int64_t>& scale);

}  // namespace smelt::runtime
