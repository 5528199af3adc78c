// Partitioned plans end to end (issue 5): every fixture compiled with `smelt-compile --tp N --pp M
// [--shares ...]` and run on the cpu backend (one thread per rank, in-process collectives) must match the
// same fixture compiled for one rank:
//   - the same greedy tokens: TP1 generates K tokens greedily; every partitioned plan, teacher-forced along
//     that path (`smelt-run logits --prompt-ids P --decode-ids t0..t(K-2)`), has the same argmax at the last
//     prompt row and at every decode row, so its own greedy generation produces the same K tokens;
//   - teacher-forced logits (every prompt row and every decode row) within kRelTolerance of TP1's.
// Fixtures: the DeepSeek-V4 goldens (tests/golden/v4/*, official layout) and the DeepSeek-V4.1 goldens
// (${SMELT_SHARED_DIR}/goldens/v41, the checkpoints tiny_backbone and tiny_full) compiled with
// `--numerics fp32` (the model's bf16 / FP8 / FP4 rounding steps off: a changed summation order could move a
// value across a rounding boundary, and one flipped FP8 rounding moves logits far more than 1e-5), and once more
// with the model's own numerics (the default). With those on the issue only asks for the fixture README's bound
// against the reference; measured, every configuration gives TP1's logits bit for bit (the partitioned sums
// are exact: FP8 block products, expert-parallel routed experts, bf16 roundings after each all_reduce; the
// indexer's per-rank sums of bf16 terms are exact in fp32 here and the all_reduce rounds the total as TP1 rounds
// its sum), so the same 1e-5 is asserted and a future change that makes a split inexact shows up here.
// Tool paths come from CMake; SMELT_COMPILE / SMELT_RUN override them. Without smelt-compile the tests skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "frontends/safetensors.h"
#include "tests/common/process.h"

namespace fs = std::filesystem;

namespace smelt {
namespace {

// A partitioned plan computes the same float32 math as TP1 except for summation order: a row-parallel matmul
// (wo_b, the experts' w2, the shared expert) adds per-rank partial sums, the all_reduce adds them in group
// order, and a vocab- or head-split op computes the same dot products unchanged. Each reorder changes a sum by
// a few float32 ulps (~1e-7 relative); through a few layers of norms, Sinkhorn and softmaxes that grows to
// ~1e-6 of the largest logit. A wrong shard (a misplaced slice, a missing all_reduce, a padded head that is
// not exact) moves logits by >= 1e-2. 1e-5 (the bound) separates the two.
constexpr double kRelTolerance = 1e-5;
constexpr int kDecodeSteps = 6;  // CI time: each extra step costs every configuration one decode pass

struct Config {
  std::string name;
  std::vector<std::string> flags;
};

const std::vector<Config>& configs() {
  static const std::vector<Config> c = {
      {"tp2", {"--tp", "2"}},
      {"tp3", {"--tp", "3"}},
      {"tp4", {"--tp", "4"}},
      {"tp6", {"--tp", "6"}},
      {"tp5_uneven", {"--tp", "5", "--shares", "58,58,58,58,70"}},
      {"pp2", {"--pp", "2"}},
      {"pp3", {"--pp", "3"}},
      {"tp2xpp3", {"--tp", "2", "--pp", "3"}},
  };
  return c;
}

struct Model {
  std::string name;
  fs::path dir;
  bool v41 = false;
  std::vector<int64_t> prompt;
  bool fp32 = false;  // V4.1: compiled with --numerics fp32
};
void PrintTo(const Model& m, std::ostream* os) { *os << m.name; }

// CI time: the V4.1 checkpoints are 8 layers of width 256; the first 40 prompt ids still close compressed groups
// of every ratio and run the candidate / index top-k with choices, at half the cost of all 69.
constexpr size_t kV41PromptIds = 40;

std::vector<Model> discover_models() {
  std::vector<Model> models;
  std::error_code ec;
  std::vector<std::string> v4;
  for (const auto& e : fs::directory_iterator(SMELT_GOLDEN_V4_DIR, ec))
    if (fs::exists(e.path() / "reference.safetensors")) v4.push_back(e.path().filename());
  std::sort(v4.begin(), v4.end());
  for (const std::string& n : v4) {
    Model m{"v4_" + n, fs::path(SMELT_GOLDEN_V4_DIR) / n, false, {}};
    try {
      auto f = SafetensorsFile::open((m.dir / "reference.safetensors").string());
      for (const TensorInfo& t : f.tensors())
        if (t.name == "prompt_ids")
          for (int64_t i = 0; i < t.numel(); ++i) {
            int64_t v;
            std::memcpy(&v, f.mapping()->data() + t.offset + 8 * i, 8);  // I64
            m.prompt.push_back(v);
          }
    } catch (const std::exception&) {
    }
    models.push_back(m);
  }
  for (const char* n : {"tiny_backbone", "tiny_full"}) {
    fs::path dir = fs::path(SMELT_GOLDENS_V41_DIR) / n;
    if (!fs::exists(dir / "model.safetensors") || !fs::exists(dir / "tokens.json")) continue;
    Model m{std::string("v41_") + n, dir, true, {}};
    std::ifstream in(dir / "tokens.json");
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("prompt_ids")) m.prompt = j["prompt_ids"].get<std::vector<int64_t>>();
    if (m.prompt.size() > kV41PromptIds) m.prompt.resize(kV41PromptIds);
    m.fp32 = true;
    models.push_back(m);
    m.name += "_model_numerics";
    m.fp32 = false;
    models.push_back(m);
  }
  return models;
}

std::string join(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

struct Logits {
  int64_t vocab = 0;
  std::vector<float> rows;  // prompt rows then decode rows, [rows, vocab]
};

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name, int64_t* cols) {
  for (const TensorInfo& t : f.tensors())
    if (t.name == name && t.dtype == DType::F32 && t.shape.size() == 2) {
      std::vector<float> v(size_t(t.numel()));
      std::memcpy(v.data(), f.mapping()->data() + t.offset, v.size() * 4);
      *cols = t.shape[1];
      return v;
    }
  throw Error(f.path() + ": no F32 matrix " + name);
}

class Partition : public ::testing::TestWithParam<Model> {
 protected:
  void SetUp() override {
    compile_ = test_process::compile_tool();
    run_ = test_process::run_tool();
    if (compile_.empty()) GTEST_SKIP() << "smelt-compile is not built (SMELT_BUILD_COMPILER=OFF)";
    if (run_.empty()) GTEST_SKIP() << "smelt-run is not built";
    if (GetParam().prompt.empty()) GTEST_SKIP() << GetParam().name << ": no prompt ids in the fixture";
    work_ = fs::path(SMELT_E2E_PARTITION_WORK_DIR) / GetParam().name;
    fs::remove_all(work_);
    fs::create_directories(work_);
  }

  // Compiles the model with `flags`; "" (and a failure reported) when smelt-compile fails.
  std::string compile(const std::string& tag, const std::vector<std::string>& flags) {
    std::string plan = (work_ / (tag + ".smelt")).string();
    std::vector<std::string> argv = {compile_, GetParam().dir.string(), "--target", "cpu", "-o", plan,
                                     "--dump-ir-after-all", (work_ / (tag + ".ir")).string()};
    if (GetParam().v41) argv.insert(argv.end(), {"--max-rows", "128", "--max-seq-len", "128"});
    if (GetParam().fp32) argv.insert(argv.end(), {"--numerics", "fp32"});
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = test_process::run_process(argv, work_ / (tag + ".compile.err"));
    if (r.rc != 0 || !fs::exists(plan)) {
      ADD_FAILURE() << tag << ": smelt-compile failed\n" << test_process::describe(argv, r);
      return "";
    }
    return plan;
  }

  bool logits(const std::string& tag, const std::string& plan, const std::vector<int64_t>& decode, Logits* out) {
    fs::path file = work_ / (tag + ".logits.safetensors");
    std::vector<std::string> argv = {run_, "logits", plan, "--prompt-ids", join(GetParam().prompt), "--decode-ids",
                                     join(decode), "--out", file.string()};
    auto r = test_process::run_process(argv, work_ / (tag + ".logits.err"));
    if (r.rc != 0) {
      ADD_FAILURE() << tag << ": smelt-run logits failed\n" << test_process::describe(argv, r);
      return false;
    }
    auto f = SafetensorsFile::open(file.string());
    out->rows = read_f32(f, "prompt_logits", &out->vocab);
    std::vector<float> d = read_f32(f, "decode_logits", &out->vocab);
    out->rows.insert(out->rows.end(), d.begin(), d.end());
    return true;
  }

  // The IR after pass `pass` ("import", "smelt-partition") of the plan compiled as `tag` ("" if none).
  std::string dumped_ir(const std::string& tag, const std::string& pass) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(work_ / (tag + ".ir"), ec))
      if (e.path().filename().string().ends_with("-" + pass + ".mlir")) {
        std::ifstream in(e.path());
        return std::string(std::istreambuf_iterator<char>(in), {});
      }
    return "";
  }

  std::string compile_, run_;
  fs::path work_;
};

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

TEST_P(Partition, EveryConfigurationMatchesOneRank) {
  const Model& m = GetParam();
  std::string tp1 = compile("tp1", {});
  ASSERT_FALSE(tp1.empty());
  // TP1's greedy tokens.
  std::vector<std::string> argv = {run_, "generate", tp1, "--prompt-ids", join(m.prompt), "--max-new-tokens",
                                   std::to_string(kDecodeSteps), "--greedy", "--format", "json"};
  auto r = test_process::run_process(argv, work_ / "tp1.generate.err");
  ASSERT_EQ(r.rc, 0) << test_process::describe(argv, r);
  nlohmann::json tp1_generated = nlohmann::json::parse(r.out);
  std::vector<int64_t> tokens = tp1_generated["tokens"].get<std::vector<int64_t>>();
  ASSERT_EQ(tokens.size(), size_t(kDecodeSteps));
  std::vector<int64_t> decode(tokens.begin(), tokens.end() - 1);
  Logits want;
  ASSERT_TRUE(logits("tp1", tp1, decode, &want));
  const int64_t n_prompt = int64_t(m.prompt.size()), rows = n_prompt + int64_t(decode.size());
  ASSERT_EQ(int64_t(want.rows.size()), rows * want.vocab);
  for (int64_t k = 0; k < kDecodeSteps; ++k)  // the teacher-forced path is TP1's own greedy path
    ASSERT_EQ(argmax(&want.rows[size_t((n_prompt - 1 + k) * want.vocab)], want.vocab), tokens[size_t(k)]) << k;
  double scale = 0;
  for (float v : want.rows) scale = std::max(scale, double(std::fabs(v)));
  // Plans with the DSpark drafter (tiny_full): TP1's drafts after each decode step, to compare with a few splits.
  auto draft_argv = [&](const std::string& plan) {
    return std::vector<std::string>{run_, "generate", plan, "--prompt-ids", join(m.prompt), "--max-new-tokens", "3",
                                    "--greedy", "--show-drafts", "--format", "json"};
  };
  const bool drafts = m.v41 && m.name.find("full") != std::string::npos;
  nlohmann::json tp1_drafts;
  if (drafts) {
    auto d = test_process::run_process(draft_argv(tp1), work_ / "tp1.drafts.err");
    ASSERT_EQ(d.rc, 0) << test_process::describe(draft_argv(tp1), d);
    tp1_drafts = nlohmann::json::parse(d.out)["drafts"];
    ASSERT_EQ(tp1_drafts.size(), 2u);
  }

  const bool has_engram = dumped_ir("tp1", "import").find("smelt.engram %") != std::string::npos;
  EXPECT_EQ(has_engram, m.name.starts_with("v41_tiny_full")) << m.name << ": the fixture's Engram layers";
  const std::string tp1_ir = dumped_ir("tp1", "import");
  const bool has_indexer = tp1_ir.find("smelt.indexer_topk %") != std::string::npos ||
                           tp1_ir.find("smelt.indexer_v41 %") != std::string::npos;
  EXPECT_TRUE(has_indexer) << m.name << ": every fixture here has CSA layers with an indexer";
  for (const Config& c : configs()) {
    std::string plan = compile(c.name, c.flags);
    if (plan.empty()) continue;
    Logits got;
    if (!logits(c.name, plan, decode, &got)) continue;
    if (got.vocab != want.vocab || got.rows.size() != want.rows.size()) {
      ADD_FAILURE() << c.name << ": logits of shape [" << got.rows.size() / std::max<int64_t>(got.vocab, 1) << ", "
                    << got.vocab << "], TP1 [" << rows << ", " << want.vocab << "]";
      continue;
    }
    double worst = 0;
    int64_t at = 0;
    for (size_t i = 0; i < got.rows.size(); ++i) {
      double d = std::fabs(double(got.rows[i]) - want.rows[i]);
      if (!(d <= worst)) worst = d, at = int64_t(i);
    }
    EXPECT_LE(worst / scale, kRelTolerance) << m.name << " " << c.name << ": row " << at / want.vocab << " id "
                                            << at % want.vocab << " differs by " << worst << " (max |logit| " << scale << ")";
    for (int64_t k = 0; k < kDecodeSteps; ++k)
      EXPECT_EQ(argmax(&got.rows[size_t((n_prompt - 1 + k) * got.vocab)], got.vocab), tokens[size_t(k)])
          << m.name << " " << c.name << ": greedy token " << k;
    if (has_engram && !m.fp32) {  // the Engram row split is exact: with the model's numerics every split here is
      EXPECT_EQ(worst, 0.0) << m.name << " " << c.name << ": not bit-identical to TP1";  // bit-identical to TP1
    }
    if (has_engram && c.flags[0] == "--tp") {
      // Under TP the Engram tables (tiny_full has two Engram layers) are split by rows (engram_lookup of the
      // rank's rows, all_reduce, engram_gate), never replicated whole (smelt.engram).
      std::string ir = dumped_ir(c.name, "smelt-partition");
      EXPECT_NE(ir.find("smelt.engram_lookup"), std::string::npos) << m.name << " " << c.name << ": Engram not split";
      EXPECT_EQ(ir.find("smelt.engram %"), std::string::npos) << m.name << " " << c.name << ": a whole Engram left";
    }
    if (has_indexer && c.flags[0] == "--tp") {
      // Under TP the indexer heads are split (indexer_scores of the rank's heads, all_reduce of the scores,
      // indexer_select), never replicated whole.
      std::string ir = dumped_ir(c.name, "smelt-partition");
      EXPECT_NE(ir.find("smelt.indexer_scores"), std::string::npos) << m.name << " " << c.name << ": indexer not split";
      EXPECT_NE(ir.find("smelt.indexer_select"), std::string::npos) << m.name << " " << c.name << ": no selection";
      EXPECT_EQ(ir.find("smelt.indexer_topk %"), std::string::npos) << m.name << " " << c.name << ": a whole indexer left";
      EXPECT_EQ(ir.find("smelt.indexer_v41 %"), std::string::npos) << m.name << " " << c.name << ": a whole indexer left";
    }
    std::printf("[ partition ] %s %s: max |logit - TP1| / max |logit| = %.3g\n", m.name.c_str(), c.name.c_str(),
                worst / scale);
    if (drafts && (c.name == "tp2" || c.name == "pp2" || c.name == "tp2xpp3")) {
      // The DSpark drafter runs on the last stage's ranks: the same draft ids as TP1 after every decode step.
      auto d = test_process::run_process(draft_argv(plan), work_ / (c.name + ".drafts.err"));
      if (d.rc != 0) {
        ADD_FAILURE() << c.name << ": smelt-run generate --show-drafts failed\n" << test_process::describe(draft_argv(plan), d);
        continue;
      }
      nlohmann::json got_drafts = nlohmann::json::parse(d.out)["drafts"];
      ASSERT_EQ(got_drafts.size(), tp1_drafts.size()) << c.name;
      for (size_t k = 0; k < got_drafts.size(); ++k)
        EXPECT_EQ(got_drafts[k]["ids"], tp1_drafts[k]["ids"]) << m.name << " " << c.name << ": drafting step " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Partition, ::testing::ValuesIn(discover_models()),
                         [](const ::testing::TestParamInfo<Model>& info) { return info.param.name; });

}  // namespace
}  // namespace smelt
