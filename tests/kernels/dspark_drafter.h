// The DSpark drafter of a V4.1 golden case in kernel calls (reference: DSparkBlock, DSparkAttention,
// forward_spec): the stage blocks are the backbone block of v41_golden_test.cc's Model with the DSpark attention.
// Shared by tests/kernels/dspark_golden_test.cc (fed the golden's own streams) and tests/e2e_v41/dspark_test.cc
// (fed the runtime's captured streams, to check the plan's dspark_draft program against it).
#pragma once
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontends/safetensors.h"
#include "kernels/attention/reference.h"
#include "kernels/bf16.h"
#include "kernels/dspark/reference.h"
#include "kernels/hc/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/moe/reference.h"
#include "kernels/quant/reference.h"
#include "kernels/rms_norm/reference.h"
#include "kernels/rope/reference.h"
#include "tests/kernels/golden_tensors.h"

namespace smelt::kernels::dspark_testing {

using Vec = std::vector<float>;
using golden::Tensors;

struct Drafter {
  Tensors model;
  nlohmann::json cfg;
  int D, n, H, hd, rd, win, E, K, F, G, R, QL, V, B, rank, noise;
  float eps, hc_eps, route_scale, limit;
  std::vector<float> inv_freq;
  std::vector<Vec> rings;  // per stage [win, hd]

  // `dir`: a golden case directory (model.safetensors, inference_config.json).
  explicit Drafter(const std::string& dir) : model(dir + "/model.safetensors") {
    std::ifstream(dir + "/inference_config.json") >> cfg;
    D = cfg["dim"], n = cfg["hc_mult"], H = cfg["n_heads"], hd = cfg["head_dim"], rd = cfg["rope_head_dim"];
    win = cfg["window_size"], F = cfg["moe_inter_dim"], G = cfg["o_groups"], R = cfg["o_lora_rank"];
    E = cfg["dspark_n_routed_experts"], K = cfg["dspark_n_activated_experts"], QL = cfg["q_lora_rank"];
    V = cfg["vocab_size"], B = cfg["dspark_block_size"], rank = cfg["dspark_markov_rank"];
    noise = cfg["dspark_noise_token_id"];
    eps = cfg["norm_eps"], hc_eps = cfg["hc_eps"], route_scale = cfg["route_scale"], limit = cfg["swiglu_limit"];
    RopeParams p;  // ratio-0 layers: base theta, no YaRN
    p.rope_dim = rd, p.theta = cfg["rope_theta"];
    inv_freq = rope_inv_freq_v41(p);
    rings.assign(3, Vec(size_t(win) * hd, 0.f));
  }

  Vec w(const std::string& name) const { return model.floats(name); }
  QuantWeight qw(const std::string& prefix, WeightFormat f = WeightFormat::FP8_E4M3) const {
    return {model.raw(prefix + ".weight"), model.raw(prefix + ".scale"), f, 32};
  }
  Vec rms(const Vec& x, const std::string& weight, int cols) const {
    Vec wt = w(weight), y(x.size());
    rms_norm(x.data(), wt.data(), y.data(), int(x.size() / cols), cols, 1, eps);
    round_bf16_inplace(y.data(), y.size());
    return y;
  }
  Vec lin(const Vec& x, int in, int out, const QuantWeight& wt) const {
    const int T = int(x.size() / in);
    Vec y(size_t(T) * out);
    linear_quant(x.data(), T, in, out, wt, true, y.data(), true);
    return y;
  }
  void rope_bf16(Vec& x, int heads, int dim, int64_t p0, bool inverse) const {
    const int T = int(x.size() / (size_t(heads) * dim));
    std::vector<int64_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = p0 + t;
    rope(x.data(), T, heads, dim, rd, inv_freq.data(), pos.data(), inverse);
    round_bf16_inplace(x.data(), x.size());
  }
  // kv_norm(wkv(x)), RoPE'd at p0.., FP8 fake-quantized: the window K=V of stage s.
  Vec window_kv(int s, const Vec& x, int64_t p0) const {
    const std::string p = "mtp." + std::to_string(s) + ".attn.";
    Vec kv = rms(lin(x, D, hd, qw(p + "wkv")), p + "kv_norm.weight", hd);
    rope_bf16(kv, 1, hd, p0, false);
    quant::qdq_window_kv(kv.data(), int64_t(kv.size()));
    return kv;
  }

  // main_hidden [rows, targets*D] from the input streams [rows, n*D] of the target layers (in layer order):
  // the mean over the hc copies of each, side by side.
  Vec main_hidden(const std::vector<Vec>& target_inputs) const {
    const size_t k = target_inputs.size();
    const int rows = int(target_inputs.at(0).size() / (size_t(n) * D));
    Vec hidden(size_t(rows) * k * D), mean(size_t(rows) * D);
    for (size_t i = 0; i < k; ++i) {
      hc_mean(target_inputs[i].data(), rows, n, D, mean.data());
      for (int r = 0; r < rows; ++r)
        std::memcpy(&hidden[(size_t(r) * k + i) * D], &mean[size_t(r) * D], sizeof(float) * size_t(D));
    }
    return hidden;
  }

  // main_x of rows at p0.. written into every stage's ring (prefill: the whole prompt; decode: one row).
  void seed(const Vec& main_hidden, int64_t p0) {
    const int T = int(main_hidden.size() / (3 * size_t(D)));
    const Vec main_x = rms(lin(main_hidden, 3 * D, D, qw("mtp.0.main_proj")), "mtp.0.main_norm.weight", D);
    for (int s = 0; s < 3; ++s) {
      const Vec kv = window_kv(s, main_x, p0);
      window_kv_update(kv.data(), T, hd, p0, rings[s].data(), win);
    }
  }

  Vec attention(int s, const Vec& a, int64_t t) const {
    const std::string p = "mtp." + std::to_string(s) + ".attn.";
    const Vec qr = rms(lin(a, D, QL, qw(p + "wq_a")), p + "q_norm.weight", QL);
    Vec q = lin(qr, QL, H * hd, qw(p + "wq_b"));
    rope_bf16(q, H, hd, t + 1, false);
    const Vec kv = window_kv(s, a, t + 1);
    const Vec sink = w(p + "attn_sink");
    dspark::DraftAttentionArgs da;
    da.block = B, da.heads = H, da.head_dim = hd, da.t = t, da.scale = float(std::pow(double(hd), -0.5));
    da.q = q.data(), da.sink = sink.data(), da.ring = rings[s].data(), da.window = win, da.draft_kv = kv.data();
    Vec o(size_t(B) * H * hd);
    dspark::draft_attention(da, o.data());
    rope_bf16(o, H, hd, t + 1, true);
    Vec wo_a(size_t(G) * R * (H * hd / G));
    quant::dequant_fp8_weight(model.raw(p + "wo_a.weight"), model.raw(p + "wo_a.scale"), G * R, H * hd / G, 32,
                              wo_a.data());
    Vec oa(size_t(B) * G * R);
    grouped_linear(o.data(), wo_a.data(), oa.data(), B, G, H * hd / G, R);
    round_bf16_inplace(oa.data(), oa.size());
    return lin(oa, G * R, D, qw(p + "wo_b"));
  }

  Vec ffn(int s, const Vec& x) const {
    const std::string p = "mtp." + std::to_string(s) + ".ffn.";
    const Vec gate = w(p + "gate.weight"), bias = w(p + "gate.bias");
    MoeRouteArgs r;
    r.rows = B, r.dim = D, r.n_experts = E, r.topk = K, r.scoring = Scoring::SqrtSoftplus, r.norm_topk_prob = true;
    r.route_scale = route_scale, r.x = x.data(), r.gate = gate.data(), r.bias = bias.data();
    Vec rw(size_t(B) * K);
    std::vector<int32_t> ri(size_t(B) * K);
    moe_route(r, rw.data(), ri.data());
    std::vector<QuantWeight> w1, w2, w3;
    for (int e = 0; e < E; ++e) {
      const std::string ep = p + "experts." + std::to_string(e) + ".";
      w1.push_back(qw(ep + "w1", WeightFormat::FP4_E2M1));
      w2.push_back(qw(ep + "w2", WeightFormat::FP4_E2M1));
      w3.push_back(qw(ep + "w3", WeightFormat::FP4_E2M1));
    }
    Vec routed(size_t(B) * D), shared(size_t(B) * D);
    moe_experts_v41(x.data(), B, D, F, w1.data(), w2.data(), w3.data(), E, rw.data(), ri.data(), K, limit,
                    routed.data());
    swiglu_mlp_v41(x.data(), B, D, F, qw(p + "shared_experts.w1"), qw(p + "shared_experts.w2"),
                   qw(p + "shared_experts.w3"), limit, shared.data());
    for (size_t i = 0; i < routed.size(); ++i) routed[i] = round_bf16(routed[i] + shared[i]);
    return routed;
  }

  struct Mix {
    Vec pre, post, comb;
  };
  Mix mix(int s, const char* which, const Vec& X) const {
    const std::string p = "mtp." + std::to_string(s) + ".hc_" + which + "_";
    const Vec fn = w(p + "fn"), base = w(p + "base"), scale = w(p + "scale");
    Mix m{Vec(size_t(B) * n), Vec(size_t(B) * n), Vec(size_t(B) * n * n)};
    hc_mix_v41(X.data(), B, n, D, fn.data(), base.data(), scale.data(), int(cfg["hc_sinkhorn_iters"]), hc_eps, eps,
               m.pre.data(), m.post.data(), m.comb.data());
    return m;
  }
  Vec collapse(const Vec& X, const float* pre) const {
    Vec u(size_t(B) * D);
    hc_collapse(X.data(), pre, B, n, D, u.data());
    round_bf16_inplace(u.data(), u.size());
    return u;
  }
  Vec expand(const Vec& X, const Vec& y, const Mix& m) const {
    Vec out(X.size());
    hc_expand(X.data(), y.data(), m.post.data(), m.comb.data(), B, n, D, out.data());
    round_bf16_inplace(out.data(), out.size());
    return out;
  }

  struct Draft {
    std::vector<int32_t> ids;
    Vec logits, conf;
  };
  // One drafting step after the main model produced `input_id` at position t (its KV already in the rings).
  Draft draft(int32_t input_id, int64_t t) const {
    const Vec table = w("embed.weight");
    Vec X(size_t(B) * n * D);
    for (int i = 0; i < B; ++i) {
      const int32_t id = i == 0 ? input_id : noise;
      for (int c = 0; c < n; ++c) std::memcpy(&X[(size_t(i) * n + c) * D], &table[size_t(id) * D], 4 * D);
    }
    Vec pre;  // empty: the one-hot initial pre
    for (int s = 0; s < 3; ++s) {
      const std::string p = "mtp." + std::to_string(s) + ".";
      const Mix am = mix(s, "attn", X);
      const Vec a = rms(collapse(X, pre.empty() ? nullptr : pre.data()), p + "attn_norm.weight", D);
      const Vec X_mid = expand(X, attention(s, a, t), am);
      const Mix fm = mix(s, "ffn", X_mid);
      const Vec f = rms(collapse(X_mid, am.pre.data()), p + "ffn_norm.weight", D);
      X = expand(X_mid, ffn(s, f), fm);
      pre = fm.pre;
    }
    const Vec x = collapse(X, pre.data());
    const Vec h = rms(x, "mtp.2.norm.weight", D), head = w("head.weight");
    Draft d{std::vector<int32_t>(B), Vec(size_t(B) * V), Vec(B)};
    linear(h.data(), head.data(), d.logits.data(), B, D, V);
    const Vec me = w("mtp.2.markov_head.embed.weight"), mh = w("mtp.2.markov_head.head.weight");
    const Vec proj = w("mtp.2.confidence_head.proj.weight");
    dspark::DraftHeadArgs ha;
    ha.block = B, ha.vocab = V, ha.dim = D, ha.rank = rank;
    ha.markov_embed = me.data(), ha.markov_head = mh.data(), ha.proj = proj.data();
    dspark::draft_head(ha, input_id, x.data(), d.logits.data(), d.ids.data(), d.conf.data());
    return d;
  }
};

}  // namespace smelt::kernels::dspark_testing
