#include "frontends/dry_run.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "frontends/model.h"

namespace smelt {
namespace {

bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// 510286023000 -> "510,286,023,000"
std::string grouped(uint64_t v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(uint64_t(1) << 30));
  return buf;
}

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

}  // namespace

const std::vector<std::string_view>& dry_run_components() {
  static const std::vector<std::string_view> names = {
      "routed_experts", "shared_experts", "attention", "indexer_compressor", "engram",
      "dspark",         "embeddings_head", "vision",   "router",             "norms_hc_other"};
  return names;
}

std::string_view tensor_component(std::string_view n) {
  if (starts(n, "mtp.") || has(n, ".mtp.")) return "dspark";
  if (starts(n, "vision.") || starts(n, "aligner.") || starts(n, "image_")) return "vision";
  if (n == "embed.weight" || n == "head.weight") return "embeddings_head";
  if (has(n, ".engram.") || starts(n, "engram.")) return "engram";  // + the token map (engram.token_map)
  if (has(n, ".ffn.experts.")) return "routed_experts";
  if (has(n, ".ffn.shared_experts.")) return "shared_experts";
  if (has(n, ".ffn.gate.")) return "router";
  if (has(n, ".attn.compressor.") || has(n, ".attn.indexer.")) return "indexer_compressor";
  if (has(n, ".attn.")) return "attention";
  return "norms_hc_other";  // attn_norm / ffn_norm, hc_*, the final norm, V4's hc_head_*
}

DryRunReport dry_run(const std::string& model_dir) {
  const ModelDescription m = load_model(model_dir);  // headers only: the mmap'd data is never touched
  DryRunReport r;
  r.model_dir = model_dir;
  r.model_type = m.config.model_type;
  r.layout = std::string(layout_name(m.layout));
  r.num_hidden_layers = m.config.num_hidden_layers;

  // Checkpoint name -> canonical name, to classify every stored tensor in one naming.
  std::map<std::string, std::string> canonical;
  for (const auto& [canon, src] : m.source_names) canonical.emplace(src, canon);

  std::map<std::string_view, DryRunComponent> parts;
  for (std::string_view c : dry_run_components()) parts[c].name = std::string(c);
  std::map<std::string, bool> stages;
  for (const auto& [name, t] : m.checkpoint.tensors()) {
    auto it = canonical.find(name);
    std::string_view component = tensor_component(it != canonical.end() ? it->second : name);
    DryRunComponent& part = parts.at(component);
    part.tensors += 1;
    part.bytes += t.nbytes;
    r.tensor_count += 1;
    r.payload_bytes += t.nbytes;
    const std::string dt(dtype_name(t.dtype));
    r.dtype_tensors[dt] += 1;
    r.dtype_bytes[dt] += t.nbytes;
    if (component == "dspark") stages[name.substr(0, name.find('.', name.find("mtp.") + 4))] = true;
  }
  r.dspark_stages = int(stages.size());
  for (const SafetensorsFile& f : m.checkpoint.files()) {
    r.files += 1;
    r.file_bytes += f.file_size();
    r.largest_file_bytes = std::max(r.largest_file_bytes, f.file_size());
  }
  uint64_t sum_tensors = 0, sum_bytes = 0;
  for (std::string_view c : dry_run_components()) {
    r.components.push_back(parts.at(c));
    sum_tensors += parts.at(c).tensors;
    sum_bytes += parts.at(c).bytes;
  }
  if (sum_tensors != r.tensor_count || sum_bytes != r.payload_bytes)
    throw Error(model_dir + ": internal error: the dry-run components sum to " + std::to_string(sum_bytes) +
                " bytes but the checkpoint holds " + std::to_string(r.payload_bytes));
  return r;
}

std::string format_dry_run(const DryRunReport& r, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["model_dir"] = r.model_dir;
    j["model_type"] = r.model_type;
    j["layout"] = r.layout;
    j["num_hidden_layers"] = r.num_hidden_layers;
    j["dspark_stages"] = r.dspark_stages;
    j["files"] = r.files;
    j["file_bytes"] = r.file_bytes;
    j["largest_file_bytes"] = r.largest_file_bytes;
    j["tensors"] = r.tensor_count;
    j["payload_bytes"] = r.payload_bytes;
    auto& dt = j["dtypes"] = nlohmann::ordered_json::object();
    for (const auto& [name, n] : r.dtype_tensors) dt[name] = {{"tensors", n}, {"bytes", r.dtype_bytes.at(name)}};
    auto& cs = j["components"] = nlohmann::ordered_json::object();
    for (const DryRunComponent& c : r.components) cs[c.name] = {{"tensors", c.tensors}, {"bytes", c.bytes}};
    return j.dump(2) + "\n";
  }
  std::string s;
  s += "model: " + r.model_dir + " (" + r.model_type + ", " + r.layout + " layout, " +
       std::to_string(r.num_hidden_layers) + " layers" +
       (r.dspark_stages ? " + " + std::to_string(r.dspark_stages) + " DSpark/MTP stages" : std::string()) + ")\n";
  s += "checkpoint: " + std::to_string(r.files) + " files (" + grouped(r.file_bytes) + " bytes, largest " +
       gib(r.largest_file_bytes) + "), " + grouped(r.tensor_count) + " tensors, " + grouped(r.payload_bytes) +
       " payload bytes (" + gib(r.payload_bytes) + ")\n";
  s += "by dtype:\n";
  for (const auto& [name, n] : r.dtype_tensors)
    s += "  " + pad(name, 20) + pad(grouped(n), 10, true) + " tensors  " + pad(gib(r.dtype_bytes.at(name)), 14, true) + "\n";
  s += "by component:\n";
  for (const DryRunComponent& c : r.components) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%5.1f%%", r.payload_bytes ? 100.0 * double(c.bytes) / double(r.payload_bytes) : 0.0);
    s += "  " + pad(c.name, 20) + pad(grouped(c.tensors), 10, true) + " tensors  " + pad(gib(c.bytes), 14, true) +
         "  " + pct + "\n";
  }
  s += "  " + pad("total", 20) + pad(grouped(r.tensor_count), 10, true) + " tensors  " +
       pad(gib(r.payload_bytes), 14, true) + "  100.0%\n";
  return s;
}

}  // namespace smelt
