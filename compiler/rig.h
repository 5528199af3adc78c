// Rigs (docs/partition.md, "Rigs"): which GPU each rank runs on, a rig's default TP shares, the bytes every rank
// needs on its GPU (measured on the planned module, as the cuda backend allocates them) against the GPU's memory
// less a headroom, and the search for the nearest configuration that fits when a rank does not.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/cuda/target.h"
#include "compiler/driver.h"
#include "mlir/IR/BuiltinOps.h"

namespace smelt::rig {

// The GPU (index into target.gpus) of every rank, stage-major like the rank numbers: rank r on gpus[r] for a rig
// file, every rank on the one GPU of a built-in target (h200); empty for cpu and arch lists (no GPU is known).
// Throws smelt::Error when a rig has fewer GPUs than tp * pp, naming both numbers.
std::vector<int> rank_gpus(const cuda_compile::Target& t, int64_t tp, int64_t pp);

// smelt-partition's archs option: the arch of every rank ("sm_80,sm_80,sm_120"), one arch for all, or "" (cpu).
// An arch list target without a per-rank GPU gives every rank all its archs, joined by '+'.
std::string rank_archs(const cuda_compile::Target& t, const std::vector<int>& gpus);

// The default shares of a rig: "" when the GPUs of every TP group have the same memory (even split), else one
// value per rank (tp * pp, stage-major), proportional to the GPU's memory and reduced by their common divisor.
std::string memory_shares(const cuda_compile::Target& t, const std::vector<int>& gpus, int64_t tp, int64_t pp);

// What one rank holds on its GPU.
struct RankMemory {
  int64_t rank = 0;
  std::string arch;              // of its functions (smelt.rank), "" for an unpartitioned module
  uint64_t weights = 0;          // the weights its functions read, after transforms (device dtypes, 256-aligned)
  uint64_t sharded = 0;          // of which TP shards (`<name>.tp<r>` symbols)
  uint64_t states = 0;           // its states at max_seq_len (f32)
  uint64_t arena = 0;            // its activation arena
  uint64_t kernels = 0;          // the cubins of its arch (0 when not compiled)
  std::string largest;           // its largest weight and that weight's bytes
  uint64_t largest_bytes = 0;
  uint64_t total() const { return weights + states + arena + kernels; }
};

// Per rank of a module that went through smelt-plan-memory (one entry for an unpartitioned module).
// `kernel_bytes`: cubin bytes per arch, empty when the kernels are not compiled; `default_arch`: the GPU's arch
// for an unpartitioned module.
std::vector<RankMemory> measure(mlir::ModuleOp m, const std::map<std::string, uint64_t>& kernel_bytes,
                                const std::string& default_arch);

// What the CUDA context, the runtime's scratch and NCCL may take: by default 5% of the GPU's memory + 1 GiB
// (the rig file's headroom_fraction / headroom_gb).
uint64_t headroom(const cuda_compile::Target& t, uint64_t memory_bytes);
uint64_t available(const cuda_compile::Target& t, uint64_t memory_bytes);  // memory - headroom (0 if negative)

std::string bytes_text(uint64_t bytes);  // "61.72 GB", "412.3 kB" (decimal units, as rig files state memory)
std::string gpu_text(const cuda_compile::Target& t, int gpu);  // "GPU 4 (NVIDIA RTX PRO 6000, sm_120, 96.00 GB)"
std::string breakdown(const RankMemory& r);  // "weights 1.2 GB + states ... + arena ... + kernels ..."

// Runs a candidate configuration (import + default pipeline) and returns its per-rank memory, or nothing when
// the configuration does not compile (a refused TP size, too many stages, ...).
using TryConfig = std::function<std::optional<std::vector<RankMemory>>(const CompileOptions&)>;

// True when every rank of `mem` fits its GPU under `o` (rank_gpus of o.tp / o.pp).
bool fits(const cuda_compile::Target& t, const CompileOptions& o, const std::vector<RankMemory>& mem);

// The first candidate that fits, as the flags to change ("--max-seq-len 65536", "--shares 3,3,3,3,5",
// "--pp 3", "--tp 8"), in this order: a smaller --max-seq-len (halving), shares moved toward the ranks with room,
// one more stage at a time, a larger TP; "" when none does. `o` is the failing configuration as given (its
// max_seq_len resolved; shares "" = the default), `shares` the shares it ran with, `mem` its measurement.
std::string nearest(const cuda_compile::Target& t, const CompileOptions& o, const std::string& shares,
                    const std::vector<RankMemory>& mem, const TryConfig& try_config,
                    const std::function<void(const std::string&)>& progress);

}  // namespace smelt::rig
