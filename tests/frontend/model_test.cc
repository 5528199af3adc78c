// Tensor layouts: the same random weights written in the official, transformers (module) and
// transformers-saved layouts resolve to identical canonical views; missing, misshapen, mistyped and
// unexpected tensors are errors naming the file and the tensor.
//
// The oracle for names and shapes is fixtures/transformers_tiny, recorded from transformers 5.17 itself:
// module_tensors.json (its parameters), saved_tensors.json (what save_pretrained writes) and
// saved_from_module.json (which parameter, expert and gate/up half each saved tensor came from).
#include "frontends/model.h"

#include <nlohmann/json.hpp>

#include "tests/frontend/test_util.h"

namespace smelt {
namespace {

using test::OwnedTensor;
using test::TempDir;
using json = nlohmann::json;

const std::string kFixtures = std::string(SMELT_FRONTEND_FIXTURES) + "/transformers_tiny";

json fixture(const std::string& name) { return json::parse(test::read_file(kFixtures + "/" + name)); }

// Official (release) name of a tensor as save_pretrained writes it: the release names under "model.",
// except the globals and attn.kv_norm (release names per the architecture spec, sections 3.3 and 7).
std::string official_from_saved(const std::string& s) {
  static const std::map<std::string, std::string> globals = {
      {"head.weight", "head.weight"},        {"model.embed_tokens.weight", "embed.weight"},
      {"model.norm.weight", "norm.weight"},  {"model.hc_head.hc_fn", "hc_head_fn"},
      {"model.hc_head.hc_base", "hc_head_base"}, {"model.hc_head.hc_scale", "hc_head_scale"}};
  if (globals.count(s)) return globals.at(s);
  EXPECT_EQ(s.rfind("model.layers.", 0), 0u) << s;
  std::string o = s.substr(6);
  size_t dot = o.find('.', 7);
  if (o.substr(dot + 1) == "attn.norm.weight") o = o.substr(0, dot + 1) + "attn.kv_norm.weight";
  return o;
}

// One set of random weights in the three layouts.
struct Layouts {
  std::vector<OwnedTensor> module, saved, official;
};

Layouts make_layouts(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Layouts l;
  std::map<std::string, const OwnedTensor*> by_name;
  json mod = fixture("module_tensors.json");
  l.module.reserve(mod.size());
  for (auto& [name, spec] : mod.items()) {
    l.module.push_back(test::random_tensor(name, *parse_dtype(spec["dtype"].get<std::string>()),
                                           spec["shape"].get<std::vector<int64_t>>(), rng));
    by_name[name] = &l.module.back();
  }
  json saved = fixture("saved_tensors.json");
  json from = fixture("saved_from_module.json");
  EXPECT_EQ(saved.size(), from.size());
  for (auto& [name, spec] : saved.items()) {
    const json& src = from.at(name);
    const OwnedTensor& m = *by_name.at(src["module"].get<std::string>());
    OwnedTensor t{name, *parse_dtype(spec["dtype"].get<std::string>()), spec["shape"].get<std::vector<int64_t>>(), {}};
    EXPECT_EQ(t.dtype, m.dtype) << name;
    size_t n = test::byte_count(t.dtype, t.shape), at = 0;
    if (src.contains("expert")) {  // a slice of the fused [E, 2F, D] or [E, D, F] parameter
      size_t e = src["expert"].get<size_t>(), per_expert = m.bytes.size() / size_t(m.shape[0]);
      at = e * per_expert + (src["part"] == "up" ? per_expert / 2 : 0);
      EXPECT_EQ(n, src["part"] == "down" ? per_expert : per_expert / 2) << name;
    } else {
      EXPECT_EQ(n, m.bytes.size()) << name;
    }
    t.bytes.assign(m.bytes.begin() + at, m.bytes.begin() + at + n);
    l.saved.push_back(t);
    t.name = official_from_saved(name);
    l.official.push_back(std::move(t));
  }
  return l;
}

void write_model(const TempDir& dir, const std::string& config_text, const std::vector<OwnedTensor>& ts) {
  test::write_file(dir / "config.json", config_text);
  test::write_tensors(dir / "model.safetensors", ts);
}

std::vector<OwnedTensor> without(std::vector<OwnedTensor> ts, const std::string& name) {
  auto it = std::find_if(ts.begin(), ts.end(), [&](const OwnedTensor& t) { return t.name == name; });
  EXPECT_NE(it, ts.end()) << name;
  if (it != ts.end()) ts.erase(it);
  return ts;
}

OwnedTensor& find(std::vector<OwnedTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return t;
  throw std::runtime_error("no " + name);
}

void replace_once(std::string& s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
}

const std::string kLegacyConfig = test::read_file(kFixtures + "/config_legacy.json");
const std::string kSavedConfig = test::read_file(kFixtures + "/config_saved.json");

TEST(FrontendModel, ThreeLayoutsGiveIdenticalCanonicalViews) {
  Layouts l = make_layouts(11);
  TempDir official, module, saved;
  write_model(official, kLegacyConfig, l.official);
  write_model(module, kSavedConfig, l.module);
  write_model(saved, kSavedConfig, l.saved);
  ModelDescription o = load_model(official.path), m = load_model(module.path), s = load_model(saved.path);
  EXPECT_EQ(o.layout, TensorLayout::Official);
  EXPECT_EQ(m.layout, TensorLayout::Transformers);
  EXPECT_EQ(s.layout, TensorLayout::TransformersSaved);
  EXPECT_EQ(o.config, m.config);

  // Every canonical tensor the config implies, and nothing else (load_model refuses leftovers).
  auto expected = expected_tensors(o.config);
  EXPECT_EQ(o.tensors.size(), expected.size());
  EXPECT_EQ(o.tensors.size(), l.official.size());
  for (const auto& e : expected) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(o.has(e.name) && m.has(e.name) && s.has(e.name));
    const TensorInfo &a = o.tensor(e.name), &b = m.tensor(e.name), &c = s.tensor(e.name);
    EXPECT_EQ(a.shape, e.shape);
    EXPECT_EQ(b.shape, e.shape);
    EXPECT_EQ(c.shape, e.shape);
    EXPECT_EQ(a.dtype, b.dtype);
    auto ba = o.checkpoint.bytes(a), bb = m.checkpoint.bytes(b), bc = s.checkpoint.bytes(c);
    EXPECT_TRUE(std::equal(ba.begin(), ba.end(), bb.begin(), bb.end()));
    EXPECT_TRUE(std::equal(ba.begin(), ba.end(), bc.begin(), bc.end()));
    // Views point into the mapping (zero copy), also the per-expert slices of the fused tensors.
    const auto& map = *m.checkpoint.files()[b.file].mapping();
    EXPECT_GE(bb.data(), map.data());
    EXPECT_LE(bb.data() + bb.size(), map.data() + map.size());
  }
  EXPECT_EQ(m.source_names.at("layers.1.attn.kv_norm.weight"), "model.layers.1.self_attn.kv_norm.weight");
  EXPECT_EQ(m.source_names.at("layers.1.ffn.experts.2.w3.weight"), "model.layers.1.mlp.experts.gate_up_proj");
  EXPECT_EQ(s.source_names.at("layers.1.attn.kv_norm.weight"), "model.layers.1.attn.norm.weight");
  EXPECT_EQ(o.source_names.at("hc_head_fn"), "hc_head_fn");
  EXPECT_SMELT_ERROR(o.tensor("layers.9.attn.wq_a.weight"), official.path, "'layers.9.attn.wq_a.weight'");
}

TEST(FrontendModel, MissingTensor) {
  Layouts l = make_layouts(12);
  TempDir a, b, c, d;
  write_model(a, kLegacyConfig, without(l.official, "layers.3.attn.wq_b.weight"));
  EXPECT_SMELT_ERROR(load_model(a.path), a.path + ": missing tensor 'layers.3.attn.wq_b.weight'");
  write_model(b, kSavedConfig, without(l.module, "model.layers.3.self_attn.q_b_proj.weight"));
  EXPECT_SMELT_ERROR(load_model(b.path),
                     b.path + ": missing tensor 'layers.3.attn.wq_b.weight' (transformers name "
                              "'model.layers.3.self_attn.q_b_proj.weight')");
  write_model(c, kSavedConfig, without(l.saved, "model.layers.1.attn.norm.weight"));
  EXPECT_SMELT_ERROR(load_model(c.path), "missing tensor 'layers.1.attn.kv_norm.weight'",
                     "'model.layers.1.attn.norm.weight'");
  write_model(d, kSavedConfig, without(l.module, "model.layers.2.mlp.experts.gate_up_proj"));
  EXPECT_SMELT_ERROR(load_model(d.path), "missing tensor 'layers.2.ffn.experts.0.w1.weight'",
                     "model.layers.2.mlp.experts.gate_up_proj");
  TempDir e;
  test::write_tensors(e / "model.safetensors", l.official);
  EXPECT_SMELT_ERROR(load_model(e.path), "config.json", "cannot open");
}

TEST(FrontendModel, WrongShape) {
  Layouts l = make_layouts(13);
  TempDir a, b;
  auto off = l.official;
  find(off, "layers.3.attn.wq_b.weight").shape = {16, 64};  // transposed
  write_model(a, kLegacyConfig, off);
  EXPECT_SMELT_ERROR(load_model(a.path), "model.safetensors", "tensor 'layers.3.attn.wq_b.weight'",
                     "has shape [16, 64] but the config needs [64, 16]");
  auto mod = l.module;
  find(mod, "model.layers.0.mlp.experts.gate_up_proj").shape = {4, 24, 64};
  write_model(b, kSavedConfig, mod);
  EXPECT_SMELT_ERROR(load_model(b.path), "model.safetensors", "'model.layers.0.mlp.experts.gate_up_proj'",
                     "[4, 24, 64]", "[4, 48, 32]");
  // A config that disagrees with the weights: one more expert than stored.
  TempDir c;
  std::string cfg = kLegacyConfig;
  replace_once(cfg, "\"n_routed_experts\": 4", "\"n_routed_experts\": 5");
  write_model(c, cfg, l.official);
  EXPECT_SMELT_ERROR(load_model(c.path), "'layers.0.ffn.gate.weight'", "[4, 32]", "[5, 32]");
}

TEST(FrontendModel, WrongDTypeClass) {
  Layouts l = make_layouts(14);
  TempDir a, b;
  auto off = l.official;
  find(off, "layers.0.ffn.gate.tid2eid").dtype = DType::F64;  // same byte count as I64
  write_model(a, kLegacyConfig, off);
  EXPECT_SMELT_ERROR(load_model(a.path), "model.safetensors", "'layers.0.ffn.gate.tid2eid'", "F64", "integer");
  off = l.official;
  find(off, "layers.2.attn.attn_sink").dtype = DType::I32;
  write_model(b, kLegacyConfig, off);
  EXPECT_SMELT_ERROR(load_model(b.path), "'layers.2.attn.attn_sink'", "I32", "floating point");
  // tid2eid as I32 is fine (half the bytes).
  TempDir c;
  off = l.official;
  OwnedTensor& t = find(off, "layers.0.ffn.gate.tid2eid");
  t.dtype = DType::I32;
  t.bytes.resize(t.bytes.size() / 2);
  write_model(c, kLegacyConfig, off);
  EXPECT_EQ(load_model(c.path).tensor("layers.0.ffn.gate.tid2eid").dtype, DType::I32);
}

TEST(FrontendModel, UnexpectedTensorsAndMtp) {
  Layouts l = make_layouts(15);
  std::mt19937_64 rng(1);
  TempDir a, b;
  auto off = l.official;
  off.push_back(test::random_tensor("mtp.0.attn.wq_a.weight", DType::F32, {16, 32}, rng));  // ignored
  write_model(a, kLegacyConfig, off);
  EXPECT_NO_THROW(load_model(a.path));
  off.push_back(test::random_tensor("layers.2.attn.compressor.ape", DType::F32, {4, 32}, rng));  // layer 2 is sliding
  write_model(b, kLegacyConfig, off);
  EXPECT_SMELT_ERROR(load_model(b.path), "model.safetensors", "unexpected tensor 'layers.2.attn.compressor.ape'");
}

TEST(FrontendModel, QuantizedOfficialWeights) {
  Layouts l = make_layouts(16);
  std::mt19937_64 rng(2);
  auto off = without(without(l.official, "layers.0.attn.wq_a.weight"), "layers.0.ffn.experts.1.w2.weight");
  // FP8 wq_a [16, 32] with 8x8 blocks -> scale [2, 4]; FP4 expert w2 [32, 24] -> I8 [32, 12] + scale [32, 1].
  off.push_back(test::random_tensor("layers.0.attn.wq_a.weight", DType::F8_E4M3, {16, 32}, rng));
  off.push_back(test::random_tensor("layers.0.attn.wq_a.scale", DType::F8_E8M0, {2, 4}, rng));
  off.push_back(test::random_tensor("layers.0.ffn.experts.1.w2.weight", DType::I8, {32, 12}, rng));
  off.push_back(test::random_tensor("layers.0.ffn.experts.1.w2.scale", DType::F8_E8M0, {32, 1}, rng));
  std::string cfg = kLegacyConfig;
  cfg.insert(cfg.rfind('}'), ", \"quantization_config\": {\"weight_block_size\": [8, 8]}");
  TempDir a;
  write_model(a, cfg, off);
  ModelDescription m = load_model(a.path);
  EXPECT_EQ(m.tensor("layers.0.attn.wq_a.weight").dtype, DType::F8_E4M3);
  EXPECT_EQ(m.tensor("layers.0.attn.wq_a.scale").shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(m.tensor("layers.0.ffn.experts.1.w2.weight").shape, (std::vector<int64_t>{32, 12}));
  EXPECT_EQ(m.tensor("layers.0.ffn.experts.1.w2.scale").shape, (std::vector<int64_t>{32, 1}));

  TempDir b;
  write_model(b, cfg, without(off, "layers.0.attn.wq_a.scale"));
  EXPECT_SMELT_ERROR(load_model(b.path), "'layers.0.attn.wq_a.weight'", "F8_E4M3", "'layers.0.attn.wq_a.scale' is missing");
  TempDir c;
  auto bad = off;
  find(bad, "layers.0.attn.wq_a.scale").shape = {4, 2};
  write_model(c, cfg, bad);
  EXPECT_SMELT_ERROR(load_model(c.path), "'layers.0.attn.wq_a.scale'", "[4, 2]", "[2, 4]");
}

TEST(FrontendModel, TiedEmbeddings) {
  Layouts l = make_layouts(17);
  std::string cfg = kLegacyConfig;
  replace_once(cfg, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
  TempDir a;
  write_model(a, cfg, without(l.official, "head.weight"));
  ModelDescription m = load_model(a.path);
  EXPECT_EQ(m.tensor("head.weight").offset, m.tensor("embed.weight").offset);
  TempDir b;
  write_model(b, kLegacyConfig, without(l.official, "head.weight"));
  EXPECT_SMELT_ERROR(load_model(b.path), "missing tensor 'head.weight'");
}

TEST(FrontendModel, LayoutDetection) {
  std::mt19937_64 rng(3);
  TempDir a, b;
  write_model(a, kLegacyConfig, {test::random_tensor("foo", DType::F32, {1}, rng)});
  EXPECT_SMELT_ERROR(load_model(a.path), a.path, "cannot tell the tensor layout");
  write_model(b, kLegacyConfig,
              {test::random_tensor("embed.weight", DType::F32, {1}, rng),
               test::random_tensor("lm_head.weight", DType::F32, {1}, rng)});
  EXPECT_SMELT_ERROR(load_model(b.path), b.path, "mixes");
}

// ---- V4.1 ----

const std::string kGoldens = std::string(SMELT_SHARED_DIR) + "/goldens/v41";

std::map<std::string, int> dtype_counts(const ModelDescription& m) {
  std::map<std::string, int> counts;
  for (const auto& [name, t] : m.tensors) counts[std::string(dtype_name(t.dtype))]++;
  return counts;
}

// Both goldens load with nothing missing and nothing left over; counts from their READMEs.
TEST(FrontendModelV41, LoadsTheGoldens) {
  struct Case {
    const char* name;
    size_t tensors;
    uint64_t bytes;
    std::map<std::string, int> dtypes;
  };
  for (const Case& k : {Case{"tiny_full", 815, 12178088, {{"BF16", 79}, {"F32", 88}, {"F8_E4M3", 96}, {"F8_E8M0", 324}, {"I8", 228}}},
                        Case{"tiny_backbone", 637, 8970784, {{"BF16", 55}, {"F32", 64}, {"F8_E4M3", 67}, {"F8_E8M0", 259}, {"I8", 192}}}}) {
    SCOPED_TRACE(k.name);
    const std::string dir = kGoldens + "/" + k.name;
    if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "no " << dir;
    ModelDescription m = load_model(dir);
    EXPECT_EQ(m.config.family, ModelFamily::DeepseekV41);
    EXPECT_EQ(m.layout, TensorLayout::Official);
    EXPECT_EQ(m.tensors.size(), k.tensors);  // every stored tensor is a canonical tensor or its scale
    EXPECT_EQ(m.checkpoint.tensors().size(), k.tensors);
    EXPECT_EQ(m.checkpoint.payload_bytes(), k.bytes);
    EXPECT_EQ(dtype_counts(m), k.dtypes);
    // Roles from the README's layer table.
    EXPECT_TRUE(m.has("layers.2.attn.compressor.wgate.weight"));
    EXPECT_FALSE(m.has("layers.5.attn.compressor.wgate.weight"));  // ratio-1 KV source: no gate
    EXPECT_TRUE(m.has("layers.5.attn.indexer.wk.weight"));
    EXPECT_TRUE(m.has("layers.7.attn.indexer.wq_b.scale"));       // re-index layer: query side only
    EXPECT_FALSE(m.has("layers.7.attn.indexer.wk.weight"));
    EXPECT_FALSE(m.has("layers.3.attn.indexer.wq_b.weight"));
    EXPECT_EQ(m.tensor("layers.0.attn.wq_b.scale").shape, (std::vector<int64_t>{32, 4}));
    EXPECT_EQ(m.tensor("layers.0.ffn.experts.7.w2.weight").shape, (std::vector<int64_t>{256, 64}));
    EXPECT_EQ(m.tensor("layers.0.ffn.experts.7.w2.scale").shape, (std::vector<int64_t>{256, 4}));
    if (k.tensors == 815) {
      EXPECT_EQ(m.tensor("layers.2.engram.embed.weight").shape, (std::vector<int64_t>{606, 32}));
      EXPECT_EQ(m.tensor("layers.2.engram.embed.scale").shape, (std::vector<int64_t>{606, 1}));
      EXPECT_EQ(m.tensor("layers.1.engram.wkv.weight").shape, (std::vector<int64_t>{1280, 192}));
      EXPECT_EQ(m.tensor("mtp.0.main_proj.weight").shape, (std::vector<int64_t>{256, 768}));
      EXPECT_EQ(m.tensor("mtp.2.confidence_head.proj.weight").shape, (std::vector<int64_t>{1, 288}));
      EXPECT_EQ(m.tensor("mtp.1.ffn.gate.weight").shape, (std::vector<int64_t>{4, 256}));
      EXPECT_FALSE(m.has("mtp.1.main_proj.weight"));
    }
  }
}

// A copy of a golden with one tensor changed (same bytes, other shape / name), or one left out.
void copy_golden(const std::string& golden, const TempDir& out, const std::string& changed,
                 std::vector<int64_t> new_shape, const std::string& config_text = "") {
  Checkpoint ck = Checkpoint::open(golden + "/model.safetensors");
  std::vector<WriteTensor> ts;
  for (const auto& [name, t] : ck.tensors()) {
    if (name == changed && new_shape.empty()) continue;
    ts.push_back({name, t.dtype, name == changed ? new_shape : t.shape, ck.bytes(t)});
  }
  write_safetensors(out / "model.safetensors", ts);
  test::write_file(out / "config.json", config_text.empty() ? test::read_file(golden + "/config.json") : config_text);
}

TEST(FrontendModelV41, ScaleShapeMismatchIsOneClearLine) {
  const std::string g = kGoldens + "/tiny_full";
  if (!std::filesystem::exists(g + "/model.safetensors")) GTEST_SKIP() << "no " << g;
  TempDir a, b, c;
  copy_golden(g, a, "layers.3.attn.wq_b.scale", {4, 32});  // FP8 32x32 blocks: [1024/32, 128/32] = [32, 4]
  EXPECT_SMELT_ERROR(load_model(a.path), "model.safetensors: scale 'layers.3.attn.wq_b.scale' has shape [4, 32]",
                     "weight 'layers.3.attn.wq_b.weight' [1024, 128]", "32x32 blocks", "needs [32, 4]");
  copy_golden(g, b, "layers.4.ffn.experts.5.w1.scale", {64, 16});  // FP4: one scale per 32 inputs of a row
  EXPECT_SMELT_ERROR(load_model(b.path), "scale 'layers.4.ffn.experts.5.w1.scale' has shape [64, 16]",
                     "[128, 128]", "needs [128, 8]");
  copy_golden(g, c, "layers.1.engram.embed.scale", {217, 2});  // Engram table: one scale per row
  EXPECT_SMELT_ERROR(load_model(c.path), "scale 'layers.1.engram.embed.scale'", "needs [434, 1]");
}

TEST(FrontendModelV41, MissingAndUnexpected) {
  const std::string full = kGoldens + "/tiny_full", backbone = kGoldens + "/tiny_backbone";
  if (!std::filesystem::exists(full + "/model.safetensors")) GTEST_SKIP() << "no " << full;
  TempDir a, b, c, d;
  copy_golden(full, a, "mtp.2.markov_head.head.weight", {});
  EXPECT_SMELT_ERROR(load_model(a.path), a.path + ": missing tensor 'mtp.2.markov_head.head.weight'");
  copy_golden(full, b, "layers.7.attn.indexer.weights_proj.weight", {});
  EXPECT_SMELT_ERROR(load_model(b.path), "missing tensor 'layers.7.attn.indexer.weights_proj.weight'");
  // The full checkpoint under the backbone's config: DSpark stages are tensors the config does not use.
  copy_golden(full, c, "", {}, test::read_file(full + "/config.json"));
  std::string cfg = test::read_file(full + "/config.json");
  replace_once(cfg, "\"num_nextn_predict_layers\": 3", "\"num_nextn_predict_layers\": 0");
  replace_once(cfg, ",\n      0,\n      0,\n      0\n    ],\n    \"kv_source", "\n    ],\n    \"kv_source");
  test::write_file(c / "config.json", cfg);
  EXPECT_SMELT_ERROR(load_model(c.path), "model.safetensors: unexpected tensor 'mtp.0.", "num_nextn_predict_layers");
  // Layer 7 as a KV source too: its compressor is missing.
  copy_golden(backbone, d, "", {});
  cfg = test::read_file(backbone + "/config.json");
  replace_once(cfg, "\"kv_source_layer_ids\": [\n      2,\n      5\n    ]", "\"kv_source_layer_ids\": [2, 5, 7]");
  test::write_file(d / "config.json", cfg);
  EXPECT_SMELT_ERROR(load_model(d.path), "missing tensor 'layers.7.attn.compressor.wkv.weight'");
}

// Shapes of the real V4.1-Flash from the spec's table (section 3.3), for the rows the goldens cannot show.
TEST(FrontendModelV41, ExpectedShapesOfV41Flash) {
  ModelConfig c = load_config(std::string(SMELT_FRONTEND_DATA) + "/deepseek-v4.1-flash/config.json");
  std::map<std::string, ExpectedTensor> all;
  for (const auto& e : expected_tensors(c)) all[e.name] = e;
  using S = std::vector<int64_t>;
  auto shape = [&](const std::string& n) { return all.count(n) ? all.at(n).shape : S{-1}; };
  EXPECT_EQ(shape("layers.0.attn.wq_a.weight"), (S{1280, 5120}));
  EXPECT_EQ(shape("layers.0.attn.wq_b.weight"), (S{32768, 1280}));
  EXPECT_EQ(shape("layers.0.attn.wo_a.weight"), (S{8192, 4096}));
  EXPECT_EQ(shape("layers.0.attn.wo_b.weight"), (S{5120, 8192}));
  EXPECT_EQ(shape("layers.20.attn.compressor.wkv.weight"), (S{512, 5120}));
  EXPECT_FALSE(all.count("layers.20.attn.compressor.wgate.weight"));
  EXPECT_EQ(shape("layers.14.attn.compressor.wgate.weight"), (S{512, 5120}));
  EXPECT_EQ(shape("layers.8.attn.indexer.wk.weight"), (S{128, 512}));
  EXPECT_EQ(shape("layers.36.attn.indexer.wq_b.weight"), (S{4096, 1280}));
  EXPECT_EQ(shape("layers.36.attn.indexer.weights_proj.weight"), (S{32, 5120}));
  EXPECT_FALSE(all.count("layers.37.attn.indexer.wq_b.weight"));
  EXPECT_FALSE(all.count("layers.24.attn.indexer.wk.weight"));
  EXPECT_EQ(shape("layers.1.engram.embed.weight"), (S{384006168, 256}));
  EXPECT_EQ(shape("layers.14.engram.embed.weight"), (S{384016682, 256}));
  EXPECT_EQ(shape("layers.14.engram.wkv.weight"), (S{25600, 6144}));
  EXPECT_EQ(shape("layers.1.engram.q_weight"), (S{4, 5120}));
  EXPECT_EQ(shape("layers.39.ffn.experts.383.w2.weight"), (S{5120, 2304}));
  EXPECT_EQ(shape("layers.39.ffn.gate.bias_vl"), (S{384}));
  EXPECT_EQ(shape("mtp.2.ffn.gate.bias_vl"), (S{128}));
  EXPECT_EQ(shape("mtp.1.ffn.experts.127.w1.weight"), (S{2304, 5120}));
  EXPECT_FALSE(all.count("mtp.1.ffn.experts.128.w1.weight"));
  EXPECT_EQ(shape("mtp.0.main_proj.weight"), (S{5120, 15360}));
  EXPECT_EQ(shape("mtp.2.markov_head.embed.weight"), (S{129280, 256}));
  EXPECT_EQ(shape("mtp.2.confidence_head.proj.weight"), (S{1, 5376}));
  EXPECT_EQ(shape("vision.patch_embed.proj.weight"), (S{1024, 588}));
  EXPECT_EQ(shape("vision.blocks.31.mlp.w1.weight"), (S{5632, 1024}));
  EXPECT_EQ(shape("aligner.w1.weight"), (S{5120, 9216}));
  EXPECT_EQ(shape("image_newline"), (S{5120}));
  EXPECT_FALSE(all.count("hc_head_fn"));
  EXPECT_EQ(all.at("layers.3.ffn.experts.0.w1.weight").storage, Storage::Fp4Row);
  EXPECT_EQ(all.at("layers.3.attn.wo_a.weight").storage, Storage::Fp8Block);
  EXPECT_EQ(all.at("layers.1.engram.embed.weight").storage, Storage::Fp8Row);
  EXPECT_EQ(all.at("layers.3.attn.attn_sink").storage, Storage::F32);
  EXPECT_EQ(all.at("layers.2.attn.compressor.wkv.weight").storage, Storage::BF16);
  EXPECT_EQ(scale_shape(c, Storage::Fp8Block, {32768, 1280}), (S{1024, 40}));
  EXPECT_EQ(scale_shape(c, Storage::Fp4Row, {5120, 2304}), (S{5120, 72}));
  EXPECT_EQ(scale_shape(c, Storage::Fp8Row, {384006168, 256}), (S{384006168, 8}));
}

// Shapes of the real V4-Flash, hand-computed from its config (spec sections 1.3, 3.3 and 7).
TEST(FrontendModel, ExpectedShapesOfV4Flash) {
  std::string cfg = R"({"model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096,
    "num_hidden_layers": 43, "num_attention_heads": 64, "head_dim": 512, "qk_rope_head_dim": 64,
    "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "num_hash_layers": 3, "sliding_window": 128,
    "compress_ratios": [0,0, 4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,
                        4,128,4,128,4,128,4,128,4,128,4,128,4, 0,0,0],
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "hc_mult": 4})";
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, bool> integer;
  auto all = expected_tensors(parse_config(cfg, "config.json"));
  for (const auto& e : all) {
    shapes[e.name] = e.shape;
    integer[e.name] = e.integer;
  }
  using S = std::vector<int64_t>;
  EXPECT_EQ(shapes.at("embed.weight"), (S{129280, 4096}));
  EXPECT_EQ(shapes.at("hc_head_fn"), (S{4, 16384}));
  EXPECT_EQ(shapes.at("hc_head_base"), (S{4}));
  EXPECT_EQ(shapes.at("hc_head_scale"), (S{1}));
  EXPECT_EQ(shapes.at("layers.0.hc_attn_fn"), (S{24, 16384}));
  EXPECT_EQ(shapes.at("layers.0.attn.wq_b.weight"), (S{32768, 1024}));
  EXPECT_EQ(shapes.at("layers.0.attn.wo_a.weight"), (S{8192, 4096}));
  EXPECT_EQ(shapes.at("layers.0.attn.wo_b.weight"), (S{4096, 8192}));
  EXPECT_EQ(shapes.at("layers.0.ffn.gate.tid2eid"), (S{129280, 6}));
  EXPECT_TRUE(integer.at("layers.0.ffn.gate.tid2eid"));
  EXPECT_FALSE(shapes.count("layers.3.ffn.gate.tid2eid"));
  EXPECT_EQ(shapes.at("layers.3.ffn.gate.bias"), (S{256}));
  EXPECT_FALSE(shapes.count("layers.0.attn.compressor.ape"));
  EXPECT_EQ(shapes.at("layers.2.attn.compressor.ape"), (S{4, 1024}));
  EXPECT_EQ(shapes.at("layers.2.attn.compressor.wkv.weight"), (S{1024, 4096}));
  EXPECT_EQ(shapes.at("layers.3.attn.compressor.ape"), (S{128, 512}));
  EXPECT_EQ(shapes.at("layers.3.attn.compressor.wgate.weight"), (S{512, 4096}));
  EXPECT_EQ(shapes.at("layers.2.attn.indexer.wq_b.weight"), (S{8192, 1024}));
  EXPECT_EQ(shapes.at("layers.2.attn.indexer.compressor.ape"), (S{4, 256}));
  EXPECT_FALSE(shapes.count("layers.3.attn.indexer.wq_b.weight"));
  EXPECT_EQ(shapes.at("layers.42.ffn.experts.255.w2.weight"), (S{4096, 2048}));
  EXPECT_FALSE(shapes.count("layers.43.attn_norm.weight"));
  // Per layer: 16 common + 3 x 256 experts + 3 shared + 1 gate weight + (tid2eid or bias) + compressor/indexer.
  const size_t csa = 21, hca = 20;  // layers 2..42: CSA on even, HCA on odd
  size_t want = 6 + 43 * (16 + 768 + 3 + 2) + (csa + hca) * 4 + csa * 6;
  EXPECT_EQ(all.size(), want);
}

}  // namespace
}  // namespace smelt
