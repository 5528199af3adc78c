// The V4.1 Engram n-gram hash (architecture spec §2.6): per Engram layer, every position gets
// (max_ngram - 1) * n_heads row ids into that layer's table, one per (n-gram order, head).
//
// The per-layer multipliers come from numpy.random.default_rng(10007 * layer_id).integers(...), so
// this file also carries a re-implementation of the pieces of numpy's Generator that produce them
// (SeedSequence -> PCG64 -> Lemire bounded integers); they must match numpy bit for bit.
#pragma once
#include <cstdint>
#include <vector>

namespace smelt::kernels::engram {

// ---- numpy-compatible random numbers --------------------------------------------------------------

// numpy.random.SeedSequence(entropy=seed) with the default pool size 4: generate_state(n_words)
// as uint32 words.
std::vector<uint32_t> numpy_seed_sequence_state(uint64_t seed, int n_words);

// numpy.random.PCG64 (XSL-RR 128/64, default multiplier), seeded the way default_rng(seed) seeds it.
struct Pcg64 {
  unsigned __int128 state = 0;
  unsigned __int128 inc = 0;
  bool has_uint32 = false;  // numpy hands out the high half of a 64-bit draw on the next 32-bit call
  uint32_t uinteger = 0;

  explicit Pcg64(uint64_t seed);
  uint64_t next_uint64();
  uint32_t next_uint32();
};

// Generator.integers(low, high, size=n, dtype=int64) with an exclusive high (Lemire's method, the
// Generator default).
std::vector<int64_t> numpy_integers_int64(Pcg64& rng, int64_t low, int64_t high, int n);

// ---- hash layout ---------------------------------------------------------------------------------

struct EngramHashConfig {
  std::vector<int> layer_ids;          // engram_layer_ids
  int64_t vocab_size = 0;              // engram_vocab_size (primes start above vocab_size - 1)
  int max_ngram = 0;                   // engram_max_ngram_size (orders 2 .. max_ngram)
  int n_heads = 0;                     // engram_n_heads
  int64_t compressed_vocab_size = 0;   // engram_compressed_vocab_size
};

struct EngramHashLayout {
  int max_ngram = 0;
  int n_heads = 0;
  int64_t compressed_vocab_size = 0;
  int64_t bound = 0;  // max(1, (INT64_MAX // compressed_vocab) // 2)
  // Per Engram layer, in config order; columns are (order - 2) * n_heads + head.
  std::vector<std::vector<int64_t>> primes;
  std::vector<std::vector<int64_t>> offsets;      // exclusive prefix sums of primes
  std::vector<int64_t> rows;                      // sum of primes = table rows
  std::vector<std::vector<int64_t>> multipliers;  // [layer][s], s = 0 .. max_ngram-1

  int cols() const { return (max_ngram - 1) * n_heads; }
  int layers() const { return int(primes.size()); }
};

// Validates the config (throws smelt::Error naming the key) and derives primes, offsets, multipliers.
EngramHashLayout make_hash_layout(const EngramHashConfig& cfg);

// ---- hashing -------------------------------------------------------------------------------------

// The last max_ngram - 1 compressed ids of a sequence (oldest first), carried from prefill to decode.
// Fewer entries means the sequence is younger than that: missing look-backs read the pad id.
struct EngramHistory {
  std::vector<int64_t> recent;
};

// Token ids -> compressed ids through the tokenizer-derived map (throws on an id outside the map).
std::vector<int64_t> compress_ids(const std::vector<int64_t>& map, const int64_t* ids, int64_t n);

// Hash ids for n new positions with compressed ids `compressed` (continuing `history`, which is
// updated). pad_compressed = map[engram_pad_id]. Every compressed id must lie in
// [0, compressed_vocab_size) (else smelt::Error). out: [n, layers, cols] row ids, each already offset
// into its layer's table.
void engram_hash(const EngramHashLayout& layout, const int64_t* compressed, int64_t n, int64_t pad_compressed,
                 EngramHistory& history, int64_t* out);

}  // namespace smelt::kernels::engram
