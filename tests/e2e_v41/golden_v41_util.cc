#include "tests/e2e_v41/golden_v41_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

namespace smelt::e2e_v41 {

// ---- tools and processes -------------------------------------------------------------------------------------------

std::string compile_bin() { return test_process::compile_tool(); }
std::string run_bin() { return test_process::run_tool(); }

std::string join_ids(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

// ---- tensors -------------------------------------------------------------------------------------------------------

const TensorInfo* find_tensor(const SafetensorsFile& f, const std::string& name) {
  for (const TensorInfo& t : f.tensors())
    if (t.name == name) return &t;
  return nullptr;
}

Tensor read_tensor(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = find_tensor(f, name);
  if (!t) throw Error(f.path() + ": no tensor " + name);
  Tensor out;
  out.shape = t->shape;
  const uint8_t* p = f.mapping()->data() + t->offset;
  int64_t n = t->numel();
  out.values.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t->dtype) {
      case DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); out.values[i] = v; break; }
      case DType::BF16: {
        uint16_t h; std::memcpy(&h, p + 2 * i, 2);
        uint32_t bits = uint32_t(h) << 16; float v; std::memcpy(&v, &bits, 4); out.values[i] = v; break;
      }
      case DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); out.values[i] = v; break; }
      case DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); out.values[i] = double(v); break; }
      default: throw Error(f.path() + ": tensor " + name + " has an unexpected dtype " + std::string(dtype_name(t->dtype)));
    }
  }
  return out;
}

bool is_bf16_value(double v) {
  float f = float(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return (bits & 0xffffu) == 0 && double(f) == v;
}

double bf16_ulp(double x) {
  x = std::fabs(x);
  if (x < 1e-30) return std::ldexp(1.0, -133);  // bf16 subnormal spacing
  return std::ldexp(1.0, std::ilogb(x) - 7);     // 8 significant bits
}

int64_t argmax_row(const Tensor& t, int64_t r) {
  int64_t v = t.row_elems(), best = 0;
  for (int64_t j = 1; j < v; ++j)
    if (t.values[size_t(r * v + j)] > t.values[size_t(r * v + best)]) best = j;
  return best;
}

double row_max_diff(const Tensor& a, int64_t ra, const Tensor& b, int64_t rb, int64_t* exact) {
  int64_t v = b.row_elems();
  double m = 0;
  for (int64_t j = 0; j < v; ++j) {
    double x = a.values[size_t(ra * v + j)], y = b.values[size_t(rb * v + j)];
    if (x == y && exact) ++*exact;
    double d = std::fabs(x - y);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

// ---- the end-of-run table ------------------------------------------------------------------------------------------

namespace {
std::vector<std::string>& summary() {
  static std::vector<std::string> lines;
  return lines;
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    if (summary().empty()) return;
    std::printf("\n==== V4.1 golden comparison (measured) ====\n");
    for (const auto& l : summary()) std::printf("%s\n", l.c_str());
  }
};
[[maybe_unused]] auto* const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);
}  // namespace

void note(const std::string& line) {
  std::printf("%s\n", line.c_str());
  summary().push_back(line);
}

// ---- golden cases --------------------------------------------------------------------------------------------------

const std::vector<std::string> kCases = {"tiny_backbone_selectall", "tiny_backbone", "tiny_full"};

fs::path goldens_dir() { return SMELT_GOLDENS_V41_DIR; }
fs::path work_dir() { return SMELT_E2E_V41_WORK_DIR; }
bool have_tools() { return !compile_bin().empty() && !run_bin().empty(); }
bool have_case(const std::string& name) { return fs::exists(goldens_dir() / name / "tokens.json"); }

// The README sentence: "Owner-keyed decode vs teacher-forced prefill: the same logits (...) for the first N rows;
// after that the per-row max |difference| is [a, b, ...]". Empty on a parse failure.
std::vector<double> readme_self_differences(const std::string& readme, int64_t rows) {
  static const std::regex re(
      R"(Owner-keyed decode vs teacher-forced prefill:[\s\S]*?first (\d+)\s+rows;[\s\S]*?per-row max \|difference\| is \[([^\]]*)\])");
  std::smatch m;
  if (!std::regex_search(readme, m, re)) return {};
  std::vector<double> out(size_t(std::stoi(m[1].str())), 0.0);
  std::stringstream ss(m[2].str());
  std::string item;
  while (std::getline(ss, item, ','))
    if (item.find_first_not_of(" \n") != std::string::npos) out.push_back(std::stod(item));
  if (int64_t(out.size()) != rows) return {};
  return out;
}

namespace {
// tiny_backbone_selectall stores no checkpoint: it uses tiny_backbone's (README) with its own configs, so the
// model directory is assembled from symlinks.
fs::path model_dir_for(const std::string& name) {
  fs::path dir = goldens_dir() / name;
  if (fs::exists(dir / "model.safetensors")) return dir;
  fs::path m = work_dir() / name / "model";
  fs::remove_all(m);
  fs::create_directories(m);
  fs::create_symlink(goldens_dir() / "tiny_backbone" / "model.safetensors", m / "model.safetensors");
  fs::create_symlink(dir / "config.json", m / "config.json");
  fs::create_symlink(dir / "inference_config.json", m / "inference_config.json");
  return m;
}
}  // namespace

Golden load_golden(const std::string& name) {
  Golden g;
  g.name = name;
  g.dir = goldens_dir() / name;
  g.model_dir = model_dir_for(name);
  g.tokens = nlohmann::json::parse(read_text(g.dir / "tokens.json"));
  g.prompt = g.tokens.at("prompt_ids").get<std::vector<int64_t>>();
  g.ok_ids = g.tokens.at("owner_keyed").at("greedy_ids").get<std::vector<int64_t>>();
  g.ok_margins = g.tokens.at("owner_keyed").at("margins_top1_top2").get<std::vector<double>>();
  g.prompt_margins = g.tokens.at("prompt_margins_top1_top2").get<std::vector<double>>();
  g.prompt_argmax = g.tokens.at("prompt_argmax").get<std::vector<int64_t>>();
  auto logits = SafetensorsFile::open((g.dir / "logits.safetensors").string());
  g.prompt_logits = read_tensor(logits, "prompt_logits");
  g.decode_ok = read_tensor(logits, "decode_logits_owner_keyed");
  g.self_diff = readme_self_differences(read_text(g.dir / "README.md"), g.decode_ok.rows());
  return g;
}

CompileResult compile_model(const std::string& key, const fs::path& model_dir, const fs::path& work,
                            const std::vector<std::string>& extra) {
  static std::map<std::string, CompileResult> cache;  // failures are remembered and reported by every user
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  fs::create_directories(work);
  std::string plan = (work / (key + ".smelt")).string();
  fs::remove(plan);
  // One chunk for the whole prompt, as the reference ran it; 128 positions as in the reference run.
  std::vector<std::string> argv = {compile_bin(), model_dir.string(), "--target", "cpu", "--max-rows", "128",
                                   "--max-seq-len", "128", "-o", plan};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ProcessResult r = run_process(argv, work / (key + ".compile.err"));
  CompileResult c;
  if (r.rc != 0 || !fs::exists(plan)) c.failure = "smelt-compile failed\n" + describe(argv, r);
  else c.plan = plan;
  return cache[key] = c;
}

CompileResult compile_case(const Golden& g, bool captures) {
  if (captures) return compile_model(g.name + ".captures", g.model_dir, work_dir() / g.name, {"--capture-intermediates"});
  return compile_model(g.name + ".plan", g.model_dir, work_dir() / g.name);
}

LogitsRun run_logits(const std::string& plan, const std::vector<int64_t>& prompt, const std::vector<int64_t>& decode_ids,
                     const fs::path& work, const std::string& tag, bool captures) {
  fs::path out = work / (tag + ".safetensors"), cap = work / (tag + ".captures.safetensors");
  fs::remove(out);
  fs::remove(cap);
  std::vector<std::string> argv = {run_bin(), "logits", plan, "--prompt-ids", join_ids(prompt)};
  if (!decode_ids.empty()) argv.insert(argv.end(), {"--decode-ids", join_ids(decode_ids)});
  argv.insert(argv.end(), {"--out", out.string()});
  if (captures) argv.insert(argv.end(), {"--captures", cap.string()});
  ProcessResult r = run_process(argv, work / (tag + ".err"));
  LogitsRun run;
  if (r.rc != 0) {
    run.failure = "smelt-run logits failed\n" + describe(argv, r);
    return run;
  }
  try {
    auto f = SafetensorsFile::open(out.string());
    run.prompt_logits = read_tensor(f, "prompt_logits");
    if (!decode_ids.empty()) run.decode_logits = read_tensor(f, "decode_logits");
    if (captures) {
      if (!fs::exists(cap)) throw Error(cap.string() + ": not written");
      run.captures = cap.string();
    }
  } catch (const std::exception& e) {
    run.failure = std::string(e.what()) + "\n" + describe(argv, r);
  }
  return run;
}

// ---- block comparison ----------------------------------------------------------------------------------------------

std::string block_table_header() {
  char h[240];
  std::snprintf(h, sizeof h, "%-16s %9s %6s %7s %7s %10s %7s %7s %8s %9s", "stream after", "differ", "elems", "pos",
                "1st p/c", "max diff", "ulps", "row-ulp", "pre diff", "pre max");
  return h;
}

BlockStats compare_block(const SafetensorsFile& ours_f, const SafetensorsFile& ref_f, const std::string& prefix,
                         int64_t hc_mult) {
  BlockStats st;
  Tensor ref = read_tensor(ref_f, prefix + ".stream"), ours = read_tensor(ours_f, prefix + ".stream");
  st.rows = ref.shape.size() == 3 ? ref.shape[0] : 1;  // prefill [P, n, D], decode [n, D]
  const int64_t W = int64_t(ref.values.size()) / st.rows;
  if (ours.values.size() != ref.values.size())
    throw Error(prefix + ".stream: " + std::to_string(ours.values.size()) + " values captured, golden has " +
                std::to_string(ref.values.size()));
  for (int64_t r = 0; r < st.rows; ++r) {
    // A whole-row difference of y (attention or FFN output) reaches every element as post * dy, so a rounding
    // step of y shows up as a few ulps at the row's scale but many at a small element: both are reported.
    double ss = 0;
    for (int64_t j = 0; j < W; ++j) ss += ref.values[r * W + j] * ref.values[r * W + j];
    const double row_ulp = bf16_ulp(std::sqrt(ss / double(W)));
    int64_t row_differing = 0;
    for (int64_t j = 0; j < W; ++j) {
      double a = ours.values[r * W + j], b = ref.values[r * W + j];
      st.not_bf16 += !is_bf16_value(a);
      if (a == b) continue;
      ++row_differing;
      if (st.first_pos < 0) st.first_pos = r, st.first_copy = j / (W / hc_mult);
      double d = std::fabs(a - b);
      if (std::isnan(d)) d = INFINITY;
      st.max_diff = std::max(st.max_diff, d);
      st.max_ulps = std::max(st.max_ulps, d / bf16_ulp(std::max(std::fabs(a), std::fabs(b))));
      st.max_row_ulps = std::max(st.max_row_ulps, d / row_ulp);
    }
    st.differing += row_differing;
    st.positions += row_differing > 0;
  }
  st.exact_positions = st.rows - st.positions;
  st.fraction = double(st.differing) / double(ref.values.size());
  char buf[240];
  std::snprintf(buf, sizeof buf, "%-16s %8.3f%% %6lld %3lld/%-3lld %4lld/%-2lld %10.4g %7.1f %7.1f", prefix.c_str(),
                100 * st.fraction, (long long)st.differing, (long long)st.positions, (long long)st.rows,
                (long long)st.first_pos, (long long)st.first_copy, st.max_diff, st.max_ulps, st.max_row_ulps);
  st.line = buf;
  if (find_tensor(ours_f, prefix + ".pre_mix")) {
    Tensor rp = read_tensor(ref_f, prefix + ".pre_mix"), op = read_tensor(ours_f, prefix + ".pre_mix");
    if (op.values.size() != rp.values.size()) throw Error(prefix + ".pre_mix: captured size differs from the golden");
    st.pre_max_diff = 0;
    for (size_t e = 0; e < rp.values.size(); ++e) {
      double d = std::fabs(op.values[e] - rp.values[e]);
      st.pre_differing += op.values[e] != rp.values[e];
      st.pre_max_diff = std::isnan(d) ? INFINITY : std::max(st.pre_max_diff, d);
    }
    st.line += fmt(" %7.1f%%", 100.0 * st.pre_differing / double(rp.values.size())) + fmt(" %9.3g", st.pre_max_diff);
  } else {
    st.line += "   (no pre_mix capture)";
  }
  if (st.not_bf16) st.line += "  NOT-bf16:" + std::to_string(st.not_bf16);
  return st;
}

// ---- which positions a block can be held to exactly ----------------------------------------------------------------

Schedule Schedule::load(const fs::path& path) {
  auto j = nlohmann::json::parse(read_text(path));
  Schedule s;
  s.layers = j.at("n_layers").get<int>();
  s.window = j.at("window_size").get<int>();
  s.ratio = j.at("compress_ratios").get<std::vector<int>>();
  s.ratio.resize(size_t(s.layers));  // DSpark stages are listed after the backbone
  s.engram_layers = j.value("engram_layer_ids", std::vector<int>{});
  auto kv = j.at("kv_source_layers").get<std::vector<int>>();
  auto index = j.at("index_source_layers").get<std::vector<int>>();
  int cand = j.value("candidate_source_layer", -1);
  // A compressed layer reads the latest source at or before it with the same ratio.
  auto latest = [&](const std::vector<int>& list, int L) {
    int best = -1;
    for (int x : list)
      if (x <= L && s.ratio[size_t(x)] == s.ratio[size_t(L)]) best = std::max(best, x);
    return best;
  };
  s.sources.resize(size_t(s.layers));
  for (int L = 0; L < s.layers; ++L) {
    if (s.ratio[size_t(L)] == 0) continue;
    for (int src : {latest(kv, L), latest(index, L), cand >= 0 && cand <= L && s.ratio[size_t(cand)] == s.ratio[size_t(L)] ? cand : -1})
      if (src >= 0 && std::find(s.sources[L].begin(), s.sources[L].end(), src) == s.sources[L].end())
        s.sources[L].push_back(src);
  }
  return s;
}

bool Schedule::can_feed(int k) const {
  if (k < 1 || k > layers) return false;
  for (int e : engram_layers)
    if (e >= k) return false;
  for (int L = k; L < layers; ++L)
    for (int src : sources[size_t(L)])
      if (src < k) return false;
  return true;
}

std::vector<CleanStats> clean_positions(const Schedule& s, const SafetensorsFile& ours, const SafetensorsFile& ref,
                                        int first, double max_row_ulps) {
  // exact[i + 1][p]: block i's output at p is bit-exact; exact[first] (block first - 1: the embedding or the
  // fed reference stream) is exact by construction.
  std::vector<std::vector<char>> exact(size_t(s.layers + 1));
  std::vector<CleanStats> out;
  int64_t P = 0;
  for (int i = first; i < s.layers; ++i) {
    std::string name = "prefill.block" + std::to_string(i) + ".stream";
    Tensor a = read_tensor(ours, name), b = read_tensor(ref, name);
    if (a.values.size() != b.values.size()) throw Error(name + ": captured size differs from the golden");
    P = b.shape[0];
    const int64_t W = int64_t(b.values.size()) / P;
    if (exact[size_t(first)].empty()) exact[size_t(first)].assign(size_t(P), 1);
    auto exact_in = [&](int layer, int64_t q) { return exact[size_t(layer)][size_t(q)] != 0; };  // layer's input
    CleanStats st;
    st.block = i;
    exact[size_t(i + 1)].assign(size_t(P), 0);
    for (int64_t p = 0; p < P; ++p) {
      double ss = 0, d = 0;
      for (int64_t j = 0; j < W; ++j) {
        ss += b.values[p * W + j] * b.values[p * W + j];
        double e = std::fabs(a.values[p * W + j] - b.values[p * W + j]);
        d = std::isnan(e) ? INFINITY : std::max(d, e);
      }
      exact[size_t(i + 1)][size_t(p)] = d == 0;
      bool clean = true;
      for (int64_t q = std::max<int64_t>(0, p - s.window + 1); q <= p && clean; ++q) clean = exact_in(i, q);
      for (int src : s.sources[size_t(i)])
        for (int64_t q = 0; q <= p && clean; ++q) clean = exact_in(src, q);
      if (!clean) continue;
      ++st.clean;
      st.exact += d == 0;
      st.within += d <= max_row_ulps * bf16_ulp(std::sqrt(ss / double(W)));
    }
    out.push_back(st);
  }
  return out;
}

std::string clean_summary(const std::vector<CleanStats>& stats) {
  std::string s;
  for (const CleanStats& st : stats) {
    s += ' ';
    s += std::to_string(st.block);
    s += ':';
    s += std::to_string(st.clean);
    s += '/';
    s += std::to_string(st.exact);
    s += '/';
    s += std::to_string(st.within);
  }
  return s;
}

}  // namespace smelt::e2e_v41
