// The counted expert pair of the GPU kernel tests (kernels/moe/moe_mma.cu slot counters, ExpertW::slot_done): the
// counting up and the counted down enqueued back to back under programmatic dependent launch, as a decode step's
// graph runs them.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/kernels_cuda/bits.h"
#include "tests/kernels_cuda/harness.h"

namespace smelt::test_cuda {

// Twice: `launch(h, g, o)` enqueues the counting up (routed h, shared g) and the counted down (out o) into fresh
// buffers without waiting; each run's outputs must have the bits of the plain launches' h0 [nh], g0 [ng], o0 [no], and
// the `words` counters at cnt must be back at zero (the down's last block clears them for the next launch).
template <class Launch>
void expect_counted_runs(Launch&& launch, DevPtr h0, size_t nh, DevPtr g0, size_t ng, DevPtr o0, size_t no,
                         DevPtr cnt, size_t words, const std::string& what) {
  const bool pdl = gpu().set_pdl(true);
  for (int rep = 0; rep < 2; ++rep) {
    const DevPtr h = gpu().alloc(nh * 4), g = gpu().alloc(ng * 4), o = gpu().alloc(no * 4);
    gpu().set_sync(false);
    launch(h, g, o);
    gpu().synchronize();
    gpu().set_sync(true);
    const std::string run = what + (pdl ? " (dependent launch)" : "") + ", counted run " + std::to_string(rep);
    expect_bits_equal(gpu().get<float>(h, nh), gpu().get<float>(h0, nh), run + " routed up");
    expect_bits_equal(gpu().get<float>(g, ng), gpu().get<float>(g0, ng), run + " shared up");
    expect_bits_equal(gpu().get<float>(o, no), gpu().get<float>(o0, no), run + " routed down");
    const std::vector<uint32_t> left = gpu().get<uint32_t>(cnt, words);
    for (size_t t = 0; t < left.size(); ++t) EXPECT_EQ(left[t], 0u) << run << ": counter " << t << " left set";
  }
  gpu().set_pdl(false);
}

}  // namespace smelt::test_cuda
