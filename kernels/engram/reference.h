// The V4.1 Engram block (official inference code `Engram.forward`): hashed n-gram rows of an FP8 table are
// projected into one key per hyper-connection copy plus a shared value, and each copy of the residual
// stream takes `gate * value`, the gate a signed-sqrt sigmoid of a normalised stream . key product.
#pragma once
#include <cstdint>

namespace smelt::kernels::engram {

struct EngramArgs {
  int rows = 0;      // T positions
  int hc_mult = 0;   // n
  int dim = 0;       // D
  int head_dim = 0;  // hd, table row width (a multiple of 32)
  int cols = 0;      // hash columns per position ((max_ngram-1) * heads)
  float eps = 1e-20f;
  const uint8_t* table = nullptr;        // [table_rows, hd] E4M3
  const uint8_t* table_scale = nullptr;  // [table_rows, hd/32] E8M0
  int64_t table_rows = 0;
  const uint8_t* wkv = nullptr;          // [(n+1)*D, cols*hd] E4M3
  const uint8_t* wkv_scale = nullptr;    // E8M0 32x32 blocks [ceil((n+1)*D/32), cols*hd/32]
  const float* q_weight = nullptr;       // [n, D]
  const float* k_weight = nullptr;       // [n, D]
  const int32_t* hashes = nullptr;       // row r's `cols` table rows at hashes[r * hash_stride ...]
  int hash_stride = 0;                   // 0 means cols
  bool model_numerics = true;            // false: no bf16 roundings, no activation quantization (fp32)
  // A TP rank's row range of the table (smelt.engram_lookup): `table` holds rows [row_begin, row_begin +
  // table_rows) of a table of rows_total rows (0 = table_rows: the whole table).
  int64_t row_begin = 0;
  int64_t rows_total = 0;
};

// X, out [T, n*D] (bf16 values; out may alias X). Per position:
//   e = bf16(table[h] * scale) for the cols hashed rows, flattened [cols*hd];
//   kv = bf16(FP8 linear of e with activation quantization) [(n+1)*D]; key = kv[0 : n*D] as [n, D], value = kv[n*D :];
//   per copy c, in fp32: w = q_weight[c] * k_weight[c];
//   dot = sum_D((h*w)*key) * rsqrt(mean h^2 + eps) * rsqrt(mean key^2 + eps) * D^-0.5 (h = X[c]);
//   gate = sigmoid(copysign(sqrt(max(|dot|, 1e-6)), dot)); out[c] = bf16(h + gate * value).
// A hash id outside [0, table_rows) throws smelt::Error.
void engram_forward(const EngramArgs& a, const float* X, float* out);

// The two halves of engram_forward, for the TP split (docs/partition.md): the lookup writes e [T, cols*hd]
// (-0.0, the exact additive identity, for a hashed row outside [row_begin, row_begin + table_rows); a hash id outside [0, rows_total)
// throws), the gate takes the joined e and does the rest (wkv .. out). engram_forward = lookup then gate.
void engram_lookup(const EngramArgs& a, float* e);
// a.wkv null: e is already the projected keys and value [rows, (n + 1) * D] (smelt-split-engram).
void engram_gate(const EngramArgs& a, const float* e, const float* X, float* out);

}  // namespace smelt::kernels::engram
