// CudaBackend::sample: the launch sequence of kernels/sampling/sampling.cu on the backend's stream, eagerly
// (never inside the decode graph: the draw number changes every step).
#include <algorithm>

#include "kernels/sampling/sampling.cuh"
#include "runtime/cuda/backend.h"

namespace smelt::runtime::cuda {

namespace {

constexpr uint64_t kHistBytes = 2048 * 8;  // smelt_sample_* hist: 2048 u64 at offset 256
constexpr uint64_t kQOffset = 256 + kHistBytes;

}  // namespace

bool CudaBackend::can_sample() {
  if (plan_.logits() < 0) return false;
  if (!module_of_.empty()) return module_of_.count("smelt_sample_pick") > 0;
  try {  // modules whose symbol tables could not be read: ask them
    function("smelt_sample_pick");
    return true;
  } catch (const Error&) {
    return false;
  }
}

int32_t CudaBackend::sample(const kernels::SamplerParams& p, uint64_t step) {
  make_current();
  if (plan_.logits() < 0) plan_.fail("this rank has no logits: sample on the output rank's backend");
  if (last_rows_ < 1) plan_.fail("sampling before any run: there are no logits yet");
  const int64_t n = plan_.vocab();
  const bool greedy = !(p.temperature > 0.0) || n < 2;
  if (!greedy && uint64_t(n) > smelt_sampling::kMaxVocab)
    plan_.fail("vocab " + std::to_string(n) + ": sampling supports at most " +
               std::to_string(smelt_sampling::kMaxVocab) + " tokens");
  if (!sample_scratch_) {
    check(d_.cuMemAlloc(&sample_scratch_, kQOffset + uint64_t(n) * 8), "allocating the sampling scratch");
    check(d_.cuMemAllocHost(&host_token_, 256), "allocating pinned memory");
  }
  CUdeviceptr row = arena_ + plan_.fb().buffers()->Get(plan_.logits())->offset() + uint64_t(last_rows_ - 1) * uint64_t(n) * 4;
  CUdeviceptr best = sample_scratch_, token = sample_scratch_ + 8, hist = sample_scratch_ + 256,
              q = sample_scratch_ + kQOffset;
  int64_t n_arg = n;
  {
    void* args[] = {&row, &n_arg, &best, &token, &hist};
    launch_own("smelt_sample_argmax", 1, 1024, args);
  }
  if (!greedy) {
    double t = p.temperature, top_p = p.top_p;
    uint64_t seed = p.seed, st = step;
    void* wargs[] = {&row, &n_arg, &best, &t, &q, &hist};
    launch_own("smelt_sample_weights", unsigned(std::clamp<int64_t>((n + 2047) / 2048, 1, 1024)), 256, wargs);
    void* pargs[] = {&row, &n_arg, &best, &t, &top_p, &seed, &st, &q, &hist, &token};
    launch_own("smelt_sample_pick", 1, 1024, pargs);
  }
  check(d_.cuMemcpyDtoHAsync(host_token_, token, 4, stream_), "copying the sampled token");
  check(d_.cuStreamSynchronize(stream_), "sampling on the GPU");
  int32_t id = *static_cast<const int32_t*>(host_token_);
  if (id < 0 || id >= n) plan_.fail("the GPU sampler returned token " + std::to_string(id) + " of " + std::to_string(n));
  return id;
}

}  // namespace smelt::runtime::cuda
