#include "kernels/compressor/reference.h"

#include "kernels/rope/reference.h"
#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

constexpr float kUnwritten = 777.0f;

struct Comp {
  int ratio, hd, in, rd, S;
  bool overlap;
  Vec x, wkv, wgate, ape, norm, inv_freq;
  float eps = 1e-6f;

  Comp(uint64_t seed, int ratio_, bool overlap_, int S_) : ratio(ratio_), hd(16), in(24), rd(8), S(S_), overlap(overlap_) {
    Rng rng(seed);
    const int cw = (overlap ? 2 : 1) * hd;
    x = rng.normal(size_t(S) * in);
    wkv = rng.normal(size_t(cw) * in, 1.0 / std::sqrt(double(in)));
    wgate = rng.normal(size_t(cw) * in, 1.0 / std::sqrt(double(in)));
    ape = rng.normal(size_t(ratio) * cw);
    norm = rng.uniform(hd, 0.5, 1.5);
    RopeParams p;
    p.rope_dim = rd;
    p.theta = 160000.0;
    p.yarn_factor = 16.0;
    p.yarn_original_max_pos = 65536.0;
    inv_freq = rope_inv_freq(p);
  }

  int entries() const { return S / ratio; }

  // Float64 oracle, stateless and from scratch: for every complete window j of the whole sequence, build
  // its slots explicitly, softmax each channel over them, then RMSNorm and RoPE at position j*ratio.
  DVec expected() const {
    const int cw = (overlap ? 2 : 1) * hd;
    auto project = [&](const Vec& w, int pos) {
      DVec out(cw);
      for (int o = 0; o < cw; ++o)
        for (int i = 0; i < in; ++i) out[o] += double(x[size_t(pos) * in + i]) * w[size_t(o) * in + i];
      return out;
    };
    DVec pool;
    for (int j = 0; j < entries(); ++j) {
      std::vector<DVec> kv_slots, score_slots;  // each [hd]
      auto add_slot = [&](int pos, int s, int half) {
        const DVec kv = project(wkv, pos), g = project(wgate, pos);
        DVec kvs(hd), sc(hd);
        for (int c = 0; c < hd; ++c) {
          kvs[c] = kv[half * hd + c];
          sc[c] = g[half * hd + c] + ape[size_t(s) * cw + half * hd + c];
        }
        kv_slots.push_back(kvs);
        score_slots.push_back(sc);
      };
      if (overlap && j > 0)
        for (int s = 0; s < ratio; ++s) add_slot((j - 1) * ratio + s, s, 0);  // previous window, first half
      for (int s = 0; s < ratio; ++s) add_slot(j * ratio + s, s, overlap ? 1 : 0);
      DVec v(hd);
      for (int c = 0; c < hd; ++c) {
        double z = 0.0;
        for (auto& sc : score_slots) z += std::exp(sc[c]);
        for (size_t s = 0; s < kv_slots.size(); ++s) v[c] += std::exp(score_slots[s][c]) / z * kv_slots[s][c];
      }
      double ms = 0.0;
      for (double e : v) ms += e * e;
      for (int c = 0; c < hd; ++c) v[c] = v[c] / std::sqrt(ms / hd + eps) * norm[c];
      for (int i = 0; i < rd / 2; ++i) {
        const double ang = double(inv_freq[i]) * (j * ratio);
        double* p = &v[hd - rd + 2 * i];
        const double a = p[0], b = p[1];
        p[0] = a * std::cos(ang) - b * std::sin(ang);
        p[1] = a * std::sin(ang) + b * std::cos(ang);
      }
      pool.insert(pool.end(), v.begin(), v.end());
    }
    return pool;
  }

  CompressorArgs args() const {
    CompressorArgs a;
    a.ratio = ratio;
    a.head_dim = hd;
    a.overlap = overlap;
    a.in_dim = in;
    a.wkv = wkv.data();
    a.wgate = wgate.data();
    a.ape = ape.data();
    a.norm = norm.data();
    a.eps = eps;
    a.rope_dim = rd;
    a.inv_freq = inv_freq.data();
    return a;
  }

  // Feeds the sequence in chunks, carrying the ring; returns the pool with one spare row.
  Vec run(int chunk) const {
    const int cw = (overlap ? 2 : 1) * hd;
    Vec ring(size_t(2 * ratio) * 2 * cw, 0.0f), pool(size_t(entries() + 1) * hd, kUnwritten);
    for (int p0 = 0; p0 < S; p0 += chunk) {
      const int T = std::min(chunk, S - p0);
      compressor(args(), &x[size_t(p0) * in], T, p0, ring.data(), pool.data(), entries() + 1);
    }
    return pool;
  }

  // Speculative decoding (see the attention test): steps of K+1 rows, the first `accepted` true, the rest
  // rejected drafts; the cursor then moves to the first rejected position.
  Vec run_speculative(int K, int ring_rows, uint64_t seed) const {
    Rng rng(seed);
    const int cw = (overlap ? 2 : 1) * hd;
    Vec ring(size_t(ring_rows) * 2 * cw, 0.0f), pool(size_t(entries() + 1) * hd, kUnwritten);
    CompressorArgs a = args();
    a.ring_rows = ring_rows;
    for (int p0 = 0; p0 < S;) {
      const int T = std::min(K + 1, S - p0), accepted = rng.integer(1, T);
      Vec cx(&x[size_t(p0) * in], &x[size_t(p0 + T) * in]);
      const Vec draft = rng.normal(cx.size());
      std::copy(draft.begin() + size_t(accepted) * in, draft.end(), cx.begin() + size_t(accepted) * in);
      compressor(a, cx.data(), T, p0, ring.data(), pool.data(), entries() + 1);
      p0 += accepted;
    }
    return pool;
  }
};

// Projections are float32 dots of length 24, softmax weights and the RMS statistic a few ulp, the float32
// RoPE angle (positions < 50) within 3e-6 rad of the exact one: 1e-5 relative is comfortably above that,
// and far below what a wrong slot, half or bias would change.
void check(const Comp& c) {
  const Vec one = c.run(c.S);
  const DVec want = c.expected();
  expect_close(one.data(), want, 1e-5, "one chunk vs float64");
  for (int d = 0; d < c.hd; ++d) EXPECT_EQ(one[size_t(c.entries()) * c.hd + d], kUnwritten) << "incomplete window";
  for (int chunk : {1, 7, 33}) expect_bit_identical(c.run(chunk), one, "chunked vs one chunk");
}

TEST(Compressor, OverlappingWindowsRatio4) { check(Comp(16, 4, true, 45)); }

TEST(Compressor, PlainWindowsRatio8) { check(Comp(17, 8, false, 45)); }

TEST(Compressor, RingOf2RatioPlusKSurvivesSpeculativeRollback) {
  // After a step at p0 accepts at least one row, rows from p0 + 2 - 2*ratio (overlap) or p0 + 2 - ratio
  // (plain) on are still needed; drafts wrote up to p0 + K. K = 9 lets both layouts overflow 2*ratio slots
  // and makes steps longer than 2*ratio rows, all of which the larger ring must keep.
  const int K = 9;
  for (bool overlap : {true, false}) {
    const Comp c(28, 4, overlap, 61);
    const Vec plain = c.run(c.S);
    // Entries first emitted from rejected drafts are emitted again, correctly, once their window is re-fed.
    expect_bit_identical(c.run_speculative(K, 2 * c.ratio + K, 29), plain, "ring of 2*ratio + K");
    const Vec small = c.run_speculative(K, 2 * c.ratio, 29);
    EXPECT_NE(std::memcmp(small.data(), plain.data(), plain.size() * sizeof(float)), 0) << "overlap " << overlap;
  }
}

TEST(Compressor, EmitsAnEntryOnlyWhenItsWindowCompletes) {
  const Comp c(18, 4, true, 8);
  const int cw = 2 * c.hd;
  Vec ring(size_t(2 * c.ratio) * 2 * cw, 0.0f), pool(size_t(3) * c.hd, kUnwritten);
  compressor(c.args(), c.x.data(), 6, 0, ring.data(), pool.data(), 3);  // positions 0..5: entry 0 only
  const DVec want = c.expected();
  expect_close(pool.data(), DVec(want.begin(), want.begin() + c.hd), 1e-5, "entry 0");
  EXPECT_EQ(pool[c.hd], kUnwritten);
  compressor(c.args(), &c.x[size_t(6) * c.in], 2, 6, ring.data(), pool.data(), 3);  // positions 6, 7: entry 1
  expect_close(pool.data(), want, 1e-5, "entries 0, 1");
  EXPECT_EQ(pool[2 * c.hd], kUnwritten);
}

}  // namespace
}  // namespace smelt::kernels
