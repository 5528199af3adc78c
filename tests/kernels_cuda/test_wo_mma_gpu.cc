// Tensor-core weight-only GEMVs (kernels/linear/linear_wo_mma.cu, kernels/moe/moe_wo_mma.cu, and the one-row FP4
// expert kernels on the act-quant ring, kernels/moe/moe_mma.cu *_fp4_wo_ring) against a float64 oracle written here
// (exact dequantization, the dot in double) and against the CUDA-core fp32 kernels. The ring kernels sum a block's
// hi and lo halves in two MMA columns and add them once (one more fp32 rounding a block, inside the same bound).
//
// Tolerance (docs/performance.md "Tensor-core weight-only decode"): with mag = sum_k |x_k w_k| and nb = K / 32,
//   |y - exact| <= (nb + 32) * 2^-24 * mag
// for both kernels. MMA kernel: x = hi + lo to ~2^-22 relative per element (+ an absolute 2^-40 of the block max);
// f16 products exact; the tensor cores' block sum within ~5 * 2^-22 of the block's sum |x w|; then one fp32 fma a
// block in K order (<= nbp * 2^-24) and the K-part fold (<= 8 * 2^-24). CUDA-core kernel: lane chains of K / 32
// fmas and a 5-step butterfly. A worst-case bound misses errors that are small per element (dropping lo costs
// ~2^-12 per element but ~2^-18 of mag on K = 5120), so the root mean square of |y - exact| / mag must also stay
// below 2^-21 (measured far below; hi alone gives ~2^-16 .. 2^-18).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "runtime/cuda/kernel_args.h"
#include "runtime/cuda/mma_split.h"
#include "tests/kernels_cuda/bits.h"
#include "tests/kernels_cuda/counted_experts.h"
#include "tests/kernels_cuda/harness.h"

namespace {

using smelt::runtime::cuda::ExpertW;
using smelt::runtime::cuda::mma_smem_bytes;
using smelt::runtime::cuda::mma_wo_down_span;
using smelt::test_cuda::DevPtr;
using smelt::test_cuda::expect_bits_equal;
using smelt::test_cuda::gpu;
using smelt::test_cuda::randn;

double e4m3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (c & 0x80) ? -v : v;
}
double e2m1(uint8_t n) {
  static const double t[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (n & 8) ? -t[n & 7] : t[n & 7];
}
double e8m0(uint8_t e) { return e == 255 ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int(e) - 127); }

// A quantized weight [rows_w, K] with its scales, and its exact dequantization.
struct QW {
  bool fp4;
  int rows_w, K, blk;
  std::vector<uint8_t> w, s;
  std::vector<double> deq;
};
QW make_qw(bool fp4, int rows_w, int K, int blk, uint32_t seed) {
  QW q{fp4, rows_w, K, fp4 ? 32 : blk, {}, {}, {}};
  std::mt19937 r(seed);
  q.w.resize(size_t(rows_w) * (fp4 ? K / 2 : K));
  for (auto& b : q.w) {
    do b = uint8_t(r()); while (!fp4 && (b & 0x7f) == 0x7f);  // NaN codes only where a test puts them
  }
  const int sr = fp4 ? rows_w : (rows_w + blk - 1) / blk, scols = fp4 ? K / 32 : (K + blk - 1) / blk;
  q.s.resize(size_t(sr) * scols);
  for (auto& b : q.s) b = uint8_t(118 + r() % 8);
  return q;
}
void dequant(QW& q) {
  const int K = q.K;
  q.deq.assign(size_t(q.rows_w) * K, 0.0);
  for (int n = 0; n < q.rows_w; ++n)
    for (int k = 0; k < K; ++k) {
      double v, s;
      if (q.fp4) {
        const uint8_t b = q.w[size_t(n) * (K / 2) + k / 2];
        v = e2m1(k % 2 ? b >> 4 : b & 15);
        s = e8m0(q.s[size_t(n) * (K / 32) + k / 32]);
      } else {
        v = e4m3(q.w[size_t(n) * K + k]);
        s = e8m0(q.s[size_t(n / q.blk) * ((K + q.blk - 1) / q.blk) + k / q.blk]);
      }
      q.deq[size_t(n) * K + k] = v * s;
    }
}

unsigned wo_smem(int R, int S) { return unsigned(8 * 32 * 16 + R * (S * 128 + 16 + S * 4)); }

struct Err {
  double worst = 0, sq = 0;  // worst (|err| / tol), sum of (|err| / mag)^2
  int64_t n = 0, nonfinite_mismatch = 0;
  void add(double got, double exact, double mag, int nb) {
    if (!std::isfinite(exact) || !std::isfinite(got)) {
      const bool same = std::isnan(exact) ? std::isnan(got) : got == exact;
      nonfinite_mismatch += !same;
      return;
    }
    const double tol = (nb + 32) * std::ldexp(1.0, -24) * mag + 1e-35;
    worst = std::max(worst, std::fabs(got - exact) / tol);
    if (mag > 0) sq += std::pow((got - exact) / mag, 2), ++n;
  }
  double rms() const { return n ? std::sqrt(sq / double(n)) : 0.0; }
};

// y [rows, G*N] for x [rows, G*K] through both kernels; checks both against the oracle, MMA row 0 alone == row 0.
void check_linear(bool fp4, int rows, int K, int N, int G, int blk, int ks, int cb, uint32_t seed, float xscale = 1.f,
                  bool specials = false) {
  SCOPED_TRACE(std::string(fp4 ? "fp4" : "fp8") + " rows " + std::to_string(rows) + " K " + std::to_string(K) +
               " N " + std::to_string(N) + " G " + std::to_string(G) + " ks " + std::to_string(ks) + " cb " +
               std::to_string(cb));
  QW q = make_qw(fp4, G * N, K, blk, seed);
  auto x = randn(size_t(rows) * G * K, seed + 1, xscale);
  if (specials) {
    const float inf = std::numeric_limits<float>::infinity();
    x[3] = inf;                                    // row 0: +inf in block 0
    if (rows > 1) x[size_t(G) * K + 40] = std::nanf("");  // row 1: NaN in block 1
    if (rows > 2) x[2 * size_t(G) * K + 64] = -inf, x[2 * size_t(G) * K + 65] = 1e30f;
    if (rows > 3) for (int k = 0; k < 32; ++k) x[3 * size_t(G) * K + k] = k % 2 ? inf : -inf;  // inf - inf: NaN
    if (!fp4) q.w[size_t(5) * K + 7] = 0x7F, q.w[size_t(N - 1) * K + K - 1] = 0xFF;  // NaN codes: columns 5, N-1
    else q.w[size_t(6) * (K / 2)] = 0x00;  // a zero weight at k = 0 of column 6 (inf * 0 = NaN in row 0)
    x[0] = inf;
  }
  dequant(q);
  const int nb = K / 32;
  DevPtr dx = gpu().put(x), dw = gpu().put(q.w), ds = gpu().put(q.s);
  DevPtr dy = gpu().alloc(size_t(rows) * G * N * 4), dc = gpu().alloc(size_t(rows) * G * N * 4);
  DevPtr d1 = gpu().alloc(size_t(G) * N * 4);
  const std::string mma = fp4 ? "smelt_linear_fp4_wo_mma" : "smelt_linear_fp8_wo_mma";
  const int R = std::min(rows, 8), tpc = 8 / ks, groups = ((N + 15) / 16 + tpc - 1) / tpc;
  gpu().launch("linear", mma.c_str(), unsigned(std::min(groups, 40)), unsigned((rows + 7) / 8), unsigned(G), 256,
               wo_smem(R, ks * cb), dx, dy, dw, ds, rows, K, N, q.blk, 1.0f, 0, ks, cb);
  gpu().launch("linear", mma.c_str(), unsigned(std::min(groups, 40)), 1u, unsigned(G), 256, wo_smem(1, ks * cb), dx,
               d1, dw, ds, 1, K, N, q.blk, 1.0f, 0, ks, cb);
  gpu().launch("linear", fp4 ? "smelt_linear_fp4" : "smelt_linear_fp8", unsigned((N + 7) / 8), unsigned(G), 1, 256, 0,
               dx, dc, dw, ds, rows, K, N, q.blk, 1.0f, 0);
  auto y = gpu().get<float>(dy, size_t(rows) * G * N), yc = gpu().get<float>(dc, size_t(rows) * G * N);
  auto y1 = gpu().get<float>(d1, size_t(G) * N);
  Err em, ec;
  for (int r = 0; r < rows; ++r)
    for (int z = 0; z < G; ++z)
      for (int n = 0; n < N; ++n) {
        double exact = 0, mag = 0;
        const float* xr = &x[size_t(r) * G * K + size_t(z) * K];
        const double* wr = &q.deq[size_t(z * N + n) * K];
        for (int k = 0; k < K; ++k) exact += double(xr[k]) * wr[k], mag += std::fabs(double(xr[k]) * wr[k]);
        const size_t i = size_t(r) * G * N + size_t(z) * N + n;
        em.add(y[i], exact, mag, nb);
        ec.add(yc[i], exact, mag, nb);
      }
  EXPECT_LE(em.worst, 1.0) << "tensor-core kernel vs float64";
  EXPECT_LE(ec.worst, 1.0) << "CUDA-core kernel vs float64";
  EXPECT_LE(em.rms(), std::ldexp(1.0, -21)) << "tensor-core kernel: rms of |err| / mag";
  EXPECT_EQ(em.nonfinite_mismatch, 0) << "tensor-core kernel: inf / NaN differ from float64";
  EXPECT_EQ(ec.nonfinite_mismatch, 0) << "CUDA-core kernel: inf / NaN differ from float64";
  int differ = 0;
  for (size_t i = 0; i < y1.size(); ++i) differ += std::memcmp(&y1[i], &y[i], 4) != 0;
  EXPECT_EQ(differ, 0) << "row 0 alone vs in " << rows << " rows (bits)";
  std::printf("  %s rows %d K %d N %d G %d ks %d cb %d: worst/tol mma %.3g cuda-core %.3g, rms err/mag mma %.3g\n",
              fp4 ? "fp4" : "fp8", rows, K, N, G, ks, cb, em.worst, ec.worst, em.rms());
}

TEST(WoMma, LinearRowsTilesAndKSplits) {
  NEED_GPU();
  for (bool fp4 : {false, true})
    for (int rows = 1; rows <= 8; ++rows) check_linear(fp4, rows, 320, 300, 1, 32, 1, 10, 10 + rows);
  for (bool fp4 : {false, true})
    for (int ks : {1, 2, 4, 8})
      for (int cb : {1, 3, 40}) check_linear(fp4, 3, 1280, 72, 1, 128, ks, std::min(cb, (40 + ks - 1) / ks), 50 + ks);
  check_linear(false, 11, 256, 40, 1, 64, 2, 4, 70);  // two row groups (grid y)
  check_linear(true, 17, 256, 24, 1, 32, 1, 8, 71);
  check_linear(false, 5, 512, 33, 1, 32, 4, 4, 72, 1e-30f);  // tiny activations (f16 subnormal lo)
  check_linear(false, 5, 512, 33, 1, 32, 4, 4, 73, 1e30f);   // huge activations
}

TEST(WoMma, LinearInfAndNaN) {
  NEED_GPU();
  for (bool fp4 : {false, true}) check_linear(fp4, 4, 256, 40, 1, 32, 2, 4, 80, 1.f, true);
}

TEST(WoMma, LinearRealShapes) {
  NEED_GPU();
  // (K, N): q_a-like 5120 x 1536, the head-sized 1536 x 32768, 5120 x 512, 8192 x 5120, grouped wo_a (8 x 4096 x 1024).
  check_linear(false, 1, 5120, 1536, 1, 128, 8, 20, 90);
  check_linear(false, 2, 1536, 32768, 1, 128, 1, 48, 91);
  check_linear(false, 1, 5120, 512, 1, 128, 8, 20, 92);
  check_linear(false, 4, 8192, 5120, 1, 128, 2, 21, 93);
  check_linear(false, 1, 4096, 1024, 8, 128, 1, 128, 94);
  check_linear(true, 1, 5120, 1536, 1, 32, 8, 20, 95);
  check_linear(true, 8, 8192, 512, 1, 32, 8, 4, 96);
}

// The ring kernels (kernels/moe/moe_mma.cu smelt_moe_*_wo_ring, one row): their launch, as runtime/cuda/ops_mma.cc
// sizes it (mma_split.h mma_smem_bytes; the down stages two rows for each slot a group's tiles span).
// grid 0: the launcher's persistent grid (two blocks an SM); S: the K split (1, 2, 4, 8).
struct Ring {
  bool on = false;
  unsigned grid_up = 0, grid_down = 0;
  int s_up = 1, s_down = 1;
};

// E experts' w1 / w2 / w3 (row-major, as the weight-only kernels read them) and their ExpertW, each matrix's experts
// 256-byte aligned one after another. pairs: FP4 codes in pair order, as the runtime writes them for the weight-only
// tensor-core expert kernels (ring, wo_mma); the CUDA-core kernels read them as stored.
ExpertW put_experts(std::vector<QW>& w1, std::vector<QW>& w2, std::vector<QW>& w3, bool pairs = false) {
  auto cat = [&](std::vector<QW>& v, bool scales, int64_t& stride) {
    std::vector<uint8_t> all;
    for (auto& q : v) {
      const auto& b = scales ? q.s : pairs && q.fp4 ? smelt::test_cuda::fp4_pair_order(q.w) : q.w;
      stride = int64_t(b.size() + 255) / 256 * 256;
      const size_t at = all.size();
      all.resize(at + size_t(stride));
      std::copy(b.begin(), b.end(), all.begin() + at);
    }
    return gpu().put(all);
  };
  ExpertW ew{};
  ew.base[0] = cat(w1, false, ew.stride[0]), ew.base[1] = cat(w1, true, ew.stride[1]);
  ew.base[2] = cat(w2, false, ew.stride[2]), ew.base[3] = cat(w2, true, ew.stride[3]);
  ew.base[4] = cat(w3, false, ew.stride[4]), ew.base[5] = cat(w3, true, ew.stride[5]);
  ew.table = 0;
  return ew;
}

// Experts: E experts, slots idx [rows * topk] (-1 = none); up h = swiglu(x w1, x w3), down out = h w2.
void check_experts(bool fp4, int rows, int topk, int E, int D, int F, int blk, const std::vector<int>& idx, int ks_up,
                   int ks_down, uint32_t seed, Ring ring = {}) {
  SCOPED_TRACE(std::string(fp4 ? "fp4" : "fp8") + " experts D " + std::to_string(D) + " F " + std::to_string(F) +
               (ring.on ? " ring S " + std::to_string(ring.s_up) + "/" + std::to_string(ring.s_down) : ""));
  const float limit = 7.f;
  std::vector<QW> w1, w2, w3;
  for (int e = 0; e < E; ++e) {
    w1.push_back(make_qw(fp4, F, D, blk, seed + 10 * e + 1));
    w3.push_back(make_qw(fp4, F, D, blk, seed + 10 * e + 2));
    w2.push_back(make_qw(fp4, D, F, blk, seed + 10 * e + 3));
  }
  const ExpertW ew = put_experts(w1, w2, w3), ewp = fp4 ? put_experts(w1, w2, w3, true) : ew;  // CUDA-core / tensor-core
  for (int e = 0; e < E; ++e) dequant(w1[e]), dequant(w2[e]), dequant(w3[e]);
  auto x = randn(size_t(rows) * D, seed, 1.f);
  const int RT = rows * topk;
  DevPtr dx = gpu().put(x), didx = gpu().put(idx);
  DevPtr h = gpu().alloc(size_t(RT) * F * 4), hc = gpu().alloc(size_t(RT) * F * 4);
  DevPtr out = gpu().alloc(size_t(RT) * D * 4), outc = gpu().alloc(size_t(RT) * D * 4);
  const std::string f = fp4 ? "fp4" : "fp8";
  const int cb_up = (D / 32 + ks_up - 1) / ks_up, cb_down = (F / 32 + ks_down - 1) / ks_down;
  // ring: the tiles (16 rows; the down's 2 x 16), the groups of 8 / S tiles, the slots a down group spans.
  const int tiles_up = topk * ((F + 15) / 16), tps_down = (D + 31) / 32, tiles_down = topk * tps_down;
  const int span = mma_wo_down_span(topk, tps_down, 8 / ring.s_down);
  auto ring_grid = [](unsigned forced, int tiles, int S) {
    const unsigned groups = unsigned(smelt::runtime::cuda::mma_groups(tiles, S));
    return forced ? std::min(forced, groups) : std::min(groups, 2u * unsigned(gpu().multiprocessors()));
  };
  const std::string up_ring = "smelt_moe_up_" + f + "_wo_ring", down_ring = "smelt_moe_down_" + f + "_wo_ring";
  if (ring.on)
    gpu().launch("moe", up_ring.c_str(), ring_grid(ring.grid_up, tiles_up, ring.s_up), 1, 1, 256, mma_smem_bytes(D, 2),
                 dx, D, F, topk, didx, E, DevPtr(0), ewp, blk, limit, 0, h, ring.s_up);
  else
    gpu().launch("moe", ("smelt_moe_up_" + f + "_wo_mma").c_str(), 30, unsigned(RT), 1, 256,
                 wo_smem(1, ks_up * cb_up), dx, D, F, topk, didx, E, ewp, blk, limit, h, ks_up, cb_up);
  gpu().launch("moe", ("smelt_moe_up_" + f).c_str(), unsigned((F + 7) / 8), unsigned(RT), 1, 256, 0, dx, D, F, topk,
               didx, E, ew, blk, limit, hc);
  auto hv = gpu().get<float>(h, size_t(RT) * F), hcv = gpu().get<float>(hc, size_t(RT) * F);
  if (ring.on)
    gpu().launch("moe", down_ring.c_str(), ring_grid(ring.grid_down, tiles_down, ring.s_down), 1, 1, 256,
                 mma_smem_bytes(F, 2 * span), h, D, F, topk, didx, E, ewp, blk, 0, 0, out, ring.s_down);
  else
    gpu().launch("moe", ("smelt_moe_down_" + f + "_wo_mma").c_str(), 30, unsigned(RT), 1, 256,
                 wo_smem(1, ks_down * cb_down), h, D, F, topk, didx, E, ewp, blk, out, ks_down, cb_down);
  gpu().launch("moe", ("smelt_moe_down_" + f).c_str(), unsigned((D + 7) / 8), unsigned(RT), 1, 256, 0, h, D, F, topk,
               didx, E, ew, blk, outc);
  auto ov = gpu().get<float>(out, size_t(RT) * D), ocv = gpu().get<float>(outc, size_t(RT) * D);
  Err eg, ed, edc;
  double worst_h = 0;
  for (int t = 0; t < RT; ++t) {
    const int e = idx[t], r = t / topk;
    for (int j = 0; j < F; ++j) {
      const size_t i = size_t(t) * F + j;
      if (e < 0) {
        EXPECT_EQ(hv[i], 0.f);
        continue;
      }
      double g = 0, u = 0, mg = 0, mu = 0;
      for (int k = 0; k < D; ++k) {
        const double xv = x[size_t(r) * D + k], a = w1[e].deq[size_t(j) * D + k], b = w3[e].deq[size_t(j) * D + k];
        g += xv * a, u += xv * b, mg += std::fabs(xv * a), mu += std::fabs(xv * b);
      }
      // h = silu(min(g, l)) * clamp(u, -l, l): |dh/dg| <= 1.1 |u|, |dh/du| <= |silu(g)|; + float rounding of h.
      const double gc = std::min(g, double(limit)), uc = std::clamp(u, -double(limit), double(limit));
      const double hs = gc / (1 + std::exp(-gc)) * uc;
      const double tg = (D / 32 + 32) * std::ldexp(1.0, -24) * mg, tu = (D / 32 + 32) * std::ldexp(1.0, -24) * mu;
      const double silu = gc / (1 + std::exp(-gc));
      const double tol = 1.1 * std::fabs(uc) * tg + std::fabs(silu) * tu + 1e-6 * std::fabs(hs) + 1e-30;
      worst_h = std::max({worst_h, std::fabs(hv[i] - hs) / tol, std::fabs(hcv[i] - hs) / tol});
    }
    for (int d = 0; d < D; ++d) {
      const size_t i = size_t(t) * D + d;
      if (e < 0) {
        EXPECT_EQ(ov[i], 0.f);
        continue;
      }
      double exact = 0, mag = 0;
      for (int k = 0; k < F; ++k) {
        const double a = double(hv[size_t(t) * F + k]) * w2[e].deq[size_t(d) * F + k];
        exact += a, mag += std::fabs(a);
      }
      ed.add(ov[i], exact, mag, F / 32);
      edc.add(ocv[i], exact, mag, F / 32);
    }
  }
  EXPECT_LE(worst_h, 1.0) << "up (swiglu) vs float64, both kernels";
  EXPECT_LE(ed.worst, 1.0) << "down: tensor-core kernel vs float64";
  EXPECT_LE(edc.worst, 1.0) << "down: CUDA-core kernel vs float64";
  EXPECT_LE(ed.rms(), std::ldexp(1.0, -21)) << "down: rms of |err| / mag";
  std::printf("  %s experts D %d F %d%s: worst/tol up %.3g down mma %.3g cuda-core %.3g, rms err/mag down %.3g\n",
              f.c_str(), D, F, ring.on ? " (ring)" : "", worst_h, ed.worst, edc.worst, ed.rms());
}

// The runtime's repack (kernels/backend/backend.cu smelt_fp4_pair_order, run at load on the weight-only FP4 experts)
// writes the layout the expert tests give the tensor-core kernels (harness.h fp4_pair_order, its own table): random
// words, and words holding every code at every nibble.
TEST(WoMma, Fp4PairOrderAtLoadIsTheKernelsLayout) {
  NEED_GPU();
  std::mt19937 r(7);
  std::vector<uint8_t> w(4 * 4099);
  for (auto& b : w) b = uint8_t(r());
  for (uint32_t i = 0; i < 16; ++i) {
    uint32_t v = 0;
    for (uint32_t k = 0; k < 8; ++k) v |= ((i + k) % 16) << (4 * k);
    std::memcpy(w.data() + 4 * i, &v, 4);
  }
  const DevPtr d = gpu().put(w);
  const unsigned long long words = w.size() / 4;
  gpu().launch("backend", "smelt_fp4_pair_order", 5, 1, 1, 256, 0, d, words);
  EXPECT_EQ(gpu().get<uint8_t>(d, w.size()), smelt::test_cuda::fp4_pair_order(w));
}

TEST(WoMma, ExpertsSmall) {
  NEED_GPU();
  for (bool fp4 : {false, true}) {
    check_experts(fp4, 2, 3, 4, 256, 96, 32, {2, -1, 0, 3, 3, 1}, 1, 1, 100);
    check_experts(fp4, 2, 3, 4, 320, 160, 64, {1, 0, 2, 2, -1, 3}, 2, 4, 101);
  }
}

TEST(WoMma, ExpertsRealShapes) {
  NEED_GPU();
  // Routed: 6 slots of one row, dim 5120, inter 2304 (FP4 experts; FP8 with 128-blocks); shared expert: one slot.
  check_experts(true, 1, 6, 6, 5120, 2304, 32, {0, 1, 2, 3, 4, 5}, 2, 2, 110);
  check_experts(false, 1, 6, 6, 5120, 2304, 128, {5, 4, 3, 2, 1, 0}, 2, 2, 111);
  check_experts(false, 1, 1, 1, 5120, 2304, 128, {0}, 8, 8, 112);
}

// The ring kernels of one row (FP4, and FP8 with 128-blocks): small shapes with every K split, persistent grids of
// one or two blocks (the down restages its slots group by group, also when groups straddle slots), an invalid slot;
// the V4.1-Flash routed shape and the shared expert's (one slot) with the launcher's grid and split.
TEST(WoMma, ExpertsRing) {
  NEED_GPU();
  for (bool fp4 : {true, false})
    for (int s : {1, 2, 4, 8}) {
      check_experts(fp4, 1, 3, 4, 256, 96, 32, {2, -1, 0}, 1, 1, 120 + s, Ring{true, 0, 0, s, s});
      check_experts(fp4, 1, 3, 4, 512, 256, fp4 ? 32 : 128, {3, 1, -1}, 1, 1, 130 + s, Ring{true, 1, 2, s, s});
      // 10 down tiles a slot: one block's groups straddle slots (e.g. tiles 8-15 after 0-7), restaged each time
      check_experts(fp4, 1, 3, 4, 320, 64, fp4 ? 32 : 128, {0, 3, 2}, 1, 1, 150 + s, Ring{true, 1, 1, s, s});
    }
  check_experts(true, 1, 6, 6, 5120, 2304, 32, {0, 1, 2, 3, 4, 5}, 1, 1, 140, Ring{true, 0, 0, 1, 1});
  check_experts(true, 1, 6, 6, 5120, 2304, 32, {5, 3, 1, 0, 2, 4}, 1, 1, 141, Ring{true, 0, 0, 2, 1});
  check_experts(false, 1, 6, 6, 5120, 2304, 128, {5, 3, 1, 0, 2, 4}, 1, 1, 142, Ring{true, 0, 0, 2, 2});
  check_experts(false, 1, 1, 1, 5120, 2304, 128, {0}, 1, 1, 143, Ring{true, 0, 0, 8, 8});
}

// The routed FP4 experts' up and the shared FP8 expert's up in one launch (smelt_moe_up_fp4_wo_ring_with_fp8, what
// runtime/cuda/ops_mma.cc try_experts_wo_ring_with_shared launches): both outputs the same bits as the two ring
// kernels' own launches, at the V4.1-Flash shapes (the launcher's grids and splits) and at small ones with tiles past F
// and persistent grids smaller than the groups (r / g blocks for the routed / shared parts).
void check_ring_with_shared(int D, int F, int F2, const std::vector<int>& idx, int E, unsigned r_up, unsigned g_up,
                            int s_up, int s2_up, uint32_t seed) {
  SCOPED_TRACE("routed fp4 D " + std::to_string(D) + " F " + std::to_string(F) + " + shared fp8 F " +
               std::to_string(F2));
  const int topk = int(idx.size());
  const float limit = 7.f, limit2 = 5.f;
  std::vector<QW> w1, w2, w3, v1, v2, v3;
  for (int e = 0; e < E; ++e) {
    w1.push_back(make_qw(true, F, D, 32, seed + 10 * e + 1));
    w3.push_back(make_qw(true, F, D, 32, seed + 10 * e + 2));
    w2.push_back(make_qw(true, D, F, 32, seed + 10 * e + 3));
  }
  v1.push_back(make_qw(false, F2, D, 128, seed + 7001));
  v3.push_back(make_qw(false, F2, D, 128, seed + 7002));
  v2.push_back(make_qw(false, D, F2, 128, seed + 7003));
  const ExpertW ew = put_experts(w1, w2, w3, true), ew2 = put_experts(v1, v2, v3);  // the ring kernels' layouts
  DevPtr dx = gpu().put(randn(size_t(D), seed, 1.f)), didx = gpu().put(idx);
  const size_t nh = size_t(topk) * F;
  DevPtr h0 = gpu().alloc(nh * 4), h1 = gpu().alloc(nh * 4), g0 = gpu().alloc(size_t(F2) * 4),
         g1 = gpu().alloc(size_t(F2) * 4);
  const unsigned smem = mma_smem_bytes(D, 2);
  gpu().launch("moe", "smelt_moe_up_fp4_wo_ring", r_up, 1, 1, 256, smem, dx, D, F, topk, didx, E, DevPtr(0), ew, 32,
               limit, 0, h0, s_up);
  gpu().launch("moe", "smelt_moe_up_fp8_wo_ring", g_up, 1, 1, 256, smem, dx, D, F2, 1, DevPtr(0), 1, DevPtr(0), ew2,
               128, limit2, 0, g0, s2_up);
  gpu().launch("moe", "smelt_moe_up_fp4_wo_ring_with_fp8", r_up + g_up, 1, 1, 256, smem, dx, D, F, topk, didx, E, ew,
               32, limit, h1, s_up, int(r_up), F2, ew2, 128, limit2, g1, s2_up);
  expect_bits_equal(gpu().get<float>(h1, nh), gpu().get<float>(h0, nh), "routed up");
  expect_bits_equal(gpu().get<float>(g1, size_t(F2)), gpu().get<float>(g0, size_t(F2)), "shared up");

  // The routed ring down with the slot counters (ExpertW::slot_done, as runtime/cuda/ops.cc run_experts passes them):
  // launched right after the counting up by dependent launch, each (re)staged slot waits for its count instead of
  // the grid-wide wait. The same bits as the down of h0 without them, twice in a row (the down zeroes the counters).
  using smelt::runtime::cuda::mma_groups;
  using smelt::runtime::cuda::mma_ksplit;
  using smelt::runtime::cuda::mma_wo_down_span;
  const int tps_down = (D + 31) / 32;
  const int64_t td = int64_t(topk) * tps_down;
  const int s_down = mma_ksplit(td, F / 32, 2u * unsigned(gpu().multiprocessors()));
  const unsigned r_down = std::min<unsigned>(unsigned(mma_groups(td, s_down)), r_up);  // r_up: small grids stay small
  const unsigned smem_down = mma_smem_bytes(F, 2 * mma_wo_down_span(topk, tps_down, 8 / s_down));
  const size_t no = size_t(topk) * D;
  DevPtr o0 = gpu().alloc(no * 4);
  gpu().launch("moe", "smelt_moe_down_fp4_wo_ring", r_down, 1, 1, 256, smem_down, h0, D, F, topk, didx, E, ew, 32, 0, 0,
               o0, s_down);
  ExpertW cw = ew;
  cw.slot_done = gpu().put(std::vector<uint32_t>(size_t(topk) + 1, 0u));
  auto counted = [&](DevPtr h2, DevPtr g2, DevPtr o2) {
    gpu().launch("moe", "smelt_moe_up_fp4_wo_ring_with_fp8", r_up + g_up, 1, 1, 256, smem, dx, D, F, topk, didx, E, cw,
                 32, limit, h2, s_up, int(r_up), F2, ew2, 128, limit2, g2, s2_up);
    gpu().launch("moe", "smelt_moe_down_fp4_wo_ring", r_down, 1, 1, 256, smem_down, h2, D, F, topk, didx, E, cw, 32, 0,
                 0, o2, s_down);
  };
  smelt::test_cuda::expect_counted_runs(counted, h0, nh, g0, size_t(F2), o0, no, cw.slot_done, size_t(topk) + 1,
                                        "ring pair");
}

TEST(WoMma, RingUpWithSharedExpertSameBits) {
  NEED_GPU();
  using smelt::runtime::cuda::mma_groups;
  using smelt::runtime::cuda::mma_ksplit;
  const unsigned blocks = 2u * unsigned(gpu().multiprocessors());
  // ops_mma.cc sync_split / grid: 16-row up tiles, the one-round K split, groups of 8 / S tiles capped at the blocks.
  const int64_t tu = 6 * (2304 / 16), ts = 2304 / 16;
  const int s_up = mma_ksplit(tu, 5120 / 32, blocks), s2_up = mma_ksplit(ts, 5120 / 32, blocks);
  const unsigned r_up = unsigned(std::min<int64_t>(mma_groups(tu, s_up), blocks));
  const unsigned g_up = unsigned(std::min<int64_t>(mma_groups(ts, s2_up), blocks));
  check_ring_with_shared(5120, 2304, 2304, {5, 0, 3, 1, 4, 2}, 6, r_up, g_up, s_up, s2_up, 800);
  // Small: 224 and 96 rows are not whole groups of tiles, an invalid slot, 3 / 2 persistent blocks, K splits 2 / 4.
  check_ring_with_shared(320, 224, 96, {2, 0, -1, 1}, 3, 3, 2, 2, 4, 900);
}

// The one-row linear and grouped linear on the ring (kernels/linear/linear_mma.cu smelt_linear_*_wo_ring): y [G N] for
// x [G K] against the float64 oracle within the same bound, launched as runtime/cuda/ops_mma.cc's try_linear_wo_ring
// does (shared memory mma_smem_bytes(K, 2), grid (blocks, 1, G)); `blocks` 0 takes the launcher's persistent grid.
void check_linear_ring(bool fp4, int K, int N, int G, int blk, int S, unsigned blocks, uint32_t seed,
                       bool specials = false) {
  SCOPED_TRACE(std::string(fp4 ? "fp4" : "fp8") + " ring K " + std::to_string(K) + " N " + std::to_string(N) + " G " +
               std::to_string(G) + " S " + std::to_string(S) + " blocks " + std::to_string(blocks));
  QW q = make_qw(fp4, G * N, K, blk, seed);
  auto x = randn(size_t(G) * K, seed + 1, 1.f);
  if (specials) {
    const float inf = std::numeric_limits<float>::infinity();
    x[3] = inf;                                        // +inf in block 0 of group 0
    if (G > 1) x[size_t(K) + 40] = std::nanf("");      // NaN in block 1 of group 1
    x[64] = -inf, x[65] = 1e30f;                       // -inf and a huge value in block 2
    if (!fp4) q.w[size_t(5) * K + 7] = 0x7F, q.w[size_t(N - 1) * K + K - 1] = 0xFF;  // NaN codes: columns 5, N-1
    else q.w[size_t(6) * (K / 2)] = 0x00;  // a zero weight at k = 0 of column 6 (inf * 0 = NaN)
  }
  dequant(q);
  const int nb = K / 32;
  DevPtr dx = gpu().put(x), dw = gpu().put(q.w), ds = gpu().put(q.s);
  DevPtr dy = gpu().alloc(size_t(G) * N * 4);
  const unsigned groups = unsigned(smelt::runtime::cuda::mma_groups((N + 15) / 16, S));
  const unsigned launcher = std::max(1u, 2u * unsigned(gpu().multiprocessors()) / unsigned(G));
  const unsigned gx = std::min(groups, blocks ? blocks : launcher);
  gpu().launch("linear", fp4 ? "smelt_linear_fp4_wo_ring" : "smelt_linear_fp8_wo_ring", gx, 1, unsigned(G), 256,
               mma_smem_bytes(K, 2), dx, dy, dw, ds, K, N, q.blk, 1.0f, 0, S);
  auto y = gpu().get<float>(dy, size_t(G) * N);
  Err em;
  for (int z = 0; z < G; ++z)
    for (int n = 0; n < N; ++n) {
      double exact = 0, mag = 0;
      const float* xr = &x[size_t(z) * K];
      const double* wr = &q.deq[size_t(z * N + n) * K];
      for (int k = 0; k < K; ++k) exact += double(xr[k]) * wr[k], mag += std::fabs(double(xr[k]) * wr[k]);
      em.add(y[size_t(z) * N + n], exact, mag, nb);
    }
  EXPECT_LE(em.worst, 1.0) << "ring kernel vs float64";
  if (!specials) {
    EXPECT_LE(em.rms(), std::ldexp(1.0, -21)) << "ring kernel: rms of |err| / mag";
  }
  EXPECT_EQ(em.nonfinite_mismatch, 0) << "ring kernel: inf / NaN differ from float64";
  std::printf("  %s ring K %d N %d G %d S %d grid %u: worst/tol %.3g, rms err/mag %.3g\n", fp4 ? "fp4" : "fp8", K, N,
              G, S, gx, em.worst, em.rms());
}

// Ragged N (a partial last tile), every K split, persistent grids of one and two blocks (a block walks several
// groups), FP8 32- and 128-blocks, groups (grid z; N a multiple of 16, as the launcher requires), inf / NaN; then the
// V4.1-Flash shapes the launcher takes (wq_a 5120 -> 1024, wq_b 1024 -> 32768, wkv 5120 -> 512, wo_a 8 x 4096 -> 1024)
// with its grid and split.
TEST(WoMma, LinearRing) {
  NEED_GPU();
  for (bool fp4 : {false, true})
    for (int S : {1, 2, 4, 8}) {
      check_linear_ring(fp4, 1280, 300, 1, 32, S, 0, 200 + S);
      check_linear_ring(fp4, 1280, 300, 1, 128, S, 1, 210 + S);
      check_linear_ring(fp4, 512, 80, 3, 32, S, 2, 220 + S);
    }
  for (bool fp4 : {false, true}) check_linear_ring(fp4, 256, 48, 2, 32, 2, 0, 230, true);
  using smelt::runtime::cuda::mma_ksplit;
  const unsigned blocks = 2u * unsigned(gpu().multiprocessors());
  auto rule = [&](int K, int N, int G) { return mma_ksplit(int64_t((N + 15) / 16) * G, K / 32, blocks); };
  check_linear_ring(false, 5120, 1024, 1, 32, rule(5120, 1024, 1), 0, 240);
  check_linear_ring(false, 1024, 32768, 1, 32, rule(1024, 32768, 1), 0, 241);
  check_linear_ring(false, 5120, 512, 1, 32, rule(5120, 512, 1), 0, 242);
  check_linear_ring(false, 4096, 1024, 8, 32, rule(4096, 1024, 8), 0, 243);
  check_linear_ring(true, 5120, 1024, 1, 32, rule(5120, 1024, 1), 0, 244);
}

}  // namespace
