// The V4.1 ops that carry state across chunks: the KV source's compressor (pool, index keys, ratio-2 ring),
// the two-level indexer (candidate source -> consumer), V4.1 sparse attention over another op's pool, the
// Engram hash history, the Engram block, and smelt.capture. The runtime's job is the plumbing: the right
// pointers, state and chunk bookkeeping. So each plan is checked against the same kernels called directly on
// one whole sequence here (their numerics are tested in tests/kernels), and chunked runs must be bit-identical.
#include <gtest/gtest.h>

#include "kernels/attention/reference.h"
#include "kernels/compressor/reference.h"
#include "kernels/engram/hash.h"
#include "kernels/engram/reference.h"
#include "kernels/indexer/reference.h"
#include "kernels/linear/reference.h"
#include "kernels/rope/reference.h"
#include "tests/runtime/v41_util.h"

namespace smelt::runtime {
namespace {

using testing::F;
using testing::I;
using testing::N;
using testing::S;
using testing::TempDir;
using testing::V41Scaffold;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

std::vector<int32_t> sequence(int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (i * 5 + 3 + (i * i) % 7) % vocab;
  return ids;
}

// x -> kv_compressor (KV source) -> indexer_v41 (candidate source) -> indexer_v41 (consumer of its blocks)
// -> sparse_attention v41 over the source's pool with the consumer's top-k -> head.
struct CompressedAttention {
  static constexpr int V = 13, D = 32, hd = 32, dI = 32, HI = 2, H = 2, rd = 8, win = 4, topk = 3, CB = 2, CBS = 2;
  static constexpr int S_len = 32;
  int ratio;
  V41Scaffold m{V, D, 8, S_len};
  int wkv, wgate = -1, norm, wk, k_norm, wqi, wwi, wqi2, wwi2, wq, wkvq, sink, head;

  explicit CompressedAttention(int r) : ratio(r) {
    auto& b = m.b;
    wkv = m.w("wkv", {hd, D});
    if (ratio == 2) wgate = m.w("wgate", {hd, D});
    norm = m.w("norm", {hd}, 0.5, 1.5), wk = m.w("wk", {dI, hd}), k_norm = m.w("k_norm", {dI}, 0.5, 1.5);
    wqi = m.w("wqi", {HI * dI, D}), wwi = m.w("wwi", {HI, D}), wqi2 = m.w("wqi2", {HI * dI, D}), wwi2 = m.w("wwi2", {HI, D});
    wq = m.w("wq", {H * hd, D}), wkvq = m.w("wkvq", {hd, D}), sink = m.w("sink", {H}), head = m.w("head", {V, H * hd});
    int ring = ratio == 2 ? b.state("ring", "compressor_ring", 0, {ratio, 2 * hd}) : -1;
    int pool = b.state("pool", "compressed_pool", 0, {S_len / ratio, hd});
    int ipool = b.state("ipool", "index_pool", 0, {S_len / ratio, dI});
    int window = b.state("window", "window_ring", 1, {win, hd});
    std::vector<testing::AttrArg> rope = {I("rope_dim", rd), F("theta", 160000), F("yarn_factor", 16),
                                          F("yarn_beta_fast", 32), F("yarn_beta_slow", 1),
                                          I("yarn_original_max_pos", 65536)};
    auto attrs = rope;
    attrs.insert(attrs.end(), {I("ratio", ratio), I("head_dim", hd), I("index_head_dim", dI), F("eps", 1e-6)});
    b.op({"smelt.kv_compressor", 0, {m.x}, {}, {wkv, wgate, norm, wk, k_norm}, {ring, pool, ipool}, attrs});
    auto lin = [&](int w, int width) {
      int y = b.buffer("y" + std::to_string(w), width);
      b.op({"smelt.linear", 0, {m.x}, {y}, {w}, {}, {}});
      return y;
    };
    std::vector<testing::AttrArg> ia = {I("heads", HI), I("head_dim", dI), I("ratio", ratio), I("topk", topk),
                                        I("candidate_blocks", CB), I("candidate_block_size", CBS)};
    int idx0 = b.buffer("idx0", topk, plan::DType::I32), cand = b.buffer("cand", CB, plan::DType::I32);
    auto src = ia;
    src.push_back(I("is_candidate_source", 1));
    b.op({"smelt.indexer_v41", 0, {lin(wqi, HI * dI), lin(wwi, HI), -1}, {idx0, cand}, {}, {ipool}, src});
    int idx1 = b.buffer("idx1", topk, plan::DType::I32);
    b.op({"smelt.indexer_v41", 1, {lin(wqi2, HI * dI), lin(wwi2, HI), cand}, {idx1, -1}, {}, {ipool}, ia});
    int q = lin(wq, H * hd), kv = lin(wkvq, hd), o = b.buffer("o", H * hd);
    b.op({"smelt.sparse_attention", 1, {q, kv, idx1}, {o}, {sink}, {window, pool},
          {I("heads", H), I("head_dim", hd), I("window", win), I("ratio", ratio), F("scale", 1.0 / std::sqrt(hd)),
           S("numerics", "v41")}});
    b.op({"smelt.window_kv_update", 1, {kv}, {}, {}, {window}, {I("window", win)}});
    b.logits = b.buffer("logits", V);
    b.op({"smelt.linear", 1, {o}, {b.logits}, {head}, {}, {}});
  }

  // The same computation with the kernels called directly, on the whole sequence as one chunk at position 0.
  std::vector<float> expected(const std::vector<int32_t>& ids) const {
    const int T = int(ids.size());
    const auto& v = [&](int id) { return m.b.values(id).data(); };
    std::vector<float> x = m.rows(ids);
    auto lin = [&](int w, int width) {
      std::vector<float> y(size_t(T) * width);
      kernels::linear(x.data(), v(w), y.data(), T, D, width);
      return y;
    };
    kernels::RopeParams rp;
    rp.rope_dim = rd, rp.theta = 160000, rp.yarn_factor = 16, rp.yarn_beta_fast = 32, rp.yarn_beta_slow = 1;
    rp.yarn_original_max_pos = 65536;
    std::vector<float> inv = kernels::rope_inv_freq_v41(rp);
    std::vector<float> ring(size_t(ratio) * 2 * hd), pool(size_t(S_len / ratio) * hd), ipool(size_t(S_len / ratio) * dI);
    kernels::KvCompressorV41Args c;
    c.ratio = ratio, c.head_dim = hd, c.index_head_dim = dI, c.rope_dim = rd, c.in_dim = D, c.wkv = v(wkv);
    c.wgate = wgate >= 0 ? v(wgate) : nullptr, c.norm = v(norm), c.wk = v(wk), c.k_norm = v(k_norm), c.eps = 1e-6f;
    c.inv_freq = inv.data();
    kernels::kv_compressor_v41(c, x.data(), T, 0, ring.data(), pool.data(), ipool.data(), S_len / ratio);
    std::vector<float> qi = lin(wqi, HI * dI), wi = lin(wwi, HI), qi2 = lin(wqi2, HI * dI), wi2 = lin(wwi2, HI);
    kernels::IndexerV41Args a;
    a.rows = T, a.heads = HI, a.head_dim = dI, a.ratio = ratio, a.topk = topk, a.keys = ipool.data();
    a.candidate_blocks = CB, a.candidate_block_size = CBS;
    std::vector<int32_t> idx0(size_t(T) * topk), cand(size_t(T) * CB), idx1(size_t(T) * topk);
    a.q = qi.data(), a.w = wi.data(), a.is_candidate_source = true;
    kernels::indexer_v41(a, idx0.data(), cand.data());
    a.q = qi2.data(), a.w = wi2.data(), a.is_candidate_source = false, a.cand_in = cand.data();
    kernels::indexer_v41(a, idx1.data(), nullptr);
    std::vector<float> q = lin(wq, H * hd), kv = lin(wkvq, hd), wring(size_t(win) * hd), o(size_t(T) * H * hd);
    kernels::SparseAttentionArgs s;
    s.rows = T, s.heads = H, s.head_dim = hd, s.scale = float(1.0 / std::sqrt(hd)), s.q = q.data(), s.sink = v(sink);
    s.chunk_kv = kv.data(), s.ring = wring.data(), s.window = win, s.ratio = ratio, s.pool = pool.data();
    s.idx = idx1.data(), s.k = topk, s.numerics_v41 = true;
    kernels::sparse_attention(s, o.data());
    std::vector<float> logits(size_t(T) * V);
    kernels::linear(o.data(), v(head), logits.data(), T, H * hd, V);
    return logits;
  }
};

TEST(V41State, CompressedAttentionPlumbing) {
  for (int ratio : {1, 2}) {
    CompressedAttention m(ratio);
    std::vector<int32_t> ids = sequence(8, CompressedAttention::V);  // one chunk of max_rows
    TempDir dir;
    auto s = m.m.open(dir);
    std::vector<float> whole = s->prefill(ids);
    EXPECT_TRUE(same_bits(whole, m.expected(ids))) << "ratio " << ratio;
    // The state carries across chunks and decode steps: any cut gives the same logits (the window is
    // fully populated from position 3 on, where the prefill and decode window layouts coincide).
    for (int chunk : {4, 5}) {
      s->reset();
      std::vector<float> cut = s->prefill(std::span<const int32_t>(ids).first(6), chunk);
      for (size_t p = 6; p < ids.size(); ++p) {
        std::vector<float> l = s->decode(ids[p]);
        cut.insert(cut.end(), l.begin(), l.end());
      }
      EXPECT_TRUE(same_bits(cut, whole)) << "ratio " << ratio << " chunk " << chunk;
    }
  }
}

// ids -> engram_hash (two Engram layers) ; X = hc_init(x) -> engram (layer index 1) -> head.
struct EngramModel {
  static constexpr int V = 13, D = 32, n = 2, heads = 2, ngram = 4, hd = 32, cols = (ngram - 1) * heads;
  V41Scaffold m{V, D, 8, 32};
  kernels::engram::EngramHashLayout layout;
  std::vector<uint8_t> table, table_scale, wkv, wkv_scale;
  int qw, kw, head, hashes;

  explicit EngramModel(int64_t table_rows = -1) {
    auto& b = m.b;
    kernels::engram::EngramHashConfig cfg{{1, 2}, 61, ngram, heads, 16};
    layout = kernels::engram::make_hash_layout(cfg);
    int64_t rows = table_rows > 0 ? table_rows : layout.rows[1];
    table = testing::e4m3_codes(size_t(rows) * hd, m.u), table_scale = testing::e8m0_codes(size_t(rows), m.u, 124, 128);
    wkv = testing::e4m3_codes(size_t((n + 1) * D) * cols * hd, m.u);
    wkv_scale = testing::e8m0_codes(size_t((n + 1) * D / 32) * (cols * hd / 32), m.u, 118, 122);
    int t = b.raw_weight("engram.embed.weight", {rows, hd}, DType::F8_E4M3, table);
    int ts = b.raw_weight("engram.embed.scale", {rows, 1}, DType::F8_E8M0, table_scale);
    int w = b.raw_weight("engram.wkv.weight", {(n + 1) * D, cols * hd}, DType::F8_E4M3, wkv);
    int ws = b.raw_weight("engram.wkv.scale", {(n + 1) * D / 32, cols * hd / 32}, DType::F8_E8M0, wkv_scale);
    qw = m.w("q_weight", {n, D}, 0.8, 1.2), kw = m.w("k_weight", {n, D}, 0.8, 1.2), head = m.w("head", {V, n * D});
    int history = b.state("engram.history", "engram_history", 0, {ngram, 1});
    hashes = b.buffer("hashes", 2 * cols, plan::DType::I32);
    b.op({"smelt.engram_hash", -1, {b.token_ids}, {hashes}, {-1}, {history},
          {N("layers", {1, 2}), I("vocab", 61), I("heads", heads), I("max_ngram", ngram), I("compressed_vocab", 16),
           I("pad_id", 2)}});
    int X = b.buffer("X", n * D), Y = b.buffer("Y", n * D);
    b.op({"smelt.hc_init", 0, {m.x}, {X}, {}, {}, {I("hc_mult", n)}});
    b.op({"smelt.engram", 2, {X, hashes}, {Y}, {t, ts, w, ws, qw, kw}, {},
          {I("layer_index", 1), I("hc_mult", n), I("dim", D), I("head_dim", hd), I("cols", cols), F("eps", 1e-20),
           S("round", "bf16")}});
    b.logits = b.buffer("logits", V);
    b.op({"smelt.linear", 2, {Y}, {b.logits}, {head}, {}, {}});
  }

  // Hash ids of the whole sequence in one call (identity token map, pad id 2).
  std::vector<int64_t> hash_ids(const std::vector<int32_t>& ids) const {
    std::vector<int64_t> c(ids.begin(), ids.end()), out(ids.size() * 2 * cols);
    kernels::engram::EngramHistory h;
    kernels::engram::engram_hash(layout, c.data(), int64_t(c.size()), 2, h, out.data());
    return out;
  }
  std::vector<float> expected(const std::vector<int32_t>& ids) const {
    const int T = int(ids.size());
    std::vector<int64_t> h64 = hash_ids(ids);
    std::vector<int32_t> h(h64.begin(), h64.end());
    std::vector<float> x = m.rows(ids), X(size_t(T) * n * D), Y(X.size()), logits(size_t(T) * V);
    for (int r = 0; r < T; ++r)
      for (int k = 0; k < n; ++k) std::memcpy(&X[(size_t(r) * n + k) * D], &x[size_t(r) * D], 4 * D);
    kernels::engram::EngramArgs a;
    a.rows = T, a.hc_mult = n, a.dim = D, a.head_dim = hd, a.cols = cols, a.eps = 1e-20f;
    a.table = table.data(), a.table_scale = table_scale.data(), a.table_rows = int64_t(table.size()) / hd;
    a.wkv = wkv.data(), a.wkv_scale = wkv_scale.data(), a.q_weight = m.b.values(qw).data();
    a.k_weight = m.b.values(kw).data(), a.hashes = h.data() + cols, a.hash_stride = 2 * cols;
    kernels::engram::engram_forward(a, X.data(), Y.data());
    kernels::linear(Y.data(), m.b.values(head).data(), logits.data(), T, n * D, V);
    return logits;
  }
};

TEST(V41State, EngramHashHistoryAndEngramBlock) {
  EngramModel e;
  std::vector<int32_t> ids = sequence(11, EngramModel::V);
  std::vector<int64_t> want_hash = e.hash_ids(ids);
  TempDir dir;
  auto s = e.m.open(dir);
  // Chunks of 3 and then decode steps: every chunk's hash ids continue the sequence's history.
  std::vector<float> logits;
  size_t at = 0;
  auto check_hashes = [&](size_t rows) {
    const int32_t* h = reinterpret_cast<const int32_t*>(s->backend().buffer_bytes(e.hashes));
    for (size_t k = 0; k < rows * 2 * EngramModel::cols; ++k)
      ASSERT_EQ(h[k], want_hash[at * 2 * EngramModel::cols + k]) << "position " << at + k / (2 * EngramModel::cols);
    at += rows;
  };
  for (size_t p = 0; p < 9; p += 3) {
    std::vector<float> l = s->prefill(std::span<const int32_t>(ids).subspan(p, 3));
    logits.insert(logits.end(), l.begin(), l.end());
    check_hashes(3);
  }
  for (size_t p = 9; p < ids.size(); ++p) {
    std::vector<float> l = s->decode(ids[p]);
    logits.insert(logits.end(), l.begin(), l.end());
    check_hashes(1);
  }
  EXPECT_TRUE(same_bits(logits, e.expected(ids)));
}

TEST(V41State, EngramRowOutsideTheTableIsARunTimeError) {
  EngramModel e(/*table_rows=*/40);  // the layer's hash ids reach about 600
  TempDir dir;
  auto s = e.m.open(dir);
  std::vector<int32_t> ids = sequence(5, EngramModel::V);
  try {
    s->prefill(ids);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("smelt.engram"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("Engram row"), std::string::npos) << err.what();
  }
  EXPECT_EQ(s->position(), 0);  // a failed chunk does not advance the sequence
}

TEST(V41State, CapturesCollectEveryChunkWhileOn) {
  V41Scaffold m(13, 6);
  m.b.op({"smelt.capture", 0, {m.x}, {}, {}, {}, {S("name", "x"), N("row_shape", {2, 3})}});
  int head = m.w("head", {13, 6});
  m.b.logits = m.b.buffer("logits", 13);
  m.b.op({"smelt.linear", -1, {m.x}, {m.b.logits}, {head}, {}, {}});
  TempDir dir;
  auto s = m.open(dir);
  EXPECT_TRUE(s->has_capture_ops());
  std::vector<int32_t> ids = {4, 1, 9, 9, 0};
  s->prefill(ids, 2);
  EXPECT_TRUE(s->take_captures().entries.empty()) << "off by default";
  s->set_capturing(true);
  s->prefill(ids, 2);
  cpu::CaptureTable t = s->take_captures();
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].name, "x");
  EXPECT_EQ(t.entries[0].rows, 5);
  EXPECT_EQ(t.entries[0].row_shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(same_bits(t.entries[0].data, m.rows(ids)));
  s->decode(7);
  t = s->take_captures();
  ASSERT_EQ(t.entries.size(), 1u);
  EXPECT_EQ(t.entries[0].rows, 1);
  EXPECT_TRUE(same_bits(t.entries[0].data, m.rows({7})));
}

}  // namespace
}  // namespace smelt::runtime
