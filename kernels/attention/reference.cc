#include "kernels/attention/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/common.h"

namespace smelt::kernels {

namespace {

constexpr int kV41Block = 64;  // the reference kernel's block of indices

// V4.1 (official sparse_attn): online softmax over blocks of 64 list slots; nullptr slots hold nothing
// but still take their place in a block.
void attend_v41(const SparseAttentionArgs& a, int i, const std::vector<const float*>& slots, float* out) {
  const int hd = a.head_dim, H = a.heads;
  const size_t ns = slots.size();
  std::vector<float> s(kV41Block), p(kV41Block), acc(hd);
  for (int h = 0; h < H; ++h) {
    const float* q = a.q + (int64_t(i) * H + h) * hd;
    float run_max = -1e30f, denom = 0.0f;  // a finite start: a row with nothing valid gives 0, not NaN
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t b0 = 0; b0 < ns; b0 += kV41Block) {
      const int nb = int(std::min<size_t>(kV41Block, ns - b0));
      float blk_max = -INFINITY;
      for (int t = 0; t < nb; ++t) {
        const float* kv = slots[b0 + t];
        s[t] = kv ? detail::dot_exact(q, kv, hd) * a.scale : -INFINITY;
        blk_max = std::fmax(blk_max, s[t]);
      }
      const float prev = run_max;
      run_max = std::fmax(prev, blk_max);
      const float rescale = std::exp(prev - run_max);
      double psum = 0.0;
      for (int t = 0; t < nb; ++t) psum += (p[t] = std::exp(s[t] - run_max));
      denom = denom * rescale + float(psum);  // fp32 probabilities in the denominator
      for (int t = 0; t < nb; ++t) p[t] = round_bf16(p[t]);  // bf16 probabilities in P.V
      for (int d = 0; d < hd; ++d) {
        double pv = 0.0;
        for (int t = 0; t < nb; ++t)
          if (slots[b0 + t]) pv += double(p[t]) * double(slots[b0 + t][d]);
        acc[d] = acc[d] * rescale + float(pv);
      }
    }
    denom += std::exp(a.sink[h] - run_max);  // the sink logit, not scaled
    float* o = out + (int64_t(i) * H + h) * hd;
    for (int d = 0; d < hd; ++d) o[d] = round_bf16(acc[d] / denom);
  }
}

}  // namespace

void sparse_attention(const SparseAttentionArgs& a, float* out) {
  const int hd = a.head_dim, H = a.heads;
  std::vector<const float*> keys;  // K = V rows this query attends to: window (oldest first), then compressed
  std::vector<float> e;
  const int R = a.ring_rows > 0 ? a.ring_rows : a.window;
  auto window_row = [&](int64_t pos) { return pos >= a.p0 ? a.chunk_kv + (pos - a.p0) * hd : a.ring + (pos % R) * hd; };
  for (int i = 0; i < a.rows; ++i) {
    const int64_t p = a.p0 + i;
    keys.clear();
    if (a.numerics_v41) {
      // The reference's index list: window slots (prefill or decode layout, see the header), then compressed.
      if (a.window > 0) {
        if (a.p0 == 0) {
          const int64_t first = std::max<int64_t>(0, p - a.window + 1);
          for (int64_t s = 0; s < std::min<int64_t>(a.rows, a.window); ++s)
            keys.push_back(first + s <= p ? window_row(first + s) : nullptr);
        } else {
          for (int64_t s = 0; s < a.window; ++s) {
            const int64_t pos = p - a.window + 1 + s;
            keys.push_back(pos >= 0 ? window_row(pos) : nullptr);
          }
        }
      }
      if (a.ratio > 0 && a.pool) {
        const int64_t visible = (p + 1) / a.ratio;
        if (!a.idx) {
          for (int64_t j = 0; j < visible; ++j) keys.push_back(a.pool + j * hd);
        } else {
          for (int t = 0; t < a.k; ++t) {
            const int64_t j = a.idx[int64_t(i) * a.k + t];
            keys.push_back(j >= 0 && j < visible ? a.pool + j * hd : nullptr);
          }
        }
      }
      attend_v41(a, i, keys, out);
      continue;
    }
    if (a.window > 0)
      for (int64_t pos = std::max<int64_t>(0, p - a.window + 1); pos <= p; ++pos)
        keys.push_back(window_row(pos));
    if (a.ratio > 0 && a.pool) {
      const int64_t visible = (p + 1) / a.ratio;
      if (!a.idx) {
        for (int64_t j = 0; j < visible; ++j) keys.push_back(a.pool + j * hd);
      } else {
        for (int t = 0; t < a.k; ++t) {
          const int64_t j = a.idx[int64_t(i) * a.k + t];
          if (j >= 0 && j < visible) keys.push_back(a.pool + j * hd);
        }
      }
    }
    const size_t nk = keys.size();
    e.resize(nk);
    for (int h = 0; h < H; ++h) {
      const float* q = a.q + (int64_t(i) * H + h) * hd;
      float mx = a.sink[h];
      for (size_t j = 0; j < nk; ++j) {
        e[j] = detail::dot(q, keys[j], hd) * a.scale;
        mx = std::fmax(mx, e[j]);
      }
      float sum = 0.0f;
      for (size_t j = 0; j < nk; ++j) sum += (e[j] = std::exp(e[j] - mx));
      sum += std::exp(a.sink[h] - mx);  // the sink takes probability mass but contributes no value
      float* o = out + (int64_t(i) * H + h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (size_t j = 0; j < nk; ++j) {
        const float pj = e[j] / sum;
        const float* v = keys[j];
        for (int d = 0; d < hd; ++d) o[d] += pj * v[d];
      }
    }
  }
}

void window_kv_update(const float* chunk_kv, int rows, int head_dim, int64_t p0, float* ring, int window,
                      int ring_rows) {
  const int R = ring_rows > 0 ? ring_rows : window;
  for (int t = std::max(0, rows - R); t < rows; ++t)
    std::memcpy(ring + ((p0 + t) % R) * head_dim, chunk_kv + int64_t(t) * head_dim,
                sizeof(float) * size_t(head_dim));
}

}  // namespace smelt::kernels
