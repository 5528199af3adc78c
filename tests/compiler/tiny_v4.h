// A synthetic DeepSeek-V4 checkpoint for the compiler tests, until the golden tiny models exist:
// config.json + model.safetensors (official tensor names, small random weights; embed in BF16, tid2eid I64,
// the rest F32). Dims: vocab 64, hidden 32, 4 heads x 16 (rope 8), q_lora 24, 2 output groups x 12,
// 4 experts (or `experts`) top-2 of width 20 + 1 shared, window 8, indexer 4 heads x 8 top-3, hc_mult 2, YaRN x4 on
// compressed layers, max_position_embeddings 256.
#pragma once
#include <string>
#include <vector>

namespace smelt::test {

// ratios: one compress ratio per layer (0 sliding, 4 CSA, other > 0 HCA); the first `hash_layers` layers
// are hash-routed.
// `experts` routed experts (default 4) for scale tests.
void write_tiny_v4(const std::string& dir, const std::vector<int>& ratios = {0, 4, 8, 4}, int hash_layers = 2,
                   unsigned seed = 1, int experts = 4);

}  // namespace smelt::test
