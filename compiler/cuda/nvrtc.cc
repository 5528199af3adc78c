// NVRTC compilation of the embedded kernel sources. Options (fixed, part of the cache key):
//   --gpu-architecture=<arch>   sm_XX: a cubin for exactly that GPU generation; compute_XX: PTX
//   -std=c++17 -default-device  kernels are plain CUDA C++; helpers need no __device__ annotation
//   --fmad=true --ftz=false --prec-div=true --prec-sqrt=true
//                               pinned IEEE numerics (no fast math): results stay within the stated
//                               tolerance of the float32 cpu reference; fmad only contracts a*b+c
//   -lineinfo                   source lines in compute-sanitizer reports (no run-time cost)
// No toolkit headers are on the include path: a kernel includes only the embedded kernels/<family>/*.cuh
// (e.g. "kernels/cuda/common.cuh"), which are passed to NVRTC by name, so smelt-compile needs nothing from
// the source tree at run time.
#include "compiler/cuda/nvrtc.h"

#include <map>
#include <mutex>

#include "compiler/cuda/cache.h"
#include "compiler/cuda/nvrtc_table.h"
#include "frontends/error.h"

#ifdef SMELT_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace smelt::cuda_compile {

namespace {

// One KernelSource per family: a family with several .cu files is one module, their texts concatenated with
// #line markers so NVRTC's messages name the right file.
struct Table {
  std::vector<KernelSource> files;              // every .cu, as embedded
  std::map<std::string, KernelSource> families;  // family -> module source
  std::vector<std::pair<std::string, std::string>> headers;  // .cuh: include name, text
  std::string headers_key;                      // all header names and texts, hashed into every key
};

const Table& table() {
  static const Table t = [] {
    Table t;
    for (const auto& f : detail::embedded_files()) {
      std::string path = f.path;
      if (path.size() > 4 && path.compare(path.size() - 4, 4, ".cuh") == 0) {
        t.headers.emplace_back(path, f.text);
        t.headers_key += path + '\n' + f.text + '\n';
        continue;
      }
      t.files.push_back({f.family, path, f.text});
      auto [it, fresh] = t.families.try_emplace(f.family, KernelSource{f.family, path, f.text});
      if (!fresh) {
        if (it->second.file != "kernels/" + it->second.family + "/*.cu") {
          it->second.text = "#line 1 \"" + it->second.file + "\"\n" + it->second.text;
          it->second.file = "kernels/" + it->second.family + "/*.cu";
        }
        it->second.text += "\n#line 1 \"" + path + "\"\n" + f.text;
      }
    }
    return t;
  }();
  return t;
}

const std::vector<std::string>& base_options() {
  static const std::vector<std::string> o = {"-std=c++17", "-default-device", "--fmad=true", "--ftz=false",
                                             "--prec-div=true", "--prec-sqrt=true", "-lineinfo"};
  return o;
}

// One line: NVRTC logs are multi-line; errors in smelt are one line.
std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  std::string out;
  for (char c : s) {
    if (c == '\n') out += " | ";
    else if (c != '\r') out += c;
  }
  if (out.size() > 4000) out = out.substr(0, 4000) + " ...";
  return out;
}

bool valid_arch(const std::string& arch) {
  auto digits = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; };
  if (arch.rfind("sm_", 0) == 0) return digits(arch.substr(3));
  if (arch.rfind("compute_", 0) == 0) return digits(arch.substr(8));
  return false;
}

}  // namespace

const std::vector<KernelSource>& kernel_sources() { return table().files; }

const KernelSource& kernel_source(const std::string& family) {
  const auto& t = table();
  auto it = t.families.find(family);
  if (it == t.families.end())
    throw Error("no CUDA kernel source for family '" + family + "' (expected kernels/" + family +
                "/*.cu, embedded at build time)");
  return it->second;
}

#ifdef SMELT_HAVE_NVRTC

bool available() { return true; }

Image compile(const KernelSource& src, const std::string& arch, const std::vector<std::string>& extra_options) {
  if (!valid_arch(arch))
    throw Error(src.file + ": unknown CUDA arch '" + arch + "' (expected sm_XX for a cubin or compute_XX for PTX)");
  Image img;
  img.arch = arch;
  img.format = arch.rfind("sm_", 0) == 0 ? "cubin" : "ptx";
  const auto& t = table();
  img.source_hash = detail::fnv1a(src.text, detail::fnv1a(t.headers_key));

  // sm_90 cubins are built for sm_90a (every sm_90 GPU runs them): the FP4 expert GEMVs use wgmma, which only the
  // arch-specific target has (kernels/linear/gemv_mma.cuh SMELT_WGMMA). PTX stays portable compute_90.
  std::vector<std::string> options = {"--gpu-architecture=" + (arch == "sm_90" ? std::string("sm_90a") : arch)};
  options.insert(options.end(), base_options().begin(), base_options().end());
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  std::string key_text = std::to_string(img.source_hash) + "\nnvrtc " + std::to_string(major) + "." +
                         std::to_string(minor) + "\n";
  for (const auto& o : options) key_text += o + '\n';
  std::string cache = detail::cache_path(src.family, arch, img.format, detail::fnv1a(key_text));
  if (auto hit = detail::cache_read(cache, img.format)) {
    img.bytes = std::move(*hit);
    return img;
  }

  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, text] : t.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, src.text.c_str(), src.file.c_str(), static_cast<int>(header_texts.size()),
                                     header_texts.data(), header_names.data());
  if (r != NVRTC_SUCCESS) throw Error(src.file + ": NVRTC could not create a program: " + nvrtcGetErrorString(r));
  struct Guard {
    nvrtcProgram* p;
    ~Guard() { nvrtcDestroyProgram(p); }
  } guard{&prog};

  std::vector<const char*> opts;
  for (const auto& o : options) opts.push_back(o.c_str());
  r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    img.log.resize(log_size);
    nvrtcGetProgramLog(prog, img.log.data());
    img.log.resize(log_size - 1);
  }
  if (r != NVRTC_SUCCESS)
    throw Error(src.file + ": NVRTC failed for " + arch + " (" + nvrtcGetErrorString(r) + "): " + one_line(img.log));

  size_t n = 0;
  if (img.format == "cubin") {
    nvrtcGetCUBINSize(prog, &n);
    img.bytes.resize(n);
    r = nvrtcGetCUBIN(prog, reinterpret_cast<char*>(img.bytes.data()));
  } else {
    nvrtcGetPTXSize(prog, &n);
    img.bytes.resize(n);
    r = nvrtcGetPTX(prog, reinterpret_cast<char*>(img.bytes.data()));
  }
  if (r != NVRTC_SUCCESS || img.bytes.empty())
    throw Error(src.file + ": NVRTC produced no " + img.format + " for " + arch);
  detail::cache_write(cache, img.bytes);
  return img;
}

#else

bool available() { return false; }

Image compile(const KernelSource& src, const std::string& arch, const std::vector<std::string>&) {
  throw Error(src.file + ": this build of smelt has no NVRTC (the CUDA toolkit was not found at build time), so it "
              "cannot compile kernels for " + arch);
}

#endif

}  // namespace smelt::cuda_compile
