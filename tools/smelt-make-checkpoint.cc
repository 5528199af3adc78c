// smelt-make-checkpoint: a sparse checkpoint from a config: real safetensors headers (names, dtypes, shapes
// of the release format), data sections left as holes, model.safetensors.index.json, config.json.
//   smelt-make-checkpoint --config CONFIG.json --out DIR [--shards N | --real-sharding] [--layers N]
// --layers N (DeepSeek-V4.1): a full-width slice of the first N backbone layers (docs/performance.md): the
// schedules keep their entries below N (KV / index sources, Engram layers), the DSpark stages and the vision
// tower are dropped. The default real-shape bench slice is --layers 4: layers 0 (sliding window), 1 (sliding
// + Engram), 2 (CSA ratio 2: KV source and index source), 3 (CSA reading layer 2's KV and index). Engram
// uses the identity token map (engram_compressed_vocab_size = vocab_size), the only one the compiler supports.
// --real-sharding (the default) splits like the release (48 files for V4.1-Flash); --shards N cuts the
// same tensor sequence into N files of about equal size. Existing files of the same names are replaced.
// Progress goes to stderr, the summary to stdout. Errors: "error: ..." and exit 1; bad usage exit 2.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "frontends/error.h"
#include "frontends/sparse_checkpoint.h"

namespace {

std::string one_line(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  return s;
}

std::string grouped(uint64_t v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

// The config of a slice of the first `layers` backbone layers, written to `path`.
void write_slice_config(const std::string& config, int layers, const std::string& path) {
  std::ifstream in(config);
  if (!in) throw smelt::Error(config + ": cannot read");
  nlohmann::json c = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object()) throw smelt::Error(config + ": not a JSON object");
  nlohmann::json& t = c.contains("text_config") ? c["text_config"] : c;
  if (!t.contains("num_hidden_layers") || !t["num_hidden_layers"].is_number_integer())
    throw smelt::Error(config + ": no integer num_hidden_layers");
  int have = t["num_hidden_layers"].get<int>();
  if (layers > have)
    throw smelt::Error("--layers " + std::to_string(layers) + ": " + config + " has only " + std::to_string(have) + " layers");
  t["num_hidden_layers"] = layers;
  if (t.contains("compress_ratios") && t["compress_ratios"].is_array()) {
    nlohmann::json r = nlohmann::json::array();
    for (int i = 0; i < layers && i < int(t["compress_ratios"].size()); ++i) r.push_back(t["compress_ratios"][i]);
    t["compress_ratios"] = r;
  }
  for (const char* key : {"kv_source_layer_ids", "index_source_layer_ids"})
    if (t.contains(key) && t[key].is_array()) {
      nlohmann::json kept = nlohmann::json::array();
      for (const auto& v : t[key])
        if (v.is_number_integer() && v.get<int>() < layers) kept.push_back(v);
      t[key] = kept;
    }
  if (t.contains("engram_layer_ids") && t["engram_layer_ids"].is_array()) {
    nlohmann::json ids = nlohmann::json::array(), sizes = nlohmann::json::array();
    for (size_t k = 0; k < t["engram_layer_ids"].size(); ++k)
      if (t["engram_layer_ids"][k].get<int>() < layers) {
        ids.push_back(t["engram_layer_ids"][k]);
        if (t.contains("engram_num_embeddings")) sizes.push_back(t["engram_num_embeddings"][k]);
      }
    t["engram_layer_ids"] = ids;
    if (t.contains("engram_num_embeddings")) t["engram_num_embeddings"] = sizes;
  }
  if (t.contains("candidate_source_layer_id") && t["candidate_source_layer_id"].get<int>() >= layers)
    t.erase("candidate_source_layer_id");
  // The compiler supports only Engram's identity token map so far; the tables keep their real sizes.
  if (t.contains("engram_compressed_vocab_size") && t.contains("vocab_size"))
    t["engram_compressed_vocab_size"] = t["vocab_size"];
  t["num_nextn_predict_layers"] = 0;  // no DSpark stages: they read layers the slice does not have
  t.erase("dspark_target_layer_ids");
  c.erase("vision_config");
  std::ofstream out(path);
  out << c.dump(2) << "\n";
  if (!out) throw smelt::Error(path + ": cannot write");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"smelt-make-checkpoint: write a sparse checkpoint (real headers, no data) for a config"};
  std::string config, out;
  int shards = 0;
  bool real_sharding = false;
  int layers = 0;
  app.add_option("--config", config, "config.json of the model (DeepSeek-V4.1)")->required();
  app.add_option("--out", out, "output directory (created if missing)")->required();
  CLI::Option* n = app.add_option("--shards", shards, "number of files, cut to about equal sizes")->check(CLI::Range(1, 1 << 20));
  CLI::Option* real = app.add_flag("--real-sharding", real_sharding, "split like the release (the default)");
  n->excludes(real);
  app.add_option("--layers", layers, "DeepSeek-V4.1: a full-width slice of the first N layers")->check(CLI::Range(1, 1 << 10));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s (see smelt-make-checkpoint --help)\n", one_line(e.what()).c_str());
    return 2;
  }
  try {
    auto progress = [](const smelt::SparseShard& s, size_t k, size_t count) {
      std::fprintf(stderr, "[%zu/%zu] %s: %s tensors, %s bytes\n", k + 1, count, s.file.c_str(),
                   grouped(s.tensors).c_str(), grouped(s.payload_bytes).c_str());
    };
    std::string source = config, slice;
    if (layers > 0) {
      std::filesystem::create_directories(out);
      slice = (std::filesystem::path(out) / ".slice_config.json").string();
      write_slice_config(config, layers, slice);
      source = slice;
    }
    smelt::SparseCheckpointSummary sum = smelt::write_sparse_checkpoint(source, out, shards, progress);
    if (!slice.empty()) std::filesystem::remove(slice);
    std::printf("%s: %zu files, %s tensors, %s payload bytes (sparse: no data written)\n", out.c_str(),
                sum.shards.size(), grouped(sum.tensors).c_str(), grouped(sum.payload_bytes).c_str());
    return 0;
  } catch (const smelt::Error& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
  }
  return 1;
}
