#include "kernels/engram/hash.h"

#include <algorithm>
#include <limits>
#include <string>

#include "frontends/error.h"

namespace smelt::kernels::engram {
namespace {

using u128 = unsigned __int128;

[[noreturn]] void fail(const std::string& what) { throw smelt::Error("engram: " + what); }

// ---- numpy SeedSequence (O'Neill's seed_seq variant), uint32 arithmetic throughout ---------------

constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> kXShift);
}

uint32_t mix(uint32_t x, uint32_t y) {
  const uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> kXShift);
}

// An integer seed becomes its 32-bit words, lowest first (0 is one zero word).
std::vector<uint32_t> seed_words(uint64_t seed) {
  std::vector<uint32_t> w;
  if (seed == 0) w.push_back(0);
  for (; seed; seed >>= 32) w.push_back(uint32_t(seed));
  return w;
}

std::vector<uint32_t> mix_pool(const std::vector<uint32_t>& entropy) {
  std::vector<uint32_t> pool(kPoolSize);
  uint32_t hc = kInitA;
  for (int i = 0; i < kPoolSize; ++i) pool[i] = hashmix(i < int(entropy.size()) ? entropy[i] : 0u, hc);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hc));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hc));
  return pool;
}

// ---- PCG64 constants -----------------------------------------------------------------------------

constexpr u128 kPcgMultiplier = (u128(2549297995355413924ull) << 64) | u128(4865540595714422341ull);

uint64_t rotr64(uint64_t v, unsigned r) { return r == 0 ? v : (v >> r) | (v << (64 - r)); }

// ---- primes ------------------------------------------------------------------------------------

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2)
    if (n % d == 0) return false;
  return true;
}

int64_t next_prime_above(int64_t n) {
  for (int64_t p = n + 1;; ++p)
    if (is_prime(p)) return p;
}

}  // namespace

std::vector<uint32_t> numpy_seed_sequence_state(uint64_t seed, int n_words) {
  const std::vector<uint32_t> pool = mix_pool(seed_words(seed));
  std::vector<uint32_t> out(size_t(std::max(n_words, 0)));
  uint32_t hc = kInitB;
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hc;
    hc *= kMultB;
    v *= hc;
    out[i] = v ^ (v >> kXShift);
  }
  return out;
}

Pcg64::Pcg64(uint64_t seed) {
  // generate_state(4, uint64): little-endian pairs of uint32 words; words 0,1 are the 128-bit seed
  // (high, low) and words 2,3 the stream (high, low).
  const std::vector<uint32_t> w = numpy_seed_sequence_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = uint64_t(w[2 * i]) | (uint64_t(w[2 * i + 1]) << 32);
  const u128 initstate = (u128(v[0]) << 64) | v[1];
  const u128 initseq = (u128(v[2]) << 64) | v[3];
  // PCG's srandom: state 0, odd increment from the stream, step, add the seed, step.
  state = 0;
  inc = (initseq << 1) | 1;
  state = state * kPcgMultiplier + inc;
  state += initstate;
  state = state * kPcgMultiplier + inc;
}

uint64_t Pcg64::next_uint64() {
  state = state * kPcgMultiplier + inc;  // step, then output from the new state (XSL-RR)
  return rotr64(uint64_t(state >> 64) ^ uint64_t(state), unsigned(state >> 122));
}

uint32_t Pcg64::next_uint32() {
  if (has_uint32) {
    has_uint32 = false;
    return uinteger;
  }
  const uint64_t v = next_uint64();
  has_uint32 = true;
  uinteger = uint32_t(v >> 32);
  return uint32_t(v);
}

std::vector<int64_t> numpy_integers_int64(Pcg64& rng, int64_t low, int64_t high, int n) {
  if (high <= low) fail("integers: high " + std::to_string(high) + " <= low " + std::to_string(low));
  // numpy draws on the closed interval [low, high - 1]: range = high - 1 - low, offset low.
  const uint64_t range = uint64_t(high - 1) - uint64_t(low);
  const uint64_t off = uint64_t(low);
  std::vector<int64_t> out(size_t(std::max(n, 0)));
  for (auto& o : out) {
    uint64_t v;
    if (range == 0) {
      v = 0;
    } else if (range < 0xFFFFFFFFull) {  // 32-bit Lemire on the (buffered) 32-bit stream
      const uint32_t excl = uint32_t(range) + 1;
      uint64_t m = uint64_t(rng.next_uint32()) * excl;
      uint32_t left = uint32_t(m);
      if (left < excl) {
        const uint32_t threshold = uint32_t(0xFFFFFFFFu - uint32_t(range)) % excl;
        while (left < threshold) {
          m = uint64_t(rng.next_uint32()) * excl;
          left = uint32_t(m);
        }
      }
      v = m >> 32;
    } else if (range == 0xFFFFFFFFull) {
      v = rng.next_uint32();
    } else if (range == std::numeric_limits<uint64_t>::max()) {
      v = rng.next_uint64();
    } else {  // 64-bit Lemire
      const uint64_t excl = range + 1;
      u128 m = u128(rng.next_uint64()) * excl;
      uint64_t left = uint64_t(m);
      if (left < excl) {
        const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - range) % excl;
        while (left < threshold) {
          m = u128(rng.next_uint64()) * excl;
          left = uint64_t(m);
        }
      }
      v = uint64_t(m >> 64);
    }
    o = int64_t(off + v);
  }
  return out;
}

EngramHashLayout make_hash_layout(const EngramHashConfig& cfg) {
  if (cfg.layer_ids.empty()) fail("engram_layer_ids is empty");
  if (cfg.max_ngram < 2) fail("engram_max_ngram_size " + std::to_string(cfg.max_ngram) + " < 2");
  if (cfg.n_heads < 1) fail("engram_n_heads " + std::to_string(cfg.n_heads) + " < 1");
  if (cfg.vocab_size < 1) fail("engram_vocab_size " + std::to_string(cfg.vocab_size) + " < 1");
  if (cfg.compressed_vocab_size < 1)
    fail("engram_compressed_vocab_size " + std::to_string(cfg.compressed_vocab_size) + " < 1");
  for (int id : cfg.layer_ids)
    if (id < 0) fail("engram_layer_ids holds a negative layer id " + std::to_string(id));

  EngramHashLayout L;
  L.max_ngram = cfg.max_ngram;
  L.n_heads = cfg.n_heads;
  L.compressed_vocab_size = cfg.compressed_vocab_size;
  L.bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / cfg.compressed_vocab_size) / 2);

  // Primes count up from vocab_size - 1 across heads, orders and layers, never repeating.
  int64_t last = cfg.vocab_size - 1;
  for (int layer_id : cfg.layer_ids) {
    std::vector<int64_t> primes, offsets;
    int64_t sum = 0;
    for (int c = 0; c < L.cols(); ++c) {
      last = next_prime_above(last);
      primes.push_back(last);
      offsets.push_back(sum);
      sum += last;
    }
    L.primes.push_back(std::move(primes));
    L.offsets.push_back(std::move(offsets));
    L.rows.push_back(sum);

    Pcg64 rng(uint64_t(10007) * uint64_t(layer_id));
    std::vector<int64_t> m = numpy_integers_int64(rng, 0, L.bound, cfg.max_ngram);
    for (auto& v : m) v = 2 * v + 1;
    L.multipliers.push_back(std::move(m));
  }
  return L;
}

std::vector<int64_t> compress_ids(const std::vector<int64_t>& map, const int64_t* ids, int64_t n) {
  std::vector<int64_t> out(size_t(std::max<int64_t>(n, 0)));
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= int64_t(map.size()))
      fail("token id " + std::to_string(ids[t]) + " outside the compressed token map of " +
           std::to_string(map.size()) + " entries");
    out[size_t(t)] = map[size_t(ids[t])];
  }
  return out;
}

void engram_hash(const EngramHashLayout& L, const int64_t* compressed, int64_t n, int64_t pad_compressed,
                 EngramHistory& history, int64_t* out) {
  const int look = L.max_ngram - 1;
  const int cols = L.cols();
  const int layers = L.layers();
  auto check = [&](int64_t c) {
    if (c < 0 || c >= L.compressed_vocab_size)
      fail("compressed token id " + std::to_string(c) + " outside [0, " + std::to_string(L.compressed_vocab_size) +
           ")");
  };
  check(pad_compressed);
  for (int64_t t = 0; t < n; ++t) check(compressed[t]);
  for (int64_t c : history.recent) check(c);
  // Window of the last `look` ids (oldest first) followed by the new ones.
  std::vector<int64_t> seq(history.recent.end() - std::min<size_t>(history.recent.size(), size_t(look)),
                           history.recent.end());
  const int64_t before = int64_t(seq.size());
  seq.insert(seq.end(), compressed, compressed + n);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = before + t;
    for (int l = 0; l < layers; ++l) {
      const auto& mult = L.multipliers[size_t(l)];
      const auto& primes = L.primes[size_t(l)];
      const auto& offsets = L.offsets[size_t(l)];
      int64_t* o = out + (t * layers + l) * cols;
      // P_s = c_s * m[s] with c_s the id s positions back (pad before the sequence start); the
      // products stay below INT64_MAX because m < INT64_MAX / compressed_vocab.
      auto c = [&](int s) -> uint64_t { return uint64_t(pos - s >= 0 ? seq[size_t(pos - s)] : pad_compressed); };
      uint64_t h = c(0) * uint64_t(mult[0]);
      for (int i = 1; i <= look; ++i) {
        h ^= c(i) * uint64_t(mult[size_t(i)]);
        for (int e = 0; e < L.n_heads; ++e) {
          const int col = (i - 1) * L.n_heads + e;
          o[col] = int64_t(h % uint64_t(primes[size_t(col)])) + offsets[size_t(col)];
        }
      }
    }
  }
  const size_t keep = std::min(seq.size(), size_t(look));
  history.recent.assign(seq.end() - keep, seq.end());
}

}  // namespace smelt::kernels::engram
