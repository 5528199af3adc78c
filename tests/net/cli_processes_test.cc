// smelt-run's several-process flags without a GPU or NCCL: every mistake in --ranks / --coordinator is caught
// before NCCL or a GPU is needed, with one line; the plan fingerprint the processes compare; and two real
// smelt-run processes meeting at a coordinator on 127.0.0.1 with stand-in CUDA and NCCL libraries
// (tests/net/fake_*.c): the rendezvous succeeds or fails with its sentence in both, and a process that got
// through stops only where it needs a GPU.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/cuda/session_cuda.h"
#include "tests/common/process.h"
#include "tests/runtime/plan_builder.h"
#include "tests/runtime/ranks_util.h"

namespace smelt::runtime {
namespace {

using testing::TempDir;

struct Result {
  int code = -1;
  std::string err;
};

Result run(const std::string& args) {
  TempDir io;
  std::string cmd = std::string(SMELT_RUN_PATH) + " " + args + " >" + io.str("out") + " 2>" + io.str("err");
  int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(io.str("err"));
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

// A TP 2 plan of the runtime tests' MLP, written to `path`.
void write_tp2(const std::string& path, const std::string& model_dir) {
  testing::MlpSplit(2, 1, {0, 4, 10}, {0, 5, 11}).write(path, model_dir);
}

void expect_error(const Result& r, const std::string& want) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line
}

TEST(CliProcesses, RankMistakesAreOneSentence) {
  TempDir dir;
  const std::string plan = dir.str("tp2.smelt");
  write_tp2(plan, dir.str());
  const std::string gen = "generate " + plan + " --prompt-ids 1,2 --max-new-tokens 2 ";
  expect_error(run(gen + "--backend cpu --ranks 0 --coordinator 127.0.0.1:29500"),
               "--ranks and --coordinator need --backend cuda (the cpu backend runs every rank in one process)");
  // The plan has no kernels: auto picks the cpu backend, which refuses the flags the same way.
  expect_error(run(gen + "--ranks 1 --coordinator 127.0.0.1:29500"), "--ranks and --coordinator need --backend cuda");
  expect_error(run(gen + "--backend cuda --ranks 2 --coordinator 127.0.0.1:29500"),
               "--ranks: " + plan + " has no rank 2 (it has 2: 0..1)");
  expect_error(run(gen + "--backend cuda --ranks 1,1 --coordinator 127.0.0.1:29500"), "--ranks lists rank 1 twice");
  expect_error(run(gen + "--backend cuda --ranks 1"),
               "--ranks 1 runs part of " + plan + "'s 2 ranks: the others run in other processes, so give every "
               "process --coordinator HOST:PORT");
  expect_error(run(gen + "--backend cuda --ranks 1 --coordinator 127.0.0.1"), "--coordinator: '127.0.0.1' is not HOST:PORT");
  expect_error(run(gen + "--backend cuda --ranks 1 --coordinator host:99999"), "--coordinator: port 99999 is not a TCP port");
  expect_error(run("logits " + plan + " --prompt-ids 1 --out " + dir.str("l.safetensors") + " --backend cuda --ranks 0"),
               "give every process --coordinator HOST:PORT");

  // A plain plan has one rank, 0.
  testing::PlanBuilder single;
  testing::Mlp::single(single);
  const std::string plain = dir.str("plain.smelt");
  testing::PlanBuilder::write_bytes(plain, single.file(dir.str()));
  expect_error(run("generate " + plain + " --prompt-ids 1 --max-new-tokens 1 --backend cuda --ranks 1"),
               "--ranks: " + plain + " is not partitioned; its only rank is 0");
}

TEST(CliProcesses, PlanFingerprint) {
  TempDir dir;
  write_tp2(dir.str("a.smelt"), dir.str());
  write_tp2(dir.str("b.smelt"), dir.str());          // the same plan, another file
  std::filesystem::create_directories(dir.str("elsewhere"));
  write_tp2(dir.str("c.smelt"), dir.str("elsewhere"));  // another model_dir: other bytes
  const uint64_t a = cuda::plan_fingerprint(dir.str("a.smelt"));
  EXPECT_EQ(a, cuda::plan_fingerprint(dir.str("b.smelt")));
  EXPECT_NE(a, cuda::plan_fingerprint(dir.str("c.smelt")));
  // FNV-1a 64 of the 32 header bytes, computed here from the bytes on disk.
  std::ifstream in(dir.str("a.smelt"), std::ios::binary);
  unsigned char h[32];
  in.read(reinterpret_cast<char*>(h), 32);
  uint64_t want = 0xcbf29ce484222325ull;
  for (unsigned char c : h) want = (want ^ c) * 0x100000001b3ull;
  EXPECT_EQ(a, want);
  try {
    cuda::plan_fingerprint(dir.str("missing.smelt"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.smelt: cannot read the plan header"), std::string::npos) << e.what();
  }
}

// A TP 2 x PP 2 plan (4 ranks).
void write_tp2_pp2(const std::string& path, const std::string& model_dir) {
  testing::MlpSplit(2, 2, {0, 4, 10}, {0, 5, 11}).write(path, model_dir);
}

int free_port() { return smelt::test_process::free_loopback_port(); }

// Runs smelt-run once per argument string, all at the same time, with the stand-in libraries.
std::vector<Result> run_together(const std::vector<std::string>& args) {
  TempDir io;
  std::string script;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string k = std::to_string(i);
    script += "(LD_LIBRARY_PATH=" + std::string(SMELT_FAKE_LIBS) + " " + SMELT_RUN_PATH + " " + args[i] + " >" +
              io.str("out" + k) + " 2>" + io.str("err" + k) + "; echo $? >" + io.str("rc" + k) + ") & ";
  }
  script += "wait";
  EXPECT_EQ(std::system(script.c_str()), 0);
  std::vector<Result> out;
  for (size_t i = 0; i < args.size(); ++i) {
    Result r;
    std::ifstream rc(io.str("rc" + std::to_string(i))), err(io.str("err" + std::to_string(i)));
    rc >> r.code;
    std::stringstream ss;
    ss << err.rdbuf();
    r.err = ss.str();
    out.push_back(r);
  }
  return out;
}

// The last line of stderr (progress lines come before the error).
std::string last_line(const std::string& err) {
  std::string s = err;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

TEST(CliProcesses, TwoProcessesMeetThenNeedAGpu) {
  TempDir dir;
  const std::string plan = dir.str("tp2.smelt");
  write_tp2(plan, dir.str());
  const int port = free_port();
  const std::string at = "127.0.0.1:" + std::to_string(port);
  const std::string gen = "generate " + plan + " --prompt-ids 1,2 --max-new-tokens 2 --backend cuda --coordinator " +
                          at + " --bootstrap-timeout 30 ";
  std::vector<Result> r = run_together({gen + "--ranks 0 --devices 0", gen + "--ranks 1 --devices 1"});
  // Both got through the rendezvous (the coordinator saw rank 1 join) and stopped at the first GPU call.
  EXPECT_NE(r[0].err.find("bootstrap " + at + ": ranks 1 joined from 127.0.0.1:"), std::string::npos) << r[0].err;
  for (const Result& x : r) {
    EXPECT_EQ(x.code, 1) << x.err;
    EXPECT_EQ(last_line(x.err), "error: CUDA error in reading the GPU's name: CUDA_ERROR_UNKNOWN (the fake driver of "
                                "tests/net has no GPU)") << x.err;
  }
}

TEST(CliProcesses, RendezvousFailuresReachEveryProcess) {
  TempDir dir;
  const std::string tp2 = dir.str("tp2.smelt"), four = dir.str("four.smelt"), other = dir.str("other.smelt");
  write_tp2(tp2, dir.str());
  write_tp2_pp2(four, dir.str());
  std::filesystem::create_directories(dir.str("elsewhere"));
  write_tp2(other, dir.str("elsewhere"));  // the same shapes, other bytes
  auto gen = [](const std::string& plan, const std::string& at, const std::string& extra) {
    return "generate " + plan + " --prompt-ids 1,2 --max-new-tokens 2 --backend cuda --coordinator " + at + " " + extra;
  };
  {  // another plan file
    const std::string at = "127.0.0.1:" + std::to_string(free_port());
    std::vector<Result> r = run_together({gen(tp2, at, "--ranks 0 --bootstrap-timeout 30"),
                                          gen(other, at, "--ranks 1 --devices 1 --bootstrap-timeout 30")});
    for (const Result& x : r) {
      EXPECT_EQ(x.code, 1) << x.err;
      std::string l = last_line(x.err);
      EXPECT_EQ(l.rfind("error: bootstrap " + at + ": the process at 127.0.0.1:", 0), 0u) << x.err;
      EXPECT_NE(l.find("(ranks 1) runs a different plan than the coordinator"), std::string::npos) << x.err;
    }
  }
  {  // rank 1 claimed twice
    const std::string at = "127.0.0.1:" + std::to_string(free_port());
    std::vector<Result> r = run_together({gen(four, at, "--ranks 0,1 --bootstrap-timeout 30"),
                                          gen(four, at, "--ranks 1,2 --devices 0,1 --bootstrap-timeout 30")});
    for (const Result& x : r) {
      EXPECT_EQ(x.code, 1) << x.err;
      EXPECT_NE(last_line(x.err).find("rank 1 is claimed by both the coordinator and the process at 127.0.0.1:"),
                std::string::npos) << x.err;
    }
  }
  {  // rank 3 never comes
    const std::string at = "127.0.0.1:" + std::to_string(free_port());
    std::vector<Result> r = run_together({gen(four, at, "--ranks 0,1 --bootstrap-timeout 5"),
                                          gen(four, at, "--ranks 2 --bootstrap-timeout 30")});
    for (const Result& x : r) {
      EXPECT_EQ(x.code, 1) << x.err;
      EXPECT_NE(last_line(x.err).find("bootstrap " + at + ": timed out after 5 s waiting for rank(s) 3 (joined: ranks "
                                      "0,1 here, ranks 2 from 127.0.0.1:"),
                std::string::npos) << x.err;
    }
  }
  {  // nobody listens
    const std::string at = "127.0.0.1:" + std::to_string(free_port());
    std::vector<Result> r = run_together({gen(tp2, at, "--ranks 1 --bootstrap-timeout 0.5")});
    EXPECT_EQ(r[0].code, 1) << r[0].err;
    EXPECT_EQ(last_line(r[0].err), "error: bootstrap " + at + ": cannot reach the coordinator within 0.5 s: connection refused");
  }
}

}  // namespace
}  // namespace smelt::runtime
