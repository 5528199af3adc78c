#include "runtime/cuda/session_cuda.h"

#include <algorithm>

namespace smelt::runtime::cuda {

CudaSession::CudaSession(Plan plan, const BackendOptions& options)
    : plan_(std::make_unique<Plan>(std::move(plan))), backend_(std::make_unique<CudaBackend>(*plan_, options)) {}

std::unique_ptr<CudaSession> CudaSession::open(const std::string& plan_path, const BackendOptions& options) {
  return std::make_unique<CudaSession>(Plan::load(plan_path), options);
}

std::vector<float> CudaSession::prefill(std::span<const int32_t> ids, int chunk) {
  const Plan& plan = *plan_;
  if (chunk < 0) plan.fail("chunk size " + std::to_string(chunk) + " is negative");
  int64_t step = chunk == 0 ? plan.max_rows() : std::min<int64_t>(chunk, plan.max_rows());
  int64_t n = int64_t(ids.size()), v = vocab();
  if (position_ + n > plan.max_seq_len())
    plan.fail("the sequence would reach " + std::to_string(position_ + n) + " tokens but the plan was compiled " +
              "for max_seq_len " + std::to_string(plan.max_seq_len()));
  std::vector<float> logits(size_t(n * v));
  for (int64_t start = 0; start < n; start += step) {
    int rows = int(std::min(step, n - start));
    backend_->run(ids.data() + start, position_, rows);
    backend_->read_logits(logits.data() + start * v, rows);
    position_ += rows;
  }
  return logits;
}

std::vector<float> CudaSession::decode(int32_t id) { return prefill(std::span<const int32_t>(&id, 1), 1); }

Draft CudaSession::draft(int32_t) {
  plan_->fail("DSpark drafting runs on the cpu backend only for now (use --backend cpu)");
}

void CudaSession::set_capturing(bool on) {
  if (on) plan_->fail("smelt.capture runs on the cpu backend only (use --backend cpu)");
}

void CudaSession::reset() {
  backend_->reset_state();
  position_ = 0;
}

bool plan_has_kernels(const Plan& plan) {
  const auto* k = plan.fb().kernels();
  return k && k->size() > 0;
}

}  // namespace smelt::runtime::cuda
