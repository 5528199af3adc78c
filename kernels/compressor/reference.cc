#include "kernels/compressor/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "frontends/error.h"
#include "kernels/bf16.h"
#include "kernels/common.h"
#include "kernels/linear/reference.h"
#include "kernels/quant/reference.h"
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

namespace {

// y[n] = x . w[n] in float32 (the reference's F.linear), optionally rounded to bf16.
void project(const float* x, const float* w, int in, int out, float* y, bool bf16) {
  for (int n = 0; n < out; ++n) {
    const float v = detail::dot_exact(x, w + int64_t(n) * in, in);
    y[n] = bf16 ? round_bf16(v) : v;
  }
}

// The reference's RMSNorm on a bf16 tensor: float32 math, result stored in bf16 (`bf16` false: kept fp32).
void rms_norm_bf16(float* v, const float* weight, int n, float eps, bool bf16 = true) {
  rms_norm(v, weight, v, 1, n, 1, eps);
  if (bf16) round_bf16_inplace(v, size_t(n));
}

}  // namespace

void kv_compressor_v41(const KvCompressorV41Args& a, const float* x, int rows, int64_t p0, float* ring, float* pool,
                       float* index_pool, int64_t capacity) {
  const int r = a.ratio, hd = a.head_dim, D = a.in_dim;
  if (r != 1 && r != 2) throw smelt::Error("kv_compressor_v41: ratio " + std::to_string(r) + " (1 or 2 expected)");
  if (r == 2 && (!a.wgate || !ring)) throw smelt::Error("kv_compressor_v41: ratio 2 needs wgate and a ring");
  const int ring_rows = a.ring_rows > 0 ? a.ring_rows : r;
  const int64_t ring_w = 2 * int64_t(hd);
  const bool mn = a.model_numerics;

  // ratio 2: per position kv then gate, float32, not rounded (the reference's kv_state / score_state).
  std::vector<float> proj;
  if (r == 2) {
    proj.resize(size_t(rows) * ring_w);
    for (int t = 0; t < rows; ++t) {
      project(x + int64_t(t) * D, a.wkv, D, hd, proj.data() + t * ring_w, false);
      project(x + int64_t(t) * D, a.wgate, D, hd, proj.data() + t * ring_w + hd, false);
    }
  }
  auto proj_row = [&](int64_t pos) {
    return pos >= p0 ? proj.data() + (pos - p0) * ring_w : ring + (pos % ring_rows) * ring_w;
  };

  std::vector<float> latent(hd), rotated(hd), key(a.index_head_dim > 0 ? a.index_head_dim : 0);
  for (int64_t j = p0 / r; j < (p0 + rows) / r; ++j) {  // entries whose last position is in the chunk
    if (j >= capacity)
      throw smelt::Error("kv_compressor_v41: entry " + std::to_string(j) + " beyond the pool's " +
                         std::to_string(capacity) + " rows");
    if (r == 2) {
      // softmax over the group's 2 tokens per channel (max, exp, sum, divide), then the weighted sum.
      const float* s0 = proj_row(2 * j);
      const float* s1 = proj_row(2 * j + 1);
      for (int c = 0; c < hd; ++c) {
        const float g0 = s0[hd + c], g1 = s1[hd + c], mx = std::fmax(g0, g1);
        const float e0 = std::exp(g0 - mx), e1 = std::exp(g1 - mx), sum = e0 + e1;
        latent[c] = round_bf16_if(mn, s0[c] * (e0 / sum) + s1[c] * (e1 / sum));
      }
    } else {
      project(x + (j - p0) * D, a.wkv, D, hd, latent.data(), mn);
    }
    rms_norm_bf16(latent.data(), a.norm, hd, a.eps, mn);
    const int64_t pos = j * r;  // a latent stands for the first token of its group

    if (a.wk && index_pool) {
      const int di = a.index_head_dim;
      project(latent.data(), a.wk, hd, di, key.data(), mn);
      rms_norm_bf16(key.data(), a.k_norm, di, a.eps, mn);
      rope(key.data(), 1, 1, di, a.rope_dim, a.inv_freq, &pos, false);
      if (mn) {
        round_bf16_inplace(key.data(), size_t(di));
        quant::qdq_index(key.data(), di);
      }
      std::memcpy(index_pool + j * di, key.data(), sizeof(float) * size_t(di));
    }

    std::copy(latent.begin(), latent.end(), rotated.begin());
    rope(rotated.data(), 1, 1, hd, a.rope_dim, a.inv_freq, &pos, false);
    if (mn) {
      round_bf16_inplace(rotated.data(), size_t(hd));
      quant::qdq_compressed_kv(rotated.data(), hd);
    }
    std::memcpy(pool + j * hd, rotated.data(), sizeof(float) * size_t(hd));
  }

  // Only now overwrite the ring: the entries above may have read slots the chunk's own rows replace.
  if (r == 2)
    for (int t = std::max(0, rows - ring_rows); t < rows; ++t)
      std::memcpy(ring + ((p0 + t) % ring_rows) * ring_w, proj.data() + t * ring_w, sizeof(float) * size_t(ring_w));
}

}  // namespace smelt::kernels
