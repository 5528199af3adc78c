// Partitioned plans against an independent oracle: compile the synthetic tiny V4 with --tp N, read every rank's
// nested plan, rebuild each weight from the checkpoint bytes with the transform grammar of docs/plan.md (written
// here again, not the compiler's), and check that the shards of each weight put side by side along the dimension
// the partition contract names (rows: wq_b, wo_a, sinks, w1, w3, head; columns: wo_b, w2, embedding) give back
// the stored tensor, or for padded attention the hand-built padded tensor (duplicated group 0, zero wo_b columns).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "compiler/driver.h"
#include "frontends/safetensors.h"
#include "schemas/plan_file.h"
#include "schemas/plan_generated.h"
#include "tests/compiler/tiny_v4.h"

namespace smelt {
namespace {

// A row-major tensor of fixed-size elements (bytes), enough to cut, pad and compare exactly.
struct Bytes {
  std::vector<int64_t> shape;
  size_t elem = 0;
  std::vector<uint8_t> data;
  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() == 2 ? shape[1] : 1; }
  const uint8_t* at(int64_t r, int64_t c) const { return data.data() + (size_t(r * cols() + c)) * elem; }
};

// Takes the listed ranges ("a:b" or "zero:n") of dim 0 or 1.
Bytes take(const Bytes& in, int dim, const std::vector<std::pair<int64_t, int64_t>>& ranges /* {-1, n} = zeros */) {
  Bytes out{in.shape, in.elem, {}};
  int64_t n = 0;
  for (auto [a, b] : ranges) n += a < 0 ? b : b - a;
  out.shape[size_t(dim)] = n;
  out.data.assign(size_t(out.rows() * out.cols()) * in.elem, 0);
  for (int64_t r = 0; r < out.rows(); ++r)
    for (int64_t c = 0; c < out.cols(); ++c) {
      int64_t k = dim == 0 ? r : c, src = -1;
      for (auto [a, b] : ranges) {
        int64_t len = a < 0 ? b : b - a;
        if (k < len) {
          src = a < 0 ? -1 : a + k;
          break;
        }
        k -= len;
      }
      if (src >= 0) std::memcpy(out.data.data() + size_t(r * out.cols() + c) * in.elem, dim == 0 ? in.at(src, c) : in.at(r, src), in.elem);
    }
  return out;
}

Bytes apply_transform(Bytes t, const std::string& transform) {
  static const std::regex step(R"((rows|cols)\(([^)]*)\))");
  for (auto it = std::sregex_iterator(transform.begin(), transform.end(), step); it != std::sregex_iterator(); ++it) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::stringstream list((*it)[2].str());
    for (std::string r; std::getline(list, r, ',');) {
      auto colon = r.find(':');
      std::string a = r.substr(0, colon), b = r.substr(colon + 1);
      ranges.push_back({a == "zero" ? -1 : std::stoll(a), std::stoll(b)});
    }
    t = take(t, (*it)[1] == "rows" ? 0 : 1, ranges);
  }
  return t;
}

Bytes concat(const std::vector<Bytes>& parts, int dim) {
  std::vector<std::pair<int64_t, int64_t>> all;
  Bytes joined = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {  // append part i along dim
    Bytes grown{joined.shape, joined.elem, {}};
    grown.shape[size_t(dim)] += parts[i].shape[size_t(dim)];
    grown.data.resize(size_t(grown.rows() * grown.cols()) * grown.elem);
    for (int64_t r = 0; r < grown.rows(); ++r)
      for (int64_t c = 0; c < grown.cols(); ++c) {
        bool first = dim == 0 ? r < joined.rows() : c < joined.cols();
        const uint8_t* src = first ? joined.at(r, c)
                                   : dim == 0 ? parts[i].at(r - joined.rows(), c) : parts[i].at(r, c - joined.cols());
        std::memcpy(grown.data.data() + size_t(r * grown.cols() + c) * grown.elem, src, grown.elem);
      }
    joined = grown;
  }
  return joined;
}

struct Fixture {
  std::string dir;
  Fixture() {
    std::string tmpl = "/tmp/smelt-partition-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    test::write_tiny_v4(dir + "/model");
  }
  ~Fixture() { std::filesystem::remove_all(dir); }
};

const Fixture& fixture() {
  static Fixture f;
  return f;
}

struct Shards {
  std::map<std::string, std::vector<Bytes>> by_base;  // base weight name -> the shards, in rank order
  int ranks = 0;
};

Shards compile_shards(int tp, const std::string& shares = "") {
  CompileOptions o;
  o.model_dir = fixture().dir + "/model";
  o.output = fixture().dir + "/tp" + std::to_string(tp) + ".smelt";
  o.tp = tp;
  o.shares = shares;
  compile(o);
  std::ifstream f(o.output, std::ios::binary);
  std::vector<uint8_t> file{std::istreambuf_iterator<char>(f), {}};
  std::span<const uint8_t> payload;
  EXPECT_EQ(plan_file::check(file, &payload), "");
  const plan::Plan* top = plan::GetPlan(payload.data());
  EXPECT_EQ(top->tp(), tp);
  EXPECT_EQ(top->ops() == nullptr || top->ops()->size() == 0, true);
  Checkpoint ck = Checkpoint::open(o.model_dir);
  Shards s;
  s.ranks = int(top->ranks()->size());
  for (const plan::Rank* r : *top->ranks()) {
    const plan::Plan* p = flatbuffers::GetRoot<plan::Plan>(r->plan()->data());
    flatbuffers::Verifier v(r->plan()->data(), r->plan()->size());
    EXPECT_TRUE(plan::VerifyPlanBuffer(v)) << "rank " << r->index();
    for (const plan::Weight* w : *p->weights()) {
      std::string name = w->name()->str();
      auto dot = name.rfind(".tp");
      if (dot == std::string::npos) continue;
      const TensorInfo* t = ck.find(w->source_name()->str());
      EXPECT_NE(t, nullptr) << name;
      std::span<const uint8_t> b = ck.bytes(*t);
      Bytes src{t->shape, dtype_size(t->dtype), {b.begin(), b.end()}};
      Bytes got = apply_transform(src, w->transform()->str());
      EXPECT_EQ(std::vector<int64_t>(w->shape()->begin(), w->shape()->end()), got.shape) << name;
      EXPECT_EQ(std::vector<int64_t>(w->source_shape()->begin(), w->source_shape()->end()), t->shape) << name;
      s.by_base[name.substr(0, dot)].push_back(got);
    }
  }
  return s;
}

Bytes stored(const std::string& name) {
  Checkpoint ck = Checkpoint::open(fixture().dir + "/model");
  const TensorInfo* t = ck.find(name);
  std::span<const uint8_t> b = ck.bytes(*t);
  return {t->shape, dtype_size(t->dtype), {b.begin(), b.end()}};
}

// The dimension the partition contract splits each weight along.
int split_dim(const std::string& base) {
  for (const char* c : {"wo_b", ".w2.", "embed"})
    if (base.find(c) != std::string::npos) return 1;
  return 0;
}

bool is_indexer(const std::string& base) { return base.find(".indexer.") != std::string::npos; }

bool is_attention(const std::string& base) {
  if (is_indexer(base)) return false;  // the indexer's wq_b is split by indexer heads, never padded
  for (const char* a : {"wq_b", "wo_a", "wo_b", "attn_sink"})
    if (base.find(a) != std::string::npos) return true;
  return false;
}

TEST(PartitionShards, Tp2ShardsConcatenateToTheStoredTensors) {
  Shards s = compile_shards(2);
  EXPECT_EQ(s.ranks, 2);
  // 4 layers x (4 attention + (4 routed + 1 shared) x 3) + embed + head + 2 indexers x (wq_b + weights_proj)
  EXPECT_EQ(s.by_base.size(), 82u);
  for (auto& [base, parts] : s.by_base) {
    ASSERT_EQ(parts.size(), 2u) << base;
    Bytes joined = concat(parts, split_dim(base));
    Bytes want = stored(base);
    EXPECT_EQ(joined.shape, want.shape) << base;
    EXPECT_EQ(joined.data, want.data) << base;
  }
}

// Tiny V4: 4 heads x 16 in 2 groups (32 wq_b rows, 2 sinks, 12 wo_a rows / wo_b columns per group). Padded to
// G' groups, group j >= 2 duplicates group j % 2 and has zero wo_b columns.
Bytes padded(const std::string& base, int groups) {
  Bytes t = stored(base);
  int64_t unit = base.find("wq_b") != std::string::npos ? 32 : base.find("attn_sink") != std::string::npos ? 2 : 12;
  std::vector<std::pair<int64_t, int64_t>> r{{0, 2 * unit}};
  for (int j = 2; j < groups; ++j)
    r.push_back(base.find("wo_b") != std::string::npos ? std::pair<int64_t, int64_t>{-1, unit}
                                                        : std::pair<int64_t, int64_t>{(j % 2) * unit, (j % 2 + 1) * unit});
  return take(t, split_dim(base), r);
}

void check_padded(int tp, const std::string& shares) {
  Shards s = compile_shards(tp, shares);
  EXPECT_EQ(s.ranks, tp);
  for (auto& [base, parts] : s.by_base) {
    // 4 indexer heads: with more ranks than heads some ranks hold none (and no shard)
    ASSERT_EQ(int(parts.size()), is_indexer(base) ? std::min(tp, 4) : tp) << base;
    Bytes joined = concat(parts, split_dim(base));
    Bytes want = is_attention(base) ? padded(base, tp) : stored(base);
    EXPECT_EQ(joined.shape, want.shape) << base;
    EXPECT_EQ(joined.data, want.data) << base;
  }
}

TEST(PartitionShards, Tp3PadsToThreeGroups) { check_padded(3, ""); }
TEST(PartitionShards, Tp5UnevenShares) { check_padded(5, "58,58,58,58,70"); }

}  // namespace
}  // namespace smelt
