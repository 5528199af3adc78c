// smelt-plan-memory: every SSA value of @forward gets a slot in one arena (so does every value of a further
// entry point such as @dspark_draft, planned on its own over the same arena). Live range of a value = [index
// of its defining op, index of its last user] in program order (the ids argument is defined at -1, the
// returned value lives to the return). Values are placed in definition order at the lowest offset that does not
// overlap any placed value whose live range overlaps its own (first fit). Ranges are closed, so an op's
// outputs never alias its inputs (the input's range reaches the op) nor each other (same start).
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
