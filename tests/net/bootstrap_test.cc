// The rendezvous of several smelt-run processes (runtime/net/bootstrap.h): coordinator and clients in threads on
// 127.0.0.1, plus raw sockets that play a stray connection and a server that is not a coordinator. Expected
// values are written out by hand (process tables, blobs, the sentences' key phrases).
#include "runtime/net/bootstrap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "frontends/error.h"
#include "tests/common/process.h"

namespace {

using smelt::net::Coordinator;
using smelt::net::Endpoint;
using smelt::net::Hello;
using smelt::net::Rendezvous;
using smelt::net::Timing;

// Collects log lines (the tests' threads share one).
struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  Timing timing(double timeout_s, double progress_s = 10) {
    Timing t;
    t.timeout_s = timeout_s;
    t.progress_s = progress_s;
    t.log = [this](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(l);
    };
    return t;
  }
  bool has(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& l : lines)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

Hello hello(uint64_t hash, int world, std::vector<int32_t> ranks) {
  Hello h;
  h.plan_hash = hash;
  h.world = world;
  h.ranks = std::move(ranks);
  return h;
}

Endpoint local(int port) { return {"127.0.0.1", port}; }

int free_port() { return smelt::test_process::free_loopback_port(); }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const smelt::Error& e) {
    return e.what();
  }
  return "(no error)";
}

template <typename T>
std::string error_of_future(std::future<T>& f) {
  return error_of([&] { f.get(); });
}

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(i * 37 + 11);
  return b;
}

int raw_connect(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return s;
}

std::string read_all(int fd) {
  std::string s;
  char buf[512];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) s.append(buf, size_t(n));
  return s;
}

// Checks the one-sentence shape every failure has.
void expect_sentence(const std::string& e, const std::string& where, const std::string& key) {
  EXPECT_EQ(e.rfind("bootstrap " + where + ": ", 0), 0u) << e;
  EXPECT_NE(e.find(key), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(Endpoint, Parses) {
  Endpoint e = smelt::net::parse_endpoint("node-1.cluster:29500");
  EXPECT_EQ(e.host, "node-1.cluster");
  EXPECT_EQ(e.port, 29500);
  EXPECT_EQ(smelt::net::parse_endpoint("10.0.0.2:1").port, 1);
  EXPECT_EQ(smelt::net::parse_endpoint("127.0.0.1:0", "--x", true).port, 0);
  EXPECT_NE(error_of([] { smelt::net::parse_endpoint("10.0.0.2"); }).find("is not HOST:PORT"), std::string::npos);
  EXPECT_NE(error_of([] { smelt::net::parse_endpoint(":80"); }).find("is not HOST:PORT"), std::string::npos);
  EXPECT_NE(error_of([] { smelt::net::parse_endpoint("h:8x"); }).find("no port number"), std::string::npos);
  EXPECT_NE(error_of([] { smelt::net::parse_endpoint("h:65536"); }).find("not a TCP port"), std::string::npos);
  EXPECT_NE(error_of([] { smelt::net::parse_endpoint("h:0"); }).find("not a TCP port"), std::string::npos);
  EXPECT_EQ(error_of([] { smelt::net::parse_endpoint("h:0"); }).rfind("--coordinator: ", 0), 0u);
}

TEST(Bootstrap, DeliversBlobAndProcessTable) {
  Log log;
  Coordinator c(local(0), log.timing(20));
  const int port = c.port();
  ASSERT_GT(port, 0);
  const std::vector<uint8_t> blob = pattern(3 * 128);
  auto coord = std::async(std::launch::async, [&] { return c.run(hello(42, 4, {0}), blob); });
  auto a = std::async(std::launch::async, [&] { return smelt::net::join(local(port), hello(42, 4, {3, 2}), log.timing(20)); });
  auto b = std::async(std::launch::async, [&] { return smelt::net::join(local(port), hello(42, 4, {1}), log.timing(20)); });
  Rendezvous rc = coord.get(), ra = a.get(), rb = b.get();
  const std::vector<std::vector<int32_t>> table{{0}, {1}, {2, 3}};  // coordinator, then by lowest rank
  for (const Rendezvous* r : {&rc, &ra, &rb}) {
    EXPECT_EQ(r->blob, blob);
    EXPECT_EQ(r->processes, table);
  }
  EXPECT_EQ(rc.self, 0);
  EXPECT_EQ(rb.self, 1);
  EXPECT_EQ(ra.self, 2);
  EXPECT_TRUE(log.has("ranks 3,2 joined from 127.0.0.1:")) << log.all();
}

TEST(Bootstrap, ClientRetriesUntilTheCoordinatorStarts) {
  Log log;
  const int port = free_port();
  auto client = std::async(std::launch::async,
                           [&] { return smelt::net::join(local(port), hello(7, 2, {1}), log.timing(20, 0.1)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // refused connections meanwhile
  Coordinator c(local(port), log.timing(20));
  Rendezvous rc = c.run(hello(7, 2, {0}), {1, 2, 3});
  Rendezvous r = client.get();
  EXPECT_EQ(r.blob, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(r.self, 1);
  EXPECT_EQ(rc.processes, (std::vector<std::vector<int32_t>>{{0}, {1}}));
  EXPECT_TRUE(log.has("the coordinator is not reachable yet (connection refused)")) << log.all();
}

TEST(Bootstrap, PlanMismatchFailsEveryone) {
  Log log;
  Coordinator c(local(0), log.timing(20));
  const std::string where = "127.0.0.1:" + std::to_string(c.port());
  auto coord = std::async(std::launch::async, [&] { return c.run(hello(0x1111, 2, {0}), pattern(128)); });
  auto client = std::async(std::launch::async,
                           [&] { return smelt::net::join(local(c.port()), hello(0x2222, 2, {1}), log.timing(20)); });
  std::string ec = error_of_future(coord), el = error_of_future(client);
  expect_sentence(ec, where, "runs a different plan than the coordinator (plan hash 0000000000002222 vs 0000000000001111)");
  EXPECT_EQ(ec, el);  // the client hears the coordinator's sentence
}

TEST(Bootstrap, WorldSizeMismatch) {
  Log log;
  Coordinator c(local(0), log.timing(20));
  auto coord = std::async(std::launch::async, [&] { return c.run(hello(5, 2, {0}), {}); });
  auto client = std::async(std::launch::async, [&] { return smelt::net::join(local(c.port()), hello(5, 4, {1}), log.timing(20)); });
  std::string e = error_of_future(coord);
  expect_sentence(e, "127.0.0.1:" + std::to_string(c.port()), "has a plan of 4 ranks, the coordinator's has 2");
  EXPECT_EQ(error_of_future(client), e);
}

TEST(Bootstrap, OverlappingRanks) {
  Log log;
  Coordinator c(local(0), log.timing(20));
  auto coord = std::async(std::launch::async, [&] { return c.run(hello(5, 3, {0, 1}), {}); });
  auto client = std::async(std::launch::async, [&] { return smelt::net::join(local(c.port()), hello(5, 3, {2, 1}), log.timing(20)); });
  std::string e = error_of_future(coord);
  expect_sentence(e, "127.0.0.1:" + std::to_string(c.port()),
                  "rank 1 is claimed by both the coordinator and the process at 127.0.0.1:");
  EXPECT_NE(e.find("(ranks 2,1): give each process its own --ranks"), std::string::npos) << e;
  EXPECT_EQ(error_of_future(client), e);
}

TEST(Bootstrap, RankOutOfRangeOrTwice) {
  Log log;
  {
    Coordinator c(local(0), log.timing(20));
    auto coord = std::async(std::launch::async, [&] { return c.run(hello(5, 2, {0}), {}); });
    auto client = std::async(std::launch::async, [&] { return smelt::net::join(local(c.port()), hello(5, 2, {2}), log.timing(20)); });
    std::string e = error_of_future(coord);
    EXPECT_NE(e.find("claims rank 2 but the plan has 2 ranks (0..1)"), std::string::npos) << e;
    EXPECT_EQ(error_of_future(client), e);
  }
  Coordinator c(local(0), log.timing(20));
  std::string e = error_of([&] { c.run(hello(5, 2, {0, 0}), {}); });
  expect_sentence(e, "127.0.0.1:" + std::to_string(c.port()), "the coordinator lists rank 0 twice");
}

TEST(Bootstrap, MissingRankTimesOut) {
  Log log;
  Coordinator c(local(0), log.timing(2, 0.2));  // long enough for the client to join on a loaded machine
  const std::string where = "127.0.0.1:" + std::to_string(c.port());
  auto coord = std::async(std::launch::async, [&] { return c.run(hello(9, 3, {0}), pattern(10)); });
  auto client = std::async(std::launch::async, [&] { return smelt::net::join(local(c.port()), hello(9, 3, {1}), log.timing(20)); });
  std::string e = error_of_future(coord);
  expect_sentence(e, where, "timed out after 2 s waiting for rank(s) 2 (joined: ranks 0 here, ranks 1 from 127.0.0.1:");
  EXPECT_EQ(error_of_future(client), e);  // the joined process does not wait out its own timeout
  EXPECT_TRUE(log.has("bootstrap " + where + ": waiting for rank(s) 2 (2 of 3 joined)")) << log.all();
}

TEST(Bootstrap, StrayConnectionIsRefusedAndTheRendezvousGoesOn) {
  Log log;
  Coordinator c(local(0), log.timing(20));
  auto coord = std::async(std::launch::async, [&] { return c.run(hello(3, 2, {0}), {9}); });
  int s = raw_connect(c.port());
  const char http[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(::send(s, http, sizeof http - 1, 0), ssize_t(sizeof http - 1));
  std::string answer = read_all(s);  // a REFUSE frame, then the coordinator closes
  ::close(s);
  ASSERT_GE(answer.size(), 12u);
  EXPECT_EQ(answer.substr(0, 4), "SMBT");
  EXPECT_NE(answer.find("not a smelt bootstrap message (bad magic)"), std::string::npos) << answer;
  EXPECT_TRUE(log.has("refused a connection from 127.0.0.1:")) << log.all();
  // A wrong protocol version is refused the same way.
  s = raw_connect(c.port());
  const uint8_t v9[12] = {'S', 'M', 'B', 'T', 9, 0, 1, 0, 0, 0, 0, 0};
  ASSERT_EQ(::send(s, v9, sizeof v9, 0), ssize_t(sizeof v9));
  answer = read_all(s);
  ::close(s);
  EXPECT_NE(answer.find("it speaks bootstrap version 9, this smelt-run 1"), std::string::npos) << answer;
  Rendezvous r = smelt::net::join(local(c.port()), hello(3, 2, {1}), log.timing(20));
  EXPECT_EQ(r.blob, std::vector<uint8_t>{9});
  EXPECT_EQ(coord.get().processes.size(), 2u);
}

TEST(Bootstrap, PortAlreadyTaken) {
  Log log;
  Coordinator first(local(0), log.timing(20));
  std::string e = error_of([&] { Coordinator second(local(first.port()), log.timing(20)); });
  expect_sentence(e, "127.0.0.1:" + std::to_string(first.port()),
                  "cannot listen on port " + std::to_string(first.port()) + " (Address already in use): another process "
                  "listens there (only the process with rank 0 coordinates)");
}

TEST(Bootstrap, ConnectionRefusedUntilTimeout) {
  Log log;
  const int port = free_port();
  auto t0 = std::chrono::steady_clock::now();
  std::string e = error_of([&] { smelt::net::join(local(port), hello(1, 2, {1}), log.timing(0.6, 0.2)); });
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_sentence(e, "127.0.0.1:" + std::to_string(port), "cannot reach the coordinator within 0.6 s: connection refused");
  EXPECT_GE(waited, 0.55);  // it retried, not gave up at the first refusal
  EXPECT_LT(waited, 5.0);
  EXPECT_TRUE(log.has("not reachable yet (connection refused)")) << log.all();
}

TEST(Bootstrap, UnresolvableHost) {
  Log log;
  std::string e = error_of([&] { smelt::net::join({"no-such-host.invalid", 29500}, hello(1, 2, {1}), log.timing(0.3, 10)); });
  expect_sentence(e, "no-such-host.invalid:29500", "cannot reach the coordinator within 0.3 s: no-such-host.invalid does not resolve");
}

// A listener that is not a coordinator: it answers `reply` (or nothing) and closes.
struct FakeServer {
  int fd = -1, port = 0;
  std::thread t;
  explicit FakeServer(std::string reply) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::listen(fd, 4);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    t = std::thread([this, reply] {
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) return;
      char buf[64];
      ::recv(c, buf, sizeof buf, 0);  // the hello
      if (!reply.empty()) ::send(c, reply.data(), reply.size(), 0);
      ::close(c);
    });
  }
  ~FakeServer() {
    t.join();
    ::close(fd);
  }
};

TEST(Bootstrap, PeerThatIsNotACoordinator) {
  Log log;
  FakeServer http("HTTP/1.0 400 Bad Request\r\n\r\n");
  std::string e = error_of([&] { smelt::net::join(local(http.port), hello(1, 2, {1}), log.timing(5)); });
  expect_sentence(e, "127.0.0.1:" + std::to_string(http.port),
                  "the peer sent something that is not a smelt bootstrap message (bad magic)");
}

TEST(Bootstrap, CoordinatorClosesBeforeAnswering) {
  Log log;
  FakeServer silent("");
  std::string e = error_of([&] { smelt::net::join(local(silent.port), hello(1, 2, {1}), log.timing(5)); });
  expect_sentence(e, "127.0.0.1:" + std::to_string(silent.port),
                  "the coordinator closed the connection before sending the NCCL ids");
}

TEST(Bootstrap, AClientThatLeavesIsWaitedForAgain) {
  Log log;
  Coordinator c(local(0), log.timing(20));
  auto coord = std::async(std::launch::async, [&] { return c.run(hello(3, 3, {0}), {5}); });
  // A process says hello, then dies before the rendezvous completes (rank 2 has not joined yet).
  int s = raw_connect(c.port());
  const uint8_t h[] = {'S', 'M', 'B', 'T', 1, 0, 1, 0, 20, 0, 0, 0,  // HELLO, 20 bytes
                       3, 0, 0, 0, 0, 0, 0, 0,                        // plan hash 3
                       3, 0, 0, 0,                                    // world 3
                       1, 0, 0, 0, 1, 0, 0, 0};                       // ranks [1]
  ASSERT_EQ(::send(s, h, sizeof h, 0), ssize_t(sizeof h));
  for (int i = 0; i < 100 && !log.has("ranks 1 joined"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::close(s);
  for (int i = 0; i < 100 && !log.has("closed its connection"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(log.has("(ranks 1) closed its connection before every rank joined; waiting for its ranks again")) << log.all();
  // The restarted process takes rank 1 again (no overlap with the one that left).
  auto one = std::async(std::launch::async, [&] { return smelt::net::join(local(c.port()), hello(3, 3, {1}), log.timing(20)); });
  auto two = std::async(std::launch::async, [&] { return smelt::net::join(local(c.port()), hello(3, 3, {2}), log.timing(20)); });
  EXPECT_EQ(one.get().blob, std::vector<uint8_t>{5});
  EXPECT_EQ(two.get().self, 2);
  EXPECT_EQ(coord.get().processes, (std::vector<std::vector<int32_t>>{{0}, {1}, {2}}));
}

}  // namespace
