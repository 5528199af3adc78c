#include "compiler/cuda/target.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frontends/error.h"

namespace smelt::cuda_compile {

namespace {

// The archs the kernels are written and tested for (issue 4): A100-class, H100/H200, RTX 50 / Blackwell
// workstation. Others would compile but nobody has run them.
const char* kKnownArchs[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"};

std::string check_arch(const std::string& arch, const std::string& where) {
  for (const char* a : kKnownArchs)
    if (arch == a) return arch;
  throw Error(where + ": unknown GPU arch '" + arch + "' (expected one of sm_80, sm_86, sm_89, sm_90, sm_100, sm_120)");
}

void finish(Target& t) {
  t.cuda = true;
  for (const auto& g : t.gpus)
    if (std::find(t.archs.begin(), t.archs.end(), g.arch) == t.archs.end()) t.archs.push_back(g.arch);
  std::sort(t.archs.begin(), t.archs.end(),
            [](const std::string& a, const std::string& b) { return arch_number(a) < arch_number(b); });
  t.ptx_arch = "compute_" + t.archs.back().substr(3);
}

Target from_rig(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot read the rig file");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw Error(path + ": not a JSON object (see docs/targets.md)");
  if (!j.contains("gpus") || !j["gpus"].is_array() || j["gpus"].empty())
    throw Error(path + ": 'gpus' must be a non-empty list of {\"arch\", \"memory_gb\"}");
  Target t;
  t.name = std::filesystem::path(path).filename().string();
  if (j.contains("name")) {
    if (!j["name"].is_string()) throw Error(path + ": 'name' must be a string");
    t.name = j["name"].get<std::string>();
  }
  if (j.contains("headroom_fraction")) {
    if (!j["headroom_fraction"].is_number() || j["headroom_fraction"].get<double>() < 0 ||
        j["headroom_fraction"].get<double>() >= 1)
      throw Error(path + ": 'headroom_fraction' must be a number in [0, 1)");
    t.headroom_fraction = j["headroom_fraction"].get<double>();
  }
  if (j.contains("headroom_gb")) {
    if (!j["headroom_gb"].is_number() || j["headroom_gb"].get<double>() < 0)
      throw Error(path + ": 'headroom_gb' must be a number >= 0");
    t.headroom_bytes = uint64_t(j["headroom_gb"].get<double>() * 1e9);
  }
  for (size_t i = 0; i < j["gpus"].size(); ++i) {
    const auto& g = j["gpus"][i];
    std::string where = path + ": gpus[" + std::to_string(i) + "]";
    if (!g.is_object() || !g.contains("arch") || !g["arch"].is_string())
      throw Error(where + " needs 'arch' (e.g. \"sm_90\")");
    TargetGpu gpu;
    gpu.arch = check_arch(g["arch"].get<std::string>(), where);
    if (!g.contains("memory_gb") || !g["memory_gb"].is_number() || g["memory_gb"].get<double>() <= 0)
      throw Error(where + " needs 'memory_gb' > 0");
    gpu.memory_bytes = uint64_t(g["memory_gb"].get<double>() * 1e9);
    if (g.contains("name")) {
      if (!g["name"].is_string()) throw Error(where + ": 'name' must be a string");
      gpu.name = g["name"].get<std::string>();
    }
    int64_t count = 1;
    if (g.contains("count")) {
      if (!g["count"].is_number_integer() || g["count"].get<int64_t>() < 1 || g["count"].get<int64_t>() > 1024)
        throw Error(where + ": 'count' must be an integer in [1, 1024]");
      count = g["count"].get<int64_t>();
    }
    for (int64_t k = 0; k < count; ++k) t.gpus.push_back(gpu);
  }
  t.rig = true;
  finish(t);
  return t;
}

}  // namespace

int arch_number(const std::string& arch) {
  size_t at = arch.rfind('_');
  std::string digits = at == std::string::npos ? "" : arch.substr(at + 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 4)
    throw Error("'" + arch + "' is not a GPU arch such as sm_90");
  return std::stoi(digits);
}

Target parse_target(const std::string& spec) {
  Target t;
  if (spec == "cpu") {
    t.name = "cpu";
    return t;
  }
  if (spec == "h200") {
    t.name = "h200";
    t.gpus.push_back({"NVIDIA H200", "sm_90", 141000000000ull});
    finish(t);
    return t;
  }
  if (spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".json") == 0) return from_rig(spec);
  if (spec.rfind("sm_", 0) == 0) {
    std::string list = spec;
    std::replace(list.begin(), list.end(), '+', ',');
    std::stringstream ss(list);
    std::string arch;
    while (std::getline(ss, arch, ',')) t.gpus.push_back({"", check_arch(arch, "--target " + spec), 0});
    t.name = list;
    finish(t);
    return t;
  }
  throw Error("--target " + spec + ": unknown target (expected cpu, h200, a list of archs such as sm_80,sm_120, or a "
              "rig FILE.json)");
}

std::string Target::json() const {
  if (!cuda) return "";
  nlohmann::json j;
  j["name"] = name;
  j["archs"] = archs;
  j["ptx"] = ptx_arch;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : gpus) j["gpus"].push_back({{"name", g.name}, {"arch", g.arch}, {"memory_bytes", g.memory_bytes}});
  if (rig) j["headroom"] = {{"fraction", headroom_fraction}, {"bytes", headroom_bytes}};
  return j.dump();
}

}  // namespace smelt::cuda_compile
