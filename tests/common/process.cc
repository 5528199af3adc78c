#include "tests/common/process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

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

int free_loopback_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (s >= 0) ::close(s);
  if (!ok) throw std::runtime_error("cannot bind a TCP port on 127.0.0.1");
  return ntohs(a.sin_port);
}

}  // namespace smelt::test_process
