#include "runtime/inspect.h"

#include <cstdio>
#include <map>

namespace smelt::runtime {

namespace fb = smelt::plan;

namespace {

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

size_t dtype_bytes(fb::DType d) {
  switch (d) {
    case fb::DType::F64: case fb::DType::I64: return 8;
    case fb::DType::F32: case fb::DType::I32: return 4;
    case fb::DType::BF16: case fb::DType::F16: case fb::DType::I16: return 2;
    default: return 1;
  }
}

std::string hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The config values a reader wants first; the rest stays in the plan's model_config_json.
const char* const kConfigKeys[] = {
    "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
    "qk_rope_head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "n_routed_experts", "num_experts_per_tok",
    "moe_intermediate_size", "sliding_window", "compress_ratios", "index_topk", "hc_mult",
    "max_position_embeddings"};

}  // namespace

nlohmann::ordered_json inspect_json(const Plan& plan) {
  const fb::Plan& p = plan.fb();
  nlohmann::ordered_json j;
  j["plan"] = plan.path();
  j["plan_version"] = std::to_string(plan.version_major()) + "." + std::to_string(plan.version_minor());
  j["compiler_version"] = str(p.compiler_version());
  j["model_family"] = str(p.model_family());

  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  nlohmann::json full = nlohmann::json::parse(str(p.model_config_json()), nullptr, /*allow_exceptions=*/false);
  if (full.is_object()) {
    const nlohmann::json& c = full.contains("text_config") && full["text_config"].is_object() ? full["text_config"] : full;
    for (const char* k : kConfigKeys)
      if (c.contains(k)) config[k] = c[k];
  }
  j["config"] = config;
  j["target"] = str(p.target());
  j["pipeline"] = str(p.pipeline());
  nlohmann::ordered_json options = nlohmann::ordered_json::object();
  if (p.options())
    for (const fb::KeyValue* kv : *p.options()) options[str(kv->key())] = str(kv->value());
  j["options"] = options;

  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  if (p.checkpoint_files())
    for (const fb::CheckpointFile* f : *p.checkpoint_files())
      files.push_back({{"path", str(f->path())}, {"size", f->size()}, {"header_hash", hex(f->header_hash())}});
  j["checkpoint_files"] = files;

  auto count = [](auto* v) { return v ? v->size() : 0u; };
  uint64_t weight_bytes = 0, state_bytes = 0;
  for (int i = 0; i < int(count(p.weights())); ++i) {
    uint64_t n = dtype_bytes(p.weights()->Get(i)->dtype());
    for (int64_t d : plan.weight_shape(i)) n *= uint64_t(d);
    weight_bytes += n;
  }
  for (int i = 0; i < int(count(p.states())); ++i) {
    uint64_t n = dtype_bytes(p.states()->Get(i)->dtype());
    for (int64_t d : plan.state_shape(i)) n *= uint64_t(d);
    state_bytes += n;
  }
  j["counts"] = {{"weights", count(p.weights())}, {"buffers", count(p.buffers())}, {"states", count(p.states())},
                 {"ops", count(p.ops())}};

  std::map<std::string, int> histogram;
  for (const OpRef& op : plan.ops()) histogram[op.name]++;
  j["op_histogram"] = histogram;
  if (!plan.programs().empty()) {  // further entry points (format 1.1), e.g. the DSpark drafter
    nlohmann::ordered_json programs = nlohmann::ordered_json::object();
    for (const Program& prog : plan.programs()) programs[prog.name] = std::to_string(prog.ops.size()) + " ops";
    j["programs"] = programs;
  }
  j["max_rows"] = p.max_rows();
  j["max_seq_len"] = p.max_seq_len();
  j["arena_bytes"] = p.arena_bytes();
  j["state_bytes_per_sequence"] = state_bytes;
  j["weight_bytes_stored"] = weight_bytes;

  std::map<std::string, std::vector<std::string>> kernels;
  if (p.kernels())
    for (const fb::KernelImage* k : *p.kernels()) kernels[str(k->arch())].push_back(str(k->name()));
  j["kernels"] = kernels;
  return j;
}

std::string inspect_text(const Plan& plan) {
  nlohmann::ordered_json j = inspect_json(plan);
  std::string out;
  auto line = [&](const std::string& k, const std::string& v) { out += k + ": " + v + "\n"; };
  auto value = [](const nlohmann::ordered_json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  for (auto& [k, v] : j.items()) {
    if (v.is_object() && !v.empty()) {
      out += k + ":\n";
      for (auto& [k2, v2] : v.items()) out += "  " + k2 + ": " + value(v2) + "\n";
    } else if (k == "checkpoint_files") {
      out += k + ":\n";
      for (auto& f : v) out += "  " + value(f["path"]) + " (" + value(f["size"]) + " bytes, header " + value(f["header_hash"]) + ")\n";
    } else {
      line(k, value(v));
    }
  }
  return out;
}

}  // namespace smelt::runtime
