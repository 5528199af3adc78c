// Per-op width checks: the row_elems of every buffer, the shapes of weights and states and the attribute
// values of one op must agree as docs/ops.md says. After these, the cpu handlers index without checks.
#include "runtime/plan.h"

namespace smelt::runtime {

namespace {

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
  int64_t hc_dim(size_t k, int64_t n) const {
    if (in(k) % n) fail("input " + std::to_string(k) + " row_elems " + std::to_string(in(k)) +
                        " is not a multiple of hc_mult " + std::to_string(n));
    return in(k) / n;
  }
};

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
      c.input(1, n, "pre: hc_mult");
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
      c.input(0, w[1], "weight shape [N, K]: K");
      c.output(0, w[0], "weight shape [N, K]: N");
      break;
    }
    case OpKind::GroupedLinear: {
      int64_t g = c.attr("groups", 1, c.in(0));
      if (c.in(0) % g) c.fail("input row_elems " + std::to_string(c.in(0)) + " is not a multiple of groups " + std::to_string(g));
      auto w = c.weight2(0);
      if (w[0] % g) c.fail("weight rows " + std::to_string(w[0]) + " are not a multiple of groups " + std::to_string(g));
      c.input(0, g * w[1], "groups x weight columns");
      c.output(0, w[0], "weight rows");
      break;
    }
    case OpKind::Rope: {
      int64_t h = c.attr("heads", 1), d = c.attr("head_dim", 1);
      c.attr("inverse", 0, 1);
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
      int64_t e = c.attr("n_experts", 1), k = c.attr("topk", 1, e), d = c.in(0);
      c.fattr("swiglu_limit", -1e30);
      auto w1 = c.weight2(0);
      for (int64_t x = 0; x < e; ++x) {
        c.weight(3 * x + 0, {w1[0], d});
        c.weight(3 * x + 1, {d, w1[0]});
        c.weight(3 * x + 2, {w1[0], d});
      }
      c.input(1, k, "topk");
      c.input(2, k, "topk");
      c.output(0, d, "same as x");
      break;
    }
    case OpKind::SwigluMlp: {
      auto w1 = c.weight2(0);
      int64_t d = c.in(0);
      c.fattr("swiglu_limit", -1e30);
      c.weight(0, {w1[0], d});
      c.weight(1, {d, w1[0]});
      c.weight(2, {w1[0], d});
      c.output(0, d, "same as x");
      break;
    }
    case OpKind::Add: {
      c.input(1, c.in(0), "same as a");
      c.output(0, c.in(0), "same as a");
      break;
    }
  }
}

}  // namespace smelt::runtime
