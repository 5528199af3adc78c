#include "kernels/indexer/reference.h"

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

}  // namespace
}  // namespace smelt::kernels
