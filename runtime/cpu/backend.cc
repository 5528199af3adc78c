#include "runtime/cpu/backend.h"

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>

#include "kernels/bf16.h"

namespace smelt::runtime::cpu {

void CpuBackend::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

void CaptureTable::append(const std::string& name, const std::vector<int64_t>& row_shape, const float* x, int rows,
                          int64_t row_elems) {
  Entry* e = nullptr;
  for (Entry& have : entries)
    if (have.name == name) e = &have;
  if (!e) {
    entries.push_back({name, row_shape.empty() ? std::vector<int64_t>{row_elems} : row_shape, 0, {}});
    e = &entries.back();
  }
  e->data.insert(e->data.end(), x, x + int64_t(rows) * row_elems);
  e->rows += rows;
}

kernels::QuantWeight quant_weight(const Plan& plan, int w_id, const uint8_t* w, int s_id, const uint8_t* s) {
  kernels::QuantWeight q;
  q.weight = w;
  q.scale = s;
  if (plan.fb().weights()->Get(w_id)->dtype() == smelt::plan::DType::I8) {
    q.format = kernels::WeightFormat::FP4_E2M1;
    q.block = 32;
  } else {
    q.format = kernels::WeightFormat::FP8_E4M3;
    q.block = fp8_weight_block(plan.weight_shape(w_id), plan.weight_shape(s_id));  // validated at load
  }
  return q;
}

CpuBackend::CpuBackend(const Plan& plan, const Weights& weights) : plan_(plan) {
  const smelt::plan::Plan& p = plan.fb();

  // Arena: 64-byte aligned. Not cleared: the plan is validated so that every buffer is written before
  // it is read within a chunk.
  arena_size_ = (p.arena_bytes() + 63) / 64 * 64;
  void* mem = std::aligned_alloc(64, arena_size_ ? arena_size_ : 64);
  if (!mem) plan.fail("cannot allocate the arena of " + std::to_string(p.arena_bytes()) + " bytes");
  arena_.reset(static_cast<uint8_t*>(mem));

  int n_states = p.states() ? int(p.states()->size()) : 0;
  try {
    states_.resize(n_states);
    for (int s = 0; s < n_states; ++s) {
      std::vector<int64_t> shape = plan.state_shape(s);
      states_[s].assign(size_t(shape[0] * shape[1]), 0.f);
    }
    positions_.resize(size_t(plan.max_rows()));
  } catch (const std::exception&) {  // bad_alloc, length_error
    plan.fail("cannot allocate " + std::to_string(state_bytes()) + "+ bytes of sequence state");
  }

  ops_.resize(plan.ops().size());
  for (size_t k = 0; k < ops_.size(); ++k) prepare(plan.ops()[k], weights, ops_[k]);
  for (const Program& prog : plan.programs()) {
    program_ops_.emplace_back(prog.ops.size());
    for (size_t k = 0; k < prog.ops.size(); ++k) prepare(prog.ops[k], weights, program_ops_.back()[k]);
  }
}

// Resolves one op's arena, weight and state pointers, then lets prepare_op set its handler and arguments.
void CpuBackend::prepare(const OpRef& op, const Weights& weights, PreparedOp& po) {
  const Plan& plan = plan_;
  po.plan = &plan;
  po.ref = &op;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    if (op.inputs[j] < 0) continue;
    uint8_t* b = buffer(op.inputs[j]);
    if (op.spec->inputs[j].type == 'i') po.in_i[j] = reinterpret_cast<int32_t*>(b);
    else po.in[j] = reinterpret_cast<float*>(b);
    po.in_w[j] = plan.row_elems(op.inputs[j]);
  }
  for (size_t j = 0; j < op.outputs.size(); ++j) {
    if (op.outputs[j] < 0) continue;  // absent optional output
    uint8_t* b = buffer(op.outputs[j]);
    if (op.spec->outputs[j].type == 'i') po.out_i[j] = reinterpret_cast<int32_t*>(b);
    else po.out[j] = reinterpret_cast<float*>(b);
    po.out_w[j] = plan.row_elems(op.outputs[j]);
  }
  // moe_experts lists 3 weights per expert (6 with scales); its handler reads them from w1/w2/w3 or
  // q1/q2/q3 (set below).
  size_t n_w = op.spec->weights_repeat ? 0 : op.weights.size();
  if (n_w > std::size(po.w)) plan.fail(op, "has more weights than the cpu backend holds per op");
  for (size_t j = 0; j < n_w; ++j) {
    int id = op.weights[j];
    if (id < 0) continue;
    po.w[j] = weights.f32(id);
    po.w_i[j] = weights.i32(id);
    po.w_raw[j] = weights.raw(id);
    po.w_rows[j] = plan.weight_shape(id).empty() ? 1 : plan.weight_shape(id)[0];
  }
  if (op.spec->weights_repeat && op.scaled) {
    auto q = [&](size_t j) {
      return quant_weight(plan, op.weights[j], weights.raw(op.weights[j]), op.weights[j + 1],
                          weights.raw(op.weights[j + 1]));
    };
    for (size_t j = 0; j + 5 < op.weights.size(); j += 6) {
      po.q1.push_back(q(j));
      po.q2.push_back(q(j + 2));
      po.q3.push_back(q(j + 4));
    }
  } else if (op.spec->weights_repeat) {
    for (size_t j = 0; j + 2 < op.weights.size(); j += 3) {
      po.w1.push_back(weights.f32(op.weights[j]));
      po.w2.push_back(weights.f32(op.weights[j + 1]));
      po.w3.push_back(weights.f32(op.weights[j + 2]));
    }
  }
  if (op.states.size() > std::size(po.state)) plan.fail(op, "has more states than the cpu backend holds per op");
  for (size_t j = 0; j < op.states.size(); ++j) {
    if (op.states[j] < 0) continue;
    po.state[j] = states_[op.states[j]].data();
    po.state_rows[j] = plan.state_shape(op.states[j])[0];
  }
  po.round_bf16 = op.s("round") == "bf16";
  po.model_numerics = op.s("numerics") != "fp32";
  prepare_op(plan, op, po);
}

uint8_t* CpuBackend::buffer(int id) const { return arena_.get() + plan_.fb().buffers()->Get(id)->offset(); }

int32_t* CpuBackend::token_ids() { return reinterpret_cast<int32_t*>(buffer(plan_.token_ids())); }

const float* CpuBackend::logits() const { return reinterpret_cast<const float*>(buffer(plan_.logits())); }

void CpuBackend::run(int64_t p0, int rows) { run_ops(ops_, p0, rows); }

void CpuBackend::run_program(size_t index, int64_t p0, int rows) {
  if (index >= program_ops_.size())
    plan_.fail("has no program " + std::to_string(index) + " (" + std::to_string(program_ops_.size()) + " programs)");
  run_ops(program_ops_[index], p0, rows);
}

void CpuBackend::run_ops(const std::vector<PreparedOp>& ops, int64_t p0, int rows) {
  if (rows < 1 || rows > plan_.max_rows())
    plan_.fail("chunk of " + std::to_string(rows) + " rows; the plan allows 1 to " + std::to_string(plan_.max_rows()));
  if (p0 < 0 || p0 + rows > plan_.max_seq_len())
    plan_.fail("the sequence would reach " + std::to_string(p0 + rows) + " tokens but the plan was compiled for " +
               "max_seq_len " + std::to_string(plan_.max_seq_len()));
  for (int r = 0; r < rows; ++r) positions_[r] = p0 + r;
  ExecContext ctx{p0, rows, positions_.data(), capturing_ ? &captures_ : nullptr, comm_, rank_};
  for (const PreparedOp& op : ops) {
    op.run(op, ctx);
    if (op.round_bf16)
      for (size_t j = 0; j < std::size(op.out); ++j)
        if (op.out[j]) kernels::round_bf16_inplace(op.out[j], size_t(rows) * size_t(op.out_w[j]));
  }
}

void CpuBackend::run_op(size_t k, int64_t p0, int rows) {
  if (k >= ops_.size()) plan_.fail("has no op " + std::to_string(k));
  if (rows < 1 || rows > plan_.max_rows() || p0 < 0 || p0 + rows > plan_.max_seq_len())
    plan_.fail("run_op: chunk of " + std::to_string(rows) + " rows at " + std::to_string(p0) + " is out of range");
  for (int r = 0; r < rows; ++r) positions_[r] = p0 + r;
  ExecContext ctx{p0, rows, positions_.data(), capturing_ ? &captures_ : nullptr, comm_, rank_};
  const PreparedOp& op = ops_[k];
  op.run(op, ctx);
  if (op.round_bf16)
    for (size_t j = 0; j < std::size(op.out); ++j)
      if (op.out[j]) kernels::round_bf16_inplace(op.out[j], size_t(rows) * size_t(op.out_w[j]));
}

void CpuBackend::reset_state() {
  for (auto& s : states_) std::fill(s.begin(), s.end(), 0.f);
}

uint64_t CpuBackend::state_bytes() const {
  uint64_t n = 0;
  for (const auto& s : states_) n += 4 * s.size();
  return n;
}

}  // namespace smelt::runtime::cpu
