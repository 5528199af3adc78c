// The op contract of docs/ops.md as data: for every op, its operands in plan order (with the element type
// each must have and whether it may be -1) and its attributes (kind, default). runtime/plan checks every
// plan op against this table; the cpu backend has one handler per entry.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace smelt::runtime {

enum class OpKind {
  Embedding, HcInit, HcMix, HcCollapse, HcExpand, HcHead, RmsNorm, Linear, GroupedLinear, Rope,
  WindowKvUpdate, Compressor, IndexerTopk, SparseAttention, MoeRoute, MoeExperts, SwigluMlp, Add,
  // DeepSeek-V4.1
  FakeQuant, KvCompressor, IndexerV41, EngramHash, Engram, HcMean, Capture, Concat,
  // the TP halves of Engram (partitioned plans)
  EngramLookup, EngramGate,
  // the TP halves of both indexers (partitioned plans)
  IndexerScores, IndexerSelect,
  // DeepSeek-V4.1 DSpark drafter (the dspark_draft program)
  DsparkAttention, DsparkHead,
  // Collectives of partitioned plans (format 1.2)
  AllReduce, AllGather, Send, Recv,
};

// Attribute encoding in plan.Attr: integers and flags in `i`, real numbers in `f`, names in `s`, integer
// lists in `ints`.
enum class AttrKind { Int, Float, String, Ints };

struct AttrSpec {
  const char* name;
  AttrKind kind;
  bool required;
  double default_value = 0.0;  // used when !required and absent (Int and Float kinds; String: "", Ints: [])
};

// 'f' = F32 activation / float weight, 'i' = I32 activation / integer weight. Weights only: 'q' = float or
// quantized (F8_E4M3, or I8 = packed FP4), 's' = F8_E8M0 block scales, '8' = F8_E4M3. For states: the kind.
struct OperandSpec {
  std::string name;
  char type = 'f';
  bool optional = false;
  const char* state_kind = nullptr;   // states only: required State.kind ("pool" = either pool kind)
};

struct OpSpec {
  OpKind kind;
  const char* name;  // e.g. "smelt.rms_norm"
  std::vector<OperandSpec> inputs, outputs, weights, states;
  std::vector<AttrSpec> attrs;
  bool weights_repeat = false;  // moe_experts: the weight list is `weights` repeated n_experts times
  bool in_place_ok = false;     // an output may be exactly its first input (same arena bytes)
  // The weight list may be the "scaled" form: each listed weight followed by its scale (`<name>.scale`, an
  // E8M0 'q'-weight scale, -1 when that weight is not quantized); the plan's list length says which form.
  bool scaled_weights = false;
};

// The weight operands of `spec` in the plan's order: the plain list, or with `scaled`, each weight followed
// by its scale.
std::vector<OperandSpec> weight_specs(const OpSpec& spec, bool scaled);

const std::vector<OpSpec>& op_specs();
// Attributes any op may carry besides its own: scheduling hints of the compiler that do not change what the op
// computes. stream (0 / 1): a GPU backend may run the op on its side stream (compiler/passes/schedule_streams.cc);
// the cpu backend ignores it.
const std::vector<AttrSpec>& schedule_attrs();
const OpSpec* find_op_spec(std::string_view name);  // nullptr if unknown
bool is_collective(OpKind kind);  // all_reduce, all_gather, send, recv

}  // namespace smelt::runtime
