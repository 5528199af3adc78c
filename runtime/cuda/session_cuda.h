// One sequence running a plan on the cuda backend, with the methods of runtime::Session that smelt-run uses
// (prefill in chunks, decode one token, logits out). DSpark drafting and smelt.capture are cpu-only for now.
//
// A partitioned plan (format 1.2) runs its ranks in this process: one CudaBackend per rank on its own GPU (the
// i-th rank here on BackendOptions::devices[i], else GPU (device + i) % count), one host thread per rank for every
// chunk, and the collectives through NCCL (runtime/cuda/nccl.h). Every rank gets the chunk's ids; the logits are
// those of plan.output_rank(). Partitioned plans decode eagerly (no CUDA graphs yet). A failing rank stops the
// NCCL communicators so that the others return; its message is the error and the session is unusable afterwards.
//
// Several processes (BackendOptions::local_ranks + coordinator; docs/partition.md "Several processes / hosts"):
// each process runs its own ranks; before any weight is loaded they meet at the coordinator (runtime/net/
// bootstrap.h: same plan, ranks split exactly, the NCCL unique ids handed out). After every chunk the output
// rank's logits are broadcast to every process, so all of them return the same logits and, sampling with the
// same seed, generate the same tokens. A rank failing in one process does not stop the others' (they wait in
// NCCL until killed).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/cpu/backend.h"
#include "runtime/cuda/backend.h"
#include "runtime/plan.h"
#include "runtime/session.h"

namespace smelt::runtime::cuda {

class NcclComms;

class CudaSession {
 public:
  CudaSession(Plan plan, const BackendOptions& options);
  ~CudaSession();
  static std::unique_ptr<CudaSession> open(const std::string& plan_path, const BackendOptions& options);

  // As Session::prefill: positions position() .. position()+n-1 in chunks of `chunk` rows (0 = max_rows);
  // returns [n, vocab] logits.
  std::vector<float> prefill(std::span<const int32_t> ids, int chunk = 0);
  std::vector<float> decode(int32_t id);  // one row: a CUDA graph replay after the first (plain plans)
  // As prefill / decode, but the logits stay on the GPU (no [rows, vocab] copy to the host): for sampling with
  // backend().sample() right after. Several processes: the broadcast still runs (every process needs them).
  void advance(std::span<const int32_t> ids, int chunk = 0);
  // Bench: a new sequence whose first `n` positions count as prefilled, every state filled with synthetic values
  // (CudaBackend::fill_states_synthetic), without running the prompt.
  void assume_prefilled(int64_t n, uint64_t seed);

  bool can_draft() const { return false; }
  int64_t draft_block() const { return 0; }
  Draft draft(int32_t last_token);  // throws: not on the cuda backend yet
  bool has_capture_ops() const { return false; }
  void set_capturing(bool on);  // on: throws (smelt.capture is cpu-only)
  cpu::CaptureTable take_captures() { return {}; }

  int64_t position() const { return position_; }
  void reset();
  int64_t vocab() const { return plan_->vocab(); }
  const Plan& plan() const { return *plan_; }
  // The output rank's backend (the only one for a plain plan); in a process without the output rank, that of
  // its first rank.
  CudaBackend& backend() { return *backends_[size_t(out_)]; }
  // The ranks this process runs (all of them unless BackendOptions::local_ranks) and their backends.
  size_t n_ranks() const { return backends_.size(); }
  CudaBackend& rank_backend(size_t local) { return *backends_[local]; }
  const std::vector<int>& local_ranks() const { return local_; }
  // This process runs part of a partitioned plan (the others elsewhere): sample on the host from the logits.
  bool several_processes() const;

 private:
  // Runs work(i) for every local rank i, one thread each when there are several; the first failure is rethrown.
  void run_ranks(const std::function<void(size_t)>& work);
  // After a chunk: the output rank's rows x vocab logits into `out` (broadcast between processes when several).
  void take_logits(float* out, int rows);  // out == nullptr: only the broadcast
  // prefill / advance: the chunks, with their logits into `logits` (resized to [n, vocab]) unless it is nullptr.
  void run_chunks(std::span<const int32_t> ids, int chunk, std::vector<float>* logits);
  void release_broadcast() noexcept;

  std::unique_ptr<Plan> plan_;  // stable address: the backends keep references into it
  std::vector<std::unique_ptr<CudaBackend>> backends_;  // by local position (local_[i] is backends_[i]'s rank)
  std::unique_ptr<NcclComms> comms_;                    // destroyed before the backends
  std::vector<int> local_;
  int out_ = 0;                 // local position of the output rank, else of the broadcast's GPU
  bool has_output_ = true;      // the output rank runs here
  unsigned long long bcast_ = 0;  // several processes, no output rank here: where the broadcast logits land
  bool broken_ = false;  // a rank failed mid-run: the communicators are stopped
  int64_t position_ = 0;
};

// The fingerprint several processes compare: FNV-1a of the plan file's 32-byte header (it holds the payload's
// size and hash, checked when the plan was loaded).
uint64_t plan_fingerprint(const std::string& plan_path);

// Whether a plan file holds GPU kernels (smelt-run's default backend: cuda if so, else cpu).
bool plan_has_kernels(const Plan& plan);

}  // namespace smelt::runtime::cuda
