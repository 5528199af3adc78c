// Used only while runtime/cuda has no ops*.cc: no op has a cuda launcher yet.
#include "frontends/error.h"
#include "runtime/cuda/launch.h"

namespace smelt::runtime::cuda {

void prepare_op(const Plan&, const OpRef& op, int64_t, Prepare&) { throw Error("no cuda launchers are built"); }
void run_op(const OpLaunch&) { throw Error("no cuda launchers are built"); }
bool has_launcher(const std::string&) { return false; }
bool fp4_pair_order_on(int) { return false; }

}  // namespace smelt::runtime::cuda
