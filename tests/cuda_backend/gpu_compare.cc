// GPU test (ctest -L gpu; no GoogleTest, so it builds on the GPU machine with headers only): runs one plan on
// the cuda backend and on the cpu backend with the same token ids and compares.
//   gpu_compare compare PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL
//     prompt prefilled in chunks of 16 rows (eager), then each decode id fed alone (the CUDA graph); then the
//     sequence is reset and the prompt prefilled again in max_rows chunks (state reset + other row counts).
//     Every logit row: max |cuda - cpu| <= TOL * max(1, max |cpu row|); every row's argmax equal wherever the
//     cpu row's top-1 / top-2 margin exceeds twice that bound (a smaller margin may flip legitimately).
//   gpu_compare bisect PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL [CHUNK=16] [REPORT=12]
//     runs the plan op by op on both backends from identical inputs: before each op the cpu's input (and output)
//     buffers and the op's states are copied into the cuda backend, the op runs alone on both, and its outputs
//     and states are compared (float: max |cuda - cpu| <= TOL * max |cpu| + 1e-6; int: equal, or equal sets
//     per row). Prompt in chunks of CHUNK rows, then the decode ids one by one; prints the first REPORT ops
//     that differ (op, layer, kernels launched, max diff and where) and the count of every chunk with any.
//     Exit 1 if any.
//   gpu_compare ranks PARTITIONED_PLAN TP1_PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL   (ctest -L gpu2)
//     a partitioned plan on one GPU per rank through NCCL against the TP1 plan on one GPU, both on the cuda backend:
//     the same phases and row checks as `compare` (the TP1 plan's rows in the place of the cpu's), then greedy
//     generation of as many tokens as DECODE_IDS has from the prompt on both: the tokens must be equal. Exit 77
//     (skipped) when the machine has fewer GPUs than the plan has ranks.
//   gpu_compare arch-error PLAN MODEL_DIR
//     the plan has no cubin for this GPU: opening it must fail with the one sentence naming both archs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cpu/backend.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/session_cuda.h"
#include "runtime/session.h"
#include "runtime/weights.h"

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

// One compared operand: a buffer (rows x row_elems) or a whole state.
struct Diff {
  double diff = 0.0, scale = 0.0;
  int64_t at = -1;       // element of the largest difference
  int64_t mismatches = 0; // int operands: elements that differ
  bool finite = true, same_sets = true, bad = false;
};

Diff diff_f32(const float* g, const float* c, int64_t n, double tol) {
  Diff d;
  for (int64_t k = 0; k < n; ++k) {
    d.scale = std::max(d.scale, double(std::fabs(c[k])));
    if (std::isfinite(c[k]) && !std::isfinite(g[k])) d.finite = false, d.at = k;
    const double e = std::fabs(double(g[k]) - double(c[k]));
    if (e > d.diff) d.diff = e, d.at = d.finite ? k : d.at;
  }
  d.bad = !d.finite || !(d.diff <= tol * d.scale + 1e-6);
  return d;
}

Diff diff_i32(const int32_t* g, const int32_t* c, int64_t rows, int64_t width) {
  Diff d;
  for (int64_t k = 0; k < rows * width; ++k)
    if (g[k] != c[k]) {
      if (d.mismatches++ == 0) d.at = k;
    }
  if (d.mismatches)
    for (int64_t r = 0; r < rows; ++r) {  // a top-k may list the same entries in another order
      std::vector<int32_t> a(g + r * width, g + (r + 1) * width), b(c + r * width, c + (r + 1) * width);
      std::sort(a.begin(), a.end()), std::sort(b.begin(), b.end());
      if (a != b) d.same_sets = false;
    }
  d.bad = d.mismatches && !d.same_sets;
  return d;
}

int bisect(const std::string& plan_path, const std::string& model, const std::string& prompt_s,
           const std::string& decode_s, double tol, int chunk, int report) {
  namespace rt = smelt::runtime;
  std::vector<int32_t> prompt = parse_ids(prompt_s), decode = parse_ids(decode_s);
  Plan plan = Plan::load(plan_path);
  rt::Weights weights = rt::Weights::load(plan, model);
  rt::cpu::CpuBackend cpu(plan, weights);
  rt::cuda::BackendOptions o;
  o.model_dir = model;
  rt::cuda::CudaBackend gpu(plan, o);
  std::printf("bisect %s on %s (%s kernels), tolerance %.3g\n", plan_path.c_str(), gpu.device().name.c_str(),
              gpu.arch().c_str(), tol);
  const auto* bufs = plan.fb().buffers();
  auto buffer_name = [&](int b) { return bufs->Get(b)->name() ? bufs->Get(b)->name()->str() : "?"; };
  auto state_name = [&](int s) {
    const auto* st = plan.fb().states()->Get(s);
    return st->name() ? st->name()->str() : "?";
  };
  // Chunks: the prompt in `chunk` rows, then the decode ids one by one.
  struct Chunk {
    int64_t p0;
    std::vector<int32_t> ids;
  };
  std::vector<Chunk> chunks;
  for (size_t k = 0; k < prompt.size(); k += size_t(chunk))
    chunks.push_back({int64_t(k), std::vector<int32_t>(prompt.begin() + k,
                                                        prompt.begin() + std::min(prompt.size(), k + size_t(chunk)))});
  for (size_t k = 0; k < decode.size(); ++k) chunks.push_back({int64_t(prompt.size() + k), {decode[k]}});

  int reported = 0, total = 0, runs = 0;
  std::vector<uint8_t> host;
  for (const Chunk& ch : chunks) {
    const int rows = int(ch.ids.size());
    std::memcpy(cpu.token_ids(), ch.ids.data(), ch.ids.size() * 4);
    int differ = 0;
    for (size_t k = 0; k < plan.ops().size(); ++k) {
      const rt::OpRef& op = plan.ops()[k];
      // Identical inputs: the cpu's buffers (outputs too, for ops that update in place) and states.
      for (int b : op.inputs)
        if (b >= 0) gpu.write_buffer(b, cpu.buffer_data(b), uint64_t(rows) * uint64_t(plan.row_elems(b)) * 4);
      for (int b : op.outputs)
        if (b >= 0) gpu.write_buffer(b, cpu.buffer_data(b), uint64_t(rows) * uint64_t(plan.row_elems(b)) * 4);
      for (int s : op.states)
        if (s >= 0) gpu.write_state(s, cpu.state_data(s));
      cpu.run_op(k, ch.p0, rows);
      std::string error;
      try {
        gpu.run_one(k, ch.p0, rows);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::string kernels;
      for (const std::string& n : gpu.last_kernels()) kernels += (kernels.empty() ? "" : ",") + n;
      auto where = [&]() {
        return "p0 " + std::to_string(ch.p0) + " rows " + std::to_string(rows) + ": op " + std::to_string(k) + " " +
               std::string(op.spec->name) + " layer " + std::to_string(op.layer) + " [" + kernels + "]";
      };
      bool op_bad = false;
      auto note = [&](const std::string& what, const Diff& d, int64_t width, bool is_int) {
        if (!d.bad) return;
        op_bad = true;
        if (reported >= report) return;
        ++reported;
        const long long r = d.at >= 0 ? (long long)(d.at / std::max<int64_t>(width, 1)) : -1;
        const long long col = d.at >= 0 ? (long long)(d.at % std::max<int64_t>(width, 1)) : -1;
        if (is_int)
          std::printf("DIFF %s: %s: %lld of %lld ints differ (first at row %lld col %lld)\n", where().c_str(),
                      what.c_str(), (long long)d.mismatches, (long long)(width * rows), r, col);
        else
          std::printf("DIFF %s: %s: max |cuda - cpu| = %.4g (%.3g of max |cpu| %.4g) at row %lld col %lld%s\n",
                      where().c_str(), what.c_str(), d.diff, d.scale > 0 ? d.diff / d.scale : 0.0, d.scale, r, col,
                      d.finite ? "" : " (non-finite cuda values)");
      };
      if (!error.empty()) {
        op_bad = true;
        if (reported++ < report) std::printf("DIFF %s: the cuda op failed: %s\n", where().c_str(), error.c_str());
      }
      for (size_t j = 0; j < op.outputs.size() && error.empty(); ++j) {
        const int b = op.outputs[j];
        if (b < 0) continue;
        const int64_t width = plan.row_elems(b);
        host.resize(size_t(rows) * size_t(width) * 4);
        gpu.read_buffer(b, host.data(), host.size());
        const std::string what = "output " + std::to_string(j) + " (" + buffer_name(b) + ")";
        if (op.spec->outputs[j].type == 'i')
          note(what, diff_i32(reinterpret_cast<const int32_t*>(host.data()),
                              reinterpret_cast<const int32_t*>(cpu.buffer_data(b)), rows, width), width, true);
        else
          note(what, diff_f32(reinterpret_cast<const float*>(host.data()),
                              reinterpret_cast<const float*>(cpu.buffer_data(b)), int64_t(rows) * width, tol), width,
               false);
      }
      for (size_t j = 0; j < op.states.size() && error.empty(); ++j) {
        const int s = op.states[j];
        if (s < 0) continue;
        const std::vector<int64_t> shape = plan.state_shape(s);
        host.resize(size_t(gpu.state_bytes(s)));
        gpu.read_state(s, host.data());
        note("state " + std::to_string(j) + " (" + state_name(s) + ", row = ring / pool slot)",
             diff_f32(reinterpret_cast<const float*>(host.data()), cpu.state_data(s), shape[0] * shape[1], tol),
             shape[1], false);
      }
      differ += op_bad;
    }
    total += differ;
    runs += int(plan.ops().size());
    if (differ)
      std::printf("chunk p0 %lld rows %d: %d of %zu ops differ\n", (long long)ch.p0, rows, differ, plan.ops().size());
  }
  std::printf("bisect: %zu chunks, %d op runs, %d differ beyond %.3g, %s\n", chunks.size(), runs, total, tol,
              total ? "FAILED" : "ok");
  return total ? 1 : 0;
}

int ranks(const std::string& part_path, const std::string& ref_path, const std::string& model,
          const std::string& prompt_s, const std::string& decode_s, double tol) {
  namespace cu = smelt::runtime::cuda;
  std::vector<int32_t> prompt = parse_ids(prompt_s), decode = parse_ids(decode_s);
  Plan part_plan = Plan::load(part_path);
  const size_t n_ranks = part_plan.rank_plans().size();
  int gpus = 0;
  cu::check(cu::driver().cuDeviceGetCount(&gpus), "counting GPUs");
  if (size_t(gpus) < n_ranks) {
    std::printf("SKIP: %s has %zu ranks, this machine %d GPU(s)\n", part_path.c_str(), n_ranks, gpus);
    return 77;
  }
  cu::BackendOptions o;
  o.model_dir = model;
  cu::CudaSession ref(Plan::load(ref_path), o);
  cu::CudaSession part(std::move(part_plan), o);
  const int64_t vocab = ref.vocab();
  if (part.vocab() != vocab) {
    std::printf("FAILED: vocab %lld (partitioned) vs %lld (TP1)\n", (long long)part.vocab(), (long long)vocab);
    return 1;
  }
  std::printf("%s (tp %d, pp %d, %zu GPUs) vs %s on %s\n", part_path.c_str(), part.plan().tp(), part.plan().pp(),
              n_ranks, ref_path.c_str(), ref.backend().device().name.c_str());
  Stats st;
  std::vector<float> r = ref.prefill(prompt, 16), p = part.prefill(prompt, 16);
  compare_rows(p, r, vocab, tol, "prefill(chunk 16)", 0, st);
  for (size_t k = 0; k < decode.size(); ++k)
    compare_rows(part.decode(decode[k]), ref.decode(decode[k]), vocab, tol, "decode", int(prompt.size() + k), st);
  part.reset(), ref.reset();
  compare_rows(part.prefill(prompt), ref.prefill(prompt), vocab, tol, "prefill(after reset)", 0, st);
  // Greedy generation from the prompt, on a fresh sequence.
  std::vector<int32_t> tok_ref, tok_part;
  part.reset(), ref.reset();
  std::vector<float> lr = ref.prefill(prompt), lp = part.prefill(prompt);
  std::span<const float> last_r(lr.data() + (prompt.size() - 1) * vocab, size_t(vocab));
  std::span<const float> last_p(lp.data() + (prompt.size() - 1) * vocab, size_t(vocab));
  int32_t a = smelt::runtime::sample_greedy(last_r), b = smelt::runtime::sample_greedy(last_p);
  for (size_t k = 0; k < decode.size() && ref.position() < ref.plan().max_seq_len(); ++k) {
    tok_ref.push_back(a), tok_part.push_back(b);
    std::vector<float> nr = ref.decode(a), np = part.decode(b);
    a = smelt::runtime::sample_greedy(nr), b = smelt::runtime::sample_greedy(np);
  }
  const bool same = tok_ref == tok_part;
  if (!same) {
    ++st.failures;
    std::printf("FAIL greedy tokens differ:\n  TP1:         ");
    for (int32_t t : tok_ref) std::printf("%d ", t);
    std::printf("\n  partitioned: ");
    for (int32_t t : tok_part) std::printf("%d ", t);
    std::printf("\n");
  }
  std::printf("%d rows, worst max|partitioned - TP1| / scale = %.3g at row %d (tolerance %.3g), %d greedy tokens "
              "checked, %zu generated tokens %s, %s\n",
              st.rows, st.worst, st.worst_row, tol, st.argmax_checked, tok_ref.size(), same ? "equal" : "DIFFER",
              st.failures ? "FAILED" : "ok");
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
    if (mode == "bisect" && argc >= 7 && argc <= 9)
      return bisect(argv[2], argv[3], argv[4], argv[5], std::atof(argv[6]), argc > 7 ? std::atoi(argv[7]) : 16,
                    argc > 8 ? std::atoi(argv[8]) : 12);
    if (mode == "arch-error" && argc == 4) return arch_error(argv[2], argv[3]);
    if (mode == "ranks" && argc == 8)
      return ranks(argv[2], argv[3], argv[4], argv[5], argv[6], std::atof(argv[7]));
    std::fprintf(stderr, "usage: gpu_compare compare PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL | bisect PLAN MODEL_DIR PROMPT_IDS "
                 "DECODE_IDS TOL [CHUNK] [REPORT] | arch-error PLAN MODEL_DIR | ranks PLAN TP1_PLAN MODEL_DIR PROMPT_IDS "
                 "DECODE_IDS TOL\n");
    return 2;
  } catch (const std::exception& e) {
    std::printf("FAILED: error: %s\n", e.what());
    return 1;
  }
}
