// smelt-schedule-streams: `stream = 1` on the ops a GPU backend may run on its side stream, beside the main
// stream's ops. The arena is still planned for one stream in program order; the cuda runtime decides from each
// op's buffers where a side op may start and where the main stream must wait for it (runtime/cuda/side_stream.h),
// so the attribute is a permission, never a correctness risk. Ops that reference states stay on the main stream (the
// runtime tracks arena buffers only). Users can move other ops in an IR dump and compile from it
// (--compile-from); docs/performance.md has what was measured.
#include <set>

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "compiler/passes/passes.h"

namespace smelt {

#define GEN_PASS_DEF_SMELTSCHEDULESTREAMS
#include "compiler/passes/Passes.h.inc"

namespace {

struct ScheduleStreams : impl::SmeltScheduleStreamsBase<ScheduleStreams> {
  using SmeltScheduleStreamsBase::SmeltScheduleStreamsBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    std::set<std::string> names(sideOps.begin(), sideOps.end());
    if (names.empty()) names = {"smelt.hc_mix"};
    names.erase("none");  // side-ops=none: mark nothing
    mlir::Builder b(&getContext());
    bool ok = true;
    module.walk([&](mlir::Operation* op) {
      if (!is_compute_op(op) || !names.count(op->getName().getStringRef().str())) return;
      for (const SymbolUse& s : state_uses(op))
        if (s.ref) {
          op->emitError() << "smelt-schedule-streams: " << op->getName() << " references state " << s.ref
                          << "; the side stream runs only ops without states";
          ok = false;
          return;
        }
      op->setAttr("stream", b.getI64IntegerAttr(1));
    });
    if (!ok) return signalPassFailure();
    record_pass(module, *this);
  }
};

}  // namespace
}  // namespace smelt
