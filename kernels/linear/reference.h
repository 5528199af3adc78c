// Dense linears in float32: y = x W^T with W stored [out, in] (nn.Linear convention).
#pragma once

namespace smelt::kernels {

// y[r, n] = sum_k x[r, k] * w[n, k]
void linear(const float* x, const float* w, float* y, int rows, int in, int out);

// Block-diagonal grouped linear (wo_a): x row = G groups of `in_per_group`; w = [G * out_per_group,
// in_per_group], group g uses rows g*out_per_group .. (g+1)*out_per_group-1; y row = G * out_per_group.
void grouped_linear(const float* x, const float* w, float* y, int rows, int groups, int in_per_group,
                    int out_per_group);

}  // namespace smelt::kernels
