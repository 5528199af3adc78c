// A small NVRTC + CUDA driver API harness for the kernel tests: libcuda is loaded with dlopen (tests only),
// the kernel families are compiled with smelt_nvrtc for the device's own arch, buffers are plain device
// allocations. Throws smelt::Error on any failure.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace smelt::test_cuda {

using DevPtr = unsigned long long;

class Gpu {
 public:
  // Opens device 0; `available()` is false (and nothing else may be called) when there is no GPU.
  Gpu();
  ~Gpu();
  bool available() const { return ok_; }
  std::string arch() const { return arch_; }

  DevPtr alloc(size_t bytes);  // zero-filled
  void upload(DevPtr dst, const void* src, size_t bytes);
  void download(void* dst, DevPtr src, size_t bytes);
  template <class T>
  DevPtr put(const std::vector<T>& v) {
    DevPtr p = alloc(v.size() * sizeof(T) + 16);
    upload(p, v.data(), v.size() * sizeof(T));
    return p;
  }
  // Act-quant FP8 / FP4 weight bytes (matrices of N rows of RB bytes, stacked) as the runtime keeps them on this
  // GPU (runtime/cuda/device_weights.cc): in tile order when aq_weights_tiled(), else as given.
  DevPtr put_aq(const std::vector<uint8_t>& w, int64_t N, int64_t RB, bool fp4);
  // Whether the act-quant kernels compiled here read tile order: sm_89+ unless SMELT_TEST_NVRTC_OPTIONS sets
  // -DSMELT_W_TILED=0 (kernels/linear/gemv.cuh).
  bool aq_weights_tiled() const;
  template <class T>
  std::vector<T> get(DevPtr p, size_t n) {
    std::vector<T> v(n);
    download(v.data(), p, n * sizeof(T));
    return v;
  }

  // Launches kernel `name` of family `family` (compiled once per family) and waits for it.
  template <class... Ts>
  void launch(const std::string& family, const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned block,
              unsigned shmem, const Ts&... args) {
    void* a[] = {const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
    launch_raw(family, name, gx, gy, gz, block, shmem, a);
  }
  void launch_raw(const std::string& family, const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                  unsigned shmem, void** args);

  // For benchmarks (tests/kernels_cuda/bench_mma_gemv.cc): `family` served from a prebuilt image instead of NVRTC,
  // launches that do not wait (set_sync(false)), device-side timing, device copies and occupancy.
  void load_image(const std::string& family, const std::vector<uint8_t>& image);
  void set_sync(bool sync) { sync_ = sync; }
  // Programmatic dependent launch (sm_90+), as the runtime launches a decode step: a kernel may start while the
  // previous one runs (kernels/cuda/common.cuh SMELT_KERNEL_PROLOGUE*). Returns whether the driver supports it.
  bool set_pdl(bool pdl);
  void synchronize();
  void copy(DevPtr dst, DevPtr src, size_t bytes);
  // GPU milliseconds of whatever `body` enqueues (events on the default stream around it).
  template <class F>
  float time_ms(F&& body) {
    record_start();
    body();
    return record_stop_ms();
  }
  // Blocks of `name` (block threads, shmem bytes) that fit on one multiprocessor; the multiprocessor count.
  int occupancy(const std::string& family, const char* name, unsigned block, unsigned shmem);
  int multiprocessors();

 private:
  bool ok_ = false;
  std::string arch_;
  void* lib_ = nullptr;
  void* ctx_ = nullptr;
  int dev_ = 0;
  std::map<std::string, void*> modules_;
  std::vector<DevPtr> allocs_;
  bool sync_ = true;
  bool pdl_ = false;
  void* ev_[2] = {nullptr, nullptr};
  void* function(const std::string& family, const char* name, unsigned shmem);
  void record_start();
  float record_stop_ms();
};

// StepInfo in device memory (runtime/cuda/launch.h).
DevPtr step_info(Gpu& g, int64_t p0, int rows);

// The one device of the test binary: every test file shares it (one context, one module load per family).
Gpu& gpu();

// Normal(0, scale) floats from a fixed seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 r(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(r);
  return v;
}

// Random E4M3 codes without the two NaN codes (every byte is also a valid pair of packed FP4 codes).
inline std::vector<uint8_t> fp8_codes(size_t n, uint32_t seed) {
  std::mt19937 r(seed);
  std::vector<uint8_t> c(n);
  for (auto& b : c) {
    do b = uint8_t(r()); while ((b & 0x7f) == 0x7f);
  }
  return c;
}

// Shared memory of the exact decode GEMVs (kernels/linear/gemv_aq.cuh gemv_smem_bytes; the tests keep their own
// copy of the launch arithmetic instead of the runtime's).
inline unsigned gemv_aq_smem(int K, int rows_staged, int cpb, int terms, bool fp4) {
  const int x_bytes = fp4 ? 4 : 8;  // XStage: FP8 weights stage the activation units as doubles
  return unsigned(rows_staged * (K * x_bytes + (K / 32) * 4) + 2 * cpb * terms * (K / 32 + 1) * 4);
}

// Row-major quantized weight bytes -> tile order (the layout of kernels/cuda/common.cuh tile_order_off, written out
// here on its own): matrices of N rows of RB bytes, tiles of 16 rows (the last one N % 16), a tile's 32-block b
// (BB bytes: 32 FP8, 16 FP4) at b * rows * BB, its row r at r * BB in it.
inline std::vector<uint8_t> tile_order(const std::vector<uint8_t>& w, int64_t N, int64_t RB, int64_t BB) {
  std::vector<uint8_t> t(w.size());
  const int64_t rows = int64_t(w.size()) / RB;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t m = row / N, n = row % N, t0 = n / 16 * 16, nr = std::min<int64_t>(16, N - t0);
    for (int64_t b = 0; b < RB / BB; ++b)
      for (int64_t i = 0; i < BB; ++i)
        t[size_t(m * N * RB + t0 * RB + b * nr * BB + (n - t0) * BB + i)] = w[size_t(row * RB + b * BB + i)];
  }
  return t;
}

// Row-major packed FP4 bytes -> pair order (the weight-only experts' layout, kernels/cuda/common.cuh fp4_pair_order,
// written out here on its own as a table): in each little-endian 32-bit word, code i = j + 4h (j < 4, h < 2) puts its
// magnitude bits b = 0, 1, 2 and its sign at the positions below (f16 pair j of e2m1_pairs_po, half h).
inline std::vector<uint8_t> fp4_pair_order(const std::vector<uint8_t>& w) {
  static const int kMag[8][3] = {{9, 10, 11},  {1, 2, 3},    {22, 21, 20}, {30, 29, 28},
                                 {25, 26, 27}, {17, 18, 19}, {6, 5, 4},    {14, 13, 12}};
  static const int kSign[8] = {15, 7, 16, 24, 31, 23, 0, 8};
  std::vector<uint8_t> t(w.size());
  for (size_t at = 0; at + 4 <= w.size(); at += 4) {
    uint32_t v = 0, q = 0;
    std::memcpy(&v, w.data() + at, 4);
    for (int i = 0; i < 8; ++i) {
      const uint32_t n = (v >> (4 * i)) & 15u;
      for (int b = 0; b < 3; ++b) q |= ((n >> b) & 1u) << kMag[i][b];
      q |= (n >> 3) << kSign[i];
    }
    std::memcpy(t.data() + at, &q, 4);
  }
  return t;
}

// Random E8M0 scales 2^(lo-127) .. 2^(lo-120).
inline std::vector<uint8_t> e8m0_codes(size_t n, uint32_t seed, int lo = 118) {
  std::mt19937 r(seed);
  std::vector<uint8_t> c(n);
  for (auto& b : c) b = uint8_t(lo + r() % 8);
  return c;
}

}  // namespace smelt::test_cuda

#define NEED_GPU() \
  if (!::smelt::test_cuda::gpu().available()) GTEST_SKIP() << "no CUDA device"
