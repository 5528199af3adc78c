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

void no_side_roots(SideSchedule& s, const std::vector<OpAccess>& ops) {
  if (s.after.empty() || s.after[0].empty()) return;
  size_t first = 0;
  while (first < s.side.size() && s.side[first]) ++first;
  if (first >= ops.size() || ops[first].fence) return;
  for (int k : s.after[0])
    if (hazard(ops[first], ops[size_t(k)])) return;
  std::vector<int>& to = s.after[first + 1];
  to.insert(to.begin(), s.after[0].begin(), s.after[0].end());
  s.after[0].clear();
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
    BufferRange r;  // empty for an absent buffer
    bool rowwise;   // rows of D floats (X and out: n of them a row)
  };
  auto buf = [](uint64_t p, uint64_t bytes, bool rowwise) { return Buf{{p, p ? p + bytes : p}, rowwise}; };
  const uint64_t row = uint64_t(s.rows) * uint64_t(s.D) * 4, small = uint64_t(s.rows) * uint64_t(s.n) * 4;
  const Buf y = buf(s.y, row, true), X = buf(s.X, row * uint64_t(s.n), true), out = buf(s.out, row * uint64_t(s.n), true);
  const Buf u = buf(s.u, row, true), post = buf(s.post, small, false), comb = buf(s.comb, small * uint64_t(s.n), false);
  const Buf pre = buf(s.pre, small, false), a = buf(s.add ? s.a : 0, row, true), b = buf(s.add ? s.b : 0, row, true);
  auto same_column = [&](const Buf& w, const Buf& q) {
    if (!q.rowwise) return false;
    if (s.rows == 1) return (w.r.lo > q.r.lo ? w.r.lo - q.r.lo : q.r.lo - w.r.lo) % (uint64_t(s.D) * 4) == 0;
    return w.r.lo == q.r.lo && w.r.hi == q.r.hi;
  };
  auto safe = [&](const Buf& w, const Buf& q) { return !w.r.overlaps(q.r) || same_column(w, q); };
  for (const Buf* w : {s.add ? &y : nullptr, &out, &u}) {
    if (!w) continue;
    for (const Buf* q : {&a, &b, s.add ? nullptr : &y, &X, &post, &comb, &pre})
      if (q && !safe(*w, *q)) return false;
  }
  return !out.r.overlaps(y.r) && !out.r.overlaps(u.r) && safe(u, y);
}

}  // namespace smelt::runtime::cuda
