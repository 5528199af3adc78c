// Internal to smelt-pad-heads / smelt-partition: the attention chain of one layer and the TP rewrite of one
// rank's function (partition_tp.cc).
#pragma once
#include <string>
#include <vector>

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"

namespace smelt::partition {

// The head-parallel part of one attention: wq_b -> [rms_norm per head | rope | fake_quant]* -> sparse_attention
// -> [rope inverse | ...]* -> wo_a (grouped_linear) -> wo_b (linear).
struct AttentionChain {
  LinearOp wq_b;
  llvm::SmallVector<mlir::Operation*> q_ops;  // between wq_b and the attention, in order
  SparseAttentionOp attn;
  llvm::SmallVector<mlir::Operation*> o_ops;  // between the attention and wo_a
  GroupedLinearOp wo_a;
  LinearOp wo_b;
  int64_t heads = 0, head_dim = 0, groups = 0, rank = 0;  // rank = o_lora_rank (wo_a rows per group)
};

// Finds the chain around `attn`; returns "" or why the layer does not have the expected shape.
std::string find_chain(SparseAttentionOp attn, AttentionChain& c);

// Sets the local head / group count on every op of the chain and the widths of the values it computes.
void set_heads(AttentionChain& c, int64_t groups);

struct TpRank {
  int64_t tp_rank = 0;
  std::vector<double> shares;          // one per TP rank
  llvm::SmallVector<int64_t> group;    // global ranks of this stage's TP group
};

// Rewrites `f` (one rank's copy of @forward) for its TP rank: shards heads, experts, embedding and head, inserts
// the collectives. Returns "" or the reason the split cannot be exact.
std::string tp_rewrite(mlir::SymbolTable& symbols, mlir::func::FuncOp f, const TpRank& r);

}  // namespace smelt::partition
