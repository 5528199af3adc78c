// Tuning bench of the tensor-core decode GEMVs (kernels/linear/gemv_mma.cuh: smelt_gemv_fp8_mma, smelt_moe_*_mma; the
// "wg" variants: smelt_gemv_fp8_wgmma and the FP4 experts on wgmma, what the runtime launches on sm_90)
// at the V4.1-Flash decode shapes: every variant of the plan-time knobs (SMELT_MMA_RING_BYTES, _MIN_BLOCKS, _GROUP,
// _TPW, _L2PF; SMELT_W_TILED) x launch shape (blocks per multiprocessor, K split), timed on the GPU against the device copy bandwidth
// measured in the same run. A benchmark, not a test: it checks nothing (test_mma_kernels_gpu does).
//
//   bench_mma_gemv compile DIR [--arch sm_90] [--variants A,B]   no GPU needed (NVRTC): DIR/<variant>.<family>.cubin
//   bench_mma_gemv run DIR [--iters N] [--only SHAPE] [--variants A,B] [--pdl]
//                                               GPU: one line per (shape, variant, launch), then a summary
//
// Weights are random codes in the release formats (FP8 E4M3 with 32 x 32 E8M0 blocks, FP4 experts with per-row
// 32-block scales), rotated over enough copies (> 2 x the L2) that every launch reads them from HBM, as a decode
// step does. Without --pdl launches are back to back on one stream without dependent launch, so the small shapes
// include a launch gap the CUDA graph of a decode step hides; compare variants with each other, not with the step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "compiler/cuda/nvrtc.h"
#include "runtime/cuda/kernel_args.h"
#include "runtime/cuda/mma_split.h"
#include "tests/kernels_cuda/harness.h"

namespace {

using smelt::runtime::cuda::ExpertW;
using smelt::test_cuda::DevPtr;
using smelt::test_cuda::gpu;

struct Variant {
  const char* name;
  int ring;        // SMELT_MMA_RING_BYTES (the launch's shared memory depends on it)
  int min_blocks;  // SMELT_MMA_MIN_BLOCKS
  int group;       // SMELT_MMA_GROUP
  int tiled = 1;   // SMELT_W_TILED: the weights in tile order (the runtime's layout on sm_89+) or row-major (0)
  int tpw = 1;     // SMELT_MMA_TPW: 16-row matrices a warp of the linear walks at once
  int down_tpw = 2;  // SMELT_MMA_DOWN_TPW: the same for the experts' down projection
  int l2pf = 128;    // SMELT_MMA_L2PF: L2 prefetch hint of the weight copies (bytes)
  int fp4_pair_stages = 8;  // SMELT_MMA_FP4_PAIR_STAGES: ring stages of the experts' FP4 gate + up segment
  int wg = 0;        // routed FP4 experts by the wgmma kernels (sm_90: 64-row tiles of a warpgroup)
  int probe = 0;     // SMELT_MMA_PROBE (gemv_mma.cuh): the FP4 wgmma ring with parts of its work taken out, timing only
  int smem_scales = 1;  // SMELT_MMA_FP4_SMEM_SCALES: FP4 scale words by cp.async through shared memory (0: registers)
  int pos = 1;          // SMELT_MMA_WG_POS: the wgmma up's blocks in column pairs, four a chain (0: one block a wait)
  int full_ring = 0;    // the wgmma down's launch with 8 KB a warp of rings (before session 30; else what it uses)
  int pos_down = 1;     // SMELT_MMA_WG_POS_DOWN: the same chains for the wgmma down (0: one block a wait)
  int wo = 0;           // routed FP4 experts by the weight-only ring kernels (the sm_80 path's smelt_moe_*_fp4_wo_ring)
  int hl_chain = 2;     // SMELT_MMA_HL_CHAIN: their blocks four a chain in 1 or 2 accumulators (0: one block a fold)
  int aq_chain = 2;     // SMELT_MMA_AQ_CHAIN: the same for the act-quant FP4 experts on mma.sync ("base": sm_89 / sm_120's)
};
// "base" is what the runtime compiles (the knobs' defaults). Every FP4 stage of two matrices is 512 bytes and an FP8
// one of two matrices 1 KB; a ring must hold at least one group of stages (group <= ring / stage). The codes are
// random, so either layout times the same work.
const Variant kVariants[] = {
    {"base", 8192, 2, 4},
    {"nopf", 8192, 2, 4, 1, 1, 2, 0},
    {"rowmajor", 8192, 2, 4, 0},
    {"rowmajor_nopf", 8192, 2, 4, 0, 1, 2, 0},
    {"ring4k", 4096, 2, 4},
    {"down1", 8192, 2, 4, 1, 1, 1},           // one 16-row tile a warp in the experts' down (the default until session 8)
    {"p16", 8192, 2, 4, 1, 1, 2, 128, 16},    // 16 ring stages for the FP4 gate + up (slower: 45.6 vs 43.7 us)
    {"mb3r4k", 4096, 3, 4},                   // three blocks a multiprocessor (80 registers, a few spilled)
    {"wg", 8192, 2, 4, 1, 1, 2, 128, 8, 1},     // the FP4 experts on wgmma, four blocks a chain (SMELT_MMA_WG_POS=1)
    {"wgp16", 8192, 2, 4, 1, 1, 2, 128, 16, 1}, // + 16 ring stages for the gate + up (up 35.0 -> 38.1 us)
    {"wgg8", 8192, 2, 8, 1, 1, 2, 128, 16, 1},  // + one wait per 8 stages of 16 (up 40.1 us)
    // What bounds the wgmma FP4 experts (session 29): the same ring with parts of the work taken out (wrong sums)
    {"wgp1", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 1},  // the ring's copies and waits alone
    {"wgp2", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 2},  // + conversions and wgmmas, no fold
    {"wgp3", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 3},  // + conversions and fold, no wgmmas
    {"wgp4", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 4},  // as wgp2, each wgmma's result read by one add
    {"wgp5", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 5},  // the whole kernel, every weight scale 1 (no scale loads, decode)
    // The FP4 scale words in the register ring (the kernels before session 30) against the shared-memory ring
    {"wgreg", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 0, 0},
    {"basereg", 8192, 2, 4, 1, 1, 2, 128, 8, 0, 0, 0},
    // The wgmma up one block a wait (what the runtime launches on sm_90: the chains lost in the step, session 33)
    // against four blocks a chain in column pairs
    {"wgnopos", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 0, 1, 0, 0, 0},
    {"wgfull", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 0, 1, 1, 1},  // + the down's launch with the full rings
    {"wgposup", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 0, 1, 1, 0, 0},  // the chains in the up only (session 30's code)
    {"wga2", 8192, 2, 4, 1, 1, 2, 128, 8, 1, 0, 1, 2, 0, 2},     // the chains in two accumulators, up and down
    // The sm_80 path's FP4 experts (weight-only ring, what `--numerics fp32` plans launch): chains of four blocks in
    // two accumulators (the default), one, none (the kernels before session 31)
    {"wo", 8192, 2, 4, 1, 1, 2, 128, 8, 0, 0, 1, 1, 0, 1, 1, 2},
    {"wohl1", 8192, 2, 4, 1, 1, 2, 128, 8, 0, 0, 1, 1, 0, 1, 1, 1},
    {"wohl0", 8192, 2, 4, 1, 1, 2, 128, 8, 0, 0, 1, 1, 0, 1, 1, 0},
    // The act-quant FP4 experts on mma.sync (what sm_89 / sm_120 launch; "base"): chains in one accumulator, none
    {"aq1", 8192, 2, 4, 1, 1, 2, 128, 8, 0, 0, 1, 1, 0, 1, 0, 2, 1},
    {"aq0", 8192, 2, 4, 1, 1, 2, 128, 8, 0, 0, 1, 1, 0, 1, 0, 2, 0},
};

std::vector<std::string> defines(const Variant& v) {
  return {"-DSMELT_MMA_RING_BYTES=" + std::to_string(v.ring), "-DSMELT_MMA_MIN_BLOCKS=" + std::to_string(v.min_blocks),
          "-DSMELT_MMA_GROUP=" + std::to_string(v.group), "-DSMELT_W_TILED=" + std::to_string(v.tiled),
          "-DSMELT_MMA_TPW=" + std::to_string(v.tpw), "-DSMELT_MMA_DOWN_TPW=" + std::to_string(v.down_tpw),
          "-DSMELT_MMA_L2PF=" + std::to_string(v.l2pf),
          "-DSMELT_MMA_FP4_PAIR_STAGES=" + std::to_string(v.fp4_pair_stages),
          "-DSMELT_MMA_PROBE=" + std::to_string(v.probe),
          "-DSMELT_MMA_FP4_SMEM_SCALES=" + std::to_string(v.smem_scales), "-DSMELT_MMA_WG_POS=" + std::to_string(v.pos),
          "-DSMELT_MMA_WG_POS_DOWN=" + std::to_string(v.pos_down), "-DSMELT_MMA_HL_CHAIN=" + std::to_string(v.hl_chain),
          "-DSMELT_MMA_AQ_CHAIN=" + std::to_string(v.aq_chain)};
}

// gemv_mma.cuh mma_smem_bytes with the variant's ring.
unsigned mma_smem(int K, int rows, int ring) { return smelt::runtime::cuda::mma_smem_bytes(K, rows, ring); }

// K segments as the launcher picks them.
int ksplit(int64_t tiles, int nb, unsigned blocks) { return smelt::runtime::cuda::mma_ksplit(tiles, nb, blocks); }

enum Kind { kLinear, kSharedExpert, kRoutedExperts };
struct Shape {
  const char* name;
  Kind kind;
  int K, N;      // linear: K -> N; experts: D, F
  int per_step;  // launches in a decode step of the bench slice (4 layers)
};
const Shape kShapes[] = {
    {"wq_a 5120x1280", kLinear, 5120, 1280, 4},     {"wkv 5120x512", kLinear, 5120, 512, 4},
    {"wq_b 1280x32768", kLinear, 1280, 32768, 4},   {"wo_b 8192x5120", kLinear, 8192, 5120, 4},
    {"idx wq_b 1280x4096", kLinear, 1280, 4096, 1}, {"engram wkv 6144x25600", kLinear, 6144, 25600, 1},
    {"shared expert fp8 5120/2304", kSharedExpert, 5120, 2304, 4},
    {"routed experts fp4 6 of 384 5120/2304", kRoutedExperts, 5120, 2304, 4},
    // Balance probes (not in the step's sums): the wgmma up's 6 x F / 64 tiles at K split 2 give 216 blocks for F
    // 2304 on 132 SMs (84 with two, 48 with one); F 1408 gives 132 (one an SM), F 2816 264 (two an SM). The same for
    // the down's 6 x D / 128 tiles: D 5632 gives 264 blocks against 5120's 240.
    {"probe routed fp4 5120/1408", kRoutedExperts, 5120, 1408, 0},
    {"probe routed fp4 5120/2816", kRoutedExperts, 5120, 2816, 0},
    {"probe routed fp4 5632/2304", kRoutedExperts, 5632, 2304, 0},
};

constexpr int kTopk = 6, kExperts = 384;

// Fills n bytes at p with random E4M3 codes (no NaN; also valid FP4 pairs) or E8M0 scales 2^-9 .. 2^-2, from a
// 16 MB host pattern (distinct per call offset).
void fill(DevPtr p, size_t n, bool scales, uint32_t seed) {
  static std::vector<uint8_t> codes, sc;
  if (codes.empty()) {
    std::mt19937 r(7);
    codes.resize(16u << 20), sc.resize(16u << 20);
    for (auto& b : codes) do b = uint8_t(r()); while ((b & 0x7f) == 0x7f);
    for (auto& b : sc) b = uint8_t(118 + r() % 8);
  }
  const auto& src = scales ? sc : codes;
  size_t off = (seed * 7919u) % (src.size() / 2);
  for (size_t done = 0; done < n;) {
    const size_t c = std::min(n - done, src.size() - off);
    gpu().upload(p + done, src.data() + off, c);
    done += c, off = 0;
  }
}

double copy_gbps() {
  const size_t bytes = size_t(1) << 30;
  DevPtr a = gpu().alloc(bytes), b = gpu().alloc(bytes);
  gpu().copy(b, a, bytes);
  gpu().synchronize();
  std::vector<float> t;
  for (int i = 0; i < 10; ++i) t.push_back(gpu().time_ms([&] { gpu().copy(b, a, bytes); }));
  std::sort(t.begin(), t.end());
  return 2.0 * double(bytes) / (double(t[5]) * 1e-3) / 1e9;
}

struct Result {
  std::string shape, variant;
  int bps, S;
  unsigned grid;
  bool launcher;  // the runtime's own launch shape
  double us, gbps;
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// --variants A,B: those only (every variant without it).
int compile(const std::string& dir, const std::string& arch, const std::string& variants) {
  namespace cc = smelt::cuda_compile;
  for (const auto& v : kVariants)
    for (const char* fam : {"linear", "moe"}) {
      if (!variants.empty() && ("," + variants + ",").find("," + std::string(v.name) + ",") == std::string::npos) continue;
      std::fprintf(stderr, "compiling %s for %s (%s)\n", fam, arch.c_str(), v.name);
      const cc::Image img = cc::compile(cc::kernel_source(fam), arch, defines(v));
      std::ofstream f(dir + "/" + v.name + "." + fam + ".cubin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(img.bytes.data()), std::streamsize(img.bytes.size()));
      if (!f) {
        std::fprintf(stderr, "cannot write %s/%s.%s.cubin\n", dir.c_str(), v.name, fam);
        return 1;
      }
    }
  return 0;
}

int run(const std::string& dir, int iters, const std::string& only, const std::string& variants, bool pdl,
        bool launcher_only) {
  if (!gpu().available()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const int sms = gpu().multiprocessors();
  const double copy = copy_gbps();
  std::printf("device %s, %d multiprocessors, copy bandwidth %.0f GB/s (cuMemcpyDtoD 1 GiB, read + write)\n",
              gpu().arch().c_str(), sms, copy);
  // The variants in --variants order (all of kVariants without it): the order they are timed in.
  std::vector<const Variant*> vars;
  std::vector<std::string> want;
  for (size_t p = 0; p < variants.size();) {
    const size_t q = std::min(variants.find(',', p), variants.size());
    want.push_back(variants.substr(p, q - p));
    p = q + 1;
  }
  if (want.empty())
    for (const auto& v : kVariants) want.push_back(v.name);
  for (const auto& name : want) {
    const Variant* v = nullptr;
    for (const auto& k : kVariants)
      if (name == k.name) v = &k;
    if (!v) {
      std::fprintf(stderr, "unknown variant %s\n", name.c_str());
      return 2;
    }
    const auto lin = read_file(dir + "/" + v->name + ".linear.cubin"), moe = read_file(dir + "/" + v->name + ".moe.cubin");
    if (lin.empty() || moe.empty()) {
      std::fprintf(stderr, "skipping %s: no cubins in %s\n", v->name, dir.c_str());
      continue;
    }
    gpu().load_image(std::string(v->name) + ".linear", lin);
    gpu().load_image(std::string(v->name) + ".moe", moe);
    vars.push_back(v);
  }
  gpu().set_sync(false);
  // --pdl: launches as in a decode step's graph (programmatic dependent launch), so a launch's weight prefetch
  // overlaps the previous one's tail; without it the launches are plain, back to back.
  if (pdl && !gpu().set_pdl(true)) std::printf("(programmatic dependent launch unavailable: plain launches)\n");
  std::vector<Result> results;
  std::mt19937 rng(11);
  std::printf("%-40s %-14s %3s %2s %5s %9s %8s %6s\n", "shape", "variant", "bps", "S", "grid", "us", "GB/s", "ratio");
  for (const auto& sh : kShapes) {
    if (!only.empty() && std::string(sh.name).find(only) == std::string::npos) continue;
    const int K = sh.K, N = sh.N;
    // Buffers: linear weights [N, K] + scales [N/32, K/32] in `copies` rotations; experts: kExperts (routed) or 1.
    const size_t wbytes = size_t(N) * K, sbytes = size_t((N + 31) / 32) * ((K + 31) / 32);
    std::vector<DevPtr> W, Sc;
    ExpertW ew{};
    DevPtr x = 0, h = 0, y = 0, idx = 0, rw = 0;
    double bytes = 0;  // read per launch (weights + scales)
    int copies = 1;
    if (sh.kind == kLinear) {
      copies = int(std::max<size_t>(2, (size_t(256) << 20) / (wbytes + sbytes) + 1));
      for (int c = 0; c < copies; ++c) {
        W.push_back(gpu().alloc(wbytes)), Sc.push_back(gpu().alloc(sbytes));
        fill(W.back(), wbytes, false, uint32_t(c)), fill(Sc.back(), sbytes, true, uint32_t(c));
      }
      bytes = double(wbytes + sbytes);
      std::vector<float> xv(static_cast<size_t>(K));
      std::normal_distribution<float> nd(0.f, 1.f);
      for (auto& v : xv) v = nd(rng);
      x = gpu().put(xv);
      y = gpu().alloc(size_t(N) * 4);
    } else {
      const bool fp4 = sh.kind == kRoutedExperts;
      // The shared expert rotates over 8 copies (ExpertW bases moved per launch), the routed ones over the sets of idx.
      const int E = fp4 ? kExperts : 8, D = K, F = N;
      // w1, s1, w2, s2, w3, s3 per expert (moe.cu eptr): w1 / w3 [F, D], w2 [D, F]; FP4 packed with [rows, cols/32]
      // scales, FP8 with 32 x 32 blocks.
      const size_t w13 = fp4 ? size_t(F) * D / 2 : size_t(F) * D, w2 = w13;
      const size_t s13 = fp4 ? size_t(F) * (D / 32) : size_t(F / 32) * (D / 32), s2 = fp4 ? size_t(D) * (F / 32) : s13;
      const size_t per[6] = {w13, s13, w2, s2, w13, s13};
      for (int j = 0; j < 6; ++j) {
        const DevPtr p = gpu().alloc(per[j] * size_t(E));
        fill(p, per[j] * size_t(E), j % 2 == 1, uint32_t(j));
        ew.base[j] = p, ew.stride[j] = int64_t(per[j]);
      }
      const int topk = fp4 ? kTopk : 1;
      bytes = double(topk) * double(per[0] + per[1] + per[4] + per[5]);  // up; down below
      std::vector<float> xv(static_cast<size_t>(D)), hv(static_cast<size_t>(topk) * F), rwv(static_cast<size_t>(topk), 0.3f);
      std::normal_distribution<float> nd(0.f, 1.f);
      for (auto& v : xv) v = nd(rng);
      for (auto& v : hv) v = 0.1f * nd(rng);
      x = gpu().put(xv), h = gpu().put(hv), rw = gpu().put(rwv);
      y = gpu().alloc(size_t(topk) * D * 4);
      if (fp4) {  // iters + a few sets of 6 distinct experts
        std::vector<int32_t> iv;
        for (int i = 0; i < iters + 8; ++i) {
          std::vector<int32_t> e(kExperts);
          for (int k = 0; k < kExperts; ++k) e[size_t(k)] = k;
          std::shuffle(e.begin(), e.end(), rng);
          iv.insert(iv.end(), e.begin(), e.begin() + kTopk);
        }
        idx = gpu().put(iv);
      }
      copies = fp4 ? iters + 8 : 8;
    }
    for (const Variant* v : vars) {
      const std::string lin = std::string(v->name) + ".linear", moe = std::string(v->name) + ".moe";
      // launches: (name, K, tiles, smem, launch(grid, S, i))
      struct L {
        std::string fam, fn;
        int K;
        int64_t tiles;
        unsigned smem;
        double bytes;
        int wr = 1;  // warps a tile: 4 for the wgmma kernels (a warpgroup; K split <= 2)
        bool wgl = false;  // the FP8 linear on wgmma (64-row tiles, K split 1 or even, across blocks past 2)
      };
      std::vector<L> ls;
      if (sh.kind == kLinear && v->wg) {  // ops_mma.cc's one-row FP8 linear on sm_90
        ls.push_back({lin, "smelt_gemv_fp8_wgmma", K, smelt::runtime::cuda::mma_wg_linear_tiles(N),
                      mma_smem(K, 1, v->ring), bytes, 4, true});
      } else if (sh.kind == kLinear) {
        ls.push_back({lin, "smelt_gemv_fp8_mma", K, (N + 16 * v->tpw - 1) / (16 * v->tpw), mma_smem(K, 1, v->ring), bytes});
      } else {
        const bool fp4 = sh.kind == kRoutedExperts;
        const int topk = fp4 ? kTopk : 1;
        const std::string f = fp4 ? "fp4" : "fp8";
        const double down = bytes / 2;  // w2 + s2 = half of w1 + s1 + w3 + s3
        if (fp4 && v->wg) {  // ops_mma.cc's wgmma launch: 64 x (1, down_tpw) rows a tile
          namespace rc = smelt::runtime::cuda;
          ls.push_back({moe, "smelt_moe_up_fp4_wgmma", K, rc::mma_wg_tiles(topk, N, 1), rc::mma_wg_up_smem(K, v->ring, v->fp4_pair_stages), bytes, 4});
          const int down_ring = v->full_ring ? v->ring : rc::mma_wg_ring_bytes(v->down_tpw, v->ring, v->fp4_pair_stages);
          ls.push_back({moe, "smelt_moe_down_fp4_wgmma", N, rc::mma_wg_tiles(topk, K, v->down_tpw),
                        mma_smem(N, topk, down_ring), down, 4});
        } else if (fp4 && v->wo) {  // ops_mma.cc try_experts_wo_ring: hi / lo rows, the down's slots a group spans
          namespace rc = smelt::runtime::cuda;
          const int tps = (K + 16 * v->down_tpw - 1) / (16 * v->down_tpw);
          ls.push_back({moe, "smelt_moe_up_fp4_wo_ring", K, int64_t(topk) * ((N + 15) / 16), mma_smem(K, 2, v->ring), bytes});
          ls.push_back({moe, "smelt_moe_down_fp4_wo_ring", N, int64_t(topk) * tps,
                        mma_smem(N, 2 * rc::mma_wo_down_span(topk, tps, 8), v->ring), down});  // the span at S 1 (the most)
        } else {
          ls.push_back({moe, "smelt_moe_up_" + f + "_mma", K, int64_t(topk) * ((N + 15) / 16), mma_smem(K, 1, v->ring), bytes});
          ls.push_back({moe, "smelt_moe_down_" + f + "_mma", N,
                        int64_t(topk) * ((K + 16 * v->down_tpw - 1) / (16 * v->down_tpw)), mma_smem(N, topk, v->ring), down});
        }
      }
      for (const L& l : ls) {
        namespace rc = smelt::runtime::cuda;
        const int occ = gpu().occupancy(l.fam, l.fn.c_str(), 256, l.smem);
        const int nb = l.K / 32;
        const int S_launcher = l.wgl     ? rc::mma_wg_linear_ksplit(l.tiles, nb, unsigned(2 * sms))
                               : l.wr == 4 ? rc::mma_wg_ksplit(l.tiles, nb, unsigned(2 * sms))
                                           : ksplit(l.tiles, nb, unsigned(2 * sms));
        // the wgmma linear's tile counts and partials (all zeros between launches), for its largest split
        const DevPtr zw = l.wgl ? gpu().alloc(rc::mma_wg_linear_zeroed_bytes(l.tiles, 16)) : 0;
        const DevPtr zp = zw + rc::mma_wg_linear_partials_offset(l.tiles);
        for (int bps = 1; bps <= std::min(occ, 4); ++bps)
          for (int S : {1, 2, 4, 6, 8, 16}) {
            if (nb / S < 4 || (!l.wgl && (S == 6 || S == 16 || S * l.wr > 8))) continue;
            if (launcher_only && !(bps == 2 && S == S_launcher)) continue;  // --launcher (profiling: ncu -s N -c 1)
            const int per_block = l.wgl ? 1 : 8 / l.wr / S;  // tiles a block group
            const int64_t groups = l.wgl ? rc::mma_wg_linear_groups(l.tiles, S) : (l.tiles + per_block - 1) / per_block;
            const unsigned grid = unsigned(std::min<int64_t>(groups, int64_t(bps) * sms));
            auto go = [&](int i) {
              const int c = i % copies;
              if (l.wgl) {
                const int blk = 32, round = 1;
                const float sa = 1.f;
                const DevPtr cnt = S > 2 ? zw : 0, xpart = S > 2 ? zp : 0;
                gpu().launch(l.fam, l.fn.c_str(), grid, 1, 1, 256, l.smem, x, y, W[size_t(c)], Sc[size_t(c)], K, N, blk,
                             sa, round, S, xpart, cnt);
              } else if (sh.kind == kLinear) {
                const int rows = 1, blk = 32, round = 1;
                const float sa = 1.f;
                gpu().launch(l.fam, l.fn.c_str(), grid, 1, 1, 256, l.smem, x, y, W[size_t(c)], Sc[size_t(c)], rows, K,
                             N, blk, sa, round, S);
              } else {
                const bool fp4 = sh.kind == kRoutedExperts;
                const bool wo = l.fn.find("_wo_ring") != std::string::npos;  // weight-only: no rw, rb, round
                const int topk = fp4 ? kTopk : 1, E = fp4 ? kExperts : 1, blk = 32, rb = wo ? 0 : 1, round = wo ? 0 : 1;
                const DevPtr ix = fp4 ? idx + DevPtr(c) * kTopk * 4 : 0;
                ExpertW w = ew;
                if (!fp4)
                  for (int j = 0; j < 6; ++j) w.base[j] += uint64_t(c) * uint64_t(w.stride[j]);
                const float limit = 10.f;
                if (l.fn.find("_up_") != std::string::npos)
                  gpu().launch(l.fam, l.fn.c_str(), grid, 1, 1, 256, l.smem, x, K, N, topk, ix, E, wo ? DevPtr(0) : rw, w,
                               blk, limit, rb, h, S);
                else
                  gpu().launch(l.fam, l.fn.c_str(), grid, 1, 1, 256, l.smem, h, K, N, topk, ix, E, w, blk, rb, round,
                               y, S);
              }
            };
            // Clocks: after the shape's buffers were filled from the host the GPU idled and its clock dropped; the
            // first variant measured then came out up to 25% slow (session 6). So the first launch shape of a shape
            // first runs >= 200 ms of launches, and every launch shape is timed 3 times (the median counts).
            if (v == vars.front() && &l == &ls.front() && bps == 1 && S == 1) {
              float spent = 0.f;
              for (int k = 0; spent < 200.f && k < 1000; ++k)
                spent += gpu().time_ms([&] {
                  for (int i = 0; i < 50; ++i) go(i);
                });
            }
            for (int i = 0; i < 3; ++i) go(i);
            float t3[3];
            for (float& t : t3)
              t = gpu().time_ms([&] {
                for (int i = 0; i < iters; ++i) go(i + 3);
              });
            std::sort(t3, t3 + 3);
            const double us = 1e3 * double(t3[1]) / iters, gbps = l.bytes / (us * 1e-6) / 1e9;
            const bool launcher = bps == 2 && S == S_launcher;
            const std::string name = std::string(sh.name) + (ls.size() > 1 ? (l.fn.find("_up_") != std::string::npos ? " up" : " down") : "");
            results.push_back({name, v->name, bps, S, grid, launcher, us, gbps});
            std::printf("%-40s %-14s %3d %2d %5u %9.2f %8.0f %6.3f%s\n", name.c_str(), v->name, bps, S, grid, us, gbps,
                        gbps / copy, launcher ? "  (launcher)" : "");
            std::fflush(stdout);
          }
      }
    }
  }
  // Summary: per shape the launcher's time with the base variant and the best (variant, launch); per variant the
  // step's GEMV time with the launcher's shapes and with the best launch of each shape.
  std::printf("\nbest per shape (ratio = achieved GB/s / copy GB/s):\n");
  std::vector<std::string> names;
  for (const auto& r : results)
    if (std::find(names.begin(), names.end(), r.shape) == names.end()) names.push_back(r.shape);
  auto per_step = [&](const std::string& name) {
    for (const auto& sh : kShapes)
      if (name.rfind(sh.name, 0) == 0) return sh.per_step;
    return 1;
  };
  for (const auto& n : names) {
    const Result* base = nullptr;
    const Result* best = nullptr;
    for (const auto& r : results) {
      if (r.shape != n) continue;
      if (r.launcher && r.variant == "base") base = &r;
      if (!best || r.us < best->us) best = &r;
    }
    std::printf("  %-40s launcher+base %8.2f us (%.3f) | best %-14s bps %d S %d: %8.2f us (%.3f)\n", n.c_str(),
                base ? base->us : 0.0, base ? base->gbps / copy : 0.0, best->variant.c_str(), best->bps, best->S,
                best->us, best->gbps / copy);
  }
  std::printf("\nper variant, the step's GEMVs (x launches per step): launcher shapes | best launch per shape\n");
  for (const Variant* v : vars) {
    double t_l = 0, t_b = 0;
    for (const auto& n : names) {
      double l = 0, b = 1e30;
      for (const auto& r : results) {
        if (r.shape != n || r.variant != v->name) continue;
        if (r.launcher) l = r.us;
        b = std::min(b, r.us);
      }
      t_l += l * per_step(n), t_b += b * per_step(n);
    }
    std::printf("  %-14s %9.1f us | %9.1f us\n", v->name, t_l, t_b);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s compile DIR [--arch sm_90] [--variants A,B] | run DIR [--iters N] [--only SHAPE] [--variants A,B] [--pdl] [--launcher]\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  std::string arch = "sm_90";
  int iters = 40;
  std::string only, variants;
  bool pdl = false, launcher_only = false;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--pdl" || a == "--launcher") {  // --launcher: only the runtime's own launch shape of each shape
      (a == "--pdl" ? pdl : launcher_only) = true;
      continue;
    }
    if (a == "--arch") arch = v;
    else if (a == "--iters") iters = std::max(1, std::atoi(v));
    else if (a == "--only") only = v;          // shapes whose name contains this
    else if (a == "--variants") variants = v;  // comma-separated variant names
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  try {
    if (mode == "compile") return compile(dir, arch, variants);
    if (mode == "run") return run(dir, iters, only, variants, pdl, launcher_only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
