#include "kernels/attention/reference.h"

#include <algorithm>

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

// One sequence of S positions with everything a layer's attention sees: per-position q and kv, a
// compressed pool, per-head sinks and (optionally) per-position selected pool entries.
struct Seq {
  int S, H, hd, window, ratio, k;
  Vec q, kv, pool, sink;
  std::vector<int32_t> idx;  // [S, k]
  float scale;

  Seq(uint64_t seed, int S_, int H_, int hd_, int window_, int ratio_, int k_)
      : S(S_), H(H_), hd(hd_), window(window_), ratio(ratio_), k(k_) {
    Rng rng(seed);
    q = rng.normal(size_t(S) * H * hd);
    kv = rng.normal(size_t(S) * hd);
    const int entries = ratio ? S / ratio : 0;
    pool = rng.normal(size_t(std::max(entries, 1)) * hd);
    sink = rng.normal(H, 1.5);
    scale = float(1.0 / std::sqrt(double(hd)));
    // Per row: k distinct entries in random order, some replaced by -1; entries not yet visible to the
    // row are left in on purpose (the kernel must skip them).
    for (int p = 0; p < S && entries > 0; ++p) {
      std::vector<int32_t> all(entries);
      for (int j = 0; j < entries; ++j) all[j] = j;
      std::shuffle(all.begin(), all.end(), rng.gen);
      for (int t = 0; t < k; ++t) idx.push_back(t < entries && rng.integer(0, 4) != 0 ? all[t] : -1);
    }
  }

  // Float64 oracle for the query at position p: softmax over the explicit key list plus the sink logit.
  DVec expected(int p, bool use_idx) const {
    std::vector<const float*> keys;
    for (int pos = std::max(0, p - window + 1); pos <= p; ++pos) keys.push_back(&kv[size_t(pos) * hd]);
    if (ratio) {
      const int visible = (p + 1) / ratio;
      for (int j = 0; j < visible; ++j) {
        const bool listed = !use_idx || std::find(&idx[size_t(p) * k], &idx[size_t(p) * k] + k, j) != &idx[size_t(p) * k] + k;
        if (listed) keys.push_back(&pool[size_t(j) * hd]);
      }
    }
    DVec out(size_t(H) * hd);
    for (int h = 0; h < H; ++h) {
      const float* qh = &q[(size_t(p) * H + h) * hd];
      DVec logit;
      double mx = sink[h];
      for (const float* key : keys) {
        double s = 0.0;
        for (int d = 0; d < hd; ++d) s += double(qh[d]) * key[d];
        logit.push_back(s * scale);
        mx = std::max(mx, logit.back());
      }
      double z = std::exp(double(sink[h]) - mx);
      for (double l : logit) z += std::exp(l - mx);
      for (size_t j = 0; j < keys.size(); ++j)
        for (int d = 0; d < hd; ++d) out[size_t(h) * hd + d] += std::exp(logit[j] - mx) / z * keys[j][d];
    }
    return out;
  }

  // Runs the whole sequence in chunks of `chunk` rows, carrying the window ring between calls.
  Vec run(int chunk, bool use_idx) const {
    Vec out(size_t(S) * H * hd, NAN), ring(size_t(window) * hd, 0.0f);
    for (int p0 = 0; p0 < S; p0 += chunk) {
      const int T = std::min(chunk, S - p0);
      SparseAttentionArgs a;
      a.rows = T;
      a.heads = H;
      a.head_dim = hd;
      a.p0 = p0;
      a.scale = scale;
      a.q = &q[size_t(p0) * H * hd];
      a.sink = sink.data();
      a.chunk_kv = &kv[size_t(p0) * hd];
      a.ring = ring.data();
      a.window = window;
      a.ratio = ratio;
      a.pool = ratio ? pool.data() : nullptr;
      a.idx = use_idx ? &idx[size_t(p0) * k] : nullptr;
      a.k = k;
      sparse_attention(a, &out[size_t(p0) * H * hd]);
      window_kv_update(&kv[size_t(p0) * hd], T, hd, p0, ring.data(), window);
    }
    return out;
  }

  // Speculative decoding: each step feeds K+1 rows of which only the first `accepted` (random) are the
  // sequence's; the rest are rejected drafts with other q / kv. Their ring writes stay behind when the
  // cursor rolls back to the first rejected position. Returns the outputs of accepted rows.
  Vec run_speculative(int K, int ring_rows, uint64_t seed) const {
    Rng rng(seed);
    Vec out(size_t(S) * H * hd, NAN), ring(size_t(ring_rows) * hd, 0.0f);
    for (int p0 = 0; p0 < S;) {
      const int T = std::min(K + 1, S - p0), accepted = rng.integer(1, T);
      Vec cq(&q[size_t(p0) * H * hd], &q[size_t(p0 + T) * H * hd]), ckv(&kv[size_t(p0) * hd], &kv[size_t(p0 + T) * hd]);
      const Vec draft_q = rng.normal(cq.size()), draft_kv = rng.normal(ckv.size());
      std::copy(draft_q.begin() + size_t(accepted) * H * hd, draft_q.end(), cq.begin() + size_t(accepted) * H * hd);
      std::copy(draft_kv.begin() + size_t(accepted) * hd, draft_kv.end(), ckv.begin() + size_t(accepted) * hd);
      SparseAttentionArgs a;
      a.rows = T;
      a.heads = H;
      a.head_dim = hd;
      a.p0 = p0;
      a.scale = scale;
      a.q = cq.data();
      a.sink = sink.data();
      a.chunk_kv = ckv.data();
      a.ring = ring.data();
      a.window = window;
      a.ring_rows = ring_rows;
      a.ratio = ratio;
      a.pool = ratio ? pool.data() : nullptr;
      a.idx = ratio ? &idx[size_t(p0) * k] : nullptr;
      a.k = k;
      Vec o(size_t(T) * H * hd);
      sparse_attention(a, o.data());
      window_kv_update(ckv.data(), T, hd, p0, ring.data(), window, ring_rows);
      std::copy(o.begin(), o.begin() + size_t(accepted) * H * hd, out.begin() + size_t(p0) * H * hd);
      p0 += accepted;
    }
    return out;
  }
};

// Logits are float32 dots of length hd (~1e-7 relative), exp and the weighted sums add a few ulp per
// term: 1e-5 relative to the output scale is ample, and far below the effect of a wrong key set.
void check(const Seq& s, bool use_idx) {
  const Vec one = s.run(s.S, use_idx);
  DVec want;
  for (int p = 0; p < s.S; ++p) {
    const DVec row = s.expected(p, use_idx);
    want.insert(want.end(), row.begin(), row.end());
  }
  expect_close(one, want, 1e-5, "one chunk vs float64");
  // Chunked runs read older positions from the ring; the design promises the same bits.
  for (int chunk : {1, 7, 33}) expect_bit_identical(s.run(chunk, use_idx), one, "chunked vs one chunk");
}

TEST(SparseAttention, WindowOnly) { check(Seq(12, 50, 3, 16, 8, 0, 0), false); }

TEST(SparseAttention, WindowLongerThanSequence) { check(Seq(13, 20, 2, 8, 64, 0, 0), false); }

TEST(SparseAttention, AllVisibleCompressedEntries) { check(Seq(14, 50, 3, 16, 8, 4, 0), false); }

TEST(SparseAttention, SelectedCompressedEntries) { check(Seq(15, 50, 3, 16, 8, 4, 5), true); }

TEST(SparseAttention, RingOfWindowPlusKSurvivesSpeculativeRollback) {
  const Seq s(26, 60, 2, 8, 8, 4, 3);
  const int K = 3;
  const Vec plain = s.run(s.S, true);
  expect_bit_identical(s.run_speculative(K, s.window + K, 27), plain, "ring of window + K");
  // With only `window` slots, rejected drafts overwrite rows still inside later windows.
  const Vec small = s.run_speculative(K, s.window, 27);
  EXPECT_NE(std::memcmp(small.data(), plain.data(), plain.size() * sizeof(float)), 0);
}

TEST(SparseAttention, SinkOnlyScalesProbabilities) {
  // One key (position 0, window 1): o = kv * e^s / (e^s + e^sink).
  const Vec q = {1.0f, 2.0f}, kv = {0.5f, -1.0f}, sink = {0.3f};
  SparseAttentionArgs a;
  a.rows = 1;
  a.heads = 1;
  a.head_dim = 2;
  a.scale = 0.5f;
  a.q = q.data();
  a.sink = sink.data();
  a.chunk_kv = kv.data();
  a.window = 1;
  Vec ring(2), out(2);
  a.ring = ring.data();
  sparse_attention(a, out.data());
  const double s = (0.5 - 2.0) * 0.5, p = std::exp(s) / (std::exp(s) + std::exp(0.3));
  EXPECT_NEAR(out[0], 0.5 * p, 1e-6);
  EXPECT_NEAR(out[1], -1.0 * p, 1e-6);
}

TEST(WindowKvUpdate, WritesTheLastWindowPositions) {
  const int hd = 1, window = 4;
  Vec ring(window, -1.0f);
  const Vec kv = {10, 11, 12, 13, 14, 15};  // positions 5..10
  window_kv_update(kv.data(), 6, hd, 5, ring.data(), window);
  // Positions 7..10 survive, at slots 3, 0, 1, 2.
  EXPECT_EQ(ring, (Vec{13, 14, 15, 12}));
}

}  // namespace
}  // namespace smelt::kernels
