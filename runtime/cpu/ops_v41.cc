// The cpu handlers of the DeepSeek-V4.1 ops (docs/ops.md, section DeepSeek-V4.1) and the V4.1 forms of
// linear / grouped_linear / swiglu_mlp (quantized weights). Plan validation (op_checks.cc) has checked every
// width, dtype and attribute; handlers check the values that arrive at run time (hash ids, candidate blocks,
// token ids) before they index with them.
#include <algorithm>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/hc/reference.h"
#include "kernels/quant/reference.h"
#include "runtime/cpu/backend.h"

namespace smelt::runtime::cpu {

namespace {

[[noreturn]] void fail(const PreparedOp& p, const std::string& msg) { p.plan->fail(*p.ref, msg); }

void check_range(const PreparedOp& p, int64_t v, int64_t lo, int64_t hi, const char* what) {
  if (v < lo || v >= hi)
    fail(p, std::string(what) + " " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                std::to_string(hi) + ")");
}

enum FakeQuantMode { kFp8E4m3B32, kFp4G16E4m3, kFp4B32Ue8m0 };

void run_fake_quant(const PreparedOp& p, const ExecContext& c) {
  const int64_t width = p.in_w[0], seg = width / p.heads;
  if (p.out[0] != p.in[0]) std::memcpy(p.out[0], p.in[0], size_t(c.rows) * size_t(width) * sizeof(float));
  for (int64_t r = 0; r < c.rows; ++r)
    for (int h = 0; h < p.heads; ++h) {
      float* x = p.out[0] + r * width + h * seg;
      switch (p.fq_mode) {
        case kFp8E4m3B32: kernels::quant::qdq_window_kv(x, p.fq_channels); break;
        case kFp4G16E4m3: kernels::quant::qdq_compressed_kv(x, p.fq_channels); break;
        default: kernels::quant::qdq_index(x, p.fq_channels); break;
      }
    }
}

void run_kv_compressor(const PreparedOp& p, const ExecContext& c) {
  int64_t capacity = p.state_rows[1];
  if (p.state[2]) capacity = std::min(capacity, p.state_rows[2]);
  kernels::kv_compressor_v41(p.kv_compressor, p.in[0], c.rows, c.p0, p.state[0], p.state[1], p.state[2], capacity);
}

void run_indexer_v41(const PreparedOp& p, const ExecContext& c) {
  kernels::IndexerV41Args a = p.indexer_v41;
  a.rows = c.rows;
  a.p0 = c.p0;
  if (a.cand_in) {  // block ids from the candidate source: -1 or a block of the visible entries
    const int64_t blocks = (p.state_rows[0] + a.candidate_block_size - 1) / a.candidate_block_size;
    for (int64_t k = 0, n = int64_t(c.rows) * a.candidate_blocks; k < n; ++k)
      check_range(p, a.cand_in[k], -1, blocks, "candidate block");
  }
  kernels::indexer_v41(a, p.out_i[0], p.out_i[1]);
}

// The TP halves of both indexers: a rank's partial scores, and the selection on the all-reduced scores.
void run_indexer_scores(const PreparedOp& p, const ExecContext& c) {
  kernels::IndexerScoresArgs a = p.indexer_scores;
  a.rows = c.rows;
  a.p0 = c.p0;
  kernels::indexer_scores(a, p.out[0]);
}

void run_indexer_select(const PreparedOp& p, const ExecContext& c) {
  kernels::IndexerSelectArgs a = p.indexer_select;
  a.rows = c.rows;
  a.p0 = c.p0;
  if (a.cand_in) {  // block ids from the candidate source: -1 or a block of the scored entries
    const int64_t blocks = (a.width + a.candidate_block_size - 1) / a.candidate_block_size;
    for (int64_t k = 0, n = int64_t(c.rows) * a.candidate_blocks; k < n; ++k)
      check_range(p, a.cand_in[k], -1, blocks, "candidate block");
  }
  kernels::indexer_select(a, p.out_i[0], p.out_i[1]);
}

// Engram hash ids. The history state keeps each position's compressed id at row pos % R (R >= max_ngram-1),
// so the look-backs of a chunk are read from it before the chunk's own ids are stored.
void run_engram_hash(const PreparedOp& p, const ExecContext& c) {
  const int64_t R = p.state_rows[0], n_back = p.hash_layout.max_ngram - 1;
  std::vector<int64_t> compressed(size_t(c.rows));
  for (int r = 0; r < c.rows; ++r) {
    int64_t id = p.in_i[0][r];
    if (p.w_i[0]) {
      check_range(p, id, 0, p.w_rows[0], "token id (Engram token map)");
      id = p.w_i[0][id];
    }
    check_range(p, id, 0, p.hash_vocab, "compressed token id");
    compressed[size_t(r)] = id;
  }
  kernels::engram::EngramHistory history;
  for (int64_t pos = std::max<int64_t>(0, c.p0 - n_back); pos < c.p0; ++pos)
    history.recent.push_back(int64_t(p.state[0][pos % R]));
  const int cols = p.hash_layout.layers() * p.hash_layout.cols();
  std::vector<int64_t> out(size_t(c.rows) * size_t(cols));
  kernels::engram::engram_hash(p.hash_layout, compressed.data(), c.rows, p.hash_pad, history, out.data());
  for (size_t k = 0; k < out.size(); ++k) {
    check_range(p, out[k], 0, int64_t(1) << 31, "Engram hash id");
    p.out_i[0][k] = int32_t(out[k]);
  }
  for (int r = 0; r < c.rows; ++r) p.state[0][(c.p0 + r) % R] = float(compressed[size_t(r)]);
}

void run_engram(const PreparedOp& p, const ExecContext& c) {
  kernels::engram::EngramArgs a = p.engram;
  a.rows = c.rows;
  a.hashes = p.in_i[1] + int64_t(p.layer_index) * a.cols;  // this layer's column block
  for (int r = 0; r < c.rows; ++r)
    for (int k = 0; k < a.cols; ++k) check_range(p, a.hashes[int64_t(r) * a.hash_stride + k], 0, a.table_rows, "Engram row");
  kernels::engram::engram_forward(a, p.in[0], p.out[0]);
}

// The TP halves of run_engram: the rank's rows of the table (hash ids checked against the whole table), then
// the gate on the joined rows.
void run_engram_lookup(const PreparedOp& p, const ExecContext& c) {
  kernels::engram::EngramArgs a = p.engram;
  a.rows = c.rows;
  a.hashes = p.in_i[0] + int64_t(p.layer_index) * a.cols;
  for (int r = 0; r < c.rows; ++r)
    for (int k = 0; k < a.cols; ++k) check_range(p, a.hashes[int64_t(r) * a.hash_stride + k], 0, a.rows_total, "Engram row");
  kernels::engram::engram_lookup(a, p.out[0]);
}

void run_engram_gate(const PreparedOp& p, const ExecContext& c) {
  kernels::engram::EngramArgs a = p.engram;
  a.rows = c.rows;
  kernels::engram::engram_gate(a, p.in[1], p.in[0], p.out[0]);
}

// mean over the hc copies in fp32 (copy order), rounded to bf16 like the reference's bf16 mean.
void run_hc_mean(const PreparedOp& p, const ExecContext& c) {
  const int64_t d = p.out_w[0], n = p.hc_mult;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t i = 0; i < d; ++i) {
      float s = 0.f;
      for (int64_t k = 0; k < n; ++k) s += p.in[0][(r * n + k) * d + i];
      p.out[0][r * d + i] = kernels::round_bf16_if(p.model_numerics, s / float(n));
    }
}

void run_capture(const PreparedOp& p, const ExecContext& c) {
  if (c.captures) c.captures->append(p.capture_name, p.capture_shape, p.in[0], c.rows, p.in_w[0]);
}

}  // namespace

// The EngramArgs of the lookup part (the table and its scale at weights w0, w0 + 1; the hash ids at input `hash_in`)
// and of the gate part (wkv, its scale, q / k norm weights at w0 .. w0 + 3), shared by smelt.engram and its TP split.
static void engram_lookup_args(const OpRef& op, PreparedOp& p, size_t w0, size_t hash_in) {
  kernels::engram::EngramArgs& a = p.engram;
  a.head_dim = int(op.i("head_dim"));
  a.cols = int(op.i("cols"));
  a.table = p.w_raw[w0];
  a.table_scale = p.w_raw[w0 + 1];
  a.table_rows = p.w_rows[w0];
  a.hash_stride = int(p.in_w[hash_in]);
  a.model_numerics = p.model_numerics;
  p.layer_index = int(op.i("layer_index"));
}
static void engram_gate_args(const OpRef& op, PreparedOp& p, size_t w0) {
  kernels::engram::EngramArgs& a = p.engram;
  a.hc_mult = int(op.i("hc_mult"));
  a.dim = int(op.i("dim"));
  a.head_dim = int(op.i("head_dim"));
  a.cols = int(op.i("cols"));
  a.eps = float(op.f("eps"));
  a.wkv = p.w_raw[w0];
  a.wkv_scale = p.w_raw[w0 + 1];
  a.q_weight = p.w[w0 + 2];
  a.k_weight = p.w[w0 + 3];
  a.model_numerics = p.model_numerics;
}

void prepare_op_v41(const Plan& plan, const OpRef& op, PreparedOp& p) {
  auto q = [&](size_t j) { return quant_weight(plan, op.weights[j], p.w_raw[j], op.weights[j + 1], p.w_raw[j + 1]); };
  switch (op.spec->kind) {
    case OpKind::Linear:
      if (p.w_raw[0]) p.qw = q(0);
      p.act_quant = !op.s("act_quant").empty();
      p.scale_after = float(op.f("scale_after"));
      break;
    case OpKind::GroupedLinear:
      if (p.w_raw[0]) {  // FP8 wo_a: dequantized exactly once (the reference's convert.py does the same)
        std::vector<int64_t> w = plan.weight_shape(op.weights[0]);
        p.owned.resize(size_t(w[0] * w[1]));
        kernels::QuantWeight qw = q(0);
        kernels::quant::dequant_fp8_weight(qw.weight, qw.scale, w[0], w[1], qw.block, p.owned.data());
        p.w[0] = p.owned.data();
      }
      break;
    case OpKind::SwigluMlp:
      if (op.scaled) p.q1 = {q(0)}, p.q2 = {q(2)}, p.q3 = {q(4)};
      break;
    case OpKind::FakeQuant: {
      p.run = run_fake_quant;
      const std::string& mode = op.s("mode");
      p.fq_mode = mode == "fp8_e4m3_b32" ? kFp8E4m3B32 : mode == "fp4_e2m1_g16_e4m3" ? kFp4G16E4m3 : kFp4B32Ue8m0;
      p.heads = int(op.i("heads"));
      p.fq_channels = int(op.i("channels") ? op.i("channels") : p.in_w[0] / p.heads);
      break;
    }
    case OpKind::KvCompressor: {
      p.run = run_kv_compressor;
      p.inv_freq = inv_freq(op, true);
      kernels::KvCompressorV41Args& a = p.kv_compressor;
      a.ratio = int(op.i("ratio"));
      a.head_dim = int(op.i("head_dim"));
      a.index_head_dim = int(op.i("index_head_dim"));
      a.rope_dim = int(op.i("rope_dim"));
      a.in_dim = int(p.in_w[0]);
      a.wkv = p.w[0];
      a.wgate = p.w[1];
      a.norm = p.w[2];
      a.wk = p.w[3];
      a.k_norm = p.w[4];
      a.eps = float(op.f("eps"));
      a.inv_freq = p.inv_freq.data();
      a.ring_rows = p.state[0] ? int(p.state_rows[0]) : 0;
      a.model_numerics = p.model_numerics;
      break;
    }
    case OpKind::IndexerV41: {
      p.run = run_indexer_v41;
      kernels::IndexerV41Args& a = p.indexer_v41;
      a.heads = int(op.i("heads"));
      a.head_dim = int(op.i("head_dim"));
      a.ratio = int(op.i("ratio"));
      a.topk = int(op.i("topk"));
      a.q = p.in[0];
      a.w = p.in[1];
      a.keys = p.state[0];
      a.candidate_blocks = int(op.i("candidate_blocks"));
      a.candidate_block_size = int(op.i("candidate_block_size"));
      a.is_candidate_source = op.i("is_candidate_source") != 0;
      a.cand_in = p.in_i[2];
      a.model_numerics = p.model_numerics;
      break;
    }
    case OpKind::IndexerScores: {
      p.run = run_indexer_scores;
      kernels::IndexerScoresArgs& a = p.indexer_scores;
      a.heads = int(op.i("heads"));
      a.head_dim = int(op.i("head_dim"));
      a.ratio = int(op.i("ratio"));
      a.width = p.out_w[0];
      a.q = p.in[0];
      a.w = p.in[1];
      a.keys = p.state[0];
      a.v41 = op.s("variant") == "v41";
      a.heads_total = int(op.i("heads_total"));
      a.model_numerics = p.model_numerics;
      break;
    }
    case OpKind::IndexerSelect: {
      p.run = run_indexer_select;
      kernels::IndexerSelectArgs& a = p.indexer_select;
      a.ratio = int(op.i("ratio"));
      a.topk = int(op.i("topk"));
      a.width = p.in_w[0];
      a.scores = p.in[0];
      a.v41 = op.s("variant") == "v41";
      a.candidate_blocks = int(op.i("candidate_blocks"));
      a.candidate_block_size = int(op.i("candidate_block_size"));
      a.is_candidate_source = op.i("is_candidate_source") != 0;
      a.cand_in = p.in_i[1];
      break;
    }
    case OpKind::EngramHash: {
      p.run = run_engram_hash;
      kernels::engram::EngramHashConfig cfg;
      for (int64_t l : op.ints("layers")) cfg.layer_ids.push_back(int(l));
      cfg.vocab_size = op.i("vocab");
      cfg.max_ngram = int(op.i("max_ngram"));
      cfg.n_heads = int(op.i("heads"));
      cfg.compressed_vocab_size = op.i("compressed_vocab");
      try {
        p.hash_layout = kernels::engram::make_hash_layout(cfg);
      } catch (const Error& e) {
        plan.fail(op, std::string("the Engram hash layout: ") + e.what());
      }
      p.hash_vocab = cfg.compressed_vocab_size;
      p.hash_pad = op.i("pad_id");
      if (p.w_i[0]) {  // the token map is data: its ids are checked once here
        for (int64_t k = 0; k < p.w_rows[0]; ++k)
          if (p.w_i[0][k] < 0 || p.w_i[0][k] >= p.hash_vocab)
            plan.fail(op, "token_map maps token " + std::to_string(k) + " to " + std::to_string(p.w_i[0][k]) +
                              ", outside the compressed vocab [0, " + std::to_string(p.hash_vocab) + ")");
        p.hash_pad = p.w_i[0][p.hash_pad];
      }
      break;
    }
    case OpKind::Engram:  // lookup + gate in one op: the table at weights 0-1, the gate's weights at 2-5
      p.run = run_engram;
      engram_lookup_args(op, p, 0, 1);
      engram_gate_args(op, p, 2);
      break;
    case OpKind::EngramLookup:  // a TP rank's rows of the table (smelt-partition)
      p.run = run_engram_lookup;
      engram_lookup_args(op, p, 0, 0);
      p.engram.row_begin = op.i("row_begin");
      p.engram.rows_total = op.i("rows_total");
      break;
    case OpKind::EngramGate:
      p.run = run_engram_gate;
      engram_gate_args(op, p, 0);
      break;
    case OpKind::HcMean:
      p.run = run_hc_mean;
      p.hc_mult = int(op.i("hc_mult"));
      break;
    case OpKind::Capture:
      p.run = run_capture;
      p.capture_name = op.s("name");
      p.capture_shape = op.ints("row_shape");
      break;
    default:
      prepare_op_dspark(plan, op, p);
      break;
  }
}

}  // namespace smelt::runtime::cpu
