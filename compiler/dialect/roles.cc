// The table of weight / state roles per op (roles.h): the single source of operand order for smelt-verify
// and plan emission, in the order docs/ops.md lists them.
#include "llvm/ADT/TypeSwitch.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"

namespace smelt {

using mlir::Operation;

bool is_compute_op(Operation* op) {
  return op->getDialect() && op->getDialect()->getNamespace() == "smelt" && !llvm::isa<WeightOp, StateOp>(op);
}

llvm::SmallVector<SymbolUse> weight_uses(Operation* op) {
  using C = WeightClass;
  llvm::SmallVector<SymbolUse> u;
  auto add = [&](const std::string& role, mlir::FlatSymbolRefAttr ref, C cls = C::Float) {
    u.push_back({role, ref, {}, cls});
  };
  llvm::TypeSwitch<Operation*>(op)
      .Case([&](EmbeddingOp o) { add("embed", o.getEmbedAttr()); })
      .Case([&](HcMixOp o) { add("fn", o.getFnAttr()), add("base", o.getBaseAttr()), add("scale", o.getScaleAttr()); })
      .Case([&](HcHeadOp o) { add("fn", o.getFnAttr()), add("base", o.getBaseAttr()), add("scale", o.getScaleAttr()); })
      .Case([&](RmsNormOp o) { add("weight", o.getWeightAttr()); })
      .Case([&](HcCollapseOp o) { add("norm", o.getNormAttr()); })  // -1 unless smelt-fuse-hc-norm folded a norm
      .Case([&](LinearOp o) {
        add("weight", o.getWeightAttr(), C::Quantized);
        if (o.getScaleAttr()) add("scale", o.getScaleAttr(), C::Scale);  // absent: a one-weight list (V4)
      })
      .Case([&](GroupedLinearOp o) {
        add("weight", o.getWeightAttr(), C::Quantized);
        if (o.getScaleAttr()) add("scale", o.getScaleAttr(), C::Scale);
      })
      .Case([&](CompressorOp o) {
        add("wkv", o.getWkvAttr()), add("wgate", o.getWgateAttr()), add("ape", o.getApeAttr());
        add("norm", o.getNormAttr());
      })
      .Case([&](SparseAttentionOp o) { add("sink", o.getSinkAttr()); })
      .Case([&](MoeRouteOp o) {
        add("gate", o.getGateAttr()), add("bias", o.getBiasAttr()), add("tid2eid", o.getTid2eidAttr(), C::Integer);
      })
      .Case([&](MoeExpertsOp o) {
        const bool quant = o.getVariant() && *o.getVariant() == "v41";  // quantized experts (scales follow)
        static const char* plain[] = {"w1", "w2", "w3"};
        static const char* scaled[] = {"w1", "w1.scale", "w2", "w2.scale", "w3", "w3.scale"};
        const size_t per = quant ? 6 : 3;
        for (auto [i, a] : llvm::enumerate(o.getExperts())) {
          size_t k = i % per;
          bool is_scale = quant && k % 2 == 1;
          add("e" + std::to_string(i / per) + "." + (quant ? scaled[k] : plain[k]),
              llvm::dyn_cast<mlir::FlatSymbolRefAttr>(a), is_scale ? C::Scale : C::Quantized);
        }
      })
      .Case([&](SwigluMlpOp o) {
        if (o.getW1ScaleAttr()) {
          add("w1", o.getW1Attr(), C::Quantized), add("w1_scale", o.getW1ScaleAttr(), C::Scale);
          add("w2", o.getW2Attr(), C::Quantized), add("w2_scale", o.getW2ScaleAttr(), C::Scale);
          add("w3", o.getW3Attr(), C::Quantized), add("w3_scale", o.getW3ScaleAttr(), C::Scale);
        } else {
          add("w1", o.getW1Attr(), C::Quantized), add("w2", o.getW2Attr(), C::Quantized);
          add("w3", o.getW3Attr(), C::Quantized);
        }
      })
      .Case([&](KvCompressorOp o) {
        add("wkv", o.getWkvAttr()), add("wgate", o.getWgateAttr()), add("norm", o.getNormAttr());
        add("wk", o.getWkAttr()), add("k_norm", o.getKNormAttr());
      })
      .Case([&](EngramHashOp o) { add("token_map", o.getTokenMapAttr(), C::Integer); })
      .Case([&](EngramOp o) {
        add("table", o.getTableAttr(), C::Quantized), add("table_scale", o.getTableScaleAttr(), C::Scale);
        add("wkv", o.getWkvAttr(), C::Quantized), add("wkv_scale", o.getWkvScaleAttr(), C::Scale);
        add("q_weight", o.getQWeightAttr()), add("k_weight", o.getKWeightAttr());
      })
      .Case([&](EngramLookupOp o) {
        add("table", o.getTableAttr(), C::Quantized), add("table_scale", o.getTableScaleAttr(), C::Scale);
      })
      .Case([&](EngramGateOp o) {
        add("wkv", o.getWkvAttr(), C::Quantized), add("wkv_scale", o.getWkvScaleAttr(), C::Scale);
        add("q_weight", o.getQWeightAttr()), add("k_weight", o.getKWeightAttr());
      })
      .Case([&](DsparkAttentionOp o) { add("sink", o.getSinkAttr()); })
      .Case([&](DsparkHeadOp o) {
        add("markov_embed", o.getMarkovEmbedAttr()), add("markov_head", o.getMarkovHeadAttr());
        add("proj", o.getProjAttr());
      });
  return u;
}

llvm::SmallVector<SymbolUse> state_uses(Operation* op) {
  llvm::SmallVector<SymbolUse> u;
  auto add = [&](const char* role, mlir::FlatSymbolRefAttr ref, std::initializer_list<llvm::StringRef> kinds) {
    u.push_back({role, ref, llvm::SmallVector<llvm::StringRef, 2>(kinds)});
  };
  llvm::TypeSwitch<Operation*>(op)
      .Case([&](WindowKvUpdateOp o) { add("window_ring", o.getWindowRingAttr(), {"window_ring"}); })
      .Case([&](CompressorOp o) {
        add("compressor_ring", o.getCompressorRingAttr(), {"compressor_ring"});
        add("pool", o.getPoolAttr(), {"compressed_pool", "index_pool"});
      })
      .Case([&](IndexerTopkOp o) { add("index_pool", o.getIndexPoolAttr(), {"index_pool"}); })
      .Case([&](SparseAttentionOp o) {
        add("window_ring", o.getWindowRingAttr(), {"window_ring"});
        add("pool", o.getPoolAttr(), {"compressed_pool"});
      })
      .Case([&](KvCompressorOp o) {
        add("ring", o.getRingAttr(), {"compressor_ring"});
        add("pool", o.getPoolAttr(), {"compressed_pool"});
        add("index_pool", o.getIndexPoolAttr(), {"index_pool"});
      })
      .Case([&](IndexerV41Op o) { add("index_pool", o.getIndexPoolAttr(), {"index_pool"}); })
      .Case([&](IndexerScoresOp o) { add("index_pool", o.getIndexPoolAttr(), {"index_pool"}); })
      .Case([&](EngramHashOp o) { add("history", o.getHistoryAttr(), {"engram_history"}); })
      .Case([&](DsparkAttentionOp o) { add("window_ring", o.getWindowRingAttr(), {"window_ring"}); });
  return u;
}

bool writes_states(Operation* op) { return llvm::isa<CompressorOp, WindowKvUpdateOp, KvCompressorOp, EngramHashOp>(op); }

bool is_model_attr(mlir::NamedAttribute a) {
  static const llvm::StringRef bookkeeping[] = {"layer", "kernel", "offsets", "operandSegmentSizes",
                                                "resultSegmentSizes"};
  if (llvm::is_contained(bookkeeping, a.getName().strref())) return false;
  if (llvm::isa<mlir::SymbolRefAttr>(a.getValue())) return false;  // weight / state reference
  if (auto arr = llvm::dyn_cast<mlir::ArrayAttr>(a.getValue()))    // expert weight list
    return !llvm::any_of(arr, [](mlir::Attribute e) { return llvm::isa<mlir::SymbolRefAttr>(e); });
  return true;
}

}  // namespace smelt
