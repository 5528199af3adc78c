#include "compiler/cuda/cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace smelt::cuda_compile::detail {

uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string cache_dir() {
  if (const char* d = std::getenv("SMELT_KERNEL_CACHE"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/smelt/kernels";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/smelt/kernels";
  return "";
}

std::string cache_path(const std::string& family, const std::string& arch, const std::string& format, uint64_t key) {
  std::string dir = cache_dir();
  if (dir.empty()) return "";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  return dir + "/" + family + "." + arch + "." + hex + "." + format;
}

std::optional<std::vector<uint8_t>> cache_read(const std::string& path, const std::string& format) {
  if (path.empty()) return std::nullopt;
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // A truncated or foreign file is a miss, not an error: the compile just runs again and rewrites it.
  if (format == "cubin" && (bytes.size() < 4 || bytes[0] != 0x7f || bytes[1] != 'E' || bytes[2] != 'L' || bytes[3] != 'F'))
    return std::nullopt;
  if (format == "ptx" && bytes.empty()) return std::nullopt;
  return bytes;
}

void cache_write(const std::string& path, const std::vector<uint8_t>& bytes) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return;
  // Write then rename, so a concurrent reader never sees half a file.
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace smelt::cuda_compile::detail
