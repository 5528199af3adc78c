// RMSNorm: y = w * x / sqrt(mean(x^2) + eps), statistics in float32 (double accumulation is not used,
// matching the oracle's fp32 reduction closely enough for the 1e-5 contract).
#pragma once

namespace smelt::kernels {

// Each row of `cols` values is split into `groups` equal segments normalised independently (groups = H
// gives V4's per-head q norm). `weight` has cols/groups entries, or is nullptr for an unweighted norm.
// x and y may alias.
void rms_norm(const float* x, const float* weight, float* y, int rows, int cols, int groups, float eps);

}  // namespace smelt::kernels
