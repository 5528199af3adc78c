#include "runtime/cuda/session_cuda.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/cuda/nccl.h"

namespace smelt::runtime::cuda {

CudaSession::CudaSession(Plan plan, const BackendOptions& options) : plan_(std::make_unique<Plan>(std::move(plan))) {
  if (!plan_->partitioned()) {
    backends_.push_back(std::make_unique<CudaBackend>(*plan_, options));
    return;
  }
  out_ = plan_->output_rank();
  nccl();  // no NCCL: one sentence before any GPU memory is taken
  int count = 0;
  check(driver().cuDeviceGetCount(&count), "counting GPUs");
  if (count < 1) throw Error("no GPU found: the cuda backend needs an NVIDIA GPU");
  std::vector<const Plan*> plans = plan_->rank_plans();
  std::vector<int> devices;
  for (size_t r = 0; r < plans.size(); ++r) {
    int dev = options.devices.empty() ? (options.device + int(r)) % count
                                      : options.devices[r % options.devices.size()];
    if (dev < 0 || dev >= count)
      throw Error("--devices: GPU " + std::to_string(dev) + " for rank " + std::to_string(r) + ", but this machine has " +
                  std::to_string(count) + " GPU(s)");
    devices.push_back(dev);
  }
  for (size_t r = 0; r < plans.size(); ++r) {
    BackendOptions o = options;
    o.device = devices[r];
    o.graphs = false;  // partitioned plans decode eagerly for now (NCCL calls are not captured)
    backends_.push_back(std::make_unique<CudaBackend>(*plans[r], o));
    backends_.back()->attach(nullptr, plans[r]->rank_index());
  }
  comms_ = std::make_unique<NcclComms>(devices, plans);
  for (size_t r = 0; r < plans.size(); ++r) backends_[r]->attach(comms_.get(), plans[r]->rank_index());
}

CudaSession::~CudaSession() = default;

std::unique_ptr<CudaSession> CudaSession::open(const std::string& plan_path, const BackendOptions& options) {
  return std::make_unique<CudaSession>(Plan::load(plan_path), options);
}

void CudaSession::run_ranks(const std::function<void(size_t)>& work) {
  if (broken_) plan_->fail("a rank failed earlier and its NCCL communicators are stopped: open the plan again");
  if (backends_.size() == 1) {
    work(0);
    return;
  }
  std::mutex mu;
  std::string first;
  bool failed = false;
  auto fail = [&](const std::string& message) {
    std::lock_guard<std::mutex> lock(mu);
    if (failed) return;
    failed = true;
    first = message;
    comms_->abort();  // the other ranks' pending collectives return instead of waiting forever
  };
  std::vector<std::thread> threads;
  auto body = [&](size_t r) {
    try {
      work(r);
    } catch (const std::exception& e) {
      fail(e.what());
    } catch (...) {
      fail(plan_->path() + " rank " + std::to_string(r) + ": unknown error");
    }
  };
  try {
    for (size_t r = 0; r < backends_.size(); ++r) threads.emplace_back(body, r);
  } catch (const std::exception& e) {
    fail(plan_->path() + ": cannot start a thread per rank (" + e.what() + ")");
  }
  for (std::thread& t : threads) t.join();
  if (failed) {
    broken_ = true;
    throw Error(first);
  }
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
    // Every rank gets the chunk's ids (docs/ops.md "Collectives").
    run_ranks([&](size_t r) { backends_[r]->run(ids.data() + start, position_, rows); });
    backend().read_logits(logits.data() + start * v, rows);
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
  for (auto& b : backends_) b->reset_state();
  position_ = 0;
}

bool plan_has_kernels(const Plan& plan) {
  for (const Plan* p : plan.rank_plans()) {
    const auto* k = p->fb().kernels();
    if (k && k->size() > 0) return true;
  }
  return false;
}

}  // namespace smelt::runtime::cuda
