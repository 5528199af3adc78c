// The build-generated table of embedded kernel files (cmake/embed_kernels.cmake); internal to smelt_nvrtc.
#pragma once
#include <string>
#include <vector>

namespace smelt::cuda_compile::detail {

struct EmbeddedFile {
  const char* family;
  const char* path;  // from the repository root: kernels/<family>/<name>.cu or .cuh
  std::string text;
};
const std::vector<EmbeddedFile>& embedded_files();

}  // namespace smelt::cuda_compile::detail
