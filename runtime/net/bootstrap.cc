#include "runtime/net/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "frontends/error.h"

namespace smelt::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[4] = {'S', 'M', 'B', 'T'};
constexpr uint16_t kVersion = 1;
constexpr uint16_t kHello = 1, kWelcome = 2, kRefuse = 3;
constexpr size_t kFrameHeader = 12;
constexpr uint32_t kMaxPayload = 1u << 20;  // ids of a few hundred communicators fit many times over

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

int ms_until(Clock::time_point t) {
  double s = seconds_left(t);
  return s <= 0 ? 0 : int(std::min(s * 1000.0 + 1.0, 2.0e9));
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", std::round(s * 10.0) / 10.0);
  return buf;
}

void say(const Timing& t, const std::string& line) {
  if (t.log) t.log(line);
  else std::fprintf(stderr, "%s\n", line.c_str());
}

// A socket closed on scope exit unless released.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd = o.fd, o.fd = -1;
    }
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// ---- encoding ----------------------------------------------------------------------------------------------

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
void put_ranks(std::vector<uint8_t>& b, const std::vector<int32_t>& r) {
  put_u32(b, uint32_t(r.size()));
  for (int32_t x : r) put_u32(b, uint32_t(x));
}

// Reads a payload; any overrun means a malformed message (`bad` is set, zeros returned).
struct Reader {
  const std::vector<uint8_t>& b;
  size_t at = 0;
  bool bad = false;
  uint64_t get(int bytes) {
    if (at + size_t(bytes) > b.size()) {
      bad = true;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(b[at + size_t(i)]) << (8 * i);
    at += size_t(bytes);
    return v;
  }
  std::vector<int32_t> ranks() {
    uint32_t n = uint32_t(get(4));
    if (n > (b.size() - std::min(at, b.size())) / 4) {
      bad = true;
      return {};
    }
    std::vector<int32_t> r(n);
    for (auto& x : r) x = int32_t(uint32_t(get(4)));
    return r;
  }
};

std::vector<uint8_t> frame(uint16_t type, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> f(kMagic, kMagic + 4);
  f.push_back(uint8_t(kVersion)), f.push_back(uint8_t(kVersion >> 8));
  f.push_back(uint8_t(type)), f.push_back(uint8_t(type >> 8));
  put_u32(f, uint32_t(payload.size()));
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

std::vector<uint8_t> refuse_frame(const std::string& sentence) {
  return frame(kRefuse, std::vector<uint8_t>(sentence.begin(), sentence.end()));
}

// ---- socket I/O ----------------------------------------------------------------------------------------------

// Sends all of `data`; false when the peer is gone (no SIGPIPE).
bool send_all(int fd, const std::vector<uint8_t>& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

enum class Got { Ok, Closed, Timeout, Error };

Got read_exact(int fd, uint8_t* out, size_t n, Clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, ms_until(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Got::Error;
    if (r == 0) return Got::Timeout;
    ssize_t k = ::recv(fd, out + done, n - done, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k < 0) return errno == ECONNRESET ? Got::Closed : Got::Error;
    if (k == 0) return Got::Closed;
    done += size_t(k);
  }
  return Got::Ok;
}

struct Frame {
  uint16_t type = 0;
  std::vector<uint8_t> payload;
};

// Reads one frame; on failure `problem` says what, as a verb phrase ("the peer <problem>").
Got read_frame(int fd, Clock::time_point deadline, Frame& f, std::string& problem) {
  uint8_t h[kFrameHeader];
  Got g = read_exact(fd, h, kFrameHeader, deadline);
  if (g != Got::Ok) return g;
  if (std::memcmp(h, kMagic, 4) != 0) {
    problem = "sent something that is not a smelt bootstrap message (bad magic)";
    return Got::Error;
  }
  uint16_t version = uint16_t(h[4] | (h[5] << 8));
  f.type = uint16_t(h[6] | (h[7] << 8));
  uint32_t len = uint32_t(h[8]) | uint32_t(h[9]) << 8 | uint32_t(h[10]) << 16 | uint32_t(h[11]) << 24;
  if (version != kVersion) {
    problem = "speaks bootstrap version " + std::to_string(version) + ", this smelt-run " + std::to_string(kVersion) +
              " (run the same smelt-run build everywhere)";
    return Got::Error;
  }
  if (len > kMaxPayload) {
    problem = "sent a " + std::to_string(len) + "-byte message, more than a bootstrap message can be";
    return Got::Error;
  }
  f.payload.assign(len, 0);
  g = read_exact(fd, f.payload.data(), len, deadline);
  if (g == Got::Ok && f.type != kHello && f.type != kWelcome && f.type != kRefuse) {
    problem = "sent a message of unknown type " + std::to_string(f.type);
    return Got::Error;
  }
  return g;
}

std::string peer_name(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Connects once, waiting at most until `deadline`; "" on success, else why not ("connection refused").
std::string connect_once(const Endpoint& to, Clock::time_point deadline, Fd& out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(to.host.c_str(), std::to_string(to.port).c_str(), &hints, &res);
  if (gai != 0) return to.host + " does not resolve (" + ::gai_strerror(gai) + ")";
  std::string why = "no IPv4 address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int flags = ::fcntl(s.fd, F_GETFL, 0);
    ::fcntl(s.fd, F_SETFL, flags | O_NONBLOCK);  // a connect that can give up at the deadline
    int r = ::connect(s.fd, a->ai_addr, a->ai_addrlen);
    int err = r == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{s.fd, POLLOUT, 0};
      int k = ::poll(&p, 1, std::min(ms_until(deadline), 5000));
      if (k <= 0) {
        why = "connection timed out";
        continue;
      }
      socklen_t len = sizeof err;
      ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      why = err == ECONNREFUSED ? "connection refused" : std::strerror(err);
      continue;
    }
    ::fcntl(s.fd, F_SETFL, flags);
    ::freeaddrinfo(res);
    out = std::move(s);
    return "";
  }
  ::freeaddrinfo(res);
  return why;
}

// The checks every process's claim must pass; "" when it does.
std::string claim_problem(const Hello& h, const std::string& who) {
  std::set<int32_t> seen;
  if (h.ranks.empty()) return who + " runs no rank";
  for (int32_t r : h.ranks) {
    if (r < 0 || r >= h.world)
      return who + " claims rank " + std::to_string(r) + " but the plan has " + std::to_string(h.world) +
             " ranks (0.." + std::to_string(h.world - 1) + ")";
    if (!seen.insert(r).second) return who + " lists rank " + std::to_string(r) + " twice";
  }
  return "";
}

}  // namespace

Endpoint parse_endpoint(const std::string& text, const std::string& flag, bool allow_zero) {
  size_t colon = text.rfind(':');
  Endpoint e;
  if (colon == std::string::npos || colon == 0)
    throw Error(flag + ": '" + text + "' is not HOST:PORT (e.g. 10.0.0.1:29500)");
  e.host = text.substr(0, colon);
  std::string p = text.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
    throw Error(flag + ": '" + text + "' has no port number after the colon (HOST:PORT, e.g. 10.0.0.1:29500)");
  e.port = std::stoi(p);
  if (e.port > 65535 || (e.port == 0 && !allow_zero))
    throw Error(flag + ": port " + p + " is not a TCP port (1..65535)");
  return e;
}

// ---- coordinator ---------------------------------------------------------------------------------------------

Coordinator::Coordinator(const Endpoint& at, Timing timing) : at_(at), timing_(std::move(timing)) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) throw Error("bootstrap " + at_.text() + ": cannot open a socket (" + std::strerror(errno) + ")");
  int one = 1;
  ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(at_.port));
  if (::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s.fd, 64) != 0) {
    const int err = errno;
    throw Error("bootstrap " + at_.text() + ": cannot listen on port " + std::to_string(at_.port) + " (" +
                std::strerror(err) + ")" +
                (err == EADDRINUSE ? ": another process listens there (only the process with rank 0 coordinates)" : ""));
  }
  socklen_t len = sizeof a;
  ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  if (at_.port == 0) at_.port = port_;
  fd_ = s.fd, s.fd = -1;
}

Coordinator::~Coordinator() {
  if (fd_ >= 0) ::close(fd_);
}

Rendezvous Coordinator::run(const Hello& self, const std::vector<uint8_t>& blob) {
  const std::string where = "bootstrap " + at_.text() + ": ";
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timing_.timeout_s));
  if (std::string p = claim_problem(self, "the coordinator"); !p.empty()) throw Error(where + p);

  struct Peer {
    Fd fd;
    std::string name;  // ip:port
    Hello hello;
  };
  std::vector<Peer> peers;
  std::map<int32_t, int> owner;  // rank -> -1 (the coordinator) or peer index
  for (int32_t r : self.ranks) owner[r] = -1;
  auto who = [&](int o) { return o < 0 ? std::string("the coordinator") : "the process at " + peers[size_t(o)].name; };
  auto missing = [&] {
    std::vector<int32_t> m;
    for (int32_t r = 0; r < self.world; ++r)
      if (!owner.count(r)) m.push_back(r);
    return m;
  };
  // A fatal problem: every joined process hears the same sentence.
  auto fail = [&](const std::string& sentence) {
    std::vector<uint8_t> f = refuse_frame(where + sentence);
    for (Peer& p : peers) send_all(p.fd.fd, f);
    throw Error(where + sentence);
  };

  auto next_progress = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timing_.progress_s));
  while (!missing().empty()) {
    if (Clock::now() >= deadline) {
      std::string joined = "ranks " + rank_list(self.ranks) + " here";
      for (const Peer& p : peers) joined += ", ranks " + rank_list(p.hello.ranks) + " from " + p.name;
      fail("timed out after " + secs(timing_.timeout_s) + " waiting for rank(s) " + rank_list(missing()) +
           " (joined: " + joined + ")");
    }
    if (Clock::now() >= next_progress) {
      say(timing_, where + "waiting for rank(s) " + rank_list(missing()) + " (" +
                       std::to_string(self.world - int(missing().size())) + " of " + std::to_string(self.world) +
                       " joined), " + secs(std::chrono::duration<double>(Clock::now() - start).count()) + " of " +
                       secs(timing_.timeout_s));
      next_progress += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timing_.progress_s));
    }
    std::vector<pollfd> fds{{fd_, POLLIN, 0}};
    for (const Peer& p : peers) fds.push_back({p.fd.fd, POLLIN, 0});
    int k = ::poll(fds.data(), fds.size(), std::min(ms_until(deadline), ms_until(next_progress)));
    if (k < 0 && errno != EINTR) fail(std::string("poll failed (") + std::strerror(errno) + ")");
    if (k <= 0) continue;
    // A joined process sends nothing more: readable means it left (or misbehaves); forget its ranks.
    for (size_t i = peers.size(); i-- > 0;) {
      if (!fds[i + 1].revents) continue;
      say(timing_, where + "the process at " + peers[i].name + " (ranks " + rank_list(peers[i].hello.ranks) +
                       ") closed its connection before every rank joined; waiting for its ranks again");
      for (int32_t r : peers[i].hello.ranks) owner.erase(r);
      peers.erase(peers.begin() + std::ptrdiff_t(i));
      for (auto& [r, o] : owner)
        if (o > int(i)) --o;
    }
    if (!(fds[0].revents & POLLIN)) continue;
    sockaddr_in from{};
    socklen_t len = sizeof from;
    Fd c(::accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC));
    if (c.fd < 0) continue;
    const std::string name = peer_name(from);
    // An honest process says hello right after connecting; a silent one is dropped after a few seconds.
    Frame f;
    std::string problem;
    Got g = read_frame(c.fd, std::min(deadline, Clock::now() + std::chrono::seconds(10)), f, problem);
    if (g == Got::Ok && f.type != kHello) problem = "sent a message of type " + std::to_string(f.type) + " instead of a hello";
    Hello h;
    if (g == Got::Ok && problem.empty()) {
      Reader rd{f.payload};
      h.plan_hash = rd.get(8);
      h.world = int32_t(uint32_t(rd.get(4)));
      h.ranks = rd.ranks();
      if (rd.bad || rd.at != f.payload.size()) problem = "sent a malformed hello";
    }
    if (g != Got::Ok || !problem.empty()) {
      if (problem.empty())
        problem = g == Got::Timeout ? "said nothing within 10 s" : "closed the connection before saying hello";
      const std::string sentence = where + "refused a connection from " + name + ": it " + problem;
      say(timing_, sentence);
      send_all(c.fd, refuse_frame(sentence));
      continue;
    }
    const std::string them = "the process at " + name + " (ranks " + rank_list(h.ranks) + ")";
    peers.push_back({std::move(c), name, h});
    if (h.plan_hash != self.plan_hash)
      fail(them + " runs a different plan than the coordinator (plan hash " + hex(h.plan_hash) + " vs " +
           hex(self.plan_hash) + "): every process must load the same plan file");
    if (h.world != self.world)
      fail(them + " has a plan of " + std::to_string(h.world) + " ranks, the coordinator's has " +
           std::to_string(self.world));
    if (std::string p = claim_problem(h, them); !p.empty()) fail(p);
    for (int32_t r : h.ranks)
      if (owner.count(r))
        fail("rank " + std::to_string(r) + " is claimed by both " + who(owner[r]) + " and " + them +
             ": give each process its own --ranks");
    for (int32_t r : h.ranks) owner[r] = int(peers.size()) - 1;
    say(timing_, where + "ranks " + rank_list(h.ranks) + " joined from " + name);
  }

  // Everyone is here: the process table (coordinator first, then by lowest rank) and the blob to each.
  std::vector<size_t> order(peers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (Peer& p : peers) std::sort(p.hello.ranks.begin(), p.hello.ranks.end());
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return peers[a].hello.ranks[0] < peers[b].hello.ranks[0]; });
  Rendezvous out;
  out.blob = blob;
  out.processes.push_back(self.ranks);
  std::sort(out.processes[0].begin(), out.processes[0].end());
  for (size_t i : order) out.processes.push_back(peers[i].hello.ranks);
  for (size_t k = 0; k < order.size(); ++k) {
    std::vector<uint8_t> payload;
    put_u32(payload, uint32_t(k + 1));
    put_u32(payload, uint32_t(out.processes.size()));
    for (const auto& p : out.processes) put_ranks(payload, p);
    put_u32(payload, uint32_t(blob.size()));
    payload.insert(payload.end(), blob.begin(), blob.end());
    const Peer& p = peers[order[k]];
    if (!send_all(p.fd.fd, frame(kWelcome, payload)))
      fail("the process at " + p.name + " (ranks " + rank_list(p.hello.ranks) +
           ") closed its connection before it received the NCCL ids");
  }
  out.self = 0;
  return out;
}

// ---- client --------------------------------------------------------------------------------------------------

Rendezvous join(const Endpoint& to, const Hello& self, const Timing& timing) {
  const std::string where = "bootstrap " + to.text() + ": ";
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timing.timeout_s));
  const auto every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timing.progress_s));
  auto next_progress = start + every;
  auto elapsed = [&] { return secs(std::chrono::duration<double>(Clock::now() - start).count()) + " of " + secs(timing.timeout_s); };
  if (to.port <= 0 || to.port > 65535) throw Error(where + "port " + std::to_string(to.port) + " is not a TCP port (1..65535)");

  // The coordinator may start later (or still be loading): retry until the deadline.
  Fd s;
  std::string why;
  for (;;) {
    why = connect_once(to, deadline, s);
    if (why.empty()) break;
    if (Clock::now() >= deadline)
      throw Error(where + "cannot reach the coordinator within " + secs(timing.timeout_s) + ": " + why);
    if (Clock::now() >= next_progress) {
      say(timing, where + "the coordinator is not reachable yet (" + why + "), " + elapsed());
      next_progress += every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(200, ms_until(deadline))));
  }
  std::vector<uint8_t> payload;
  put_u64(payload, self.plan_hash);
  put_u32(payload, uint32_t(self.world));
  put_ranks(payload, self.ranks);
  if (!send_all(s.fd, frame(kHello, payload)))
    throw Error(where + "the coordinator closed the connection before this process said hello");

  Frame f;
  std::string problem;
  for (;;) {  // the answer comes when every rank has joined: progress lines meanwhile
    Got g = read_frame(s.fd, std::min(deadline, next_progress), f, problem);
    if (g == Got::Timeout && Clock::now() < deadline) {
      say(timing, where + "connected, waiting for the other processes, " + elapsed());
      next_progress += every;
      continue;
    }
    if (g == Got::Timeout) throw Error(where + "the coordinator did not answer within " + secs(timing.timeout_s));
    if (g == Got::Closed) throw Error(where + "the coordinator closed the connection before sending the NCCL ids");
    if (g == Got::Error)
      throw Error(where + "the peer " + (problem.empty() ? "failed (" + std::string(std::strerror(errno)) + ")" : problem));
    break;
  }
  if (f.type == kRefuse) {
    std::string sentence(f.payload.begin(), f.payload.end());
    throw Error(sentence.rfind("bootstrap ", 0) == 0 ? sentence : where + sentence);
  }
  if (f.type != kWelcome) throw Error(where + "the coordinator sent a message of type " + std::to_string(f.type));
  Reader rd{f.payload};
  Rendezvous out;
  out.self = int(uint32_t(rd.get(4)));
  uint32_t n = uint32_t(rd.get(4));
  if (n > f.payload.size() / 4) rd.bad = true;
  for (uint32_t i = 0; i < n && !rd.bad; ++i) out.processes.push_back(rd.ranks());
  uint32_t blob = uint32_t(rd.get(4));
  if (!rd.bad && blob == f.payload.size() - rd.at) out.blob.assign(f.payload.begin() + std::ptrdiff_t(rd.at), f.payload.end());
  else rd.bad = true;
  if (rd.bad || out.self <= 0 || out.self >= int(out.processes.size()))
    throw Error(where + "the coordinator sent a malformed answer");
  std::vector<int32_t> mine = self.ranks;
  std::sort(mine.begin(), mine.end());
  if (out.processes[size_t(out.self)] != mine) throw Error(where + "the coordinator's process table does not list this process's ranks");
  return out;
}

}  // namespace smelt::net
