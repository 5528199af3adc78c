#include "kernels/indexer/reference.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

struct Index {
  int rows, H, hd, ratio, topk;
  int64_t p0;
  Vec q, w, keys;
  IndexerArgs args() const {
    IndexerArgs a;
    a.rows = rows;
    a.heads = H;
    a.head_dim = hd;
    a.ratio = ratio;
    a.topk = topk;
    a.p0 = p0;
    a.q = q.data();
    a.w = w.data();
    a.keys = keys.data();
    return a;
  }
  // Float64 score of entry j for row i.
  double score(int i, int j) const {
    double s = 0.0;
    for (int h = 0; h < H; ++h) {
      double d = 0.0;
      for (int c = 0; c < hd; ++c) d += double(q[(size_t(i) * H + h) * hd + c]) * keys[size_t(j) * hd + c];
      s += std::max(d, 0.0) / std::sqrt(double(hd)) * w[size_t(i) * H + h] / std::sqrt(double(H));
    }
    return s;
  }
};

TEST(IndexerTopk, PicksTheBestVisibleEntries) {
  Rng rng(19);
  for (int64_t p0 : {0, 30}) {
    Index ix{12, 4, 16, 4, 5, p0, {}, {}, {}};
    ix.q = rng.normal(size_t(ix.rows) * ix.H * ix.hd);
    ix.w = rng.normal(size_t(ix.rows) * ix.H);
    ix.keys = rng.normal(size_t((p0 + ix.rows) / ix.ratio) * ix.hd);
    std::vector<int32_t> idx(size_t(ix.rows) * ix.topk, 99);
    indexer_topk(ix.args(), idx.data());
    for (int i = 0; i < ix.rows; ++i) {
      const int visible = int((p0 + i + 1) / ix.ratio), keep = std::min(ix.topk, visible);
      const int32_t* row = &idx[size_t(i) * ix.topk];
      std::set<int32_t> chosen;
      for (int t = 0; t < ix.topk; ++t) {
        if (t >= keep) {
          EXPECT_EQ(row[t], -1) << "row " << i << " slot " << t;
          continue;
        }
        ASSERT_GE(row[t], 0);
        ASSERT_LT(row[t], visible) << "row " << i << " picked an entry it cannot see";
        chosen.insert(row[t]);
        // Float32 scores may reorder entries whose float64 scores are within ~1e-5 (relative); allow that.
        if (t > 0) {
          EXPECT_GE(ix.score(i, row[t - 1]), ix.score(i, row[t]) - 1e-5) << "order, row " << i;
        }
      }
      EXPECT_EQ(int(chosen.size()), keep) << "duplicates in row " << i;
      for (int j = 0; j < visible; ++j) {
        if (chosen.count(j)) continue;
        for (int32_t c : chosen) {
          EXPECT_GE(ix.score(i, c), ix.score(i, j) - 1e-5) << "row " << i << " missed " << j;
        }
      }
    }
  }
}

TEST(IndexerTopk, TiesGoToTheLowerIndex) {
  // One head, q = v, keys are multiples of v: scores proportional to [1, 3, 3, 2, 3, 0 (relu of -1)].
  Index ix{1, 1, 4, 1, 4, 5, {}, {1.0f}, {}};
  ix.q = {0.5f, -1.0f, 2.0f, 0.25f};
  for (float m : {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, -1.0f})
    for (float v : ix.q) ix.keys.push_back(m * v);
  std::vector<int32_t> idx(4);
  indexer_topk(ix.args(), idx.data());  // position 5, ratio 1: entries 0..5 visible
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 2, 4, 3}));
  // A negative weight flips the ranking: entry 5 (relu of a negative dot) scores 0 and comes first.
  ix.w = {-1.0f};
  ix.topk = 3;
  indexer_topk(ix.args(), idx.data());
  EXPECT_EQ(std::vector<int32_t>(idx.begin(), idx.begin() + 3), (std::vector<int32_t>{5, 0, 3}));
  // A zero weight: every score ties at 0, so the lowest indices win, in order.
  ix.w = {0.0f};
  indexer_topk(ix.args(), idx.data());
  EXPECT_EQ(std::vector<int32_t>(idx.begin(), idx.begin() + 3), (std::vector<int32_t>{0, 1, 2}));
}

// The TP split (smelt-partition): two ranks score their heads, the partial scores are added, the selection runs
// on the sum. Against the float64 score of all heads (with the model's head count in the weight scale).
TEST(IndexerSplit, TwoRanksOfHeadsSumToTheWholeScore) {
  Rng rng(23);
  const int64_t p0 = 13, width = 12;
  Index ix{6, 4, 16, 2, 3, p0, {}, {}, {}};
  ix.q = rng.normal(size_t(ix.rows) * ix.H * ix.hd);
  ix.w = rng.normal(size_t(ix.rows) * ix.H);
  ix.keys = rng.normal(size_t(width) * ix.hd);
  Vec sum(size_t(ix.rows) * width, 0.0f);
  for (int begin : {0, 1}) {  // rank 0: head 0; rank 1: heads 1-3 (uneven)
    const int heads = begin == 0 ? 1 : 3;
    Vec q, w;
    for (int i = 0; i < ix.rows; ++i) {
      q.insert(q.end(), ix.q.begin() + (i * ix.H + begin) * ix.hd, ix.q.begin() + (i * ix.H + begin + heads) * ix.hd);
      w.insert(w.end(), ix.w.begin() + i * ix.H + begin, ix.w.begin() + i * ix.H + begin + heads);
    }
    IndexerScoresArgs a;
    a.rows = ix.rows, a.heads = heads, a.head_dim = ix.hd, a.ratio = ix.ratio, a.p0 = p0, a.width = width;
    a.q = q.data(), a.w = w.data(), a.keys = ix.keys.data(), a.heads_total = ix.H;
    Vec part(sum.size(), 7.0f);
    indexer_scores(a, part.data());
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += part[k];
  }
  for (int i = 0; i < ix.rows; ++i) {
    const int visible = int((p0 + i + 1) / ix.ratio);
    for (int j = 0; j < width; ++j) {
      const float got = sum[size_t(i) * width + j];
      if (j >= visible) EXPECT_EQ(got, 0.0f) << "row " << i << " entry " << j << " is not visible";
      else EXPECT_NEAR(got, ix.score(i, j), 1e-5 * (1 + std::fabs(ix.score(i, j)))) << "row " << i << " entry " << j;
    }
  }
  IndexerSelectArgs s;
  s.rows = ix.rows, s.ratio = ix.ratio, s.topk = ix.topk, s.p0 = p0, s.width = width, s.scores = sum.data();
  std::vector<int32_t> idx(size_t(ix.rows) * ix.topk, 99);
  indexer_select(s, idx.data(), nullptr);
  for (int i = 0; i < ix.rows; ++i) {
    const int visible = int((p0 + i + 1) / ix.ratio);
    const int32_t* row = &idx[size_t(i) * ix.topk];
    for (int t = 0; t < ix.topk; ++t) {  // best first, and nothing better left out
      ASSERT_GE(row[t], 0);
      ASSERT_LT(row[t], visible);
      if (t > 0) EXPECT_GE(ix.score(i, row[t - 1]), ix.score(i, row[t]) - 1e-5) << "order, row " << i;
      for (int j = 0; j < visible; ++j)
        if (std::find(row, row + ix.topk, j) == row + ix.topk)
          EXPECT_GE(ix.score(i, row[t]), ix.score(i, j) - 1e-5) << "row " << i << " missed " << j;
    }
  }
}

// V4.1: a rank's partial sum keeps the bf16 rounding of every term but not of the sum (its all_reduce rounds the
// total); the selection is indexer_v41's (ascending output, candidate blocks).
TEST(IndexerSplit, V41PartialScoresAndSelection) {
  // Two heads, head_dim 1, q = (1, 1), w = (1, 2^-9), one key 1: terms 1 and 2^-9 (both bf16), partial sum
  // 1 + 2^-9 (bf16 would give 1). A q.k of 1 + 2^-9 is rounded to 1 before the weight.
  const Vec q = {1, 1}, w = {1, 0x1p-9f}, keys = {1, 1.0f + 0x1p-9f};
  IndexerScoresArgs a;
  a.rows = 1, a.heads = 2, a.head_dim = 1, a.ratio = 1, a.p0 = 1, a.width = 3, a.q = q.data(), a.w = w.data();
  a.keys = keys.data(), a.v41 = true, a.heads_total = 4;
  float scores[3] = {9, 9, 9};
  indexer_scores(a, scores);
  EXPECT_EQ(scores[0], 1.0f + 0x1p-9f);
  EXPECT_EQ(scores[1], 1.0f + 0x1p-9f);  // q.k = 1 + 2^-9 rounded to 1 in both heads
  EXPECT_EQ(scores[2], 0.0f);            // not visible at p = 1
  a.model_numerics = false;              // fp32: nothing rounded
  indexer_scores(a, scores);
  EXPECT_EQ(scores[1], (1.0f + 0x1p-9f) + (1.0f + 0x1p-9f) * 0x1p-9f);
  // Selection on given scores (those of V41Indexer.CandidateBlocks): source keeps blocks 1 and 3 (3 = newest).
  const Vec joined = {1, 5, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0.5f, 0, 0, 0};
  IndexerSelectArgs s;
  s.rows = 1, s.ratio = 1, s.topk = 3, s.p0 = 13, s.width = 16, s.scores = joined.data(), s.v41 = true;
  s.candidate_blocks = 2, s.candidate_block_size = 4, s.is_candidate_source = true;
  int32_t idx[3], cand[2];
  indexer_select(s, idx, cand);
  EXPECT_EQ(std::vector<int32_t>(cand, cand + 2), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 3), (std::vector<int32_t>{0, 1, 4}));
  const int32_t cand_in[2] = {1, 3};
  s.is_candidate_source = false, s.cand_in = cand_in;
  indexer_select(s, idx, nullptr);
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 3), (std::vector<int32_t>{4, 5, 12}));
}

}  // namespace
}  // namespace smelt::kernels
