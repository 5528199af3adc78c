// Weight load transforms (docs/plan.md "Weight transforms", format 1.2): how the bytes a plan loads are made
// from the stored tensor. `rows(R,...)` / `cols(R,...)` steps separated by `;`, each range `a:b` (half-open,
// repeats allowed) or `zero:n` (n rows / columns of zeros; F8_E8M0 scales are filled with 127 = 1.0).
// Head padding and TP partitioning use them, so a sharded plan still reads the release checkpoint in place.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace smelt::runtime {

struct TransformRange {
  bool zero = false;  // zero:n (then b = n), else the input's a:b
  int64_t a = 0, b = 0;
  int64_t size() const { return zero ? b : b - a; }
};

struct TransformStep {
  int dim = 0;  // 0 = rows, 1 = cols
  std::vector<TransformRange> ranges;
};

// Parses a transform ("" = no steps). On a syntax error returns {} and sets `error` to one phrase.
std::vector<TransformStep> parse_transform(std::string_view text, std::string* error);

// The shape after the steps, checking every range against the shape it applies to. Returns "" or the problem.
std::string transform_shape(const std::vector<TransformStep>& steps, std::vector<int64_t> shape,
                            std::vector<int64_t>* out);

// A single `rows(a:b)` step: the result is a contiguous slice of the input; sets `first_row` = a.
bool contiguous_rows(const std::vector<TransformStep>& steps, int64_t* first_row);

// Applies validated steps to the row-major tensor at `src` of `shape` with `elem_bytes` per element (1 for the
// stored bytes of packed FP4), filling zero ranges with the byte `fill`.
std::vector<uint8_t> apply_transform(const std::vector<TransformStep>& steps, const uint8_t* src,
                                     std::vector<int64_t> shape, size_t elem_bytes, uint8_t fill);

}  // namespace smelt::runtime
