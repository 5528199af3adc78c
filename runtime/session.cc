#include "runtime/session.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <numeric>
#include <thread>

#include <nlohmann/json.hpp>

namespace smelt::runtime {

Session::Session(Plan plan, const std::string& model_dir) : plan_(std::move(plan)) {
  std::vector<const Plan*> plans = plan_.rank_plans();
  comm_ = std::make_unique<cpu::Communicator>(int(plans.size()));
  out_ = plan_.output_rank();
  ranks_.reserve(plans.size());  // no reallocation: the backends point into their rank's weights
  for (const Plan* rp : plans) {
    RankRun& r = ranks_.emplace_back();
    r.plan = rp;
    r.weights = Weights::load(*rp, model_dir);  // a rank's plan inherits the partitioned plan's model_dir
    r.backend = std::make_unique<cpu::CpuBackend>(*rp, r.weights);
    r.backend->attach(comm_.get(), rp->rank_index());
  }
  const Plan& head = *ranks_[size_t(out_)].plan;
  for (size_t k = 0; k < head.programs().size(); ++k)
    if (head.programs()[k].name == "dspark_draft") draft_program_ = int(k);
  if (draft_program_ >= 0) {
    // The block's shape comes from the model config the plan was compiled from.
    const auto* config = head.fb().model_config_json();
    if (!config || config->size() == 0) config = plan_.fb().model_config_json();
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

void Session::run_ranks(const std::function<void(RankRun&)>& work, const std::vector<int>& which) {
  std::vector<int> ids = which;
  if (ids.empty())
    for (int r = 0; r < int(ranks_.size()); ++r) ids.push_back(r);
  if (ids.size() == 1) {
    work(ranks_[size_t(ids[0])]);
    return;
  }
  comm_->reset();
  std::vector<std::thread> threads;
  auto body = [&](int r) {
    try {
      work(ranks_[size_t(r)]);
    } catch (const cpu::Aborted&) {
      // Another rank failed first; its message is the error.
    } catch (const std::exception& e) {
      comm_->abort(e.what());
    } catch (...) {
      comm_->abort(plan_.path() + " rank " + std::to_string(r) + ": unknown error");
    }
  };
  try {
    for (int r : ids) threads.emplace_back(body, r);
  } catch (const std::exception& e) {  // no thread for a rank: stop the ones started
    comm_->abort(plan_.path() + ": cannot start a thread per rank (" + e.what() + ")");
  }
  for (std::thread& t : threads) t.join();
  if (comm_->aborted()) throw Error(comm_->abort_message());
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
    run_ranks([&](RankRun& r) {  // every rank gets the chunk's ids (docs/ops.md "Collectives")
      std::copy(ids.begin() + start, ids.begin() + start + rows, r.backend->token_ids());
      r.backend->run(position_, rows);
    });
    const float* out = ranks_[size_t(out_)].backend->logits();
    std::copy(out, out + rows * v, logits.begin() + start * v);
    position_ += rows;
  }
  return logits;
}

std::vector<float> Session::decode(int32_t id) { return prefill(std::span<const int32_t>(&id, 1), 1); }

Draft Session::draft(int32_t last_token) {
  if (draft_program_ < 0) plan_.fail("has no dspark_draft program (a DeepSeek-V4.1 plan with DSpark stages)");
  if (position_ < 1) plan_.fail("drafting needs the forward to have run at least one position");
  const int rows = int(draft_block_);
  // The drafter runs on the ranks that hold it: the last stage (validated: all of them, nobody else).
  std::vector<int> which;
  for (int r = 0; r < int(ranks_.size()); ++r)
    if (ranks_[size_t(r)].plan->program("dspark_draft")) which.push_back(r);
  auto program_index = [](const Plan& p) {
    for (size_t k = 0; k < p.programs().size(); ++k)
      if (p.programs()[k].name == "dspark_draft") return k;
    return size_t(0);
  };
  run_ranks(
      [&](RankRun& r) {
        size_t k = program_index(*r.plan);
        int32_t* ids = r.backend->buffer_i32(r.plan->programs()[k].inputs[0]);
        ids[0] = last_token;
        for (int i = 1; i < rows; ++i) ids[i] = int32_t(draft_noise_);
        r.backend->run_program(k, position_, rows);
      },
      which);
  const RankRun& head = ranks_[size_t(out_)];
  const Program& prog = head.plan->programs()[size_t(draft_program_)];
  Draft d;
  const int32_t* out_ids = reinterpret_cast<const int32_t*>(head.backend->buffer_bytes(prog.outputs[0]));
  const float* conf = head.backend->buffer_f32(prog.outputs[1]);
  const float* logits = head.backend->buffer_f32(prog.outputs[2]);
  d.ids.assign(out_ids, out_ids + rows);
  d.confidence.assign(conf, conf + rows);
  d.logits.assign(logits, logits + int64_t(rows) * head.plan->row_elems(prog.outputs[2]));
  return d;
}

void Session::set_capturing(bool on) {
  for (RankRun& r : ranks_) r.backend->set_capturing(on);
}

// Every rank's captures, in rank order; a name captured by several ranks (TP replicas) is taken from the
// lowest rank that has it.
cpu::CaptureTable Session::take_captures() {
  cpu::CaptureTable t;
  for (RankRun& r : ranks_) {
    for (cpu::CaptureTable::Entry& e : r.backend->captures().entries) {
      bool have = false;
      for (const auto& x : t.entries) have = have || x.name == e.name;
      if (!have) t.entries.push_back(std::move(e));
    }
    r.backend->captures() = {};
  }
  return t;
}

bool Session::has_capture_ops() const {
  for (const RankRun& r : ranks_)
    for (const OpRef& op : r.plan->ops())
      if (op.spec->kind == OpKind::Capture) return true;
  return false;
}

void Session::reset() {
  for (RankRun& r : ranks_) r.backend->reset_state();
  position_ = 0;
}

int32_t sample_greedy(std::span<const float> logits) { return kernels::sample_greedy(logits); }

}  // namespace smelt::runtime
