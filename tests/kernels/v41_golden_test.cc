// The V4.1 kernels against the official inference code's own numbers: the V4.1 goldens
// (SMELT_SHARED_DIR/goldens/v41/<case>, see their READMEs). Each block of the 69-token prefill is rebuilt
// from the kernels alone, fed the reference's input stream and `pre` (block i-1's stored output), and its
// output stream and `pre` are compared with the stored ones; the final collapse + norm + head is compared with
// the prompt logits. KV-source state (compressed pools, index keys, top-k, candidate blocks) flows between the
// blocks as in the reference, computed from our own source blocks.
//
// This is the oracle that pins the rounding points: a missed bf16 rounding, a wrong quantization step or a
// wrong order of operations shows up as a large share of differing elements (each one tried: every token of
// most blocks moves), while a different fp32 summation order (the reference's BLAS) leaves only rare one-ulp
// differences and, rarely, a token whose discrete choice (an FP8 scale, a top-k pick) went the other way.
// The Model below is also a reading aid for the runtime: the V4.1 block in kernel calls, rounding included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frontends/safetensors.h"
#include "kernels/attention/reference.h"
#include "kernels/bf16.h"
#include "kernels/compressor/reference.h"
#include "kernels/engram/reference.h"
#include "kernels/hc/reference.h"
#include "kernels/indexer/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/moe/reference.h"
#include "kernels/quant/reference.h"
#include "kernels/rms_norm/reference.h"
#include "kernels/rope/reference.h"
#include "tests/kernels/golden_tensors.h"

namespace smelt::kernels {
namespace {

namespace fs = std::filesystem;
using Vec = std::vector<float>;

const std::string kGoldens = std::string(SMELT_SHARED_DIR) + "/goldens/v41/";

// ---- the golden files -------------------------------------------------------------------------------------

using golden::Tensors;

// A golden case; tiny_backbone_selectall shares tiny_backbone's checkpoint.
std::string model_dir(const std::string& name) {
  return kGoldens + (name == "tiny_backbone_selectall" ? "tiny_backbone" : name);
}

struct Golden {
  std::string dir;
  Tensors model, inter, logits;
  nlohmann::json cfg, tokens;

  explicit Golden(const std::string& name)
      : dir(kGoldens + name),
        model(model_dir(name) + "/model.safetensors"),
        inter(dir + "/intermediates.safetensors"),
        logits(dir + "/logits.safetensors") {
    std::ifstream(dir + "/inference_config.json") >> cfg;
    std::ifstream(dir + "/tokens.json") >> tokens;
  }
  Vec w(const std::string& name) const { return model.floats(name); }
  const uint8_t* raw(const std::string& name) const { return model.raw(name); }
  QuantWeight qw(const std::string& prefix, WeightFormat f = WeightFormat::FP8_E4M3) const {
    return {raw(prefix + ".weight"), raw(prefix + ".scale"), f, 32};
  }
};

// ---- comparison -----------------------------------------------------------------------------------------------

// Distance in bf16 units in the last place of max(|want|, floor): the floor keeps elements near zero, whose own
// ulp is tiny, from counting a negligible absolute difference as a large one.
double bf16_ulps(float got, float want, double floor) {
  if (got == want) return 0;
  if (std::isnan(got)) return INFINITY;
  const double base = std::max(std::fabs(double(want)), floor);
  return std::fabs(double(got) - double(want)) / std::ldexp(1.0, std::ilogb(base) - 7);
}

// A residual stream [T, row] against the reference's, token by token (ulps against max(|want|, row RMS / 8)). A
// "jump" token has an element more than kJumpUlps away: a discrete choice (an FP8 scale, a top-k pick, a bf16
// tie) went the other way upstream, which moves the whole token. Elsewhere only rare last-place differences.
constexpr double kJumpUlps = 4;
struct StreamDiff {
  std::vector<int> jumps;
  size_t n = 0, differing = 0;  // elements, outside the jump tokens
  double max_ulps = 0;          // outside the jump tokens
};
StreamDiff compare_stream(const Vec& got, const Vec& want, int T) {
  StreamDiff d;
  const size_t row = want.size() / size_t(T);
  for (int t = 0; t < T; ++t) {
    double ms = 0;
    for (size_t i = size_t(t) * row; i < size_t(t + 1) * row; ++i) ms += double(want[i]) * want[i];
    const double floor = std::sqrt(ms / double(row)) / 8;
    double worst = 0;
    size_t differing = 0;
    for (size_t i = size_t(t) * row; i < size_t(t + 1) * row; ++i) {
      const double u = bf16_ulps(got[i], want[i], floor);
      worst = std::max(worst, u);
      differing += u != 0;
    }
    if (worst > kJumpUlps) {
      d.jumps.push_back(t);
      continue;
    }
    d.n += row, d.differing += differing, d.max_ulps = std::max(d.max_ulps, worst);
  }
  return d;
}

// max |got - want| over rows [T, row] not listed in `skip`.
double max_abs_diff(const Vec& got, const Vec& want, int T, const std::vector<int>& skip = {}) {
  const size_t row = want.size() / size_t(T);
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    if (std::find(skip.begin(), skip.end(), t) != skip.end()) continue;
    for (size_t i = size_t(t) * row; i < size_t(t + 1) * row; ++i) {
      const double e = std::fabs(double(got[i]) - double(want[i]));
      worst = std::max(worst, std::isnan(e) ? INFINITY : e);
    }
  }
  return worst;
}

// ---- the model, block by block ----------------------------------------------------------------------------------

struct Model {
  const Golden& g;
  int T = 0, D = 0, n = 0, H = 0, hd = 0, rd = 0, win = 0, HI = 0, dI = 0, topk = 0, E = 0, K = 0, F = 0;
  int G = 0, R = 0, CB = 0, CBS = 0;
  float eps = 0, hc_eps = 0, route_scale = 0, limit = 0;
  std::vector<int> ratios, kv_src, idx_src, engram_layers;
  int cand_src = -1;
  std::vector<int32_t> ids;
  std::vector<std::vector<int32_t>> hashes;  // per engram layer, [T, cols]

  // Shared state handed down the stack (the reference's SharedAttentionRuntime).
  Vec pool, index_pool;
  std::vector<int32_t> topk_idx, candidates;

  explicit Model(const Golden& golden) : g(golden) {
    const auto& c = g.cfg;
    D = c["dim"], n = c["hc_mult"], H = c["n_heads"], hd = c["head_dim"], rd = c["rope_head_dim"];
    win = c["window_size"], HI = c["index_n_heads"], dI = c["index_head_dim"], topk = c["index_topk"];
    E = c["n_routed_experts"], K = c["n_activated_experts"], F = c["moe_inter_dim"];
    G = c["o_groups"], R = c["o_lora_rank"], CB = c["candidate_topk_blocks"], CBS = c["candidate_block_size"];
    eps = c["norm_eps"], hc_eps = c["hc_eps"], route_scale = c["route_scale"], limit = c["swiglu_limit"];
    ratios = c["compress_ratios"].get<std::vector<int>>();
    kv_src = c["kv_source_layers"].get<std::vector<int>>();
    idx_src = c["index_source_layers"].get<std::vector<int>>();
    engram_layers = c["engram_layer_ids"].get<std::vector<int>>();
    cand_src = c["candidate_source_layer"];
    ids = g.tokens["prompt_ids"].get<std::vector<int32_t>>();
    T = int(ids.size());
    hashes.resize(engram_layers.size());
    if (engram_layers.empty()) return;
    const auto& h = g.tokens["engram"]["prompt_hash_ids"];  // [T, layers, cols], already offset
    for (int t = 0; t < T; ++t)
      for (size_t l = 0; l < engram_layers.size(); ++l)
        for (auto& v : h[t][l]) hashes[l].push_back(v.get<int32_t>());
  }

  static bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

  std::vector<float> inv_freq(int L) const {
    RopeParams p;
    p.rope_dim = rd;
    if (ratios[L]) {
      p.theta = g.cfg["compress_rope_theta"];
      p.yarn_factor = g.cfg["rope_factor"];
      p.yarn_beta_fast = g.cfg["beta_fast"];
      p.yarn_beta_slow = g.cfg["beta_slow"];
      p.yarn_original_max_pos = g.cfg["original_seq_len"];
    } else {
      p.theta = g.cfg["rope_theta"];
    }
    return rope_inv_freq_v41(p);
  }

  Vec embed_stream() const {
    const Vec table = g.w("embed.weight");
    Vec X(size_t(T) * n * D);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < n; ++c) std::memcpy(&X[(size_t(t) * n + c) * D], &table[size_t(ids[t]) * D], 4 * D);
    return X;
  }

  Vec rms(const Vec& x, const std::string& weight, int cols) const {
    Vec w = g.w(weight), y(x.size());
    rms_norm(x.data(), w.data(), y.data(), int(x.size() / cols), cols, 1, eps);
    round_bf16_inplace(y.data(), y.size());
    return y;
  }
  Vec lin(const Vec& x, int in, int out, const QuantWeight& w) const {
    Vec y(size_t(T) * out);
    linear_quant(x.data(), T, in, out, w, true, y.data(), true);
    return y;
  }
  void rope_bf16(Vec& x, int heads, int dim, const std::vector<float>& f, bool inverse) const {
    std::vector<int64_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = t;
    rope(x.data(), T, heads, dim, rd, f.data(), pos.data(), inverse);
    round_bf16_inplace(x.data(), x.size());
  }

  // Attention sublayer of layer L on the normed input a [T, D]; returns its output [T, D].
  Vec attention(int L, const Vec& a) {
    const std::string p = "layers." + std::to_string(L) + ".attn.";
    const auto f = inv_freq(L);
    const int QL = g.cfg["q_lora_rank"];
    const Vec qr = rms(lin(a, D, QL, g.qw(p + "wq_a")), p + "q_norm.weight", QL);
    Vec q = lin(qr, QL, H * hd, g.qw(p + "wq_b"));
    rope_bf16(q, H, hd, f, false);
    Vec kv = rms(lin(a, D, hd, g.qw(p + "wkv")), p + "kv_norm.weight", hd);
    rope_bf16(kv, 1, hd, f, false);
    quant::qdq_window_kv(kv.data(), int64_t(kv.size()));

    const int ratio = ratios[L];
    if (ratio) {
      if (has(kv_src, L)) {
        const Vec wkv = g.w(p + "compressor.wkv.weight"), norm = g.w(p + "compressor.norm.weight");
        const Vec wk = g.w(p + "indexer.wk.weight"), k_norm = g.w(p + "indexer.k_norm.weight");
        Vec wgate;
        KvCompressorV41Args c;
        c.ratio = ratio, c.head_dim = hd, c.index_head_dim = dI, c.rope_dim = rd, c.in_dim = D;
        c.wkv = wkv.data(), c.norm = norm.data(), c.wk = wk.data(), c.k_norm = k_norm.data(), c.eps = eps;
        if (ratio > 1) wgate = g.w(p + "compressor.wgate.weight"), c.wgate = wgate.data();
        c.inv_freq = f.data();
        const int64_t cap = 128 / ratio;
        pool.assign(size_t(cap) * hd, 0.f);
        index_pool.assign(size_t(cap) * dI, 0.f);
        Vec ring(size_t(ratio) * 2 * hd);
        kv_compressor_v41(c, a.data(), T, 0, ring.data(), pool.data(), index_pool.data(), cap);
      }
      if (has(idx_src, L)) {
        Vec qi = lin(qr, QL, HI * dI, g.qw(p + "indexer.wq_b"));
        rope_bf16(qi, HI, dI, f, false);
        quant::qdq_index(qi.data(), int64_t(qi.size()));
        const Vec wp = g.w(p + "indexer.weights_proj.weight");
        Vec wi(size_t(T) * HI);
        linear(a.data(), wp.data(), wi.data(), T, D, HI);
        const float scale = float(std::pow(double(dI), -0.5) * std::pow(double(HI), -0.5));
        for (auto& v : wi) v = round_bf16(round_bf16(v) * scale);
        IndexerV41Args ia;
        ia.rows = T, ia.heads = HI, ia.head_dim = dI, ia.ratio = ratio, ia.topk = topk, ia.p0 = 0;
        ia.q = qi.data(), ia.w = wi.data(), ia.keys = index_pool.data();
        std::vector<int32_t> cand_out;
        if (cand_src >= 0 && L >= cand_src) {
          ia.candidate_blocks = CB, ia.candidate_block_size = CBS;
          ia.is_candidate_source = L == cand_src;
          if (L == cand_src)
            cand_out.resize(size_t(T) * CB);
          else
            ia.cand_in = candidates.data();
        }
        topk_idx.assign(size_t(T) * topk, -1);
        indexer_v41(ia, topk_idx.data(), cand_out.empty() ? nullptr : cand_out.data());
        if (L == cand_src) candidates = cand_out;
      }
    }

    const Vec sink = g.w(p + "attn_sink");
    SparseAttentionArgs s;
    s.rows = T, s.heads = H, s.head_dim = hd, s.p0 = 0, s.scale = float(std::pow(double(hd), -0.5));
    s.q = q.data(), s.sink = sink.data(), s.chunk_kv = kv.data(), s.window = win;
    if (ratio) s.ratio = ratio, s.pool = pool.data(), s.idx = topk_idx.data(), s.k = topk;
    s.numerics_v41 = true;
    Vec o(size_t(T) * H * hd);
    sparse_attention(s, o.data());
    rope_bf16(o, H, hd, f, true);

    // wo_a: FP8 in the checkpoint, dequantized to bf16 at load (exact), a bf16 grouped einsum.
    Vec wo_a(size_t(G) * R * (H * hd / G));
    quant::dequant_fp8_weight(g.raw(p + "wo_a.weight"), g.raw(p + "wo_a.scale"), G * R, H * hd / G, 32, wo_a.data());
    Vec oa(size_t(T) * G * R);
    grouped_linear(o.data(), wo_a.data(), oa.data(), T, G, H * hd / G, R);
    round_bf16_inplace(oa.data(), oa.size());
    return lin(oa, G * R, D, g.qw(p + "wo_b"));
  }

  Vec ffn(int L, const Vec& x) const {
    const std::string p = "layers." + std::to_string(L) + ".ffn.";
    const Vec gate = g.w(p + "gate.weight"), bias = g.w(p + "gate.bias");
    MoeRouteArgs r;
    r.rows = T, r.dim = D, r.n_experts = E, r.topk = K, r.scoring = Scoring::SqrtSoftplus, r.norm_topk_prob = true;
    r.route_scale = route_scale, r.x = x.data(), r.gate = gate.data(), r.bias = bias.data();
    Vec rw(size_t(T) * K);
    std::vector<int32_t> ri(size_t(T) * K);
    moe_route(r, rw.data(), ri.data());
    std::vector<QuantWeight> w1, w2, w3;
    for (int e = 0; e < E; ++e) {
      const std::string ep = p + "experts." + std::to_string(e) + ".";
      w1.push_back(g.qw(ep + "w1", WeightFormat::FP4_E2M1));
      w2.push_back(g.qw(ep + "w2", WeightFormat::FP4_E2M1));
      w3.push_back(g.qw(ep + "w3", WeightFormat::FP4_E2M1));
    }
    Vec routed(size_t(T) * D), shared(size_t(T) * D);
    moe_experts_v41(x.data(), T, D, F, w1.data(), w2.data(), w3.data(), E, rw.data(), ri.data(), K, limit,
                    routed.data());
    swiglu_mlp_v41(x.data(), T, D, F, g.qw(p + "shared_experts.w1"), g.qw(p + "shared_experts.w2"),
                   g.qw(p + "shared_experts.w3"), limit, shared.data());
    for (size_t i = 0; i < routed.size(); ++i) routed[i] = round_bf16(routed[i] + shared[i]);
    return routed;
  }

  struct Mix {
    Vec pre, post, comb;
  };
  Mix mix(int L, const char* which, const Vec& X) const {
    const std::string p = "layers." + std::to_string(L) + ".hc_" + which + "_";
    const Vec fn = g.w(p + "fn"), base = g.w(p + "base"), scale = g.w(p + "scale");
    Mix m{Vec(size_t(T) * n), Vec(size_t(T) * n), Vec(size_t(T) * n * n)};
    hc_mix_v41(X.data(), T, n, D, fn.data(), base.data(), scale.data(), int(g.cfg["hc_sinkhorn_iters"]), hc_eps, eps,
               m.pre.data(), m.post.data(), m.comb.data());
    return m;
  }
  Vec collapse(const Vec& X, const float* pre) const {
    Vec u(size_t(T) * D);
    hc_collapse(X.data(), pre, T, n, D, u.data());
    round_bf16_inplace(u.data(), u.size());
    return u;
  }
  Vec expand(const Vec& X, const Vec& y, const Mix& m) const {
    Vec out(X.size());
    hc_expand(X.data(), y.data(), m.post.data(), m.comb.data(), T, n, D, out.data());
    round_bf16_inplace(out.data(), out.size());
    return out;
  }

  Vec engram(int L, const Vec& X) const {
    const size_t li = size_t(std::find(engram_layers.begin(), engram_layers.end(), L) - engram_layers.begin());
    const std::string p = "layers." + std::to_string(L) + ".engram.";
    const Vec qw = g.w(p + "q_weight"), kw = g.w(p + "k_weight");
    engram::EngramArgs a;
    a.rows = T, a.hc_mult = n, a.dim = D, a.head_dim = g.cfg["engram_head_dim"];
    a.cols = (int(g.cfg["engram_max_ngram_size"]) - 1) * int(g.cfg["engram_n_heads"]);
    a.eps = eps;
    a.table = g.raw(p + "embed.weight"), a.table_scale = g.raw(p + "embed.scale");
    a.table_rows = g.model.info(p + "embed.weight").shape[0];
    a.wkv = g.raw(p + "wkv.weight"), a.wkv_scale = g.raw(p + "wkv.scale");
    a.q_weight = qw.data(), a.k_weight = kw.data(), a.hashes = hashes[li].data();
    Vec out(X.size());
    engram::engram_forward(a, X.data(), out.data());
    return out;
  }

  // Block L on the stream X entering it (Engram not yet applied) with the incoming pre (nullptr = one-hot).
  std::pair<Vec, Vec> block(int L, Vec X, const float* pre_in) {
    if (has(engram_layers, L)) X = engram(L, X);
    const Mix am = mix(L, "attn", X);
    const Vec a = rms(collapse(X, pre_in), "layers." + std::to_string(L) + ".attn_norm.weight", D);
    const Vec X_mid = expand(X, attention(L, a), am);
    const Mix fm = mix(L, "ffn", X_mid);
    const Vec f = rms(collapse(X_mid, am.pre.data()), "layers." + std::to_string(L) + ".ffn_norm.weight", D);
    return {expand(X_mid, ffn(L, f), fm), fm.pre};
  }
};

bool have_golden(const std::string& name) { return fs::exists(model_dir(name) + "/model.safetensors"); }

TEST(V41Golden, EngramOnLayer1Input) {
  if (!have_golden("tiny_full")) GTEST_SKIP() << "no goldens under " << kGoldens;
  Golden g("tiny_full");
  Model m(g);
  // The stream entering block 1 is block 0's stored output; Engram(layer 1) runs on it first. Its output is not
  // stored, so check the formula's invariants on real data here and the end result through block 1 below.
  const Vec X = g.inter.floats("prefill.block0.stream");
  const Vec out = m.engram(1, X);
  size_t changed = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], round_bf16(out[i])) << "engram output must be bf16 at " << i;
    changed += out[i] != X[i];
  }
  EXPECT_GT(changed, out.size() / 2) << "the gated value should move most elements";
}

// Bounds, from what the README promises of an implementation that reproduces every quantization step and the tie
// rule ("bit for bit or within a few bf16 units in the last place in most elements ... occasionally a discrete
// choice near a tie flips"), with the numbers this implementation reaches on tiny_full noted beside each:
constexpr size_t kMaxJumpTokens = 3;         // per block (seen: at most 2)
constexpr double kMaxDifferingShare = 1e-3;  // elements off at all, outside jumps (seen: <= 4e-4)
constexpr double kMaxOtherUlps = kJumpUlps;  // (seen: <= 2)
constexpr double kMaxPreDiff = 5e-4;         // `pre` outside jump tokens (seen: <= 1.6e-4; O(1) values)
constexpr double kMaxLogitDiff = 1e-5;       // fp32 head, BLAS order (seen: 2.9e-6; the reference's own 9.5e-7)

class V41GoldenCase : public ::testing::TestWithParam<const char*> {};

TEST_P(V41GoldenCase, PrefillBlocksFromReferenceInputs) {
  if (!have_golden(GetParam())) GTEST_SKIP() << "no goldens under " << kGoldens;
  Golden g(GetParam());
  Model m(g);
  const int L_n = g.cfg["n_layers"];
  Vec X = m.embed_stream(), pre;
  for (int L = 0; L < L_n; ++L) {
    auto [out, out_pre] = m.block(L, X, L == 0 ? nullptr : pre.data());
    const std::string k = "prefill.block" + std::to_string(L);
    const Vec want = g.inter.floats(k + ".stream"), want_pre = g.inter.floats(k + ".pre_mix");
    const StreamDiff ds = compare_stream(out, want, m.T);
    const double dp = max_abs_diff(out_pre, want_pre, m.T, ds.jumps);
    std::printf("block %d: %zu jump token(s)", L, ds.jumps.size());
    for (int t : ds.jumps) std::printf(" %d", t);
    std::printf("; elsewhere %zu/%zu elements differ (max %.0f bf16 ulps); pre max diff %.3g\n", ds.differing, ds.n,
                ds.max_ulps, dp);
    EXPECT_LE(ds.jumps.size(), kMaxJumpTokens) << k;
    EXPECT_LE(double(ds.differing), kMaxDifferingShare * double(ds.n)) << k;
    EXPECT_LE(ds.max_ulps, kMaxOtherUlps) << k;
    EXPECT_LE(dp, kMaxPreDiff) << k;
    // Next block: the reference's own input, so a difference here never compounds.
    X = want;
    pre = want_pre;
  }
  // Final collapse with block 7's pre, norm, fp32 head: the prompt logits.
  const Vec h = m.rms(m.collapse(X, pre.data()), "norm.weight", m.D);
  const Vec head = g.w("head.weight");
  const int V = g.cfg["vocab_size"];
  Vec logits(size_t(m.T) * V);
  linear(h.data(), head.data(), logits.data(), m.T, m.D, V);
  const double dl = max_abs_diff(logits, g.logits.floats("prompt_logits"), m.T);
  std::printf("logits from the reference's last stream and pre: max diff %.3g\n", dl);
  EXPECT_LE(dl, kMaxLogitDiff);
}

TEST(V41Golden, DsparkTargetCaptureIsTheMeanOverCopies) {
  if (!have_golden("tiny_full")) GTEST_SKIP() << "no goldens under " << kGoldens;
  Golden g("tiny_full");
  Model m(g);
  // main_hidden = the mean over copies of the inputs of layers 5, 6, 7 (no Engram there): blocks 4, 5, 6's outputs.
  const Vec want = g.inter.floats("prefill.main_hidden");
  const auto targets = g.cfg["dspark_target_layer_ids"].get<std::vector<int>>();
  ASSERT_EQ(want.size(), size_t(m.T) * m.D * targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const Vec X = g.inter.floats("prefill.block" + std::to_string(targets[i] - 1) + ".stream");
    Vec mean(size_t(m.T) * m.D);
    hc_mean(X.data(), m.T, m.n, m.D, mean.data());
    for (int t = 0; t < m.T; ++t)
      for (int d = 0; d < m.D; ++d)
        ASSERT_EQ(mean[size_t(t) * m.D + d], want[(size_t(t) * targets.size() + i) * m.D + d]) << i << " " << t << " " << d;
  }
}

// tiny_backbone_selectall: index top-k 128 >= every visible entry, so window + compressed lists span up to three
// 64-index softmax blocks.
INSTANTIATE_TEST_SUITE_P(Cases, V41GoldenCase, ::testing::Values("tiny_full", "tiny_backbone", "tiny_backbone_selectall"));

}  // namespace
}  // namespace smelt::kernels
