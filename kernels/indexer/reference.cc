#include "kernels/indexer/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/common.h"

namespace smelt::kernels {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The first `keep` of `ids` by descending value, equal values lower id first (the goldens' tie rule).
void top_by_value(std::vector<int32_t>& ids, const std::vector<float>& value, int keep) {
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), [&](int32_t x, int32_t y) {
    const float vx = value[size_t(x)], vy = value[size_t(y)];
    return vx > vy || (vx == vy && x < y);
  });
}

// V4: the min(topk, visible) best of score[0 .. visible), best first (equal scores: lower index first), -1 padded.
void select_v4_row(const std::vector<float>& score, int64_t visible, int topk, std::vector<int32_t>& order,
                   int32_t* row) {
  const int keep = int(std::min<int64_t>(topk, visible));
  order.resize(size_t(visible));
  for (int64_t j = 0; j < visible; ++j) order[size_t(j)] = int32_t(j);
  top_by_value(order, score, keep);
  for (int t = 0; t < topk; ++t) row[t] = t < keep ? order[size_t(t)] : -1;
}

// V4.1: one row's candidate level (source: writes cand_row; consumer: masks `score` by cand_in_row) and top-k.
struct V41Select {
  int topk = 0, CB = 0, bs = 0;
  bool source = false;
  std::vector<float> block_score;
  std::vector<int32_t> order, blocks;
  std::vector<char> allowed;

  void row(std::vector<float>& score, int64_t visible, const int32_t* cand_in_row, int32_t* cand_row, int32_t* out) {
    const bool two_level = CB > 0 && bs > 0;
    if (two_level && source) {
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
      if (cand_row)
        for (int t = 0; t < CB; ++t) cand_row[t] = t < int(blocks.size()) ? blocks[size_t(t)] : -1;
    } else if (two_level && cand_in_row) {
      // Level two: only the source's candidate blocks compete (the others drop to -inf).
      const int64_t nb = (visible + bs - 1) / bs;
      allowed.assign(size_t(nb), 0);
      for (int t = 0; t < CB; ++t)
        if (cand_in_row[t] >= 0 && cand_in_row[t] < nb) allowed[size_t(cand_in_row[t])] = 1;
      for (int64_t j = 0; j < visible; ++j)
        if (!allowed[size_t(j / bs)]) score[size_t(j)] = kNegInf;
    }
    const int keep = int(std::min<int64_t>(topk, visible));
    order.resize(size_t(visible));
    for (int64_t j = 0; j < visible; ++j) order[size_t(j)] = int32_t(j);
    top_by_value(order, score, keep);
    std::sort(order.begin(), order.begin() + keep);
    for (int t = 0; t < topk; ++t) out[t] = t < keep ? order[size_t(t)] : -1;
  }
};

}  // namespace

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
    select_v4_row(score, visible, a.topk, order, idx + int64_t(i) * a.topk);
  }
}


void indexer_v41(const IndexerV41Args& a, int32_t* idx, int32_t* cand_out) {
  const int H = a.heads, hd = a.head_dim;
  V41Select sel{a.topk, a.candidate_blocks, a.candidate_block_size, a.is_candidate_source};
  std::vector<float> score;
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
    sel.row(score, visible, a.cand_in ? a.cand_in + int64_t(i) * a.candidate_blocks : nullptr,
            cand_out ? cand_out + int64_t(i) * a.candidate_blocks : nullptr, idx + int64_t(i) * a.topk);
  }
}

void indexer_scores(const IndexerScoresArgs& a, float* scores) {
  const int H = a.heads, hd = a.head_dim;
  const float score_scale = float(std::pow(double(hd), -0.5));  // V4, as indexer_topk
  const float weight_scale = float(std::pow(double(a.heads_total), -0.5));
  for (int i = 0; i < a.rows; ++i) {
    const int64_t visible = std::min<int64_t>((a.p0 + i + 1) / a.ratio, a.width);
    const float* q = a.q + int64_t(i) * H * hd;
    const float* w = a.w + int64_t(i) * H;
    float* out = scores + int64_t(i) * a.width;
    for (int64_t j = 0; j < a.width; ++j) out[j] = 0.0f;
    for (int64_t j = 0; j < visible; ++j) {
      const float* key = a.keys + j * hd;
      float s = 0.0f;
      for (int h = 0; h < H; ++h) {
        if (a.v41) {
          const float qk = round_bf16_if(a.model_numerics, detail::dot_exact(q + int64_t(h) * hd, key, hd));
          s += round_bf16_if(a.model_numerics, std::fmax(qk, 0.0f) * w[h]);
        } else {
          s += (std::fmax(detail::dot(q + int64_t(h) * hd, key, hd), 0.0f) * score_scale) * (w[h] * weight_scale);
        }
      }
      out[j] = s;
    }
  }
}

void indexer_select(const IndexerSelectArgs& a, int32_t* idx, int32_t* cand_out) {
  V41Select sel{a.topk, a.candidate_blocks, a.candidate_block_size, a.is_candidate_source};
  std::vector<float> score;
  std::vector<int32_t> order;
  for (int i = 0; i < a.rows; ++i) {
    const int64_t visible = std::min<int64_t>((a.p0 + i + 1) / a.ratio, a.width);
    const float* in = a.scores + int64_t(i) * a.width;
    score.resize(size_t(visible));
    for (int64_t j = 0; j < visible; ++j) score[size_t(j)] = std::isnan(in[j]) ? kNegInf : in[j];
    if (!a.v41) {
      select_v4_row(score, visible, a.topk, order, idx + int64_t(i) * a.topk);
      continue;
    }
    sel.row(score, visible, a.cand_in ? a.cand_in + int64_t(i) * a.candidate_blocks : nullptr,
            cand_out ? cand_out + int64_t(i) * a.candidate_blocks : nullptr, idx + int64_t(i) * a.topk);
  }
}

}  // namespace smelt::kernels
