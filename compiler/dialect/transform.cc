// The weight transform grammar (transform.h, docs/plan.md "Weight transforms").
#include "compiler/dialect/transform.h"

#include <algorithm>
#include <cctype>

namespace smelt::transform {

namespace {

bool parse_int(const std::string& s, int64_t& v) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  v = std::stoll(s);
  return true;
}

std::string parse_range(const std::string& r, Range& out) {
  size_t colon = r.find(':');
  if (colon == std::string::npos) return "range '" + r + "' is not a:b or zero:n";
  std::string a = r.substr(0, colon), b = r.substr(colon + 1);
  int64_t n = 0;
  if (a == "zero") {
    if (!parse_int(b, n) || n <= 0) return "range '" + r + "' needs a positive count after zero:";
    out = {0, n, true};
    return "";
  }
  int64_t lo = 0, hi = 0;
  if (!parse_int(a, lo) || !parse_int(b, hi)) return "range '" + r + "' is not a:b or zero:n";
  if (hi <= lo) return "range '" + r + "' is empty or reversed";
  out = {lo, hi, false};
  return "";
}

}  // namespace

std::string parse(const std::string& text, std::vector<Step>& steps) {
  steps.clear();
  if (text.empty()) return "";
  size_t at = 0;
  while (at <= text.size()) {
    size_t semi = text.find(';', at);
    std::string step = text.substr(at, semi == std::string::npos ? std::string::npos : semi - at);
    Step s;
    std::string body;
    if (step.rfind("rows(", 0) == 0) s.dim = 0, body = step.substr(5);
    else if (step.rfind("cols(", 0) == 0) s.dim = 1, body = step.substr(5);
    else return "step '" + step + "' is not rows(...) or cols(...)";
    if (body.empty() || body.back() != ')') return "step '" + step + "' does not end with ')'";
    body.pop_back();
    size_t p = 0;
    while (p <= body.size()) {
      size_t comma = body.find(',', p);
      Range r;
      std::string err = parse_range(body.substr(p, comma == std::string::npos ? std::string::npos : comma - p), r);
      if (!err.empty()) return err;
      s.ranges.push_back(r);
      if (comma == std::string::npos) break;
      p = comma + 1;
    }
    steps.push_back(s);
    if (semi == std::string::npos) break;
    at = semi + 1;
  }
  return "";
}

std::string apply_shape(const std::vector<Step>& steps, std::vector<int64_t> shape, std::vector<int64_t>& out) {
  for (const Step& s : steps) {
    if (s.dim == 1 && shape.size() != 2) return "cols(...) needs a 2-D tensor";
    if (shape.empty()) return "rows(...) needs a tensor of rank >= 1";
    int64_t n = 0;
    for (const Range& r : s.ranges) {
      if (!r.zero && r.end > shape[s.dim])
        return "range " + std::to_string(r.begin) + ":" + std::to_string(r.end) + " exceeds the " +
               std::to_string(shape[s.dim]) + (s.dim ? " columns" : " rows") + " of its input";
      n += r.size();
    }
    shape[s.dim] = n;
  }
  out = shape;
  return "";
}

std::vector<Range> merged(const std::vector<Range>& ranges) {
  std::vector<Range> out;
  for (const Range& r : ranges) {
    if (r.size() <= 0) continue;
    if (!out.empty() && out.back().zero == r.zero && (r.zero || out.back().end == r.begin)) {
      if (r.zero) out.back().end += r.size();
      else out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::string format(const Step& step) {
  std::string s = step.dim ? "cols(" : "rows(";
  bool first = true;
  for (const Range& r : merged(step.ranges)) {
    s += first ? "" : ",";
    first = false;
    s += r.zero ? "zero:" + std::to_string(r.size()) : std::to_string(r.begin) + ":" + std::to_string(r.end);
  }
  return s + ")";
}

std::vector<Range> compose(const std::vector<Range>& inner, const std::vector<Range>& outer) {
  std::vector<Range> out;
  for (const Range& o : outer) {
    if (o.zero) {
      out.push_back(o);
      continue;
    }
    int64_t at = 0;  // start of the current inner range in inner's output
    for (const Range& i : inner) {
      int64_t lo = std::max(o.begin, at), hi = std::min(o.end, at + i.size());
      if (lo < hi) out.push_back(i.zero ? Range{0, hi - lo, true} : Range{i.begin + lo - at, i.begin + hi - at, false});
      at += i.size();
    }
  }
  return merged(out);
}

std::string append(const std::string& text, const Step& step) {
  std::vector<Step> steps;
  if (text.empty() || !parse(text, steps).empty()) return text.empty() ? format(step) : text + ";" + format(step);
  if (steps.back().dim == step.dim) steps.back().ranges = compose(steps.back().ranges, step.ranges);
  else steps.push_back(step);
  std::string out;
  for (const Step& s : steps) out += (out.empty() ? "" : ";") + format(s);
  return out;
}

}  // namespace smelt::transform
