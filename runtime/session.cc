#include "runtime/session.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <numeric>

#include <nlohmann/json.hpp>

namespace smelt::runtime {

Session::Session(Plan plan, const std::string& model_dir)
    : plan_(std::move(plan)), weights_(Weights::load(plan_, model_dir)) {
  backend_ = std::make_unique<cpu::CpuBackend>(plan_, weights_);
  for (size_t k = 0; k < plan_.programs().size(); ++k)
    if (plan_.programs()[k].name == "dspark_draft") draft_program_ = int(k);
  if (draft_program_ >= 0) {
    // The block's shape comes from the model config the plan was compiled from.
    const auto* config = plan_.fb().model_config_json();
    nlohmann::json cfg = nlohmann::json::parse(config ? config->str() : "", nullptr, /*allow_exceptions=*/false);
    auto get = [&](const char* key) -> int64_t {
      if (!cfg.is_object() || !cfg.contains(key) || !cfg[key].is_number_integer())
        plan_.fail("has the dspark_draft program but its model config has no integer '" + std::string(key) + "'");
      return cfg[key].get<int64_t>();
    };
    draft_block_ = get("dspark_block_size");
    draft_noise_ = get("dspark_noise_token_id");
    if (draft_block_ < 1 || draft_block_ > plan_.max_rows())
      plan_.fail("dspark_block_size " + std::to_string(draft_block_) + " is outside [1, max_rows " +
                 std::to_string(plan_.max_rows()) + "]");
    if (draft_noise_ < 0 || draft_noise_ > INT32_MAX)
      plan_.fail("dspark_noise_token_id " + std::to_string(draft_noise_) + " is not a token id");
  }
}

std::unique_ptr<Session> Session::open(const std::string& plan_path, const std::string& model_dir) {
  return std::make_unique<Session>(Plan::load(plan_path), model_dir);
}

std::vector<float> Session::prefill(std::span<const int32_t> ids, int chunk) {
  int64_t max_rows = plan_.max_rows();
  if (chunk < 0) plan_.fail("chunk size " + std::to_string(chunk) + " is negative");
  int64_t step = chunk == 0 ? max_rows : std::min<int64_t>(chunk, max_rows);
  int64_t n = int64_t(ids.size()), v = vocab();
  if (position_ + n > plan_.max_seq_len())
    plan_.fail("the sequence would reach " + std::to_string(position_ + n) + " tokens but the plan was compiled " +
               "for max_seq_len " + std::to_string(plan_.max_seq_len()));
  std::vector<float> logits(size_t(n * v));
  for (int64_t start = 0; start < n; start += step) {
    int rows = int(std::min(step, n - start));
    std::copy(ids.begin() + start, ids.begin() + start + rows, backend_->token_ids());
    backend_->run(position_, rows);
    std::copy(backend_->logits(), backend_->logits() + rows * v, logits.begin() + start * v);
    position_ += rows;
  }
  return logits;
}

std::vector<float> Session::decode(int32_t id) { return prefill(std::span<const int32_t>(&id, 1), 1); }

Draft Session::draft(int32_t last_token) {
  if (draft_program_ < 0) plan_.fail("has no dspark_draft program (a DeepSeek-V4.1 plan with DSpark stages)");
  if (position_ < 1) plan_.fail("drafting needs the forward to have run at least one position");
  const Program& prog = plan_.programs()[size_t(draft_program_)];
  const int rows = int(draft_block_);
  int32_t* ids = backend_->buffer_i32(prog.inputs[0]);
  ids[0] = last_token;
  for (int r = 1; r < rows; ++r) ids[r] = int32_t(draft_noise_);
  backend_->run_program(size_t(draft_program_), position_, rows);
  Draft d;
  const int32_t* out_ids = reinterpret_cast<const int32_t*>(backend_->buffer_bytes(prog.outputs[0]));
  const float* conf = backend_->buffer_f32(prog.outputs[1]);
  const float* logits = backend_->buffer_f32(prog.outputs[2]);
  d.ids.assign(out_ids, out_ids + rows);
  d.confidence.assign(conf, conf + rows);
  d.logits.assign(logits, logits + int64_t(rows) * plan_.row_elems(prog.outputs[2]));
  return d;
}

cpu::CaptureTable Session::take_captures() {
  cpu::CaptureTable t = std::move(backend_->captures());
  backend_->captures() = {};
  return t;
}

bool Session::has_capture_ops() const {
  for (const OpRef& op : plan_.ops())
    if (op.spec->kind == OpKind::Capture) return true;
  return false;
}

void Session::reset() {
  backend_->reset_state();
  position_ = 0;
}

int32_t sample_greedy(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = int32_t(i);
  return best;
}

Sampler::Sampler(double temperature, double top_p, uint64_t seed)
    : temperature_(temperature), top_p_(top_p), rng_(seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (temperature_ <= 0.0 || logits.size() < 2) return sample_greedy(logits);
  // Softmax in double, shifted by the max so that exp never overflows.
  double mx = logits[sample_greedy(logits)];
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((double(logits[i]) - mx) / temperature_);
  std::vector<int32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  // The nucleus: the shortest prefix whose probability mass reaches top_p.
  size_t keep = 0;
  double mass = 0.0;
  while (keep < order.size() && (keep == 0 || mass < top_p_ * sum)) mass += p[order[keep++]];
  double u = double(rng_() >> 11) * 0x1.0p-53 * mass;
  double acc = 0.0;
  for (size_t k = 0; k < keep; ++k) {
    acc += p[order[k]];
    if (u < acc) return order[k];
  }
  return order[keep - 1];
}

}  // namespace smelt::runtime
