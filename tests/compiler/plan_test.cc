// Plan emission tests: compile the synthetic tiny V4 checkpoint with the driver, then check the plan file
// against the flatbuffers Verifier, the ops.md id-list conventions and an independent liveness check of
// the arena. Also: byte-identical output for the same inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "mlir/IR/MLIRContext.h"

#include "compiler/driver.h"
#include "compiler/emit/emit.h"
#include "compiler/import/importer.h"
#include "frontends/model.h"
#include "schemas/plan_file.h"
#include "schemas/plan_generated.h"
#include "tests/compiler/tiny_v4.h"

namespace smelt {
namespace {

struct Workdir {
  std::string dir;
  Workdir() {
    std::string tmpl = "/tmp/smelt-plan-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    test::write_tiny_v4(dir + "/model");
  }
  ~Workdir() { std::filesystem::remove_all(dir); }
};

const Workdir& work() {
  static Workdir w;
  return w;
}

std::vector<uint8_t> read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<uint8_t> compile_plan(const std::string& name, int64_t max_rows = 64) {
  CompileOptions o;
  o.model_dir = work().dir + "/model";
  o.target = "cpu";
  o.output = work().dir + "/" + name;
  o.max_rows = max_rows;
  compile(o);
  return read(o.output);
}

class PlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { bytes_ = new std::vector<uint8_t>(compile_plan("a.smelt")); }
  static void TearDownTestSuite() { delete bytes_; }
  const plan::Plan* plan() {
    std::span<const uint8_t> payload;
    std::string err = plan_file::check(*bytes_, &payload);
    EXPECT_EQ(err, "");
    flatbuffers::Verifier v(payload.data(), payload.size());
    EXPECT_TRUE(plan::VerifyPlanBuffer(v));
    return plan::GetPlan(payload.data());
  }
  static std::vector<uint8_t>* bytes_;
};
std::vector<uint8_t>* PlanTest::bytes_ = nullptr;

const plan::Attr* attr(const plan::Op* op, const std::string& name) {
  for (const plan::Attr* a : *op->attrs())
    if (a->name()->str() == name) return a;
  return nullptr;
}

std::vector<int> ids(const flatbuffers::Vector<int32_t>* v) { return v ? std::vector<int>(v->begin(), v->end()) : std::vector<int>{}; }

TEST_F(PlanTest, HeaderAndFields) {
  const plan::Plan* p = plan();
  EXPECT_EQ(p->compiler_version()->str(), "smelt 0.1.0");
  EXPECT_EQ(p->model_family()->str(), "deepseek_v4");
  EXPECT_EQ(p->target()->str(), "cpu");
  EXPECT_EQ(p->pipeline()->str(),
            "smelt-verify,smelt-select-kernels{target=cpu},smelt-plan-memory{max-rows=64 seam-live=true side-live=results}");
  EXPECT_EQ(p->max_rows(), 64);
  EXPECT_EQ(p->max_seq_len(), 256);
  ModelDescription m = load_model(work().dir + "/model");
  EXPECT_EQ(parse_config(p->model_config_json()->str(), "plan"), m.config);
  std::map<std::string, std::string> options;
  for (const plan::KeyValue* kv : *p->options()) options[kv->key()->str()] = kv->value()->str();
  std::map<std::string, std::string> want = {
      {"model_dir", std::filesystem::absolute(work().dir + "/model").lexically_normal().string()},
      {"max_rows", "64"}, {"max_seq_len", "256"}, {"tp", "1"}, {"pp", "1"}};
  EXPECT_EQ(options, want);
  ASSERT_EQ(p->checkpoint_files()->size(), 1u);
  const plan::CheckpointFile* f = p->checkpoint_files()->Get(0);
  EXPECT_EQ(f->path()->str(), "model.safetensors");
  EXPECT_EQ(f->size(), m.checkpoint.files()[0].file_size());
  EXPECT_EQ(f->header_hash(), m.checkpoint.files()[0].header_hash());
  // Weights: every tensor once, at its offset, with its stored dtype.
  EXPECT_EQ(p->weights()->size(), m.tensors.size());
  for (const plan::Weight* w : *p->weights()) {
    const TensorInfo& t = m.tensor(w->name()->str());
    EXPECT_EQ(w->offset(), t.offset);
    EXPECT_EQ(int(w->dtype()), int(t.dtype));  // plan.fbs and frontends share the enumerator order
    EXPECT_EQ(std::vector<int64_t>(w->shape()->begin(), w->shape()->end()), t.shape);
  }
  EXPECT_EQ(p->states()->size(), 14u);
}

TEST_F(PlanTest, IdListsFollowOpsMd) {
  const plan::Plan* p = plan();
  const int nb = p->buffers()->size(), nw = p->weights()->size(), ns = p->states()->size();
  const plan::Buffer* ids_buf = p->buffers()->Get(p->token_ids());
  EXPECT_EQ(p->token_ids(), 0);
  EXPECT_EQ(ids_buf->dtype(), plan::DType::I32);
  EXPECT_EQ(ids_buf->row_elems(), 1);
  EXPECT_EQ(p->buffers()->Get(p->logits())->row_elems(), 64);
  EXPECT_EQ(p->buffers()->Get(p->logits())->name()->str(), "logits");
  auto weight_name = [&](int id) { return id < 0 ? std::string("-") : p->weights()->Get(id)->name()->str(); };
  auto state_name = [&](int id) { return id < 0 ? std::string("-") : p->states()->Get(id)->name()->str(); };
  std::set<int> written;  // each buffer is written by exactly one op
  written.insert(p->token_ids());
  std::map<std::string, int> seen;
  for (const plan::Op* op : *p->ops()) {
    std::string name = op->name()->str();
    ++seen[name];
    EXPECT_EQ(op->kernel()->str(), "cpu." + name.substr(6));
    for (int i : ids(op->inputs())) EXPECT_TRUE(i == -1 || (i >= 0 && i < nb && written.count(i))) << name;
    for (int o : ids(op->outputs())) {
      EXPECT_TRUE(o >= 0 && o < nb) << name;
      EXPECT_TRUE(written.insert(o).second) << name;
    }
    for (int w : ids(op->weights())) EXPECT_TRUE(w >= -1 && w < nw) << name;
    for (int s : ids(op->states())) EXPECT_TRUE(s >= -1 && s < ns) << name;
    const int L = op->layer();
    const std::string lp = "layers." + std::to_string(L) + ".";
    if (name == "smelt.sparse_attention") {
      const bool csa = L == 1 || L == 3, compressed = L != 0;
      ASSERT_EQ(op->inputs()->size(), 3u);
      EXPECT_EQ(op->inputs()->Get(2) == -1, !csa) << L;
      EXPECT_EQ(ids(op->weights()).size(), 1u);
      EXPECT_EQ(weight_name(op->weights()->Get(0)), lp + "attn.attn_sink");
      ASSERT_EQ(op->states()->size(), 2u);
      EXPECT_EQ(state_name(op->states()->Get(0)), lp + "window");
      EXPECT_EQ(state_name(op->states()->Get(1)), compressed ? lp + "pool" : "-");
      EXPECT_DOUBLE_EQ(attr(op, "scale")->f(), 0.25);
      EXPECT_EQ(attr(op, "ratio")->i(), L == 0 ? 0 : L == 2 ? 8 : 4);
    } else if (name == "smelt.moe_route") {
      const bool hash = L < 2;
      ASSERT_EQ(op->inputs()->size(), 2u);
      EXPECT_EQ(op->inputs()->Get(1) == p->token_ids(), hash);
      EXPECT_EQ(op->inputs()->Get(1) == -1, !hash);
      ASSERT_EQ(op->weights()->size(), 3u);  // gate, bias or -1, tid2eid or -1
      EXPECT_EQ(weight_name(op->weights()->Get(0)), lp + "ffn.gate.weight");
      EXPECT_EQ(weight_name(op->weights()->Get(1)), hash ? "-" : lp + "ffn.gate.bias");
      EXPECT_EQ(weight_name(op->weights()->Get(2)), hash ? lp + "ffn.gate.tid2eid" : "-");
      EXPECT_EQ(attr(op, "scoring")->s()->str(), "sqrtsoftplus");
      EXPECT_EQ(attr(op, "norm_topk_prob")->i(), 1);
      EXPECT_DOUBLE_EQ(attr(op, "route_scale")->f(), 1.5);
      EXPECT_EQ(op->outputs()->size(), 2u);
    } else if (name == "smelt.moe_experts") {
      ASSERT_EQ(op->weights()->size(), 12u);
      EXPECT_EQ(weight_name(op->weights()->Get(0)), lp + "ffn.experts.0.w1.weight");
      EXPECT_EQ(weight_name(op->weights()->Get(1)), lp + "ffn.experts.0.w2.weight");
      EXPECT_EQ(weight_name(op->weights()->Get(5)), lp + "ffn.experts.1.w3.weight");
      EXPECT_EQ(attr(op, "n_experts")->i(), 4);
    } else if (name == "smelt.compressor") {
      ASSERT_EQ(op->weights()->size(), 4u);  // wkv, wgate, ape, norm
      std::string wkv = weight_name(op->weights()->Get(0));
      std::string pre = wkv.substr(0, wkv.size() - std::string("wkv.weight").size());
      EXPECT_EQ(weight_name(op->weights()->Get(1)), pre + "wgate.weight");
      EXPECT_EQ(weight_name(op->weights()->Get(2)), pre + "ape");
      EXPECT_EQ(weight_name(op->weights()->Get(3)), pre + "norm.weight");
      bool indexer = wkv.find(".indexer.") != std::string::npos;
      ASSERT_EQ(op->states()->size(), 2u);
      EXPECT_EQ(state_name(op->states()->Get(0)), lp + (indexer ? "index_ring" : "compressor_ring"));
      EXPECT_EQ(state_name(op->states()->Get(1)), lp + (indexer ? "index_pool" : "pool"));
      EXPECT_EQ(op->outputs()->size(), 0u);
    } else if (name == "smelt.rms_norm" && !attr(op, "groups")) {
      ADD_FAILURE() << "rms_norm without its groups attribute";
    } else if (name == "smelt.rms_norm" && attr(op, "groups")->i() == 4) {
      EXPECT_EQ(ids(op->weights()), std::vector<int>{-1});  // unweighted per-head norm of q
    } else if (name == "smelt.hc_mix") {
      ASSERT_EQ(op->weights()->size(), 3u);
      EXPECT_EQ(op->outputs()->size(), 3u);
      EXPECT_EQ(attr(op, "sinkhorn_iters")->i(), 3);
    } else if (name == "smelt.embedding" || name == "smelt.hc_head") {
      EXPECT_EQ(L, -1);
    }
  }
  EXPECT_EQ(seen["smelt.sparse_attention"], 4);
  EXPECT_EQ(seen["smelt.compressor"], 5);  // 2 + 1 + 2
  EXPECT_EQ(seen["smelt.indexer_topk"], 2);
  EXPECT_EQ(int(written.size()), nb);  // every buffer but none twice
}

// Independent of plan-memory's code: recompute live ranges from the plan's op list and check that no two
// buffers that are live at the same time share bytes, and that everything fits the arena.
TEST_F(PlanTest, ArenaHasNoLiveOverlap) {
  const plan::Plan* p = plan();
  const int nb = p->buffers()->size(), nops = p->ops()->size();
  std::vector<int> def(nb, -1), last(nb, -1);
  for (int i = 0; i < nops; ++i) {
    const plan::Op* op = p->ops()->Get(i);
    for (int o : ids(op->outputs())) def[o] = last[o] = i;
    for (int in : ids(op->inputs()))
      if (in >= 0) last[in] = std::max(last[in], i);
  }
  last[p->logits()] = nops;  // read by the caller after the last op
  auto bytes = [&](int b) {
    const plan::Buffer* buf = p->buffers()->Get(b);
    return uint64_t(p->max_rows()) * uint64_t(buf->row_elems()) * 4u;  // F32 and I32
  };
  for (int a = 0; a < nb; ++a) {
    const plan::Buffer* ba = p->buffers()->Get(a);
    EXPECT_EQ(ba->offset() % 64, 0u);
    EXPECT_LE(ba->offset() + bytes(a), p->arena_bytes());
    for (int b = a + 1; b < nb; ++b) {
      bool live_together = def[a] <= last[b] && def[b] <= last[a];
      const plan::Buffer* bb = p->buffers()->Get(b);
      bool share = ba->offset() < bb->offset() + bytes(b) && bb->offset() < ba->offset() + bytes(a);
      EXPECT_FALSE(live_together && share) << ba->name()->str() << " and " << bb->name()->str();
    }
  }
  // The arena is reused: it is smaller than the sum of all buffers.
  uint64_t total = 0;
  for (int b = 0; b < nb; ++b) total += bytes(b);
  EXPECT_LT(p->arena_bytes(), total / 4);
}

TEST_F(PlanTest, SameInputsSameBytes) {
  EXPECT_EQ(compile_plan("b.smelt"), *bytes_);
  EXPECT_NE(compile_plan("c.smelt", 32), *bytes_);  // and the options matter
}

TEST(PlanErrors, UnplannedModuleIsRefused) {
  mlir::MLIRContext ctx;
  ModelDescription m = load_model(work().dir + "/model");
  auto module = import_model(ctx, m);
  try {
    emit_plan(*module);
    FAIL() << "expected smelt::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "plan emission: the module has no smelt.max_rows attribute (run smelt-plan-memory first)");
  }
}

}  // namespace
}  // namespace smelt
