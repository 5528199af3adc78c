#include "runtime/cuda/session_cuda.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/cuda/nccl.h"
#include "runtime/net/bootstrap.h"
#include "schemas/plan_file.h"

namespace smelt::runtime::cuda {

namespace {

// The ranks this process runs: options.local_ranks (checked, sorted) or all of them.
std::vector<int> ranks_here(const Plan& plan, int world, const BackendOptions& options) {
  std::vector<int> local = options.local_ranks;
  if (local.empty())
    for (int r = 0; r < world; ++r) local.push_back(r);
  std::sort(local.begin(), local.end());
  for (size_t i = 0; i < local.size(); ++i) {
    if (local[i] < 0 || local[i] >= world)
      throw Error("--ranks: " + plan.path() + " has no rank " + std::to_string(local[i]) + " (it has " +
                  std::to_string(world) + ": 0.." + std::to_string(world - 1) + ")");
    if (i && local[i] == local[i - 1]) throw Error("--ranks lists rank " + std::to_string(local[i]) + " twice");
  }
  if (int(local.size()) < world && options.coordinator.empty())
    throw Error("--ranks " + net::rank_list(local) + " runs part of " + plan.path() + "'s " + std::to_string(world) +
                " ranks: the others run in other processes, so give every process --coordinator HOST:PORT");
  return local;
}

}  // namespace

uint64_t plan_fingerprint(const std::string& plan_path) {
  uint8_t header[plan_file::kHeaderSize] = {};
  std::FILE* f = std::fopen(plan_path.c_str(), "rb");
  size_t n = f ? std::fread(header, 1, sizeof header, f) : 0;
  if (f) std::fclose(f);
  if (n != sizeof header) throw Error(plan_path + ": cannot read the plan header again to fingerprint it");
  return plan_file::fnv1a64(header, sizeof header);
}

CudaSession::CudaSession(Plan plan, const BackendOptions& options) : plan_(std::make_unique<Plan>(std::move(plan))) {
  if (!plan_->partitioned()) {
    if (!options.local_ranks.empty() && options.local_ranks != std::vector<int>{0})
      throw Error("--ranks: " + plan_->path() + " is not partitioned; its only rank is 0");
    backends_.push_back(std::make_unique<CudaBackend>(*plan_, options));
    local_ = {0};
    return;
  }
  std::vector<const Plan*> plans = plan_->rank_plans();
  const int world = int(plans.size());
  local_ = ranks_here(*plan_, world, options);
  const bool several = int(local_.size()) < world;
  const net::Endpoint ep = several ? net::parse_endpoint(options.coordinator) : net::Endpoint{};
  nccl();  // no NCCL: one sentence before any GPU memory is taken
  int count = 0;
  check(driver().cuDeviceGetCount(&count), "counting GPUs");
  if (count < 1) throw Error("no GPU found: the cuda backend needs an NVIDIA GPU");
  std::vector<int> devices(size_t(world), -1);  // by global rank; -1: in another process
  for (size_t i = 0; i < local_.size(); ++i) {
    int dev = options.devices.empty() ? (options.device + int(i)) % count : options.devices[i % options.devices.size()];
    if (dev < 0 || dev >= count)
      throw Error("--devices: GPU " + std::to_string(dev) + " for rank " + std::to_string(local_[i]) +
                  ", but this machine has " + std::to_string(count) + " GPU(s)");
    devices[size_t(local_[i])] = dev;
  }
  const int out_rank = plan_->output_rank();
  auto at = std::find(local_.begin(), local_.end(), out_rank);
  has_output_ = at != local_.end();
  out_ = has_output_ ? int(at - local_.begin()) : 0;

  // Several processes: meet before any weight is loaded, so a wrong plan or rank split fails at once.
  std::vector<ncclUniqueId> ids;
  NcclComms::World w;
  if (several) {
    net::Timing timing;
    timing.timeout_s = options.bootstrap_timeout_s;
    net::Hello hello;
    hello.plan_hash = plan_fingerprint(plan_->path());
    hello.world = world;
    hello.ranks.assign(local_.begin(), local_.end());
    const size_t n_ids = NcclComms::keys(plans).size() + 1;  // + the processes' communicator
    net::Rendezvous rv;
    if (local_[0] == 0) {
      net::Coordinator coordinator(ep, timing);  // listening before the ids exist: early clients queue
      std::vector<uint8_t> blob(n_ids * sizeof(ncclUniqueId));
      for (size_t k = 0; k < n_ids; ++k) {
        ncclUniqueId id;
        check_nccl(nccl().ncclGetUniqueId(&id), "making a unique id");
        std::memcpy(blob.data() + k * sizeof id, &id, sizeof id);
      }
      rv = coordinator.run(hello, blob);
    } else {
      rv = net::join(ep, hello, timing);
    }
    if (rv.blob.size() != n_ids * sizeof(ncclUniqueId))
      throw Error("bootstrap " + ep.text() + ": the coordinator sent " + std::to_string(rv.blob.size()) +
                  " bytes of NCCL ids, this process needs " + std::to_string(n_ids * sizeof(ncclUniqueId)) +
                  " (run the same smelt-run build everywhere)");
    ids.resize(n_ids);
    for (size_t k = 0; k < n_ids; ++k) std::memcpy(&ids[k], rv.blob.data() + k * sizeof(ncclUniqueId), sizeof(ncclUniqueId));
    w.id = ids.back();
    ids.pop_back();
    w.size = int(rv.processes.size());
    w.self = rv.self;
    for (size_t p = 0; p < rv.processes.size(); ++p)
      for (int32_t r : rv.processes[p])
        if (r == out_rank) w.root = int(p);
    w.device = devices[size_t(local_[size_t(out_)])];
  }

  for (size_t i = 0; i < local_.size(); ++i) {
    BackendOptions o = options;
    o.device = devices[size_t(local_[i])];
    o.graphs = false;  // partitioned plans decode eagerly for now (NCCL calls are not captured)
    backends_.push_back(std::make_unique<CudaBackend>(*plans[size_t(local_[i])], o));
    backends_.back()->attach(nullptr, local_[i]);
  }
  comms_ = several ? std::make_unique<NcclComms>(devices, plans, ids, w) : std::make_unique<NcclComms>(devices, plans);
  for (size_t i = 0; i < local_.size(); ++i) backends_[i]->attach(comms_.get(), local_[i]);
  if (several && !has_output_) {
    backend().make_current();
    CUdeviceptr p = 0;
    check(driver().cuMemAlloc(&p, size_t(plan_->max_rows()) * size_t(vocab()) * 4), "allocating the broadcast logits");
    bcast_ = p;
  }
}

CudaSession::~CudaSession() {
  comms_.reset();  // before the buffers and backends its pending work may touch
  release_broadcast();
}

void CudaSession::release_broadcast() noexcept {
  if (!bcast_) return;
  try {
    backend().make_current();
  } catch (...) {
  }
  driver().cuMemFree(bcast_);
  bcast_ = 0;
}

std::unique_ptr<CudaSession> CudaSession::open(const std::string& plan_path, const BackendOptions& options) {
  return std::make_unique<CudaSession>(Plan::load(plan_path), options);
}

void CudaSession::run_ranks(const std::function<void(size_t)>& work) {
  if (broken_) plan_->fail("a rank failed earlier and its NCCL communicators are stopped: open the plan again");
  if (backends_.size() == 1) {
    try {
      work(0);
    } catch (...) {
      if (comms_) {  // one rank of several processes: its communicators are unusable now
        comms_->abort();
        broken_ = true;
      }
      throw;
    }
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
  std::vector<float> logits;
  run_chunks(ids, chunk, &logits);
  return logits;
}

void CudaSession::advance(std::span<const int32_t> ids, int chunk) { run_chunks(ids, chunk, nullptr); }

void CudaSession::run_chunks(std::span<const int32_t> ids, int chunk, std::vector<float>* logits) {
  const Plan& plan = *plan_;
  if (chunk < 0) plan.fail("chunk size " + std::to_string(chunk) + " is negative");
  int64_t step = chunk == 0 ? plan.max_rows() : std::min<int64_t>(chunk, plan.max_rows());
  int64_t n = int64_t(ids.size()), v = vocab();
  if (position_ + n > plan.max_seq_len())
    plan.fail("the sequence would reach " + std::to_string(position_ + n) + " tokens but the plan was compiled " +
              "for max_seq_len " + std::to_string(plan.max_seq_len()));
  if (logits) logits->assign(size_t(n * v), 0.f);  // after the checks: n x vocab floats can be large
  for (int64_t start = 0; start < n; start += step) {
    int rows = int(std::min(step, n - start));
    // Every rank gets the chunk's ids (docs/ops.md "Collectives").
    run_ranks([&](size_t r) { backends_[r]->run(ids.data() + start, position_, rows); });
    if (logits) take_logits(logits->data() + start * v, rows);
    else if (several_processes()) take_logits(nullptr, rows);  // the broadcast, without the host copy
    position_ += rows;
  }
}

bool CudaSession::several_processes() const { return comms_ && comms_->has_world(); }

void CudaSession::take_logits(float* out, int rows) {
  CudaBackend& b = backend();
  if (!comms_ || !comms_->has_world()) {
    b.read_logits(out, rows);
    return;
  }
  // Several processes: the output rank's rows go to every process (in place there, into bcast_ elsewhere).
  const size_t count = size_t(rows) * size_t(vocab());
  const CUdeviceptr p = has_output_ ? b.logits_device() : bcast_;
  try {
    b.make_current();
    comms_->broadcast(p, count, b.stream());
    check(driver().cuStreamSynchronize(b.stream()), "broadcasting the logits");
    if (out) check(driver().cuMemcpyDtoH(out, p, count * 4), "reading the logits");
  } catch (...) {
    comms_->abort();
    broken_ = true;
    throw;
  }
}

std::vector<float> CudaSession::decode(int32_t id) { return prefill(std::span<const int32_t>(&id, 1), 1); }

Draft CudaSession::draft(int32_t) {
  plan_->fail("DSpark drafting runs on the cpu backend only for now (use --backend cpu)");
}

void CudaSession::set_capturing(bool on) {
  if (on) plan_->fail("smelt.capture runs on the cpu backend only (use --backend cpu)");
}

void CudaSession::assume_prefilled(int64_t n, uint64_t seed) {
  if (n < 0 || n >= plan_->max_seq_len())
    plan_->fail("position " + std::to_string(n) + " is outside the plan's max_seq_len " +
                std::to_string(plan_->max_seq_len()));
  for (auto& b : backends_) b->fill_states_synthetic(seed);
  position_ = n;
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
