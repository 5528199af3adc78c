#include "kernels/indexer/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common.h"

namespace smelt::kernels {

void indexer_topk(const IndexerArgs& a, int32_t* idx) {
  const int H = a.heads, hd = a.head_dim;
  // Python-float scales rounded once to float32, as when torch multiplies a float tensor by them.
  const float score_scale = float(std::pow(double(hd), -0.5));
  const float weight_scale = float(std::pow(double(H), -0.5));
  std::vector<float> score;
  std::vector<int32_t> order;
  for (int i = 0; i < a.rows; ++i) {
    const int64_t visible = (a.p0 + i + 1) / a.ratio;
    const float* q = a.q + int64_t(i) * H * hd;
    const float* w = a.w + int64_t(i) * H;
    score.resize(size_t(visible));
    for (int64_t j = 0; j < visible; ++j) {
      const float* key = a.keys + j * hd;
      float s = 0.0f;
      for (int h = 0; h < H; ++h)
        s += (std::fmax(detail::dot(q + int64_t(h) * hd, key, hd), 0.0f) * score_scale) * (w[h] * weight_scale);
      // A NaN would break the ordering below; rank it last instead.
      score[size_t(j)] = std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
    }
    const int keep = int(std::min<int64_t>(a.topk, visible));
    order.resize(size_t(visible));
    for (int64_t j = 0; j < visible; ++j) order[size_t(j)] = int32_t(j);
    // Highest score first; equal scores go to the lower entry index.
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int32_t x, int32_t y) {
      return score[size_t(x)] > score[size_t(y)] || (score[size_t(x)] == score[size_t(y)] && x < y);
    });
    int32_t* row = idx + int64_t(i) * a.topk;
    for (int t = 0; t < a.topk; ++t) row[t] = t < keep ? order[size_t(t)] : -1;
  }
}

}  // namespace smelt::kernels
