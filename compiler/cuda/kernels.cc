#include "compiler/cuda/kernels.h"

#include <set>

namespace smelt::cuda_compile {

std::vector<PlanKernel> compile_kernels(const Target& target, const std::function<void(const std::string&)>& progress,
                                        const std::vector<std::string>& extra_options) {
  std::set<std::string> families;
  for (const auto& src : kernel_sources()) families.insert(src.family);
  // A cubin per arch, then PTX per arch: a rank of a rig carries the PTX of its own arch (compute_80 for an sm_80
  // card, which compute_120 PTX could never serve).
  std::vector<std::string> archs = target.archs;
  for (const auto& a : target.archs) archs.push_back("compute_" + a.substr(3));
  std::vector<PlanKernel> out;
  uint64_t bytes = 0;
  for (const auto& family : families) {
    const KernelSource& src = kernel_source(family);
    for (const auto& arch : archs) {
      Image img = compile(src, arch, extra_options);
      if (!img.log.empty() && progress) progress(src.file + " (" + arch + "): " + img.log);
      bytes += img.bytes.size();
      out.push_back({family, std::move(img)});
    }
  }
  if (progress) {
    std::string list;
    for (const auto& a : archs) list += (list.empty() ? "" : ", ") + a;
    std::string defs;
    for (const auto& d : extra_options) defs += " " + d;
    progress("compiled " + std::to_string(families.size()) + " kernel families for " + list + ": " +
             std::to_string(bytes) + " bytes of device code" + (defs.empty() ? "" : " (with" + defs + ")"));
  }
  return out;
}

}  // namespace smelt::cuda_compile
