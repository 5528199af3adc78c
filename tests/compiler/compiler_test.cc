// Importer tests on the synthetic tiny V4 checkpoint (tiny_v4.h): op counts per layer kind, the attribute
// values the config implies, states, weights and module attributes. Expected values are written out here
// from docs/ops.md and the tiny config, not computed by the importer's code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include "compiler/dialect/dialect.h"
#include "compiler/import/importer.h"
#include "frontends/model.h"
#include "tests/compiler/tiny_v4.h"

namespace smelt {
namespace {

struct TinyModel {
  std::string dir;
  TinyModel() {
    std::string tmpl = "/tmp/smelt-compiler-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir = tmpl + "/model";
    test::write_tiny_v4(dir);  // layers: sliding+hash, CSA+hash, HCA(8), CSA
  }
  ~TinyModel() { std::filesystem::remove_all(std::filesystem::path(dir).parent_path()); }
};

const TinyModel& tiny() {
  static TinyModel m;
  return m;
}

class ImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load_model(tiny().dir);
    module_ = import_model(ctx_, model_);
    ASSERT_TRUE(module_);
  }
  // op name (without "smelt.") -> count, for one layer (-1: outside the layers)
  std::map<std::string, int> counts(int layer) {
    std::map<std::string, int> c;
    (*module_)->walk([&](mlir::Operation* op) {
      if (op->getDialect() != ctx_.getLoadedDialect<SmeltDialect>() || llvm::isa<WeightOp, StateOp>(op)) return;
      auto l = op->getAttrOfType<mlir::IntegerAttr>("layer");
      if ((l ? l.getInt() : -1) == layer) ++c[op->getName().getStringRef().drop_front(6).str()];
    });
    return c;
  }
  template <class Op>
  std::vector<Op> ops(int layer) {
    std::vector<Op> out;
    (*module_)->walk([&](Op op) {
      auto l = op->template getAttrOfType<mlir::IntegerAttr>("layer");
      if ((l ? l.getInt() : -1) == layer) out.push_back(op);
    });
    return out;
  }

  mlir::MLIRContext ctx_;
  ModelDescription model_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
};

TEST_F(ImportTest, OpCountsPerLayerKind) {
  // Per layer (docs/ops.md): 2 hc_mix / hc_collapse / hc_expand; rms_norm attn_norm, q_norm, q (groups),
  // kv_norm, ffn_norm; linear wq_a, wq_b, wkv, wo_b (+ indexer wq_b, weights_proj for CSA); rope q, kv, o
  // (+ indexer q for CSA); one attention, window update, grouped_linear, route, experts, shared MLP, add.
  std::map<std::string, int> sliding = {
      {"hc_mix", 2},       {"hc_collapse", 2}, {"hc_expand", 2},        {"rms_norm", 5},
      {"linear", 4},       {"rope", 3},        {"sparse_attention", 1}, {"window_kv_update", 1},
      {"grouped_linear", 1}, {"moe_route", 1}, {"moe_experts", 1},      {"swiglu_mlp", 1},
      {"add", 1}};
  std::map<std::string, int> hca = sliding;
  hca["compressor"] = 1;
  std::map<std::string, int> csa = sliding;
  csa["compressor"] = 2;
  csa["linear"] = 6;
  csa["rope"] = 4;
  csa["indexer_topk"] = 1;
  EXPECT_EQ(counts(0), sliding);
  EXPECT_EQ(counts(1), csa);
  EXPECT_EQ(counts(2), hca);
  EXPECT_EQ(counts(3), csa);
  std::map<std::string, int> outside = {{"embedding", 1}, {"hc_init", 1}, {"hc_head", 1}, {"rms_norm", 1}, {"linear", 1}};
  EXPECT_EQ(counts(-1), outside);
}

TEST_F(ImportTest, AttentionAttributesFollowTheLayerKind) {
  const int ratios[] = {0, 4, 8, 4};
  for (int L = 0; L < 4; ++L) {
    auto attn = ops<SparseAttentionOp>(L);
    ASSERT_EQ(attn.size(), 1u);
    EXPECT_EQ(attn[0].getRatio(), ratios[L]);
    EXPECT_EQ(attn[0].getHeads(), 4);
    EXPECT_EQ(attn[0].getHeadDim(), 16);
    EXPECT_EQ(attn[0].getWindow(), 8);
    EXPECT_DOUBLE_EQ(attn[0].getScale().convertToDouble(), 0.25);  // 16^-0.5
    EXPECT_EQ(bool(attn[0].getIdx()), ratios[L] == 4) << "layer " << L;
    EXPECT_EQ(bool(attn[0].getPool()), ratios[L] > 0) << "layer " << L;
    // Sliding layers: main rope, theta 10000, no YaRN. Compressed layers: compress rope with YaRN x4 from 64.
    for (RopeOp r : ops<RopeOp>(L)) {
      EXPECT_EQ(r.getRopeDim(), 8);
      if (ratios[L] == 0) {
        EXPECT_DOUBLE_EQ(r.getTheta().convertToDouble(), 10000.0);
        EXPECT_DOUBLE_EQ(r.getYarnFactor().convertToDouble(), 0.0);
      } else {
        EXPECT_DOUBLE_EQ(r.getTheta().convertToDouble(), 160000.0);
        EXPECT_DOUBLE_EQ(r.getYarnFactor().convertToDouble(), 4.0);
        EXPECT_DOUBLE_EQ(r.getYarnBetaFast().convertToDouble(), 32.0);
        EXPECT_DOUBLE_EQ(r.getYarnBetaSlow().convertToDouble(), 1.0);
        EXPECT_EQ(r.getYarnOriginalMaxPos(), 64);
      }
    }
    auto ropes = ops<RopeOp>(L);
    EXPECT_EQ(ropes.back().getInverse(), 1);  // the last rope of a layer un-rotates the attention output
    for (CompressorOp c : ops<CompressorOp>(L)) {
      EXPECT_EQ(c.getRatio(), ratios[L]);
      EXPECT_EQ(c.getOverlap(), ratios[L] == 4 ? 1 : 0);
      EXPECT_DOUBLE_EQ(c.getTheta().convertToDouble(), 160000.0);
      EXPECT_DOUBLE_EQ(c.getYarnFactor().convertToDouble(), 4.0);
    }
  }
  auto topk = ops<IndexerTopkOp>(1);
  ASSERT_EQ(topk.size(), 1u);
  EXPECT_EQ(topk[0].getHeads(), 4);
  EXPECT_EQ(topk[0].getHeadDim(), 8);
  EXPECT_EQ(topk[0].getTopk(), 3);
  // The indexer's query rope uses the compress table at the indexer's head size.
  auto q = topk[0].getQ().getDefiningOp<RopeOp>();
  ASSERT_TRUE(q);
  EXPECT_EQ(q.getHeadDim(), 8);
  EXPECT_EQ(q.getHeads(), 4);
}

TEST_F(ImportTest, RoutingFollowsHashLayers) {
  for (int L = 0; L < 4; ++L) {
    auto route = ops<MoeRouteOp>(L);
    ASSERT_EQ(route.size(), 1u);
    bool hash = L < 2;
    EXPECT_EQ(bool(route[0].getIds()), hash) << "layer " << L;
    EXPECT_EQ(bool(route[0].getTid2eidAttr()), hash) << "layer " << L;
    EXPECT_EQ(bool(route[0].getBiasAttr()), !hash) << "layer " << L;
    EXPECT_EQ(route[0].getTopk(), 2);
    EXPECT_EQ(route[0].getScoring(), "sqrtsoftplus");
    EXPECT_TRUE(route[0].getNormTopkProb());
    EXPECT_DOUBLE_EQ(route[0].getRouteScale().convertToDouble(), 1.5);
    auto experts = ops<MoeExpertsOp>(L);
    ASSERT_EQ(experts.size(), 1u);
    ASSERT_EQ(experts[0].getExperts().size(), 12u);
    std::string p = "layers." + std::to_string(L) + ".ffn.experts.";
    EXPECT_EQ(llvm::cast<mlir::FlatSymbolRefAttr>(experts[0].getExperts()[0]).getValue(), p + "0.w1.weight");
    EXPECT_EQ(llvm::cast<mlir::FlatSymbolRefAttr>(experts[0].getExperts()[4]).getValue(), p + "1.w2.weight");
    EXPECT_EQ(llvm::cast<mlir::FlatSymbolRefAttr>(experts[0].getExperts()[11]).getValue(), p + "3.w3.weight");
  }
}

TEST_F(ImportTest, StatesAndWeights) {
  std::map<std::string, std::tuple<std::string, int64_t, int64_t, int64_t>> want = {
      {"layers.0.window", {"window_ring", 0, 8, 16}},
      {"layers.1.window", {"window_ring", 1, 8, 16}},
      {"layers.1.compressor_ring", {"compressor_ring", 1, 8, 64}},  // [2*4, 2*2*16]
      {"layers.1.pool", {"compressed_pool", 1, 64, 16}},           // 256 / 4
      {"layers.1.index_ring", {"compressor_ring", 1, 8, 32}},      // [2*4, 2*2*8]
      {"layers.1.index_pool", {"index_pool", 1, 64, 8}},
      {"layers.2.window", {"window_ring", 2, 8, 16}},
      {"layers.2.compressor_ring", {"compressor_ring", 2, 16, 32}},  // [2*8, 2*1*16]
      {"layers.2.pool", {"compressed_pool", 2, 32, 16}},            // 256 / 8
      {"layers.3.window", {"window_ring", 3, 8, 16}},
      {"layers.3.compressor_ring", {"compressor_ring", 3, 8, 64}},
      {"layers.3.pool", {"compressed_pool", 3, 64, 16}},
      {"layers.3.index_ring", {"compressor_ring", 3, 8, 32}},
      {"layers.3.index_pool", {"index_pool", 3, 64, 8}},
  };
  std::map<std::string, std::tuple<std::string, int64_t, int64_t, int64_t>> got;
  for (StateOp s : module_->getOps<StateOp>())
    got[s.getSymName().str()] = {s.getKind().str(), s.getLayer(), s.getTensorType().getDimSize(0),
                                 s.getTensorType().getDimSize(1)};
  EXPECT_EQ(got, want);

  // Every checkpoint tensor is used exactly once as a weight, with its place in the file.
  size_t n = 0;
  for (WeightOp w : module_->getOps<WeightOp>()) {
    ++n;
    const TensorInfo& t = model_.tensor(w.getSymName().str());
    EXPECT_EQ(w.getOffset(), int64_t(t.offset)) << w.getSymName().str();
    EXPECT_EQ(w.getFile(), int64_t(t.file));
    EXPECT_EQ(w.getSource(), w.getSymName());  // official layout: names are as stored
    EXPECT_EQ(std::vector<int64_t>(w.getTensorType().getShape()), t.shape);
  }
  EXPECT_EQ(n, model_.tensors.size());
  EXPECT_TRUE(module_->lookupSymbol<WeightOp>("embed.weight").getTensorType().getElementType().isBF16());
  EXPECT_TRUE(module_->lookupSymbol<WeightOp>("layers.0.ffn.gate.tid2eid").getTensorType().getElementType().isInteger(64));
}

TEST_F(ImportTest, ModuleAttributes) {
  auto m = *module_;
  EXPECT_EQ(m->getAttrOfType<mlir::StringAttr>("smelt.model_family").str(), "deepseek_v4");
  EXPECT_EQ(m->getAttrOfType<mlir::IntegerAttr>("smelt.max_seq_len").getInt(), 256);  // min(4096, 256)
  EXPECT_EQ(m->getAttrOfType<mlir::StringAttr>("smelt.model_dir").str(),
            std::filesystem::absolute(tiny().dir).lexically_normal().string());
  // The recorded config is the normalised one: it parses back to the same ModelConfig.
  EXPECT_EQ(parse_config(m->getAttrOfType<mlir::StringAttr>("smelt.config").str(), "smelt.config"), model_.config);
  auto files = m->getAttrOfType<mlir::ArrayAttr>("smelt.checkpoint_files");
  ASSERT_EQ(files.size(), 1u);
  auto d = llvm::cast<mlir::DictionaryAttr>(files[0]);
  EXPECT_EQ(d.getAs<mlir::StringAttr>("path").str(), "model.safetensors");
  EXPECT_EQ(d.getAs<mlir::IntegerAttr>("size").getValue().getZExtValue(),
            std::filesystem::file_size(tiny().dir + "/model.safetensors"));
  EXPECT_EQ(d.getAs<mlir::IntegerAttr>("header_hash").getValue().getZExtValue(),
            model_.checkpoint.files()[0].header_hash());
  auto f = m.lookupSymbol<mlir::func::FuncOp>("forward");
  ASSERT_TRUE(f);
  EXPECT_EQ(f.getFunctionType().getResult(0), mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, 64},
                                                                         mlir::Float32Type::get(&ctx_)));
}

TEST(ImportErrors, MaxSeqLenShorterThanARatio) {
  mlir::MLIRContext ctx;
  ModelDescription m = load_model(tiny().dir);
  ImportOptions o;
  o.max_seq_len = 6;  // layer 2 compresses 8 positions per entry
  try {
    import_model(ctx, m, o);
    FAIL() << "expected smelt::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "max_seq_len 6 is shorter than layer 2's compress ratio 8");
  }
}

TEST(ImportErrors, MissingTensorNamesIt) {
  mlir::MLIRContext ctx;
  ModelDescription m = load_model(tiny().dir);
  m.tensors.erase("layers.2.attn.compressor.ape");
  try {
    import_model(ctx, m);
    FAIL() << "expected smelt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'layers.2.attn.compressor.ape'"), std::string::npos) << e.what();
  }
}

TEST(ImportErrors, WrongShapeIsAVerifierErrorNamingTheWeight) {
  mlir::MLIRContext ctx;
  ModelDescription m = load_model(tiny().dir);
  m.tensors["layers.1.attn.wo_b.weight"].shape = {32, 25};
  try {
    import_model(ctx, m);
    FAIL() << "expected smelt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'weight' @layers.1.attn.wo_b.weight has shape [32,25] but this op "
                                         "needs [32,24]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace smelt
