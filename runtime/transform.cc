#include "runtime/transform.h"

#include <cstring>

namespace smelt::runtime {

namespace {

constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// A non-negative decimal integer that fits a tensor dimension.
bool parse_int(std::string_view s, int64_t* v) {
  s = trim(s);
  if (s.empty() || s.size() > 10) return false;
  int64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  if (n > kMaxDim) return false;
  *v = n;
  return true;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

std::vector<TransformStep> parse_transform(std::string_view text, std::string* error) {
  std::vector<TransformStep> steps;
  if (trim(text).empty()) return steps;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view step = trim(text.substr(start, end - start));
    TransformStep st;
    if (step.starts_with("rows(")) st.dim = 0;
    else if (step.starts_with("cols(")) st.dim = 1;
    else {
      *error = "step '" + std::string(step) + "' is not rows(...) or cols(...)";
      return {};
    }
    if (!step.ends_with(")")) {
      *error = "step '" + std::string(step) + "' does not end with ')'";
      return {};
    }
    std::string_view list = step.substr(5, step.size() - 6);
    size_t r0 = 0;
    while (r0 <= list.size()) {
      size_t r1 = list.find(',', r0);
      if (r1 == std::string_view::npos) r1 = list.size();
      std::string_view item = trim(list.substr(r0, r1 - r0));
      size_t colon = item.find(':');
      TransformRange r;
      bool ok = colon != std::string_view::npos;
      if (ok && trim(item.substr(0, colon)) == "zero") {
        r.zero = true;
        ok = parse_int(item.substr(colon + 1), &r.b) && r.b > 0;
      } else if (ok) {
        ok = parse_int(item.substr(0, colon), &r.a) && parse_int(item.substr(colon + 1), &r.b) && r.a < r.b;
      }
      if (!ok) {
        *error = "range '" + std::string(item) + "' is not a:b (a < b) or zero:n (n > 0)";
        return {};
      }
      st.ranges.push_back(r);
      r0 = r1 + 1;
    }
    steps.push_back(std::move(st));
    start = end + 1;
  }
  return steps;
}

std::string transform_shape(const std::vector<TransformStep>& steps, std::vector<int64_t> shape,
                            std::vector<int64_t>* out) {
  for (size_t k = 0; k < steps.size(); ++k) {
    const TransformStep& st = steps[k];
    const char* what = st.dim == 0 ? "rows" : "cols";
    if (st.dim == 0 && shape.empty()) return "step " + std::to_string(k + 1) + " takes rows of a scalar";
    if (st.dim == 1 && shape.size() != 2)
      return "step " + std::to_string(k + 1) + " takes cols of the " + std::to_string(shape.size()) +
             "-d shape " + shape_str(shape) + " (cols needs 2-d)";
    int64_t have = shape[size_t(st.dim)], total = 0;
    for (const TransformRange& r : st.ranges) {
      if (!r.zero && r.b > have)
        return "step " + std::to_string(k + 1) + " takes " + what + " " + std::to_string(r.a) + ":" +
               std::to_string(r.b) + " of " + std::to_string(have) + " (shape " + shape_str(shape) + ")";
      total += r.size();
      if (total > kMaxDim) return "step " + std::to_string(k + 1) + " makes more than 2^31 " + what;
    }
    shape[size_t(st.dim)] = total;
  }
  *out = shape;
  return {};
}

bool contiguous_rows(const std::vector<TransformStep>& steps, int64_t* first_row) {
  if (steps.size() != 1 || steps[0].dim != 0 || steps[0].ranges.size() != 1 || steps[0].ranges[0].zero) return false;
  *first_row = steps[0].ranges[0].a;
  return true;
}

std::vector<uint8_t> apply_transform(const std::vector<TransformStep>& steps, const uint8_t* src,
                                     std::vector<int64_t> shape, size_t elem_bytes, uint8_t fill) {
  std::vector<uint8_t> cur, next;
  const uint8_t* in = src;
  for (const TransformStep& st : steps) {
    // View the input as [outer, n, inner] along the step's dim; each range copies whole [inner] runs.
    int64_t n = shape[size_t(st.dim)], outer = 1, inner = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (int(d) < st.dim) outer *= shape[d];
      if (int(d) > st.dim) inner *= shape[d];
    }
    int64_t m = 0;
    for (const TransformRange& r : st.ranges) m += r.size();
    size_t run = size_t(inner) * elem_bytes;
    next.assign(size_t(outer * m) * run, fill);
    for (int64_t o = 0; o < outer; ++o) {
      uint8_t* dst = next.data() + size_t(o * m) * run;
      for (const TransformRange& r : st.ranges) {
        if (!r.zero) std::memcpy(dst, in + size_t(o * n + r.a) * run, size_t(r.b - r.a) * run);
        dst += size_t(r.size()) * run;
      }
    }
    shape[size_t(st.dim)] = m;
    cur.swap(next);
    in = cur.data();
  }
  return cur;
}

}  // namespace smelt::runtime
