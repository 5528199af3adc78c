#include "kernels/attention/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common.h"

namespace smelt::kernels {

void sparse_attention(const SparseAttentionArgs& a, float* out) {
  const int hd = a.head_dim, H = a.heads;
  std::vector<const float*> keys;  // K = V rows this query attends to: window (oldest first), then compressed
  std::vector<float> e;
  const int R = a.ring_rows > 0 ? a.ring_rows : a.window;
  for (int i = 0; i < a.rows; ++i) {
    const int64_t p = a.p0 + i;
    keys.clear();
    if (a.window > 0)
      for (int64_t pos = std::max<int64_t>(0, p - a.window + 1); pos <= p; ++pos)
        keys.push_back(pos >= a.p0 ? a.chunk_kv + (pos - a.p0) * hd : a.ring + (pos % R) * hd);
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
