#include "kernels/compressor/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/linear/reference.h"
#include "kernels/rms_norm/reference.h"
#include "kernels/rope/reference.h"

namespace smelt::kernels {

// With overlap, each position's projection holds two series: [0:hd] feeds the NEXT window's entry and
// [hd:2hd] its own window's entry. Entry j softmaxes, per channel, over up to 2*ratio slots: window j-1's
// first halves (absent for j = 0, i.e. softmax weight 0), then window j's second halves. Without overlap
// the slots are window j's rows. ape[s] is added to the gate of the slot at offset s inside its window.
void compressor(const CompressorArgs& a, const float* x, int rows, int64_t p0, float* ring, float* pool,
                int64_t pool_capacity) {
  const int r = a.ratio, hd = a.head_dim, cw = (a.overlap ? 2 : 1) * hd;
  const int ring_rows = a.ring_rows > 0 ? a.ring_rows : 2 * r;
  const int64_t ring_w = 2 * int64_t(cw);
  std::vector<float> kv(size_t(rows) * cw), gate(size_t(rows) * cw);
  linear(x, a.wkv, kv.data(), rows, a.in_dim, cw);
  linear(x, a.wgate, gate.data(), rows, a.in_dim, cw);

  // Projected kv / gate rows of any position the chunk's entries can need: the chunk itself or the ring.
  auto kv_row = [&](int64_t pos) {
    return pos >= p0 ? kv.data() + (pos - p0) * cw : ring + (pos % ring_rows) * ring_w;
  };
  auto gate_row = [&](int64_t pos) {
    return pos >= p0 ? gate.data() + (pos - p0) * cw : ring + (pos % ring_rows) * ring_w + cw;
  };

  struct Slot {
    const float* kv;
    const float* gate;
    const float* ape;
  };
  std::vector<Slot> slots;
  std::vector<float> e(2 * r), entry(hd);
  // Entries whose last position j*r + r - 1 lies in [p0, p0 + rows).
  for (int64_t j = p0 / r; j < (p0 + rows) / r; ++j) {
    slots.clear();
    if (a.overlap && j > 0)
      for (int s = 0; s < r; ++s) {
        const int64_t pos = (j - 1) * r + s;
        slots.push_back({kv_row(pos), gate_row(pos), a.ape + int64_t(s) * cw});
      }
    const int off = a.overlap ? hd : 0;
    for (int s = 0; s < r; ++s) {
      const int64_t pos = j * r + s;
      slots.push_back({kv_row(pos) + off, gate_row(pos) + off, a.ape + int64_t(s) * cw + off});
    }
    const size_t ns = slots.size();
    for (int c = 0; c < hd; ++c) {
      float mx = -std::numeric_limits<float>::infinity();
      for (size_t s = 0; s < ns; ++s) {
        e[s] = slots[s].gate[c] + slots[s].ape[c];
        mx = std::fmax(mx, e[s]);
      }
      float sum = 0.0f;
      for (size_t s = 0; s < ns; ++s) sum += (e[s] = std::exp(e[s] - mx));
      float acc = 0.0f;
      for (size_t s = 0; s < ns; ++s) acc += slots[s].kv[c] * (e[s] / sum);
      entry[c] = acc;
    }
    rms_norm(entry.data(), a.norm, entry.data(), 1, hd, 1, a.eps);
    const int64_t pos = j * r;  // RoPE at the window's first position
    rope(entry.data(), 1, 1, hd, a.rope_dim, a.inv_freq, &pos, false);
    if (j < pool_capacity) std::memcpy(pool + j * hd, entry.data(), sizeof(float) * size_t(hd));
  }

  // Only now overwrite the ring: the entries above may have read slots the chunk's own rows replace.
  for (int t = std::max(0, rows - ring_rows); t < rows; ++t) {
    float* slot = ring + ((p0 + t) % ring_rows) * ring_w;
    std::memcpy(slot, kv.data() + int64_t(t) * cw, sizeof(float) * size_t(cw));
    std::memcpy(slot + cw, gate.data() + int64_t(t) * cw, sizeof(float) * size_t(cw));
  }
}

}  // namespace smelt::kernels
