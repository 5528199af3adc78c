// Helpers shared by the frontend tests: a temporary directory, files written from tensors or raw bytes,
// and a check that an action throws smelt::Error with a one-line message containing given parts.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "frontends/error.h"
#include "frontends/safetensors.h"
#include "frontends/safetensors_writer.h"

namespace smelt::test {

struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/smelt-frontend-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// A tensor that owns its bytes (WriteTensor only borrows them).
struct OwnedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline uint64_t byte_count(DType d, const std::vector<int64_t>& shape) {
  uint64_t n = dtype_size(d);
  for (int64_t s : shape) n *= uint64_t(s);
  return n;
}

inline std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

inline OwnedTensor random_tensor(const std::string& name, DType d, std::vector<int64_t> shape, std::mt19937_64& rng) {
  OwnedTensor t{name, d, std::move(shape), {}};
  t.bytes = random_bytes(byte_count(d, t.shape), rng);
  return t;
}

inline void write_tensors(const std::string& path, const std::vector<OwnedTensor>& ts,
                          const std::map<std::string, std::string>& metadata = {}) {
  std::vector<WriteTensor> w;
  for (const auto& t : ts) w.push_back({t.name, t.dtype, t.shape, std::span<const uint8_t>(t.bytes)});
  write_safetensors(path, w, metadata);
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file from a literal JSON header (any text, valid or not) and `data_bytes` zero bytes.
inline std::string raw_safetensors(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char(n >> (8 * i));
  return out + header + std::string(data_bytes, '\0');
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs f; returns the smelt::Error message, or "<no error>".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const smelt::Error& e) {
    return e.what();
  }
  return "<no error>";
}

inline void expect_error_parts(const std::string& msg, std::initializer_list<std::string> parts) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  EXPECT_NE(msg, "<no error>");
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

#define EXPECT_SMELT_ERROR(stmt, ...) ::smelt::test::expect_error_parts(::smelt::test::error_of([&] { stmt; }), {__VA_ARGS__})

}  // namespace smelt::test
