// Shared pieces of the V4.1 golden tests: running the tools, reading tensors, the golden cases, comparing a
// block's captured stream with the golden one, and the end-of-run table of measured numbers.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frontends/safetensors.h"
#include "tests/common/process.h"

namespace smelt::e2e_v41 {

namespace fs = std::filesystem;

// ---- tools and processes (paths from CMake; SMELT_COMPILE / SMELT_RUN override; empty = not built) ------------
std::string compile_bin();
std::string run_bin();

using test_process::describe;
using test_process::ProcessResult;
using test_process::read_text;
using test_process::run_process;
std::string join_ids(const std::vector<int64_t>& ids);

// ---- tensors -----------------------------------------------------------------------------------------------------
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> values;
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t row_elems() const { return rows() ? int64_t(values.size()) / rows() : 0; }
};
const TensorInfo* find_tensor(const SafetensorsFile& f, const std::string& name);
// One tensor as doubles (F32, BF16, I32, I64); throws smelt::Error naming the file and tensor.
Tensor read_tensor(const SafetensorsFile& f, const std::string& name);
bool is_bf16_value(double v);
double bf16_ulp(double x);  // one bf16 unit in the last place at magnitude |x|
int64_t argmax_row(const Tensor& t, int64_t r);  // ties: lower id
// max |a[ra] - b[rb]| over a row (NaN -> inf); `exact` counts bit-equal elements.
double row_max_diff(const Tensor& a, int64_t ra, const Tensor& b, int64_t rb, int64_t* exact = nullptr);
std::string fmt(const char* f, double a);

// ---- the end-of-run table ----------------------------------------------------------------------------------------
void note(const std::string& line);  // printed now and again in the table at the end of the run

// ---- golden cases ------------------------------------------------------------------------------------------------
extern const std::vector<std::string> kCases;
fs::path goldens_dir();
fs::path work_dir();
bool have_tools();
bool have_case(const std::string& name);

struct Golden {
  std::string name;
  fs::path dir, model_dir;
  nlohmann::json tokens;
  std::vector<int64_t> prompt, ok_ids;  // owner_keyed.greedy_ids
  std::vector<double> ok_margins, prompt_margins, self_diff;
  std::vector<int64_t> prompt_argmax;
  Tensor prompt_logits, decode_ok;  // decode_logits_owner_keyed
};
Golden load_golden(const std::string& name);
// The reference's own per-row max |owner-keyed decode - teacher-forced prefill|, parsed from the README.
std::vector<double> readme_self_differences(const std::string& readme, int64_t rows);

struct CompileResult {
  std::string plan, failure;
};
// smelt-compile MODEL_DIR for the cpu target (cached per key within one run); extra flags appended.
CompileResult compile_model(const std::string& key, const fs::path& model_dir, const fs::path& work,
                            const std::vector<std::string>& extra = {});
CompileResult compile_case(const Golden& g, bool captures);

struct LogitsRun {
  Tensor prompt_logits, decode_logits;
  std::string captures;  // path of the captures file, if asked for
  std::string failure;
};
LogitsRun run_logits(const std::string& plan, const std::vector<int64_t>& prompt, const std::vector<int64_t>& decode_ids,
                     const fs::path& work, const std::string& tag, bool captures);

// A block's captured stream (bf16 values, [rows, n*D]) and pre weights vs the golden ones.
struct BlockStats {
  int64_t rows = 0, differing = 0, positions = 0, exact_positions = 0, not_bf16 = 0, first_pos = -1, first_copy = -1,
          pre_differing = 0;
  double fraction = 0, max_diff = 0, max_ulps = 0, max_row_ulps = 0, pre_max_diff = -1;  // -1: no pre capture
  std::string line;  // one row of the table below
};
std::string block_table_header();
BlockStats compare_block(const SafetensorsFile& ours, const SafetensorsFile& ref, const std::string& prefix,
                         int64_t hc_mult);

// ---- which positions a block can be held to exactly --------------------------------------------------------------

// The layer schedule from the case's inference_config.json: what each block reads besides its own input rows.
struct Schedule {
  int layers = 0, window = 0;
  std::vector<int> ratio, engram_layers;
  // Per layer: the layers whose *input* rows 0..p it reads at position p (its KV source, index source and
  // candidate source: compressed KV, index keys, candidate blocks). Always >= 0 and <= the layer itself.
  std::vector<std::vector<int>> sources;
  static Schedule load(const fs::path& inference_config);
  // Block k can be fed the reference's input when no block >= k reads state written by a block < k and no block
  // >= k hashes the token ids (Engram). k = layers: only the head.
  bool can_feed(int k) const;
};

// Positions of block i whose every input is bit-exact ("clean": block i-1 rows in its window, and the rows 0..p
// of each source layer's input); of those, how many came out exact, and how many within `max_row_ulps` bf16
// ulps at the position's rms. `first`: the first block computed from exact inputs (0, or the fed block).
struct CleanStats {
  int block = 0, clean = 0, exact = 0, within = 0;
};
std::vector<CleanStats> clean_positions(const Schedule& s, const SafetensorsFile& ours, const SafetensorsFile& ref,
                                        int first, double max_row_ulps);
std::string clean_summary(const std::vector<CleanStats>& stats);  // " block:clean/exact/within" per block

}  // namespace smelt::e2e_v41
