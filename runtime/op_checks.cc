// Per-op width checks: the row_elems of every buffer, the shapes of weights and states and the attribute
// values of one op must agree as docs/ops.md says. After these, the cpu handlers index without checks.
#include <cmath>

#include "runtime/plan.h"

namespace smelt::runtime {

namespace {

using fb_dtype = smelt::plan::DType;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

struct Checker {
  const Plan& plan;
  const OpRef& op;

  [[noreturn]] void fail(const std::string& msg) const { plan.fail(op, msg); }

  int64_t in(size_t k) const { return plan.row_elems(op.inputs[k]); }
  int64_t out(size_t k) const { return plan.row_elems(op.outputs[k]); }
  bool has_input(size_t k) const { return op.inputs[k] >= 0; }
  bool has_output(size_t k) const { return op.outputs[k] >= 0; }
  bool has_weight(size_t k) const { return op.weights[k] >= 0; }
  bool has_state(size_t k) const { return op.states[k] >= 0; }

  // An integer attribute that must lie in [lo, hi].
  int64_t attr(const char* name, int64_t lo, int64_t hi = int64_t(1) << 31) const {
    int64_t v = op.i(name);
    if (v < lo || v > hi)
      fail("attribute " + std::string(name) + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
           ", " + std::to_string(hi) + "]");
    return v;
  }
  double fattr(const char* name, double lo) const {
    double v = op.f(name);
    if (!(v >= lo) || v > 1e30) fail("attribute " + std::string(name) + " = " + std::to_string(v) + " is out of range");
    return v;
  }

  void width(const char* what, size_t k, int64_t actual, int64_t expected, const std::string& why) const {
    if (actual != expected)
      fail(std::string(what) + " " + std::to_string(k) + " has row_elems " + std::to_string(actual) + ", expected " +
           std::to_string(expected) + " (" + why + ")");
  }
  void input(size_t k, int64_t expected, const std::string& why) const { width("input", k, in(k), expected, why); }
  void output(size_t k, int64_t expected, const std::string& why) const { width("output", k, out(k), expected, why); }

  std::vector<int64_t> wshape(size_t k) const { return plan.weight_shape(op.weights[k]); }
  void weight(size_t k, const std::vector<int64_t>& expected) const {
    std::vector<int64_t> s = wshape(k);
    if (s != expected)
      fail("weight " + std::to_string(k) + " (" + plan.weight_name(op.weights[k]) + ") has shape " + shape_str(s) + ", expected " + shape_str(expected));
  }
  // A 2-d weight whose shape the op learns from (e.g. linear's [N, K]).
  std::vector<int64_t> weight2(size_t k) const {
    std::vector<int64_t> s = wshape(k);
    if (s.size() != 2 || s[0] < 1 || s[1] < 1)
      fail("weight " + std::to_string(k) + " must be a non-empty matrix, has shape " + shape_str(s));
    return s;
  }
  void state(size_t k, int64_t rows, int64_t cols, const std::string& why) const {
    std::vector<int64_t> s = plan.state_shape(op.states[k]);
    if (s != std::vector<int64_t>{rows, cols})
      fail("state " + std::to_string(k) + " has shape " + shape_str(s) + ", expected " +
           shape_str({rows, cols}) + " (" + why + ")");
  }
  // A pool must hold every entry a sequence of max_seq_len positions can emit.
  void pool(size_t k, int64_t ratio, int64_t cols) const {
    std::vector<int64_t> s = plan.state_shape(op.states[k]);
    int64_t need = plan.max_seq_len() / ratio;
    if (s[1] != cols || s[0] < need)
      fail("state " + std::to_string(k) + " has shape " + shape_str(s) + ", expected [>= " + std::to_string(need) +
           ", " + std::to_string(cols) + "] (max_seq_len / ratio entries of head_dim)");
  }
  void rope_attrs(int64_t head_dim) const {
    int64_t rope_dim = attr("rope_dim", 0, head_dim);
    if (rope_dim % 2) fail("attribute rope_dim = " + std::to_string(rope_dim) + " is odd");
    fattr("theta", 1e-30);
    fattr("yarn_factor", 0.0);
    if (op.f("yarn_factor") > 0) {
      fattr("yarn_beta_fast", 0.0);
      fattr("yarn_beta_slow", 0.0);
      attr("yarn_original_max_pos", 1, int64_t(1) << 40);
    }
  }
  void hc_weights(int64_t n, int64_t mix, int64_t dim, int64_t n_scales) const {
    weight(0, {mix, n * dim});
    weight(1, {mix});
    weight(2, {n_scales});
  }
  // An optional string attribute must be "" or one of `allowed`.
  const std::string& one_of(const char* name, std::initializer_list<const char*> allowed) const {
    const std::string& v = op.s(name);
    if (v.empty()) return v;
    for (const char* a : allowed)
      if (v == a) return v;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    fail("attribute " + std::string(name) + " = '" + v + "' is not one of: " + list);
  }
  fb_dtype dtype(size_t k) const { return plan.fb().weights()->Get(op.weights[k])->dtype(); }
  bool quantized(size_t k) const { return dtype(k) == fb_dtype::F8_E4M3 || dtype(k) == fb_dtype::I8; }
  // A linear weight at list position k of logical shape [n, kk] in any storage, its scale (if any) at
  // position s: float [n, kk] without a scale; F8_E4M3 [n, kk] with E8M0 scales of a power-of-two block;
  // I8 [n, kk/2] packed FP4 with E8M0 scales [n, kk/32]. With act_quant, kk must be a multiple of 32.
  void linear_weight(size_t k, int s, int64_t n, int64_t kk, bool act_quant) const {
    const std::string name = "weight " + std::to_string(k) + " (" + plan.weight_name(op.weights[k]) + ")";
    bool has_scale = s >= 0 && op.weights[size_t(s)] >= 0;
    if (!quantized(k)) {
      if (has_scale) fail(name + " is not quantized but has a scale");
      if (act_quant) fail("act_quant needs FP8 / FP4 weights, but " + name + " is " +
                          std::string(plan_dtype_name(dtype(k))));
      weight(k, {n, kk});
      return;
    }
    if (!has_scale) fail(name + " is quantized (" + std::string(plan_dtype_name(dtype(k))) + ") but has no scale");
    if (act_quant && kk % 32) fail(name + ": activation quantization needs an input width that is a multiple of 32, got " + std::to_string(kk));
    std::vector<int64_t> sc = wshape(size_t(s));
    if (dtype(k) == fb_dtype::I8) {
      if (kk % 2) fail(name + ": packed FP4 needs an even input width, got " + std::to_string(kk));
      weight(k, {n, kk / 2});
      weight(size_t(s), {n, (kk + 31) / 32});
      return;
    }
    weight(k, {n, kk});
    if (fp8_weight_block({n, kk}, sc) == 0)
      fail("weight " + std::to_string(s) + " (" + plan.weight_name(op.weights[size_t(s)]) + ") has shape " +
           shape_str(sc) + ", which is no power-of-two block (>= 32) of the " + shape_str({n, kk}) + " FP8 weight");
  }
  // The expert-style SwiGLU weights w1 [f, d], w2 [d, f], w3 [f, d] starting at list position `at`.
  void swiglu_weights(size_t at, int64_t f, int64_t d) const {
    const bool scaled = op.scaled, aq = !op.s("act_quant").empty();
    size_t step = scaled ? 2 : 1;
    linear_weight(at, scaled ? int(at + 1) : -1, f, d, aq);
    linear_weight(at + step, scaled ? int(at + step + 1) : -1, d, f, aq);
    linear_weight(at + 2 * step, scaled ? int(at + 2 * step + 1) : -1, f, d, aq);
  }
  void swiglu_variant() const {
    one_of("act_quant", {"fp8_e4m3_b32"});
    one_of("variant", {"v41"});
    bool v41 = op.s("variant") == "v41", aq = !op.s("act_quant").empty();
    if (v41 != op.scaled || (aq && !op.scaled))
      fail("quantized experts (weights with scales) and variant v41 go together on the cpu backend; act_quant needs them");
    if (op.scaled && aq == (op.s("numerics") == "fp32"))
      fail("quantized experts quantize their activations exactly when the model's numerics are on (act_quant set, numerics not fp32)");
  }
  int64_t hc_dim(size_t k, int64_t n) const {
    if (in(k) % n) fail("input " + std::to_string(k) + " row_elems " + std::to_string(in(k)) +
                        " is not a multiple of hc_mult " + std::to_string(n));
    return in(k) / n;
  }
};

// Collectives: groups and peers name ranks of this plan; this rank is in its groups and never its own peer.
void check_collective(const Checker& c) {
  const OpRef& op = c.op;
  const int self = c.plan.rank_index(), n = c.plan.n_ranks();
  if (op.spec->kind == OpKind::Send || op.spec->kind == OpKind::Recv) {
    int64_t peer = op.i("peer");
    if (peer < 0 || peer >= n || peer == self)
      c.fail("attribute peer = " + std::to_string(peer) + " is not another rank of [0, " + std::to_string(n) +
             ") (this is rank " + std::to_string(self) + ")");
    c.attr("tag", 0, int64_t(1) << 40);
    return;
  }
  const std::vector<int64_t>& group = op.ints("group");
  std::vector<bool> seen(size_t(n), false);
  int64_t pos = -1;
  for (size_t k = 0; k < group.size(); ++k) {
    int64_t m = group[k];
    if (m < 0 || m >= n) c.fail("attribute group holds rank " + std::to_string(m) + ", outside [0, " + std::to_string(n) + ")");
    if (seen[size_t(m)]) c.fail("attribute group holds rank " + std::to_string(m) + " twice");
    seen[size_t(m)] = true;
    if (m == self) pos = int64_t(k);
  }
  if (pos < 0) c.fail("attribute group " + shape_str(group) + " does not hold this rank " + std::to_string(self));
  if (op.spec->kind == OpKind::AllReduce) {
    if (c.has_input(0)) c.output(0, c.in(0), "same as x");  // without x (an empty shard) the output sets C
    return;
  }
  const std::vector<int64_t>& widths = op.ints("widths");
  if (widths.size() != group.size())
    c.fail("attribute widths has " + std::to_string(widths.size()) + " entries, group " + std::to_string(group.size()));
  int64_t total = 0;
  for (int64_t w : widths) {
    if (w < 1 || w > (int64_t(1) << 31)) c.fail("attribute widths holds " + std::to_string(w));
    total += w;
  }
  c.input(0, widths[size_t(pos)], "this rank's entry of widths");
  c.output(0, total, "the widths summed");
}

// The DeepSeek-V4.1 ops.
void check_v41(const Checker& c) {
  const OpRef& op = c.op;
  switch (op.spec->kind) {
    case OpKind::FakeQuant: {
      const std::string& mode = c.one_of("mode", {"fp8_e4m3_b32", "fp4_e2m1_g16_e4m3", "fp4_e2m1_b32_ue8m0"});
      if (mode.empty()) c.fail("attribute mode is empty");
      int64_t h = c.attr("heads", 1, c.in(0));
      if (c.in(0) % h) c.fail("input row_elems " + std::to_string(c.in(0)) + " is not a multiple of heads " + std::to_string(h));
      int64_t seg = c.in(0) / h, ch = c.attr("channels", 0, seg);
      int64_t group = mode == "fp4_e2m1_g16_e4m3" ? 16 : 32;
      if ((ch ? ch : seg) % group)
        c.fail("mode " + mode + " quantizes groups of " + std::to_string(group) + ", but each head has " +
               std::to_string(ch ? ch : seg) + " quantized channels");
      c.output(0, c.in(0), "same as x");
      break;
    }
    case OpKind::KvCompressor: {
      int64_t r = c.attr("ratio", 1, 2), hd = c.attr("head_dim", 1), dI = c.attr("index_head_dim", 0), d = c.in(0);
      c.fattr("eps", 0.0);
      c.rope_attrs(hd);
      c.weight(0, {hd, d});
      if ((r == 2) != c.has_weight(1)) c.fail("ratio 2 needs a wgate weight, ratio 1 takes none");
      if ((r == 2) != c.has_state(0)) c.fail("ratio 2 needs a ring state, ratio 1 takes none");
      if (r == 2) {
        c.weight(1, {hd, d});
        std::vector<int64_t> ring = c.plan.state_shape(op.states[0]);
        if (ring[0] < r || ring[1] != 2 * hd)
          c.fail("state 0 has shape " + shape_str(ring) + ", expected [>= " + std::to_string(r) + ", " +
                 std::to_string(2 * hd) + "] (kv and gate of a partial group)");
      }
      c.weight(2, {hd});
      c.pool(1, r, hd);
      bool keys = c.has_weight(3);
      if (keys != c.has_weight(4) || keys != c.has_state(2))
        c.fail("index keys need all of wk, k_norm and the index_pool state (or none)");
      if (keys) {
        if (op.i("rope_dim") > dI) c.fail("rope_dim " + std::to_string(op.i("rope_dim")) + " exceeds index_head_dim " + std::to_string(dI));
        c.weight(3, {dI, hd});
        c.weight(4, {dI});
        c.pool(2, r, dI);
      }
      break;
    }
    case OpKind::IndexerV41: {
      int64_t h = c.attr("heads", 1), d = c.attr("head_dim", 1), r = c.attr("ratio", 1, 1 << 16), k = c.attr("topk", 1);
      int64_t cb = c.attr("candidate_blocks", 0), bs = c.attr("candidate_block_size", 0);
      bool source = c.attr("is_candidate_source", 0, 1) != 0;
      c.input(0, h * d, "heads x head_dim");
      c.input(1, h, "one weight per head");
      c.output(0, k, "topk");
      c.pool(0, r, d);
      if ((source || c.has_input(2)) && (cb < 1 || bs < 1))
        c.fail("the candidate level needs candidate_blocks and candidate_block_size > 0");
      if (c.has_input(2)) {
        if (source) c.fail("a candidate source takes no cand_in");
        c.input(2, cb, "candidate_blocks");
      }
      if (c.has_output(1)) {
        if (!source) c.fail("only a candidate source (is_candidate_source 1) writes cand_out");
        c.output(1, cb, "candidate_blocks");
      }
      break;
    }
    case OpKind::EngramHash: {
      const std::vector<int64_t>& layers = op.ints("layers");
      if (layers.empty() || layers.size() > 256) c.fail("attribute layers lists " + std::to_string(layers.size()) + " layers");
      for (int64_t l : layers)
        if (l < 0 || l > (1 << 20)) c.fail("attribute layers holds " + std::to_string(l));
      int64_t heads = c.attr("heads", 1, 1024), n = c.attr("max_ngram", 2, 64);  // (primes are searched at load)
      c.attr("vocab", 1, int64_t(1) << 40);
      // Compressed ids live in the F32 history state, exact below 2^24.
      int64_t cv = c.attr("compressed_vocab", 1, int64_t(1) << 24);
      int64_t pad = c.attr("pad_id", 0, int64_t(1) << 31);
      c.input(0, 1, "one token id per row");
      c.output(0, int64_t(layers.size()) * (n - 1) * heads, "layers x (max_ngram-1) x heads");
      std::vector<int64_t> hist = c.plan.state_shape(op.states[0]);
      if (hist[0] < n - 1 || hist[1] != 1)
        c.fail("state 0 has shape " + shape_str(hist) + ", expected [>= " + std::to_string(n - 1) + ", 1]");
      if (c.has_weight(0)) {
        std::vector<int64_t> map = c.wshape(0);
        if (map.size() != 1 || map[0] < 1) c.fail("weight 0 (token_map) must be a non-empty vector, has shape " + shape_str(map));
        if (pad >= map[0]) c.fail("pad_id " + std::to_string(pad) + " is outside the token map of " + std::to_string(map[0]));
      } else if (pad >= cv) {
        c.fail("pad_id " + std::to_string(pad) + " is outside the compressed vocab " + std::to_string(cv));
      }
      break;
    }
    case OpKind::Engram: {
      int64_t n = c.attr("hc_mult", 1, 64), d = c.attr("dim", 1), hd = c.attr("head_dim", 32), cols = c.attr("cols", 1);
      int64_t li = c.attr("layer_index", 0, 1 << 20);
      c.fattr("eps", 0.0);
      if (hd % 32) c.fail("attribute head_dim = " + std::to_string(hd) + " is not a multiple of 32");
      c.input(0, n * d, "hc_mult x dim");
      if (c.in(1) < (li + 1) * cols)
        c.fail("input 1 (hashes) has row_elems " + std::to_string(c.in(1)) + ", too few for layer_index " +
               std::to_string(li) + " of " + std::to_string(cols) + " columns");
      c.output(0, n * d, "hc_mult x dim");
      auto table = c.weight2(0);
      c.weight(0, {table[0], hd});
      c.weight(1, {table[0], hd / 32});
      c.weight(2, {(n + 1) * d, cols * hd});
      if (fp8_weight_block({(n + 1) * d, cols * hd}, c.wshape(3)) != 32)
        c.fail("weight 3 (" + c.plan.weight_name(op.weights[3]) + ") has shape " + shape_str(c.wshape(3)) +
               ", expected the 32x32 block scales of the Engram wkv");
      c.weight(4, {n, d});
      c.weight(5, {n, d});
      break;
    }
    case OpKind::EngramLookup: {
      int64_t hd = c.attr("head_dim", 32), cols = c.attr("cols", 1), li = c.attr("layer_index", 0, 1 << 20);
      int64_t begin = c.attr("row_begin", 0, int64_t(1) << 40), total = c.attr("rows_total", 1, int64_t(1) << 40);
      if (hd % 32) c.fail("attribute head_dim = " + std::to_string(hd) + " is not a multiple of 32");
      if (c.in(0) < (li + 1) * cols)
        c.fail("input 0 (hashes) has row_elems " + std::to_string(c.in(0)) + ", too few for layer_index " +
               std::to_string(li) + " of " + std::to_string(cols) + " columns");
      c.output(0, cols * hd, "cols x head_dim");
      auto table = c.weight2(0);
      c.weight(0, {table[0], hd});
      c.weight(1, {table[0], hd / 32});
      if (begin + table[0] > total)
        c.fail("table rows " + std::to_string(begin) + " + " + std::to_string(table[0]) + " exceed rows_total " +
               std::to_string(total));
      break;
    }
    case OpKind::IndexerScores: {
      int64_t h = c.attr("heads", 1), d = c.attr("head_dim", 1), r = c.attr("ratio", 1, 1 << 16);
      c.attr("heads_total", h);
      c.one_of("variant", {"v4", "v41"});
      if (op.s("variant").empty()) c.fail("attribute variant must be v4 or v41");
      c.input(0, h * d, "heads x head_dim");
      c.input(1, h, "one weight per head");
      c.pool(0, r, d);
      c.output(0, c.plan.state_shape(op.states[0])[0], "one score per index pool row");
      break;
    }
    case OpKind::IndexerSelect: {
      int64_t r = c.attr("ratio", 1, 1 << 16), k = c.attr("topk", 1);
      int64_t cb = c.attr("candidate_blocks", 0), bs = c.attr("candidate_block_size", 0);
      bool source = c.attr("is_candidate_source", 0, 1) != 0;
      c.one_of("variant", {"v4", "v41"});
      const bool v41 = op.s("variant") == "v41";
      if (!v41 && op.s("variant") != "v4") c.fail("attribute variant must be v4 or v41");
      if (c.in(0) < c.plan.max_seq_len() / r)
        c.fail("input 0 has row_elems " + std::to_string(c.in(0)) + ", fewer than the max_seq_len / ratio = " +
               std::to_string(c.plan.max_seq_len() / r) + " entries a query can see");
      c.output(0, k, "topk");
      if (!v41 && (source || cb || c.has_input(1) || c.has_output(1))) c.fail("only variant v41 has a candidate level");
      if ((source || c.has_input(1)) && (cb < 1 || bs < 1))
        c.fail("the candidate level needs candidate_blocks and candidate_block_size > 0");
      if (c.has_input(1)) {
        if (source) c.fail("a candidate source takes no cand_in");
        c.input(1, cb, "candidate_blocks");
      }
      if (c.has_output(1)) {
        if (!source) c.fail("only a candidate source (is_candidate_source 1) writes cand_out");
        c.output(1, cb, "candidate_blocks");
      }
      break;
    }
    case OpKind::EngramGate: {
      int64_t n = c.attr("hc_mult", 1, 64), d = c.attr("dim", 1), hd = c.attr("head_dim", 32), cols = c.attr("cols", 1);
      c.fattr("eps", 0.0);
      if (hd % 32) c.fail("attribute head_dim = " + std::to_string(hd) + " is not a multiple of 32");
      c.input(0, n * d, "hc_mult x dim");
      c.output(0, n * d, "hc_mult x dim");
      if (op.weights[0] < 0) {  // e is already projected (smelt-split-engram: a smelt.linear computed it)
        if (op.weights[1] >= 0) c.fail("has wkv_scale without wkv");
        c.input(1, (n + 1) * d, "the projected keys and value, (hc_mult + 1) x dim");
      } else {
        c.input(1, cols * hd, "cols x head_dim");
        c.weight(0, {(n + 1) * d, cols * hd});
        if (op.weights[1] < 0 || fp8_weight_block({(n + 1) * d, cols * hd}, c.wshape(1)) != 32)
          c.fail("weight 1 (" + (op.weights[1] < 0 ? std::string("absent") : c.plan.weight_name(op.weights[1])) +
                 ") is not the 32x32 block scales of the Engram wkv");
      }
      c.weight(2, {n, d});
      c.weight(3, {n, d});
      break;
    }
    case OpKind::HcMean: {
      int64_t n = c.attr("hc_mult", 1, 64), d = c.hc_dim(0, n);
      c.output(0, d, "one stream");
      break;
    }
    case OpKind::Capture: {
      if (op.s("name").empty()) c.fail("attribute name is empty");
      int64_t elems = 1;
      for (int64_t e : op.ints("row_shape")) {
        if (e < 1 || e > c.in(0)) c.fail("attribute row_shape holds " + std::to_string(e));
        elems *= e;
      }
      if (!op.ints("row_shape").empty() && elems != c.in(0))
        c.fail("attribute row_shape has " + std::to_string(elems) + " elements, the input " + std::to_string(c.in(0)));
      break;
    }
    case OpKind::Concat: {
      if (!c.has_input(2) && c.has_input(3)) c.fail("input 3 is given but input 2 is absent");
      int64_t total = 0;
      for (size_t k = 0; k < 4; ++k)
        if (c.has_input(k)) total += c.in(k);
      c.output(0, total, "the inputs' row_elems summed");
      break;
    }
    case OpKind::DsparkAttention: {
      int64_t h = c.attr("heads", 1), d = c.attr("head_dim", 1), w = c.attr("window", 1);
      c.fattr("scale", 0.0);
      c.input(0, h * d, "heads x head_dim");
      c.input(1, d, "one shared kv head");
      c.output(0, h * d, "heads x head_dim");
      c.weight(0, {h});
      c.state(0, w, d, "window rows of kv");
      break;
    }
    case OpKind::DsparkHead: {
      int64_t v = c.in(0), d = c.in(1);
      auto e = c.weight2(0);
      c.weight(0, {v, e[1]});
      c.weight(1, {v, e[1]});
      c.weight(2, {1, d + e[1]});
      c.input(2, 1, "one token id per row");
      c.output(0, v, "same as logits");
      c.output(1, 1, "one draft id per row");
      c.output(2, 1, "one confidence per row");
      break;
    }
    default:
      c.fail("has no shape checks (runtime bug)");
  }
}

}  // namespace

void check_op_shapes(const Plan& plan, const OpRef& op) {
  Checker c{plan, op};
  switch (op.spec->kind) {
    case OpKind::Embedding: {
      auto e = c.weight2(0);
      c.input(0, 1, "one token id per row");
      c.output(0, e[1], "embedding width");
      break;
    }
    case OpKind::HcInit: {
      int64_t n = c.attr("hc_mult", 1, 64);
      c.output(0, n * c.in(0), "hc_mult copies of x");
      break;
    }
    case OpKind::HcMix: {
      int64_t n = c.attr("hc_mult", 1, 64), d = c.hc_dim(0, n);
      c.one_of("variant", {"v4", "v41"});
      c.attr("sinkhorn_iters", 1, 1000);
      c.fattr("hc_eps", 0.0);
      c.fattr("norm_eps", 0.0);
      c.hc_weights(n, (2 + n) * n, d, 3);
      c.output(0, n, "pre: hc_mult");
      c.output(1, n, "post: hc_mult");
      c.output(2, n * n, "comb: hc_mult^2");
      break;
    }
    case OpKind::HcCollapse: {
      int64_t n = c.attr("hc_mult", 1, 64), d = c.hc_dim(0, n);
      if (c.has_input(1)) c.input(1, n, "pre: hc_mult");  // absent: the one-hot initial pre
      if (c.has_weight(0)) {  // the folded rms_norm (smelt-fuse-hc-norm)
        c.weight(0, {d});
        if (!(c.fattr("norm_eps", 0.0) > 0)) c.fail("norm_eps must be positive with a norm weight");
      } else if (!c.op.s("collapse_round").empty()) {
        c.fail("collapse_round without a norm weight (the collapse's own rounding is round)");
      }
      c.one_of("collapse_round", {"bf16"});
      c.output(0, d, "one stream");
      break;
    }
    case OpKind::HcExpand: {
      int64_t n = c.attr("hc_mult", 1, 64), d = c.hc_dim(0, n);
      c.input(1, d, "y: one stream");
      c.input(2, n, "post: hc_mult");
      c.input(3, n * n, "comb: hc_mult^2");
      c.output(0, n * d, "hc_mult streams");
      break;
    }
    case OpKind::HcHead: {
      int64_t n = c.attr("hc_mult", 1, 64), d = c.hc_dim(0, n);
      c.fattr("hc_eps", 0.0);
      c.fattr("norm_eps", 0.0);
      c.hc_weights(n, n, d, 1);
      c.output(0, d, "one stream");
      break;
    }
    case OpKind::RmsNorm: {
      int64_t g = c.attr("groups", 1, c.in(0));
      c.fattr("eps", 0.0);
      if (c.in(0) % g)
        c.fail("input row_elems " + std::to_string(c.in(0)) + " is not a multiple of groups " + std::to_string(g));
      if (c.has_weight(0)) c.weight(0, {c.in(0) / g});
      c.output(0, c.in(0), "same as x");
      break;
    }
    case OpKind::Linear: {
      auto w = c.weight2(0);
      bool aq = !c.one_of("act_quant", {"fp8_e4m3_b32"}).empty();
      double sa = op.f("scale_after");
      if (!std::isfinite(sa) || sa == 0) c.fail("attribute scale_after must be finite and non-zero");
      int64_t k = c.dtype(0) == fb_dtype::I8 ? c.in(0) : w[1];  // packed FP4 stores K/2 columns
      c.linear_weight(0, op.scaled ? 1 : -1, w[0], k, aq);
      c.input(0, k, "weight shape [N, K]: K");
      c.output(0, w[0], "weight shape [N, K]: N");
      break;
    }
    case OpKind::GroupedLinear: {
      int64_t g = c.attr("groups", 1, c.in(0));
      if (c.in(0) % g) c.fail("input row_elems " + std::to_string(c.in(0)) + " is not a multiple of groups " + std::to_string(g));
      auto w = c.weight2(0);
      if (w[0] % g) c.fail("weight rows " + std::to_string(w[0]) + " are not a multiple of groups " + std::to_string(g));
      if (c.dtype(0) == fb_dtype::I8) c.fail("a grouped linear weight may be FP8 (dequantized at load), not packed FP4");
      c.linear_weight(0, op.scaled ? 1 : -1, w[0], w[1], false);
      c.input(0, g * w[1], "groups x weight columns");
      c.output(0, w[0], "weight rows");
      break;
    }
    case OpKind::Rope: {
      int64_t h = c.attr("heads", 1), d = c.attr("head_dim", 1);
      c.attr("inverse", 0, 1);
      c.one_of("variant", {"v4", "v41"});
      c.rope_attrs(d);
      c.input(0, h * d, "heads x head_dim");
      c.output(0, h * d, "same as x");
      break;
    }
    case OpKind::WindowKvUpdate: {
      int64_t w = c.attr("window", 1);
      c.state(0, w, c.in(0), "window rows of kv");
      break;
    }
    case OpKind::Compressor: {
      int64_t r = c.attr("ratio", 1, 1 << 16), hd = c.attr("head_dim", 1), cc = 1 + c.attr("overlap", 0, 1);
      int64_t d = c.in(0);
      c.fattr("eps", 0.0);
      c.rope_attrs(hd);
      c.weight(0, {cc * hd, d});
      c.weight(1, {cc * hd, d});
      c.weight(2, {r, cc * hd});
      c.weight(3, {hd});
      c.state(0, 2 * r, 2 * cc * hd, "2*ratio rows of projected kv and gate");
      c.pool(1, r, hd);
      break;
    }
    case OpKind::IndexerTopk: {
      int64_t h = c.attr("heads", 1), d = c.attr("head_dim", 1), r = c.attr("ratio", 1, 1 << 16);
      int64_t k = c.attr("topk", 1);
      c.input(0, h * d, "heads x head_dim");
      c.input(1, h, "one weight per head");
      c.output(0, k, "topk");
      c.pool(0, r, d);
      break;
    }
    case OpKind::SparseAttention: {
      int64_t h = c.attr("heads", 1), d = c.attr("head_dim", 1), w = c.attr("window", 1);
      int64_t r = c.attr("ratio", 0, 1 << 16);
      c.fattr("scale", 0.0);
      c.one_of("numerics", {"v41", "fp32"});
      c.input(0, h * d, "heads x head_dim");
      c.input(1, d, "one shared kv head");
      c.output(0, h * d, "heads x head_dim");
      c.weight(0, {h});
      c.state(0, w, d, "window rows of kv");
      if (r == 0 && (c.has_state(1) || c.has_input(2))) c.fail("has a pool or idx operand but ratio = 0");
      if (r > 0 && !c.has_state(1)) c.fail("has ratio " + std::to_string(r) + " but no pool state");
      if (r > 0) c.pool(1, r, d);
      break;
    }
    case OpKind::MoeRoute: {
      auto g = c.weight2(0);
      int64_t e = g[0], k = c.attr("topk", 1, e);
      c.attr("norm_topk_prob", 0, 1);
      c.fattr("route_scale", 0.0);
      if (op.f("gate_temp") != 1.0)
        c.fail("attribute gate_temp = " + std::to_string(op.f("gate_temp")) + ": the cpu kernels support only 1");
      const std::string& s = op.s("scoring");
      if (s != "sqrtsoftplus" && s != "softmax" && s != "sigmoid")
        c.fail("attribute scoring = '" + s + "' is not sqrtsoftplus, softmax or sigmoid");
      c.input(0, g[1], "gate shape [experts, dim]: dim");
      if (c.has_weight(1)) c.weight(1, {e});
      if (c.has_weight(2) != c.has_input(1)) c.fail("hash routing needs both the ids input and the tid2eid weight");
      if (c.has_weight(2)) {
        auto t = c.weight2(2);
        c.weight(2, {t[0], k});
        c.input(1, 1, "one token id per row");
      }
      c.output(0, k, "topk");
      c.output(1, k, "topk");
      break;
    }
    case OpKind::MoeExperts: {
      // An expert-parallel rank (n_routed > 0): it holds experts expert_begin .. expert_begin+n_experts-1 of the
      // model's n_routed; topk counts the model's experts.
      int64_t e = c.attr("n_experts", 1), routed = c.attr("n_routed", 0);
      int64_t b = c.attr("expert_begin", 0, routed ? routed - e : 0);
      int64_t k = c.attr("topk", 1, routed ? routed : e), d = c.in(0);
      (void)b;
      c.fattr("swiglu_limit", -1e30);
      c.swiglu_variant();
      auto w1 = c.weight2(0);
      size_t per = op.scaled ? 6 : 3;
      for (int64_t x = 0; x < e; ++x) c.swiglu_weights(per * size_t(x), w1[0], d);
      c.input(1, k, "topk");
      c.input(2, k, "topk");
      c.output(0, d, "same as x");
      break;
    }
    case OpKind::SwigluMlp: {
      auto w1 = c.weight2(0);
      int64_t d = c.in(0);
      c.fattr("swiglu_limit", -1e30);
      c.swiglu_variant();
      c.swiglu_weights(0, w1[0], d);
      c.output(0, d, "same as x");
      break;
    }
    case OpKind::Add: {
      c.input(1, c.in(0), "same as a");
      c.output(0, c.in(0), "same as a");
      break;
    }
    case OpKind::AllReduce:
    case OpKind::AllGather:
    case OpKind::Send:
    case OpKind::Recv:
      check_collective(c);
      break;
    default:
      check_v41(c);
      break;
  }
  c.one_of("round", {"bf16"});
  if (op.spec->kind != OpKind::SparseAttention) c.one_of("numerics", {"fp32"});
}

}  // namespace smelt::runtime
