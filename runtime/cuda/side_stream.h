// The side stream's schedule (runtime/cuda/backend.cc run_ops): some ops run on a second stream beside the main
// stream's ops. The arena is planned in program order (compiler/passes/plan_memory.cc; side-live=results, the default,
// keeps a side op's results live until its join), so which op may run beside which is decided here from the arena
// byte ranges each op reads and writes, and the states it references (whole, as writes). Plain data, no CUDA:
// tests/cuda_backend checks it without a GPU.
#pragma once
#include <cstdint>
#include <vector>

namespace smelt::runtime::cuda {

// [lo, hi) device bytes: of the arena, or a state (empty when lo == hi).
struct BufferRange {
  uint64_t lo = 0, hi = 0;
  bool overlaps(const BufferRange& o) const { return o.lo < hi && lo < o.hi; }
};

// What one op of the plan touches, and how it may be scheduled.
struct OpAccess {
  std::vector<BufferRange> reads, writes;
  bool side = false;   // marked for the side stream (stream = 1)
  bool fence = false;  // a side op is never launched before it (collectives)
};

// Whether two ops touch a common range with at least one of them writing it (read after write, write after read,
// write after write): then they must not run at the same time.
bool hazard(const OpAccess& a, const OpAccess& b);

// side[k]: op k runs on the side stream. after[m + 1]: the side ops launched right after main op m (m = -1: before
// the first op), in program order. A side op k is launched after the last earlier main op that writes one of its
// inputs or reads or writes one of its outputs (a buffer k writes may hold a value an earlier op still reads until
// k's own position in program order), after the last fence before it, and never before an earlier side op's point
// (the side stream runs its ops in program order).
struct SideSchedule {
  std::vector<char> side;
  std::vector<std::vector<int>> after;
};
SideSchedule plan_side_stream(const std::vector<OpAccess>& ops);

// The side ops due before the first main op (after[0]) moved to right after it, unless that op conflicts with one of
// them (then the schedule stays): captured as they were, they are root nodes of the decode graph, and under Nsight
// Systems the driver ran that branch late (the V4.1 slice's Engram hash began ~28 us into the step, when layer 0's
// q_norm ended, and the kv branch and wq_b waited behind it; moved, the traced step was 17 us shorter). The
// untraced step measured the same either way (SMELT_CUDA_SIDE_ROOTS=1 keeps the roots; docs/performance.md
// "Session 24"): this keeps the timeline faithful.
void no_side_roots(SideSchedule& s, const std::vector<OpAccess>& ops);

// The side stream's queued ops and their ranges, in side-stream order, each with the slot of the event recorded after
// it. A main-stream op must first wait for a queued side op when it reads a range the side op writes, or writes a
// range it reads or writes; it waits for the latest such op only (the side stream runs in order, so the earlier ones
// are then done too), not for the whole side stream: the kv branch's small ops no longer hold back wq_b, whose
// output overwrites the attention norm's output that only the branch's first GEMV reads.
struct SideBusy {
  std::vector<std::pair<int, OpAccess>> queued;
  bool empty() const { return queued.empty(); }
  void clear() { queued.clear(); }
  void add(int slot, const OpAccess& a) { queued.emplace_back(slot, a); }
  // The slot of the latest queued op main_op must wait for, or -1.
  int must_wait(const OpAccess& main_op) const;
  // The main stream waited for slot's op: it and the ones queued before it are done.
  void joined(int slot);
};

// The buffers of one run of a sublayer seam (runtime/cuda/ops.cc run_seam: [add ->] hc_expand -> hc_collapse in one
// smelt_hc_seam* launch): device addresses, 0 for an absent one (pre of a one-hot collapse; a, b without the add).
// The kernel's thread owns column d of every row buffer and reads all its inputs before it writes, so the launch is
// allowed when each written buffer (y with the add, the streams out, the collapse u) shares no byte with another
// buffer, or only as the same column: with one row, at a whole number of D-float rows from a row buffer it reads
// (a, b, y, X) or from the sum y; with more rows, at the very same [rows, D] range. Never on the mix's coefficients
// (post, comb, pre: every thread reads them), never the streams on the sum or the collapse.
struct SeamBuffers {
  uint64_t y = 0, X = 0, out = 0, u = 0, post = 0, comb = 0, pre = 0, a = 0, b = 0;
  bool add = false;
  int rows = 0, D = 0, n = 0;
};
bool seam_launch_allowed(const SeamBuffers& s);

}  // namespace smelt::runtime::cuda
