// GPU test (ctest -L gpu; no GoogleTest, so it builds on the GPU machine with headers only): runs one plan on
// the cuda backend and on the cpu backend with the same token ids and compares.
//   gpu_compare compare PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL
//     prompt prefilled in chunks of 16 rows (eager), then each decode id fed alone (the CUDA graph); then the
//     sequence is reset and the prompt prefilled again in max_rows chunks (state reset + other row counts).
//     Every logit row: max |cuda - cpu| <= TOL * max(1, max |cpu row|); every row's argmax equal wherever the
//     cpu row's top-1 / top-2 margin exceeds twice that bound (a smaller margin may flip legitimately).
//   gpu_compare arch-error PLAN MODEL_DIR
//     the plan has no cubin for this GPU: opening it must fail with the one sentence naming both archs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cuda/session_cuda.h"
#include "runtime/session.h"

namespace {

using smelt::runtime::Plan;

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    ids.push_back(int32_t(std::stol(s.substr(start, end - start))));
    start = end + 1;
  }
  return ids;
}

struct Stats {
  double worst = 0.0;  // max over rows of max|diff| / max(1, max|cpu|)
  int worst_row = -1, rows = 0, argmax_checked = 0, failures = 0;
};

void compare_rows(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t vocab, double tol,
                  const char* phase, int row0, Stats& st) {
  int64_t rows = int64_t(cpu.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gpu.data() + r * vocab;
    const float* c = cpu.data() + r * vocab;
    double scale = 1.0, diff = 0.0;
    bool finite = true;
    for (int64_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, double(std::fabs(c[v])));
      if (!std::isfinite(g[v])) finite = false;
      diff = std::max(diff, std::fabs(double(g[v]) - double(c[v])));
    }
    double rel = finite ? diff / scale : INFINITY;
    ++st.rows;
    if (rel > st.worst) st.worst = rel, st.worst_row = row0 + int(r);
    if (!(rel <= tol)) {
      if (st.failures++ < 5)
        std::printf("FAIL %s row %lld: max |cuda - cpu| = %.3g, %.3g of the row's scale %.3g (tolerance %.3g)%s\n",
                    phase, (long long)(row0 + r), diff, rel, scale, tol, finite ? "" : " (non-finite cuda logits)");
      continue;
    }
    int64_t a = std::max_element(c, c + vocab) - c, b = std::max_element(g, g + vocab) - g;
    double second = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v)
      if (v != a) second = std::max(second, double(c[v]));
    if (double(c[a]) - second > 2.0 * tol * scale) {
      ++st.argmax_checked;
      if (a != b && st.failures++ < 5)
        std::printf("FAIL %s row %lld: greedy token %lld on cuda, %lld on cpu (cpu margin %.3g)\n", phase,
                    (long long)(row0 + r), (long long)b, (long long)a, double(c[a]) - second);
    }
  }
}

int compare(const std::string& plan_path, const std::string& model, const std::string& prompt_s,
            const std::string& decode_s, double tol) {
  std::vector<int32_t> prompt = parse_ids(prompt_s), decode = parse_ids(decode_s);
  smelt::runtime::Session cpu(Plan::load(plan_path), model);
  smelt::runtime::cuda::BackendOptions o;
  o.model_dir = model;
  smelt::runtime::cuda::CudaSession gpu(Plan::load(plan_path), o);
  int64_t vocab = cpu.vocab();
  std::printf("%s on %s (%s kernels)\n", plan_path.c_str(), gpu.backend().device().name.c_str(), gpu.backend().arch().c_str());

  Stats st;
  std::vector<float> c = cpu.prefill(prompt), g = gpu.prefill(prompt, 16);
  compare_rows(g, c, vocab, tol, "prefill(chunk 16)", 0, st);
  for (size_t k = 0; k < decode.size(); ++k)
    compare_rows(gpu.decode(decode[k]), cpu.decode(decode[k]), vocab, tol, "decode", int(prompt.size() + k), st);
  gpu.reset();
  compare_rows(gpu.prefill(prompt), c, vocab, tol, "prefill(after reset)", 0, st);

  std::printf("%d rows, worst max|cuda - cpu| / scale = %.3g at row %d (tolerance %.3g), %d greedy tokens checked, %s\n",
              st.rows, st.worst, st.worst_row, tol, st.argmax_checked, st.failures ? "FAILED" : "ok");
  return st.failures ? 1 : 0;
}

int arch_error(const std::string& plan_path, const std::string& model) {
  smelt::runtime::cuda::BackendOptions o;
  o.model_dir = model;
  try {
    smelt::runtime::cuda::CudaSession gpu(Plan::load(plan_path), o);
  } catch (const smelt::Error& e) {
    std::string m = e.what();
    std::printf("error: %s\n", m.c_str());
    bool ok = m.find("this plan has kernels for sm_80; this GPU (") != std::string::npos &&
              m.find(": compile with --target sm_") != std::string::npos && m.find('\n') == std::string::npos;
    std::printf("%s\n", ok ? "ok" : "FAILED: not the expected sentence");
    return ok ? 0 : 1;
  }
  std::printf("FAILED: a plan with only sm_80 kernels opened on this GPU\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "compare" && argc == 7) return compare(argv[2], argv[3], argv[4], argv[5], std::atof(argv[6]));
    if (mode == "arch-error" && argc == 4) return arch_error(argv[2], argv[3]);
    std::fprintf(stderr, "usage: gpu_compare compare PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL | arch-error PLAN MODEL_DIR\n");
    return 2;
  } catch (const std::exception& e) {
    std::printf("FAILED: error: %s\n", e.what());
    return 1;
  }
}
