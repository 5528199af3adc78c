// smelt-plan-memory: every SSA value of @forward gets a slot in one arena (so does every value of a further
// entry point such as @dspark_draft, planned on its own over the same arena). Live range of a value = [index
// of its defining op, index of its last user] in program order (the ids argument is defined at -1, the
// returned value lives to the return). Values are placed in definition order at the lowest offset that does not
// overlap any placed value whose live range overlaps its own (first fit). Ranges are closed, so an op's
// outputs never alias its inputs (the input's range reaches the op) nor each other (same start).
// Side-stream ops (`stream = 1`, smelt-schedule-streams) run beside the main stream's ops that follow them. With
// side-live=results (the default) every value a side op writes stays live until the side stream is known to be done
// with it on the main stream: the first main op after it that reads a result of it or of a later side op (the side
// stream runs in order; the cuda runtime makes that op wait), else the end. Without it (side-live=none) a main op
// placed in the meantime may take such a buffer, and the runtime then holds it back until the side op finished:
// wq_a's output took the kv branch's bytes on the sm_80-path plan, so wq_a waited ~14 us a layer for the branch's
// GEMV, norm and rope; results: 1.251 -> 1.213 ms a step (session 18).
// side-live=all keeps what a side op reads live too: the same on the sm_80 plan and 7 us slower on the sm_90 plan,
// whose wq_b then no longer waited for the kv branch's GEMV and, launched early, took the slots that GEMV needed.
#include <map>

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTPLANMEMORY
#include "compiler/passes/Passes.h.inc"

namespace {

constexpr int64_t kAlign = 64;

struct Slot {
  mlir::Value value;
  int64_t begin, end;  // live range (op indices, inclusive)
  int64_t bytes;
  int64_t offset = -1;
};

bool on_side(mlir::Operation* op) {
  auto s = op->getAttrOfType<mlir::IntegerAttr>("stream");
  return s && s.getInt() == 1;
}

// The header's rule for side ops: each value a side op S writes (and, with operands, reads) lives at least until
// join(S), the first main op after S with an operand defined by S or by a later side op (n: the end of the function).
void extend_side_values(mlir::Block& body, const llvm::DenseMap<mlir::Operation*, int64_t>& index, int64_t n,
                        bool operands, std::vector<Slot>& slots) {
  std::vector<mlir::Operation*> ops;
  for (mlir::Operation& op : body) ops.push_back(&op);
  // latest[i]: for main op i, the index of the latest side op whose result it reads (-1: none).
  std::vector<int64_t> latest(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (on_side(ops[i])) continue;
    for (mlir::Value v : ops[i]->getOperands())
      if (mlir::Operation* d = v.getDefiningOp(); d && d->getBlock() == &body && on_side(d))
        latest[i] = std::max(latest[i], index.lookup(d));
  }
  llvm::DenseMap<mlir::Value, int64_t> until;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (!on_side(ops[k])) continue;
    int64_t join = n;
    for (size_t i = k + 1; i < ops.size(); ++i)
      if (latest[i] >= int64_t(k)) {
        join = int64_t(i);
        break;
      }
    auto extend = [&](mlir::Value v) { until[v] = std::max(until.lookup(v), join); };
    if (operands)
      for (mlir::Value v : ops[k]->getOperands()) extend(v);
    for (mlir::Value v : ops[k]->getResults()) extend(v);
  }
  for (Slot& s : slots)
    if (auto it = until.find(s.value); it != until.end()) s.end = std::max(s.end, it->second);
}

// seam-live: the operands of a main-stream hc_expand (and of the add whose sum it expands) live until the
// hc_collapse of its streams when only side ops lie between them, the group the cuda runtime runs as one
// smelt_hc_seam* launch (runtime/cuda/backend.cc plan_seams): that launch reads them while it writes the collapse's
// output and the streams, so those must not take their bytes (V4.1-Flash slice: 3 of its 7 seams fused without it).
void extend_seam_values(mlir::Block& body, const llvm::DenseMap<mlir::Operation*, int64_t>& index,
                        std::vector<Slot>& slots) {
  auto main_before = [&](mlir::Operation* op) {  // the previous main-stream op in the block
    mlir::Operation* p = op->getPrevNode();
    while (p && on_side(p)) p = p->getPrevNode();
    return p;
  };
  llvm::DenseMap<mlir::Value, int64_t> until;
  for (mlir::Operation& op : body) {
    if (on_side(&op) || op.getName().getStringRef() != "smelt.hc_collapse" || op.getNumOperands() == 0) continue;
    mlir::Operation* e = op.getOperand(0).getDefiningOp();
    if (!e || e != main_before(&op) || e->getName().getStringRef() != "smelt.hc_expand") continue;
    llvm::SmallVector<mlir::Operation*, 2> group{e};
    if (e->getNumOperands() > 1)
      if (mlir::Operation* a = e->getOperand(1).getDefiningOp();
          a && a == main_before(e) && a->getName().getStringRef() == "smelt.add")
        group.push_back(a);
    for (mlir::Operation* g : group)
      for (mlir::Value v : g->getOperands()) until[v] = std::max(until.lookup(v), index.lookup(&op));
  }
  for (Slot& s : slots)
    if (auto it = until.find(s.value); it != until.end()) s.end = std::max(s.end, it->second);
}

struct PlanMemory : impl::SmeltPlanMemoryBase<PlanMemory> {
  using SmeltPlanMemoryBase::SmeltPlanMemoryBase;

  // Places the values of one function; `arena` grows to the bytes it needs.
  bool plan(mlir::func::FuncOp f, mlir::Builder& b, int64_t& arena) {
    mlir::Block& body = f.getBody().front();
    llvm::DenseMap<mlir::Operation*, int64_t> index;
    int64_t n = 0;
    for (mlir::Operation& op : body) index[&op] = n++;

    std::vector<Slot> slots;
    bool ok = true;
    auto add = [&](mlir::Value v, int64_t begin) {
      auto t = llvm::cast<mlir::RankedTensorType>(v.getType());
      unsigned bits = t.getElementType().getIntOrFloatBitWidth();
      if (t.getRank() != 2 || t.isDynamicDim(1) || bits % 8) {
        ok = false;
        mlir::emitError(v.getLoc()) << "smelt-plan-memory: cannot size a buffer of type " << t;
        return;
      }
      int64_t end = begin;
      for (mlir::Operation* user : v.getUsers()) end = std::max(end, index.lookup(user));
      int64_t bytes = maxRows * t.getDimSize(1) * (bits / 8);
      slots.push_back({v, begin, end, (bytes + kAlign - 1) / kAlign * kAlign});
    };
    for (mlir::BlockArgument a : body.getArguments()) add(a, -1);
    for (mlir::Operation& op : body)
      for (mlir::Value r : op.getResults()) add(r, index[&op]);
    if (!ok) return false;
    if (sideLive != "none") extend_side_values(body, index, n, sideLive == "all", slots);
    if (seamLive) extend_seam_values(body, index, slots);

    for (size_t i = 0; i < slots.size(); ++i) {
      Slot& s = slots[i];
      std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, offset + bytes) of time-overlapping slots
      for (size_t j = 0; j < i; ++j)
        if (slots[j].begin <= s.end && s.begin <= slots[j].end)
          busy.push_back({slots[j].offset, slots[j].offset + slots[j].bytes});
      std::sort(busy.begin(), busy.end());
      int64_t at = 0;
      for (auto [lo, hi] : busy) {
        if (at + s.bytes <= lo) break;
        at = std::max(at, hi);
      }
      s.offset = at;
      arena = std::max(arena, at + s.bytes);
    }

    llvm::DenseMap<mlir::Value, int64_t> offset_of;
    for (const Slot& s : slots) offset_of[s.value] = s.offset;
    for (mlir::BlockArgument a : body.getArguments())
      f.setArgAttr(a.getArgNumber(), "smelt.offset", b.getI64IntegerAttr(offset_of[a]));
    for (mlir::Operation& op : body) {
      if (op.getNumResults() == 0) continue;
      llvm::SmallVector<int64_t> offs;
      for (mlir::Value r : op.getResults()) offs.push_back(offset_of[r]);
      op.setAttr("offsets", b.getDenseI64ArrayAttr(offs));
    }
    return true;
  }

  // A partitioned module (smelt-partition): every rank has its own arena, shared by its entry points; each
  // rank function records its rank's size as smelt.arena_bytes, the module the largest.
  void plan_ranks(mlir::ModuleOp module) {
    mlir::Builder b(&getContext());
    std::map<int64_t, int64_t> arena;
    for (auto f : module.getOps<mlir::func::FuncOp>()) {
      auto rank = f->getAttrOfType<mlir::DictionaryAttr>("smelt.rank");
      auto index = rank ? rank.getAs<mlir::IntegerAttr>("index") : nullptr;
      if (!index || f.getBody().empty()) {
        f.emitError() << "smelt-plan-memory: @" << f.getSymName() << " of a partitioned module has no smelt.rank";
        return signalPassFailure();
      }
      if (!plan(f, b, arena[index.getInt()])) return signalPassFailure();
    }
    int64_t most = 0;
    for (auto f : module.getOps<mlir::func::FuncOp>()) {
      int64_t a = arena[f->getAttrOfType<mlir::DictionaryAttr>("smelt.rank").getAs<mlir::IntegerAttr>("index").getInt()];
      f->setAttr("smelt.arena_bytes", b.getI64IntegerAttr(a));
      most = std::max(most, a);
    }
    module->setAttr("smelt.arena_bytes", b.getI64IntegerAttr(most));
    module->setAttr("smelt.max_rows", b.getI64IntegerAttr(maxRows));
    record_pass(module, *this);
  }

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    if (maxRows <= 0) {
      module.emitError() << "smelt-plan-memory: max-rows must be positive, got " << int64_t(maxRows);
      return signalPassFailure();
    }
    if (sideLive != "all" && sideLive != "results" && sideLive != "none") {
      module.emitError() << "smelt-plan-memory: side-live must be all, results or none, got '" << sideLive << "'";
      return signalPassFailure();
    }
    auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
    if (module->hasAttr("smelt.tp")) return plan_ranks(module);
    if (!forward || forward.getBody().empty()) {
      module.emitError() << "smelt-plan-memory: the module has no func.func @forward with a body";
      return signalPassFailure();
    }
    // Each entry point (@forward, @dspark_draft) is planned on its own: they never run at the same time, so
    // they share the arena from offset 0, which is as large as the largest of them needs.
    int64_t arena = 0;
    mlir::Builder b(&getContext());
    for (auto f : module.getOps<mlir::func::FuncOp>()) {
      if (f.getBody().empty()) {
        f.emitError() << "smelt-plan-memory: @" << f.getSymName() << " has no body";
        return signalPassFailure();
      }
      if (!plan(f, b, arena)) return signalPassFailure();
    }
    module->setAttr("smelt.arena_bytes", b.getI64IntegerAttr(arena));
    module->setAttr("smelt.max_rows", b.getI64IntegerAttr(maxRows));
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
