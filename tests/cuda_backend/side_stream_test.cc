// The cuda backend's side-stream schedule (runtime/cuda/side_stream.h) on hand-made op lists: where a side op is
// launched, and when the main stream must wait for it. The GPU tests run whole plans with it (ctest -L gpu).
#include "runtime/cuda/side_stream.h"

#include <gtest/gtest.h>

namespace {

using smelt::runtime::cuda::BufferRange;
using smelt::runtime::cuda::OpAccess;
using smelt::runtime::cuda::no_side_roots;
using smelt::runtime::cuda::plan_side_stream;
using smelt::runtime::cuda::SideBusy;

// Buffer b of the arena: bytes [100 b, 100 b + 100).
BufferRange buf(uint64_t b) { return {100 * b, 100 * b + 100}; }
OpAccess op(std::vector<int> reads, std::vector<int> writes, bool side = false, bool fence = false) {
  OpAccess a;
  for (int r : reads) a.reads.push_back(buf(uint64_t(r)));
  for (int w : writes) a.writes.push_back(buf(uint64_t(w)));
  a.side = side, a.fence = fence;
  return a;
}

TEST(SideStream, LaunchedAfterTheLastProducerOfItsInputs) {
  // 0 writes b1; 1 reads b1 writes b2; 2 reads b2 writes b3; 3 (side) reads b1 writes b4; 4 reads b4.
  const auto s = plan_side_stream({op({0}, {1}), op({1}, {2}), op({2}, {3}), op({1}, {4}, true), op({4, 3}, {5})});
  EXPECT_EQ(s.side, (std::vector<char>{0, 0, 0, 1, 0}));
  ASSERT_EQ(s.after.size(), 6u);
  EXPECT_EQ(s.after[1], std::vector<int>{3});  // after op 0, beside ops 1 and 2
  for (size_t m : {0u, 2u, 3u, 4u, 5u}) EXPECT_TRUE(s.after[m].empty()) << m;
}

TEST(SideStream, NotBeforeAnEarlierReaderOfTheBufferItWrites) {
  // The arena reuses b2 for the side op's output once op 2 (its last reader) has run: the side op must not start
  // before op 2, even though its input b1 is ready after op 0.
  const auto s = plan_side_stream({op({0}, {1}), op({1}, {2}), op({2}, {3}), op({1}, {2}, true)});
  EXPECT_EQ(s.after[3], std::vector<int>{3});  // after op 2
  // An earlier writer of that buffer too (write after write).
  const auto w = plan_side_stream({op({0}, {1}), op({0}, {2}), op({0}, {3}), op({1}, {2}, true)});
  EXPECT_EQ(w.after[2], std::vector<int>{3});  // after op 1
}

TEST(SideStream, FencesAndProgramOrderOfSideOps) {
  // A collective (fence) at 2: the side op after it, although its input is ready after op 0.
  const auto f = plan_side_stream({op({0}, {1}), op({1}, {2}), op({2}, {2}, false, true), op({1}, {4}, true)});
  EXPECT_EQ(f.after[3], std::vector<int>{3});
  // Two side ops: the second's input is ready before the first's point, but it is not launched earlier.
  const auto o = plan_side_stream({op({0}, {1}), op({1}, {2}), op({2}, {3}, true), op({1}, {4}, true), op({3, 4}, {5})});
  EXPECT_EQ(o.after[2], (std::vector<int>{2, 3}));  // both after op 1, in program order
  for (size_t m : {0u, 1u, 3u, 4u, 5u}) EXPECT_TRUE(o.after[m].empty()) << m;
  // No main op before it conflicts: launched before op 0.
  const auto first = plan_side_stream({op({0}, {1}, true), op({0}, {2})});
  EXPECT_EQ(first.after[0], std::vector<int>{0});
}

TEST(SideStream, NoSideOpBeforeTheFirstMainOp) {
  // Side op 0 (the Engram hash's shape: reads the ids b0, writes b1) is due before the first main op (1, the
  // embedding: reads b0, writes b2): moved to right after it, in front of the side ops due there.
  auto s = plan_side_stream({op({0}, {1}, true), op({0}, {2}), op({2}, {3}, true), op({3}, {4})});
  ASSERT_EQ(s.after[0], std::vector<int>{0});
  EXPECT_EQ(s.after[2], std::vector<int>{2});
  no_side_roots(s, {op({0}, {1}, true), op({0}, {2}), op({2}, {3}, true), op({3}, {4})});
  EXPECT_TRUE(s.after[0].empty());
  EXPECT_EQ(s.after[2], (std::vector<int>{0, 2}));
  // The first main op conflicts with it (writes what it reads): the schedule stays.
  const std::vector<OpAccess> c{op({0}, {1}, true), op({2}, {0}), op({1}, {4})};
  auto t = plan_side_stream(c);
  no_side_roots(t, c);
  EXPECT_EQ(t.after[0], std::vector<int>{0});
  // Only side ops: nothing to move them after.
  const std::vector<OpAccess> only{op({0}, {1}, true), op({1}, {2}, true)};
  auto u = plan_side_stream(only);
  no_side_roots(u, only);
  EXPECT_EQ(u.after[0], (std::vector<int>{0, 1}));
}

TEST(SideStream, MainStreamWaitsOnlyForConflicts) {
  SideBusy busy;
  busy.add(7, op({1}, {4}, true));  // the side op (event slot 7) reads b1 and writes b4
  EXPECT_EQ(busy.must_wait(op({1}, {2})), -1);  // also reads b1: no
  EXPECT_EQ(busy.must_wait(op({4}, {5})), 7);   // reads what it writes
  EXPECT_EQ(busy.must_wait(op({2}, {1})), 7);   // overwrites what it reads
  EXPECT_EQ(busy.must_wait(op({2}, {4})), 7);   // overwrites what it writes
  EXPECT_EQ(busy.must_wait(OpAccess{{BufferRange{450, 460}}, {}, false, false}), 7);   // a part of b4
  EXPECT_EQ(busy.must_wait(OpAccess{{BufferRange{500, 510}}, {}, false, false}), -1);  // b5 starts where b4 ends
  busy.clear();
  EXPECT_TRUE(busy.empty());
  EXPECT_EQ(busy.must_wait(op({4}, {1})), -1);
}

// A main op waits for the latest side op it conflicts with, not for the side ops queued after it; waiting for one
// retires it and every earlier one (the side stream runs in order).
TEST(SideStream, MainStreamWaitsForTheLatestConflictingSideOpOnly) {
  SideBusy busy;
  busy.add(0, op({1}, {4}, true));  // the kv branch's GEMV: reads b1 (the norm output), writes b4
  busy.add(1, op({4}, {5}, true));  // its norm
  busy.add(2, op({5}, {6}, true));  // its rope
  EXPECT_EQ(busy.must_wait(op({2}, {1})), 0);  // overwrites b1: only the GEMV must be done
  EXPECT_EQ(busy.must_wait(op({6}, {7})), 2);  // reads the branch's result
  EXPECT_EQ(busy.must_wait(op({4, 5}, {7})), 1);  // reads what 0 and 1 write: the latest of the two
  busy.joined(0);
  ASSERT_EQ(busy.queued.size(), 2u);
  EXPECT_EQ(busy.queued.front().first, 1);
  EXPECT_EQ(busy.must_wait(op({2}, {1})), -1);  // the GEMV is done
  busy.joined(2);
  EXPECT_TRUE(busy.empty());
}

}  // namespace

// seam_launch_allowed (side_stream.h): which aliasing of a seam's buffers one smelt_hc_seam* launch tolerates. One
// row of D = 8 floats (32 bytes), n = 4 streams (X and out: 128 bytes), the mix's post / pre 16 bytes, comb 64.
namespace {
using smelt::runtime::cuda::seam_launch_allowed;
using smelt::runtime::cuda::SeamBuffers;
SeamBuffers apart_buffers(bool add) {
  SeamBuffers s;
  s.add = add, s.rows = 1, s.D = 8, s.n = 4;
  s.X = 1000, s.out = 2000, s.y = 3000, s.u = 4000, s.post = 5000, s.comb = 6000, s.pre = 7000;
  if (add) s.a = 8000, s.b = 9000;
  return s;
}
}  // namespace

TEST(Seams, ApartBuffersAndAOneHotCollapse) {
  EXPECT_TRUE(seam_launch_allowed(apart_buffers(false)));
  EXPECT_TRUE(seam_launch_allowed(apart_buffers(true)));
  SeamBuffers s = apart_buffers(true);
  s.pre = 0;  // a one-hot collapse reads no pre
  EXPECT_TRUE(seam_launch_allowed(s));
}

TEST(Seams, TheCollapseOnAStreamOfXOnlyAsTheSameColumn) {
  SeamBuffers s = apart_buffers(false);
  s.u = s.X + 2 * 32;  // X's third stream: thread d reads X[2][d] before it writes u[d]
  EXPECT_TRUE(seam_launch_allowed(s));
  s.u = s.X + 4;  // u[d] is X[0][d + 1], another thread's
  EXPECT_FALSE(seam_launch_allowed(s));
  s = apart_buffers(false);
  s.rows = 2, s.X = 1000, s.out = 2000, s.y = 3000, s.u = 1000;  // two rows: X is [2, 4, 8], u [2, 8]: other layouts
  EXPECT_FALSE(seam_launch_allowed(s));
}

TEST(Seams, NeverOnTheMixCoefficients) {
  for (uint64_t SeamBuffers::*coef : {&SeamBuffers::post, &SeamBuffers::comb, &SeamBuffers::pre}) {
    SeamBuffers s = apart_buffers(false);
    s.u = s.*coef;  // every thread reads the coefficients
    EXPECT_FALSE(seam_launch_allowed(s));
    s = apart_buffers(true);
    s.out = s.*coef - 8;
    EXPECT_FALSE(seam_launch_allowed(s));
  }
}

TEST(Seams, TheSumAndTheCollapseOnAnAddendOrEachOther) {
  SeamBuffers s = apart_buffers(true);
  s.y = s.a;  // in place: a[d] is read before y[d] is written
  EXPECT_TRUE(seam_launch_allowed(s));
  s.u = s.b;  // the collapse on the other addend
  EXPECT_TRUE(seam_launch_allowed(s));
  s = apart_buffers(true);
  s.u = s.y;  // written after the sum, by the same thread
  EXPECT_TRUE(seam_launch_allowed(s));
  s = apart_buffers(true);
  s.y = s.a + 4;  // y[d] is a[d + 1]
  EXPECT_FALSE(seam_launch_allowed(s));
  s = apart_buffers(true);
  s.out = s.a, s.b = s.a + 32;  // the streams on the addends: out[0][d] on a[d], out[1][d] on b[d], the same column
  EXPECT_TRUE(seam_launch_allowed(s));
  s.b = s.a + 36;  // out[1][d] on b[d - 1]
  EXPECT_FALSE(seam_launch_allowed(s));
}

TEST(Seams, TheStreamsApartFromTheSumAndTheCollapse) {
  SeamBuffers s = apart_buffers(true);
  s.y = s.out + 32;  // the sum on a stream (both live at the expand in program order)
  EXPECT_FALSE(seam_launch_allowed(s));
  s = apart_buffers(false);
  s.u = s.out;
  EXPECT_FALSE(seam_launch_allowed(s));
}
