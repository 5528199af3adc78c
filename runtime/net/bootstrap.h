// The rendezvous of the processes that run one partitioned plan together (smelt-run --ranks R --coordinator
// HOST:PORT, docs/partition.md "Several processes / hosts"). NCCL makes communicators across processes only
// from a shared ncclUniqueId, and nothing else checks that the processes agree: this hands the ids from the
// process that hosts global rank 0 (the coordinator) to every other process, after checking that all of them
// run the same plan and that their rank sets are disjoint and cover every rank exactly once. POSIX sockets,
// IPv4, no library; NCCL itself is not needed here (the ids travel as an opaque blob).
//
// Wire format: every message is a frame "SMBT" + u16 version + u16 type + u32 payload length + payload, integers
// little-endian. A client sends HELLO (plan hash, world size, its ranks); the coordinator answers WELCOME (the
// process table, the client's index in it, the blob) once every rank has joined, or REFUSE (one sentence). A
// connection that does not start with the magic is refused and logged; the rendezvous goes on.
//
// Every failure is a smelt::Error of one sentence starting "bootstrap HOST:PORT: " and saying what went wrong.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace smelt::net {

struct Endpoint {
  std::string host;  // IPv4 address or host name
  int port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

// "HOST:PORT" (PORT 1..65535; 0 too when allow_zero, for a coordinator that picks a free port). Throws
// smelt::Error "<flag>: ..." otherwise.
Endpoint parse_endpoint(const std::string& text, const std::string& flag = "--coordinator", bool allow_zero = false);

// What one process tells the coordinator.
struct Hello {
  uint64_t plan_hash = 0;      // the same plan everywhere
  int32_t world = 0;           // the plan's number of ranks
  std::vector<int32_t> ranks;  // the global ranks this process runs
};

// What every process learns.
struct Rendezvous {
  std::vector<uint8_t> blob;                    // the coordinator's bytes, the same in every process
  std::vector<std::vector<int32_t>> processes;  // process p's ranks (sorted): 0 = the coordinator, then by lowest rank
  int self = 0;                                 // this process's index in `processes`
};

struct Timing {
  double timeout_s = 300;  // the whole rendezvous, from the call
  double progress_s = 10;  // a progress line this often while waiting
  std::function<void(const std::string&)> log;  // progress and refused connections; empty = stderr
};

class Coordinator {
 public:
  // Listens on at.port on every IPv4 address of this machine (at.host is how the others reach it; a name
  // that resolves to a loopback address here must not lock the other hosts out). Port 0: a free port.
  explicit Coordinator(const Endpoint& at, Timing timing = {});
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int port() const { return port_; }
  // Waits for the other processes until every rank of self.world is claimed, then sends each one `blob` and
  // the process table. Throws on a plan or world mismatch, a rank claimed twice or out of range, or the
  // timeout (the joined processes get the same sentence).
  Rendezvous run(const Hello& self, const std::vector<uint8_t>& blob);

 private:
  Endpoint at_;
  Timing timing_;
  int fd_ = -1;
  int port_ = 0;
};

// A process without rank 0: connects (retrying until the timeout: the coordinator may start later), says
// hello and waits for the answer.
Rendezvous join(const Endpoint& coordinator, const Hello& self, const Timing& timing = {});

// "0,1,3" (for messages; any integer rank type: the rendezvous's int32, the session's int, NCCL keys' int64).
template <typename Int>
std::string rank_list(const std::vector<Int>& ranks) {
  std::string s;
  for (Int r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

}  // namespace smelt::net
