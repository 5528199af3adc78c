// Rotary position embedding, interleaved pairs on the trailing rope_dim channels of each head.
#pragma once
#include <cstdint>
#include <vector>

namespace smelt::kernels {

struct RopeParams {
  int rope_dim = 0;
  double theta = 10000.0;
  // YaRN (compress layers). factor == 0 disables it. Attention factor is 1 (V4 applies no mscale).
  double yarn_factor = 0.0;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  double yarn_original_max_pos = 65536.0;
};

// rope_dim/2 inverse frequencies, float32 as transformers computes them (plain or YaRN-blended).
std::vector<float> rope_inv_freq(const RopeParams& p);

// V4.1 (official inference code `precompute_freqs_cis`): freqs = 1 / theta^(2i/dim) in float32 and, with
// YaRN (yarn_factor > 0), freqs = freqs / factor * ramp + freqs * (1 - ramp) in float32 (transformers divides
// by factor * theta^(2i/dim) instead, which rounds differently). The rotation itself, rope() below, is the
// reference's complex multiply (a+bi)(c+di) = (ac-bd) + (ad+bc)i in float32 with c + di = polar(1, pos * freq)
// (the conjugate when inverse); the reference stores the result in bf16 (round afterwards).
std::vector<float> rope_inv_freq_v41(const RopeParams& p);

// Rotates x[r, h, head_dim-rope_dim + 2i .. +1] by angle inv_freq[i] * positions[r] (float32 product,
// like transformers), or by its negative when `inverse`. In place.
void rope(float* x, int rows, int heads, int head_dim, int rope_dim, const float* inv_freq,
          const int64_t* positions, bool inverse);

}  // namespace smelt::kernels
