// smelt-verify: whole-module checks that no single op can make. Every weight / state reference resolves to
// the right kind of symbol with the right shape, @forward has the expected signature and holds only smelt
// ops, and each layer's schedule is sane. A further entry point (@dspark_draft, the V4.1 DSpark drafter) is
// checked the same way; it only reads state, which @forward writes. All problems are reported, not just the
// first.
#include <map>
#include <set>

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTVERIFY
#include "compiler/passes/Passes.h.inc"

namespace {

using mlir::Operation;

std::string shape_str(llvm::ArrayRef<int64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// A row tensor type tensor<?xN> of i32 or f32 (width < 0: any N).
bool is_rows(mlir::Type t, bool i32, int64_t width) {
  auto r = llvm::dyn_cast<mlir::RankedTensorType>(t);
  return r && r.getRank() == 2 && r.isDynamicDim(0) && !r.isDynamicDim(1) &&
         (width < 0 || r.getDimSize(1) == width) &&
         (i32 ? r.getElementType().isInteger(32) : r.getElementType().isF32());
}

int64_t layer_of(Operation* op) {
  auto a = op->getAttrOfType<mlir::IntegerAttr>("layer");
  return a ? a.getInt() : -1;
}

struct Verifier {
  mlir::ModuleOp module;
  mlir::SymbolTable symbols;
  bool ok = true;
  std::map<Operation*, int> weight_uses_count;
  std::map<Operation*, Operation*> state_writer;  // state -> the op that writes it
  int64_t max_seq_len = -1;
  std::set<std::string> draft_rings;  // window rings the @dspark_draft attention reads

  explicit Verifier(mlir::ModuleOp m) : module(m), symbols(m) {
    if (auto a = m->getAttrOfType<mlir::IntegerAttr>("smelt.max_seq_len")) max_seq_len = a.getInt();
  }

  mlir::InFlightDiagnostic error(Operation* op) {
    ok = false;
    return op->emitOpError();
  }

  void check_weights(Operation* op) {
    for (const SymbolUse& u : weight_uses(op)) {
      if (!u.ref) continue;
      Operation* sym = symbols.lookup(u.ref.getValue());
      if (!sym) {
        error(op) << "weight '" << u.role << "' refers to " << u.ref << ", which is not defined in the module";
        continue;
      }
      auto w = llvm::dyn_cast<WeightOp>(sym);
      if (!w) {
        error(op) << "weight '" << u.role << "' refers to " << u.ref << ", which is a " << sym->getName()
                  << ", not a smelt.weight";
        continue;
      }
      ++weight_uses_count[w];
      mlir::Type e = w.getTensorType().getElementType();
      bool integer = llvm::isa<mlir::IntegerType>(e), e8m0 = llvm::isa<mlir::Float8E8M0FNUType>(e);
      bool plain_float = llvm::isa<mlir::FloatType>(e) && !e8m0 && !llvm::isa<mlir::Float8E4M3FNType>(e);
      const char* want = nullptr;
      switch (u.cls) {
        case WeightClass::Float: want = plain_float ? nullptr : "a float"; break;
        case WeightClass::Integer: want = integer && !e.isInteger(8) ? nullptr : "an integer (i32 / i64)"; break;
        case WeightClass::Quantized:
          want = plain_float || llvm::isa<mlir::Float8E4M3FNType>(e) || e.isInteger(8)
                     ? nullptr
                     : "a float, f8E4M3FN or i8 (packed FP4)";
          break;
        case WeightClass::Scale: want = e8m0 ? nullptr : "an f8E8M0FNU (block scale)"; break;
      }
      if (want)
        error(op) << "weight '" << u.role << "' " << u.ref << " has element type " << e << "; expected " << want
                  << " type";
    }
  }

  // The shape a state must have for this op, rows < 0 = any.
  std::pair<int64_t, int64_t> expected_state_shape(Operation* op, llvm::StringRef role) {
    if (auto o = llvm::dyn_cast<WindowKvUpdateOp>(op)) return {o.getWindow(), cols(o.getKv())};
    if (auto o = llvm::dyn_cast<DsparkAttentionOp>(op)) return {o.getWindow(), o.getHeadDim()};
    if (auto o = llvm::dyn_cast<SparseAttentionOp>(op))
      return {role == "window_ring" ? o.getWindow() : -1, o.getHeadDim()};
    if (auto o = llvm::dyn_cast<IndexerTopkOp>(op)) return {-1, o.getHeadDim()};
    if (auto o = llvm::dyn_cast<IndexerV41Op>(op)) return {-1, o.getHeadDim()};
    if (auto o = llvm::dyn_cast<IndexerScoresOp>(op)) return {cols(o.getScores()), o.getHeadDim()};
    if (auto o = llvm::dyn_cast<EngramHashOp>(op)) return {o.getMaxNgram(), 1};
    if (auto o = llvm::dyn_cast<KvCompressorOp>(op)) {
      if (role == "ring") return {o.getRatio(), 2 * o.getHeadDim()};
      int64_t rows = max_seq_len > 0 ? max_seq_len / o.getRatio() : -1;
      return {rows, role == "index_pool" ? o.getIndexHeadDim() : o.getHeadDim()};
    }
    auto o = llvm::cast<CompressorOp>(op);
    if (role == "compressor_ring") return {2 * o.getRatio(), 2 * (1 + o.getOverlap()) * o.getHeadDim()};
    return {max_seq_len > 0 ? max_seq_len / o.getRatio() : -1, o.getHeadDim()};
  }

  void check_states(Operation* op) {
    for (const SymbolUse& u : state_uses(op)) {
      if (!u.ref) continue;
      Operation* sym = symbols.lookup(u.ref.getValue());
      auto s = llvm::dyn_cast_or_null<StateOp>(sym);
      if (!s) {
        error(op) << "state '" << u.role << "' refers to " << u.ref << ", which "
                  << (sym ? "is a " + sym->getName().getStringRef().str() + ", not a smelt.state"
                          : std::string("is not defined in the module"));
        continue;
      }
      bool writes = writes_states(op);
      if (writes) {
        auto [it, fresh] = state_writer.emplace(s, op);
        if (!fresh) {
          error(op) << "writes state " << u.ref << ", which is already written by another op";
          it->second->emitRemark() << "first writer";
        }
      }
      if (!llvm::is_contained(u.kinds, s.getKind())) {
        auto d = error(op);
        d << "state '" << u.role << "' " << u.ref << " has kind " << s.getKind() << "; expected ";
        llvm::interleave(u.kinds, d, " or ");
        continue;
      }
      // Writers own their state; readers may also read an earlier layer's pools (a V4.1 KV source's).
      bool shared_read = !writes && (u.role == "pool" || u.role == "index_pool") && s.getLayer() < layer_of(op);
      if (s.getLayer() != layer_of(op) && !shared_read && !(llvm::isa<EngramHashOp>(op) && layer_of(op) < 0))
        error(op) << "uses state " << u.ref << " of layer " << s.getLayer() << " from layer " << layer_of(op);
      auto [rows, width] = expected_state_shape(op, u.role);
      auto shape = s.getTensorType().getShape();
      if (shape[1] != width || (rows >= 0 && shape[0] != rows))
        error(op) << "state '" << u.role << "' " << u.ref << " has shape " << shape_str(shape) << " but this op needs ["
                  << (rows >= 0 ? std::to_string(rows) : "?") << "," << width << "]";
      if (!writes && (u.role == "pool" || u.role == "index_pool")) {
        if (!state_writer.count(s))
          error(op) << "reads state " << u.ref << " before any compressor in this layer writes it";
      }
    }
  }

  void check_signature(mlir::func::FuncOp f) {
    auto ft = f.getFunctionType();
    if (ft.getNumInputs() != 1 || !is_rows(ft.getInput(0), true, 1) || ft.getNumResults() != 1 ||
        !is_rows(ft.getResult(0), false, -1)) {
      ok = false;
      f.emitOpError() << "@forward must have the type (tensor<?x1xi32>) -> tensor<?xVxf32>, got " << ft;
    }
  }

  // One layer's schedule: exactly one attention whose window ring is updated after it (reads positions < p0
  // from the ring, so the update must come later), and matching compress ratios.
  void check_layer(int64_t layer, llvm::ArrayRef<Operation*> ops) {
    SparseAttentionOp attn;
    WindowKvUpdateOp update;
    for (Operation* op : ops) {
      if (auto a = llvm::dyn_cast<SparseAttentionOp>(op)) {
        if (attn) error(op) << "is the second sparse_attention of layer " << layer;
        attn = a;
      } else if (auto u = llvm::dyn_cast<WindowKvUpdateOp>(op)) {
        if (update) error(op) << "is the second window_kv_update of layer " << layer;
        // (a DSpark stage's ring is read by @dspark_draft, after @forward wrote it)
        if (!attn && !draft_rings.count(u.getWindowRingAttr().getValue().str()))
          error(op) << "updates the window ring before the layer's sparse_attention reads it";
        update = u;
      }
    }
    Operation* first = ops.front();
    // A DSpark stage's attention runs in @dspark_draft; @forward only writes the stage's window ring.
    if (!attn && update && draft_rings.count(update.getWindowRingAttr().getValue().str())) return;
    if (!attn) {
      ok = false;
      first->emitError() << "layer " << layer << " has no smelt.sparse_attention";
      return;
    }
    if (!update) {
      error(attn) << "layer " << layer << " never updates its window ring (no smelt.window_kv_update)";
      return;
    }
    if (update.getWindowRingAttr() != attn.getWindowRingAttr())
      error(update) << "updates " << update.getWindowRingAttr() << " but the attention reads "
                    << attn.getWindowRingAttr();
    if (update.getKv() != attn.getKv()) error(update) << "stores a different kv than the attention attends to";
    for (Operation* op : ops) {
      int64_t ratio = -1;
      if (auto c = llvm::dyn_cast<CompressorOp>(op)) ratio = c.getRatio();
      if (auto c = llvm::dyn_cast<KvCompressorOp>(op)) ratio = c.getRatio();
      if (ratio >= 0 && ratio != attn.getRatio())
        error(op) << "has ratio " << ratio << " but the layer's attention has ratio " << attn.getRatio();
    }
    if (auto idx = attn.getIdx()) {
      int64_t ratio = -1;
      if (auto topk = idx.getDefiningOp<IndexerTopkOp>()) ratio = topk.getRatio();
      if (auto v41 = idx.getDefiningOp<IndexerV41Op>()) ratio = v41.getRatio();
      if (auto sel = idx.getDefiningOp<IndexerSelectOp>()) ratio = sel.getRatio();
      if (ratio < 0) error(attn) << "idx must come from a smelt.indexer_topk, smelt.indexer_v41 or smelt.indexer_select";
      else if (ratio != attn.getRatio())
        error(attn) << "idx comes from an indexer with ratio " << ratio << ", attention has " << attn.getRatio();
    }
  }

  // @dspark_draft(ids [?,1] i32) -> (draft ids [?,1] i32, confidence [?,1] f32, logits [?,V] f32): smelt ops
  // only, no state writes, layers in order with one dspark_attention each, one dspark_head.
  void check_draft(mlir::func::FuncOp f) {
    auto ft = f.getFunctionType();
    if (ft.getNumInputs() != 1 || !is_rows(ft.getInput(0), true, 1) || ft.getNumResults() != 3 ||
        !is_rows(ft.getResult(0), true, 1) || !is_rows(ft.getResult(1), false, 1) ||
        !is_rows(ft.getResult(2), false, -1)) {
      ok = false;
      f.emitOpError() << "@dspark_draft must have the type (tensor<?x1xi32>) -> (tensor<?x1xi32>, tensor<?x1xf32>, "
                         "tensor<?xVxf32>), got "
                      << ft;
    }
    if (!f.getBody().hasOneBlock()) {
      ok = false;
      f.emitOpError() << "@dspark_draft must have exactly one block";
      return;
    }
    std::map<int64_t, int> attentions;
    int heads = 0;
    int64_t last_layer = -1;
    for (Operation& op : f.getBody().front()) {
      if (llvm::isa<mlir::func::ReturnOp>(op)) continue;
      if (!is_compute_op(&op)) {
        error(&op) << "is not a smelt compute op; @dspark_draft holds only smelt ops";
        continue;
      }
      if (writes_states(&op)) {
        error(&op) << "writes state; @dspark_draft only reads what @forward wrote";
        continue;
      }
      int64_t layer = layer_of(&op);
      if (layer >= 0 && layer < last_layer) error(&op) << "of layer " << layer << " is out of order";
      last_layer = std::max(last_layer, layer);
      if (llvm::isa<DsparkAttentionOp>(op)) ++attentions[layer];
      if (llvm::isa<DsparkHeadOp>(op)) ++heads;
      if (llvm::isa<SparseAttentionOp>(op)) error(&op) << "belongs in @forward";
      check_weights(&op);
      check_states(&op);
    }
    for (auto [layer, n] : attentions)
      if (layer < 0 || n != 1) {
        ok = false;
        f.emitOpError() << "layer " << layer << " of @dspark_draft has " << n << " dspark_attention ops, expected 1";
      }
    if (heads != 1) {
      ok = false;
      f.emitOpError() << "@dspark_draft needs exactly one smelt.dspark_head, has " << heads;
    }
  }

  // A partitioned module (smelt-partition): every rank's forward (and drafter) is checked like @forward, with
  // its own state writers (each rank owns its copy of every state it uses); a stage before the last returns
  // nothing; collectives are compute ops like any other.
  void run_partitioned() {
    std::set<Operation*> written;
    std::map<int64_t, std::pair<mlir::func::FuncOp, mlir::func::FuncOp>> ranks;
    for (auto g : module.getOps<mlir::func::FuncOp>()) {
      auto d = g->getAttrOfType<mlir::DictionaryAttr>("smelt.rank");
      auto i = d ? d.getAs<mlir::IntegerAttr>("index") : nullptr;
      if (!i) {
        error(g) << "of a partitioned module has no smelt.rank {index, ...}";
        continue;
      }
      auto& slot = ranks[i.getInt()];
      if (g.getSymName().ends_with("_forward")) slot.first = g;
      else if (g.getSymName().ends_with("_dspark_draft")) slot.second = g;
      else error(g) << "is an unknown entry point of a partitioned module (expected @rank{r}_forward / _dspark_draft)";
    }
    for (auto& [index, fns] : ranks) {
      state_writer.clear();
      draft_rings.clear();
      if (fns.second) fns.second.walk([&](DsparkAttentionOp a) { draft_rings.insert(a.getWindowRingAttr().getValue().str()); });
      if (!fns.first) {
        ok = false;
        module.emitError() << "smelt-verify: rank " << index << " has no forward function";
        continue;
      }
      check_forward(fns.first, true);
      if (fns.second) check_draft(fns.second);
      for (auto& [st, op] : state_writer) written.insert(st);
    }
    finish(written);
  }

  void finish(const std::set<Operation*>& written) {
    for (auto w : module.getOps<WeightOp>())
      if (!weight_uses_count.count(w)) w.emitWarning() << "weight @" << w.getSymName() << " is never used";
    for (auto s : module.getOps<StateOp>())
      if (!written.count(s)) {
        ok = false;
        s.emitError() << "state @" << s.getSymName() << " is never written (no compressor / window_kv_update)";
      }
  }

  void run() {
    if (module->hasAttr("smelt.tp")) return run_partitioned();
    module.walk([&](DsparkAttentionOp a) { draft_rings.insert(a.getWindowRingAttr().getValue().str()); });
    auto f = symbols.lookup<mlir::func::FuncOp>("forward");
    if (!f) {
      ok = false;
      module.emitError() << "smelt-verify: the module has no func.func @forward";
      return;
    }
    check_forward(f, false);
    // Further entry points, after @forward so that the states they read have their writers recorded.
    for (auto g : module.getOps<mlir::func::FuncOp>()) {
      if (g == f) continue;
      if (g.getSymName() == "dspark_draft") check_draft(g);
      else error(g) << "is an unknown entry point (expected @forward and optionally @dspark_draft)";
    }
    std::set<Operation*> written;
    for (auto& [st, op] : state_writer) written.insert(st);
    finish(written);
  }

  // @forward, or with `rank` one rank's forward (which may return nothing: a stage before the last).
  void check_forward(mlir::func::FuncOp f, bool rank) {
    auto ft = f.getFunctionType();
    if (!rank || ft.getNumResults() != 0 || ft.getNumInputs() != 1 || !is_rows(ft.getInput(0), true, 1))
      check_signature(f);
    if (!f.getBody().hasOneBlock()) {
      ok = false;
      f.emitOpError() << "@" << f.getSymName() << " must have exactly one block";
      return;
    }
    std::map<int64_t, std::vector<Operation*>> layers;
    int64_t last_layer = -1;
    bool after_layers = false;
    for (Operation& op : f.getBody().front()) {
      if (llvm::isa<mlir::func::ReturnOp>(op)) continue;
      if (!is_compute_op(&op)) {
        error(&op) << "is not a smelt compute op; @forward holds only smelt ops";
        continue;
      }
      int64_t layer = layer_of(&op);
      if (layer >= 0) {
        if (after_layers || layer < last_layer)
          error(&op) << "of layer " << layer << " is out of order (layers run in order, head after the last layer)";
        last_layer = std::max(last_layer, layer);
        layers[layer].push_back(&op);
      } else if (last_layer >= 0) {
        after_layers = true;
      }
      if (llvm::isa<DsparkAttentionOp, DsparkHeadOp>(op)) error(&op) << "belongs in @dspark_draft, not @forward";
      check_weights(&op);
      check_states(&op);
    }
    for (auto& [layer, ops] : layers) check_layer(layer, ops);
  }
};

struct SmeltVerifyPass : impl::SmeltVerifyBase<SmeltVerifyPass> {
  void runOnOperation() override {
    Verifier v(getOperation());
    v.run();
    if (!v.ok) return signalPassFailure();
    record_pass(getOperation(), getArgument());
    markAllAnalysesPreserved();
  }
};

}  // namespace
}  // namespace smelt
