// NCCL for partitioned plans on the cuda backend, loaded at run time with dlopen("libnccl.so.2") (never linked:
// smelt-run starts without it; only a partitioned plan on the cuda backend needs it), and the communicators of
// one process that runs every rank of a plan on its own GPU (docs/ops.md "Collectives").
//
// Communicators: one per distinct `group` of the ranks' all_reduce / all_gather ops (the TP groups) and one per
// pair of ranks that send / recv (the PP ring's links), each made in-process with ncclCommInitAll over its
// members' GPUs. A member's rank in a group communicator is its position in `group`; in a pair's, 0 for the
// lower global rank. NCCL sums in an order of its own: an all_reduce can differ from the cpu backend's
// group-order sum in the last bits.
//
// Several processes (docs/partition.md "Several processes / hosts"): each process makes only its own ranks'
// members of those communicators, with ncclCommInitRank from unique ids the coordinator handed out
// (runtime/net/bootstrap.h), plus a "world" communicator of one member per process that broadcasts the output
// rank's logits so that every process returns the same logits.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/cuda/launch.h"

namespace smelt::runtime::cuda {

using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
  char internal[128];
};
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

struct Nccl {
  ncclResult_t (*ncclGetVersion)(int*);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*ncclCommInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  const char* (*ncclGetErrorString)(ncclResult_t);
  ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, void*);
  ncclResult_t (*ncclAllGather)(const void*, void*, size_t, int, ncclComm_t, void*);
  ncclResult_t (*ncclSend)(const void*, size_t, int, int, ncclComm_t, void*);
  ncclResult_t (*ncclRecv)(void*, size_t, int, int, ncclComm_t, void*);
  ncclResult_t (*ncclBroadcast)(const void*, void*, size_t, int, int, ncclComm_t, void*);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
};

// The loaded library. Throws smelt::Error with one sentence when there is none ("no NCCL found (libnccl.so.2):
// partitioned plans on the cuda backend need it") or it lacks a symbol. `library` overrides the name (tests).
const Nccl& nccl();
const Nccl& load_nccl(const std::string& library);

// Throws smelt::Error "NCCL error in <what>: <description>" unless r is ncclSuccess.
void check_nccl(ncclResult_t r, const char* what);

// The communicators of all ranks of one partitioned plan in this process; rank threads call run() at the same
// time, each with its own rank (the object is read-only after construction).
class NcclComms {
 public:
  // The communicator keys of a partitioned plan's ranks (plans[r]: global rank r's plan), sorted: the members of
  // each all_reduce / all_gather group and each sending pair. Every process computes the same list, so the
  // coordinator's k-th unique id is the k-th key's. Throws when a pair's sends and receives disagree in order.
  static std::vector<std::vector<int64_t>> keys(const std::vector<const Plan*>& plans);

  // One process runs every rank: devices[r]: the GPU ordinal of global rank r; plans[r]: rank r's plan.
  NcclComms(const std::vector<int>& devices, const std::vector<const Plan*>& plans);

  // Several processes: this process's members only (keys without one are skipped).
  struct World {
    int size = 1, self = 0, root = 0;  // processes; this one's index; the one with the output rank
    int device = 0;                    // this process's GPU in the world communicator
    ncclUniqueId id{};
  };
  // devices[r]: the GPU of global rank r if it runs here, else -1; ids[k]: the unique id of keys(plans)[k].
  NcclComms(const std::vector<int>& devices, const std::vector<const Plan*>& plans, const std::vector<ncclUniqueId>& ids,
            const World& world);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  // Enqueues collective op l.op of global rank `rank` on l.stream (all_reduce, all_gather, send, recv).
  void run(const OpLaunch& l, int rank) const;
  // Scratch one collective op needs at max_rows rows (all_gather: the peers' rows before they are interleaved).
  static uint64_t scratch_bytes(const Plan& plan, const OpRef& op, int64_t max_rows);
  // A failed rank: stops every communicator so that the other ranks' pending collectives return (the
  // communicators are unusable afterwards).
  void abort() noexcept;
  // Several processes: broadcasts `count` floats at `buffer` (this process's world GPU) from the root process to
  // all, enqueued on `stream`. Every process calls it with the same count.
  void broadcast(DevPtr buffer, size_t count, void* stream) const;
  bool has_world() const { return world_ != nullptr; }

 private:
  ncclComm_t comm(const std::vector<int64_t>& key, int rank, int& position) const;
  void make(const std::vector<int64_t>& key, const std::vector<int>& devices);

  void destroy() noexcept;

  std::map<std::vector<int64_t>, std::vector<ncclComm_t>> comms_;  // members (global ranks) -> one per member
                                                                   // (null: a member in another process)
  ncclComm_t world_ = nullptr;
  int world_root_ = 0;
  std::atomic<bool> aborted_{false};
};

}  // namespace smelt::runtime::cuda
