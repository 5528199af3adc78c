// A two-layer DeepSeek-V4-shaped plan with every op of docs/ops.md (hyper-connections, CSA with indexer,
// HCA, window attention with sinks, YaRN compress RoPE, grouped wo_a, score- and hash-routed MoE, shared
// expert), built as the importer would build it, plus a float64 forward over the whole sequence written
// from docs/ops.md and the transformers semantics. Nothing here calls the runtime or the kernels.
#pragma once
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "tests/runtime/plan_builder.h"

namespace smelt::runtime::testing {

using Vd = std::vector<double>;

struct V4Tiny {
  // Shapes: small, but every dimension distinct where it matters so that swapped operands fail.
  static constexpr int V = 20, D = 16, n = 2, H = 2, hd = 8, rope_dim = 4, window = 6, G = 2, R = 4;
  static constexpr int HI = 2, dI = 8, index_topk = 2, E = 4, topk = 2, Fi = 6, Fs = 10;
  static constexpr double eps = 1e-6, hc_eps = 1e-6, theta = 10000.0, ctheta = 160000.0;
  static constexpr double yarn_factor = 4.0, yarn_fast = 32.0, yarn_slow = 1.0, yarn_orig = 16.0;
  static constexpr double swiglu_limit = 0.3, route_scale = 1.5;
  static constexpr int iters = 3;

  struct Layer {
    int ratio;
    bool overlap, indexer, hash;
    std::string scoring;
    int attn_fn, attn_base, attn_scale, attn_norm, wq, wkv, kv_norm, sink, wo_a, wo_b;
    int c_wkv, c_wgate, c_ape, c_norm;
    int i_wkv = -1, i_wgate = -1, i_ape = -1, i_norm = -1, wq_i = -1, wproj = -1;
    int ffn_fn, ffn_base, ffn_scale, ffn_norm, gate, bias = -1, tid2eid = -1, s_w1, s_w2, s_w3;
    std::vector<int> experts;  // w1, w2, w3 per expert
  };

  PlanBuilder b;
  std::vector<Layer> layers;
  int embed, head_fn, head_base, head_scale, norm, head;

  explicit V4Tiny(int max_rows = 48, int max_seq_len = 64) {
    b.max_rows = max_rows;
    b.max_seq_len = max_seq_len;
    Uniform u(2024);
    auto mat = [&](const std::string& name, int rows, int cols, double scale = 1.0) {
      double a = scale / std::sqrt(double(cols));
      return b.weight(name, {rows, cols}, u.vec(size_t(rows) * cols, -a, a));
    };
    auto vec = [&](const std::string& name, int len, double lo, double hi) { return b.weight(name, {len}, u.vec(len, lo, hi)); };

    embed = b.weight("embed.weight", {V, D}, u.vec(V * D, -1, 1), DType::BF16);
    int mix = (2 + n) * n;
    for (int L = 0; L < 2; ++L) {
      Layer l;
      std::string p = "layers." + std::to_string(L) + ".";
      l.ratio = L == 0 ? 4 : 8;
      l.overlap = L == 0;
      l.indexer = L == 0;
      l.hash = L == 1;
      l.scoring = L == 0 ? "sqrtsoftplus" : "sigmoid";
      l.attn_fn = mat(p + "hc_attn_fn", mix, n * D, 2.0);
      l.attn_base = vec(p + "hc_attn_base", mix, -0.5, 0.5);
      l.attn_scale = vec(p + "hc_attn_scale", 3, 0.5, 1.5);
      l.attn_norm = vec(p + "attn_norm.weight", D, 0.5, 1.5);
      l.wq = mat(p + "attn.wq.weight", H * hd, D);
      l.wkv = mat(p + "attn.wkv.weight", hd, D);
      l.kv_norm = vec(p + "attn.kv_norm.weight", hd, 0.5, 1.5);
      l.sink = vec(p + "attn.attn_sink", H, -1.0, 1.0);
      l.wo_a = mat(p + "attn.wo_a.weight", G * R, H * hd / G);
      l.wo_b = mat(p + "attn.wo_b.weight", D, G * R);
      int c = l.overlap ? 2 : 1;
      l.c_wkv = mat(p + "attn.compressor.wkv.weight", c * hd, D);
      l.c_wgate = mat(p + "attn.compressor.wgate.weight", c * hd, D, 3.0);
      l.c_ape = b.weight(p + "attn.compressor.ape", {l.ratio, c * hd}, u.vec(size_t(l.ratio) * c * hd, -1, 1));
      l.c_norm = vec(p + "attn.compressor.norm.weight", hd, 0.5, 1.5);
      if (l.indexer) {
        l.i_wkv = mat(p + "attn.indexer.compressor.wkv.weight", 2 * dI, D);
        l.i_wgate = mat(p + "attn.indexer.compressor.wgate.weight", 2 * dI, D, 3.0);
        l.i_ape = b.weight(p + "attn.indexer.compressor.ape", {l.ratio, 2 * dI}, u.vec(size_t(l.ratio) * 2 * dI, -1, 1));
        l.i_norm = vec(p + "attn.indexer.compressor.norm.weight", dI, 0.5, 1.5);
        l.wq_i = mat(p + "attn.indexer.wq_b.weight", HI * dI, D, 3.0);
        l.wproj = mat(p + "attn.indexer.weights_proj.weight", HI, D);
      }
      l.ffn_fn = mat(p + "hc_ffn_fn", mix, n * D, 2.0);
      l.ffn_base = vec(p + "hc_ffn_base", mix, -0.5, 0.5);
      l.ffn_scale = vec(p + "hc_ffn_scale", 3, 0.5, 1.5);
      l.ffn_norm = vec(p + "ffn_norm.weight", D, 0.5, 1.5);
      l.gate = mat(p + "ffn.gate.weight", E, D, 3.0);
      if (l.hash) {
        std::vector<int64_t> t(V * topk);
        for (int v = 0; v < V; ++v)
          for (int k = 0; k < topk; ++k) t[v * topk + k] = (v * 3 + k * 1) % E;
        l.tid2eid = b.int_weight(p + "ffn.gate.tid2eid", {V, topk}, t);
      } else {
        l.bias = vec(p + "ffn.gate.bias", E, -0.3, 0.3);
      }
      for (int e = 0; e < E; ++e) {
        std::string q = p + "ffn.experts." + std::to_string(e) + ".";
        l.experts.push_back(mat(q + "w1.weight", Fi, D, 2.0));
        l.experts.push_back(mat(q + "w2.weight", D, Fi));
        l.experts.push_back(mat(q + "w3.weight", Fi, D, 2.0));
      }
      l.s_w1 = mat(p + "ffn.shared_experts.w1.weight", Fs, D, 2.0);
      l.s_w2 = mat(p + "ffn.shared_experts.w2.weight", D, Fs);
      l.s_w3 = mat(p + "ffn.shared_experts.w3.weight", Fs, D, 2.0);
      layers.push_back(l);
    }
    head_fn = mat("hc_head_fn", n, n * D, 2.0);
    head_base = vec("hc_head_base", n, -0.5, 0.5);
    head_scale = vec("hc_head_scale", 1, 0.5, 1.5);
    norm = vec("norm.weight", D, 0.5, 1.5);
    head = mat("head.weight", V, D);
    build_ops();
  }

  // ---- the plan, in the importer's order (docs/ops.md) ----------------------------------------------------

  std::vector<AttrArg> rope_attrs(int heads, int head_dim, bool compress, bool inverse) const {
    std::vector<AttrArg> a = {I("heads", heads), I("head_dim", head_dim), I("rope_dim", rope_dim),
                              F("theta", compress ? ctheta : theta)};
    if (compress)
      for (AttrArg x : {F("yarn_factor", yarn_factor), F("yarn_beta_fast", yarn_fast), F("yarn_beta_slow", yarn_slow),
                        I("yarn_original_max_pos", int64_t(yarn_orig))})
        a.push_back(x);
    if (inverse) a.push_back(I("inverse", 1));
    return a;
  }

  void build_ops() {
    b.token_ids = b.buffer("ids", 1, plan::DType::I32);
    int x = b.buffer("x", D);
    b.op({"smelt.embedding", -1, {b.token_ids}, {x}, {embed}, {}, {}});
    int X = b.buffer("X", n * D);
    b.op({"smelt.hc_init", -1, {x}, {X}, {}, {}, {I("hc_mult", n)}});
    auto hc_attrs = std::vector<AttrArg>{I("hc_mult", n), I("sinkhorn_iters", iters), F("hc_eps", hc_eps), F("norm_eps", eps)};
    for (int L = 0; L < 2; ++L) {
      const Layer& l = layers[L];
      std::string p = "l" + std::to_string(L) + ".";
      int ws = b.state(p + "window", "window_ring", L, {window, hd});
      int c = l.overlap ? 2 : 1;
      int cring = b.state(p + "compressor", "compressor_ring", L, {2 * l.ratio, 2 * c * hd});
      int pool = b.state(p + "pool", "compressed_pool", L, {b.max_seq_len / l.ratio, hd});
      // attention
      int pre = b.buffer(p + "pre", n), post = b.buffer(p + "post", n), comb = b.buffer(p + "comb", n * n);
      b.op({"smelt.hc_mix", L, {X}, {pre, post, comb}, {l.attn_fn, l.attn_base, l.attn_scale}, {}, hc_attrs});
      int u = b.buffer(p + "u", D), a = b.buffer(p + "a", D);
      b.op({"smelt.hc_collapse", L, {X, pre}, {u}, {}, {}, {I("hc_mult", n)}});
      b.op({"smelt.rms_norm", L, {u}, {a}, {l.attn_norm}, {}, {F("eps", eps)}});
      int q = b.buffer(p + "q", H * hd);
      b.op({"smelt.linear", L, {a}, {q}, {l.wq}, {}, {}});
      b.op({"smelt.rms_norm", L, {q}, {q}, {-1}, {}, {F("eps", eps), I("groups", H)}});  // in place
      b.op({"smelt.rope", L, {q}, {q}, {}, {}, rope_attrs(H, hd, false, false)});
      int kv0 = b.buffer(p + "kv0", hd), kv1 = b.buffer(p + "kv1", hd), kv = b.buffer(p + "kv", hd);
      b.op({"smelt.linear", L, {a}, {kv0}, {l.wkv}, {}, {}});
      b.op({"smelt.rms_norm", L, {kv0}, {kv1}, {l.kv_norm}, {}, {F("eps", eps)}});
      b.op({"smelt.rope", L, {kv1}, {kv}, {}, {}, rope_attrs(1, hd, false, false)});  // out of place
      auto comp_attrs = [&](int head_dim, bool overlap) {
        std::vector<AttrArg> at = {I("ratio", l.ratio), I("head_dim", head_dim), F("eps", eps)};
        if (overlap) at.push_back(I("overlap", 1));
        for (const AttrArg& r : rope_attrs(1, head_dim, true, false))
          if (r.name != "heads" && r.name != "head_dim") at.push_back(r);
        return at;
      };
      b.op({"smelt.compressor", L, {a}, {}, {l.c_wkv, l.c_wgate, l.c_ape, l.c_norm}, {cring, pool}, comp_attrs(hd, l.overlap)});
      int idx = -1;
      if (l.indexer) {
        int iring = b.state(p + "index_compressor", "compressor_ring", L, {2 * l.ratio, 4 * dI});
        int ipool = b.state(p + "index_pool", "index_pool", L, {b.max_seq_len / l.ratio, dI});
        b.op({"smelt.compressor", L, {a}, {}, {l.i_wkv, l.i_wgate, l.i_ape, l.i_norm}, {iring, ipool}, comp_attrs(dI, true)});
        int qi = b.buffer(p + "qi", HI * dI), wi = b.buffer(p + "wi", HI);
        b.op({"smelt.linear", L, {a}, {qi}, {l.wq_i}, {}, {}});
        b.op({"smelt.rope", L, {qi}, {qi}, {}, {}, rope_attrs(HI, dI, true, false)});
        b.op({"smelt.linear", L, {a}, {wi}, {l.wproj}, {}, {}});
        idx = b.buffer(p + "idx", index_topk, plan::DType::I32);
        b.op({"smelt.indexer_topk", L, {qi, wi}, {idx}, {}, {ipool},
              {I("heads", HI), I("head_dim", dI), I("ratio", l.ratio), I("topk", index_topk)}});
      }
      int o = b.buffer(p + "o", H * hd), o2 = b.buffer(p + "o2", H * hd);
      b.op({"smelt.sparse_attention", L, {q, kv, idx}, {o}, {l.sink}, {ws, pool},
            {I("heads", H), I("head_dim", hd), I("window", window), I("ratio", l.ratio), F("scale", 1.0 / std::sqrt(double(hd)))}});
      b.op({"smelt.window_kv_update", L, {kv}, {}, {}, {ws}, {I("window", window)}});
      b.op({"smelt.rope", L, {o}, {o2}, {}, {}, rope_attrs(H, hd, false, true)});
      int g = b.buffer(p + "g", G * R), y = b.buffer(p + "y", D), X1 = b.buffer(p + "X1", n * D);
      b.op({"smelt.grouped_linear", L, {o2}, {g}, {l.wo_a}, {}, {I("groups", G)}});
      b.op({"smelt.linear", L, {g}, {y}, {l.wo_b}, {}, {}});
      b.op({"smelt.hc_expand", L, {X, y, post, comb}, {X1}, {}, {}, {I("hc_mult", n)}});
      // ffn
      int pre2 = b.buffer(p + "pre2", n), post2 = b.buffer(p + "post2", n), comb2 = b.buffer(p + "comb2", n * n);
      b.op({"smelt.hc_mix", L, {X1}, {pre2, post2, comb2}, {l.ffn_fn, l.ffn_base, l.ffn_scale}, {}, hc_attrs});
      int u2 = b.buffer(p + "u2", D), f = b.buffer(p + "f", D);
      b.op({"smelt.hc_collapse", L, {X1, pre2}, {u2}, {}, {}, {I("hc_mult", n)}});
      b.op({"smelt.rms_norm", L, {u2}, {f}, {l.ffn_norm}, {}, {F("eps", eps)}});
      int rw = b.buffer(p + "rw", topk), ri = b.buffer(p + "ri", topk, plan::DType::I32);
      b.op({"smelt.moe_route", L, {f, l.hash ? b.token_ids : -1}, {rw, ri}, {l.gate, l.bias, l.tid2eid}, {},
            {I("topk", topk), S("scoring", l.scoring), I("norm_topk_prob", 1), F("route_scale", route_scale)}});
      int ey = b.buffer(p + "ey", D), sy = b.buffer(p + "sy", D), y2 = b.buffer(p + "y2", D), X2 = b.buffer(p + "X2", n * D);
      b.op({"smelt.moe_experts", L, {f, rw, ri}, {ey}, l.experts, {},
            {I("n_experts", E), I("topk", topk), F("swiglu_limit", swiglu_limit)}});
      b.op({"smelt.swiglu_mlp", L, {f}, {sy}, {l.s_w1, l.s_w2, l.s_w3}, {}, {F("swiglu_limit", swiglu_limit)}});
      b.op({"smelt.add", L, {ey, sy}, {y2}, {}, {}, {}});
      b.op({"smelt.hc_expand", L, {X1, y2, post2, comb2}, {X2}, {}, {}, {I("hc_mult", n)}});
      X = X2;
    }
    int h = b.buffer("h", D), hn = b.buffer("hn", D);
    b.op({"smelt.hc_head", -1, {X}, {h}, {head_fn, head_base, head_scale}, {},
          {I("hc_mult", n), F("hc_eps", hc_eps), F("norm_eps", eps)}});
    b.op({"smelt.rms_norm", -1, {h}, {hn}, {norm}, {}, {F("eps", eps)}});
    b.logits = b.buffer("logits", V);
    b.op({"smelt.linear", -1, {hn}, {b.logits}, {head}, {}, {}});
  }

  // ---- float64 forward over a whole sequence (positions 0..N-1) ------------------------------------------

  Vd w(int id) const { return Vd(b.values(id).begin(), b.values(id).end()); }

  static Vd linear(const Vd& x, const Vd& W, int out) {
    int in = int(x.size());
    Vd y(out, 0.0);
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) y[o] += W[size_t(o) * in + k] * x[k];
    return y;
  }
  static Vd rms(const Vd& x, const Vd* weight, int groups = 1) {
    int len = int(x.size()) / groups;
    Vd y(x.size());
    for (int g = 0; g < groups; ++g) {
      double ms = 0;
      for (int k = 0; k < len; ++k) ms += x[g * len + k] * x[g * len + k];
      double inv = 1.0 / std::sqrt(ms / len + eps);
      for (int k = 0; k < len; ++k) y[g * len + k] = x[g * len + k] * inv * (weight ? (*weight)[k] : 1.0);
    }
    return y;
  }
  static double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

  // Inverse frequencies: plain, or YaRN as transformers' rope_parameters define it.
  static Vd inv_freq(bool compress) {
    int half = rope_dim / 2;
    double base = compress ? ctheta : theta;
    Vd f(half);
    for (int i = 0; i < half; ++i) f[i] = 1.0 / std::pow(base, 2.0 * i / rope_dim);
    if (!compress) return f;
    auto corr = [&](double rot) { return rope_dim * std::log(yarn_orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(base)); };
    double low = std::max(std::floor(corr(yarn_fast)), 0.0), high = std::min(std::ceil(corr(yarn_slow)), double(rope_dim - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      double keep = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);  // share of the original frequency
      f[i] = f[i] / yarn_factor * (1.0 - keep) + f[i] * keep;
    }
    return f;
  }
  // Interleaved pairs of the last rope_dim channels of each head rotate by freq * pos (sign = -1: inverse).
  static void rope(Vd& x, int heads, int head_dim, double pos, bool compress, double sign = 1.0) {
    Vd f = inv_freq(compress);
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rope_dim / 2; ++i) {
        double* v = &x[size_t(h) * head_dim + head_dim - rope_dim + 2 * i];
        double c = std::cos(f[i] * pos), s = sign * std::sin(f[i] * pos), a = v[0], bb = v[1];
        v[0] = a * c - bb * s;
        v[1] = bb * c + a * s;
      }
  }

  struct Mix {
    Vd pre, post, comb;
  };
  Mix hc_mix(const Vd& X, int fn, int base, int scale) const {
    Vd m = linear(rms(X, nullptr), w(fn), (2 + n) * n), B = w(base), S = w(scale);
    Mix r{Vd(n), Vd(n), Vd(n * n)};
    for (int i = 0; i < n; ++i) {
      r.pre[i] = sigmoid(m[i] * S[0] + B[i]) + hc_eps;
      r.post[i] = 2 * sigmoid(m[n + i] * S[1] + B[n + i]);
    }
    for (int a = 0; a < n; ++a) {
      double mx = -1e300, sum = 0;
      for (int k = 0; k < n; ++k) mx = std::max(mx, m[2 * n + a * n + k] * S[2] + B[2 * n + a * n + k]);
      for (int k = 0; k < n; ++k) sum += r.comb[a * n + k] = std::exp(m[2 * n + a * n + k] * S[2] + B[2 * n + a * n + k] - mx);
      for (int k = 0; k < n; ++k) r.comb[a * n + k] = r.comb[a * n + k] / sum + hc_eps;
    }
    auto normalise_cols = [&] {
      for (int k = 0; k < n; ++k) {
        double s = 0;
        for (int a = 0; a < n; ++a) s += r.comb[a * n + k];
        for (int a = 0; a < n; ++a) r.comb[a * n + k] /= s + hc_eps;
      }
    };
    normalise_cols();
    for (int it = 1; it < iters; ++it) {
      for (int a = 0; a < n; ++a) {
        double s = 0;
        for (int k = 0; k < n; ++k) s += r.comb[a * n + k];
        for (int k = 0; k < n; ++k) r.comb[a * n + k] /= s + hc_eps;
      }
      normalise_cols();
    }
    return r;
  }
  static Vd collapse(const Vd& X, const Vd& pre) {
    Vd u(D, 0.0);
    for (int c = 0; c < n; ++c)
      for (int d = 0; d < D; ++d) u[d] += pre[c] * X[c * D + d];
    return u;
  }
  static Vd expand(const Vd& X, const Vd& y, const Mix& m) {
    Vd out(n * D, 0.0);
    for (int k = 0; k < n; ++k)
      for (int d = 0; d < D; ++d) {
        out[k * D + d] = m.post[k] * y[d];
        for (int a = 0; a < n; ++a) out[k * D + d] += m.comb[a * n + k] * X[a * D + d];
      }
    return out;
  }

  // Compressed entries of a whole sequence: entry j for every complete window j.
  std::vector<Vd> compress(const std::vector<Vd>& a, int ratio, bool overlap, int head_dim, int wkv, int wgate, int ape,
                           int nrm) const {
    int c = overlap ? 2 : 1;
    std::vector<Vd> kv, g;
    for (const Vd& x : a) {
      kv.push_back(linear(x, w(wkv), c * head_dim));
      g.push_back(linear(x, w(wgate), c * head_dim));
    }
    Vd A = w(ape), norm_w = w(nrm);
    std::vector<Vd> entries;
    for (int j = 0; (j + 1) * ratio <= int(a.size()); ++j) {
      Vd e(head_dim);
      for (int ch = 0; ch < head_dim; ++ch) {
        std::vector<std::pair<double, double>> slots;  // (score, value)
        int second = overlap ? head_dim : 0;
        for (int s = 0; s < ratio; ++s) {
          int p = j * ratio + s;
          slots.push_back({g[p][second + ch] + A[s * c * head_dim + second + ch], kv[p][second + ch]});
        }
        if (overlap && j > 0)
          for (int s = 0; s < ratio; ++s) {
            int p = (j - 1) * ratio + s;
            slots.push_back({g[p][ch] + A[s * c * head_dim + ch], kv[p][ch]});
          }
        double mx = -1e300, sum = 0, acc = 0;
        for (auto& sl : slots) mx = std::max(mx, sl.first);
        for (auto& sl : slots) sum += std::exp(sl.first - mx);
        for (auto& sl : slots) acc += std::exp(sl.first - mx) / sum * sl.second;
        e[ch] = acc;
      }
      e = rms(e, &norm_w);
      rope(e, 1, head_dim, double(j * ratio), true);
      entries.push_back(e);
    }
    return entries;
  }

  // Logits of every position of `ids`, [N][V].
  std::vector<Vd> forward(const std::vector<int32_t>& ids) const {
    int N = int(ids.size());
    Vd emb = w(embed);
    std::vector<Vd> X(N);
    for (int p = 0; p < N; ++p)
      for (int c = 0; c < n; ++c) X[p].insert(X[p].end(), emb.begin() + ids[p] * D, emb.begin() + ids[p] * D + D);
    for (const Layer& l : layers) {
      std::vector<Mix> mix(N);
      std::vector<Vd> a(N), q(N), kv(N);
      Vd an = w(l.attn_norm), kvn = w(l.kv_norm);
      for (int p = 0; p < N; ++p) {
        mix[p] = hc_mix(X[p], l.attn_fn, l.attn_base, l.attn_scale);
        a[p] = rms(collapse(X[p], mix[p].pre), &an);
        q[p] = rms(linear(a[p], w(l.wq), H * hd), nullptr, H);
        rope(q[p], H, hd, p, false);
        kv[p] = rms(linear(a[p], w(l.wkv), hd), &kvn);
        rope(kv[p], 1, hd, p, false);
      }
      std::vector<Vd> pool = compress(a, l.ratio, l.overlap, hd, l.c_wkv, l.c_wgate, l.c_ape, l.c_norm);
      std::vector<Vd> ipool;
      if (l.indexer) ipool = compress(a, l.ratio, true, dI, l.i_wkv, l.i_wgate, l.i_ape, l.i_norm);
      Vd sink = w(l.sink);
      for (int p = 0; p < N; ++p) {
        int visible = (p + 1) / l.ratio;
        std::vector<int> entries;
        if (l.indexer) {  // score every visible entry, keep the best index_topk (ties: lower index)
          Vd qi = linear(a[p], w(l.wq_i), HI * dI), wi = linear(a[p], w(l.wproj), HI);
          rope(qi, HI, dI, p, true);
          std::vector<std::pair<double, int>> scored;
          for (int j = 0; j < visible; ++j) {
            double s = 0;
            for (int h = 0; h < HI; ++h) {
              double dot = 0;
              for (int k = 0; k < dI; ++k) dot += qi[h * dI + k] * ipool[j][k];
              s += std::max(dot, 0.0) / std::sqrt(double(dI)) * wi[h] / std::sqrt(double(HI));
            }
            scored.push_back({-s, j});
          }
          std::sort(scored.begin(), scored.end());
          for (int k = 0; k < std::min<int>(index_topk, visible); ++k) entries.push_back(scored[k].second);
        } else {
          for (int j = 0; j < visible; ++j) entries.push_back(j);
        }
        std::vector<const Vd*> keys;
        for (int s = std::max(0, p - window + 1); s <= p; ++s) keys.push_back(&kv[s]);
        for (int j : entries) keys.push_back(&pool[j]);
        Vd o(H * hd, 0.0);
        for (int h = 0; h < H; ++h) {
          Vd sc;
          double mx = sink[h];
          for (const Vd* k : keys) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += q[p][h * hd + d] * (*k)[d];
            sc.push_back(dot / std::sqrt(double(hd)));
            mx = std::max(mx, sc.back());
          }
          double den = std::exp(sink[h] - mx);
          for (double s : sc) den += std::exp(s - mx);
          for (size_t i = 0; i < keys.size(); ++i)
            for (int d = 0; d < hd; ++d) o[h * hd + d] += std::exp(sc[i] - mx) / den * (*keys[i])[d];
        }
        rope(o, H, hd, p, false, -1.0);
        Vd g(G * R), Wa = w(l.wo_a);
        int Kg = H * hd / G;
        for (int gi = 0; gi < G; ++gi)
          for (int r = 0; r < R; ++r) {
            double s = 0;
            for (int k = 0; k < Kg; ++k) s += Wa[size_t(gi * R + r) * Kg + k] * o[gi * Kg + k];
            g[gi * R + r] = s;
          }
        X[p] = expand(X[p], linear(g, w(l.wo_b), D), mix[p]);
      }
      // ffn
      Vd fn_w = w(l.ffn_norm);
      for (int p = 0; p < N; ++p) {
        Mix m = hc_mix(X[p], l.ffn_fn, l.ffn_base, l.ffn_scale);
        Vd f = rms(collapse(X[p], m.pre), &fn_w);
        Vd logit = linear(f, w(l.gate), E), s(E);
        for (int e = 0; e < E; ++e)
          s[e] = l.scoring == "sigmoid" ? sigmoid(logit[e]) : std::sqrt(std::log1p(std::exp(logit[e])));
        std::vector<int> sel;
        if (l.hash) {
          for (int k = 0; k < topk; ++k) sel.push_back(int(b.int_values(l.tid2eid)[ids[p] * topk + k]));
        } else {
          Vd bias = w(l.bias);
          std::vector<std::pair<double, int>> order;
          for (int e = 0; e < E; ++e) order.push_back({-(s[e] + bias[e]), e});
          std::sort(order.begin(), order.end());
          for (int k = 0; k < topk; ++k) sel.push_back(order[k].second);
        }
        double total = 0;
        for (int e : sel) total += s[e];
        auto swiglu = [&](int w1, int w2, int w3, int inter) {
          Vd h1 = linear(f, w(w1), inter), h3 = linear(f, w(w3), inter), hh(inter);
          for (int i = 0; i < inter; ++i) {
            double gte = std::min(h1[i], swiglu_limit), up = std::clamp(h3[i], -swiglu_limit, swiglu_limit);
            hh[i] = gte * sigmoid(gte) * up;
          }
          return linear(hh, w(w2), D);
        };
        Vd y = swiglu(l.s_w1, l.s_w2, l.s_w3, Fs);
        for (int e : sel) {
          Vd ye = swiglu(l.experts[3 * e], l.experts[3 * e + 1], l.experts[3 * e + 2], Fi);
          double weight = s[e] / (total + 1e-20) * route_scale;
          for (int d = 0; d < D; ++d) y[d] += weight * ye[d];
        }
        X[p] = expand(X[p], y, m);
      }
    }
    std::vector<Vd> logits;
    Vd nw = w(norm), hb = w(head_base), hs = w(head_scale);
    for (int p = 0; p < N; ++p) {
      Vd mm = linear(rms(X[p], nullptr), w(head_fn), n), pre(n);
      for (int c = 0; c < n; ++c) pre[c] = sigmoid(mm[c] * hs[0] + hb[c]) + hc_eps;
      logits.push_back(linear(rms(collapse(X[p], pre), &nw), w(head), V));
    }
    return logits;
  }
};

}  // namespace smelt::runtime::testing
