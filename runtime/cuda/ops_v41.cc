// The cuda launchers of the DeepSeek-V4.1 ops (docs/ops.md, section DeepSeek-V4.1), mirroring
// runtime/cpu/ops_v41.cc. The V4.1 forms of linear / moe_experts / swiglu_mlp live in ops.cc.
#include <algorithm>
#include <cmath>

#include "kernels/engram/hash.h"
#include "runtime/cuda/ops_common.h"

namespace smelt::runtime::cuda::detail {

namespace {

// The Engram gate of the op's rows (in[0], its n streams of D channels, to out[0]) on the keys and value kv:
// smelt_engram_gate_wide (1024 threads a (row, stream), 5 steps a thread: 13 -> ~7 us at the V4.1-Flash shape, the step
// 1.199 -> 1.192 ms, H200) unless $SMELT_CUDA_GATE_THREADS=256 (smelt_engram_gate, 20 steps a thread: its 212
// registers allow no more threads). Each sums in its own order (the GPU test checks both).
void engram_gate(Ctx& c, DevPtr kv, const DeviceWeight* qw, const DeviceWeight* kw, int n, int D, int rb) {
  static const bool narrow = env_is("SMELT_CUDA_GATE_THREADS", "256");
  const OpLaunch& l = c.l;
  c.go(narrow ? "smelt_engram_gate" : "smelt_engram_gate_wide", unsigned(n), unsigned(l.rows), 1, narrow ? 256u : 1024u,
       0, l.in[0], kv, ptr(qw), float_dt(c, qw, "q_weight"), ptr(kw), float_dt(c, kw, "k_weight"), D,
       float(c.op().f("eps")), float(std::pow(double(D), -0.5)), rb, l.out[0]);
}

struct HashLayout {  // kernels/engram/engram.cu HashLayout
  int64_t mult[4][8];
  int64_t prime[4][32];
  int64_t offset[4][32];
  int32_t layers, max_ngram, heads;
};

kernels::engram::EngramHashLayout hash_layout(const Ctx& c) {
  const OpRef& op = c.op();
  kernels::engram::EngramHashConfig cfg;
  for (int64_t v : op.ints("layers")) cfg.layer_ids.push_back(int(v));
  cfg.vocab_size = op.i("vocab");
  cfg.max_ngram = int(op.i("max_ngram"));
  cfg.n_heads = int(op.i("heads"));
  cfg.compressed_vocab_size = op.i("compressed_vocab");
  try {
    return kernels::engram::make_hash_layout(cfg);
  } catch (const Error& e) {
    c.fail(std::string("the Engram hash layout: ") + e.what());
  }
}

}  // namespace

bool run_v41(Ctx& c) {
  const OpLaunch& l = c.l;
  const OpRef& op = c.op();
  const int rows = l.rows;
  const unsigned R = unsigned(rows);
  switch (op.spec->kind) {
    case OpKind::FakeQuant: {
      const std::string& mode = op.s("mode");
      const int m = mode == "fp8_e4m3_b32" ? 0 : mode == "fp4_e2m1_g16_e4m3" ? 1 : 2;
      const int width = int(l.in_w[0]), heads = int(op.i("heads"));
      const int channels = int(op.i("channels") ? op.i("channels") : width / heads);
      if (channels % (m == 1 ? 16 : 32)) c.fail("fake_quant channels must be a multiple of the group size");
      if (l.out[0] != l.in[0])
        c.go("smelt_copy_cols", cdiv(width, 256), R, 1, 256, 0, l.in[0], width, l.out[0], width, int(0));
      const int64_t elems = int64_t(rows) * heads * channels;  // a thread per quantized element
      c.go("smelt_fake_quant", unsigned(std::max<int64_t>(1, std::min<int64_t>(cdiv(elems, 128), 4096))), 1, 1, 128, 0,
           l.out[0], rows, width, heads, channels, m);
      return true;
    }
    case OpKind::KvCompressor: {
      const int ratio = int(op.i("ratio")), hd = int(op.i("head_dim")), dI = int(op.i("index_head_dim"));
      const int D = int(l.in_w[0]);
      if (ratio != 1 && ratio != 2) c.fail("kv_compressor ratio must be 1 or 2");
      if (hd > 1024 || dI > 1024) c.fail("kv_compressor widths exceed the cuda kernel's 1024");
      const DevPtr kv = c.scratch(uint64_t(rows) * hd * 4);
      const DevPtr gate = ratio == 2 ? c.scratch(uint64_t(rows) * hd * 4) : 0;
      linear(c, l.in[0], kv, weight(l, 0), nullptr, rows, D, hd, false, 1.f, 0, "wkv");
      if (ratio == 2) linear(c, l.in[0], gate, weight(l, 1), nullptr, rows, D, hd, false, 1.f, 0, "wgate");
      int64_t capacity = l.state_rows[1];
      if (l.state[2]) capacity = std::min(capacity, l.state_rows[2]);
      const DeviceWeight *norm = weight(l, 2), *wk = weight(l, 3), *kn = weight(l, 4);
      const InvFreq f = inv_freq_arg(c, true);
      c.go("smelt_kv_compressor_emit", unsigned(rows / ratio + 1), 1, 1, 256, 0, kv, gate, rows, l.step, l.state[0],
           int(l.state_rows[0]), l.state[1], l.state[2], capacity, ptr(norm), float_dt(c, norm, "norm"), ptr(wk),
           float_dt(c, wk, "wk"), ptr(kn), float_dt(c, kn, "k_norm"), ratio, hd, dI, float(op.f("eps")),
           int(op.i("rope_dim")), model_rounding(op), f);
      if (ratio == 2)
        c.go("smelt_compressor_ring_store", R, 1, 1, 256, 0, kv, gate, rows, hd, l.step, l.state[0],
             int(l.state_rows[0]));
      return true;
    }
    case OpKind::IndexerV41: {
      const int H = int(op.i("heads")), hd = int(op.i("head_dim")), topk = int(op.i("topk"));
      const int CB = int(op.i("candidate_blocks")), bs = int(op.i("candidate_block_size"));
      const bool two = CB > 0 && bs > 0, source = op.i("is_candidate_source") != 0;
      const int64_t S = l.state_rows[0];
      if (topk > 2048 || CB > 2048) c.fail("topk / candidate_blocks exceed the cuda kernel's 2048");
      if (two && (S + bs - 1) / bs > 65536) c.fail("more than 65536 candidate blocks");
      if (int64_t(H) * hd * 4 > 48 * 1024) c.fail("indexer queries exceed 48 KiB of shared memory");
      const DevPtr scores = c.scratch(uint64_t(rows) * uint64_t(S) * 4);
      c.go("smelt_indexer_v41_scores", cdiv(S, 8), R, 1, 256, unsigned(H * hd * 4), l.in[0], l.in[1], l.state[0], S,
           l.step, H, hd, int(op.i("ratio")), model_rounding(op), scores);
      if (two && source && l.out[1])
        c.go("smelt_indexer_candidates", R, 1, 1, 1024, 0, scores, S, l.step, int(op.i("ratio")), bs, CB, l.out[1]);
      const DevPtr cand = (two && !source) ? l.in[2] : 0;
      c.go("smelt_indexer_topk", R, 1, 1, 1024, 0, scores, S, l.step, int(op.i("ratio")), topk, int(1), cand, CB,
           std::max(bs, 1), l.out[0]);
      return true;
    }
    // The TP halves of both indexers: the scores kernels write a rank's partial sums straight into the output
    // (entries past a row's visible count are not written and never read), the selection runs the candidate /
    // top-k kernels on the all-reduced scores.
    case OpKind::IndexerScores: {
      const int H = int(op.i("heads")), hd = int(op.i("head_dim")), ratio = int(op.i("ratio"));
      const int64_t S = l.out_w[0];
      if (int64_t(H) * hd * 4 > 48 * 1024) c.fail("indexer queries exceed 48 KiB of shared memory");
      if (op.s("variant") == "v41")  // rb 2: the terms rounded, the sum not (the all_reduce rounds it)
        c.go("smelt_indexer_v41_scores", cdiv(S, 8), R, 1, 256, unsigned(H * hd * 4), l.in[0], l.in[1], l.state[0], S,
             l.step, H, hd, ratio, model_rounding(op) ? 2 : 0, l.out[0]);
      else
        c.go("smelt_indexer_scores", cdiv(S, 8), R, 1, 256, unsigned(H * hd * 4), l.in[0], l.in[1], l.state[0], S,
             l.step, H, hd, ratio, float(std::pow(double(hd), -0.5)), float(std::pow(double(op.i("heads_total")), -0.5)),
             l.out[0]);
      return true;
    }
    case OpKind::IndexerSelect: {
      const int topk = int(op.i("topk")), ratio = int(op.i("ratio")), v41 = op.s("variant") == "v41";
      const int CB = int(op.i("candidate_blocks")), bs = int(op.i("candidate_block_size"));
      const bool two = CB > 0 && bs > 0, source = op.i("is_candidate_source") != 0;
      const int64_t S = l.in_w[0];
      if (topk > 2048 || CB > 2048) c.fail("topk / candidate_blocks exceed the cuda kernel's 2048");
      if (two && (S + bs - 1) / bs > 65536) c.fail("more than 65536 candidate blocks");
      if (two && source && l.out[1])
        c.go("smelt_indexer_candidates", R, 1, 1, 1024, 0, l.in[0], S, l.step, ratio, bs, CB, l.out[1]);
      const DevPtr cand = (two && !source) ? l.in[1] : 0;
      c.go("smelt_indexer_topk", R, 1, 1, 1024, 0, l.in[0], S, l.step, ratio, topk, v41, cand, CB, std::max(bs, 1),
           l.out[0]);
      return true;
    }
    case OpKind::EngramHash: {
      const kernels::engram::EngramHashLayout L = hash_layout(c);
      if (L.layers() > 4 || L.max_ngram > 8 || L.cols() > 32)
        c.fail("Engram hash layout exceeds the cuda kernel's 4 layers, max_ngram 8, 32 columns");
      HashLayout h{};
      for (int k = 0; k < L.layers(); ++k) {
        for (int s = 0; s < L.max_ngram; ++s) h.mult[k][s] = L.multipliers[size_t(k)][size_t(s)];
        for (int col = 0; col < L.cols(); ++col) {
          h.prime[k][col] = L.primes[size_t(k)][size_t(col)];
          h.offset[k][col] = L.offsets[size_t(k)][size_t(col)];
        }
      }
      h.layers = L.layers(), h.max_ngram = L.max_ngram, h.heads = L.n_heads;
      const DeviceWeight* map = weight(l, 0);
      if (map && map->dtype != smelt::plan::DType::I32) c.fail("token_map must be I32 on the device");
      const int64_t vmap = map && !map->shape.empty() ? map->shape[0] : 0;
      c.go("smelt_engram_hash", cdiv(int64_t(rows) * L.layers(), 64), 1, 1, 64, 0, l.in[0], rows, l.step, ptr(map),
           vmap, int64_t(op.i("compressed_vocab")), int64_t(op.i("pad_id")), l.state[0], int(l.state_rows[0]), h,
           l.out[0]);
      c.go("smelt_engram_history", cdiv(rows, 64), 1, 1, 64, 0, l.in[0], rows, l.step, ptr(map), vmap,
           int64_t(op.i("compressed_vocab")), int64_t(op.i("pad_id")), l.state[0], int(l.state_rows[0]));
      return true;
    }
    case OpKind::Engram: {
      const int n = int(op.i("hc_mult")), D = int(op.i("dim")), hd = int(op.i("head_dim")), cols = int(op.i("cols"));
      const DeviceWeight *table = weight(l, 0), *tscale = weight(l, 1), *wkv = weight(l, 2), *wscale = weight(l, 3);
      const DeviceWeight *qw = weight(l, 4), *kw = weight(l, 5);
      if (hd % 32) c.fail("Engram head_dim must be a multiple of 32");
      const int64_t trows = table && !table->shape.empty() ? table->shape[0] : 0;
      const int K = cols * hd, N = (n + 1) * D;
      const DevPtr e = c.scratch(uint64_t(rows) * K * 4), kv = c.scratch(uint64_t(rows) * N * 4);
      const DevPtr hashes = l.in[1] + DevPtr(op.i("layer_index")) * DevPtr(cols) * 4;
      c.go("smelt_engram_gather", unsigned(cols), R, 1, 128, 0, hashes, int(l.in_w[1]), ptr(table), ptr(tscale), trows,
           int64_t(0), hd, e);
      // Model numerics: act-quant FP8 GEMM rounded to bf16; numerics = "fp32": fp32 on the dequantized weight.
      const int rb = model_rounding(op);
      linear(c, e, kv, wkv, wscale, rows, K, N, rb != 0, 1.f, rb, "wkv");
      engram_gate(c, kv, qw, kw, n, D, rb);
      return true;
    }
    case OpKind::EngramLookup: {  // a TP rank's rows of the table, zeros for the others (all_reduce joins them)
      const int hd = int(op.i("head_dim")), cols = int(op.i("cols"));
      const DeviceWeight *table = weight(l, 0), *tscale = weight(l, 1);
      if (hd % 32) c.fail("Engram head_dim must be a multiple of 32");
      const int64_t trows = table && !table->shape.empty() ? table->shape[0] : 0;
      const DevPtr hashes = l.in[0] + DevPtr(op.i("layer_index")) * DevPtr(cols) * 4;
      c.go("smelt_engram_gather", unsigned(cols), R, 1, 128, 0, hashes, int(l.in_w[0]), ptr(table), ptr(tscale), trows,
           int64_t(op.i("row_begin")), hd, l.out[0]);
      return true;
    }
    case OpKind::EngramGate: {  // smelt.engram after the gather, on the joined rows
      const int n = int(op.i("hc_mult")), D = int(op.i("dim")), hd = int(op.i("head_dim")), cols = int(op.i("cols"));
      const DeviceWeight *wkv = weight(l, 0), *wscale = weight(l, 1), *qw = weight(l, 2), *kw = weight(l, 3);
      const int K = cols * hd, N = (n + 1) * D;
      const int rb = model_rounding(op);
      DevPtr kv = l.in[1];  // without wkv: already projected (smelt-split-engram)
      if (wkv) {
        kv = c.scratch(uint64_t(rows) * N * 4);
        linear(c, l.in[1], kv, wkv, wscale, rows, K, N, rb != 0, 1.f, rb, "wkv");
      }
      engram_gate(c, kv, qw, kw, n, D, rb);
      return true;
    }
    case OpKind::HcMean: {
      const int D = int(l.out_w[0]);
      c.go("smelt_hc_mean", cdiv(D, 256), R, 1, 256, 0, l.in[0], int(op.i("hc_mult")), D, model_rounding(op), l.out[0]);
      return true;
    }
    case OpKind::Capture:
      return true;  // the backend copies the rows to the host capture table (it owns device->host copies)
    case OpKind::Concat: {
      const int W = int(l.out_w[0]);
      int off = 0;
      for (int k = 0; k < 4 && l.in[k]; ++k) {
        const int w = int(l.in_w[k]);
        c.go("smelt_copy_cols", cdiv(w, 256), R, 1, 256, 0, l.in[k], w, l.out[0], W, off);
        off += w;
      }
      return true;
    }
    default:
      return false;
  }
}

}  // namespace smelt::runtime::cuda::detail
