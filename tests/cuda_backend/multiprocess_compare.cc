// GPU test (ctest -L gpu2; no GoogleTest, builds on the GPU machine with headers only): a partitioned plan run
// by two smelt-run processes that meet at a coordinator on 127.0.0.1 (--ranks / --coordinator, one GPU per rank)
// against the same plan in one smelt-run process (docs/partition.md "Several processes / hosts").
//   multiprocess_compare SMELT_RUN PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL
//     generate (greedy, as many new tokens as DECODE_IDS has) and logits (the prompt in chunks of 16 rows, then
//     DECODE_IDS one by one) in one process, then in two: the first half of the ranks on GPUs 0.., the rest on
//     the next GPUs, the same GPU per rank as the one-process run. Both processes must print the same tokens as
//     the one-process run and write bit-identical logits (they are broadcast), within TOL of the one-process
//     logits' row scale. Exit 77 (skipped) on a machine with fewer GPUs than the plan has ranks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "frontends/safetensors.h"
#include "runtime/cuda/driver.h"
#include "runtime/plan.h"
#include "tests/common/process.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int free_port() { return smelt::test_process::free_loopback_port(); }

struct Run {
  std::string name;
  std::vector<std::string> argv;
  fs::path out, err;
  pid_t pid = -1;
  int rc = -1;
};

// Starts every run at once, waits for all (killing the ones still running after `timeout_s`); true if all exit 0.
bool run_all(std::vector<Run>& runs, double timeout_s) {
  for (Run& r : runs) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, r.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, r.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    for (std::string& a : r.argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&r.pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) r.pid = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool ok = true;
  for (Run& r : runs) {
    if (r.pid < 0) {
      std::printf("FAIL %s: cannot start %s\n", r.name.c_str(), r.argv[0].c_str());
      ok = false;
      continue;
    }
    int status = 0;
    for (;;) {
      pid_t w = ::waitpid(r.pid, &status, WNOHANG);
      if (w == r.pid) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(r.pid, SIGKILL);  // our own child, by pid
        ::waitpid(r.pid, &status, 0);
        std::printf("FAIL %s: still running after %.0f s (killed)\n", r.name.c_str(), timeout_s);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (r.rc != 0) {
      std::string cmd;
      for (const std::string& a : r.argv) cmd += a + " ";
      std::printf("FAIL %s exited %d: %s\n  stderr: %s\n", r.name.c_str(), r.rc, cmd.c_str(), slurp(r.err).c_str());
      ok = false;
    }
  }
  return ok;
}

std::vector<int> tokens_of(const Run& r) {
  return nlohmann::json::parse(slurp(r.out))["tokens"].get<std::vector<int>>();
}

std::vector<float> logits_of(const fs::path& file) {
  smelt::SafetensorsFile f = smelt::SafetensorsFile::open(file.string());
  std::vector<float> all;
  for (const char* name : {"prompt_logits", "decode_logits"})
    for (const smelt::TensorInfo& t : f.tensors())
      if (t.name == name) {
        const float* p = reinterpret_cast<const float*>(f.mapping()->data() + t.offset);
        all.insert(all.end(), p, p + t.numel());
      }
  return all;
}

std::string join(const std::vector<int>& v, char sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

std::string list(const std::vector<int>& v) { return join(v, ' '); }

std::string csv(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return join(v, ',');
}

int compare(const std::string& smelt_run, const std::string& plan_path, const std::string& model,
            const std::string& prompt, const std::string& decode, double tol) {
  namespace cu = smelt::runtime::cuda;
  smelt::runtime::Plan plan = smelt::runtime::Plan::load(plan_path);
  const int n = int(plan.rank_plans().size());
  int gpus = 0;
  cu::check(cu::driver().cuDeviceGetCount(&gpus), "counting GPUs");
  if (n < 2) {
    std::printf("FAILED: %s has %d rank(s); this test needs a partitioned plan\n", plan_path.c_str(), n);
    return 1;
  }
  if (gpus < n) {
    std::printf("SKIP: %s has %d ranks, this machine %d GPU(s)\n", plan_path.c_str(), n, gpus);
    return 77;
  }
  const int64_t prompt_n = std::count(prompt.begin(), prompt.end(), ',') + 1;
  int64_t new_tokens = std::count(decode.begin(), decode.end(), ',') + 1;
  new_tokens = std::max<int64_t>(1, std::min<int64_t>(new_tokens, plan.max_seq_len() - prompt_n + 1));
  // Sampling on the host everywhere: the processes compare the logits they all hold, not a GPU sampler.
  ::setenv("SMELT_HOST_SAMPLING", "1", 1);

  const fs::path dir = fs::temp_directory_path() / ("smelt_mp_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int half = n / 2;
  auto gen_args = [&] {
    return std::vector<std::string>{smelt_run, "generate", plan_path, "--model", model, "--prompt-ids", prompt,
                                    "--max-new-tokens", std::to_string(new_tokens), "--greedy", "--format", "json"};
  };
  auto logit_args = [&](const fs::path& out) {
    return std::vector<std::string>{smelt_run, "logits", plan_path, "--model", model, "--prompt-ids", prompt,
                                    "--decode-ids", decode, "--chunk", "16", "--out", out.string()};
  };
  // The two processes: ranks [0, half) on GPUs 0..half-1 (the coordinator), [half, n) on the next GPUs.
  auto split = [&](const std::string& what, std::vector<std::string> args, int port, const std::string& out_flag) {
    std::vector<Run> rs;
    for (int p = 0; p < 2; ++p) {
      const int lo = p ? half : 0, hi = p ? n : half;
      Run r;
      r.name = what + " process " + std::to_string(p) + " (ranks " + csv(lo, hi) + ")";
      r.argv = args;
      if (!out_flag.empty()) r.argv.back() = (dir / (out_flag + std::to_string(p) + ".safetensors")).string();
      for (std::string a : {std::string("--ranks"), csv(lo, hi), std::string("--devices"), csv(lo, hi),
                            std::string("--coordinator"), "127.0.0.1:" + std::to_string(port),
                            std::string("--bootstrap-timeout"), std::string("120")})
        r.argv.push_back(a);
      r.out = dir / (what + std::to_string(p) + ".out");
      r.err = dir / (what + std::to_string(p) + ".err");
      rs.push_back(r);
    }
    return rs;
  };

  // The two processes on a free port. free_loopback_port() only proposes a port: another socket may take it before
  // the coordinator listens ("Address already in use"; seen once on the GPU machine), then the pair runs again on a
  // fresh port (up to three times) instead of failing the comparison.
  auto run_split = [&](const std::string& what, const std::vector<std::string>& args, const std::string& out_flag,
                       std::vector<Run>& rs) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      rs = split(what, args, free_port(), out_flag);
      if (run_all(rs, 300)) return true;
      if (slurp(rs[0].err).find("Address already in use") == std::string::npos) return false;
      std::printf("retrying %s on another port\n", what.c_str());
    }
    return false;
  };

  int failures = 0;
  // One process, every rank (rank r on GPU r): the reference.
  std::vector<Run> one{{"generate, one process", gen_args(), dir / "gen.out", dir / "gen.err"}};
  std::vector<Run> one_lg{{"logits, one process", logit_args(dir / "one.safetensors"), dir / "lg.out", dir / "lg.err"}};
  if (!run_all(one, 300) || !run_all(one_lg, 300)) return 1;
  const std::vector<int> want = tokens_of(one[0]);
  const std::vector<float> ref = logits_of(dir / "one.safetensors");

  std::vector<Run> gen;
  if (!run_split("generate", gen_args(), "", gen)) return 1;
  for (const Run& r : gen) {
    std::vector<int> got = tokens_of(r);
    if (got != want) {
      ++failures;
      std::printf("FAIL %s: tokens differ from the one-process run\n  one process: %s\n  this:        %s\n",
                  r.name.c_str(), list(want).c_str(), list(got).c_str());
    }
  }

  std::vector<Run> lg;
  if (!run_split("logits", logit_args(dir / "x"), "logits", lg)) return 1;
  const std::vector<float> a = logits_of(dir / "logits0.safetensors"), b = logits_of(dir / "logits1.safetensors");
  const int64_t vocab = plan.vocab();
  if (a.size() != ref.size() || b.size() != ref.size() || ref.empty() || ref.size() % size_t(vocab)) {
    std::printf("FAIL logits sizes: one process %zu, processes %zu and %zu (vocab %lld)\n", ref.size(), a.size(),
                b.size(), (long long)vocab);
    return 1;
  }
  if (std::memcmp(a.data(), b.data(), a.size() * 4) != 0) {
    ++failures;
    std::printf("FAIL the two processes' logits differ (they are broadcast from the output rank: must be equal bits)\n");
  }
  double worst = 0.0;
  int64_t worst_row = -1, exact_rows = 0;
  const int64_t rows = int64_t(ref.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    double scale = 1.0, diff = 0.0;
    for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, double(std::fabs(ref[size_t(r * vocab + v)])));
    for (int64_t v = 0; v < vocab; ++v)
      diff = std::max(diff, double(std::fabs(a[size_t(r * vocab + v)] - ref[size_t(r * vocab + v)])));
    if (diff == 0.0) ++exact_rows;
    if (diff / scale > worst) worst = diff / scale, worst_row = r;
  }
  if (worst > tol) {
    ++failures;
    std::printf("FAIL logits: max|processes - one process| / scale = %.3g at row %lld > %.3g\n", worst,
                (long long)worst_row, tol);
  }
  std::printf("%s: %d ranks in 2 processes vs 1: %zu greedy tokens %s, %lld logit rows (%lld bit-identical), worst "
              "%.3g of the row scale (tolerance %.3g), %s\n",
              plan_path.c_str(), n, want.size(), failures ? "checked" : "equal", (long long)rows, (long long)exact_rows,
              worst, tol, failures ? "FAILED" : "ok");
  if (!failures) fs::remove_all(dir);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: multiprocess_compare SMELT_RUN PLAN MODEL_DIR PROMPT_IDS DECODE_IDS TOL\n");
    return 2;
  }
  try {
    return compare(argv[1], argv[2], argv[3], argv[4], argv[5], std::atof(argv[6]));
  } catch (const std::exception& e) {
    std::printf("FAILED: error: %s\n", e.what());
    return 1;
  }
}
