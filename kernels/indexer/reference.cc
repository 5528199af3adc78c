#include "kernels/indexer/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/bf16.h"
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

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The first `keep` of `ids` by descending value, equal values lower id first (the goldens' tie rule).
void top_by_value(std::vector<int32_t>& ids, const std::vector<float>& value, int keep) {
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), [&](int32_t x, int32_t y) {
    const float vx = value[size_t(x)], vy = value[size_t(y)];
    return vx > vy || (vx == vy && x < y);
  });
}

}  // namespace

void indexer_v41(const IndexerV41Args& a, int32_t* idx, int32_t* cand_out) {
  const int H = a.heads, hd = a.head_dim, CB = a.candidate_blocks, bs = a.candidate_block_size;
  const bool two_level = CB > 0 && bs > 0;
  std::vector<float> score, block_score;
  std::vector<int32_t> order, blocks;
  std::vector<char> allowed;
  for (int i = 0; i < a.rows; ++i) {
    const int64_t visible = (a.p0 + i + 1) / a.ratio;
    const float* q = a.q + int64_t(i) * H * hd;
    const float* w = a.w + int64_t(i) * H;
    score.assign(size_t(visible), kNegInf);
    for (int64_t j = 0; j < visible; ++j) {
      const float* key = a.keys + j * hd;
      float s = 0.0f;  // bf16 terms summed over heads in float32, rounded to bf16 once
      for (int h = 0; h < H; ++h) {
        const float qk = round_bf16_if(a.model_numerics, detail::dot_exact(q + int64_t(h) * hd, key, hd));
        s += round_bf16_if(a.model_numerics, std::fmax(qk, 0.0f) * w[h]);
      }
      s = round_bf16_if(a.model_numerics, s);
      score[size_t(j)] = std::isnan(s) ? kNegInf : s;  // a NaN would break the ordering: rank it last
    }

    if (two_level && a.is_candidate_source) {
      // Level one: blocks by their best entry; the newest entry's (partial) block always kept.
      const int64_t nb = (visible + bs - 1) / bs;
      block_score.assign(size_t(nb), kNegInf);
      for (int64_t j = 0; j < visible; ++j)
        block_score[size_t(j / bs)] = std::fmax(block_score[size_t(j / bs)], score[size_t(j)]);
      if (nb > 0) block_score[size_t(nb - 1)] = std::numeric_limits<float>::infinity();
      blocks.resize(size_t(nb));
      for (int64_t b = 0; b < nb; ++b) blocks[size_t(b)] = int32_t(b);
      const int keep = int(std::min<int64_t>(CB, nb));
      top_by_value(blocks, block_score, keep);
      blocks.resize(size_t(keep));
      std::erase_if(blocks, [&](int32_t b) { return !(block_score[size_t(b)] > kNegInf); });
      std::sort(blocks.begin(), blocks.end());
      if (cand_out) {
        int32_t* row = cand_out + int64_t(i) * CB;
        for (int t = 0; t < CB; ++t) row[t] = t < int(blocks.size()) ? blocks[size_t(t)] : -1;
      }
    } else if (two_level && a.cand_in) {
      // Level two: only the source's candidate blocks compete (the others drop to -inf).
      const int64_t nb = (visible + bs - 1) / bs;
      allowed.assign(size_t(nb), 0);
      const int32_t* row = a.cand_in + int64_t(i) * CB;
      for (int t = 0; t < CB; ++t)
        if (row[t] >= 0 && row[t] < nb) allowed[size_t(row[t])] = 1;
      for (int64_t j = 0; j < visible; ++j)
        if (!allowed[size_t(j / bs)]) score[size_t(j)] = kNegInf;
    }

    const int keep = int(std::min<int64_t>(a.topk, visible));
    order.resize(size_t(visible));
    for (int64_t j = 0; j < visible; ++j) order[size_t(j)] = int32_t(j);
    top_by_value(order, score, keep);
    std::sort(order.begin(), order.begin() + keep);
    int32_t* out = idx + int64_t(i) * a.topk;
    for (int t = 0; t < a.topk; ++t) out[t] = t < keep ? order[size_t(t)] : -1;
  }
}

}  // namespace smelt::kernels
