#include "tests/common/process.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace smelt::test_process {

std::string tool_path(const char* env, const char* built) {
  if (const char* e = std::getenv(env); e && *e) return e;
  return built;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ProcessResult run_process(const std::vector<std::string>& argv, const std::filesystem::path& err_file) {
  std::string cmd;
  for (const auto& a : argv) cmd += shell_quote(a) + " ";
  cmd += "2>" + shell_quote(err_file.string());
  ProcessResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.err = read_text(err_file);
  return r;
}

std::string describe(const std::vector<std::string>& argv, const ProcessResult& r) {
  std::string s = "command:";
  for (const auto& a : argv) s += " " + a;
  return s + "\nexit " + std::to_string(r.rc) + "\nstdout: " + r.out.substr(0, 2000) + "\nstderr: " + r.err.substr(0, 4000);
}

}  // namespace smelt::test_process
