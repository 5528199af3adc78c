// Sparse checkpoints and the dry run, on the real V4.1-Flash size. The oracles are the release's own
// numbers, not this code: 96,085 tensors, 510,286,023,000 payload bytes and the dtype counts (architecture
// spec sections 0.1 and 3.1), the 48 shard file sizes and the 7,470,294-byte index of the release's file
// list (bojieli/OpenTallas checkpoint_source.json, quoted below as data), and for the tiny goldens the
// headers of their real model.safetensors. Component sizes are recomputed here in float64-free integer
// arithmetic straight from the spec's table (section 3.3).
#include "frontends/dry_run.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "frontends/model.h"
#include "frontends/sparse_checkpoint.h"
#include "tests/frontend/test_util.h"

namespace smelt {
namespace {

const std::string kFlashConfig = std::string(SMELT_FRONTEND_DATA) + "/deepseek-v4.1-flash/config.json";
const std::string kGoldens = std::string(SMELT_SHARED_DIR) + "/goldens/v41";

// File sizes of model-00001 ... model-00048 in the release (revision dba1be0a).
const uint64_t kReleaseShardBytes[48] = {
    970533624,   1323858272,  7389759032,  7389759032,  7405953784,  7389759032,  7389759032,  7389759032,
    7389759032,  7389759032,  7405953784,  7389759032,  7389761368,  7389761368,  7389761368,  7389761368,
    7405956128,  7389761368,  7389761368,  7389761368,  7389761368,  7389761368,  7400713088,  7389761368,
    7389761368,  7389761368,  7395337384,  7389761368,  7389761368,  7389761368,  7395337384,  7389761368,
    7389761368,  7389761368,  7395337384,  7389761368,  7389761368,  7389761368,  7395337384,  7389761368,
    7389761368,  7389761368,  1323837624,  2652728736,  2573998176,  2706402896,  101535150936, 101537926640};

uint64_t file_size(const std::string& p) { return std::filesystem::file_size(p); }
uint64_t disk_bytes(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : ~uint64_t(0);
}

const DryRunComponent& component(const DryRunReport& r, const std::string& name) {
  for (const auto& c : r.components)
    if (c.name == name) return c;
  throw std::runtime_error("no component " + name);
}

// The sparse Flash checkpoint is written once for the suite (about half a second).
struct FlashSparse : ::testing::Test {
  static inline test::TempDir* dir = nullptr;
  static inline SparseCheckpointSummary summary;
  static void SetUpTestSuite() {
    dir = new test::TempDir();
    summary = write_sparse_checkpoint(kFlashConfig, dir->path);
  }
  static void TearDownTestSuite() {
    delete dir;
    dir = nullptr;
  }
};

TEST_F(FlashSparse, MatchesTheReleaseFileByFile) {
  EXPECT_EQ(summary.tensors, 96085u);
  EXPECT_EQ(summary.payload_bytes, 510286023000u);
  ASSERT_EQ(summary.shards.size(), 48u);
  uint64_t disk = 0;
  for (int k = 0; k < 48; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-00048.safetensors", k + 1);
    EXPECT_EQ(summary.shards[k].file, name);
    const std::string path = *dir / name;
    EXPECT_EQ(file_size(path), kReleaseShardBytes[k]) << name;
    disk += disk_bytes(path);
  }
  EXPECT_EQ(file_size(*dir / "model.safetensors.index.json"), 7470294u);
  EXPECT_LT(disk, uint64_t(64) << 20) << "the data sections must be holes";
  nlohmann::json index = nlohmann::json::parse(test::read_file(*dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 510286023000u);
  EXPECT_EQ(index["weight_map"].size(), 96085u);
  // Engram tables in the last two shards, as in the release.
  EXPECT_EQ(index["weight_map"]["layers.1.engram.embed.weight"], "model-00047-of-00048.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.14.engram.embed.scale"], "model-00048-of-00048.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.0.attn.wq_a.weight"], "model-00003-of-00048.safetensors");
  EXPECT_EQ(test::read_file(*dir / "config.json"), test::read_file(kFlashConfig));
}

TEST_F(FlashSparse, DryRunCountsAndComponents) {
  DryRunReport r = dry_run(dir->path);
  EXPECT_EQ(r.model_type, "deepseek_v41");
  EXPECT_EQ(r.files, 48u);
  EXPECT_EQ(r.tensor_count, 96085u);
  EXPECT_EQ(r.payload_bytes, 510286023000u);
  EXPECT_EQ(r.dspark_stages, 3);
  EXPECT_EQ(r.largest_file_bytes, 101537926640u);
  EXPECT_EQ(r.dtype_tensors, (std::map<std::string, uint64_t>{
                                 {"BF16", 520}, {"F32", 387}, {"F8_E4M3", 357}, {"F8_E8M0", 47589}, {"I8", 47232}}));
  uint64_t tensors = 0, bytes = 0;
  for (const auto& c : r.components) {
    tensors += c.tensors;
    bytes += c.bytes;
  }
  EXPECT_EQ(tensors, 96085u);
  EXPECT_EQ(bytes, 510286023000u);
  ASSERT_EQ(r.components.size(), dry_run_components().size());

  // Hand-computed from spec section 3.3 (D 5120, F 2304, 384 experts x 40 layers, FP4 + per-32 scales).
  const uint64_t D = 5120, F = 2304, V = 129280;
  const uint64_t expert = 2 * (F * D / 2 + F * D / 32) + (D * F / 2 + D * F / 32);
  EXPECT_EQ(component(r, "routed_experts").bytes, 40 * 384 * expert);
  EXPECT_EQ(component(r, "routed_experts").tensors, 40u * 384 * 6);
  const uint64_t shared = 2 * (F * D + (F / 32) * (D / 32)) + (D * F + (D / 32) * (F / 32));
  EXPECT_EQ(component(r, "shared_experts").bytes, 40 * shared);
  EXPECT_EQ(component(r, "embeddings_head").bytes, 2 * V * D * 2);
  const uint64_t engram_rows = 384006168ull + 384016682ull;
  const uint64_t engram_wkv = 25600ull * 6144 + 800 * 192;
  EXPECT_EQ(component(r, "engram").bytes, engram_rows * (256 + 8) + 2 * (engram_wkv + 2 * 4 * D * 2));
  EXPECT_EQ(component(r, "engram").tensors, 2u * 6);
  // Vision: 32 blocks + patch embedding + aligner + the three image_* rows (BF16).
  const uint64_t block = (3072 * 1024 + 3072 + 1024 * 1024 + 1024 + 5632 * 1024 + 1024 * 2816 + 2 * 1024) * 2;
  const uint64_t vision = 32 * block + (1024 * 588 + 1024 + 1024) * 2 + (5120 * 9216 + 5120 + 5120 * 5120 + 5120) * 2 +
                          3 * D * 2;
  EXPECT_EQ(component(r, "vision").bytes, vision);
  // Indexer / compressor: 4 KV sources (3 with a gate) + 8 index sources.
  const uint64_t idx_src = 4096 * 1280 + 128 * 40 + 32 * D * 2;
  const uint64_t kv_src = (512 * D * 2) + 512 * 2 + 128 * 512 * 2 + 128 * 2;
  EXPECT_EQ(component(r, "indexer_compressor").bytes, 4 * kv_src + 3 * 512 * D * 2 + 8 * idx_src);

  std::string text = format_dry_run(r, false);
  EXPECT_NE(text.find("96,085 tensors"), std::string::npos) << text;
  EXPECT_NE(text.find("510,286,023,000 payload bytes"), std::string::npos) << text;
  nlohmann::json j = nlohmann::json::parse(format_dry_run(r, true));
  EXPECT_EQ(j["tensors"].get<uint64_t>(), 96085u);
  EXPECT_EQ(j["payload_bytes"].get<uint64_t>(), 510286023000u);
  EXPECT_EQ(j["components"]["routed_experts"]["bytes"].get<uint64_t>(), 40 * 384 * expert);
}

TEST_F(FlashSparse, DryRunRefusesAMismatchedConfig) {
  // The same headers with one expert fewer in the config: validated like load_model.
  test::TempDir other;
  std::string cfg = test::read_file(kFlashConfig);
  size_t at = cfg.find("\"n_routed_experts\": 384");
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, 23, "\"n_routed_experts\": 383");
  for (const auto& entry : std::filesystem::directory_iterator(dir->path))
    if (entry.path().filename() != "config.json")
      std::filesystem::create_symlink(entry.path(), other / entry.path().filename().string());
  test::write_file(other / "config.json", cfg);
  EXPECT_SMELT_ERROR(dry_run(other.path), "'layers.0.ffn.gate.weight'", "[384, 5120]", "[383, 5120]");
}

TEST(SparseCheckpoint, EvenShards) {
  test::TempDir dir;
  SparseCheckpointSummary s = write_sparse_checkpoint(kFlashConfig, dir.path, 7);
  ASSERT_EQ(s.shards.size(), 7u);
  EXPECT_EQ(s.tensors, 96085u);
  EXPECT_EQ(s.payload_bytes, 510286023000u);
  EXPECT_EQ(s.shards[6].file, "model-00007-of-00007.safetensors");
  for (const auto& sh : s.shards) EXPECT_GT(sh.tensors, 0u);
  DryRunReport r = dry_run(dir.path);
  EXPECT_EQ(r.files, 7u);
  EXPECT_EQ(r.payload_bytes, 510286023000u);
  EXPECT_SMELT_ERROR(write_sparse_checkpoint(kFlashConfig, dir / "x", 100000), "100000 shards");
}

// The tiny goldens: the sparse checkpoint's headers list exactly the golden file's tensors.
TEST(SparseCheckpoint, TinyGoldensHaveTheSameHeaders) {
  for (const char* name : {"tiny_full", "tiny_backbone"}) {
    SCOPED_TRACE(name);
    const std::string gdir = kGoldens + "/" + name;
    if (!std::filesystem::exists(gdir + "/model.safetensors")) GTEST_SKIP() << "no " << gdir;
    test::TempDir dir;
    SparseCheckpointSummary s = write_sparse_checkpoint(gdir + "/config.json", dir.path);
    EXPECT_EQ(s.shards.size(), std::string(name) == "tiny_full" ? 15u : 10u);  // embed, 8 layers, head (+3 mtp, 2 engram)
    Checkpoint real = Checkpoint::open(gdir + "/model.safetensors"), sparse = Checkpoint::open(dir.path);
    ASSERT_EQ(sparse.tensors().size(), real.tensors().size());
    for (const auto& [tname, t] : real.tensors()) {
      const TensorInfo* u = sparse.find(tname);
      ASSERT_NE(u, nullptr) << tname;
      EXPECT_EQ(u->dtype, t.dtype) << tname;
      EXPECT_EQ(u->shape, t.shape) << tname;
    }
    EXPECT_EQ(sparse.payload_bytes(), real.payload_bytes());
    DryRunReport r = dry_run(dir.path);
    EXPECT_EQ(r.tensor_count, real.tensors().size());
  }
}

TEST(SparseCheckpoint, Errors) {
  test::TempDir dir;
  EXPECT_SMELT_ERROR(write_sparse_checkpoint(dir / "none.json", dir / "out"), "none.json", "cannot open");
  const std::string v4 = R"({"model_type": "deepseek_v4", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "head_dim": 16, "q_lora_rank": 4, "o_groups": 1, "o_lora_rank": 4, "n_routed_experts": 2,
    "num_experts_per_tok": 1, "moe_intermediate_size": 4, "sliding_window": 4, "hc_mult": 2, "compress_ratios": [0]})";
  test::write_file(dir / "v4.json", v4);
  EXPECT_SMELT_ERROR(write_sparse_checkpoint(dir / "v4.json", dir / "out"), "deepseek_v4", "V4.1");
  test::write_file(dir / "file", "x");
  EXPECT_SMELT_ERROR(write_sparse_checkpoint(kFlashConfig, dir / "file"), "file");
}

// The tool: exit status, summary on stdout, progress on stderr, usage errors.
TEST(SparseCheckpoint, Tool) {
  test::TempDir dir;
  const std::string tool = SMELT_MAKE_CHECKPOINT;
  const std::string out = dir / "out", log = dir / "log", err = dir / "err";
  std::string cmd = tool + " --config " + kFlashConfig + " --out " + out + " --real-sharding >" + log + " 2>" + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(err);
  EXPECT_NE(test::read_file(log).find("48 files, 96,085 tensors, 510,286,023,000 payload bytes"), std::string::npos)
      << test::read_file(log);
  EXPECT_NE(test::read_file(err).find("[48/48] model-00048-of-00048.safetensors"), std::string::npos);
  cmd = tool + " --config " + kFlashConfig + " --out " + out + " --shards 2 --real-sharding 2>" + err;
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2);
  cmd = tool + " --config " + (dir / "missing.json") + " --out " + out + " 2>" + err;
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 1);
  EXPECT_EQ(test::read_file(err).rfind("error: ", 0), 0u) << test::read_file(err);
}

}  // namespace
}  // namespace smelt
