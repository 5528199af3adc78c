// smelt-partition{tp pp shares stages archs}: one function per rank. Pipeline stages take contiguous layer ranges
// (explicit `stages`, else balanced by weight bytes); whatever one stage computes and a later one reads (the hc
// streams, V4.1's pipelined `pre`) crosses each boundary by smelt.send / smelt.recv, in definition order. Cuts
// that would separate a layer from the KV / index / candidate source it shares, or a DSpark target layer from
// the last stage, are refused with the nearest legal --stages. Each stage's function is then split across its TP
// ranks by partition_tp.cc. Ops that depend only on the token ids (embedding, the Engram hash) are recomputed by
// every stage that needs them: every rank gets the chunk's ids.
#include <map>
#include <numeric>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

#include "compiler/dialect/roles.h"
#include "compiler/passes/partition.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTPARTITION
#include "compiler/passes/Passes.h.inc"

namespace {

using mlir::Operation;
using mlir::Value;

int64_t layer_of(Operation* op) {
  auto a = op->getAttrOfType<mlir::IntegerAttr>("layer");
  return a ? a.getInt() : -1;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

struct Partition : impl::SmeltPartitionBase<Partition> {
  using SmeltPartitionBase::SmeltPartitionBase;

  mlir::ModuleOp module;
  mlir::func::FuncOp forward;
  std::vector<Operation*> ops;       // @forward's ops without the return
  llvm::DenseMap<Operation*, size_t> index;
  int64_t n_trunk = 0;               // layers with an attention (DSpark stages have layer >= n_trunk)
  std::vector<int64_t> pos;          // per op: -1 prologue, layer, or n_trunk (head, DSpark): what a cut separates
  std::vector<bool> recompute;       // per op: depends on the token ids only
  std::map<int64_t, std::string> illegal;  // cut before layer c -> why not

  void forbid(int64_t lo, int64_t hi, const std::string& why) {  // cuts c with lo < c <= hi
    for (int64_t c = std::max<int64_t>(lo + 1, 1); c <= std::min(hi, n_trunk - 1); ++c) illegal.emplace(c, why);
  }

  std::string refused_value(Value v, Operation* use) {
    Operation* def = v.getDefiningOp();
    std::string L = std::to_string(layer_of(use)), S = std::to_string(layer_of(def));
    if (auto ix = llvm::dyn_cast<IndexerV41Op>(def))
      return v == ix.getCandOut() ? "layer " + L + " uses the candidate blocks of layer " + S + " (its candidate source)"
                                  : "layer " + L + " uses the top-k indices of layer " + S + " (its index source)";
    if (llvm::isa<IndexerTopkOp>(def)) return "layer " + L + " uses the top-k indices of layer " + S;
    if (auto sel = llvm::dyn_cast<IndexerSelectOp>(def))  // (the TP form of either indexer)
      return v == sel.getCandOut() ? "layer " + L + " uses the candidate blocks of layer " + S + " (its candidate source)"
                                   : "layer " + L + " uses the top-k indices of layer " + S + " (its index source)";
    if (llvm::isa<HcMeanOp>(def)) return "layer " + S + " is a DSpark target layer and must be on the last stage";
    return "";
  }

  void analyse() {
    for (Operation& op : forward.getBody().front().without_terminator()) {
      index[&op] = ops.size();
      ops.push_back(&op);
    }
    forward.walk([&](SparseAttentionOp a) { n_trunk = std::max(n_trunk, layer_of(a) + 1); });
    bool seen_trunk = false;
    for (Operation* op : ops) {
      int64_t l = layer_of(op);
      bool ids_only = l < 0 && !seen_trunk && llvm::all_of(op->getOperands(), [](Value v) {
                        return llvm::isa<mlir::BlockArgument>(v);
                      });
      if (l >= 0 && l < n_trunk) seen_trunk = true;
      recompute.push_back(ids_only);
      pos.push_back(l >= n_trunk || (l < 0 && seen_trunk) ? n_trunk : l < 0 ? -1 : l);
    }
    // Values a cut must not separate.
    for (Operation* op : ops)
      for (Value v : op->getOperands()) {
        Operation* d = v.getDefiningOp();
        if (!d || recompute[index[d]] || pos[index[d]] >= pos[index[op]]) continue;
        std::string why = refused_value(v, op);
        if (why.empty() && !llvm::cast<mlir::RankedTensorType>(v.getType()).getElementType().isF32())
          why = "layer " + std::to_string(layer_of(op)) + " reads an integer value of layer " +
                std::to_string(layer_of(d));
        if (!why.empty()) forbid(pos[index[d]], pos[index[op]], why);
      }
    // States read or written by ops of several layers (V4.1 KV / index sources).
    std::map<std::string, std::pair<int64_t, int64_t>> span;
    std::map<std::string, std::string> reader;
    for (Operation* op : ops)
      for (const SymbolUse& u : state_uses(op)) {
        if (!u.ref) continue;
        auto [it, fresh] = span.emplace(u.ref.getValue().str(), std::make_pair(pos[index[op]], pos[index[op]]));
        it->second.first = std::min(it->second.first, pos[index[op]]);
        if (pos[index[op]] > it->second.second) {
          it->second.second = pos[index[op]];
          reader[u.ref.getValue().str()] = "layer " + std::to_string(layer_of(op)) + " reads " + u.role + " @" +
                                           u.ref.getValue().str() + " of layer " + std::to_string(it->second.first) +
                                           (u.role == "index_pool" ? " (its index source)" : " (its KV source)");
        }
      }
    for (auto& [name, s] : span)
      if (s.second > s.first) forbid(s.first, s.second, reader[name]);
  }

  std::vector<int64_t> legal_cuts() {
    std::vector<int64_t> c;
    for (int64_t i = 1; i < n_trunk; ++i)
      if (!illegal.count(i)) c.push_back(i);
    return c;
  }

  // Cuts as close as possible to `want` (strictly increasing, from the legal ones); empty if too few.
  std::vector<int64_t> nearest(const std::vector<int64_t>& want) {
    std::vector<int64_t> legal = legal_cuts(), out;
    if (legal.size() < want.size()) return {};
    size_t from = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      size_t last = legal.size() - (want.size() - k);  // leave room for the remaining cuts
      size_t best = from;
      for (size_t i = from; i <= last; ++i)
        if (std::llabs(legal[i] - want[k]) < std::llabs(legal[best] - want[k])) best = i;
      out.push_back(legal[best]);
      from = best + 1;
    }
    return out;
  }

  std::vector<int64_t> counts(const std::vector<int64_t>& cuts) {
    std::vector<int64_t> c;
    int64_t at = 0;
    for (int64_t x : cuts) c.push_back(x - at), at = x;
    c.push_back(n_trunk - at);
    return c;
  }

  // Cuts balanced by the bytes of the weights each layer reads (prologue -> stage 0, head / DSpark -> last).
  std::vector<int64_t> balanced_cuts() {
    mlir::SymbolTable symbols(module);
    std::vector<double> bytes(size_t(n_trunk) + 2, 0);  // index pos + 1
    llvm::DenseSet<Operation*> counted;
    for (Operation* op : ops)
      for (const SymbolUse& u : weight_uses(op)) {
        auto w = u.ref ? symbols.lookup<WeightOp>(u.ref.getValue()) : WeightOp();
        if (!w || !counted.insert(w).second) continue;
        auto t = w.getTensorType();
        bytes[size_t(pos[index[op]] + 1)] += double(t.getNumElements()) * double(t.getElementTypeBitWidth()) / 8;
      }
    double total = std::accumulate(bytes.begin(), bytes.end(), 0.0);
    std::vector<int64_t> want;
    for (int64_t k = 1; k < pp; ++k) {  // the cut whose bytes before it are closest to k/pp of the total
      double target = total * double(k) / double(pp), before = bytes[0];
      int64_t best = 1;
      double best_d = 1e300;
      for (int64_t c = 1; c < n_trunk; ++c) {
        before += bytes[size_t(c)];
        if (std::abs(before - target) < best_d) best_d = std::abs(before - target), best = c;
      }
      want.push_back(best);
    }
    return nearest(want);
  }

  bool fail(const std::string& msg) {
    module.emitError() << "smelt-partition: " << msg;
    signalPassFailure();
    return false;
  }

  bool stage_cuts(std::vector<int64_t>& cuts) {
    if (pp == 1) return true;
    if (n_trunk < pp)
      return fail("--pp " + std::to_string(pp) + ": the model has only " + std::to_string(n_trunk) +
                  " layers; nearest: --pp " + std::to_string(n_trunk));
    std::vector<int64_t> legal = legal_cuts();
    if (int64_t(legal.size()) < pp - 1) {
      std::string why = illegal.empty() ? "" : " (" + illegal.begin()->second + ")";
      return fail("--pp " + std::to_string(pp) + " needs " + std::to_string(pp - 1) + " cuts between layers but only " +
                  std::to_string(legal.size()) + " are legal (before layers " + join(legal) + ")" + why +
                  "; nearest: --pp " + std::to_string(legal.size() + 1));
    }
    if (stages.empty()) {
      cuts = balanced_cuts();
      return true;
    }
    if (int64_t(stages.size()) != pp)
      return fail("stages lists " + std::to_string(stages.size()) + " layer counts for " + std::to_string(pp) + " stages");
    int64_t at = 0;
    for (int64_t n : stages) {
      if (n < 1) return fail("every stage needs at least one layer, got --stages " + join({stages.begin(), stages.end()}));
      at += n;
      cuts.push_back(at);
    }
    cuts.pop_back();
    if (at != n_trunk)
      return fail("--stages " + join({stages.begin(), stages.end()}) + " covers " + std::to_string(at) +
                  " layers but the model has " + std::to_string(n_trunk));
    for (int64_t c : cuts)
      if (illegal.count(c)) {
        std::vector<int64_t> near = nearest(cuts);
        return fail("--stages " + join({stages.begin(), stages.end()}) + " cuts before layer " + std::to_string(c) +
                    ", but " + illegal[c] + "; nearest: --stages " + join(counts(near)));
      }
    return true;
  }

  // @forward's ops for stage s of rank r: receives what earlier stages computed, sends what later ones need.
  mlir::func::FuncOp stage_function(int64_t s, int64_t t, const std::vector<int64_t>& stage_of,
                                    const std::vector<std::vector<std::pair<size_t, unsigned>>>& boundary) {
    mlir::OpBuilder b(forward);
    auto g = llvm::cast<mlir::func::FuncOp>(b.clone(*forward.getOperation()));
    mlir::Block& body = g.getBody().front();
    std::vector<Operation*> mine;
    for (Operation& op : body.without_terminator()) mine.push_back(&op);
    auto keep = [&](size_t i) {
      if (!recompute[i]) return stage_of[i] == s;
      return llvm::any_of(ops[i]->getUsers(), [&](Operation* u) {
        return !index.count(u) ? s == pp - 1 : !recompute[index[u]] && stage_of[index[u]] == s;
      });
    };
    auto rank_of = [&](int64_t stage) { return stage * tp + t; };
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    llvm::DenseMap<std::pair<size_t, unsigned>, Value> received;
    if (s > 0) {
      b.setInsertionPointToStart(&body);
      for (auto [k, v] : llvm::enumerate(boundary[size_t(s - 1)])) {
        Value local = mine[v.first]->getResult(v.second);
        mlir::OperationState st(g.getLoc(), "smelt.recv");
        st.addTypes(local.getType());
        st.addAttribute("peer", i64(rank_of(s - 1)));
        st.addAttribute("tag", i64(int64_t(k)));
        Value got = b.create(st)->getResult(0);
        local.replaceAllUsesWith(got);
        received[v] = got;
      }
    }
    auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
    if (s < pp - 1) {
      b.setInsertionPoint(ret);
      for (auto [k, v] : llvm::enumerate(boundary[size_t(s)])) {
        Value x = received.count(v) ? received[v] : mine[v.first]->getResult(v.second);
        mlir::OperationState st(g.getLoc(), "smelt.send");
        st.addOperands(x);
        st.addAttribute("peer", i64(rank_of(s + 1)));
        st.addAttribute("tag", i64(int64_t(k)));
        b.create(st);
      }
      mlir::func::ReturnOp::create(b, g.getLoc());
      ret->erase();
      g.setFunctionType(b.getFunctionType(g.getFunctionType().getInputs(), {}));
    }
    for (size_t i = mine.size(); i-- > 0;)
      if (!keep(i)) {
        mine[i]->dropAllUses();  // only dropped ops of other stages used it
        mine[i]->erase();
      }
    return g;
  }

  void runOnOperation() override {
    module = getOperation();
    if (tp < 1 || pp < 1) return (void)fail("tp and pp must be >= 1");
    forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
    if (!forward || forward.getBody().empty()) return (void)fail("the module has no @forward (already partitioned?)");
    auto draft = module.lookupSymbol<mlir::func::FuncOp>("dspark_draft");
    // One share per TP rank (every stage alike), or one per rank (stage-major: each stage's TP group its own).
    std::vector<double> share(size_t(tp * pp), 1.0);
    if (!shares.empty()) {
      if (int64_t(shares.size()) != tp && int64_t(shares.size()) != tp * pp)
        return (void)fail("shares lists " + std::to_string(shares.size()) + " values for --tp " + std::to_string(tp) +
                          " (expected one per TP rank, or one per rank: " + std::to_string(tp * pp) + ")");
      for (size_t i = 0; i < share.size(); ++i) {
        int64_t v = shares[int64_t(shares.size()) == tp * pp ? i : i % size_t(tp)];
        if (v <= 0) return (void)fail("shares must be positive");
        share[i] = double(v);
      }
    }
    std::vector<std::string> arch(size_t(tp * pp), "cpu");
    if (archs.size() == 1) arch.assign(arch.size(), archs[0]);
    else if (!archs.empty() && int64_t(archs.size()) != tp * pp)
      return (void)fail("archs lists " + std::to_string(archs.size()) + " values for " + std::to_string(tp * pp) + " ranks");
    else if (!archs.empty()) arch.assign(archs.begin(), archs.end());

    analyse();
    std::vector<int64_t> cuts;
    if (!stage_cuts(cuts)) return;
    auto stage_of_pos = [&](int64_t p) {
      if (p < 0) return int64_t(0);
      if (p >= n_trunk) return int64_t(pp - 1);
      return int64_t(std::upper_bound(cuts.begin(), cuts.end(), p) - cuts.begin());
    };
    std::vector<int64_t> stage_of;
    for (size_t i = 0; i < ops.size(); ++i) stage_of.push_back(stage_of_pos(pos[i]));
    // boundary[b]: values of stages <= b that stages > b read, in definition order.
    std::vector<std::vector<std::pair<size_t, unsigned>>> boundary(size_t(std::max<int64_t>(pp - 1, 0)));
    for (size_t i = 0; i < ops.size(); ++i) {
      if (recompute[i]) continue;
      for (mlir::OpResult r : ops[i]->getResults()) {
        int64_t last = stage_of[i];
        for (Operation* u : r.getUsers()) last = std::max(last, index.count(u) ? stage_of[index[u]] : pp - 1);
        for (int64_t bnd = stage_of[i]; bnd < last; ++bnd) boundary[size_t(bnd)].push_back({i, r.getResultNumber()});
      }
    }

    mlir::Builder b(&getContext());
    mlir::SymbolTable symbols(module);
    for (int64_t s = 0; s < pp; ++s) {
      partition::TpRank tr;
      tr.shares.assign(share.begin() + s * tp, share.begin() + (s + 1) * tp);
      const double total = std::accumulate(tr.shares.begin(), tr.shares.end(), 0.0);
      for (int64_t t = 0; t < tp; ++t) tr.group.push_back(s * tp + t);
      for (int64_t t = 0; t < tp; ++t) {
        const int64_t r = s * tp + t;
        auto rank_attr = b.getDictionaryAttr(
            {b.getNamedAttr("index", b.getI64IntegerAttr(r)), b.getNamedAttr("stage", b.getI64IntegerAttr(s)),
             b.getNamedAttr("tp_rank", b.getI64IntegerAttr(t)), b.getNamedAttr("arch", b.getStringAttr(arch[size_t(r)])),
             b.getNamedAttr("share", b.getF64FloatAttr(tr.shares[size_t(t)] / total))});
        mlir::func::FuncOp g = stage_function(s, t, stage_of, boundary);
        g.setSymName("rank" + std::to_string(r) + "_forward");
        g->setAttr("smelt.rank", rank_attr);
        tr.tp_rank = t;
        if (tp > 1)
          if (std::string err = partition::tp_rewrite(symbols, g, tr); !err.empty()) return (void)fail(err);
        if (draft && s == pp - 1) {  // the drafter runs replicated on every last-stage rank (docs/partition.md)
          mlir::OpBuilder ob(forward);
          auto d = llvm::cast<mlir::func::FuncOp>(ob.clone(*draft.getOperation()));
          d.setSymName("rank" + std::to_string(r) + "_dspark_draft");
          d->setAttr("smelt.rank", rank_attr);
        }
      }
    }
    forward->erase();
    if (draft) draft->erase();
    // Weights no rank uses any more (the unsplit originals of sharded weights).
    llvm::DenseSet<mlir::StringAttr> used;
    for (auto g : module.getOps<mlir::func::FuncOp>())
      g.walk([&](Operation* op) {
        for (const SymbolUse& u : weight_uses(op))
          if (u.ref) used.insert(u.ref.getAttr());
      });
    for (auto w : llvm::make_early_inc_range(module.getOps<WeightOp>()))
      if (!used.contains(w.getSymNameAttr())) w->erase();
    module->setAttr("smelt.tp", b.getI64IntegerAttr(tp));
    module->setAttr("smelt.pp", b.getI64IntegerAttr(pp));
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
