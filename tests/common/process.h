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
std::string shell_quote(const std::string& s);
std::string read_text(const std::filesystem::path& p);
// Runs argv with stdout captured and stderr written to err_file (and returned in err).
ProcessResult run_process(const std::vector<std::string>& argv, const std::filesystem::path& err_file);
// The command, exit code and the start of stdout / stderr, for failure messages.
std::string describe(const std::vector<std::string>& argv, const ProcessResult& r);

}  // namespace smelt::test_process
