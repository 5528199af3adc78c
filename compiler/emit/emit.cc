// One plan Buffer per SSA value of @forward (the ids argument first, then every op result in program order),
// weights and states in symbol order, ops in program order with their id lists in docs/ops.md order. Further
// entry points (@dspark_draft) follow as Plan.programs, their buffers after @forward's.
#include "compiler/emit/emit.h"

#include <map>

#include "llvm/ADT/StringSet.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "frontends/error.h"
#include "schemas/plan_file.h"
#include "schemas/plan_generated.h"

#ifndef SMELT_VERSION
#define SMELT_VERSION "0.0.0"
#endif

namespace smelt {

namespace {

namespace fb = flatbuffers;

std::string text(mlir::Attribute a) {
  std::string s;
  llvm::raw_string_ostream os(s);
  a.print(os);
  return s;
}

plan::DType plan_dtype(mlir::Type t, const std::string& what) {
  if (t.isF32()) return plan::DType::F32;
  if (t.isBF16()) return plan::DType::BF16;
  if (t.isF16()) return plan::DType::F16;
  if (t.isF64()) return plan::DType::F64;
  if (llvm::isa<mlir::Float8E4M3FNType>(t)) return plan::DType::F8_E4M3;
  if (llvm::isa<mlir::Float8E5M2Type>(t)) return plan::DType::F8_E5M2;
  if (llvm::isa<mlir::Float8E8M0FNUType>(t)) return plan::DType::F8_E8M0;
  if (auto i = llvm::dyn_cast<mlir::IntegerType>(t)) {
    if (i.getWidth() == 1) return plan::DType::BOOL;
    if (i.getWidth() == 8) return i.isUnsigned() ? plan::DType::U8 : plan::DType::I8;
    if (i.getWidth() == 16) return plan::DType::I16;
    if (i.getWidth() == 32) return plan::DType::I32;
    if (i.getWidth() == 64) return plan::DType::I64;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  throw Error("plan emission: " + what + " has element type " + s + ", which a plan cannot store");
}

template <class A>
A module_attr(mlir::ModuleOp m, llvm::StringRef name) {
  auto a = m->getAttrOfType<A>(name);
  if (!a) throw Error("plan emission: the module has no " + name.str() + " attribute (import it with smelt-compile)");
  return a;
}

int64_t i64_attr(mlir::ModuleOp m, llvm::StringRef name, const char* hint) {
  auto a = m->getAttrOfType<mlir::IntegerAttr>(name);
  if (!a) throw Error("plan emission: the module has no " + name.str() + " attribute (" + hint + ")");
  return a.getInt();
}

// Inputs in plan order, with absent optional operands (always the last one) as -1.
unsigned plan_arity(mlir::Operation* op) {
  if (llvm::isa<SparseAttentionOp>(op)) return 3;  // q, kv, idx or -1
  if (llvm::isa<MoeRouteOp>(op)) return 2;         // x, ids or -1
  if (llvm::isa<HcCollapseOp>(op)) return 2;       // X, pre or -1 (one-hot)
  if (llvm::isa<IndexerV41Op>(op)) return 3;       // q, w, cand_in or -1
  if (llvm::isa<IndexerSelectOp>(op)) return 2;    // scores, cand_in or -1
  if (llvm::isa<ConcatOp>(op)) return 4;           // x0, x1, x2 or -1, x3 or -1
  if (llvm::isa<AllReduceOp>(op)) return 1;        // x or -1 (a zero-width shard contributes zeros)
  return op->getNumOperands();
}

// Outputs in plan order, with an absent optional result (always the last one) as -1.
unsigned plan_results(mlir::Operation* op) {
  if (llvm::isa<IndexerV41Op, IndexerSelectOp>(op)) return 2;  // idx, cand_out or -1
  return op->getNumResults();
}

std::string compiler_version_text() { return std::string("smelt ") + SMELT_VERSION; }

}  // namespace

std::string compiler_version() { return compiler_version_text(); }

namespace {

// What one Plan holds: @forward (or a rank's forward), its further entry points and its arena. A rank of a
// partitioned module holds only the weights and states its functions use; its forward may return nothing (a
// stage without the head: logits -1).
struct Entry {
  mlir::func::FuncOp forward;
  std::vector<mlir::func::FuncOp> programs;
  int64_t arena = 0;
  bool rank = false;
  std::string arch;  // a rank's arch(s) ("sm_80", "sm_80+sm_120"): its plan carries only their cubins (+ PTX)
};

// A rank's plan holds the cubins and the PTX of its own arch(s) (sm_80 -> sm_80 + compute_80); an unpartitioned
// plan (or a cpu rank) all of them.
bool carries(const Entry& e, const cuda_compile::PlanKernel& k) {
  if (!e.rank || e.arch.empty() || e.arch == "cpu") return true;
  llvm::SmallVector<llvm::StringRef> archs;
  llvm::StringRef(e.arch).split(archs, '+');
  llvm::StringRef arch = k.image.arch;
  if (k.image.format == "ptx" && arch.consume_front("compute_"))
    return llvm::any_of(archs, [&](llvm::StringRef a) { return a.drop_front(3) == arch; });
  return llvm::is_contained(archs, k.image.arch);
}

// The symbols (weights, states) the functions of `e` refer to.
llvm::StringSet<> used_symbols(const Entry& e) {
  llvm::StringSet<> used;
  auto add = [&](mlir::func::FuncOp f) {
    f.walk([&](mlir::Operation* op) {
      for (const SymbolUse& u : weight_uses(op))
        if (u.ref) used.insert(u.ref.getValue());
      for (const SymbolUse& u : state_uses(op))
        if (u.ref) used.insert(u.ref.getValue());
    });
  };
  add(e.forward);
  for (auto g : e.programs) add(g);
  return used;
}

fb::Offset<plan::Plan> build_plan(fb::FlatBufferBuilder& fbb, mlir::ModuleOp module, const EmitOptions& o,
                                  const Entry& e) {
  mlir::func::FuncOp f = e.forward;
  const int64_t max_rows = i64_attr(module, "smelt.max_rows", "run smelt-plan-memory first");
  const int64_t arena = e.arena;
  const llvm::StringSet<> used = e.rank ? used_symbols(e) : llvm::StringSet<>();
  const int64_t max_seq_len = i64_attr(module, "smelt.max_seq_len", "set by the importer");
  const std::string family = module_attr<mlir::StringAttr>(module, "smelt.model_family").str();
  const std::string config = module_attr<mlir::StringAttr>(module, "smelt.config").str();
  const std::string model_dir = module_attr<mlir::StringAttr>(module, "smelt.model_dir").str();
  auto files = module_attr<mlir::ArrayAttr>(module, "smelt.checkpoint_files");
  std::string pipeline;
  if (auto passes = module->getAttrOfType<mlir::ArrayAttr>("smelt.passes"))
    for (auto [i, p] : llvm::enumerate(passes.getAsValueRange<mlir::StringAttr>()))
      pipeline += (i ? "," : "") + p.str();

  std::vector<fb::Offset<plan::KeyValue>> options;
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::string>>{
           {"model_dir", model_dir}, {"max_rows", std::to_string(max_rows)}, {"max_seq_len", std::to_string(max_seq_len)},
           {"tp", std::to_string(o.tp)}, {"pp", std::to_string(o.pp)}})
    options.push_back(plan::CreateKeyValueDirect(fbb, k, v.c_str()));
  if (!o.kernel_defines.empty()) options.push_back(plan::CreateKeyValueDirect(fbb, "kernel_defines", o.kernel_defines.c_str()));

  std::vector<fb::Offset<plan::CheckpointFile>> ckpt;
  for (mlir::Attribute a : files) {
    auto d = llvm::dyn_cast<mlir::DictionaryAttr>(a);
    auto path = d ? d.getAs<mlir::StringAttr>("path") : nullptr;
    auto size = d ? d.getAs<mlir::IntegerAttr>("size") : nullptr;
    auto hash = d ? d.getAs<mlir::IntegerAttr>("header_hash") : nullptr;
    if (!path || !size || !hash)
      throw Error("plan emission: smelt.checkpoint_files entry " + text(a) + " needs path, size and header_hash");
    ckpt.push_back(plan::CreateCheckpointFileDirect(fbb, path.str().c_str(), size.getValue().getZExtValue(),
                                                    hash.getValue().getZExtValue()));
  }

  llvm::StringMap<int32_t> weight_id, state_id;
  std::vector<fb::Offset<plan::Weight>> weights;
  for (WeightOp w : module.getOps<WeightOp>()) {
    if (e.rank && !used.contains(w.getSymName())) continue;
    std::string name = w.getSymName().str();
    weight_id[name] = int32_t(weights.size());
    auto shape = w.getTensorType().getShape();
    std::vector<int64_t> dims(shape.begin(), shape.end()), stored;
    if (auto ss = w.getSourceShape()) stored.assign(ss->begin(), ss->end());  // format 1.2: transformed weights
    weights.push_back(plan::CreateWeightDirect(fbb, name.c_str(), w.getSource().str().c_str(), uint32_t(w.getFile()),
                                               uint64_t(w.getOffset()),
                                               plan_dtype(w.getTensorType().getElementType(), "weight @" + name), &dims,
                                               w.getTransform().str().c_str(), w.getSourceShape() ? &stored : nullptr));
    if (w.getFile() >= (int64_t)files.size())
      throw Error("plan emission: weight @" + name + " names checkpoint file " + std::to_string(w.getFile()) +
                  " but the module lists " + std::to_string(files.size()));
  }
  std::vector<fb::Offset<plan::State>> states;
  for (StateOp s : module.getOps<StateOp>()) {
    if (e.rank && !used.contains(s.getSymName())) continue;
    std::string name = s.getSymName().str();
    state_id[name] = int32_t(states.size());
    auto shape = s.getTensorType().getShape();
    std::vector<int64_t> dims(shape.begin(), shape.end());
    states.push_back(plan::CreateStateDirect(fbb, name.c_str(), s.getKind().str().c_str(), int32_t(s.getLayer()),
                                             plan::DType::F32, &dims));
  }

  // Buffers: one per SSA value, function by function.
  llvm::DenseMap<mlir::Value, int32_t> buffer_id;
  std::vector<fb::Offset<plan::Buffer>> buffers;
  auto add_buffer = [&](mlir::Value v, const std::string& name, int64_t offset) {
    auto t = llvm::cast<mlir::RankedTensorType>(v.getType());
    int64_t row_elems = t.getDimSize(1), bytes = max_rows * row_elems * (t.getElementTypeBitWidth() / 8);
    if (offset < 0 || offset + bytes > arena)
      throw Error("plan emission: buffer '" + name + "' at offset " + std::to_string(offset) + " (" +
                  std::to_string(bytes) + " bytes) does not fit the " + std::to_string(arena) + "-byte arena");
    buffer_id[v] = int32_t(buffers.size());
    buffers.push_back(plan::CreateBufferDirect(fbb, name.c_str(), plan_dtype(t.getElementType(), "buffer " + name),
                                               row_elems, uint64_t(offset)));
  };

  // The ops of one function; `prefix` names its buffers ("" for @forward), `result_names` its returned values.
  auto emit_ops = [&](mlir::func::FuncOp fn, const std::string& prefix, const std::vector<std::string>& result_names) {
    mlir::Block& body = fn.getBody().front();
    auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(body.getTerminator());
    for (unsigned i = 0; i < body.getNumArguments(); ++i) {
      auto off = fn.getArgAttrOfType<mlir::IntegerAttr>(i, "smelt.offset");
      if (!off)
        throw Error("plan emission: an argument of @" + fn.getSymName().str() +
                    " has no smelt.offset (run smelt-plan-memory first)");
      add_buffer(body.getArgument(i), prefix + "ids", off.getInt());
    }
    std::vector<fb::Offset<plan::Op>> ops;
    for (mlir::Operation& op : body.without_terminator()) {
      std::string opname = op.getName().getStringRef().str();
      if (!is_compute_op(&op))
        throw Error("plan emission: @" + fn.getSymName().str() + " holds '" + opname + "', which is not a smelt op");
      auto layer_attr = op.getAttrOfType<mlir::IntegerAttr>("layer");
      int32_t layer = layer_attr ? int32_t(layer_attr.getInt()) : -1;
      std::string where = (layer >= 0 ? "layers." + std::to_string(layer) + "." : std::string()) + opname.substr(6);
      auto kernel = op.getAttrOfType<mlir::StringAttr>("kernel");
      if (!kernel) throw Error("plan emission: " + where + " has no kernel (run smelt-select-kernels first)");
      auto offsets = op.getAttrOfType<mlir::DenseI64ArrayAttr>("offsets");
      if (op.getNumResults() && (!offsets || offsets.size() != (int64_t)op.getNumResults()))
        throw Error("plan emission: " + where + " has no offsets for its results (run smelt-plan-memory first)");

      std::vector<int32_t> inputs, outputs, wids, sids;
      for (mlir::Value v : op.getOperands()) {
        auto it = buffer_id.find(v);
        if (it == buffer_id.end())
          throw Error("plan emission: " + where + " reads a value that no earlier op computes");
        inputs.push_back(it->second);
      }
      inputs.resize(plan_arity(&op), -1);
      for (auto [i, r] : llvm::enumerate(op.getResults())) {
        std::string name = prefix + where + (op.getNumResults() > 1 ? ":" + std::to_string(i) : "");
        for (unsigned k = 0; k < ret.getNumOperands(); ++k)
          if (r == ret.getOperand(k)) name = prefix + result_names.at(k);
        add_buffer(r, name, offsets[i]);
        outputs.push_back(buffer_id[r]);
      }
      outputs.resize(plan_results(&op), -1);
      auto lookup = [&](const llvm::StringMap<int32_t>& ids, const SymbolUse& u, const char* what) -> int32_t {
        if (!u.ref) return -1;
        auto it = ids.find(u.ref.getValue());
        if (it == ids.end())
          throw Error("plan emission: " + where + " " + what + " '" + u.role + "' refers to @" +
                      u.ref.getValue().str() + ", which is not a smelt." + what);
        return it->second;
      };
      for (const SymbolUse& u : weight_uses(&op)) wids.push_back(lookup(weight_id, u, "weight"));
      for (const SymbolUse& u : state_uses(&op)) sids.push_back(lookup(state_id, u, "state"));

      std::vector<fb::Offset<plan::Attr>> attrs;
      for (mlir::NamedAttribute a : op.getAttrDictionary()) {
        if (!is_model_attr(a)) continue;
        std::string name = a.getName().str();
        mlir::Attribute v = a.getValue();
        if (auto b = llvm::dyn_cast<mlir::BoolAttr>(v)) {
          attrs.push_back(plan::CreateAttrDirect(fbb, name.c_str(), b.getValue() ? 1 : 0));
        } else if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(v)) {
          attrs.push_back(plan::CreateAttrDirect(fbb, name.c_str(), i.getInt()));
        } else if (auto fl = llvm::dyn_cast<mlir::FloatAttr>(v)) {
          attrs.push_back(plan::CreateAttrDirect(fbb, name.c_str(), 0, fl.getValueAsDouble()));
        } else if (auto s = llvm::dyn_cast<mlir::StringAttr>(v)) {
          attrs.push_back(plan::CreateAttrDirect(fbb, name.c_str(), 0, 0.0, nullptr, s.str().c_str()));
        } else if (auto d = llvm::dyn_cast<mlir::DenseI64ArrayAttr>(v)) {
          std::vector<int64_t> ints(d.asArrayRef().begin(), d.asArrayRef().end());
          attrs.push_back(plan::CreateAttrDirect(fbb, name.c_str(), 0, 0.0, &ints));
        } else {
          throw Error("plan emission: " + where + " attribute '" + name + "' = " + text(v) + " has no plan form");
        }
      }
      ops.push_back(plan::CreateOpDirect(fbb, opname.c_str(), kernel.str().c_str(), layer, &inputs, &outputs, &wids,
                                         &sids, &attrs));
    }
    return ops;
  };

  mlir::Block& body = f.getBody().front();
  auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(body.getTerminator());
  const bool headless = e.rank && ret && ret.getNumOperands() == 0;  // a stage before the last
  if (!ret || (ret.getNumOperands() != 1 && !headless) || body.getNumArguments() != 1)
    throw Error("plan emission: @" + f.getSymName().str() + " must take the ids and return the logits");
  std::vector<fb::Offset<plan::Op>> ops = emit_ops(f, "", {"logits"});
  int32_t logits_id = -1;
  if (!headless) {
    auto logits = buffer_id.find(ret.getOperand(0));
    if (logits == buffer_id.end()) throw Error("plan emission: @forward returns a value no op computes");
    logits_id = logits->second;
  }

  // Further entry points, in module order.
  std::vector<fb::Offset<plan::Program>> programs;
  for (auto g : e.programs) {
    const std::string name = e.rank ? "dspark_draft" : g.getSymName().str();
    if (name != "dspark_draft" || g.getBody().empty())
      throw Error("plan emission: @" + name + " is not an entry point a plan can hold (expected @dspark_draft)");
    mlir::Block& gb = g.getBody().front();
    auto gret = llvm::dyn_cast<mlir::func::ReturnOp>(gb.getTerminator());
    if (!gret || gret.getNumOperands() != 3 || gb.getNumArguments() != 1)
      throw Error("plan emission: @dspark_draft must take the ids and return draft ids, confidence and logits");
    std::vector<fb::Offset<plan::Op>> gops = emit_ops(g, name + ":", {"draft_ids", "confidence", "logits"});
    std::vector<int32_t> in{buffer_id[gb.getArgument(0)]}, out;
    for (mlir::Value v : gret.getOperands()) {
      auto it = buffer_id.find(v);
      if (it == buffer_id.end()) throw Error("plan emission: @" + name + " returns a value no op computes");
      out.push_back(it->second);
    }
    programs.push_back(plan::CreateProgramDirect(fbb, name.c_str(), &gops, &in, &out));
  }

  std::vector<fb::Offset<plan::KernelImage>> kernels;
  for (const auto& k : o.kernels)
    if (carries(e, k))
      kernels.push_back(plan::CreateKernelImageDirect(fbb, k.name.c_str(), k.image.arch.c_str(), k.image.format.c_str(),
                                                    k.image.source_hash, &k.image.bytes));
  std::string version = compiler_version_text();
  return plan::CreatePlanDirect(fbb, version.c_str(), family.c_str(), config.c_str(), o.target.c_str(),
                                o.target_json.c_str(), pipeline.c_str(), &options, &ckpt, &weights, &buffers, &states,
                                &ops, /*token_ids=*/0, logits_id, max_rows, max_seq_len, uint64_t(arena),
                                kernels.empty() ? nullptr : &kernels, programs.empty() ? nullptr : &programs);
}

int64_t rank_value(mlir::func::FuncOp f, const char* key) {
  auto d = f->getAttrOfType<mlir::DictionaryAttr>("smelt.rank");
  auto i = d ? d.getAs<mlir::IntegerAttr>(key) : nullptr;
  if (!i) throw Error("plan emission: @" + f.getSymName().str() + " has no smelt.rank " + key);
  return i.getInt();
}

// Format 1.2: a top-level Plan with tp, pp and the ranks, each with its own complete nested Plan.
std::vector<uint8_t> emit_partitioned(mlir::ModuleOp module, const EmitOptions& o) {
  std::map<int64_t, Entry> ranks;
  for (auto f : module.getOps<mlir::func::FuncOp>()) {
    Entry& e = ranks[rank_value(f, "index")];
    e.rank = true;
    if (auto d = f->getAttrOfType<mlir::DictionaryAttr>("smelt.rank"))
      if (auto a = d.getAs<mlir::StringAttr>("arch")) e.arch = a.str();
    if (f.getSymName().ends_with("_forward")) e.forward = f;
    else if (f.getSymName().ends_with("_dspark_draft")) e.programs.push_back(f);
    else throw Error("plan emission: @" + f.getSymName().str() + " is not a rank's forward or dspark_draft");
    if (auto a = f->getAttrOfType<mlir::IntegerAttr>("smelt.arena_bytes")) e.arena = a.getInt();
    else throw Error("plan emission: @" + f.getSymName().str() + " has no smelt.arena_bytes (run smelt-plan-memory)");
  }
  fb::FlatBufferBuilder fbb(1 << 16);
  std::vector<fb::Offset<plan::Rank>> rank_list;
  for (auto& [index, e] : ranks) {
    if (!e.forward) throw Error("plan emission: rank " + std::to_string(index) + " has no forward function");
    fb::FlatBufferBuilder nested(1 << 16);
    plan::FinishPlanBuffer(nested, build_plan(nested, module, o, e));
    std::vector<uint8_t> bytes(nested.GetBufferPointer(), nested.GetBufferPointer() + nested.GetSize());
    auto d = e.forward->getAttrOfType<mlir::DictionaryAttr>("smelt.rank");
    auto arch = d.getAs<mlir::StringAttr>("arch");
    auto share = d.getAs<mlir::FloatAttr>("share");
    // The nested plan holds 8-byte fields: align its bytes so a reader can use them in place.
    auto arch_s = fbb.CreateString(arch ? arch.str() : std::string("cpu"));
    fbb.ForceVectorAlignment(bytes.size(), sizeof(uint8_t), 16);
    auto plan_v = fbb.CreateVector(bytes);
    rank_list.push_back(plan::CreateRank(fbb, int32_t(index), int32_t(rank_value(e.forward, "stage")),
                                         int32_t(rank_value(e.forward, "tp_rank")), arch_s,
                                         share ? share.getValueAsDouble() : 1.0, plan_v));
  }
  const int64_t tp = i64_attr(module, "smelt.tp", "set by smelt-partition");
  const int64_t pp = i64_attr(module, "smelt.pp", "set by smelt-partition");
  const int64_t max_rows = i64_attr(module, "smelt.max_rows", "run smelt-plan-memory first");
  const int64_t max_seq_len = i64_attr(module, "smelt.max_seq_len", "set by the importer");
  const std::string family = module_attr<mlir::StringAttr>(module, "smelt.model_family").str();
  const std::string config = module_attr<mlir::StringAttr>(module, "smelt.config").str();
  std::string pipeline;
  if (auto passes = module->getAttrOfType<mlir::ArrayAttr>("smelt.passes"))
    for (auto [i, p] : llvm::enumerate(passes.getAsValueRange<mlir::StringAttr>()))
      pipeline += (i ? "," : "") + p.str();
  std::vector<fb::Offset<plan::KeyValue>> options;
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::string>>{
           {"model_dir", module_attr<mlir::StringAttr>(module, "smelt.model_dir").str()},
           {"max_rows", std::to_string(max_rows)}, {"max_seq_len", std::to_string(max_seq_len)},
           {"tp", std::to_string(tp)}, {"pp", std::to_string(pp)}})
    options.push_back(plan::CreateKeyValueDirect(fbb, k, v.c_str()));
  if (!o.kernel_defines.empty()) options.push_back(plan::CreateKeyValueDirect(fbb, "kernel_defines", o.kernel_defines.c_str()));
  std::vector<fb::Offset<plan::CheckpointFile>> ckpt;  // the same files every rank's plan lists
  for (mlir::Attribute a : module_attr<mlir::ArrayAttr>(module, "smelt.checkpoint_files")) {
    auto d = llvm::cast<mlir::DictionaryAttr>(a);
    ckpt.push_back(plan::CreateCheckpointFileDirect(fbb, d.getAs<mlir::StringAttr>("path").str().c_str(),
                                                    d.getAs<mlir::IntegerAttr>("size").getValue().getZExtValue(),
                                                    d.getAs<mlir::IntegerAttr>("header_hash").getValue().getZExtValue()));
  }
  std::string version = compiler_version_text();
  auto root = plan::CreatePlanDirect(fbb, version.c_str(), family.c_str(), config.c_str(), o.target.c_str(),
                                     o.target_json.c_str(), pipeline.c_str(), &options, &ckpt,
                                     nullptr, nullptr, nullptr, nullptr, /*token_ids=*/0, /*logits=*/-1, max_rows,
                                     max_seq_len, /*arena_bytes=*/0, nullptr, nullptr, int32_t(tp), int32_t(pp),
                                     &rank_list);
  plan::FinishPlanBuffer(fbb, root);
  return plan_file::wrap({fbb.GetBufferPointer(), fbb.GetSize()}, plan_file::kVersionMajor, 2);
}

}  // namespace

std::vector<uint8_t> emit_plan(mlir::ModuleOp module, const EmitOptions& o) {
  if (module->hasAttr("smelt.tp")) return emit_partitioned(module, o);
  auto f = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!f || f.getBody().empty()) throw Error("plan emission: the module has no func.func @forward");
  Entry e;
  e.forward = f;
  i64_attr(module, "smelt.max_rows", "run smelt-plan-memory first");  // the first thing a planned module has
  e.arena = i64_attr(module, "smelt.arena_bytes", "run smelt-plan-memory first");
  for (auto g : module.getOps<mlir::func::FuncOp>())
    if (g != f) e.programs.push_back(g);
  fb::FlatBufferBuilder fbb(1 << 16);
  auto root = build_plan(fbb, module, o, e);
  plan::FinishPlanBuffer(fbb, root);
  // Format 1.1 added Plan.programs; a plan without them is a 1.0 plan, readable by older runtimes.
  return plan_file::wrap({fbb.GetBufferPointer(), fbb.GetSize()}, plan_file::kVersionMajor, e.programs.empty() ? 0 : 1);
}


}  // namespace smelt
