// smelt-compile MODEL_DIR --target cpu|h200|FILE.json [--tp N] [--pp M] -o PLAN.smelt
//               [--dump-ir-after-all DIR] [--compile-to PHASE] [--compile-from FILE.mlir]
//               [--max-rows N] [--max-seq-len N] [--pipeline STR] [--capture-intermediates]
//               [--engram-token-map FILE] [--kernel-define NAME=VALUE]...
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "compiler/driver.h"
#include "frontends/dry_run.h"
#include "frontends/error.h"

namespace {

const char* kUsage =
    "usage: smelt-compile MODEL_DIR --target cpu|h200|FILE.json [--tp N] [--pp M] -o PLAN.smelt\n"
    "                     [--shares a,b,...] [--stages l0,l1,...]   (uneven TP shares; layers per PP stage)\n"
    "                     (a rig FILE.json puts rank r on GPU r and checks every rank's memory: docs/partition.md)\n"
    "                     [--dump-ir-after-all DIR] [--compile-to import|verify|select-kernels|plan-memory]\n"
    "                     [--compile-from FILE.mlir] [--max-rows N] [--max-seq-len N] [--pipeline STR]\n"
    "                     [--numerics model|fp32]   (fp32: the V4.1 model's bf16/FP8/FP4 rounding steps off)\n"
    "                     [--engram-token-map FILE]   (V4.1 Engram map inside MODEL_DIR; default\n"
    "                      MODEL_DIR/engram_token_map.safetensors, see scripts/make_engram_token_map.py)\n"
    "                     [--kernel-define NAME=VALUE]...   (a CUDA kernel knob at plan time, recorded in the\n"
    "                      plan's options; --kernel-define help lists them)\n"
    "       smelt-compile MODEL_DIR --dry-run [--json]   (headers only: tensor count, bytes, memory by component)\n";

int64_t parse_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') throw smelt::Error(flag + " " + v + ": not an integer");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    smelt::CompileOptions o;
    o.target.clear();
    bool target_given = false, dry_run = false, json = false;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
      }
      if (a == "--dry-run") {
        dry_run = true;
        continue;
      }
      if (a == "--json") {
        json = true;
        continue;
      }
      if (a == "--capture-intermediates") {
        o.capture_intermediates = true;
        continue;
      }
      std::string value;
      if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {  // --flag=value
        value = a.substr(a.find('=') + 1);
        a = a.substr(0, a.find('='));
      } else if (a[0] == '-') {
        if (i + 1 >= argc) throw smelt::Error(a + " needs a value");
        value = argv[++i];
      }
      if (a == "--target") o.target = value, target_given = true;
      else if (a == "--tp") o.tp = parse_int(a, value);
      else if (a == "--pp") o.pp = parse_int(a, value);
      else if (a == "-o" || a == "--output") o.output = value;
      else if (a == "--dump-ir-after-all") o.dump_dir = value;
      else if (a == "--compile-to") o.compile_to = value;
      else if (a == "--compile-from") o.compile_from = value;
      else if (a == "--max-rows") o.max_rows = parse_int(a, value);
      else if (a == "--max-seq-len") o.max_seq_len = parse_int(a, value);
      else if (a == "--pipeline") o.pipeline = value;
      else if (a == "--shares") o.shares = value;
      else if (a == "--stages") o.stages = value;
      else if (a == "--numerics") o.numerics = value;
      else if (a == "--engram-token-map") o.engram_token_map = value;
      else if (a == "--kernel-define") o.kernel_defines.push_back(value);
      else if (a[0] == '-') throw smelt::Error("unknown option " + a + "\n" + kUsage);
      else if (o.model_dir.empty()) o.model_dir = a;
      else throw smelt::Error("unexpected argument " + a + " (MODEL_DIR is " + o.model_dir + ")");
    }
    if (std::find(o.kernel_defines.begin(), o.kernel_defines.end(), "help") != o.kernel_defines.end()) {
      std::puts("kernel knobs for --kernel-define NAME=VALUE (kernels/linear/gemv_mma.cuh, kernels/cuda/common.cuh):");
      for (const smelt::KernelKnob& k : smelt::kernel_knobs()) std::printf("  %-26s %s\n", k.name, k.what);
      return 0;
    }
    if (o.model_dir.empty()) throw smelt::Error(std::string("no MODEL_DIR given\n") + kUsage);
    if (dry_run) {
      std::fputs(smelt::format_dry_run(smelt::dry_run(o.model_dir), json).c_str(), stdout);
      return 0;
    }
    if (!target_given) throw smelt::Error("no --target given (cpu, h200 or a rig FILE.json)");
    o.progress = [](const std::string& s) { std::fprintf(stderr, "smelt-compile: %s\n", s.c_str()); };
    smelt::compile(o);
    return 0;
  } catch (const smelt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
}
