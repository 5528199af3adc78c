// The op contract of docs/ops.md as data: for every op, its operands in plan order (with the element type
// each must have and whether it may be -1) and its attributes (kind, default). runtime/plan checks every
// plan op against this table; the cpu backend has one handler per entry.
#pragma once
#include <string_view>
#include <vector>

namespace smelt::runtime {

enum class OpKind {
  Embedding, HcInit, HcMix, HcCollapse, HcExpand, HcHead, RmsNorm, Linear, GroupedLinear, Rope,
  WindowKvUpdate, Compressor, IndexerTopk, SparseAttention, MoeRoute, MoeExperts, SwigluMlp, Add,
};

// Attribute encoding in plan.Attr: integers and flags in `i`, real numbers in `f`, names in `s`.
enum class AttrKind { Int, Float, String };

struct AttrSpec {
  const char* name;
  AttrKind kind;
  bool required;
  double default_value = 0.0;  // used when !required and absent (Int and Float kinds)
};

// 'f' = F32 activation / float weight, 'i' = I32 activation / integer weight. For states: the state kind.
struct OperandSpec {
  const char* name;
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
};

const std::vector<OpSpec>& op_specs();
const OpSpec* find_op_spec(std::string_view name);  // nullptr if unknown

}  // namespace smelt::runtime
