// RMSNorm: y = w * (x * rsqrt(mean(x^2) + eps)) in float32. mean(x^2) is accumulated in double and rounded
// once to float (the closest float to the exact statistic; torch's fp32 cascade sum lands within an ulp).
#pragma once

namespace smelt::kernels {

// Each row of `cols` values is split into `groups` equal segments normalised independently (groups = H
// gives V4's per-head q norm). `weight` has cols/groups entries, or is nullptr for an unweighted norm.
// x and y may alias.
void rms_norm(const float* x, const float* weight, float* y, int rows, int cols, int groups, float eps);

}  // namespace smelt::kernels
