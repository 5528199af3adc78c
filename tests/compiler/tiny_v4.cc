// A synthetic DeepSeek-V4 checkpoint for the compiler tests (see tiny_v4.h). The tensor list is written out
// here from the architecture (docs/ops.md and the transformers reference), independently of
// frontends/model.cc, so that a disagreement shows up as a load error.
#include "tests/compiler/tiny_v4.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "frontends/error.h"
#include "frontends/safetensors_writer.h"

namespace {

struct Tensor {
  std::string name;
  smelt::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

}  // namespace

namespace smelt::test {

void write_tiny_v4(const std::string& dir, const std::vector<int>& ratios, int hash_layers, unsigned seed,
                   int experts) {
  const int layers = int(ratios.size());
  const int64_t V = 64, D = 32, H = 4, hd = 16, rope = 8, Q = 24, G = 2, R = 12, E = experts, K = 2, F = 20, n = 2;
  const int64_t HI = 4, dI = 8, topk = 3, window = 8;
  std::filesystem::create_directories(dir);
  {
    std::ostringstream c;
    c << "{\n  \"model_type\": \"deepseek_v4\",\n  \"vocab_size\": " << V << ",\n  \"hidden_size\": " << D
      << ",\n  \"num_hidden_layers\": " << layers << ",\n  \"num_attention_heads\": " << H
      << ",\n  \"num_key_value_heads\": 1,\n  \"head_dim\": " << hd << ",\n  \"qk_rope_head_dim\": " << rope
      << ",\n  \"q_lora_rank\": " << Q << ",\n  \"o_groups\": " << G << ",\n  \"o_lora_rank\": " << R
      << ",\n  \"n_routed_experts\": " << E << ",\n  \"n_shared_experts\": 1,\n  \"num_experts_per_tok\": " << K
      << ",\n  \"moe_intermediate_size\": " << F
      << ",\n  \"scoring_func\": \"sqrtsoftplus\",\n  \"norm_topk_prob\": true,\n  \"routed_scaling_factor\": 1.5"
      << ",\n  \"swiglu_limit\": 10.0,\n  \"sliding_window\": " << window << ",\n  \"compress_ratios\": [";
    for (int i = 0; i < layers; ++i) c << (i ? ", " : "") << ratios[i];
    c << "],\n  \"num_hash_layers\": " << hash_layers << ",\n  \"index_n_heads\": " << HI
      << ",\n  \"index_head_dim\": " << dI << ",\n  \"index_topk\": " << topk
      << ",\n  \"rms_norm_eps\": 1e-6,\n  \"rope_theta\": 10000.0,\n  \"compress_rope_theta\": 160000.0"
      << ",\n  \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 64,"
      << " \"beta_fast\": 32, \"beta_slow\": 1},\n  \"max_position_embeddings\": 256,\n  \"hc_mult\": " << n
      << ",\n  \"hc_sinkhorn_iters\": 3,\n  \"hc_eps\": 1e-6\n}\n";
    std::ofstream(dir + "/config.json") << c.str();
  }

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Tensor> tensors;
  // F32 unless noted; linears N(0, 1/fan_in), norm weights 1 + N(0, 0.1), the rest N(0, 0.3).
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float shift = 0.f,
                 smelt::DType dt = smelt::DType::F32) {
    int64_t count = 1;
    for (int64_t s : shape) count *= s;
    Tensor t{name, dt, shape, {}};
    if (dt == smelt::DType::BF16) {
      std::vector<uint16_t> v(count);
      for (auto& x : v) x = bf16(shift + scale * normal(rng));
      t.bytes.assign(reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data() + count));
    } else {
      std::vector<float> v(count);
      for (auto& x : v) x = shift + scale * normal(rng);
      t.bytes.assign(reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data() + count));
    }
    tensors.push_back(std::move(t));
  };
  auto lin = [&](const std::string& name, int64_t out, int64_t in) {
    add(name, {out, in}, 1.f / std::sqrt(float(in)));
  };
  auto norm = [&](const std::string& name, int64_t d) { add(name, {d}, 0.1f, 1.f); };

  add("embed.weight", {V, D}, 1.f, 0.f, smelt::DType::BF16);
  for (int L = 0; L < layers; ++L) {
    const std::string p = "layers." + std::to_string(L) + ".";
    const int r = ratios[L];
    for (const char* site : {"attn", "ffn"}) {
      lin(p + "hc_" + site + "_fn", (2 + n) * n, n * D);
      add(p + "hc_" + site + "_base", {(2 + n) * n}, 0.3f);
      add(p + "hc_" + site + "_scale", {3}, 0.2f, 1.f);
    }
    norm(p + "attn_norm.weight", D);
    norm(p + "ffn_norm.weight", D);
    lin(p + "attn.wq_a.weight", Q, D);
    norm(p + "attn.q_norm.weight", Q);
    lin(p + "attn.wq_b.weight", H * hd, Q);
    lin(p + "attn.wkv.weight", hd, D);
    norm(p + "attn.kv_norm.weight", hd);
    lin(p + "attn.wo_a.weight", G * R, H * hd / G);
    lin(p + "attn.wo_b.weight", D, G * R);
    add(p + "attn.attn_sink", {H}, 0.4f);
    if (r > 0) {
      const int64_t c = r == 4 ? 2 : 1;
      lin(p + "attn.compressor.wkv.weight", c * hd, D);
      lin(p + "attn.compressor.wgate.weight", c * hd, D);
      add(p + "attn.compressor.ape", {r, c * hd}, 0.4f);
      norm(p + "attn.compressor.norm.weight", hd);
    }
    if (r == 4) {
      lin(p + "attn.indexer.wq_b.weight", HI * dI, Q);
      lin(p + "attn.indexer.weights_proj.weight", HI, D);
      lin(p + "attn.indexer.compressor.wkv.weight", 2 * dI, D);
      lin(p + "attn.indexer.compressor.wgate.weight", 2 * dI, D);
      add(p + "attn.indexer.compressor.ape", {4, 2 * dI}, 0.4f);
      norm(p + "attn.indexer.compressor.norm.weight", dI);
    }
    lin(p + "ffn.gate.weight", E, D);
    if (L < hash_layers) {
      std::vector<int64_t> t(V * K);
      for (int64_t v = 0; v < V; ++v) {  // K distinct experts per token
        int64_t first = int64_t(rng() % E);
        for (int64_t k = 0; k < K; ++k) t[v * K + k] = (first + k) % E;
      }
      tensors.push_back({p + "ffn.gate.tid2eid", smelt::DType::I64, {V, K},
                         {reinterpret_cast<uint8_t*>(t.data()), reinterpret_cast<uint8_t*>(t.data() + t.size())}});
    } else {
      add(p + "ffn.gate.bias", {E}, 0.1f);
    }
    for (int e = 0; e < E; ++e) {
      const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
      lin(ep + "w1.weight", F, D);
      lin(ep + "w2.weight", D, F);
      lin(ep + "w3.weight", F, D);
    }
    lin(p + "ffn.shared_experts.w1.weight", F, D);
    lin(p + "ffn.shared_experts.w2.weight", D, F);
    lin(p + "ffn.shared_experts.w3.weight", F, D);
  }
  norm("norm.weight", D);
  lin("hc_head_fn", n, n * D);
  add("hc_head_base", {n}, 0.3f);
  add("hc_head_scale", {1}, 0.2f, 1.f);
  lin("head.weight", V, D);

  std::vector<smelt::WriteTensor> w;
  for (const Tensor& t : tensors) w.push_back({t.name, t.dtype, t.shape, t.bytes});
  smelt::write_safetensors(dir + "/model.safetensors", w);
}

}  // namespace smelt::test
