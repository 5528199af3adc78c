// Engram hash: the numpy-compatible multipliers and the primes against the values published in the
// architecture spec (§2.6 for V4.1-Flash, §8 for the tiny config), and the per-position row ids
// against the official reference's output stored in the tiny_full golden (exact match).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/engram/hash.h"

namespace eg = smelt::kernels::engram;
using I64 = std::vector<int64_t>;

namespace {

std::string golden_dir() { return std::string(SMELT_SHARED_DIR) + "/goldens/v41/tiny_full"; }

nlohmann::json load_tokens() {
  const std::string path = golden_dir() + "/tokens.json";
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

eg::EngramHashConfig tiny_config() {
  eg::EngramHashConfig c;
  c.layer_ids = {1, 2};
  c.vocab_size = 61;
  c.max_ngram = 4;
  c.n_heads = 2;
  c.compressed_vocab_size = 512;
  return c;
}

}  // namespace

// numpy's documented output: default_rng(seed=42).random((3, 3)) starts 0.77395605, 0.43887844,
// 0.85859792 (random() = (next_uint64 >> 11) * 2^-53). Checks SeedSequence + PCG64 on their own.
TEST(NumpyRng, DefaultRng42RandomMatchesNumpyDocs) {
  eg::Pcg64 rng(42);
  const double want[3] = {0.77395605, 0.43887844, 0.85859792};
  for (double w : want) EXPECT_NEAR(double(rng.next_uint64() >> 11) * 0x1p-53, w, 5e-9);
}

// The 32-bit Lemire path with PCG64's buffered 32-bit draws (ranges below 2^32), continuing the same
// generator: rng.integers(0, 10, size=5) -> [0, 6, 2, 0, 5], then integers(0, 10, size=5,
// endpoint=True) -> [10, 8, 8, 7, 8] (values from a published numpy session).
TEST(NumpyRng, DefaultRng42SmallIntegers) {
  eg::Pcg64 rng(42);
  for (int i = 0; i < 3; ++i) rng.next_uint64();  // the three random() draws above
  EXPECT_EQ(eg::numpy_integers_int64(rng, 0, 10, 5), (I64{0, 6, 2, 0, 5}));
  EXPECT_EQ(eg::numpy_integers_int64(rng, 0, 11, 5), (I64{10, 8, 8, 7, 8}));
}

TEST(EngramHash, V41FlashPrimesBoundMultipliers) {
  eg::EngramHashConfig c;
  c.layer_ids = {1, 14};
  c.vocab_size = 16000000;
  c.max_ngram = 4;
  c.n_heads = 8;
  c.compressed_vocab_size = 99092;
  const eg::EngramHashLayout L = eg::make_hash_layout(c);
  const I64 p1 = {16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183,
                  16000189, 16000207, 16000211, 16000253, 16000277, 16000289, 16000307, 16000321,
                  16000339, 16000381, 16000393, 16000399, 16000403, 16000409, 16000447, 16000463};
  const I64 p14 = {16000477, 16000487, 16000499, 16000507, 16000511, 16000573, 16000609, 16000627,
                   16000667, 16000669, 16000693, 16000697, 16000711, 16000729, 16000759, 16000769,
                   16000781, 16000799, 16000813, 16000819, 16000841, 16000877, 16000879, 16000889};
  ASSERT_EQ(L.layers(), 2);
  EXPECT_EQ(L.cols(), 24);
  EXPECT_EQ(L.primes[0], p1);
  EXPECT_EQ(L.primes[1], p14);
  EXPECT_EQ(L.rows[0], 384006168);
  EXPECT_EQ(L.rows[1], 384016682);
  EXPECT_EQ(L.offsets[0][0], 0);
  EXPECT_EQ(L.offsets[0][1], 16000057);
  EXPECT_EQ(L.offsets[1][23], 384016682 - 16000889);
  EXPECT_EQ(L.bound, 46539438283891);
  EXPECT_EQ(L.multipliers[0], (I64{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(L.multipliers[1], (I64{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(EngramHash, TinyConfigMatchesSpecSection8) {
  const eg::EngramHashLayout L = eg::make_hash_layout(tiny_config());
  EXPECT_EQ(L.primes[0], (I64{61, 67, 71, 73, 79, 83}));
  EXPECT_EQ(L.primes[1], (I64{89, 97, 101, 103, 107, 109}));
  EXPECT_EQ(L.rows, (I64{434, 606}));
  EXPECT_EQ(L.bound, 9007199254740991);
  EXPECT_EQ(L.multipliers[0], (I64{14831304026200453, 936705081716061, 6959601268494069, 14319439928568407}));
  EXPECT_EQ(L.multipliers[1], (I64{14807183965884349, 7179874451713115, 4383153767543747, 13823440822075059}));
}

TEST(EngramHash, TinyGoldenLayoutAndPromptHashIds) {
  if (!std::filesystem::exists(golden_dir() + "/tokens.json")) GTEST_SKIP() << "no golden under " << golden_dir();
  const nlohmann::json tok = load_tokens();
  const auto& eng = tok.at("engram");
  ASSERT_EQ(eng.at("token_map").get<std::string>(), "identity");
  const eg::EngramHashLayout L = eg::make_hash_layout(tiny_config());

  // primes [layer][order][head], offsets [layer][col], multipliers [layer][s]
  const auto primes = eng.at("primes").get<std::vector<std::vector<I64>>>();
  for (int l = 0; l < 2; ++l) {
    I64 flat;
    for (const auto& order : primes[size_t(l)]) flat.insert(flat.end(), order.begin(), order.end());
    EXPECT_EQ(L.primes[size_t(l)], flat) << "layer " << l;
  }
  EXPECT_EQ(L.offsets, eng.at("offsets").get<std::vector<I64>>());
  EXPECT_EQ(L.multipliers, eng.at("multipliers").get<std::vector<I64>>());

  const I64 prompt = tok.at("prompt_ids").get<I64>();
  const auto want = eng.at("prompt_hash_ids").get<std::vector<std::vector<I64>>>();  // [T, layer, 6]
  ASSERT_EQ(prompt.size(), 69u);
  ASSERT_EQ(want.size(), prompt.size());

  I64 map(512);
  std::iota(map.begin(), map.end(), 0);
  const I64 comp = eg::compress_ids(map, prompt.data(), int64_t(prompt.size()));
  const int64_t pad = map[size_t(eng.at("pad_compressed_id").get<int64_t>())];
  ASSERT_EQ(pad, 2);

  // whole prompt in one call
  eg::EngramHistory hist;
  I64 got(prompt.size() * 2 * 6);
  eg::engram_hash(L, comp.data(), int64_t(comp.size()), pad, hist, got.data());
  int mismatches = 0;
  for (size_t t = 0; t < prompt.size(); ++t)
    for (int l = 0; l < 2; ++l)
      for (int c = 0; c < 6; ++c)
        if (got[(t * 2 + size_t(l)) * 6 + size_t(c)] != want[t][size_t(l)][size_t(c)]) ++mismatches;
  EXPECT_EQ(mismatches, 0) << "of " << prompt.size() * 12 << " hash ids";
  EXPECT_EQ(hist.recent, I64(comp.end() - 3, comp.end()));

  // the same ids from a prefill of 40 then one-token decode steps carrying the history
  eg::EngramHistory h2;
  I64 split(got.size());
  eg::engram_hash(L, comp.data(), 40, pad, h2, split.data());
  for (size_t t = 40; t < comp.size(); ++t) eg::engram_hash(L, comp.data() + t, 1, pad, h2, split.data() + t * 12);
  EXPECT_EQ(split, got);
}

TEST(EngramHash, HandComputedFirstPositions) {
  // Position 0 of a sequence: c_0 = id, c_1..c_3 = pad. h = c0*m0 ^ pad*m1 for order 2, etc.
  const eg::EngramHashLayout L = eg::make_hash_layout(tiny_config());
  const auto& m = L.multipliers[0];
  const int64_t id = 7, pad = 2;
  uint64_t h = uint64_t(id * m[0]) ^ uint64_t(pad * m[1]);
  I64 out(12);
  eg::EngramHistory hist;
  eg::engram_hash(L, &id, 1, pad, hist, out.data());
  EXPECT_EQ(out[0], int64_t(h % 61));
  EXPECT_EQ(out[1], int64_t(h % 67) + 61);
  h ^= uint64_t(pad * m[2]);
  EXPECT_EQ(out[2], int64_t(h % 71) + 128);
  h ^= uint64_t(pad * m[3]);
  EXPECT_EQ(out[5], int64_t(h % 83) + 351);
  EXPECT_EQ(hist.recent, I64{7});
}

TEST(EngramHash, RejectsBadInput) {
  const eg::EngramHashLayout L = eg::make_hash_layout(tiny_config());
  eg::EngramHistory hist;
  I64 out(12);
  const int64_t bad = 512;
  EXPECT_THROW(eg::engram_hash(L, &bad, 1, 2, hist, out.data()), std::runtime_error);
  const I64 map = {0, 1, 2};
  const int64_t tok = 3;
  EXPECT_THROW(eg::compress_ids(map, &tok, 1), std::runtime_error);
  auto c = tiny_config();
  c.max_ngram = 1;
  EXPECT_THROW(eg::make_hash_layout(c), std::runtime_error);
}
