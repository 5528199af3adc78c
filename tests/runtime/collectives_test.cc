// The cpu backend's in-process communicator: all_reduce sums in group order (exact expected bits for inputs
// where the order decides the result, and a float64 bound for random inputs), every member gets the same
// bits; all_gather concatenates in group order; send/recv are FIFO per (peer, tag) and block; abort wakes
// every waiter with the first message and the communicator is usable again after reset.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "runtime/cpu/collectives.h"
#include "tests/runtime/plan_builder.h"

namespace smelt::runtime::cpu {
namespace {

// Runs body(rank) on one thread per rank; returns the message of each rank's exception ("" = none).
std::vector<std::string> on_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Communicator, AllReduceAddsInGroupOrder) {
  // x0 = 1e8, x1 = -1e8, x2 = 1: left to right from rank 0 gives (1e8 - 1e8) + 1 = 1; from rank 2 first,
  // 1 + 1e8 rounds to 1e8 (float spacing there is 8), so the sum is 0. -0 stays -0 in a one-member group.
  const float x[3][2] = {{1e8f, 2.5f}, {-1e8f, -0.5f}, {1.0f, 0.25f}};
  for (auto [group, want] : {std::pair<std::vector<int64_t>, float>{{0, 1, 2}, 1.0f}, {{2, 0, 1}, 0.0f}, {{1, 2, 0}, 0.0f}}) {
    Communicator comm(3);
    float y[3][2] = {};
    auto errors = on_threads(3, [&](int r) { comm.all_reduce(r, group, x[r], y[r], 2); });
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(errors[size_t(r)], "");
      EXPECT_EQ(bits(y[r][0]), bits(want)) << "group starts with " << group[0] << ", rank " << r;
      EXPECT_EQ(y[r][1], 2.25f);
    }
  }
  // A member without a partial (nullptr) contributes zeros, in its place in the order.
  {
    Communicator comm(3);
    float y[3][2] = {};
    auto errors = on_threads(3, [&](int r) { comm.all_reduce(r, std::vector<int64_t>{0, 1, 2}, r == 1 ? nullptr : x[r], y[r], 2); });
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(y[r][0], 1e8f + 1.0f) << errors[size_t(r)];  // 1e8 + 0 + 1 rounds to 1e8
      EXPECT_EQ(y[r][1], 2.75f);
    }
  }
  Communicator one(1);
  float neg = -0.0f, out = 1.0f;
  one.all_reduce(0, std::vector<int64_t>{0}, &neg, &out, 1);
  EXPECT_EQ(bits(out), bits(-0.0f));
}

TEST(Communicator, AllReduceRandomAgainstFloat64) {
  const int n = 5, count = 1000;
  testing::Uniform u(5);
  std::vector<std::vector<float>> x(n), y(n, std::vector<float>(count));
  for (auto& v : x) v = u.vec(count, -10, 10);
  std::vector<int64_t> group = {3, 1, 4, 0, 2};
  Communicator comm(n);
  for (int round = 0; round < 20; ++round) {  // repeated rounds reuse the meeting point
    auto errors = on_threads(n, [&](int r) { comm.all_reduce(r, group, x[size_t(r)].data(), y[size_t(r)].data(), count); });
    for (int i = 0; i < count; ++i) {
      double exact = 0, mag = 0;
      for (int r = 0; r < n; ++r) exact += x[size_t(r)][size_t(i)], mag += std::fabs(x[size_t(r)][size_t(i)]);
      // n-1 float additions: each rounds by at most half an ulp of a partial sum <= the magnitude sum.
      ASSERT_LE(std::fabs(y[0][size_t(i)] - exact), (n - 1) * 0x1p-24 * mag) << i;
      for (int r = 1; r < n; ++r) ASSERT_EQ(bits(y[size_t(r)][size_t(i)]), bits(y[0][size_t(i)])) << "rank " << r;
    }
  }
}

TEST(Communicator, AllGatherConcatenatesInGroupOrder) {
  Communicator comm(3);
  std::vector<int64_t> group = {1, 2, 0}, widths = {2, 1, 3};
  // Two rows; rank r's x holds 100r + 10*row + column.
  std::vector<std::vector<float>> x = {{0, 1, 2, 10, 11, 12}, {100, 101, 110, 111}, {200, 210}};
  std::vector<std::vector<float>> y(3, std::vector<float>(12));
  auto errors = on_threads(3, [&](int r) { comm.all_gather(r, group, widths, x[size_t(r)].data(), y[size_t(r)].data(), 2); });
  std::vector<float> want = {100, 101, 200, 0, 1, 2, 110, 111, 210, 10, 11, 12};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(y[size_t(r)], want) << "rank " << r << errors[size_t(r)];
}

TEST(Communicator, SendRecvByPeerAndTag) {
  Communicator comm(2);
  std::vector<float> got1(2), got2(2), got3(1);
  auto errors = on_threads(2, [&](int r) {
    if (r == 1) {  // receives before anything was sent: blocks until it arrives
      comm.recv(1, 0, 5, got1.data(), 2);
      comm.recv(1, 0, 6, got3.data(), 1);  // another tag, sent earlier, waits in its own mailbox
      comm.recv(1, 0, 5, got2.data(), 2);  // the same tag: first in, first out
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      float a[2] = {1, 2}, b[1] = {9}, c[2] = {3, 4};
      comm.send(0, 1, 6, b, 1);
      comm.send(0, 1, 5, a, 2);
      comm.send(0, 1, 5, c, 2);
    }
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(got1, (std::vector<float>{1, 2}));
  EXPECT_EQ(got2, (std::vector<float>{3, 4}));
  EXPECT_EQ(got3, (std::vector<float>{9}));
}

TEST(Communicator, AbortWakesEveryWaiter) {
  Communicator comm(4);
  std::vector<int64_t> group = {0, 1, 2};
  std::atomic<int> waiting{0};
  auto errors = on_threads(4, [&](int r) {
    float x = 1, y = 0;
    if (r == 3) {  // the failing rank: the others wait in an all_reduce and a recv that can never complete
      while (waiting.load() < 2) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      comm.abort("plan rank 3: op 7 (smelt.linear, layer 2): boom");
      comm.abort("a later message is dropped");
      return;
    }
    ++waiting;
    if (r == 2) comm.recv(2, 3, 1, &y, 1);
    else comm.all_reduce(r, group, &x, &y, 1);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[size_t(r)], "plan rank 3: op 7 (smelt.linear, layer 2): boom") << r;
  EXPECT_TRUE(comm.aborted());
  EXPECT_THROW(comm.send(0, 1, 1, nullptr, 0), Aborted);  // later calls fail at once
  // After reset the communicator works again, including the meeting point the abort interrupted.
  comm.reset();
  std::vector<float> y(3);
  errors = on_threads(3, [&](int r) {
    float x = float(r + 1);
    comm.all_reduce(r, group, &x, &y[size_t(r)], 1);
  });
  EXPECT_EQ(y, (std::vector<float>{6, 6, 6}));
}

}  // namespace
}  // namespace smelt::runtime::cpu
