// Plan programs (format 1.1) and the DSpark drafting path of the runtime: a small plan whose forward writes a
// window ring and whose dspark_draft program reads it (embedding, linears, concat, dspark_attention,
// dspark_head), checked against a float64 forward written here; the format versions; and every way a
// program can be wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/bf16.h"
#include "runtime/plan.h"
#include "runtime/session.h"
#include "tests/runtime/plan_builder.h"

namespace smelt::runtime {
namespace {

using testing::F;
using testing::I;
using testing::OpArg;
using testing::PlanBuilder;
using testing::ProgramArg;
using testing::TempDir;
using testing::TinyModel;
using testing::Uniform;

template <typename Fn>
std::string error_of(Fn&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Forward: TinyModel plus kv = x Wkv^T written into a window ring (state 0). Program dspark_draft over a block
// of B = 3 rows: x = embed[ids], q = x Wq^T, kv = x Wkv^T, o = dspark_attention(q, kv; ring), c = [x ; o],
// logits = c Wc^T, then dspark_head(logits, x, ids).
struct DraftModel {
  static constexpr int V = TinyModel::V, D = TinyModel::D, H = 2, hd = 32, W = 4, R = 3, B = 3;
  TinyModel m;
  PlanBuilder& b = m.b;
  int wkv, wq, wc, sink, me, mh, proj, ring;
  int p_ids, p_x, p_q, p_kv, p_o, p_c, p_logits, p_biased, p_draft, p_conf;
  Uniform u{11};

  DraftModel() {
    b.model_config_json = R"({"vocab_size": 11, "dspark_block_size": 3, "dspark_noise_token_id": 10})";
    wkv = b.weight("wkv", {hd, D}, u.vec(hd * D, -1, 1), DType::BF16);
    wq = b.weight("wq", {H * hd, D}, u.vec(H * hd * D, -1, 1), DType::BF16);
    wc = b.weight("wc", {V, D + H * hd}, u.vec(V * (D + H * hd), -0.5, 0.5));
    sink = b.weight("sink", {H}, u.vec(H, -1, 1));
    me = b.weight("markov_embed", {V, R}, u.vec(V * R, -1, 1), DType::BF16);
    mh = b.weight("markov_head", {V, R}, u.vec(V * R, -1, 1), DType::BF16);
    proj = b.weight("proj", {1, D + R}, u.vec(D + R, -1, 1), DType::BF16);
    ring = b.state("mtp.0.window", "window_ring", 0, {W, hd});
    // forward: the ring write (x is buffer 1 of TinyModel)
    const int kvf = b.buffer("kv_forward", hd);
    b.op({"smelt.linear", 0, {1}, {kvf}, {wkv}, {}, {}});
    b.op({"smelt.window_kv_update", 0, {kvf}, {}, {}, {ring}, {I("window", W)}});
    // program
    p_ids = b.buffer("p.ids", 1, plan::DType::I32);
    p_x = b.buffer("p.x", D), p_q = b.buffer("p.q", H * hd), p_kv = b.buffer("p.kv", hd), p_o = b.buffer("p.o", H * hd);
    p_c = b.buffer("p.c", D + H * hd), p_logits = b.buffer("p.logits", V), p_biased = b.buffer("p.biased", V);
    p_draft = b.buffer("p.draft", 1, plan::DType::I32), p_conf = b.buffer("p.conf", 1);
    ProgramArg p{"dspark_draft", {}, {p_ids}, {p_draft, p_conf, p_biased}};
    p.ops.push_back({"smelt.embedding", -1, {p_ids}, {p_x}, {m.embed}, {}, {}});
    p.ops.push_back({"smelt.linear", 0, {p_x}, {p_q}, {wq}, {}, {}});
    p.ops.push_back({"smelt.linear", 0, {p_x}, {p_kv}, {wkv}, {}, {}});
    p.ops.push_back({"smelt.dspark_attention",
                     0,
                     {p_q, p_kv},
                     {p_o},
                     {sink},
                     {ring},
                     {I("heads", H), I("head_dim", hd), I("window", W), F("scale", 1.0 / std::sqrt(double(hd)))}});
    p.ops.push_back({"smelt.concat", -1, {p_x, p_o, -1, -1}, {p_c}, {}, {}, {}});
    p.ops.push_back({"smelt.linear", -1, {p_c}, {p_logits}, {wc}, {}, {}});
    p.ops.push_back(
        {"smelt.dspark_head", -1, {p_logits, p_x, p_ids}, {p_biased, p_draft, p_conf}, {me, mh, proj}, {}, {}});
    b.programs.push_back(p);
  }

  std::vector<double> row(int w, int id, int width) const {
    const auto& v = b.values(w);
    return std::vector<double>(v.begin() + int64_t(id) * width, v.begin() + int64_t(id + 1) * width);
  }
  std::vector<double> matvec(int w, const std::vector<double>& x, int out) const {
    const auto& v = b.values(w);
    std::vector<double> y(out, 0.0);
    for (int n = 0; n < out; ++n)
      for (size_t k = 0; k < x.size(); ++k) y[n] += double(v[n * x.size() + k]) * x[k];
    return y;
  }

  // Float64 draft after the forward ran `seq` (positions 0 .. t) and produced `last`.
  struct Out {
    std::vector<int> ids;
    std::vector<double> conf, logits;
  };
  Out expected(const std::vector<int32_t>& seq, int32_t last) const {
    const int t = int(seq.size()) - 1;
    std::vector<std::vector<double>> keys;  // ring slots 0 .. min(W, t+1)-1 hold positions p with p % W = slot
    for (int s = 0; s < std::min(W, t + 1); ++s) {
      int p = t - ((t - s) % W + W) % W;
      keys.push_back(matvec(wkv, row(m.embed, seq[p], D), hd));
    }
    std::vector<int32_t> block{last, 10, 10};
    std::vector<std::vector<double>> x(B), q(B);
    for (int i = 0; i < B; ++i) {
      x[i] = row(m.embed, block[i], D);
      q[i] = matvec(wq, x[i], H * hd);
      keys.push_back(matvec(wkv, x[i], hd));
    }
    Out o;
    const auto& S = b.values(sink);
    for (int i = 0; i < B; ++i) {
      std::vector<double> c = x[i];
      for (int h = 0; h < H; ++h) {
        std::vector<double> s;
        double mx = S[h];
        for (const auto& k : keys) {
          double d = 0;
          for (int e = 0; e < hd; ++e) d += q[i][h * hd + e] * k[e];
          s.push_back(d / std::sqrt(double(hd)));
          mx = std::max(mx, s.back());
        }
        double den = std::exp(S[h] - mx);
        for (double& v : s) den += (v = std::exp(v - mx));
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (size_t j = 0; j < keys.size(); ++j) acc += s[j] / den * keys[j][e];
          c.push_back(acc);
        }
      }
      o.logits.resize(size_t(i + 1) * V);
      std::vector<double> l = matvec(wc, c, V);
      const int prev = i == 0 ? last : o.ids.back();
      const std::vector<double> e = row(me, prev, R), bias = matvec(mh, e, V);
      int best = 0;
      for (int v = 0; v < V; ++v) {
        o.logits[size_t(i) * V + v] = l[v] + bias[v];
        if (o.logits[size_t(i) * V + v] > o.logits[size_t(i) * V + best]) best = v;
      }
      o.ids.push_back(best);
      double cf = 0;
      const auto& P = b.values(proj);
      for (int d = 0; d < D; ++d) cf += double(P[d]) * x[i][d];
      for (int r = 0; r < R; ++r) cf += double(P[D + r]) * e[r];
      o.conf.push_back(cf);
    }
    return o;
  }
};

TEST(Programs, OneZeroPlansStillLoad) {
  TempDir dir;
  TinyModel m;
  Plan p = Plan::from_bytes(m.b.file(dir.str()), "tiny.smelt");
  EXPECT_EQ(p.version_minor(), 0u);
  EXPECT_TRUE(p.programs().empty());
  EXPECT_EQ(p.program("dspark_draft"), nullptr);
}

TEST(Programs, DraftMatchesTheFloat64Forward) {
  TempDir dir;
  DraftModel dm;
  dm.b.write(dir.str("d.smelt"), dir.str());
  auto session = Session::open(dir.str("d.smelt"));
  EXPECT_EQ(session->plan().version_minor(), 1u);
  ASSERT_TRUE(session->can_draft());
  EXPECT_EQ(session->draft_block(), 3);
  EXPECT_NE(error_of([&] { session->draft(1); }).find("needs the forward to have run"), std::string::npos);

  std::vector<int32_t> seq{3, 7, 1, 9, 4, 2};  // 6 positions: the ring of 4 has wrapped
  session->prefill(std::span<const int32_t>(seq.data(), 4), 3);
  for (size_t k = 4; k < seq.size(); ++k) session->decode(seq[k]);
  const Draft d = session->draft(5);
  EXPECT_EQ(session->position(), 6);
  const auto want = dm.expected(seq, 5);
  EXPECT_EQ(std::vector<int>(d.ids.begin(), d.ids.end()), want.ids);
  ASSERT_EQ(d.logits.size(), want.logits.size());
  // bf16 probabilities and a bf16 attention output (V4.1 numerics, relative 2^-9 each) reach the logits through
  // 64 weights of magnitude <= 0.5: at most about 64 x 0.5 x 2^-8 = 0.03 (measured: 0.006).
  double worst = 0;
  for (size_t i = 0; i < want.logits.size(); ++i) worst = std::max(worst, std::fabs(d.logits[i] - want.logits[i]));
  std::printf("draft logits max |diff| from float64: %.3g\n", worst);
  EXPECT_LE(worst, 3e-2);
  for (int i = 0; i < DraftModel::B; ++i) EXPECT_NEAR(d.confidence[i], want.conf[i], 1e-5) << i;
  // The program wrote no state: the next decode is what it would have been without the draft.
  TempDir dir2;
  DraftModel again;
  again.b.write(dir2.str("d.smelt"), dir2.str());
  auto plain = Session::open(dir2.str("d.smelt"));
  plain->prefill(seq);
  EXPECT_EQ(plain->decode(8), session->decode(8));
}

// Builds the draft model after `edit`; returns the load error.
template <typename Edit>
std::string draft_error(Edit edit) {
  TempDir dir;
  DraftModel dm;
  edit(dm);
  return error_of([&] { Plan::from_bytes(dm.b.file(dir.str()), "bad.smelt"); });
}

TEST(Programs, Errors) {
  const DraftModel ref;  // buffer ids
  const std::string n_buffers = std::to_string(ref.p_conf + 1);
  EXPECT_EQ(draft_error([](DraftModel& m) { m.b.programs[0].name = "speculate"; }),
            "bad.smelt: has program 'speculate', which this runtime does not know (expected dspark_draft)");
  EXPECT_EQ(draft_error([](DraftModel& m) { m.b.programs.push_back(m.b.programs[0]); }),
            "bad.smelt: has program 'dspark_draft' twice");
  EXPECT_EQ(draft_error([](DraftModel& m) { m.b.programs[0].outputs.pop_back(); }),
            "bad.smelt: program dspark_draft has 2 outputs, expected 3");
  EXPECT_EQ(draft_error([](DraftModel& m) { std::swap(m.b.programs[0].outputs[0], m.b.programs[0].outputs[1]); }),
            "bad.smelt: program dspark_draft outputs 0 (buffer " + std::to_string(ref.p_conf) +
                ") is F32 with row_elems 1, expected I32 with row_elems 1");
  EXPECT_EQ(
      draft_error([](DraftModel& m) {
        m.b.programs[0].ops.push_back({"smelt.window_kv_update", 0, {m.p_kv}, {}, {}, {m.ring}, {I("window", 4)}});
      }),
      "bad.smelt: dspark_draft op 7 (smelt.window_kv_update, layer 0): writes state; a program only reads what "
      "the forward wrote");
  EXPECT_EQ(draft_error([](DraftModel& m) { m.b.programs[0].ops.erase(m.b.programs[0].ops.begin() + 2); }),
            "bad.smelt: dspark_draft op 2 (smelt.dspark_attention, layer 0): input 1 reads buffer " +
                std::to_string(ref.p_kv) +
                " (p.kv) before any op writes it, or after another buffer sharing its "
                "arena bytes was written");
  EXPECT_EQ(draft_error([](DraftModel& m) { m.b.programs[0].ops[6].outputs[1] = m.p_ids; }),
            "bad.smelt: dspark_draft op 6 (smelt.dspark_head, layer -1): writes its program's input buffer " +
                std::to_string(ref.p_ids));
  EXPECT_EQ(
      draft_error([](DraftModel& m) {
        m.b.programs[0].ops[4].inputs = {m.p_x, -1, m.p_o, -1};
      }),
      "bad.smelt: dspark_draft op 4 (smelt.concat, layer -1): input 1 (x1) is -1, out of range [0, " + n_buffers + ")");
  EXPECT_EQ(draft_error([](DraftModel& m) { m.b.programs[0].ops[5].weights = {m.wq}; }),
            "bad.smelt: dspark_draft op 5 (smelt.linear, layer -1): input 0 has row_elems 70, expected 6 (weight shape "
            "[N, K]: K)");

  // The block shape comes from the model config.
  TempDir dir;
  DraftModel dm;
  dm.b.model_config_json = R"({"vocab_size": 11})";
  dm.b.write(dir.str("d.smelt"), dir.str());
  EXPECT_EQ(error_of([&] { Session::open(dir.str("d.smelt")); }),
            dir.str("d.smelt") +
                ": has the dspark_draft program but its model config has no integer "
                "'dspark_block_size'");
  // A plan without the program cannot draft.
  TempDir dir2;
  TinyModel tiny;
  tiny.b.write(dir2.str("t.smelt"), dir2.str());
  auto s = Session::open(dir2.str("t.smelt"));
  EXPECT_FALSE(s->can_draft());
  EXPECT_NE(error_of([&] { s->draft(1); }).find("has no dspark_draft program"), std::string::npos);
}

}  // namespace
}  // namespace smelt::runtime
