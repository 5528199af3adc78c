// The collective ops (docs/ops.md "Collectives") on the cpu backend: each hands its rows to the in-process
// communicator (runtime/cpu/collectives.h) that the session attached to the backend.
#include "runtime/cpu/backend.h"

namespace smelt::runtime::cpu {

namespace {

Communicator& comm(const PreparedOp& p, const ExecContext& c) {
  if (!c.comm) p.plan->fail(*p.ref, "is a collective, but the backend runs without a communicator");
  return *c.comm;
}

void run_all_reduce(const PreparedOp& p, const ExecContext& c) {
  // p.in[0] is nullptr for a rank without a partial (an empty shard): it contributes zeros.
  comm(p, c).all_reduce(c.rank, p.group, p.in[0], p.out[0], size_t(c.rows) * size_t(p.out_w[0]));
}

void run_all_gather(const PreparedOp& p, const ExecContext& c) {
  comm(p, c).all_gather(c.rank, p.group, p.widths, p.in[0], p.out[0], c.rows);
}

void run_send(const PreparedOp& p, const ExecContext& c) {
  comm(p, c).send(c.rank, p.peer, p.tag, p.in[0], size_t(c.rows) * size_t(p.in_w[0]));
}

void run_recv(const PreparedOp& p, const ExecContext& c) {
  comm(p, c).recv(c.rank, p.peer, p.tag, p.out[0], size_t(c.rows) * size_t(p.out_w[0]));
}

}  // namespace

void prepare_op_collective(const Plan& plan, const OpRef& op, PreparedOp& p) {
  switch (op.spec->kind) {
    case OpKind::AllReduce:
      p.run = run_all_reduce;
      p.group = op.ints("group");
      break;
    case OpKind::AllGather:
      p.run = run_all_gather;
      p.group = op.ints("group");
      p.widths = op.ints("widths");
      break;
    case OpKind::Send:
      p.run = run_send;
      p.peer = int(op.i("peer"));
      p.tag = op.i("tag");
      break;
    case OpKind::Recv:
      p.run = run_recv;
      p.peer = int(op.i("peer"));
      p.tag = op.i("tag");
      break;
    default:
      plan.fail(op, "is not a collective (runtime bug)");
  }
}

}  // namespace smelt::runtime::cpu
