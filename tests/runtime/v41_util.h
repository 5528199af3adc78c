// Helpers of the V4.1 runtime tests: random release-format weights (E4M3 codes, E8M0 scales, packed FP4),
// test-side decoders of those formats and a bf16 rounding written independently of kernels/bf16.h, and a
// small plan scaffold (embedding of bf16 values -> ... -> logits).
#pragma once
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/session.h"
#include "tests/runtime/plan_builder.h"

namespace smelt::runtime::testing {

// Random E4M3 codes: any finite code (0x7F / 0xFF are NaN).
inline std::vector<uint8_t> e4m3_codes(size_t n, Uniform& u) {
  std::vector<uint8_t> c(n);
  for (auto& x : c) x = uint8_t(int(u.next() * 0x7F) | (u.next() < 0.5 ? 0x80 : 0));
  return c;
}
// E8M0 scales 2^(e-127) with e in [lo, hi].
inline std::vector<uint8_t> e8m0_codes(size_t n, Uniform& u, int lo = 118, int hi = 124) {
  std::vector<uint8_t> c(n);
  for (auto& x : c) x = uint8_t(lo + int(u.next() * (hi - lo + 1)));
  return c;
}
inline std::vector<uint8_t> random_bytes(size_t n, Uniform& u) {
  std::vector<uint8_t> c(n);
  for (auto& x : c) x = uint8_t(u.next() * 256);
  return c;
}

// Format decoders written from the definitions (sign, exponent bias 7, 3 mantissa bits, subnormals).
inline double e4m3_value(uint8_t c) {
  int e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (c & 0x80) ? -v : v;
}
inline double e8m0_value(uint8_t e) { return std::ldexp(1.0, int(e) - 127); }

// Round to the nearest bf16 (8 significant bits), ties to even: frexp/nearbyint, not the bit trick.
inline float bf16(double x) {
  if (x == 0 || !std::isfinite(x)) return float(x);
  int e;
  double m = std::frexp(x, &e);  // [0.5, 1)
  return float(std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8));
}

// A plan that starts with x = embedding(ids) [T, D] of bf16 values; tests add ops and set the logits.
struct V41Scaffold {
  PlanBuilder b;
  int V, D, embed, x;
  Uniform u{41};
  V41Scaffold(int vocab, int dim, int max_rows = 8, int max_seq_len = 32) : V(vocab), D(dim) {
    b.max_rows = max_rows;
    b.max_seq_len = max_seq_len;
    embed = b.weight("embed.weight", {V, D}, u.vec(size_t(V) * D, -1, 1), DType::BF16);
    b.token_ids = b.buffer("ids", 1, plan::DType::I32);
    x = b.buffer("x", D);
    b.op({"smelt.embedding", -1, {b.token_ids}, {x}, {embed}, {}, {}});
  }
  // A float weight of bf16 values.
  int w(const std::string& name, std::vector<int64_t> shape, double lo = -0.3, double hi = 0.3) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return b.weight(name, shape, u.vec(size_t(n), lo, hi), DType::BF16);
  }
  // Embedding rows of `ids` as the runtime sees them.
  std::vector<float> rows(const std::vector<int32_t>& ids) const {
    std::vector<float> out;
    for (int32_t id : ids)
      out.insert(out.end(), b.values(embed).begin() + int64_t(id) * D, b.values(embed).begin() + int64_t(id + 1) * D);
    return out;
  }
  std::unique_ptr<Session> open(const TempDir& dir) {
    return std::make_unique<Session>(Plan::from_bytes(b.file(dir.str()), dir.str("v41.smelt")));
  }
};

}  // namespace smelt::runtime::testing
