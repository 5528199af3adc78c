#include "runtime/inspect.h"

#include <algorithm>
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

uint64_t weight_bytes(const Plan& plan) {
  const fb::Plan& p = plan.fb();
  uint64_t total = 0;
  for (int i = 0; i < int(p.weights() ? p.weights()->size() : 0); ++i) {
    uint64_t n = dtype_bytes(p.weights()->Get(i)->dtype());
    for (int64_t d : plan.weight_shape(i)) n *= uint64_t(d);
    total += n;
  }
  return total;
}

uint64_t state_bytes(const Plan& plan) {
  const fb::Plan& p = plan.fb();
  uint64_t total = 0;
  for (int i = 0; i < int(p.states() ? p.states()->size() : 0); ++i) {
    uint64_t n = dtype_bytes(p.states()->Get(i)->dtype());
    for (int64_t d : plan.state_shape(i)) n *= uint64_t(d);
    total += n;
  }
  return total;
}

// Sorted layer indices as ranges: "0-3,7".
std::string layer_ranges(const std::vector<OpRef>& ops) {
  std::vector<int> layers;
  for (const OpRef& op : ops)
    if (op.layer >= 0) layers.push_back(op.layer);
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(layers[i]);
    if (j > i) out += '-' + std::to_string(layers[j]);
    i = j + 1;
  }
  return out;
}

// One rank of a partitioned plan: where it sits, what it holds, and what it exchanges per decode step (the
// forward over one row): per collective kind the count and the bytes of its rows (all_reduce and send/recv:
// the row exchanged; all_gather: the gathered row).
// `target`: the top-level Plan.target_json; a rig's (or h200's) plan maps ranks to GPUs (rank_gpus) and records
// the memory the compiler counted per rank (rank_memory).
nlohmann::ordered_json rank_json(const Rank& r, const nlohmann::json& target) {
  const Plan& plan = *r.plan;
  nlohmann::ordered_json j;
  j["index"] = r.index;
  j["stage"] = r.stage;
  j["tp_rank"] = r.tp_rank;
  j["arch"] = r.arch;
  j["share"] = r.share;
  const size_t at = size_t(r.index);
  if (target.is_object() && target.contains("rank_gpus") && target["rank_gpus"].is_array() &&
      at < target["rank_gpus"].size() && target.contains("gpus") && target["gpus"].is_array()) {
    const nlohmann::json& g = target["rank_gpus"][at];
    if (g.is_number_integer() && g.get<size_t>() < target["gpus"].size()) {
      const nlohmann::json& gpu = target["gpus"][g.get<size_t>()];
      j["gpu"] = {{"index", g}, {"name", gpu.value("name", "")}, {"memory_bytes", gpu.value("memory_bytes", 0ull)}};
    }
    if (target.contains("rank_memory") && target["rank_memory"].is_array() && at < target["rank_memory"].size()) {
      const nlohmann::json& m = target["rank_memory"][at];
      uint64_t need = 0;
      for (const char* k : {"weights", "states", "arena", "kernels"}) need += m.value(k, 0ull);
      j["memory_bytes_needed"] = need;
      j["memory_bytes_available"] = m.value("available", 0ull);
    }
  }
  j["layers"] = layer_ranges(plan.ops());
  bool embedding = false;
  for (const OpRef& op : plan.ops()) embedding = embedding || op.spec->kind == OpKind::Embedding;
  j["embedding"] = embedding;
  j["head"] = plan.logits() >= 0;
  j["ops"] = plan.ops().size();
  j["weight_bytes"] = weight_bytes(plan);
  j["state_bytes"] = state_bytes(plan);
  j["arena_bytes"] = plan.fb().arena_bytes();
  nlohmann::ordered_json coll = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (const OpRef& op : plan.ops()) {
    if (!is_collective(op.spec->kind)) continue;
    int buffer = op.spec->kind == OpKind::Send ? op.inputs[0] : op.outputs[0];
    uint64_t bytes = 4 * uint64_t(plan.row_elems(buffer));
    nlohmann::ordered_json& c = coll[op.name];
    if (c.is_null()) c = {{"count", 0}, {"bytes", 0}};
    c["count"] = c["count"].get<uint64_t>() + 1;
    c["bytes"] = c["bytes"].get<uint64_t>() + bytes;
    total += bytes;
  }
  j["collectives_per_decode_step"] = coll;
  j["collective_bytes_per_decode_step"] = total;
  std::map<std::string, uint64_t> kernels;  // the rank's device code: bytes per arch (compute_XX = PTX)
  if (plan.fb().kernels())
    for (const fb::KernelImage* k : *plan.fb().kernels()) kernels[str(k->arch())] += k->image() ? k->image()->size() : 0;
  if (!kernels.empty()) j["kernels"] = kernels;
  return j;
}

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
  if (plan.partitioned()) {  // the ranks hold the tables; the totals are theirs
    uint64_t w = 0, s = 0, a = 0;
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    const nlohmann::json target = nlohmann::json::parse(str(p.target_json()), nullptr, /*allow_exceptions=*/false);
    for (const Rank& r : plan.ranks()) {
      ranks.push_back(rank_json(r, target));
      w += weight_bytes(*r.plan);
      s += state_bytes(*r.plan);
      a += r.plan->fb().arena_bytes();
    }
    j["tp"] = plan.tp();
    j["pp"] = plan.pp();
    j["max_rows"] = plan.max_rows();
    j["max_seq_len"] = plan.max_seq_len();
    j["vocab"] = plan.vocab();
    j["weight_bytes_stored"] = w;
    j["state_bytes_per_sequence"] = s;
    j["arena_bytes"] = a;
    j["ranks"] = ranks;
    return j;
  }
  uint64_t weight_bytes = runtime::weight_bytes(plan), state_bytes = runtime::state_bytes(plan);
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

  // Device code per arch (cubins; compute_XX = PTX): family -> bytes.
  std::map<std::string, std::map<std::string, uint64_t>> kernels;
  if (p.kernels())
    for (const fb::KernelImage* k : *p.kernels())
      kernels[str(k->arch())][str(k->name())] = k->image() ? k->image()->size() : 0;
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
    } else if (k == "ranks") {
      out += k + ":\n";
      for (auto& r : v) {
        out += "  rank " + value(r["index"]) + ": stage " + value(r["stage"]) + ", tp_rank " + value(r["tp_rank"]) +
               ", arch " + value(r["arch"]) + ", share " + value(r["share"]) + "\n";
        std::string layers = value(r["layers"]);
        if (r["embedding"].get<bool>()) layers += " + embedding";
        if (r["head"].get<bool>()) layers += " + head";
        out += "    layers: " + layers + "\n";
        if (r.contains("gpu"))
          out += "    gpu: " + value(r["gpu"]["index"]) + " " + value(r["gpu"]["name"]) + " (" +
                 value(r["gpu"]["memory_bytes"]) + " bytes)\n";
        if (r.contains("memory_bytes_needed"))
          out += "    memory: " + value(r["memory_bytes_needed"]) + " of " + value(r["memory_bytes_available"]) +
                 " bytes available (compile-time count)\n";
        for (const char* key : {"ops", "weight_bytes", "state_bytes", "arena_bytes"}) {
          out += "    ";
          out += key;
          out += ": " + value(r[key]) + "\n";
        }
        std::string coll;
        for (auto& [name, c] : r["collectives_per_decode_step"].items())
          coll += (coll.empty() ? "" : ", ") + name + " x" + value(c["count"]) + " (" + value(c["bytes"]) + " bytes)";
        out += "    collectives per decode step: " + (coll.empty() ? std::string("none") : coll) + "\n";
        if (r.contains("kernels")) {
          std::string ks;
          for (auto& [arch, bytes] : r["kernels"].items()) ks += (ks.empty() ? "" : ", ") + arch + " " + value(bytes) + " bytes";
          out += "    kernels: " + ks + "\n";
        }
      }
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
