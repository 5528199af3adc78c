// `smelt-run bench` on the cuda backend: the device copy bandwidth measured in the same run, prefill time,
// decode step time (CUDA graph replay, median of N), per-layer time (one eager step with events at layer
// boundaries), bytes a decode step must read, achieved GB/s and its ratio to the copy bandwidth, kernels
// launched per step. docs/performance.md explains each number.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/cuda/backend.h"

namespace smelt::runtime::cuda {

struct BenchOptions {
  std::string plan;
  BackendOptions backend;
  int prompt_len = 0;  // 0: min(max_rows, 128, max_seq_len / 2)
  int steps = 32;      // decode steps timed
  int chunk = 0;       // prefill chunk rows (0 = max_rows)
  bool synthetic_states = false;  // fill the states as if prompt_len tokens had been prefilled (no prefill run)
};

nlohmann::ordered_json bench(const BenchOptions& o);
std::string bench_text(const nlohmann::ordered_json& result);

}  // namespace smelt::runtime::cuda
