// One sequence running a plan on the cuda backend, with the methods of runtime::Session that smelt-run uses
// (prefill in chunks, decode one token, logits out). DSpark drafting and smelt.capture are cpu-only for now.
//
// A partitioned plan (format 1.2) runs every rank in this process: one CudaBackend per rank on its own GPU (rank
// r on BackendOptions::devices[r], else GPU (device + r) % count), one host thread per rank for every chunk, and
// the collectives through NCCL (runtime/cuda/nccl.h). Every rank gets the chunk's ids; the logits are those of
// plan.output_rank(). Partitioned plans decode eagerly (no CUDA graphs yet). A failing rank stops the NCCL
// communicators so that the others return; its message is the error and the session is unusable afterwards.
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
  // The output rank's backend (the only one for a plain plan).
  CudaBackend& backend() { return *backends_[size_t(out_)]; }
  size_t n_ranks() const { return backends_.size(); }
  CudaBackend& rank_backend(size_t rank) { return *backends_[rank]; }

 private:
  // Runs work(rank) for every rank, one thread each when there are several; the first failure is rethrown.
  void run_ranks(const std::function<void(size_t)>& work);

  std::unique_ptr<Plan> plan_;  // stable address: the backends keep references into it
  std::vector<std::unique_ptr<CudaBackend>> backends_;  // by global rank
  std::unique_ptr<NcclComms> comms_;                    // destroyed before the backends
  int out_ = 0;
  bool broken_ = false;  // a rank failed mid-run: the communicators are stopped
  int64_t position_ = 0;
};

// Whether a plan file holds GPU kernels (smelt-run's default backend: cuda if so, else cpu).
bool plan_has_kernels(const Plan& plan);

}  // namespace smelt::runtime::cuda
