#include "runtime/cuda/side_stream.h"

#include <algorithm>

namespace smelt::runtime::cuda {

namespace {

bool any_overlap(const std::vector<BufferRange>& a, const std::vector<BufferRange>& b) {
  for (const BufferRange& x : a)
    for (const BufferRange& y : b)
      if (x.overlaps(y)) return true;
  return false;
}

}  // namespace

bool hazard(const OpAccess& a, const OpAccess& b) {
  return any_overlap(a.writes, b.reads) || any_overlap(a.reads, b.writes) || any_overlap(a.writes, b.writes);
}

SideSchedule plan_side_stream(const std::vector<OpAccess>& ops) {
  SideSchedule s;
  s.side.assign(ops.size(), 0);
  s.after.assign(ops.size() + 1, {});
  int last = -1;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (!ops[k].side) continue;
    int at = last;
    for (size_t m = 0; m < k; ++m) {
      if (s.side[m]) continue;  // an earlier side op: the side stream keeps their order
      if (ops[m].fence || hazard(ops[m], ops[k])) at = std::max(at, int(m));
    }
    s.side[k] = 1;
    s.after[size_t(at + 1)].push_back(int(k));
    last = at;
  }
  return s;
}

int SideBusy::must_wait(const OpAccess& main_op) const {
  for (size_t i = queued.size(); i-- > 0;)
    if (hazard(queued[i].second, main_op)) return queued[i].first;
  return -1;
}

void SideBusy::joined(int slot) {
  size_t n = 0;
  while (n < queued.size() && queued[n].first != slot) ++n;
  queued.erase(queued.begin(), queued.begin() + long(std::min(n + 1, queued.size())));
}

bool seam_launch_allowed(const SeamBuffers& s) {
  struct Buf {
    uint64_t p, bytes;
    bool rowwise;  // rows of D floats (X and out: n of them a row)
  };
  const uint64_t row = uint64_t(s.rows) * uint64_t(s.D) * 4, small = uint64_t(s.rows) * uint64_t(s.n) * 4;
  const Buf y{s.y, row, true}, X{s.X, row * uint64_t(s.n), true}, out{s.out, row * uint64_t(s.n), true};
  const Buf u{s.u, row, true}, post{s.post, small, false}, comb{s.comb, small * uint64_t(s.n), false};
  const Buf pre{s.pre, small, false}, a{s.add ? s.a : 0, row, true}, b{s.add ? s.b : 0, row, true};
  auto apart = [](const Buf& w, const Buf& q) { return !w.p || !q.p || w.p >= q.p + q.bytes || q.p >= w.p + w.bytes; };
  auto same_column = [&](const Buf& w, const Buf& q) {
    if (!q.rowwise) return false;
    if (s.rows == 1) return (w.p > q.p ? w.p - q.p : q.p - w.p) % (uint64_t(s.D) * 4) == 0;
    return w.p == q.p && w.bytes == q.bytes;
  };
  auto safe = [&](const Buf& w, const Buf& q) { return apart(w, q) || same_column(w, q); };
  for (const Buf* w : {s.add ? &y : nullptr, &out, &u}) {
    if (!w) continue;
    for (const Buf* q : {&a, &b, s.add ? nullptr : &y, &X, &post, &comb, &pre})
      if (q && !safe(*w, *q)) return false;
  }
  return apart(out, y) && apart(out, u) && safe(u, y);
}

}  // namespace smelt::runtime::cuda
