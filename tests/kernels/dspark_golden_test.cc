// The DSpark drafter rebuilt from kernels alone against the official inference code's numbers (tiny_full
// golden, SMELT_SHARED_DIR/goldens/v41/tiny_full, README section "DSpark"): every recorded drafting step.
//
// Inputs, all from the golden: `prefill.main_hidden` [69, 3D] seeds the three stage window rings (prefill:
// positions 0..68); the main_hidden of decode step 0 (position 69) is not stored, but it is the mean over hc
// copies of the inputs of the target layers 5, 6, 7, i.e. of `decode0.block{4,5,6}.stream` (no Engram at
// those layers; the prefill test in v41_golden_test.cc shows this capture is exact). The draft block is
// [454, 511 x 4] at positions 70..74; the outputs are compared with `dspark_draft_logits[0]`,
// `dspark_confidence[0]` (= tokens.json `dspark[0].confidence`) and `dspark[0].draft_ids`. The test then goes
// on through all 24 recorded steps (main_hidden of step s from `decode{s}.block{4,5,6}.stream`; the golden's
// stale-key quirk only affects those stored streams, which we take as given).
// The drafter in kernel calls is tests/kernels/dspark_drafter.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/kernels/dspark_drafter.h"

namespace smelt::kernels {
namespace {

using dspark_testing::Drafter;
using dspark_testing::Tensors;
using Vec = std::vector<float>;
const std::string kDir = std::string(SMELT_SHARED_DIR) + "/goldens/v41/tiny_full";

// Bounds. The drafter runs 3 blocks on FP8-quantized activations, so a one-ulp difference in an fp32 sum (the
// reference's BLAS order vs ours) occasionally flips an FP8 code or a bf16 rounding and moves the whole block
// by up to a few tenths of a logit; the README bounds logits by max(0.5, 2 x the reference's own row
// difference) for the same reason. The confidence is a linear read-out of the same collapsed stream (like
// the logits before the head), so it gets the same bound. What pins the arithmetic instead: most steps must
// agree to kExact (a missed rounding point or a wrong index set moves every step, by far more).
// On tiny_full this implementation reaches: all 24 steps' ids equal; 12 of 24 steps within 1e-3 (all of them
// within 1e-6, the fp32 head's own noise); worst logits 0.31 (step 11; step 0: 0.30), worst confidence 0.25
// (step 3; step 0: 0.14).
constexpr double kLogitTol = 0.5;
constexpr double kConfTol = 0.5;
constexpr double kExact = 1e-3;
constexpr int kMinExactSteps = 10;

// The stored main_hidden of decode step s (position 69 + s): the mean over hc copies of the inputs of the
// target layers, i.e. of the stored outputs of the blocks before them.
Vec decode_main_hidden(const Tensors& inter, const Drafter& m, int s) {
  std::vector<Vec> inputs;
  for (int L : m.cfg["dspark_target_layer_ids"].get<std::vector<int>>())
    inputs.push_back(inter.floats("decode" + std::to_string(s) + ".block" + std::to_string(L - 1) + ".stream"));
  return m.main_hidden(inputs);
}

TEST(DsparkGolden, DraftingStepsFromKernels) {
  if (!std::filesystem::exists(kDir + "/model.safetensors")) GTEST_SKIP() << "no golden under " << kDir;
  Drafter m(kDir);
  Tensors inter(kDir + "/intermediates.safetensors"), logits(kDir + "/logits.safetensors");
  nlohmann::json tokens;
  std::ifstream(kDir + "/tokens.json") >> tokens;
  const Vec want_logits = logits.floats("dspark_draft_logits");  // [steps, B, V]
  const int steps = int(tokens["dspark"].size());
  ASSERT_EQ(want_logits.size(), size_t(steps) * m.B * m.V);

  // Prefill: every stage's ring seeded from the stored main_hidden of the prompt positions 0 .. 68.
  const Vec prefill_hidden = inter.floats("prefill.main_hidden");
  m.seed(prefill_hidden, 0);

  int exact_steps = 0;
  for (int s = 0; s < steps; ++s) {
    const auto& rec = tokens["dspark"][s];
    const int64_t t = rec["position"];
    ASSERT_EQ(t, 69 + s);
    m.seed(decode_main_hidden(inter, m, s), t);  // the main model's KV of position t
    const Drafter::Draft d = m.draft(rec["input_id"].get<int32_t>(), t);

    const auto want_ids = rec["draft_ids"].get<std::vector<int32_t>>();
    const auto want_conf = rec["confidence"].get<std::vector<double>>();
    const auto margins = rec["draft_margins_top1_top2"].get<std::vector<double>>();
    double dl = 0, dc = 0;
    for (size_t i = 0; i < d.logits.size(); ++i)
      dl = std::max(dl, std::fabs(double(d.logits[i]) - want_logits[size_t(s) * m.B * m.V + i]));
    for (int i = 0; i < m.B; ++i) dc = std::max(dc, std::fabs(double(d.conf[i]) - want_conf[i]));
    exact_steps += dl <= kExact;
    std::printf("step %2d (position %ld): ids", s, long(t));
    for (int32_t id : d.ids) std::printf(" %d", id);
    std::printf("; confidence");
    for (float c : d.conf) std::printf(" %.3f", c);
    std::printf("; logits max |diff| %.3g, confidence max |diff| %.3g\n", dl, dc);

    EXPECT_LE(dl, kLogitTol) << "step " << s;
    EXPECT_LE(dc, kConfTol) << "step " << s;
    if (s == 0) {
      EXPECT_EQ(d.ids, want_ids) << "the first drafting step (margins all above 1)";
      continue;
    }
    // Later steps: a draft must agree where the golden's top-1/top-2 margin exceeds what the logits may move
    // (2 x kLogitTol) and every earlier draft agreed (the Markov bias depends on the previous draft).
    for (int i = 0; i < m.B && (i == 0 || d.ids[i - 1] == want_ids[i - 1]); ++i) {
      if (margins[i] > 2 * kLogitTol) {
        EXPECT_EQ(d.ids[i], want_ids[i]) << "step " << s << " draft " << i;
      }
    }
  }
  std::printf("%d of %d steps within %g of the reference's logits\n", exact_steps, steps, kExact);
  EXPECT_GE(exact_steps, kMinExactSteps);
}

}  // namespace
}  // namespace smelt::kernels
