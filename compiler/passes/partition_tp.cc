// The TP rewrite of one rank's function (partition.h): attention by whole output groups (wq_b rows, sinks, wo_a
// rows, wo_b columns -> partial + all_reduce), V4 routed and shared experts by intermediate width (w1/w3 rows, w2
// columns; one all_reduce of routed + shared per FFN), V4.1 quantized routed experts by whole experts (expert
// parallel, all_reduce, then the replicated shared expert added), embedding by columns + all_gather, head by vocab
// rows + all_gather, Engram tables by rows (engram_lookup of the rank's rows -> all_reduce of the looked-up rows ->
// engram_gate), indexer heads by shares (indexer_scores of the rank's heads -> all_reduce of the scores ->
// indexer_select). Everything else (KV, compressors, the Engram hash, mHC, norms, routing) stays replicated.
#include "compiler/passes/partition.h"

#include "compiler/passes/engram_ops.h"
#include "compiler/passes/shard.h"

namespace smelt::partition {

namespace {

using mlir::Operation;
using mlir::Value;

std::string where(Operation* op) {
  auto l = op->getAttrOfType<mlir::IntegerAttr>("layer");
  return (l ? "layer " + std::to_string(l.getInt()) + " " : std::string()) + op->getName().getStringRef().str();
}

void set_width(Value v, int64_t w) {
  auto t = llvm::cast<mlir::RankedTensorType>(v.getType());
  v.setType(mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, w}, t.getElementType()));
}

void set_i64(Operation* op, llvm::StringRef name, int64_t v) {
  op->setAttr(name, mlir::IntegerAttr::get(mlir::IntegerType::get(op->getContext(), 64), v));
}

WeightOp lookup(mlir::SymbolTable& st, mlir::Attribute ref) {
  auto r = llvm::dyn_cast_or_null<mlir::FlatSymbolRefAttr>(ref);
  return r ? st.lookup<WeightOp>(r.getValue()) : WeightOp();
}

std::string tp_name(WeightOp w, int64_t t) { return w ? w.getSymName().str() + ".tp" + std::to_string(t) : ""; }

struct Rewriter {
  mlir::SymbolTable& module;  // the module's symbols
  mlir::func::FuncOp f;
  const TpRank& r;
  int64_t ntp() const { return int64_t(r.shares.size()); }

  // Shards the weight named by attribute `wattr` (and its scale `sattr`, if any) of `op` along `dim`.
  std::string shard(Operation* op, llvm::StringRef wattr, llvm::StringRef sattr, int dim, shard::Range range) {
    shard::Quantized q{lookup(module, op->getAttr(wattr)), sattr.empty() ? WeightOp() : lookup(module, op->getAttr(sattr))};
    if (!q.weight) return where(op) + ": weight '" + wattr.str() + "' is not a smelt.weight";
    mlir::FlatSymbolRefAttr w, s;
    std::string err = shard::remap(module, q, dim, {range}, tp_name(q.weight, r.tp_rank), tp_name(q.scale, r.tp_rank),
                                   where(op), w, s);
    if (!err.empty()) return err;
    op->setAttr(wattr, w);
    if (s) op->setAttr(sattr, s);
    return "";
  }

  Operation* collective(Operation* after, llvm::StringRef name, Value x, mlir::Type type,
                        llvm::ArrayRef<mlir::NamedAttribute> attrs) {
    mlir::OpBuilder b(after);
    b.setInsertionPointAfter(after);
    mlir::OperationState st(after->getLoc(), name);
    if (x) st.addOperands(x);
    st.addTypes(type);
    st.addAttribute("group", b.getDenseI64ArrayAttr(r.group));
    if (auto l = after->getAttr("layer")) st.addAttribute("layer", l);
    for (auto a : attrs) st.addAttribute(a.getName(), a.getValue());
    return b.create(st);
  }

  // Replaces every use of `out` (but the new op's) by an all_reduce of `partial` (null: this rank adds zeros),
  // inserted after `after`; the round of the full sum moves to the all_reduce.
  void all_reduce(Operation* after, Value out, Value partial, mlir::Attribute round) {
    llvm::SmallVector<mlir::NamedAttribute> attrs;
    if (round) attrs.push_back({mlir::StringAttr::get(f.getContext(), "round"), round});
    Operation* ar = collective(after, "smelt.all_reduce", partial, out.getType(), attrs);
    out.replaceAllUsesExcept(ar->getResult(0), ar);
  }

  std::string attention(SparseAttentionOp attn) {
    AttentionChain c;
    if (std::string err = find_chain(attn, c); !err.empty()) return err;
    if (c.groups < ntp())
      return where(attn) + ": " + std::to_string(c.groups) + " output groups cannot give each of " +
             std::to_string(ntp()) + " TP ranks a whole group (run smelt-pad-heads{tp=" + std::to_string(ntp()) +
             "} first)";
    shard::Range g = shard::split(c.groups, 1, r.shares, true)[r.tp_rank];
    const int64_t hpg = c.heads / c.groups, d = c.head_dim, R = c.rank;
    auto aq = c.wo_b.getActQuant();
    if (aq && !aq->empty() && ((g.begin * R) % 32 || (g.end * R) % 32))
      return where(c.wo_b) + ": TP rank " + std::to_string(r.tp_rank) + " would get wo_b input columns " +
             std::to_string(g.begin * R) + ":" + std::to_string(g.end * R) +
             ", which splits an FP8 activation block of 32 (o_lora_rank " + std::to_string(R) +
             " per group); use --numerics fp32 or a TP size whose groups per rank cover whole blocks";
    for (auto [op, wa, sa, dim, lo, hi] :
         std::initializer_list<std::tuple<Operation*, const char*, const char*, int, int64_t, int64_t>>{
             {c.wq_b, "weight", "scale", 0, g.begin * hpg * d, g.end * hpg * d},
             {attn, "sink", "", 0, g.begin * hpg, g.end * hpg},
             {c.wo_a, "weight", "scale", 0, g.begin * R, g.end * R},
             {c.wo_b, "weight", "scale", 1, g.begin * R, g.end * R}})
      if (std::string err = shard(op, wa, sa, dim, {lo, hi, false}); !err.empty()) return err;
    set_heads(c, g.size());
    mlir::Attribute round = c.wo_b->getAttr("round");
    c.wo_b->removeAttr("round");
    all_reduce(c.wo_b, c.wo_b.getY(), c.wo_b.getY(), round);
    return "";
  }

  // Shards an expert-style SwiGLU (w1/w3 rows, w2 columns) of intermediate width F to [lo, hi).
  std::string swiglu(Operation* op, const char* w1, const char* w2, const char* w3, const char* s1, const char* s2,
                     const char* s3, shard::Range f) {
    if (std::string e = shard(op, w1, s1, 0, f); !e.empty()) return e;
    if (std::string e = shard(op, w3, s3, 0, f); !e.empty()) return e;
    return shard(op, w2, s2, 1, f);
  }

  // The [lo, hi) of an intermediate width F this rank computes, in units of the quantization block (32 with
  // activation quantization, which quantizes w2's input in blocks of 32).
  shard::Range ffn_range(shard::Quantized w1, shard::Quantized w2, shard::Quantized w3, bool act_quant) {
    int64_t F = shard::extent(w1, 0);
    int64_t qb = std::max({shard::block(w1, 0), shard::block(w3, 0), shard::block(w2, 1), act_quant ? int64_t(32) : 0});
    return shard::split(F, shard::split_unit(F, qb, ntp()), r.shares, false)[r.tp_rank];
  }

  // Returns "" and sets alive = whether this rank keeps a non-empty shard.
  std::string experts(MoeExpertsOp e, bool& alive) {
    const bool quant = e.getVariant() && *e.getVariant() == "v41";
    const size_t per = quant ? 6 : 3, st = quant ? 2 : 1;
    auto list = e.getExperts();
    auto q = [&](size_t i) {
      return shard::Quantized{lookup(module, list[i]), quant ? lookup(module, list[i + 1]) : WeightOp()};
    };
    bool aq = e.getActQuant() && !e.getActQuant()->empty();
    shard::Range f = ffn_range(q(0), q(st), q(2 * st), aq);
    for (size_t x = 0; x < list.size(); x += per)
      if (shard::extent(q(x), 0) != shard::extent(q(0), 0))
        return where(e) + ": experts of different intermediate widths cannot be split alike";
    alive = f.size() > 0;
    if (!alive) return "";
    llvm::SmallVector<mlir::Attribute> out;
    for (size_t x = 0; x < list.size(); x += per)
      for (size_t k = 0; k < 3; ++k) {
        mlir::FlatSymbolRefAttr w, s;
        shard::Quantized qq = q(x + k * st);
        if (std::string err = shard::remap(module, qq, k == 1 ? 1 : 0, {f}, tp_name(qq.weight, r.tp_rank),
                                           tp_name(qq.scale, r.tp_rank), where(e), w, s);
            !err.empty())
          return err;
        out.push_back(w);
        if (quant) out.push_back(s);
      }
    e.setExpertsAttr(mlir::ArrayAttr::get(e.getContext(), out));
    return "";
  }

  // V4.1's quantized experts go whole to one rank each (expert parallel, in proportion to the shares): every
  // expert's output is then computed and rounded to bf16 exactly as on one rank and only the fp32 sum over
  // experts changes order. A width split would round each rank's partial w2 product to bf16 instead, which the
  // FP8 activation quantizers downstream amplify well past the fixtures' bounds.
  void experts_ep(MoeExpertsOp e, bool& alive) {
    auto list = e.getExperts();
    const int64_t n = e.getNExperts(), per = int64_t(list.size()) / n;
    shard::Range x = shard::split(n, 1, r.shares, false)[r.tp_rank];
    alive = x.size() > 0;
    if (!alive) return;
    llvm::SmallVector<mlir::Attribute> out(list.begin() + x.begin * per, list.begin() + x.end * per);
    e.setExpertsAttr(mlir::ArrayAttr::get(e.getContext(), out));
    set_i64(e, "n_routed", n);
    set_i64(e, "n_experts", x.size());
    set_i64(e, "expert_begin", x.begin);
  }

  std::string shared(SwigluMlpOp s, bool& alive) {
    auto q = [&](const char* w, const char* sc) {
      return shard::Quantized{lookup(module, s->getAttr(w)), lookup(module, s->getAttr(sc))};
    };
    bool aq = s.getActQuant() && !s.getActQuant()->empty();
    shard::Range f = ffn_range(q("w1", "w1_scale"), q("w2", "w2_scale"), q("w3", "w3_scale"), aq);
    alive = f.size() > 0;
    if (!alive) return "";
    const bool scaled = bool(s.getW1ScaleAttr());
    return swiglu(s, "w1", "w2", "w3", scaled ? "w1_scale" : "", scaled ? "w2_scale" : "", scaled ? "w3_scale" : "", f);
  }

  // One FFN: routed experts and / or the shared expert, summed by an add; one all_reduce of the partials.
  std::string ffn(MoeExpertsOp e, SwigluMlpOp s, AddOp add) {
    bool e_alive = false, s_alive = false;
    if (e && e.getVariant() && *e.getVariant() == "v41") {
      // Expert parallel: all_reduce the routed sum alone; the shared expert stays whole on every rank and is
      // added after it (the reference's order: routed fp32 sum, then + shared, then bf16).
      experts_ep(e, e_alive);
      mlir::Attribute round = e->getAttr("round");
      e->removeAttr("round");
      all_reduce(e, e.getY(), e_alive ? e.getY() : Value(), round);
      if (!e_alive) e->erase();
      return "";
    }
    if (e)
      if (std::string err = experts(e, e_alive); !err.empty()) return err;
    if (s)
      if (std::string err = shared(s, s_alive); !err.empty()) return err;
    Operation* last = add ? add.getOperation() : e ? e.getOperation() : s.getOperation();
    Value out = last->getResult(0);
    mlir::Attribute round = last->getAttr("round");
    for (Operation* op : {e ? e.getOperation() : nullptr, s ? s.getOperation() : nullptr, add ? add.getOperation() : nullptr})
      if (op) op->removeAttr("round");  // partials are not model values; the full sum is rounded
    Value partial;
    if (e_alive && s_alive) partial = out;
    else if (e_alive) partial = e.getY();
    else if (s_alive) partial = s.getY();
    all_reduce(last, out, partial, round);
    if (add && !(e_alive && s_alive)) add->erase();
    if (e && !e_alive) e->erase();
    if (s && !s_alive) s->erase();
    return "";
  }

  // Columns of the embedding per rank, then all_gather.
  std::string embedding(EmbeddingOp op) {
    shard::Quantized q{lookup(module, op.getEmbedAttr()), WeightOp()};
    if (!q.weight) return where(op) + ": embed is not a smelt.weight";
    int64_t D = shard::extent(q, 1);
    std::vector<shard::Range> all = shard::split(D, shard::split_unit(D, 0, ntp()), r.shares, true);
    if (std::string err = shard(op, "embed", "", 1, all[r.tp_rank]); !err.empty()) return err;
    gather(op, all);
    return "";
  }

  // Vocab rows of the head per rank, then all_gather of the logits.
  std::string head(LinearOp op) {
    shard::Quantized q{lookup(module, op.getWeightAttr()), lookup(module, op.getScaleAttr())};
    if (!q.weight) return where(op) + ": the head weight is not a smelt.weight";
    int64_t V = shard::extent(q, 0);
    std::vector<shard::Range> all = shard::split(V, shard::split_unit(V, shard::block(q, 0), ntp()), r.shares, true);
    if (std::string err = shard(op, "weight", op.getScaleAttr() ? "scale" : "", 0, all[r.tp_rank]); !err.empty())
      return err;
    gather(op, all);
    return "";
  }

  void gather(Operation* op, const std::vector<shard::Range>& all) {
    Value y = op->getResult(0);
    mlir::Type full = y.getType();
    llvm::SmallVector<int64_t> widths;
    for (const auto& a : all) widths.push_back(a.size());
    set_width(y, all[r.tp_rank].size());
    mlir::Builder b(op->getContext());
    Operation* g = collective(op, "smelt.all_gather", y, full, {b.getNamedAttr("widths", b.getDenseI64ArrayAttr(widths))});
    y.replaceAllUsesExcept(g->getResult(0), g);
  }

  // Engram: each rank holds a contiguous row range of the table (by shares); its lookup writes the rows it
  // holds and zeros for the others, so the all_reduce adds each element to zeros only (x + 0 = x: exact) and the
  // gate (wkv, norms, gated add) runs replicated on the joined rows, as at TP1.
  std::string engram(EngramOp op) {
    WeightOp table = lookup(module, op.getTableAttr()), scale = lookup(module, op.getTableScaleAttr());
    if (!table || !scale) return where(op) + ": table / table_scale is not a smelt.weight";
    const int64_t rows = table.getTensorType().getDimSize(0);
    if (rows < ntp()) return "";  // fewer rows than ranks: keep it whole
    shard::Range g = shard::split(rows, 1, r.shares, true)[r.tp_rank];
    auto t = shard::slice(module, table, 0, g, tp_name(table, r.tp_rank));
    auto s = shard::slice(module, scale, 0, g, tp_name(scale, r.tp_rank));
    mlir::OpBuilder b(op);
    Operation* look = engram_ops::build_lookup(b, op, t, s, g.begin, rows);
    Operation* joined = collective(look, "smelt.all_reduce", look->getResult(0), look->getResult(0).getType(), {});
    b.setInsertionPointAfter(joined);
    engram_ops::replace_with_gate(b, op, op.getStreams(), joined->getResult(0), /*with_wkv=*/true);
    return "";
  }

  // The indexer (V4 indexer_topk, V4.1 indexer_v41) by whole heads, in proportion to the shares: wq_b rows and
  // weights_proj rows of the rank's heads; indexer_scores sums their terms, the all_reduce adds the ranks' partial
  // scores (V4.1: and rounds the total to bf16, the indexer's last rounding) and indexer_select runs the candidate
  // level and top-k replicated on the joined scores. A rank without heads (fewer heads than ranks) adds zeros.
  std::string indexer(Operation* ix) {
    const bool v41 = llvm::isa<IndexerV41Op>(ix);
    const int64_t H = ix->getAttrOfType<mlir::IntegerAttr>("heads").getInt();
    const int64_t dI = ix->getAttrOfType<mlir::IntegerAttr>("head_dim").getInt();
    llvm::SmallVector<Operation*> q_ops;  // between wq_b and the indexer, in order
    LinearOp wq_b;
    for (Value v = ix->getOperand(0);;) {
      Operation* d = v.getDefiningOp();
      if (!d || !v.hasOneUse()) return where(ix) + ": q is not computed for the indexer alone";
      if ((wq_b = llvm::dyn_cast<LinearOp>(d))) break;
      if (auto rope = llvm::dyn_cast<RopeOp>(d)) {
        if (rope.getHeads() != H) return where(ix) + ": " + where(d) + " does not rope per indexer head";
      } else if (auto fq = llvm::dyn_cast<FakeQuantOp>(d)) {
        // Per head, or over whole rows in blocks (of at most 32) that never straddle a head.
        const int64_t h = fq.getHeads().value_or(1);
        if (h != H && (h != 1 || fq.getChannels() || dI % 32))
          return where(ix) + ": " + where(d) + " quantizes across indexer heads";
      } else {
        return where(ix) + ": " + where(d) + " between the indexer's q projection and the indexer is not head-local";
      }
      q_ops.insert(q_ops.begin(), d);
      v = d->getOperand(0);
    }
    auto wp = ix->getOperand(1).getDefiningOp<LinearOp>();
    if (!wp || !ix->getOperand(1).hasOneUse()) return where(ix) + ": the head weights (w) are not computed for the indexer alone";
    auto pool_ref = ix->getAttrOfType<mlir::FlatSymbolRefAttr>("index_pool");
    auto pool = module.lookup<StateOp>(pool_ref.getValue());
    if (!pool) return where(ix) + ": index_pool is not a smelt.state";
    const int64_t S = pool.getTensorType().getDimSize(0);
    shard::Range g = shard::split(H, 1, r.shares, H >= ntp())[r.tp_rank];
    const bool alive = g.size() > 0;
    auto numerics = ix->getAttrOfType<mlir::StringAttr>("numerics");
    const bool model_numerics = !(numerics && numerics.getValue() == "fp32");

    mlir::OpBuilder b(ix);
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    auto copy = [&](mlir::OperationState& st, std::initializer_list<const char*> names) {
      for (const char* n : names)
        if (auto a = ix->getAttr(n)) st.addAttribute(n, a);
    };
    auto scores_type = mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, S}, b.getF32Type());
    Value partial;
    if (alive) {
      if (std::string e = shard(wq_b, "weight", wq_b.getScaleAttr() ? "scale" : "", 0, {g.begin * dI, g.end * dI, false});
          !e.empty())
        return e;
      if (std::string e = shard(wp, "weight", wp.getScaleAttr() ? "scale" : "", 0, {g.begin, g.end, false}); !e.empty())
        return e;
      const int64_t h = g.size();
      set_width(wq_b.getY(), h * dI);
      for (Operation* op : q_ops) {
        auto heads = op->getAttrOfType<mlir::IntegerAttr>("heads");
        if (llvm::isa<RopeOp>(op) || (heads && heads.getInt() == H)) set_i64(op, "heads", h);
        set_width(op->getResult(0), h * dI);
      }
      set_width(wp.getY(), h);
      mlir::OperationState ss(ix->getLoc(), "smelt.indexer_scores");
      ss.addOperands({ix->getOperand(0), ix->getOperand(1)});
      ss.addTypes(scores_type);
      ss.addAttribute("index_pool", pool_ref);
      ss.addAttribute("heads", i64(h));
      ss.addAttribute("head_dim", i64(dI));
      ss.addAttribute("heads_total", i64(H));
      ss.addAttribute("variant", b.getStringAttr(v41 ? "v41" : "v4"));
      copy(ss, {"ratio", "layer", "numerics"});
      partial = b.create(ss)->getResult(0);
    }
    mlir::OperationState ar(ix->getLoc(), "smelt.all_reduce");
    if (partial) ar.addOperands(partial);
    ar.addTypes(scores_type);
    ar.addAttribute("group", b.getDenseI64ArrayAttr(r.group));
    copy(ar, {"layer"});
    if (v41 && model_numerics) ar.addAttribute("round", b.getStringAttr("bf16"));
    Value joined = b.create(ar)->getResult(0);
    mlir::OperationState sel(ix->getLoc(), "smelt.indexer_select");
    sel.addOperands(joined);
    for (Value extra : ix->getOperands().drop_front(2)) sel.addOperands(extra);  // V4.1 cand_in
    for (Value res : ix->getResults()) sel.addTypes(res.getType());
    sel.addAttribute("variant", b.getStringAttr(v41 ? "v41" : "v4"));
    copy(sel, {"ratio", "topk", "layer"});
    for (const char* n : {"candidate_blocks", "candidate_block_size", "is_candidate_source"})
      sel.addAttribute(n, v41 ? ix->getAttr(n) : i64(0));
    Operation* select = b.create(sel);
    ix->replaceAllUsesWith(select->getResults());
    ix->erase();
    if (!alive) {  // nothing of the indexer's q / w is computed on this rank
      for (Operation* op : llvm::reverse(q_ops)) op->erase();
      wq_b->erase();
      wp->erase();
    }
    return "";
  }

  std::string run() {
    llvm::SmallVector<SparseAttentionOp> attns;
    llvm::SmallVector<MoeExpertsOp> moes;
    llvm::SmallVector<SwigluMlpOp> mlps;
    llvm::SmallVector<EmbeddingOp> embeds;
    llvm::SmallVector<EngramOp> engrams;
    llvm::SmallVector<Operation*> indexers;
    f.walk([&](Operation* op) {
      if (llvm::isa<IndexerTopkOp, IndexerV41Op>(op)) indexers.push_back(op);
      if (auto e = llvm::dyn_cast<EngramOp>(op)) engrams.push_back(e);
      if (auto a = llvm::dyn_cast<SparseAttentionOp>(op)) attns.push_back(a);
      if (auto m = llvm::dyn_cast<MoeExpertsOp>(op)) moes.push_back(m);
      if (auto m = llvm::dyn_cast<SwigluMlpOp>(op)) mlps.push_back(m);
      if (auto m = llvm::dyn_cast<EmbeddingOp>(op)) embeds.push_back(m);
    });
    for (SparseAttentionOp a : attns)
      if (std::string err = attention(a); !err.empty()) return err;
    llvm::DenseSet<Operation*> paired;
    for (MoeExpertsOp e : moes) {
      SwigluMlpOp s;
      AddOp add;
      if (e.getY().hasOneUse())
        if ((add = llvm::dyn_cast<AddOp>(*e.getY().getUsers().begin()))) {
          Value other = add.getA() == e.getY() ? add.getB() : add.getA();
          s = other.getDefiningOp<SwigluMlpOp>();
          if (!s || !other.hasOneUse()) s = SwigluMlpOp(), add = AddOp();
        }
      if (s) paired.insert(s);
      if (std::string err = ffn(e, s, add); !err.empty()) return err;
    }
    for (SwigluMlpOp s : mlps)
      if (!paired.count(s))
        if (std::string err = ffn(MoeExpertsOp(), s, AddOp()); !err.empty()) return err;
    for (EmbeddingOp e : embeds)
      if (std::string err = embedding(e); !err.empty()) return err;
    for (EngramOp e : engrams)
      if (std::string err = engram(e); !err.empty()) return err;
    for (Operation* ix : indexers)
      if (std::string err = indexer(ix); !err.empty()) return err;
    auto ret = llvm::cast<mlir::func::ReturnOp>(f.getBody().front().getTerminator());
    if (ret.getNumOperands() == 1)
      if (auto h = ret.getOperand(0).getDefiningOp<LinearOp>())
        if (std::string err = head(h); !err.empty()) return err;
    return "";
  }
};

}  // namespace

std::string find_chain(SparseAttentionOp attn, AttentionChain& c) {
  c = AttentionChain();
  c.attn = attn;
  c.heads = attn.getHeads();
  c.head_dim = attn.getHeadDim();
  const std::string at = where(attn);
  auto head_local = [&](Operation* op) -> std::string {
    int64_t h = -1;
    if (auto o = llvm::dyn_cast<RopeOp>(op)) h = o.getHeads();
    if (auto o = llvm::dyn_cast<RmsNormOp>(op)) h = o.getGroups();
    if (auto o = llvm::dyn_cast<FakeQuantOp>(op)) h = o.getHeads().value_or(1);
    if (h < 0) return at + ": " + op->getName().getStringRef().str() + " between the heads' projections is not head-local";
    if (h != c.heads)
      return at + ": " + where(op) + " works on " + std::to_string(h) + " heads' worth of channels, not per head";
    if (auto n = llvm::dyn_cast<RmsNormOp>(op); n && n.getWeightAttr())
      return at + ": a weighted per-head rms_norm in the attention is not supported by the split";
    return "";
  };
  for (Value v = attn.getQ();;) {
    Operation* d = v.getDefiningOp();
    if (!d || !v.hasOneUse()) return at + ": q is not computed for the attention alone";
    if ((c.wq_b = llvm::dyn_cast<LinearOp>(d))) break;
    if (std::string err = head_local(d); !err.empty()) return err;
    c.q_ops.insert(c.q_ops.begin(), d);
    v = d->getOperand(0);
  }
  Value o = attn.getO();
  for (;;) {
    if (!o.hasOneUse()) return at + ": the attention output has users besides the output projection";
    Operation* u = *o.getUsers().begin();
    if ((c.wo_a = llvm::dyn_cast<GroupedLinearOp>(u))) break;
    if (std::string err = head_local(u); !err.empty()) return err;
    c.o_ops.push_back(u);
    o = u->getResult(0);
  }
  Value a = c.wo_a.getY();
  if (!a.hasOneUse() || !(c.wo_b = llvm::dyn_cast<LinearOp>(*a.getUsers().begin())))
    return at + ": wo_a's result must feed one linear (wo_b)";
  c.groups = c.wo_a.getGroups();
  if (c.groups <= 0 || c.heads % c.groups) return at + ": " + std::to_string(c.heads) + " heads in " +
                                                  std::to_string(c.groups) + " output groups";
  c.rank = cols(a) / c.groups;
  return "";
}

void set_heads(AttentionChain& c, int64_t groups) {
  const int64_t h = groups * (c.heads / c.groups), w = h * c.head_dim;
  set_width(c.wq_b.getY(), w);
  for (Operation* op : llvm::concat<Operation* const>(c.q_ops, c.o_ops)) {
    set_i64(op, llvm::isa<RmsNormOp>(op) ? "groups" : "heads", h);
    set_width(op->getResult(0), w);
  }
  set_i64(c.attn, "heads", h);
  set_width(c.attn.getO(), w);
  set_i64(c.wo_a, "groups", groups);
  set_width(c.wo_a.getY(), groups * c.rank);
  c.heads = h;
  c.groups = groups;
}

std::string tp_rewrite(mlir::SymbolTable& module, mlir::func::FuncOp f, const TpRank& r) {
  return Rewriter{module, f, r}.run();
}

}  // namespace smelt::partition
