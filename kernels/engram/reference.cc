#include "kernels/engram/reference.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "frontends/error.h"
#include "kernels/bf16.h"
#include "kernels/linear/reference.h"
#include "kernels/quant/reference.h"

namespace smelt::kernels::engram {
namespace {

// mean(v^2) with the squares summed in double and rounded once (the reference sums float32 squares in an
// order of its own; this is the closest float to the exact mean).
float mean_square(const float* v, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += double(v[i]) * double(v[i]);
  return float(s / double(n));
}

}  // namespace

void engram_lookup(const EngramArgs& a, float* e) {
  const int hd = a.head_dim, cols = a.cols;
  if (hd % 32) throw smelt::Error("engram_lookup: head_dim " + std::to_string(hd) + " is not a multiple of 32");
  const int stride = a.hash_stride ? a.hash_stride : cols;
  const int64_t K = int64_t(cols) * hd, total = a.rows_total ? a.rows_total : a.table_rows;
  // Table rows: E4M3 value x E8M0 scale per 32, exact in float32 and in bf16.
  for (int r = 0; r < a.rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int64_t row = a.hashes[int64_t(r) * stride + c];
      if (row < 0 || row >= total)
        throw smelt::Error("engram_forward: hash id " + std::to_string(row) + " outside the table (" +
                           std::to_string(total) + " rows)");
      float* dst = e + int64_t(r) * K + int64_t(c) * hd;
      const int64_t local = row - a.row_begin;
      if (local < 0 || local >= a.table_rows) {  // another TP rank's row: it contributes the value; -0 is the
        std::fill(dst, dst + hd, -0.0f);          // additive identity (x + -0 = x, a -0 value included)
        continue;
      }
      const uint8_t* src = a.table + local * hd;
      const uint8_t* sc = a.table_scale + local * (hd / 32);
      for (int i = 0; i < hd; ++i) dst[i] = round_bf16_if(a.model_numerics, quant::e4m3_decode(src[i]) * quant::e8m0_decode(sc[i / 32]));
    }
  }
}

void engram_forward(const EngramArgs& a, const float* X, float* out) {
  std::vector<float> e(size_t(a.rows) * size_t(a.cols) * size_t(a.head_dim));
  engram_lookup(a, e.data());
  engram_gate(a, e.data(), X, out);
}

void engram_gate(const EngramArgs& a, const float* e, const float* X, float* out) {
  const int n = a.hc_mult, D = a.dim, hd = a.head_dim, cols = a.cols;
  if (hd % 32 || (cols * hd) % 32)
    throw smelt::Error("engram_forward: head_dim " + std::to_string(hd) + " is not a multiple of 32");
  const int K = cols * hd, N = (n + 1) * D;
  std::vector<float> kv(size_t(a.rows) * N);
  if (!a.wkv)  // e is already the projected keys and value (smelt-split-engram)
    std::copy(e, e + size_t(a.rows) * N, kv.begin());
  else if (a.model_numerics)
    quant::fp8_linear(e, a.rows, K, a.wkv, a.wkv_scale, N, 32, kv.data(), /*bf16_out=*/true, 32);
  else  // fp32: the dequantized weight times the fp32 rows, as smelt.linear computes it (smelt-split-engram's form)
    linear_quant(e, a.rows, K, N, a.wkv, WeightFormat::FP8_E4M3, a.wkv_scale, 32, /*act_quant_fp8_b32=*/false,
                 kv.data(), /*bf16_out=*/false);

  const float inv_sqrt_dim = float(std::pow(double(D), -0.5));
  std::vector<float> tmp(D);
  for (int r = 0; r < a.rows; ++r) {
    const float* key_all = kv.data() + int64_t(r) * N;
    const float* value = key_all + int64_t(n) * D;
    for (int c = 0; c < n; ++c) {
      const float* h = X + (int64_t(r) * n + c) * D;
      const float* key = key_all + int64_t(c) * D;
      const float* qw = a.q_weight + int64_t(c) * D;
      const float* kw = a.k_weight + int64_t(c) * D;
      // (h * (q_weight * k_weight)) * key, each product rounded to float32 as the reference's elementwise ops.
      double sum = 0.0;
      for (int d = 0; d < D; ++d) sum += double((h[d] * (qw[d] * kw[d])) * key[d]);
      const float rstd = (1.0f / std::sqrt(mean_square(h, D) + a.eps)) * (1.0f / std::sqrt(mean_square(key, D) + a.eps));
      const float dot = float(sum) * rstd * inv_sqrt_dim;
      const float mag = std::sqrt(std::max(std::fabs(dot), 1e-6f));
      const float gate = 1.0f / (1.0f + std::exp(-std::copysign(mag, dot)));
      for (int d = 0; d < D; ++d) tmp[d] = round_bf16_if(a.model_numerics, h[d] + gate * value[d]);
      std::copy(tmp.begin(), tmp.end(), out + (int64_t(r) * n + c) * D);
    }
  }
}

}  // namespace smelt::kernels::engram
