// One sequence running a plan on the cuda backend, with the methods of runtime::Session that smelt-run uses
// (prefill in chunks, decode one token, logits out). DSpark drafting and smelt.capture are cpu-only for now.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/cpu/backend.h"
#include "runtime/cuda/backend.h"
#include "runtime/plan.h"
#include "runtime/session.h"

namespace smelt::runtime::cuda {

class CudaSession {
 public:
  CudaSession(Plan plan, const BackendOptions& options);
  static std::unique_ptr<CudaSession> open(const std::string& plan_path, const BackendOptions& options);

  // As Session::prefill: positions position() .. position()+n-1 in chunks of `chunk` rows (0 = max_rows);
  // returns [n, vocab] logits.
  std::vector<float> prefill(std::span<const int32_t> ids, int chunk = 0);
  std::vector<float> decode(int32_t id);  // one row: a CUDA graph replay after the first

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
  CudaBackend& backend() { return *backend_; }

 private:
  std::unique_ptr<Plan> plan_;  // stable address: the backend keeps a reference
  std::unique_ptr<CudaBackend> backend_;
  int64_t position_ = 0;
};

// Whether a plan file holds GPU kernels (smelt-run's default backend: cuda if so, else cpu).
bool plan_has_kernels(const Plan& plan);

}  // namespace smelt::runtime::cuda
