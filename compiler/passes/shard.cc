// Weight symbols made by transform steps with exact block-scale remapping, and proportional splits (shard.h).
#include "compiler/passes/shard.h"

#include <cmath>
#include <set>

namespace smelt::shard {

namespace {

bool is_fp8(WeightOp w) { return w && llvm::isa<mlir::Float8E4M3FNType>(w.getTensorType().getElementType()); }
bool is_fp4(WeightOp w) { return w && w.getTensorType().getElementType().isInteger(8); }

std::vector<int64_t> shape_of(WeightOp w) {
  auto s = w.getTensorType().getShape();
  return {s.begin(), s.end()};
}

// The smallest power-of-two block >= 32 of an FP8 weight that its scale's shape describes (as the runtime
// reads it), or 0.
int64_t fp8_block(WeightOp w, WeightOp s) {
  auto ws = shape_of(w), ss = shape_of(s);
  if (ws.size() != 2 || ss.size() != 2) return 0;
  for (int64_t b = 32; b <= 4096; b *= 2)
    if (ss[0] == (ws[0] + b - 1) / b && ss[1] == (ws[1] + b - 1) / b) return b;
  return 0;
}

// Creates (or rewrites in place) a weight symbol: `base` with `step` appended to its transform.
mlir::FlatSymbolRefAttr make(mlir::SymbolTable& symbols, WeightOp base, const std::string& name, const transform::Step& step) {
  std::vector<int64_t> stored = shape_of(base), result;
  if (auto ss = base.getSourceShape()) stored.assign(ss->begin(), ss->end());
  // A step that keeps the whole dimension in order changes nothing (a rank holding all of a split dimension).
  auto m = transform::merged(step.ranges);
  bool identity = m.size() == 1 && !m[0].zero && m[0].begin == 0 && m[0].end == base.getTensorType().getDimSize(step.dim);
  std::string text = identity ? base.getTransform().str() : transform::append(base.getTransform().str(), step);
  std::vector<transform::Step> steps;
  transform::parse(text, steps);
  transform::apply_shape(steps, stored, result);
  auto type = mlir::RankedTensorType::get(result, base.getTensorType().getElementType());
  mlir::OpBuilder b(base.getContext());
  WeightOp w = base;
  if (name != base.getSymName()) {
    // The same shard made before (a weight used twice) is reused; another cut of it gets a suffix.
    std::string n = name;
    for (int k = 1; auto old = symbols.lookup<WeightOp>(n); ++k) {
      if (old.getTransform() == text && old.getSource() == base.getSource()) return mlir::FlatSymbolRefAttr::get(old);
      n = name + "." + std::to_string(k);
    }
    b.setInsertionPointAfter(base);
    w = llvm::cast<WeightOp>(b.clone(*base.getOperation()));
    w.setSymName(n);
    symbols.insert(w);
  }
  w.setTypeAttr(mlir::TypeAttr::get(type));
  w.setTransform(text);
  if (!text.empty()) w.setSourceShapeAttr(b.getDenseI64ArrayAttr(stored));
  return mlir::FlatSymbolRefAttr::get(w);
}

}  // namespace

int64_t block(Quantized q, int dim) {
  if (is_fp4(q.weight)) return dim == 0 ? 1 : 32;
  if (is_fp8(q.weight) && q.scale) return fp8_block(q.weight, q.scale);
  return 0;
}

int64_t extent(Quantized q, int dim) {
  int64_t n = q.weight.getTensorType().getDimSize(dim);
  return is_fp4(q.weight) && dim == 1 ? 2 * n : n;
}

std::string remap(mlir::SymbolTable& symbols, Quantized q, int dim, const std::vector<Range>& ranges,
                  const std::string& name, const std::string& scale_name, const std::string& what,
                  mlir::FlatSymbolRefAttr& weight_out, mlir::FlatSymbolRefAttr& scale_out) {
  const bool fp4 = is_fp4(q.weight);
  const int64_t b = block(q, dim);
  if ((fp4 || is_fp8(q.weight)) && (!q.scale || b == 0))
    return what + ": quantized weight @" + q.weight.getSymName().str() + " has no usable block scale";
  transform::Step wstep{dim, {}};
  for (const Range& r : ranges) {
    if (fp4 && dim == 1 && !r.zero && (r.begin % 2 || r.end % 2))
      return what + ": packed FP4 weight @" + q.weight.getSymName().str() + " cannot be cut at an odd column";
    wstep.ranges.push_back(fp4 && dim == 1 ? Range{r.zero ? 0 : r.begin / 2, r.zero ? r.size() / 2 : r.end / 2, r.zero}
                                           : r);
  }
  transform::Step sstep{dim, {}};
  if (b > 0) {
    // The input position of every result position along dim (-1 = zero fill), then one scale per result block.
    std::vector<int64_t> src;
    for (const Range& r : ranges)
      for (int64_t i = 0; i < r.size(); ++i) src.push_back(r.zero ? -1 : r.begin + i);
    for (size_t j0 = 0; j0 < src.size(); j0 += size_t(b)) {
      std::set<int64_t> blocks;
      for (size_t j = j0; j < std::min(src.size(), j0 + size_t(b)); ++j)
        if (src[j] >= 0) blocks.insert(src[j] / b);
      if (blocks.size() > 1)
        return what + ": block " + std::to_string(j0 / size_t(b)) + " of the result would mix " +
               std::to_string(blocks.size()) + " blocks of " + std::to_string(b) + " of @" +
               q.weight.getSymName().str() + " (" + (dim ? "columns" : "rows") + " " + std::to_string(src[j0]) +
               "...), which one scale cannot express";
      sstep.ranges.push_back(blocks.empty() ? Range{0, 1, true} : Range{*blocks.begin(), *blocks.begin() + 1, false});
    }
  }
  weight_out = make(symbols, q.weight, name, wstep);
  scale_out = b > 0 ? make(symbols, q.scale, scale_name, sstep) : mlir::FlatSymbolRefAttr();
  return "";
}

mlir::FlatSymbolRefAttr slice(mlir::SymbolTable& symbols, WeightOp w, int dim, Range range, const std::string& name) {
  return make(symbols, w, name, transform::Step{dim, {range}});
}

std::vector<int64_t> apportion(int64_t units, const std::vector<double>& shares, bool min1) {
  const size_t n = shares.size();
  double total = 0;
  for (double s : shares) total += s;
  std::vector<double> quota(n);
  std::vector<int64_t> count(n);
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    quota[i] = double(units) * shares[i] / total;
    count[i] = int64_t(std::floor(quota[i] + 1e-9));
    if (min1) count[i] = std::max<int64_t>(count[i], 1);
    sum += count[i];
  }
  while (sum < units) {  // largest remainder first, lower rank on ties
    size_t best = 0;
    for (size_t i = 1; i < n; ++i)
      if (quota[i] - double(count[i]) > quota[best] - double(count[best]) + 1e-12) best = i;
    ++count[best], ++sum;
  }
  while (sum > units) {  // min1 overshoot: take from the most over-served rank that can give
    size_t best = n;
    for (size_t i = 0; i < n; ++i)
      if (count[i] > (min1 ? 1 : 0) && (best == n || double(count[i]) - quota[i] > double(count[best]) - quota[best] + 1e-12))
        best = i;
    --count[best], --sum;
  }
  return count;
}

int64_t split_unit(int64_t n, int64_t qblock, int64_t ranks) {
  if (qblock > 0) return qblock;
  for (int64_t u = 32; u > 1; u /= 2)
    if (n % u == 0 && n / u >= ranks) return u;
  return 1;
}

std::vector<Range> split(int64_t n, int64_t unit, const std::vector<double>& shares, bool min1) {
  int64_t units = (n + unit - 1) / unit;
  std::vector<int64_t> c = apportion(units, shares, min1);
  std::vector<Range> out;
  int64_t at = 0;
  for (int64_t k : c) {
    int64_t end = std::min(n, at + k * unit);
    out.push_back({at, end, false});
    at = end;
  }
  return out;
}

}  // namespace smelt::shard
