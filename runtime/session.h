// One sequence running a plan on the cpu backend: prefill a prompt (in chunks of at most max_rows rows),
// then decode one token at a time. Plus the samplers smelt-run uses.
// A partitioned plan (format 1.2) runs all its ranks in this process: one CpuBackend per rank on its own
// plan, one thread per rank for every chunk, an in-process communicator for the collectives. Every rank gets
// the chunk's ids; the logits are those of the last stage's TP rank 0; a failing rank aborts the others and
// its message is the error.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>  // not used here any more; kept for includers that relied on it
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling/reference.h"
#include "runtime/cpu/backend.h"
#include "runtime/plan.h"
#include "runtime/weights.h"

namespace smelt::runtime {

// One DSpark drafting step (Session::draft).
struct Draft {
  std::vector<int32_t> ids;       // the drafts for positions t+2 .. t+B+1
  std::vector<float> confidence;  // one per draft
  std::vector<float> logits;      // [B, vocab], the Markov bias included
};

class Session {
 public:
  // `model_dir`: overrides the plan's recorded model directory when not empty.
  Session(Plan plan, const std::string& model_dir = "");
  static std::unique_ptr<Session> open(const std::string& plan_path, const std::string& model_dir = "");

  // Feeds `ids` at positions position() .. position()+n-1 in chunks of `chunk` rows (0 = max_rows) and
  // returns the logits of every one of them, [n, vocab] row-major.
  std::vector<float> prefill(std::span<const int32_t> ids, int chunk = 0);
  // Feeds one token; returns its logits [vocab].
  std::vector<float> decode(int32_t id);

  // DSpark (plans with the dspark_draft program, DeepSeek-V4.1): after the forward has run through position
  // t = position() - 1 and produced `last_token`, drafts B = dspark_block_size tokens for the positions after
  // it from the block [last_token, noise, ...] at positions t+1 .. t+B. Reads the sequence state, writes
  // none: the sequence is unchanged.
  bool can_draft() const { return draft_program_ >= 0; }
  int64_t draft_block() const { return draft_block_; }  // B (0 without the program)
  Draft draft(int32_t last_token);

  int64_t position() const { return position_; }
  // smelt.capture: while on, every chunk's captured rows are collected; take_captures() hands them over
  // (and clears them). A plan without capture ops collects nothing.
  void set_capturing(bool on);
  cpu::CaptureTable take_captures();
  bool has_capture_ops() const;
  void reset();  // a new, empty sequence
  int64_t vocab() const { return plan_.vocab(); }
  const Plan& plan() const { return plan_; }
  // The output rank's (the only rank's for a plain plan).
  const Weights& weights() const { return ranks_[size_t(out_)].weights; }
  const cpu::CpuBackend& backend() const { return *ranks_[size_t(out_)].backend; }
  size_t n_ranks() const { return ranks_.size(); }
  const cpu::CpuBackend& rank_backend(size_t rank) const { return *ranks_[rank].backend; }

 private:
  struct RankRun {
    const Plan* plan = nullptr;
    Weights weights;
    std::unique_ptr<cpu::CpuBackend> backend;
  };
  // Runs `work(rank)` for every rank in `which` (all when empty), one thread each when there are several;
  // the first failure aborts the others and is rethrown here.
  void run_ranks(const std::function<void(RankRun&)>& work, const std::vector<int>& which = {});

  Plan plan_;
  std::vector<RankRun> ranks_;
  std::unique_ptr<cpu::Communicator> comm_;
  int out_ = 0;  // index into ranks_ of the rank whose logits and drafts are returned
  int64_t position_ = 0;
  int draft_program_ = -1;  // index of dspark_draft in plan.programs(), -1 = none
  int64_t draft_block_ = 0, draft_noise_ = 0;
};

// Greedy: the largest logit; ties go to the lower id (kernels/sampling/reference.h: NaN rules).
int32_t sample_greedy(std::span<const float> logits);

using SamplerParams = kernels::SamplerParams;

// Temperature + top-p (nucleus) sampling, reproducible for a given seed on every platform and on the GPU
// (kernels/sampling/reference.h, docs/sampling.md): integer weights floor(2^44 * e^((l - max) / temperature));
// tokens sorted by logit descending (ties: lower id first); keep the shortest prefix whose mass reaches
// ceil(top_p * total); draw number k (k = 0, 1, ... per call) takes the top 53 bits r of splitmix64 output k
// of `seed` and picks the first kept token whose cumulative mass exceeds floor(r * kept mass / 2^53).
// temperature <= 0 means greedy (the draw number still advances).
class Sampler {
 public:
  Sampler(double temperature, double top_p, uint64_t seed) : params_{temperature, top_p, seed} {}
  int32_t sample(std::span<const float> logits) { return kernels::sample_top_p(logits, params_, step_++); }
  // For a sampler elsewhere (the GPU's): the parameters, and the draw number of the next token (advances it).
  const SamplerParams& params() const { return params_; }
  uint64_t next_step() { return step_++; }

 private:
  SamplerParams params_;
  uint64_t step_ = 0;
};

}  // namespace smelt::runtime
