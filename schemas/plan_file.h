// The plan file = a fixed 32-byte header + the plan.fbs flatbuffer payload.
//   0  char[8]  magic "SMELTPLN"
//   8  u32      major version  (a runtime refuses any other major)
//  12  u32      minor version  (a runtime refuses a newer minor)
//  16  u64      payload size in bytes
//  24  u64      FNV-1a 64 of the payload
// Header-only; used by compiler/emit (write) and runtime/plan (read).
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace smelt::plan_file {

inline constexpr char kMagic[8] = {'S', 'M', 'E', 'L', 'T', 'P', 'L', 'N'};
inline constexpr uint32_t kVersionMajor = 1;
// Minor 1: Plan.programs (further entry points, e.g. the DSpark drafter). Minor 0 plans read as before.
// Minor 2: partitioned plans (Plan.tp/pp/ranks, Weight.source_shape, collective ops). Older plans read as before.
inline constexpr uint32_t kVersionMinor = 2;
inline constexpr size_t kHeaderSize = 32;

inline uint64_t fnv1a64(const uint8_t* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// Header + payload, ready to write to disk.
inline std::vector<uint8_t> wrap(std::span<const uint8_t> payload, uint32_t major = kVersionMajor,
                                 uint32_t minor = kVersionMinor) {
  std::vector<uint8_t> out(kHeaderSize + payload.size());
  uint64_t size = payload.size(), hash = fnv1a64(payload.data(), payload.size());
  std::memcpy(out.data(), kMagic, 8);
  std::memcpy(out.data() + 8, &major, 4);
  std::memcpy(out.data() + 12, &minor, 4);
  std::memcpy(out.data() + 16, &size, 8);
  std::memcpy(out.data() + 24, &hash, 8);
  if (!payload.empty()) std::memcpy(out.data() + kHeaderSize, payload.data(), payload.size());
  return out;
}

// Checks the header of a plan file's bytes; returns an empty string and the payload if good, else one
// sentence saying what is wrong (the caller prefixes the file name).
inline std::string check(std::span<const uint8_t> file, std::span<const uint8_t>* payload) {
  if (file.size() < kHeaderSize)
    return "is not a smelt plan: " + std::to_string(file.size()) + " bytes is shorter than the 32-byte header";
  if (std::memcmp(file.data(), kMagic, 8) != 0) return "is not a smelt plan (wrong magic bytes)";
  uint32_t major, minor;
  uint64_t size, hash;
  std::memcpy(&major, file.data() + 8, 4);
  std::memcpy(&minor, file.data() + 12, 4);
  std::memcpy(&size, file.data() + 16, 8);
  std::memcpy(&hash, file.data() + 24, 8);
  if (major != kVersionMajor)
    return "has plan format version " + std::to_string(major) + "." + std::to_string(minor) +
           " but this runtime reads major version " + std::to_string(kVersionMajor) + " only; recompile the plan";
  if (minor > kVersionMinor)
    return "has plan format version " + std::to_string(major) + "." + std::to_string(minor) +
           ", newer than this runtime's " + std::to_string(kVersionMajor) + "." + std::to_string(kVersionMinor) +
           "; update smelt-run";
  if (size != file.size() - kHeaderSize)
    return "is truncated or padded: header says " + std::to_string(size) + " payload bytes, file has " +
           std::to_string(file.size() - kHeaderSize);
  if (fnv1a64(file.data() + kHeaderSize, size) != hash) return "is corrupt: payload hash mismatch";
  *payload = file.subspan(kHeaderSize, size);
  return {};
}

}  // namespace smelt::plan_file
