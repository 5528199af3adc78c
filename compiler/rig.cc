// Rank-to-GPU mapping, default shares, per-rank memory and the nearest configuration that fits (rig.h).
#include "compiler/rig.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "llvm/ADT/StringSet.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "compiler/dialect/dialect.h"
#include "compiler/dialect/roles.h"
#include "frontends/error.h"

namespace smelt::rig {

namespace {

using cuda_compile::Target;

uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::vector<std::string> split_plus(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find('+', at);
    if (end == std::string::npos) end = s.size();
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Bytes of one weight as the cuda backend stores it (runtime/cuda/device_weights.h): f32 / bf16 / FP8 / packed
// FP4 (i8) as stored, f16 and f64 as f32, other integers as i32; each weight 256-byte aligned.
uint64_t device_bytes(WeightOp w) {
  auto t = w.getTensorType();
  mlir::Type e = t.getElementType();
  uint64_t elem = (e.isF16() || e.isF64()) ? 4 : e.isInteger(8) ? 1 : e.isInteger() ? 4 : e.getIntOrFloatBitWidth() / 8;
  return align256(uint64_t(t.getNumElements()) * elem);
}

bool is_shard(llvm::StringRef name) {  // <canonical>.tp<r> or .tp<r>.<k> (smelt-partition)
  size_t at = name.rfind(".tp");
  if (at == llvm::StringRef::npos) return false;
  llvm::StringRef rest = name.substr(at + 3);
  return !rest.empty() && rest.find_first_not_of("0123456789.") == llvm::StringRef::npos;
}

// Parses a shares list ("5,5,6") into one fraction per rank (tp or tp*pp values; empty = even).
std::vector<double> fractions(const std::string& shares, int64_t tp, int64_t pp) {
  std::vector<double> v;
  size_t at = 0;
  while (at < shares.size()) {
    size_t end = shares.find(',', at);
    if (end == std::string::npos) end = shares.size();
    v.push_back(std::stod(shares.substr(at, end - at)));
    at = end + 1;
  }
  std::vector<double> per_rank(size_t(tp * pp), 1.0);
  for (size_t r = 0; r < per_rank.size() && !v.empty(); ++r)
    per_rank[r] = v[int64_t(v.size()) == tp * pp ? r : r % size_t(tp)];
  for (int64_t s = 0; s < pp; ++s) {
    double total = 0;
    for (int64_t t = 0; t < tp; ++t) total += per_rank[size_t(s * tp + t)];
    for (int64_t t = 0; t < tp; ++t) per_rank[size_t(s * tp + t)] /= total;
  }
  return per_rank;
}

// Integer shares proportional to `w` (largest 1000, at least 1), reduced by their gcd; tp values when every
// stage has the same list.
std::string integer_shares(const std::vector<double>& w, int64_t tp, int64_t pp) {
  double most = *std::max_element(w.begin(), w.end());
  std::vector<int64_t> v;
  for (double x : w) v.push_back(std::max<int64_t>(1, int64_t(std::llround(x / most * 1000))));
  int64_t g = 0;
  for (int64_t x : v) g = std::gcd(g, x);
  for (int64_t& x : v) x /= g;
  bool same = true;
  for (size_t r = size_t(tp); r < v.size(); ++r) same = same && v[r] == v[r % size_t(tp)];
  if (same) v.resize(size_t(tp));
  return join(v);
}

int64_t gpu_limit(const Target& t) { return t.rig ? int64_t(t.gpus.size()) : 8; }  // 8: a one-GPU kind (h200)

}  // namespace

std::vector<int> rank_gpus(const Target& t, int64_t tp, int64_t pp) {
  const int64_t n = tp * pp;
  if (!t.cuda) return {};
  if (t.rig) {
    if (int64_t(t.gpus.size()) < n)
      throw Error("--target " + t.name + ": the rig has " + std::to_string(t.gpus.size()) + " GPU(s), but --tp " +
                  std::to_string(tp) + " --pp " + std::to_string(pp) + " needs " + std::to_string(n) + " (one per rank)");
    std::vector<int> g(static_cast<size_t>(n));
    std::iota(g.begin(), g.end(), 0);
    return g;
  }
  if (t.gpus.size() == 1 && t.gpus[0].memory_bytes > 0) return std::vector<int>(size_t(n), 0);  // h200
  return {};
}

std::string rank_archs(const Target& t, const std::vector<int>& gpus) {
  if (!t.cuda) return "";
  if (gpus.empty()) {
    std::string all;
    for (const auto& a : t.archs) all += (all.empty() ? "" : "+") + a;
    return all;
  }
  std::string s;
  for (size_t r = 0; r < gpus.size(); ++r) s += (r ? "," : "") + t.gpus[size_t(gpus[r])].arch;
  return s;
}

std::string memory_shares(const Target& t, const std::vector<int>& gpus, int64_t tp, int64_t pp) {
  if (gpus.empty() || tp == 1) return "";
  bool differ = false;
  std::vector<int64_t> mb;  // memory in MB, divided by the common divisor: 80, 96 GB -> 5, 6
  for (int64_t s = 0; s < pp; ++s)
    for (int64_t k = 0; k < tp; ++k) {
      mb.push_back(std::max<int64_t>(1, int64_t(std::llround(double(t.gpus[size_t(gpus[size_t(s * tp + k)])].memory_bytes) / 1e6))));
      differ = differ || mb.back() != mb[size_t(s * tp)];
    }
  if (!differ) return "";
  int64_t g = 0;
  for (int64_t x : mb) g = std::gcd(g, x);
  bool same = true;  // every stage the same list: tp values
  for (size_t r = size_t(tp); r < mb.size(); ++r) same = same && mb[r] == mb[r % size_t(tp)];
  if (same) mb.resize(size_t(tp));
  for (int64_t& x : mb) x /= g;
  return join(mb);
}

std::vector<RankMemory> measure(mlir::ModuleOp m, const std::map<std::string, uint64_t>& kernel_bytes,
                                const std::string& default_arch) {
  mlir::SymbolTable symbols(m);
  std::map<int64_t, RankMemory> ranks;
  std::map<int64_t, llvm::StringSet<>> seen;
  const bool partitioned = m->hasAttr("smelt.tp");
  for (auto f : m.getOps<mlir::func::FuncOp>()) {
    int64_t index = 0;
    RankMemory* r = nullptr;
    if (partitioned) {
      auto d = f->getAttrOfType<mlir::DictionaryAttr>("smelt.rank");
      auto i = d ? d.getAs<mlir::IntegerAttr>("index") : nullptr;
      if (!i) throw Error("memory check: @" + f.getSymName().str() + " has no smelt.rank index");
      index = i.getInt();
      r = &ranks[index];
      if (auto a = d.getAs<mlir::StringAttr>("arch")) r->arch = a.str();
      if (auto a = f->getAttrOfType<mlir::IntegerAttr>("smelt.arena_bytes")) r->arena = align256(uint64_t(a.getInt()));
    } else {
      r = &ranks[0];
      r->arch = default_arch;
      if (auto a = m->getAttrOfType<mlir::IntegerAttr>("smelt.arena_bytes")) r->arena = align256(uint64_t(a.getInt()));
    }
    r->rank = index;
    llvm::StringSet<>& mine = seen[index];
    f.walk([&](mlir::Operation* op) {
      for (const SymbolUse& u : weight_uses(op)) {
        if (!u.ref || !mine.insert(u.ref.getValue()).second) continue;
        auto w = symbols.lookup<WeightOp>(u.ref.getValue());
        if (!w) continue;
        uint64_t b = device_bytes(w);
        r->weights += b;
        if (is_shard(w.getSymName())) r->sharded += b;
        if (b > r->largest_bytes) r->largest_bytes = b, r->largest = w.getSymName().str();
      }
      for (const SymbolUse& u : state_uses(op)) {
        if (!u.ref || !mine.insert(u.ref.getValue()).second) continue;
        if (auto s = symbols.lookup<StateOp>(u.ref.getValue()))
          r->states += align256(uint64_t(s.getTensorType().getNumElements()) * 4);  // states are f32
      }
    });
  }
  std::vector<RankMemory> out;
  for (auto& [i, r] : ranks) {
    for (const std::string& a : split_plus(r.arch)) {
      auto k = kernel_bytes.find(a);
      if (k != kernel_bytes.end()) r.kernels += k->second;
    }
    out.push_back(r);
  }
  return out;
}

uint64_t headroom(const Target& t, uint64_t memory_bytes) {
  return uint64_t(double(memory_bytes) * t.headroom_fraction) + t.headroom_bytes;
}

uint64_t available(const Target& t, uint64_t memory_bytes) {
  uint64_t h = headroom(t, memory_bytes);
  return memory_bytes > h ? memory_bytes - h : 0;
}

std::string bytes_text(uint64_t b) {
  char buf[32];
  if (b >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f GB", double(b) / 1e9);
  else if (b >= 1000000ull) std::snprintf(buf, sizeof buf, "%.1f MB", double(b) / 1e6);
  else if (b >= 1000ull) std::snprintf(buf, sizeof buf, "%.1f kB", double(b) / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string gpu_text(const Target& t, int gpu) {
  const auto& g = t.gpus[size_t(gpu)];
  return "GPU " + std::to_string(gpu) + " (" + (g.name.empty() ? "" : g.name + ", ") + g.arch + ", " +
         bytes_text(g.memory_bytes) + ")";
}

std::string breakdown(const RankMemory& r) {
  return "weights " + bytes_text(r.weights) + " + states " + bytes_text(r.states) + " + arena " + bytes_text(r.arena) +
         " + kernels " + bytes_text(r.kernels);
}

bool fits(const Target& t, const CompileOptions& o, const std::vector<RankMemory>& mem) {
  std::vector<int> gpus = rank_gpus(t, o.tp, o.pp);
  for (const RankMemory& r : mem)
    if (size_t(r.rank) < gpus.size() && r.total() > available(t, t.gpus[size_t(gpus[size_t(r.rank)])].memory_bytes))
      return false;
  return true;
}

std::string nearest(const Target& t, const CompileOptions& o, const std::string& shares,
                    const std::vector<RankMemory>& mem, const TryConfig& try_config,
                    const std::function<void(const std::string&)>& progress) {
  auto attempt = [&](const CompileOptions& c, const std::string& flags) {
    progress("trying " + flags);
    auto m = try_config(c);
    return m && fits(t, c, *m);
  };
  const std::vector<int> gpus = rank_gpus(t, o.tp, o.pp);
  auto avail = [&](const RankMemory& r) { return available(t, t.gpus[size_t(gpus[size_t(r.rank)])].memory_bytes); };

  // 1. A smaller --max-seq-len, if the states are what does not fit (halving; the first that fits is the largest).
  bool states_help = std::all_of(mem.begin(), mem.end(), [&](const RankMemory& r) {
    return r.total() <= avail(r) || r.total() - r.states <= avail(r);
  });
  if (states_help)
    for (int64_t L = o.max_seq_len / 2; L >= 128; L /= 2) {
      CompileOptions c = o;
      c.max_seq_len = L;
      if (attempt(c, "--max-seq-len " + std::to_string(L))) return "--max-seq-len " + std::to_string(L);
    }

  // 2. Shares moved toward the ranks with room: each TP group's shards in proportion to what its GPUs have
  // left after the replicated part (weights that are not shards, states, arena, kernels).
  if (o.tp > 1) {
    std::vector<double> frac = fractions(shares, o.tp, o.pp), room;
    bool possible = true;
    for (const RankMemory& r : mem) {
      double fixed = double(r.total() - r.sharded);
      room.push_back(std::max(0.0, double(avail(r)) - fixed));
      possible = possible && room.back() > 0;
    }
    // Shards come in whole groups / experts / blocks, so a proportional guess can fall short: then push harder
    // (room squared, to the fourth), each tried once.
    std::set<std::string> tried;
    for (double power : {1.0, 2.0, 4.0}) {
      if (!possible || room.size() != frac.size()) break;
      std::vector<double> w;
      for (double x : room) w.push_back(std::pow(x, power));
      std::string s = integer_shares(w, o.tp, o.pp);
      if (fractions(s, o.tp, o.pp) == frac || !tried.insert(s).second) continue;
      CompileOptions c = o;
      c.shares = s;
      if (attempt(c, "--shares " + s)) return "--shares " + s;
    }
  }

  // 3. More stages with the same TP (balanced cuts, shares recomputed for the new groups unless given).
  for (int64_t p = o.pp + 1; o.tp * p <= gpu_limit(t); ++p) {
    CompileOptions c = o;
    c.pp = p;
    c.stages.clear();
    if (std::count(o.shares.begin(), o.shares.end(), ',') + 1 != o.tp) c.shares.clear();  // per-rank lists
    if (attempt(c, "--pp " + std::to_string(p))) return "--pp " + std::to_string(p) + (o.tp > 1 ? " --tp " + std::to_string(o.tp) : "");
  }

  // 4. A larger TP with the same stages (a TP size the model cannot split exactly is skipped).
  for (int64_t tp = o.tp + 1; tp * o.pp <= gpu_limit(t); ++tp) {
    CompileOptions c = o;
    c.tp = tp;
    c.shares.clear();
    if (attempt(c, "--tp " + std::to_string(tp))) return "--tp " + std::to_string(tp) + (o.pp > 1 ? " --pp " + std::to_string(o.pp) : "");
  }
  return "";
}

}  // namespace smelt::rig
