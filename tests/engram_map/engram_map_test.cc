// The Engram compressed-token map as data: a V4.1 model whose engram_compressed_vocab_size is below its
// vocab_size (like every real checkpoint) compiles with the map file beside it, and the compiled plan's
// Engram hash ids equal the spec's formula (architecture spec section 2.6) computed here from the map. Also
// every way a map file can be wrong, and the refusal without one.
// The model is the tiny_full golden (vocab 512, Engram layers 1 and 2) with its compressed vocab set to 300
// and a hand-made map; the weights do not depend on the compressed vocab (the table rows are the prime sums).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frontends/model.h"
#include "kernels/engram/hash.h"
#include "runtime/cpu/backend.h"
#include "runtime/plan.h"
#include "runtime/weights.h"
#include "tests/common/process.h"
#include "tests/frontend/test_util.h"

namespace smelt {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using I64 = std::vector<int64_t>;

constexpr int64_t kVocab = 512, kCompressed = 300;
const std::string kGolden = std::string(SMELT_SHARED_DIR) + "/goldens/v41/tiny_full";

// Hand-made, not the identity: ids 0..199 collapse in pairs, 200..399 shift down by 100, 400..511 scatter
// over the whole range. Every compressed id in [0, 300) is used.
I64 hand_map() {
  I64 m(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) m[size_t(i)] = i < 200 ? i / 2 : i < 400 ? i - 100 : (i * 7) % kCompressed;
  return m;
}

// config.json of tiny_full with another compressed vocab (and vocab_size when asked).
void write_config(const std::string& dir, int64_t compressed, const std::string& golden = kGolden) {
  std::ifstream in(golden + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  nlohmann::json& t = c.contains("text_config") ? c["text_config"] : c;
  if (t.contains("engram_compressed_vocab_size")) t["engram_compressed_vocab_size"] = compressed;
  std::ofstream(dir + "/config.json") << c.dump(1);
}

// A model directory: the config, the golden's weights linked under a shard name (so the checkpoint is found
// by listing *.safetensors, which must skip the map file) and, when given, the map.
struct Model {
  TempDir dir;
  explicit Model(int64_t compressed = kCompressed, const std::string& golden = kGolden) {
    write_config(dir.path, compressed, golden);
    fs::create_symlink(golden + "/model.safetensors", dir / "model-00001-of-00001.safetensors");
  }
  std::string map_path() const { return dir / kEngramTokenMapFile; }
  void write_map(const I64& m, DType d = DType::I32, std::map<std::string, std::string> meta = {},
                 const std::string& name = "") const {
    std::vector<uint8_t> bytes;
    for (int64_t v : m) {
      const int32_t v32 = int32_t(v);
      const uint8_t* p = d == DType::I32 ? reinterpret_cast<const uint8_t*>(&v32) : reinterpret_cast<const uint8_t*>(&v);
      bytes.insert(bytes.end(), p, p + dtype_size(d));
    }
    test::write_tensors(name.empty() ? map_path() : name, {{kEngramTokenMapTensor, d, {int64_t(m.size())}, bytes}}, meta);
  }
};

std::map<std::string, std::string> good_meta() {
  return {{"compressed_vocab_size", std::to_string(kCompressed)}, {"vocab_size", std::to_string(kVocab)}};
}

// The spec's hash (section 2.6 steps 2-4) written out: tokens c_0 = map[id_t], c_s = map[id_{t-s}] or the pad
// map[2] before the sequence start; P_s = c_s * m[l][s]; h = P_0, then for order i = 1..3 h ^= P_i and per
// head e: id = h mod prime[l][i-1][e] + offset[l][(i-1)*heads + e]. Primes, offsets and multipliers come
// from make_hash_layout, which tests/quant/engram_hash_test.cc checks against the spec's published values.
I64 expected_hash_ids(const I64& map, const std::vector<int32_t>& ids, const kernels::engram::EngramHashLayout& L,
                      int heads) {
  const int64_t pad = map[2];
  const int layers = L.layers(), cols = L.cols(), ngram = cols / heads + 1;
  I64 out;
  for (size_t t = 0; t < ids.size(); ++t)
    for (int l = 0; l < layers; ++l) {
      I64 c(static_cast<size_t>(ngram), 0);
      for (int s = 0; s < ngram; ++s) c[size_t(s)] = int64_t(t) - s >= 0 ? map[size_t(ids[t - size_t(s)])] : pad;
      int64_t h = c[0] * L.multipliers[size_t(l)][0];
      for (int i = 1; i < ngram; ++i) {
        h ^= c[size_t(i)] * L.multipliers[size_t(l)][size_t(i)];
        for (int e = 0; e < heads; ++e) {
          const size_t col = size_t((i - 1) * heads + e);
          out.push_back(h % L.primes[size_t(l)][col] + L.offsets[size_t(l)][col]);
        }
      }
    }
  return out;
}

std::string compile(const Model& m, const std::string& plan, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {test_process::compile_tool(), m.dir.path, "--target", "cpu", "-o", plan};
  argv.insert(argv.end(), extra.begin(), extra.end());
  test_process::ProcessResult r = test_process::run_process(argv, plan + ".err");
  return r.rc == 0 ? "" : r.err.empty() ? "rc " + std::to_string(r.rc) : r.err;
}

bool have_compiler() { return !test_process::compile_tool().empty(); }

// The goldens live in ../shared (SMELT_SHARED_DIR), outside the repository: without them these tests skip, as the
// other golden tests do.
#define NEED_GOLDEN(dir)                                    \
  if (!fs::exists(std::string(dir) + "/model.safetensors")) \
  GTEST_SKIP() << "no golden under " << (dir)

TEST(EngramTokenMap, CompiledPlanHashesTheMappedIds) {
  NEED_GOLDEN(kGolden);
  if (!have_compiler()) GTEST_SKIP() << "smelt-compile is not built (SMELT_BUILD_COMPILER=OFF)";
  Model m;
  const I64 map = hand_map();
  m.write_map(map, DType::I32, good_meta());
  const std::string plan_path = m.dir / "plan.smelt";
  ASSERT_EQ(compile(m, plan_path), "");

  runtime::Plan plan = runtime::Plan::load(plan_path);
  // The map is a checkpoint file of the plan (identity: size + header hash) and the token_map weight.
  bool listed = false;
  for (const auto* f : *plan.fb().checkpoint_files()) listed |= f->path()->str() == kEngramTokenMapFile;
  EXPECT_TRUE(listed) << "the plan does not list " << kEngramTokenMapFile;
  int k = -1;
  for (size_t i = 0; i < plan.ops().size(); ++i)
    if (plan.ops()[i].spec->kind == runtime::OpKind::EngramHash) k = int(i);
  ASSERT_GE(k, 0) << "no smelt.engram_hash in the plan";
  const runtime::OpRef& op = plan.ops()[size_t(k)];
  ASSERT_FALSE(op.weights.empty());
  ASSERT_GE(op.weights[0], 0) << "smelt.engram_hash has no token_map weight";
  EXPECT_EQ(plan.weight_name(op.weights[0]), kEngramTokenMapTensor);

  kernels::engram::EngramHashConfig cfg;
  cfg.layer_ids = {1, 2};
  cfg.vocab_size = 61;
  cfg.max_ngram = 4;
  cfg.n_heads = 2;
  cfg.compressed_vocab_size = kCompressed;
  const kernels::engram::EngramHashLayout L = kernels::engram::make_hash_layout(cfg);
  const int cols = L.layers() * L.cols();
  ASSERT_EQ(plan.row_elems(op.outputs[0]), cols);

  // A prompt over all three parts of the map, the pad id among them; a prefill of 12 then decode steps.
  const std::vector<int32_t> ids = {0, 17, 16, 2, 450, 250, 3, 511, 199, 198, 400, 2, 101, 301, 7, 6, 480, 1, 5, 4};
  const I64 want = expected_hash_ids(map, ids, L, cfg.n_heads);
  runtime::Weights w = runtime::Weights::load(plan, "");
  runtime::cpu::CpuBackend b(plan, w);
  auto feed = [&](size_t at, int rows) { std::copy(ids.begin() + long(at), ids.begin() + long(at) + rows, b.token_ids()); };
  // Buffers share the arena, so the hash ids are read by running the hash op alone: after the whole
  // forward of a prefill (its history writes are the same), before the forward of a decode step (which
  // reads the history the previous forward left).
  auto check = [&](size_t at, int rows) {
    feed(at, rows);
    b.run_op(size_t(k), int64_t(at), rows);
    const int32_t* h = reinterpret_cast<const int32_t*>(b.buffer_bytes(op.outputs[0]));
    for (size_t j = 0; j < size_t(rows) * size_t(cols); ++j)
      ASSERT_EQ(h[j], want[at * size_t(cols) + j]) << "position " << at + j / size_t(cols) << " column " << j % size_t(cols);
  };
  auto forward = [&](size_t at, int rows) {
    feed(at, rows);
    b.run(int64_t(at), rows);
    for (int64_t j = 0; j < int64_t(rows) * kVocab; ++j) ASSERT_TRUE(std::isfinite(b.logits()[j])) << "logit " << j;
  };
  forward(0, 12);
  check(0, 12);
  for (size_t p = 12; p < ids.size(); ++p) {
    check(p, 1);
    forward(p, 1);
  }
}

TEST(EngramTokenMap, MissingMapIsRefusedWithHowToMakeIt) {
  NEED_GOLDEN(kGolden);
  if (!have_compiler()) GTEST_SKIP() << "smelt-compile is not built";
  Model m;
  const std::string err = compile(m, m.dir / "plan.smelt");
  EXPECT_NE(err.find("engram_compressed_vocab_size 300 < vocab_size 512"), std::string::npos) << err;
  EXPECT_NE(err.find("scripts/make_engram_token_map.py"), std::string::npos) << err;
  EXPECT_NE(err.find("pip install tokenizers"), std::string::npos) << err;
  const std::string line = err.substr(std::min(err.find("error: "), err.size()));  // after the progress lines
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "not one error line: " << err;
}

TEST(EngramTokenMap, FlagPicksAFileInsideTheModelDir) {
  NEED_GOLDEN(kGolden);
  if (!have_compiler()) GTEST_SKIP() << "smelt-compile is not built";
  Model m;
  fs::create_directory(m.dir / "maps");
  m.write_map(hand_map(), DType::I64, good_meta(), m.dir / "maps/v41.safetensors");
  EXPECT_EQ(compile(m, m.dir / "plan.smelt", {"--engram-token-map", m.dir / "maps/v41.safetensors"}), "");
  runtime::Plan plan = runtime::Plan::load(m.dir / "plan.smelt");
  bool listed = false;
  for (const auto* f : *plan.fb().checkpoint_files()) listed |= f->path()->str() == "maps/v41.safetensors";
  EXPECT_TRUE(listed);
}

TEST(EngramTokenMap, IdentitySizeNeedsNoFile) {
  NEED_GOLDEN(kGolden);
  Model m(kVocab);
  ModelDescription d = load_model(m.dir.path);
  EXPECT_FALSE(d.has(kEngramTokenMapTensor));
  EXPECT_EQ(d.checkpoint.files().size(), 1u);
}

TEST(EngramTokenMap, LoadModelAttachesAndChecksTheMap) {
  NEED_GOLDEN(kGolden);
  Model m;
  m.write_map(hand_map(), DType::I32, good_meta());
  ModelDescription d = load_model(m.dir.path);
  ASSERT_TRUE(d.has(kEngramTokenMapTensor));
  EXPECT_EQ(d.tensor(kEngramTokenMapTensor).shape, I64{kVocab});
  ASSERT_EQ(d.checkpoint.files().size(), 2u);  // the shard, then the map (skipped when listing shards)
  EXPECT_EQ(fs::path(d.checkpoint.files()[1].path()).filename(), kEngramTokenMapFile);
}

TEST(EngramTokenMap, BadFilesAreOneLineErrors) {
  NEED_GOLDEN(kGolden);
  Model m;
  const std::string file = m.map_path();
  const I64 good = hand_map();

  test::write_tensors(file, {{kEngramTokenMapTensor, DType::F32, {kVocab}, std::vector<uint8_t>(kVocab * 4)}});
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "engram.token_map", "dtype F32", "I32 or I64");

  m.write_map(I64(good.begin(), good.end() - 1));
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "engram.token_map", "shape [511]", "[512]");

  I64 bad = good;
  bad[5] = kCompressed;
  m.write_map(bad);
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "maps token 5 to 300", "[0, engram_compressed_vocab_size 300)");
  bad[5] = -1;
  m.write_map(bad, DType::I64);
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "maps token 5 to -1");

  bad = good;
  for (auto& v : bad) v = std::min<int64_t>(v, kCompressed - 2);  // id 299 never used: another tokenizer
  m.write_map(bad);
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "uses 299 compressed ids", "engram_compressed_vocab_size 300");

  m.write_map(good, DType::I32, {{"compressed_vocab_size", "299"}});
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "metadata compressed_vocab_size is '299'",
                     "engram_compressed_vocab_size 300");

  test::write_tensors(file, {{kEngramTokenMapTensor, DType::I32, {kVocab}, std::vector<uint8_t>(kVocab * 4)},
                             {"extra", DType::I32, {1}, std::vector<uint8_t>(4)}});
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "unexpected tensor 'extra'");

  test::write_tensors(file, {{"token_map", DType::I32, {kVocab}, std::vector<uint8_t>(kVocab * 4)}});
  EXPECT_SMELT_ERROR(load_model(m.dir.path), file, "unexpected tensor 'token_map'");

  test::write_file(file, "not a safetensors file");
  EXPECT_NE(test::error_of([&] { load_model(m.dir.path); }).find(file), std::string::npos);

  fs::remove(file);
  EXPECT_SMELT_ERROR(load_model(m.dir.path, m.dir / "absent.safetensors"), "absent.safetensors",
                     "no such Engram token map file");
  TempDir elsewhere;
  m.write_map(good, DType::I32, good_meta(), elsewhere / "map.safetensors");
  EXPECT_SMELT_ERROR(load_model(m.dir.path, elsewhere / "map.safetensors"), "map.safetensors",
                     "must lie inside the model directory");
}

TEST(EngramTokenMap, GivenMapForAModelWithoutEngramIsAnError) {
  NEED_GOLDEN(std::string(SMELT_SHARED_DIR) + "/goldens/v41/tiny_backbone");
  Model m(kCompressed, std::string(SMELT_SHARED_DIR) + "/goldens/v41/tiny_backbone");
  m.write_map(hand_map(), DType::I32, good_meta());
  EXPECT_SMELT_ERROR(load_model(m.dir.path, m.map_path()), "has no Engram layers");
  EXPECT_FALSE(load_model(m.dir.path).has(kEngramTokenMapTensor));  // beside it but unused: ignored
}

// The script's own writer (no tokenizers package needed for it) makes a file the frontend accepts; and
// without the package the script says how to get it.
TEST(EngramTokenMap, ScriptWriterAndMissingPackage) {
#ifndef SMELT_PYTHON3
  GTEST_SKIP() << "no python3";
#else
  NEED_GOLDEN(kGolden);
  Model m;
  const std::string script = SMELT_MAKE_TOKEN_MAP_SCRIPT;
  std::string values;
  for (int64_t v : hand_map()) values += (values.empty() ? "" : ",") + std::to_string(v);
  const std::string code = "import importlib.util as u, sys; s = u.spec_from_file_location('m', sys.argv[1]); "
                           "m = u.module_from_spec(s); s.loader.exec_module(m); "
                           "open(sys.argv[2], 'wb').write(m.safetensors_bytes([" + values + "], "
                           "{'compressed_vocab_size': 300, 'vocab_size': 512, 'tokenizer_json_sha256': '0' * 64}))";
  test_process::ProcessResult r =
      test_process::run_process({SMELT_PYTHON3, "-c", code, script, m.map_path()}, m.dir / "py.err");
  ASSERT_EQ(r.rc, 0) << r.err;
  ModelDescription d = load_model(m.dir.path);
  ASSERT_TRUE(d.has(kEngramTokenMapTensor));
  EXPECT_EQ(d.tensor(kEngramTokenMapTensor).dtype, DType::I32);

  // A `tokenizers` that cannot be imported (a stand-in package raising ImportError, first on the path).
  fs::create_directories(m.dir / "fake/tokenizers");
  test::write_file(m.dir / "fake/tokenizers/__init__.py", "raise ImportError('stand-in')\n");
  std::string cmd = "PYTHONPATH=" + test_process::shell_quote(m.dir / "fake") + " " + SMELT_PYTHON3 + " " +
                    test_process::shell_quote(script) + " " + test_process::shell_quote(m.dir.path) + " -o " +
                    test_process::shell_quote(m.dir / "out.safetensors");
  r = test_process::run_process({"sh", "-c", cmd}, m.dir / "script.err");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pip install tokenizers"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(m.dir / "out.safetensors"));
#endif
}

}  // namespace
}  // namespace smelt
