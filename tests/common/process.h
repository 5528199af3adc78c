// Running the smelt tools from tests: argv quoted for the shell, stdout captured, stderr to a file.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace smelt::test_process {

struct ProcessResult {
  int rc = -1;
  std::string out, err;
};

// `env` overrides `built` when set and non-empty (empty result = the tool is not built).
std::string tool_path(const char* env, const char* built);
// The smelt tools under test: SMELT_COMPILE / SMELT_RUN in the environment override the paths the including
// test target was built with (its SMELT_COMPILE_BIN / SMELT_RUN_BIN compile definitions); "" = not built.
inline std::string compile_tool() {
#ifdef SMELT_COMPILE_BIN
  return tool_path("SMELT_COMPILE", SMELT_COMPILE_BIN);
#else
  return tool_path("SMELT_COMPILE", "");
#endif
}
inline std::string run_tool() {
#ifdef SMELT_RUN_BIN
  return tool_path("SMELT_RUN", SMELT_RUN_BIN);
#else
  return tool_path("SMELT_RUN", "");
#endif
}
std::string shell_quote(const std::string& s);
std::string read_text(const std::filesystem::path& p);
// Runs argv with stdout captured and stderr written to err_file (and returned in err).
ProcessResult run_process(const std::vector<std::string>& argv, const std::filesystem::path& err_file);
// The command, exit code and the start of stdout / stderr, for failure messages.
std::string describe(const std::vector<std::string>& argv, const ProcessResult& r);

// A 127.0.0.1 TCP port nothing listens on (bound, read back, closed) for a test's coordinator; throws
// std::runtime_error when no port can be bound.
int free_loopback_port();

}  // namespace smelt::test_process
