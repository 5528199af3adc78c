#include "kernels/sampling/reference.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "frontends/error.h"
#include "kernels/sampling/sampling.cuh"

namespace smelt::kernels {

int32_t sample_greedy(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  return best;
}

int32_t sample_top_p(std::span<const float> logits, const SamplerParams& p, uint64_t step) {
  namespace s = smelt_sampling;
  const int32_t greedy = sample_greedy(logits);
  if (!(p.temperature > 0.0) || logits.size() < 2) return greedy;
  if (logits.size() > s::kMaxVocab)
    throw Error("sampling: " + std::to_string(logits.size()) + " logits; at most " + std::to_string(s::kMaxVocab) +
                " are supported");
  const double mx = logits[size_t(greedy)];
  if (!std::isfinite(mx)) return greedy;
  const size_t n = logits.size();
  std::vector<uint64_t> q(n);
  std::vector<uint32_t> key(n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    q[i] = s::weight(logits[i], mx, p.temperature);
    key[i] = s::order_key(logits[i]);
    total += q[i];
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] > key[b] || (key[a] == key[b] && a < b); });
  // The nucleus: the shortest prefix whose mass reaches `need`.
  const uint64_t need = s::nucleus_need(p.top_p, total);
  size_t keep = 0;
  uint64_t mass = 0;
  while (mass < need) mass += q[size_t(order[keep++])];
  const uint64_t target = s::draw_target(s::draw_bits(p.seed, step), mass);
  uint64_t acc = 0;
  for (size_t k = 0; k < keep; ++k) {
    acc += q[size_t(order[k])];
    if (acc > target) return order[k];
  }
  return order[keep - 1];  // unreachable: target < mass
}

}  // namespace smelt::kernels
