// smelt-make-checkpoint: a sparse checkpoint from a config: real safetensors headers (names, dtypes, shapes
// of the release format), data sections left as holes, model.safetensors.index.json, config.json.
//   smelt-make-checkpoint --config CONFIG.json --out DIR [--shards N | --real-sharding]
// --real-sharding (the default) splits like the release (48 files for V4.1-Flash); --shards N cuts the
// same tensor sequence into N files of about equal size. Existing files of the same names are replaced.
// Progress goes to stderr, the summary to stdout. Errors: "error: ..." and exit 1; bad usage exit 2.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"smelt-make-checkpoint: write a sparse checkpoint (real headers, no data) for a config"};
  std::string config, out;
  int shards = 0;
  bool real_sharding = false;
  app.add_option("--config", config, "config.json of the model (DeepSeek-V4.1)")->required();
  app.add_option("--out", out, "output directory (created if missing)")->required();
  CLI::Option* n = app.add_option("--shards", shards, "number of files, cut to about equal sizes")->check(CLI::Range(1, 1 << 20));
  CLI::Option* real = app.add_flag("--real-sharding", real_sharding, "split like the release (the default)");
  n->excludes(real);
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
    smelt::SparseCheckpointSummary sum = smelt::write_sparse_checkpoint(config, out, shards, progress);
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
