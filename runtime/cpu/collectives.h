// The in-process communicator of the cpu backend: all ranks of a partitioned plan are threads of one process
// and exchange rows through this object (docs/ops.md "Collectives").
//
// - all_reduce: every member publishes a pointer to its partial, waits for the others, and computes the sum
//   itself over the same pointers in `group` order, then waits again before anyone may overwrite its input.
//   Every member therefore gets the same bits, run after run, whatever order the threads arrive in.
// - all_gather: the same rendezvous; every member copies the members' rows side by side in group order.
// - send / recv: a FIFO mailbox per (from, to, tag); send copies and never blocks, recv waits.
// - abort: a failing rank stops everyone: each waiting or later call throws Aborted with the first message,
//   so one rank's error never leaves the others hanging.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "frontends/error.h"

namespace smelt::runtime::cpu {

// Thrown in the ranks that did not fail when another rank aborted the run; carries that rank's message.
struct Aborted : Error {
  using Error::Error;
};

class Communicator {
 public:
  explicit Communicator(int n_ranks) : n_ranks_(n_ranks) {}
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  int size() const { return n_ranks_; }

  // y = sum over the members' x (count floats each), added in `group` order starting from group[0]'s x; a
  // member passing x = nullptr (no partial: an empty shard) contributes zeros.
  void all_reduce(int rank, std::span<const int64_t> group, const float* x, float* y, size_t count);
  // y = rows x sum(widths): row r holds the members' row r side by side in group order; member k's x is
  // rows x widths[k].
  void all_gather(int rank, std::span<const int64_t> group, std::span<const int64_t> widths, const float* x, float* y,
                  int rows);
  void send(int rank, int peer, int64_t tag, const float* x, size_t count);
  void recv(int rank, int peer, int64_t tag, float* y, size_t count);

  // Stops the run: every waiting and later call throws Aborted(message). The first message is kept.
  void abort(const std::string& message);
  bool aborted() const;
  std::string abort_message() const;
  // A clean state for the next run (call only while no rank is inside a call): no abort, empty mailboxes.
  void reset();

 private:
  // One rendezvous point per group (its member list, in order).
  struct Meeting {
    std::vector<const float*> x;  // each member's input, by position in the group
    uint64_t generation = 0;
    size_t arrived = 0;
  };
  size_t position(int rank, std::span<const int64_t> group) const;
  Meeting& enter(int rank, std::span<const int64_t> group, const float* x, std::unique_lock<std::mutex>& lock);
  void barrier(Meeting& m, size_t members, std::unique_lock<std::mutex>& lock);
  void check_aborted() const;

  int n_ranks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  std::string message_;
  std::map<std::vector<int64_t>, Meeting> meetings_;
  std::map<std::tuple<int, int, int64_t>, std::deque<std::vector<float>>> mail_;
};

}  // namespace smelt::runtime::cpu
