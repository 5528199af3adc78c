// Token sampling on the host: the reference the GPU kernels (kernels/sampling/sampling.cu) reproduce token for
// token. The arithmetic (weights, nucleus threshold, draw) is kernels/sampling/sampling.cuh, shared by both; the
// selection here is the plain one (sort, then walk the prefix), the GPU's a radix select over the same integers.
// docs/sampling.md states the semantics.
#pragma once
#include <cstdint>
#include <span>

namespace smelt::kernels {

struct SamplerParams {
  double temperature = 0.0;  // <= 0 (or NaN): greedy
  double top_p = 1.0;        // >= 1: no nucleus cut
  uint64_t seed = 0;
};

// The largest logit; ties go to the lower id. As a left-to-right scan with `>`: a NaN never wins, except at
// id 0, where nothing beats it (so the answer is 0). -0 and +0 tie.
int32_t sample_greedy(std::span<const float> logits);

// Temperature + top-p, draw number `step` of the sequence seeded with p.seed (counter-based: any step can be
// computed alone). Greedy when temperature <= 0, for fewer than 2 logits, and when the greedy logit is not
// finite (+inf, or NaN at id 0); tokens of weight 0 (-inf, NaN, e^x < 2^-44) are never drawn.
// Throws smelt::Error for more than 2^19 logits (the integer weights would overflow).
int32_t sample_top_p(std::span<const float> logits, const SamplerParams& p, uint64_t step);

}  // namespace smelt::kernels
