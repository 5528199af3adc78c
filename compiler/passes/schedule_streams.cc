// smelt-schedule-streams: `stream = 1` on the ops a GPU backend may run on its side stream, beside the main
// stream's ops. The arena is still planned for one stream in program order; the cuda runtime decides from each
// op's buffers where a side op may start and where the main stream must wait for it (runtime/cuda/side_stream.h),
// so the attribute is a permission, never a correctness risk (states count whole, as written). Users can move other
// ops in an IR dump and compile from it (--compile-from); docs/performance.md has what was measured.
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTSCHEDULESTREAMS
#include "compiler/passes/Passes.h.inc"

namespace {

// The default marks (docs/performance.md "The side stream" has what each choice measured): hc_mix, and the
// attention's kv branch (wkv -> kv_norm -> rope -> fake_quant) and the indexer's q and weights projections, which
// run beside the q path (wq_a -> q_norm -> wq_b): V4.1-Flash slice 1.468 -> 1.420 ms a step (H200). The quantized
// shared expert under fp32 numerics (the weight-only kernels of the sm_80 path) beside the routing and the routed
// experts: 1.290-1.292 -> 1.279-1.285 ms (session 18); with the model's numerics (the sm_90 path's act-quant
// tensor-core GEMVs) it measured slower there (1.170-1.179 -> 1.244-1.252), so it is not marked then.
// V4.1's smelt.engram_hash (one block, ~7 us: the n-gram hashes of the token history, first read by the first Engram
// layer's lookup) ran on the main stream between the embedding and the first layer's hc_init (H200 timeline).
// smelt.engram_lookup (GPU pipelines run smelt-split-engram first) with its projection, placed by early-engram:
// V4.1-Flash slice 1.128 -> 1.123 ms (sm_90 path), 1.161 -> 1.144 (sm_80 path; session 24).
std::vector<std::string> default_side_ops() {
  return {"smelt.hc_mix",          "smelt.linear@attn.wkv", "smelt.linear@indexer.wq_b", "smelt.linear@indexer.weights_proj",
          "smelt.swiglu_mlp#fp32", "smelt.engram_hash",     "smelt.engram_lookup"};
}

// One side-ops entry: an op name, optionally with `@NAME` (only the ops whose weights include one named
// `...NAME.<leaf>` or `...NAME`, e.g. smelt.linear@attn.wkv: layer l's @layers.l.attn.wkv.weight) and then with
// `#MODE` (only the ops whose `numerics` attribute is MODE, e.g. smelt.swiglu_mlp#fp32).
struct Selector {
  std::string op, weight, numerics;  // weight: "" (any op named op) or ".NAME"; numerics: "" (any)
  static Selector parse(std::string e) {
    Selector s;
    if (const size_t hash = e.find('#'); hash != std::string::npos) s.numerics = e.substr(hash + 1), e.resize(hash);
    const size_t at = e.find('@');
    s.op = e.substr(0, at);
    if (at != std::string::npos && at + 1 < e.size()) s.weight = "." + e.substr(at + 1);
    return s;
  }
  bool matches(mlir::Operation* o) const {
    if (o->getName().getStringRef() != op) return false;
    if (!numerics.empty()) {
      auto n = o->getAttrOfType<mlir::StringAttr>("numerics");
      if (!n || n.getValue() != numerics) return false;
    }
    if (weight.empty()) return true;
    for (const SymbolUse& w : weight_uses(o))
      if (w.ref && (w.ref.getValue().ends_with(weight) || w.ref.getValue().contains(weight + "."))) return true;
    return false;
  }
};

// Whether a and b reference a common state.
bool share_state(mlir::Operation* a, mlir::Operation* b) {
  for (const SymbolUse& x : state_uses(a))
    if (x.ref)
      for (const SymbolUse& y : state_uses(b))
        if (y.ref == x.ref) return true;
  return false;
}

// Moves every marked op up to just after the latest of its operands' producers, the previous marked op (the side
// stream runs its ops in program order, so one never passes another) and the previous op that shares a state with
// it (an op never passes another user of its states). The arena is planned in program order:
// a side op placed late shares buffers with the ops before it, and the runtime must then hold it back until they
// are done (runtime/cuda/side_stream.h); placed early, its buffers are its own from there on.
void hoist_marked(mlir::ModuleOp module, const llvm::DenseSet<mlir::Operation*>& marked) {
  module.walk([&](mlir::func::FuncOp fn) {
    for (mlir::Block& block : fn.getBody()) {
      mlir::Operation* prev_marked = nullptr;
      llvm::SmallVector<mlir::Operation*> ops;
      for (mlir::Operation& op : block) ops.push_back(&op);
      for (mlir::Operation* op : ops) {
        if (!marked.contains(op)) continue;
        mlir::Operation* after = prev_marked;  // the latest of the producers in this block and the previous mark
        for (mlir::Value v : op->getOperands()) {
          mlir::Operation* d = v.getDefiningOp();
          if (d && d->getBlock() == &block && (!after || after->isBeforeInBlock(d))) after = d;
        }
        for (mlir::Operation* p = op->getPrevNode(); p && p != after; p = p->getPrevNode())
          if (share_state(p, op)) {
            after = p;
            break;
          }
        if (!after) op->moveBefore(&block, block.begin());
        else if (after->getNextNode() != op && after->isBeforeInBlock(op)) op->moveAfter(after);
        prev_marked = op;
      }
    }
  });
}

// Moves every marked smelt.hc_mix down to just after the last of the marked ops after it whose results the main
// stream needs before the mix's (their deadline: the first unmarked op reading them or what marked ops make from
// them), past no smelt.swiglu_mlp. Hoisting puts a site's mix (whose pre / post / comb are first read at the site's
// hc_expand, a sublayer later) ahead of the attention's kv branch on the in-order side stream, so the branch that
// the attention waits for started only after the mix's one-block Sinkhorn (V4.1-Flash slice, H200 timeline: layer 1's
// kv branch ended 5.5 us after the q path). A side-stream shared expert (fp32 numerics) is not passed: its result is
// read just before the hc_expand that needs the mix, and it runs far longer than the mix.
void sink_mixes(mlir::ModuleOp module, const llvm::DenseSet<mlir::Operation*>& marked) {
  module.walk([&](mlir::func::FuncOp fn) {
    for (mlir::Block& block : fn.getBody()) {
      llvm::DenseMap<mlir::Operation*, int64_t> pos;
      llvm::SmallVector<mlir::Operation*> mixes;
      int64_t i = 0;
      for (mlir::Operation& op : block) {
        pos[&op] = i++;
        if (marked.contains(&op) && op.getName().getStringRef() == "smelt.hc_mix") mixes.push_back(&op);
      }
      llvm::DenseMap<mlir::Operation*, int64_t> memo;
      std::function<int64_t(mlir::Operation*)> deadline = [&](mlir::Operation* op) -> int64_t {
        if (auto it = memo.find(op); it != memo.end()) return it->second;
        int64_t d = std::numeric_limits<int64_t>::max();
        for (mlir::Operation* u : op->getUsers()) {
          if (u->getBlock() != &block) continue;
          d = std::min(d, marked.contains(u) ? deadline(u) : pos[u]);
        }
        return memo[op] = d;
      };
      for (mlir::Operation* mix : mixes) {
        const int64_t due = deadline(mix);
        mlir::Operation* last = nullptr;
        for (mlir::Operation* p = mix->getNextNode(); p && pos[p] < due; p = p->getNextNode()) {
          if (!marked.contains(p)) continue;
          if (p->getName().getStringRef() == "smelt.swiglu_mlp" || p->getName().getStringRef() == "smelt.hc_mix" ||
              deadline(p) >= due)
            break;
          last = p;
        }
        if (last) mix->moveAfter(last);
      }
    }
  });
}

// Moves every marked smelt.engram_lookup of layer L, and the marked ops after it that take only its chain's results
// (its projection, a smelt.linear of 157 MB in V4.1-Flash), up to just after the first marked smelt.hc_mix of layer
// L - 1 (that layer's attention mix, which sink-mix placed after the attention's kv branch), when every operand of
// the chain is defined before that mix and no op passed shares a state with it. Hoisted, the chain sits after layer
// L - 1's FFN mix (the side op before it in program order) and the projection ran between the two layers beside the
// routed experts (H200, V4.1 slice: +11 us against the Engram op on the main stream); at the block's start, before
// the kv branch, it delayed layer 0's attention; after the attention mix it runs beside the attention's end and the
// FFN: 1.128 -> 1.123 ms a step (sm_90 path), 1.161 -> 1.144 (sm_80 path; docs/performance.md "Session 24").
void early_engram(mlir::ModuleOp module, const llvm::DenseSet<mlir::Operation*>& marked) {
  module.walk([&](mlir::func::FuncOp fn) {
    for (mlir::Block& block : fn.getBody()) {
      llvm::SmallVector<mlir::Operation*> lookups;
      for (mlir::Operation& op : block)
        if (marked.contains(&op) && op.getName().getStringRef() == "smelt.engram_lookup") lookups.push_back(&op);
      for (mlir::Operation* lookup : lookups) {
        auto layer = lookup->getAttrOfType<mlir::IntegerAttr>("layer");
        if (!layer) continue;
        mlir::Operation* anchor = nullptr;
        for (mlir::Operation& op : block) {
          if (&op == lookup) break;
          auto l = op.getAttrOfType<mlir::IntegerAttr>("layer");
          if (marked.contains(&op) && op.getName().getStringRef() == "smelt.hc_mix" && l &&
              l.getInt() == layer.getInt() - 1) {
            anchor = &op;
            break;
          }
        }
        if (!anchor) continue;
        // The chain: the lookup, then each later marked op whose operands all come from the chain.
        llvm::SmallVector<mlir::Operation*> chain{lookup};
        llvm::DenseSet<mlir::Operation*> in_chain{lookup};
        for (mlir::Operation* p = lookup->getNextNode(); p; p = p->getNextNode()) {
          if (!marked.contains(p) || p->getNumOperands() == 0) continue;
          bool fed = true;
          for (mlir::Value v : p->getOperands()) fed = fed && in_chain.contains(v.getDefiningOp());
          if (fed) chain.push_back(p), in_chain.insert(p);
        }
        bool ok = true;
        for (mlir::Operation* c : chain)
          for (mlir::Value v : c->getOperands()) {
            mlir::Operation* d = v.getDefiningOp();
            ok = ok && (!d || d->getBlock() != &block || in_chain.contains(d) || d == anchor || d->isBeforeInBlock(anchor));
          }
        for (mlir::Operation* p = anchor->getNextNode(); ok && p && p != chain.back(); p = p->getNextNode())
          if (!in_chain.contains(p))
            for (mlir::Operation* c : chain) ok = ok && !share_state(p, c);
        if (!ok) continue;
        mlir::Operation* after = anchor;
        for (mlir::Operation* c : chain) {
          c->moveAfter(after);
          after = c;
        }
      }
    }
  });
}

struct ScheduleStreams : impl::SmeltScheduleStreamsBase<ScheduleStreams> {
  using SmeltScheduleStreamsBase::SmeltScheduleStreamsBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    std::vector<std::string> entries(sideOps.begin(), sideOps.end());
    if (entries.empty()) entries = default_side_ops();
    std::vector<Selector> selectors;
    for (const std::string& e : entries) {
      if (e == "none") continue;  // side-ops=none: mark nothing
      selectors.push_back(Selector::parse(e));
    }
    mlir::Builder b(&getContext());
    llvm::DenseSet<mlir::Operation*> marked;
    module.walk([&](mlir::Operation* op) {
      if (!is_compute_op(op)) return;
      bool selected = false;
      for (const Selector& s : selectors) selected = selected || s.matches(op);
      // Followers: an op whose every operand comes from a side op joins them (the kv branch's norm and rope after
      // its GEMV), unless it has states; it would otherwise only wait for the side stream on the main one.
      bool follows = follow && !selected && op->getNumOperands() > 0;
      for (mlir::Value v : op->getOperands()) follows = follows && marked.contains(v.getDefiningOp());
      if (!selected && !follows) return;
      // A follower stops at an op with states (the window update after the kv branch): such an op goes to the side
      // stream only when selected.
      if (!selected && llvm::any_of(state_uses(op), [](const SymbolUse& s) { return bool(s.ref); })) return;
      op->setAttr("stream", b.getI64IntegerAttr(1));
      marked.insert(op);
    });
    if (hoist) hoist_marked(module, marked);
    if (sinkMix) sink_mixes(module, marked);
    if (earlyEngram) early_engram(module, marked);
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
