// The weight transform grammar of docs/plan.md ("Weight transforms"): `rows(R,...)` / `cols(R,...)` steps
// separated by `;`, each range `a:b` (half-open, of the step's input) or `zero:n`. Shared by the smelt.weight
// verifier (the result shape must be the weight's type) and the passes that write transforms (smelt-pad-heads,
// smelt-partition).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace smelt::transform {

struct Range {
  int64_t begin = 0, end = 0;  // input range [begin, end); for zero ranges begin = 0, end = n
  bool zero = false;
  int64_t size() const { return end - begin; }
};

struct Step {
  int dim = 0;  // 0 = rows, 1 = cols
  std::vector<Range> ranges;
};

// Parses `text` ("" = no steps). Returns "" or what is wrong, in one sentence.
std::string parse(const std::string& text, std::vector<Step>& steps);

// The shape after applying `steps` to a tensor of `shape`. Returns "" or what is wrong (a range outside the
// input, cols of a tensor that is not 2-D, ...).
std::string apply_shape(const std::vector<Step>& steps, std::vector<int64_t> shape, std::vector<int64_t>& out);

// The text of one step, with adjacent input ranges merged ("rows(0:64,64:96)" -> "rows(0:96)").
std::string format(const Step& step);

// Appends `step` to an existing transform text ("" -> the step alone); a step along the same dimension as the
// last one is folded into it (rows(0:64,0:32);rows(64:96) -> rows(0:32)), so shards of padded weights stay
// one step and contiguous ranges stay plain views.
std::string append(const std::string& text, const Step& step);

// The ranges of `outer` applied to the result of `inner` (both along one dimension), as ranges of inner's input.
std::vector<Range> compose(const std::vector<Range>& inner, const std::vector<Range>& outer);

// Merges adjacent ranges (a:b, b:c -> a:c; zero:m, zero:n -> zero:m+n).
std::vector<Range> merged(const std::vector<Range>& ranges);

}  // namespace smelt::transform
