// The on-disk kernel cache behind cuda_compile::compile: one file per (source hash, options, arch, NVRTC
// version). Internal to smelt_nvrtc; a missing or unwritable cache directory only disables caching.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace smelt::cuda_compile::detail {

uint64_t fnv1a(const std::string& text, uint64_t seed = 1469598103934665603ull);
std::string cache_dir();  // $SMELT_KERNEL_CACHE, else $XDG_CACHE_HOME/smelt/kernels, else ~/.cache/smelt/kernels
// The cache file for one compile; `family` and `arch` only make the name readable.
std::string cache_path(const std::string& family, const std::string& arch, const std::string& format, uint64_t key);
std::optional<std::vector<uint8_t>> cache_read(const std::string& path, const std::string& format);
void cache_write(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace smelt::cuda_compile::detail
