// smelt-run as a user sees it: exit codes, one-line errors, and outputs that agree with the library.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frontends/safetensors.h"
#include "runtime/session.h"
#include "tests/runtime/plan_builder.h"
#include "tests/runtime/ranks_util.h"
#include "tests/runtime/v4_tiny.h"

namespace smelt::runtime {
namespace {

using testing::TempDir;
using testing::V4Tiny;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result run(const std::string& args) {
  TempDir io;
  std::string cmd = std::string(SMELT_RUN_PATH) + " " + args + " >" + io.str("out") + " 2>" + io.str("err");
  int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(io.str("out"));
  r.err = slurp(io.str("err"));
  return r;
}

// A failure: the expected exit code and exactly one stderr line "error: ..." containing `text`.
void expect_error(const Result& r, int code, const std::string& text) {
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    model.b.write(dir.str("v4.smelt"), dir.str());
    plan = dir.str("v4.smelt");
  }
  TempDir dir;
  V4Tiny model;
  std::string plan;
};

TEST_F(Cli, UsageErrorsExit2) {
  expect_error(run(""), 2, "subcommand");
  expect_error(run("frobnicate"), 2, "frobnicate");
  expect_error(run("generate"), 2, "plan");
  expect_error(run("generate " + plan + " --prompt-ids 1,2"), 2, "--max-new-tokens");
  expect_error(run("generate " + plan + " --prompt-ids 1,x --max-new-tokens 2"), 2, "'x' is not a token id");
  expect_error(run("generate " + plan + " --prompt-ids 1,,2 --max-new-tokens 2"), 2, "'' is not a token id");
  expect_error(run("generate " + plan + " --prompt-ids=-1 --max-new-tokens 2"), 2, "'-1' is not a token id");
  expect_error(run("generate " + plan + " --max-new-tokens 2"), 2, "--prompt-ids");
  expect_error(run("generate " + plan + " --prompt-ids 1 --max-new-tokens 2 --greedy --temperature 1"), 2, "exclude");
  expect_error(run("generate " + plan + " --prompt-ids 1 --max-new-tokens 2 --format yaml"), 2, "yaml");
  expect_error(run("logits " + plan + " --prompt-ids 1"), 2, "--out");
  expect_error(run("bench " + plan + " --states later"), 2, "later");
  EXPECT_EQ(run("--help").code, 0);
}

TEST_F(Cli, BadInputExits1) {
  expect_error(run("generate /nonexistent.smelt --prompt-ids 1 --max-new-tokens 1"), 1,
               "/nonexistent.smelt: cannot open plan file");
  expect_error(run("generate " + plan + " --prompt 'hello' --max-new-tokens 1"), 1, "tokenizer");
  expect_error(run("generate " + plan + " --prompt-ids 1,2,3 --max-new-tokens 63"), 1,
               "3 prompt tokens + 63 new tokens need 65 positions but the plan was compiled for max_seq_len 64");
  expect_error(run("generate " + plan + " --prompt-ids 20 --max-new-tokens 1"), 1, "token id 20 is outside [0, 20)");
  expect_error(run("bench " + plan + " --states synthetic"), 1, "--states synthetic needs --backend cuda");
  expect_error(run("generate " + plan + " --prompt-ids 1 --max-new-tokens 1 --model /nonexistent"), 1,
               "checkpoint /nonexistent does not match the plan: model.safetensors is missing");
  // Garbage where a plan should be: every subcommand says so in one line, none crashes.
  std::ofstream(dir.str("junk.smelt")) << "SMELTPLN this is not a plan at all, just text padding it out";
  for (std::string sub : {"generate", "logits", "inspect", "bench"}) {
    std::string extra = sub == "generate" ? " --prompt-ids 1 --max-new-tokens 1"
                        : sub == "logits" ? " --prompt-ids 1 --out " + dir.str("x.safetensors")
                                          : "";
    expect_error(run(sub + " " + dir.str("junk.smelt") + extra), 1, "junk.smelt: ");
  }
}

TEST_F(Cli, GenerateMatchesTheLibrary) {
  std::vector<int32_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  Session s(Plan::load(plan));
  std::vector<float> l = s.prefill(ids);
  std::vector<int32_t> want = {sample_greedy(std::span<const float>(l).subspan(7 * V4Tiny::V, V4Tiny::V))};
  while (want.size() < 6) want.push_back(sample_greedy(s.decode(want.back())));

  Result r = run("generate " + plan + " --prompt-ids 3,1,4,1,5,9,2,6 --max-new-tokens 6 --format json --chunk 3");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(j["prompt_tokens"], 8);
  EXPECT_TRUE(j["prefill_ms"].is_number() && j["decode_ms_per_token"].is_number() && j["tokens_per_s"].is_number());

  r = run("generate " + plan + " --prompt-ids 3,1,4,1,5,9,2,6 --max-new-tokens 6");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string text;
  for (int32_t t : want) text += std::to_string(t) + " ";
  text.pop_back();
  EXPECT_EQ(r.out, text + "\n");
  EXPECT_NE(r.err.find("prefill: 8 tokens"), std::string::npos);

  // Sampling is reproducible from the command line too.
  std::string sampled = "generate " + plan + " --prompt-ids 3,1,4 --max-new-tokens 8 --temperature 0.9 --top-p 0.95 --seed 11";
  EXPECT_EQ(run(sampled).out, run(sampled).out);
}

TEST_F(Cli, LogitsFile) {
  std::string out = dir.str("logits.safetensors");
  Result r = run("logits " + plan + " --prompt-ids 3,1,4,1,5 --decode-ids 9,2 --out " + out + " --chunk 2");
  ASSERT_EQ(r.code, 0) << r.err;
  Session s(Plan::load(plan));
  std::vector<float> prompt = s.prefill(std::vector<int32_t>{3, 1, 4, 1, 5}), d1 = s.decode(9), d2 = s.decode(2);
  std::vector<float> decode = d1;
  decode.insert(decode.end(), d2.begin(), d2.end());

  SafetensorsFile f = SafetensorsFile::open(out);
  ASSERT_EQ(f.tensors().size(), 2u);
  for (const TensorInfo& t : f.tensors()) {
    const std::vector<float>& want = t.name == "prompt_logits" ? prompt : decode;
    EXPECT_EQ(t.dtype, DType::F32);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{int64_t(want.size() / V4Tiny::V), V4Tiny::V})) << t.name;
    ASSERT_EQ(t.nbytes, want.size() * 4);
    EXPECT_EQ(std::memcmp(f.mapping()->data() + t.offset, want.data(), t.nbytes), 0) << t.name;
  }
  // Without --decode-ids only prompt_logits is written.
  ASSERT_EQ(run("logits " + plan + " --prompt-ids 3 --out " + out).code, 0);
  EXPECT_EQ(SafetensorsFile::open(out).tensors().size(), 1u);
}

TEST_F(Cli, CapturesFile) {
  // A plan with a capture of the embedding rows: prefill.x [5, 2, 3] and decode<s>.x [1, 2, 3].
  testing::PlanBuilder b;
  testing::Uniform u(3);
  int embed = b.weight("embed.weight", {11, 6}, u.vec(66, -1, 1)), head = b.weight("head.weight", {11, 6}, u.vec(66, -1, 1));
  b.token_ids = b.buffer("ids", 1, plan::DType::I32);
  int x = b.buffer("x", 6);
  b.logits = b.buffer("logits", 11);
  b.op({"smelt.embedding", -1, {b.token_ids}, {x}, {embed}, {}, {}});
  b.op({"smelt.capture", 0, {x}, {}, {}, {}, {testing::S("name", "block0.x"), testing::N("row_shape", {2, 3})}});
  b.op({"smelt.linear", -1, {x}, {b.logits}, {head}, {}, {}});
  TempDir d;
  b.write(d.str("cap.smelt"), d.str());
  std::string out = d.str("logits.safetensors"), cap = d.str("caps.safetensors");
  Result r = run("logits " + d.str("cap.smelt") + " --prompt-ids 3,1,4,1,5 --decode-ids 9,2 --chunk 2 --out " + out +
                 " --captures " + cap);
  ASSERT_EQ(r.code, 0) << r.err;
  SafetensorsFile f = SafetensorsFile::open(cap);
  std::map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& t : f.tensors()) by_name[t.name] = &t;
  ASSERT_EQ(by_name.size(), 3u);
  auto expect_rows = [&](const std::string& name, std::vector<int> ids) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const TensorInfo& t = *by_name[name];
    EXPECT_EQ(t.dtype, DType::F32);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{int64_t(ids.size()), 2, 3})) << name;
    const float* got = reinterpret_cast<const float*>(f.mapping()->data() + t.offset);
    for (size_t r = 0; r < ids.size(); ++r)
      for (int k = 0; k < 6; ++k) EXPECT_EQ(got[r * 6 + k], b.values(embed)[ids[r] * 6 + k]) << name << " row " << r;
  };
  expect_rows("prefill.block0.x", {3, 1, 4, 1, 5});
  expect_rows("decode0.block0.x", {9});
  expect_rows("decode1.block0.x", {2});
  // A plan without capture ops cannot write captures.
  expect_error(run("logits " + plan + " --prompt-ids 3 --out " + out + " --captures " + cap), 1, "--capture-intermediates");
}

TEST_F(Cli, InspectAndBench) {
  Result r = run("inspect " + plan + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan_version"], "1.0");
  EXPECT_EQ(j["model_family"], "deepseek_v4");
  EXPECT_EQ(j["target"], "cpu");
  EXPECT_EQ(j["counts"]["ops"], model.b.ops.size());
  EXPECT_EQ(j["op_histogram"]["smelt.sparse_attention"], 2);
  EXPECT_EQ(j["op_histogram"]["smelt.compressor"], 3);
  EXPECT_EQ(j["checkpoint_files"][0]["path"], "model.safetensors");
  EXPECT_EQ(j["options"]["model_dir"], dir.str());
  EXPECT_EQ(j["arena_bytes"], model.b.arena_bytes);
  EXPECT_TRUE(j["kernels"].empty());
  // F32 elements: window rings 2 x [6, 8]; layer 0 compressor ring [8, 32], pool [16, 8], indexer ring
  // [8, 32], index pool [16, 8]; layer 1 compressor ring [16, 16], pool [8, 8].
  int64_t state = 2 * 48 + 256 + 128 + 256 + 128 + 256 + 64;
  EXPECT_EQ(j["state_bytes_per_sequence"], 4 * state);
  r = run("inspect " + plan);
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("model_family: deepseek_v4"), std::string::npos);

  r = run("bench " + plan + " --prompt-len 8 --decode-tokens 4 --repeat 1 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], 8);
  EXPECT_EQ(j["decode_tokens"], 4);
  EXPECT_GT(j["decode_ms_per_token"].get<double>(), 0.0);
  expect_error(run("bench " + plan + " --prompt-len 60 --decode-tokens 10"), 1, "max_seq_len is 64");
}

// A partitioned plan (TP 2 x PP 2) through the tool: inspect per rank, generate, bench, and a failing rank's
// one-line error.
TEST(CliRanks, PartitionedPlan) {
  TempDir dir;
  std::string plan = dir.str("part.smelt");
  testing::MlpSplit(2, 2, {0, 4, 10}, {0, 5, 11}).write(plan, dir.str());

  Result j = run("inspect " + plan + " --format json");
  ASSERT_EQ(j.code, 0) << j.err;
  auto info = nlohmann::json::parse(j.out);
  EXPECT_EQ(info["tp"], 2);
  EXPECT_EQ(info["pp"], 2);
  EXPECT_EQ(info["vocab"], testing::Mlp::V);
  ASSERT_EQ(info["ranks"].size(), 4u);
  EXPECT_EQ(info["ranks"][2]["collectives_per_decode_step"]["smelt.recv"]["count"], 1);
  Result t = run("inspect " + plan);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("rank 1: stage 0, tp_rank 1, arch cpu, share 0.5"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("    layers: 0 + embedding"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("collectives per decode step: smelt.recv x1 (24 bytes), smelt.all_gather x1 (44 bytes)"),
            std::string::npos) << t.out;

  // Greedy tokens from the tool = argmax of the float64 forward (each step feeds the previous token).
  Result g = run("generate " + plan + " --prompt-ids 3,1,4 --max-new-tokens 4 --format json");
  ASSERT_EQ(g.code, 0) << g.err;
  std::vector<int> want;
  int last = 4;
  for (int k = 0; k < 4; ++k) {
    std::vector<double> l = testing::Mlp::expected(last);
    last = int(std::max_element(l.begin(), l.end()) - l.begin());
    want.push_back(last);
  }
  EXPECT_EQ(nlohmann::json::parse(g.out)["tokens"].get<std::vector<int>>(), want);
  Result b = run("bench " + plan + " --prompt-len 4 --decode-tokens 2 --repeat 1");
  EXPECT_EQ(b.code, 0) << b.err;
  expect_error(run("generate " + plan + " --prompt-ids 3,11 --max-new-tokens 1"), 1,
               "op 0 (smelt.embedding, layer -1): token id 11 is outside [0, 11)");
}

}  // namespace
}  // namespace smelt::runtime
