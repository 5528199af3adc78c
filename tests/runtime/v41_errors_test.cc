// V4.1 plans that are wrong are refused at load with one sentence naming the op and what is wrong; values that
// arrive at run time are checked before they index.
#include <gtest/gtest.h>

#include "tests/runtime/v41_util.h"

namespace smelt::runtime {
namespace {

using testing::F;
using testing::I;
using testing::N;
using testing::S;
using testing::TempDir;
using testing::V41Scaffold;

template <typename Fn>
std::string error_of(Fn&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A scaffold plan (D = 64) whose last op writes the logits [T, width]; `add` builds that op.
template <typename Add>
std::string load_error(int width, Add add) {
  V41Scaffold m(13, 64);
  m.b.logits = m.b.buffer("logits", width);
  add(m);
  TempDir dir;
  return error_of([&] { Plan::from_bytes(m.b.file(dir.str()), "v41.smelt"); });
}

#define EXPECT_ERROR(msg, text) \
  EXPECT_NE((msg).find(text), std::string::npos) << "message: " << (msg)

TEST(V41Errors, ValidQuantizedLinearLoads) {
  std::string e = load_error(32, [](V41Scaffold& m) {
    int w = m.b.raw_weight("w.weight", {32, 64}, DType::F8_E4M3, testing::e4m3_codes(32 * 64, m.u));
    int s = m.b.raw_weight("w.scale", {1, 2}, DType::F8_E8M0, testing::e8m0_codes(2, m.u));
    m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {w, s}, {}, {S("act_quant", "fp8_e4m3_b32")}});
  });
  EXPECT_EQ(e, "");
}

TEST(V41Errors, QuantizedLinears) {
  auto fp8 = [](V41Scaffold& m, std::vector<int64_t> scale_shape) {
    int w = m.b.raw_weight("w.weight", {32, 64}, DType::F8_E4M3, testing::e4m3_codes(32 * 64, m.u));
    int64_t n = scale_shape[0] * scale_shape[1];
    int s = m.b.raw_weight("w.scale", scale_shape, DType::F8_E8M0, testing::e8m0_codes(size_t(n), m.u));
    return std::pair{w, s};
  };
  // FP8 weight without its scale.
  EXPECT_ERROR(load_error(32, [&](V41Scaffold& m) {
                 auto [w, s] = fp8(m, {1, 2});
                 m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {w, -1}, {}, {}});
               }),
               "op 1 (smelt.linear, layer 0): weight 0 (w.weight) is quantized (F8_E4M3) but has no scale");
  // Scales that fit no power-of-two block.
  EXPECT_ERROR(load_error(32, [&](V41Scaffold& m) {
                 auto [w, s] = fp8(m, {3, 3});
                 m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {w, s}, {}, {}});
               }),
               "which is no power-of-two block (>= 32) of the [32, 64] FP8 weight");
  // act_quant on a float weight.
  EXPECT_ERROR(load_error(32, [&](V41Scaffold& m) {
                 int w = m.w("w.weight", {32, 64});
                 m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {w}, {}, {S("act_quant", "fp8_e4m3_b32")}});
               }),
               "act_quant needs FP8 / FP4 weights, but weight 0 (w.weight) is BF16");
  // An unknown act_quant, a scale that is not E8M0, a quantized weight where a float one is needed.
  EXPECT_ERROR(load_error(32, [&](V41Scaffold& m) {
                 auto [w, s] = fp8(m, {1, 2});
                 m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {w, s}, {}, {S("act_quant", "int8")}});
               }),
               "attribute act_quant = 'int8' is not one of: fp8_e4m3_b32");
  EXPECT_ERROR(load_error(32, [&](V41Scaffold& m) {
                 auto [w, s] = fp8(m, {1, 2});
                 m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {w, w}, {}, {}});
               }),
               "weight 1 (weight.scale) is weight 1 of dtype F8_E4M3, expected F8_E8M0 (block scales)");
  EXPECT_ERROR(load_error(64, [&](V41Scaffold& m) {
                 int w = m.b.raw_weight("n.weight", {64}, DType::F8_E4M3, testing::e4m3_codes(64, m.u));
                 m.b.op({"smelt.rms_norm", 0, {m.x}, {m.b.logits}, {w}, {}, {F("eps", 1e-6)}});
               }),
               "is weight 1 of dtype F8_E4M3, expected a float type");
  // Packed FP4 with the wrong packed width for the input.
  EXPECT_ERROR(load_error(16, [&](V41Scaffold& m) {
                 int w = m.b.raw_weight("w.weight", {16, 16}, DType::I8, testing::random_bytes(256, m.u));
                 int s = m.b.raw_weight("w.scale", {16, 2}, DType::F8_E8M0, testing::e8m0_codes(32, m.u));
                 m.b.op({"smelt.linear", 0, {m.x}, {m.b.logits}, {w, s}, {}, {S("act_quant", "fp8_e4m3_b32")}});
               }),
               "weight 0 (w.weight) has shape [16, 16], expected [16, 32]");
}

// smelt.engram_gate without wkv (smelt-split-engram): e is the projected keys and value, (hc_mult + 1) x dim.
TEST(V41Errors, EngramGateWithoutWkv) {
  auto gate = [](int e_width, bool scale) {
    return [=](V41Scaffold& m) {
      int e = m.b.buffer("kv", e_width);
      int qw = m.w("q.weight", {1, 64}), kw = m.w("k.weight", {1, 64});
      int s = scale ? m.b.raw_weight("wkv.scale", {4, 1}, DType::F8_E8M0, testing::e8m0_codes(4, m.u)) : -1;
      m.b.op({"smelt.linear", 0, {m.x}, {e}, {m.w("p.weight", {e_width, 64})}, {}, {}});
      m.b.op({"smelt.engram_gate", 0, {m.x, e}, {m.b.logits}, {-1, s, qw, kw}, {},
              {I("hc_mult", 1), I("dim", 64), I("head_dim", 32), I("cols", 1), F("eps", 1e-6)}});
    };
  };
  EXPECT_EQ(load_error(64, gate(128, false)), "");
  EXPECT_ERROR(load_error(64, gate(96, false)),
               "op 2 (smelt.engram_gate, layer 0): input 1 has row_elems 96, expected 128 (the projected keys and value, (hc_mult + 1) x dim)");
  EXPECT_ERROR(load_error(64, gate(128, true)), "(smelt.engram_gate, layer 0): has wkv_scale without wkv");
}

TEST(V41Errors, Attributes) {
  EXPECT_ERROR(load_error(64, [](V41Scaffold& m) {
                 m.b.op({"smelt.rms_norm", 0, {m.x}, {m.b.logits}, {-1}, {}, {F("eps", 1e-6), S("round", "fp16")}});
               }),
               "attribute round = 'fp16' is not one of: bf16");
  EXPECT_ERROR(load_error(64, [](V41Scaffold& m) {
                 m.b.op({"smelt.fake_quant", 0, {m.x}, {m.b.logits}, {}, {}, {S("mode", "fp6")}});
               }),
               "attribute mode = 'fp6' is not one of");
  EXPECT_ERROR(load_error(64, [](V41Scaffold& m) {
                 m.b.op({"smelt.fake_quant", 0, {m.x}, {m.b.logits}, {}, {},
                         {S("mode", "fp4_e2m1_b32_ue8m0"), I("heads", 4)}});
               }),
               "quantizes groups of 32, but each head has 16 quantized channels");
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 int gate = m.w("gate", {4, 64});
                 int w = m.b.buffer("w", 2), i = m.b.buffer("i", 2, plan::DType::I32);
                 m.b.op({"smelt.moe_route", 0, {m.x, -1}, {w, i}, {gate, -1, -1}, {},
                         {I("topk", 2), S("scoring", "sqrtsoftplus"), F("gate_temp", 2.0)}});
               }),
               "gate_temp = 2.000000: the cpu kernels support only 1");
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 m.b.op({"smelt.capture", 0, {m.x}, {}, {}, {}, {S("name", "x"), N("row_shape", {4, 4})}});
               }),
               "attribute row_shape has 16 elements, the input 64");
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 m.b.op({"smelt.capture", 0, {m.x}, {}, {}, {}, {S("name", "x"), I("row_shape", 64)}});
               }),
               "attribute 'row_shape' must be integer list (ints)");
}

TEST(V41Errors, StateOps) {
  // A ratio-2 compressor needs its gate weight and ring.
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 int wkv = m.w("wkv", {32, 64}), norm = m.w("norm", {32});
                 int pool = m.b.state("pool", "compressed_pool", 0, {16, 32});
                 m.b.op({"smelt.kv_compressor", 0, {m.x}, {}, {wkv, -1, norm, -1, -1}, {-1, pool, -1},
                         {I("ratio", 2), I("head_dim", 32), I("index_head_dim", 0), F("eps", 1e-6), I("rope_dim", 8),
                          F("theta", 1e4)}});
               }),
               "ratio 2 needs a wgate weight, ratio 1 takes none");
  // Index keys need wk, k_norm and the index pool together.
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 int wkv = m.w("wkv", {32, 64}), norm = m.w("norm", {32}), wk = m.w("wk", {16, 32});
                 int pool = m.b.state("pool", "compressed_pool", 0, {32, 32});
                 m.b.op({"smelt.kv_compressor", 0, {m.x}, {}, {wkv, -1, norm, wk, -1}, {-1, pool, -1},
                         {I("ratio", 1), I("head_dim", 32), I("index_head_dim", 16), F("eps", 1e-6), I("rope_dim", 8),
                          F("theta", 1e4)}});
               }),
               "index keys need all of wk, k_norm and the index_pool state (or none)");
  // Only a candidate source writes candidate blocks.
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 int w = m.b.buffer("w", 2), idx = m.b.buffer("idx", 4, plan::DType::I32);
                 int cand = m.b.buffer("cand", 2, plan::DType::I32);
                 int ip = m.b.state("ip", "index_pool", 0, {32, 32});
                 m.b.op({"smelt.indexer_v41", 0, {m.x, w, -1}, {idx, cand}, {}, {ip},
                         {I("heads", 2), I("head_dim", 32), I("ratio", 1), I("topk", 4), I("candidate_blocks", 2),
                          I("candidate_block_size", 4)}});
               }),
               "only a candidate source (is_candidate_source 1) writes cand_out");
  // Compressed ids are kept in F32 state: the compressed vocab must stay below 2^24.
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 int h = m.b.buffer("h", 6, plan::DType::I32);
                 int hist = m.b.state("hist", "engram_history", 0, {4, 1});
                 m.b.op({"smelt.engram_hash", -1, {m.b.token_ids}, {h}, {-1}, {hist},
                         {N("layers", {1}), I("vocab", 61), I("heads", 2), I("max_ngram", 4),
                          I("compressed_vocab", int64_t(1) << 25), I("pad_id", 2)}});
               }),
               "attribute compressed_vocab = 33554432 is outside [1, 16777216]");
  EXPECT_ERROR(load_error(13, [](V41Scaffold& m) {
                 int h = m.b.buffer("h", 6, plan::DType::I32);
                 int hist = m.b.state("hist", "engram_history", 0, {2, 1});
                 m.b.op({"smelt.engram_hash", -1, {m.b.token_ids}, {h}, {-1}, {hist},
                         {N("layers", {1}), I("vocab", 61), I("heads", 2), I("max_ngram", 4), I("compressed_vocab", 16),
                          I("pad_id", 2)}});
               }),
               "state 0 has shape [2, 1], expected [>= 3, 1]");
}

TEST(V41Errors, RunTimeValues) {
  // A token id outside the Engram token map is refused before it indexes the map.
  V41Scaffold m(13, 8);
  int map = m.b.int_weight("token_map", {5}, {0, 1, 2, 3, 4});
  int h = m.b.buffer("h", 6, plan::DType::I32);
  int hist = m.b.state("hist", "engram_history", 0, {4, 1});
  m.b.op({"smelt.engram_hash", -1, {m.b.token_ids}, {h}, {map}, {hist},
          {N("layers", {1}), I("vocab", 61), I("heads", 2), I("max_ngram", 4), I("compressed_vocab", 16), I("pad_id", 2)}});
  int head = m.w("head", {13, 8});
  m.b.logits = m.b.buffer("logits", 13);
  m.b.op({"smelt.linear", -1, {m.x}, {m.b.logits}, {head}, {}, {}});
  TempDir dir;
  auto s = m.open(dir);
  EXPECT_NO_THROW(s->prefill(std::vector<int32_t>{1, 4, 0}));
  std::string e = error_of([&] { s->prefill(std::vector<int32_t>{2, 9}); });
  EXPECT_ERROR(e, "(smelt.engram_hash, layer -1): token id (Engram token map) 9 is outside [0, 5)");
}

}  // namespace
}  // namespace smelt::runtime
