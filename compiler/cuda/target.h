// Compile targets (smelt-compile --target; docs/targets.md): `cpu`; the built-in `h200` (one sm_90 GPU,
// 141 GB); a list of archs `sm_80,sm_120` (`+` also separates, for pass pipelines); or a rig file `FILE.json`
// (schemas/target.schema.json). A cuda target compiles every kernel family to a cubin per arch plus PTX for
// the highest arch. No MLIR: smelt-select-kernels, the driver and the tests share it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace smelt::cuda_compile {

struct TargetGpu {
  std::string name;       // "NVIDIA H200", or "" when the target is an arch list
  std::string arch;       // sm_90
  uint64_t memory_bytes = 0;  // 0 = not stated
};

struct Target {
  std::string name;                // what the plan records: cpu | h200 | sm_80,sm_120 | the rig file's name
  bool cuda = false;
  std::vector<std::string> archs;  // distinct cubin archs, ascending by compute capability
  std::string ptx_arch;            // compute_XX of the highest arch ("" for cpu; PTX is compiled for every arch)
  std::vector<TargetGpu> gpus;     // one entry per GPU (h200: 1; an arch list: one per arch, memory 0)
  bool rig = false;                // a rig file: rank r runs on gpus[r] (docs/partition.md, "Rigs")
  // What a GPU keeps for the CUDA context, the runtime's scratch and NCCL: a fraction of its memory + bytes
  // (rig file keys headroom_fraction, headroom_gb; default 5% + 1 GiB).
  double headroom_fraction = 0.05;
  uint64_t headroom_bytes = uint64_t(1) << 30;
  std::string json() const;        // the normalised description recorded in Plan.target_json ("" for cpu)
};

// Throws smelt::Error with one line naming the target (or the rig file and key) on bad input.
Target parse_target(const std::string& spec);

// sm_90 -> 90; throws on anything else.
int arch_number(const std::string& arch);

}  // namespace smelt::cuda_compile

namespace smelt::cuda_compile {
// The target as a pass option value: commas (arch lists) become '+', since pass options split at commas.
inline std::string pipeline_spelling(std::string spec) {
  for (char& c : spec)
    if (c == ',') c = '+';
  return spec;
}
}  // namespace smelt::cuda_compile
