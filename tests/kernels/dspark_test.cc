// DSpark drafter kernels against float64 formulas written here and hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "frontends/error.h"
#include "kernels/bf16.h"
#include "kernels/dspark/reference.h"
#include "tests/kernels/testing.h"

namespace smelt::kernels::dspark {
namespace {

using testing::DVec;
using testing::Rng;
using testing::Vec;

Vec bf16_values(Vec v) {
  round_bf16_inplace(v.data(), v.size());
  return v;
}

// Float64 oracle of the block attention: every query sees ring slots 0 .. min(W, t+1)-1 and all B draft rows;
// o_h = sum_j softmax([s_j ..., sink_h])_j kv_j.
DVec attention_oracle(const DraftAttentionArgs& a) {
  const int hd = a.head_dim, H = a.heads, B = a.block;
  const int n_ring = int(std::min<int64_t>(a.window, a.t + 1));
  std::vector<const float*> keys;
  for (int j = 0; j < n_ring; ++j) keys.push_back(a.ring + size_t(j) * hd);
  for (int j = 0; j < B; ++j) keys.push_back(a.draft_kv + size_t(j) * hd);
  DVec out(size_t(B) * H * hd, 0.0);
  for (int i = 0; i < B; ++i)
    for (int h = 0; h < H; ++h) {
      const float* q = a.q + (size_t(i) * H + h) * hd;
      std::vector<double> s;
      double mx = a.sink[h];
      for (const float* k : keys) {
        double d = 0;
        for (int c = 0; c < hd; ++c) d += double(q[c]) * k[c];
        s.push_back(d * a.scale);
        mx = std::max(mx, s.back());
      }
      double den = std::exp(a.sink[h] - mx);
      for (double& v : s) den += (v = std::exp(v - mx));
      double* o = &out[(size_t(i) * H + h) * hd];
      for (size_t j = 0; j < keys.size(); ++j)
        for (int c = 0; c < hd; ++c) o[c] += s[j] / den * keys[j][c];
    }
  return out;
}

struct AttnCase {
  Vec q, sink, ring, draft;
  DraftAttentionArgs args;
  AttnCase(Rng& rng, int B, int H, int hd, int W, int64_t t) {
    q = bf16_values(rng.normal(size_t(B) * H * hd, 1.5));
    sink = rng.normal(H);
    ring = bf16_values(rng.normal(size_t(W) * hd));
    draft = bf16_values(rng.normal(size_t(B) * hd));
    args.block = B, args.heads = H, args.head_dim = hd, args.t = t, args.window = W;
    args.scale = float(1.0 / std::sqrt(double(hd)));
    args.q = q.data(), args.sink = sink.data(), args.ring = ring.data(), args.draft_kv = draft.data();
  }
};

// bf16 probabilities in P.V and a bf16 output: a few bf16 units of relative error at most.
constexpr double kAttnTol = 2e-2;

TEST(DsparkAttention, FullRingAndDraftRowsAllVisible) {
  Rng rng(1);
  AttnCase c(rng, 5, 4, 64, 16, 69);  // the tiny_full shape (one softmax block of 21 entries)
  Vec out(c.q.size());
  draft_attention(c.args, out.data());
  testing::expect_close(out, attention_oracle(c.args), kAttnTol, "window 16, t 69");
  for (float v : out) ASSERT_EQ(v, round_bf16(v));
}

TEST(DsparkAttention, ReleaseWindowSpansThreeSoftmaxBlocks) {
  Rng rng(2);
  AttnCase c(rng, 5, 2, 32, 128, 1000);  // 128 ring slots + 5 draft rows: blocks of 64, 64 and 5 entries
  Vec out(c.q.size());
  draft_attention(c.args, out.data());
  testing::expect_close(out, attention_oracle(c.args), kAttnTol, "window 128, t 1000");
}

TEST(DsparkAttention, NoCausalMaskInsideTheBlock) {
  // Query 0 must see draft row 4 (a causal mask would hide it): make row 4 dominate every score.
  Rng rng(3);
  AttnCase c(rng, 5, 1, 32, 16, 40);
  for (int d = 0; d < 32; ++d) c.draft[4 * 32 + d] = round_bf16(c.q[d] > 0 ? 4.f : -4.f);
  Vec out(c.q.size());
  draft_attention(c.args, out.data());
  const DVec want = attention_oracle(c.args);
  testing::expect_close(out, want, kAttnTol, "draft row 4 dominant");
  // Query 0's output is essentially draft row 4.
  for (int d = 0; d < 32; ++d) EXPECT_NEAR(out[d], c.draft[4 * 32 + d], 0.05) << d;
}

TEST(DsparkAttention, RingStillFillingReadsOnlyWrittenSlots) {
  // t = 6 < window - 1: slots 7 .. 15 hold nothing yet; NaN there must not leak into the output.
  Rng rng(4);
  AttnCase c(rng, 5, 2, 32, 16, 6);
  for (int s = 7; s < 16; ++s)
    for (int d = 0; d < 32; ++d) c.ring[size_t(s) * 32 + d] = std::numeric_limits<float>::quiet_NaN();
  Vec out(c.q.size());
  draft_attention(c.args, out.data());
  testing::expect_close(out, attention_oracle(c.args), kAttnTol, "t 6");
}

TEST(DsparkAttention, RejectsBadShapes) {
  Rng rng(5);
  AttnCase c(rng, 5, 1, 32, 16, 6);
  Vec out(c.q.size());
  c.args.window = 0;
  EXPECT_THROW(draft_attention(c.args, out.data()), Error);
}

TEST(DsparkHead, GreedyTiesGoToTheLowerId) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(greedy(std::vector<float>{1, 3, 3, 2}.data(), 4), 1);
  EXPECT_EQ(greedy(std::vector<float>{5, 3, 5, 2}.data(), 4), 0);
  EXPECT_EQ(greedy(std::vector<float>{nan, -1, 2, 2}.data(), 4), 2);
  EXPECT_EQ(greedy(std::vector<float>{-INFINITY, -INFINITY, -1e30f}.data(), 3), 2);
}

TEST(DsparkHead, MarkovStepAddsTheEmbeddingTimesHead) {
  Rng rng(6);
  const int V = 50, r = 32;
  const Vec embed = bf16_values(rng.normal(size_t(V) * r)), head = bf16_values(rng.normal(size_t(V) * r, 0.1));
  Vec logits = rng.normal(V), e(r);
  const Vec before = logits;
  markov_step(embed.data(), head.data(), V, r, 17, logits.data(), e.data());
  DVec want(V);
  for (int v = 0; v < V; ++v) {
    double s = 0;
    for (int k = 0; k < r; ++k) s += double(embed[17 * r + k]) * head[size_t(v) * r + k];
    want[v] = double(before[v]) + s;
  }
  testing::expect_close(logits, want, 1e-6, "logits + markov bias");
  for (int k = 0; k < r; ++k) EXPECT_EQ(e[k], embed[17 * r + k]);
  EXPECT_THROW(markov_step(embed.data(), head.data(), V, r, V, logits.data(), nullptr), Error);
}

TEST(DsparkHead, ConfidenceIsProjOverXThenEmbedding) {
  Rng rng(7);
  const int D = 64, r = 16;
  const Vec proj = bf16_values(rng.normal(D + r)), x = bf16_values(rng.normal(D)), e = bf16_values(rng.normal(r));
  double want = 0;
  for (int d = 0; d < D; ++d) want += double(proj[d]) * x[d];
  for (int k = 0; k < r; ++k) want += double(proj[D + k]) * e[k];
  EXPECT_NEAR(confidence(proj.data(), x.data(), D, e.data(), r), want, 1e-6 * std::fabs(want) + 1e-7);
}

// Hand-computed chain: vocab 3, rank 1, dim 1. embed = [1, 2, -1], head = [1, 0, -1] (bias of id k is
// embed[k] * head[v]), proj = [10, 1] (confidence = 10 x_i + embed[prev_i]).
TEST(DsparkHead, DraftsOneAfterTheOtherWithTheMarkovBiasOfThePreviousToken) {
  const Vec embed{1, 2, -1}, head{1, 0, -1}, proj{10, 1}, x{0.5f, -1, 2};
  // Base logits: row 0 favours id 1, but the input id 2 adds bias [-1, 0, 1] -> [0, 3, 2.5]: picks 1.
  // Row 1 (prev 1, bias [2, 0, -2]): [1, 1.5, 0] + bias = [3, 1.5, -2]: picks 0.
  // Row 2 (prev 0, bias [1, 0, -1]): [0, 1, 0] + bias = [1, 1, -1]: tie between 0 and 1, picks 0.
  Vec logits{1, 3, 1.5f, 1, 1.5f, 0, 0, 1, 0};
  DraftHeadArgs a;
  a.block = 3, a.vocab = 3, a.dim = 1, a.rank = 1;
  a.markov_embed = embed.data(), a.markov_head = head.data(), a.proj = proj.data();
  std::vector<int32_t> ids(3);
  Vec conf(3);
  draft_head(a, 2, x.data(), logits.data(), ids.data(), conf.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(logits, (Vec{0, 3, 2.5f, 3, 1.5f, -2, 1, 1, -1}));
  // confidence_i = 10 x_i + embed[out_ids[i]] with out_ids = [2, 1, 0]: [5 - 1, -10 + 2, 20 + 1].
  EXPECT_EQ(conf, (Vec{4, -8, 21}));
}

}  // namespace
}  // namespace smelt::kernels::dspark
