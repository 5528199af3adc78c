#include "kernels/linear/reference.h"

#include "tests/kernels/testing.h"

namespace smelt::kernels {
namespace {

using namespace testing;

DVec linear64(const Vec& x, const Vec& w, int rows, int in, int out) {
  DVec y(size_t(rows) * out);
  const DVec xd = widen(x), wd = widen(w);
  for (int r = 0; r < rows; ++r)
    for (int n = 0; n < out; ++n) y[size_t(r) * out + n] = ddot(&xd[size_t(r) * in], &wd[size_t(n) * in], in);
  return y;
}

// A float32 dot of length K has error ~ K * 6e-8 * sum|x_k w_k| in the worst case, ~sqrt(K) * 6e-8 in
// practice; relative to the output RMS that stays below 1e-5 for K up to a few thousand.
TEST(Linear, MatchesFloat64) {
  Rng rng(3);
  struct Shape {
    int rows, in, out;
  };
  // in = 37: a tail after the 16-wide lanes; in = 64 / out = 300: crosses a column tile; in = 20000: one
  // column per tile.
  for (Shape s : {Shape{5, 37, 13}, Shape{3, 64, 300}, Shape{2, 20000, 3}, Shape{1, 1, 1}}) {
    Vec x = rng.normal(size_t(s.rows) * s.in), w = rng.normal(size_t(s.out) * s.in);
    Vec y(size_t(s.rows) * s.out);
    linear(x.data(), w.data(), y.data(), s.rows, s.in, s.out);
    expect_close(y, linear64(x, w, s.rows, s.in, s.out), 1e-5, "linear");
  }
}

TEST(Linear, RowCountInvariant) {
  // A row computed inside a 9-row chunk is bit-identical to the same row computed alone.
  Rng rng(4);
  const int rows = 9, in = 301, out = 70;
  Vec x = rng.normal(size_t(rows) * in), w = rng.normal(size_t(out) * in);
  Vec all(size_t(rows) * out), alone(size_t(rows) * out);
  linear(x.data(), w.data(), all.data(), rows, in, out);
  for (int r = 0; r < rows; ++r) linear(&x[size_t(r) * in], w.data(), &alone[size_t(r) * out], 1, in, out);
  expect_bit_identical(all, alone, "rows");
}

TEST(GroupedLinear, MatchesFloat64BlockDiagonal) {
  Rng rng(5);
  const int rows = 4, G = 3, in_g = 20, out_g = 7;
  Vec x = rng.normal(size_t(rows) * G * in_g), w = rng.normal(size_t(G) * out_g * in_g);
  Vec y(size_t(rows) * G * out_g);
  grouped_linear(x.data(), w.data(), y.data(), rows, G, in_g, out_g);
  DVec want(y.size());
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < G; ++g)
      for (int o = 0; o < out_g; ++o) {
        double s = 0.0;
        for (int k = 0; k < in_g; ++k)
          s += double(x[size_t(r) * G * in_g + g * in_g + k]) * w[size_t(g * out_g + o) * in_g + k];
        want[size_t(r) * G * out_g + g * out_g + o] = s;
      }
  expect_close(y, want, 1e-5, "grouped_linear");
}

}  // namespace
}  // namespace smelt::kernels
