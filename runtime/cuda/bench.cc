#include "runtime/cuda/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "runtime/cuda/session_cuda.h"

namespace smelt::runtime::cuda {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

// Read + write bytes per second of cuMemcpyDtoD over >= 1 GiB (less when the GPU has not that much free),
// median of several copies: the practical HBM floor the decode step is compared with.
double copy_bandwidth(CudaBackend& b, uint64_t* bytes_out) {
  const Driver& d = driver();
  size_t free_bytes = 0, total = 0;
  check(d.cuMemGetInfo(&free_bytes, &total), "reading the free GPU memory");
  uint64_t bytes = 1ull << 30;
  while (bytes > (64ull << 20) && 2 * bytes + (256ull << 20) > free_bytes) bytes /= 2;
  CUdeviceptr a = 0, c = 0;
  check(d.cuMemAlloc(&a, bytes), "allocating the copy-bandwidth buffers");
  CUresult r = d.cuMemAlloc(&c, bytes);
  if (r != 0) d.cuMemFree(a);
  check(r, "allocating the copy-bandwidth buffers");
  CUevent e0 = nullptr, e1 = nullptr;
  std::vector<double> ms;
  try {
    check(d.cuEventCreate(&e0, 0), "creating events");
    check(d.cuEventCreate(&e1, 0), "creating events");
    check(d.cuMemsetD8Async(a, 1, bytes, b.stream()), "filling the copy buffer");
    for (int rep = 0; rep < 11; ++rep) {
      check(d.cuEventRecord(e0, b.stream()), "recording events");
      check(d.cuMemcpyDtoDAsync(c, a, bytes, b.stream()), "copying");
      check(d.cuEventRecord(e1, b.stream()), "recording events");
      check(d.cuEventSynchronize(e1), "copying");
      float t = 0.f;
      check(d.cuEventElapsedTime(&t, e0, e1), "timing the copy");
      if (rep > 0) ms.push_back(t);  // the first copy warms up
    }
  } catch (...) {
    if (e0) d.cuEventDestroy(e0);
    if (e1) d.cuEventDestroy(e1);
    d.cuMemFree(a);
    d.cuMemFree(c);
    throw;
  }
  d.cuEventDestroy(e0);
  d.cuEventDestroy(e1);
  d.cuMemFree(a);
  d.cuMemFree(c);
  *bytes_out = bytes;
  return 2.0 * double(bytes) / (median(ms) * 1e-3);
}

struct StepBytes {
  uint64_t dense = 0, experts = 0, states = 0;
  int experts_selected = 0, experts_total = 0;
  std::vector<uint64_t> op_bytes;  // per op: the weight and state bytes that op reads (shared reads counted per op)
};

// The bytes one decode step at position `pos` must read: every weight once (an embedding or Engram table only
// the rows it looks up), the routed experts the step selected (each moe_experts op's idx input as the profiled
// step left it: `moe_idx`, copied right after the op, since the arena reuses the buffer later in the step), and
// the used rows of every state (a ring whole; a pool the rows written so far: an upper bound, since attention
// reads only its selected entries).
StepBytes step_bytes(CudaBackend& b, int64_t pos, const std::map<int, std::vector<int32_t>>& moe_idx) {
  const Plan& plan = b.plan();
  const DeviceWeights& w = b.weights();
  StepBytes s;
  std::set<int> counted;
  auto row_bytes = [&](int id) { return w.weight_bytes(id) / uint64_t(std::max<int64_t>(plan.weight_shape(id)[0], 1)); };
  auto used_rows = [&](int id) {
    std::string kind = plan.fb().states()->Get(id)->kind() ? plan.fb().states()->Get(id)->kind()->str() : "";
    std::vector<int64_t> shape = plan.state_shape(id);
    int64_t rows = shape[0];
    if (kind.find("pool") != std::string::npos)
      rows = std::min<int64_t>(rows, (pos + 1) * shape[0] / std::max<int64_t>(plan.max_seq_len(), 1) + 1);
    return std::pair<int64_t, uint64_t>(rows, uint64_t(shape[1]) * 4);
  };
  for (const OpRef& op : plan.ops()) {
    uint64_t mine = 0;
    if (op.spec->kind == OpKind::MoeExperts) {
      int per = op.scaled ? 6 : 3;
      int n_experts = int(op.i("n_experts"));
      auto it = moe_idx.find(op.index);
      std::set<int32_t> chosen;
      if (it != moe_idx.end()) chosen.insert(it->second.begin(), it->second.end());
      s.experts_total += n_experts;
      for (int32_t e : chosen) {
        if (e < 0 || e >= n_experts) continue;
        ++s.experts_selected;
        for (int k = 0; k < per; ++k) {
          int id = op.weights[size_t(e * per + k)];
          if (id < 0) continue;
          mine += w.weight_bytes(id);
          if (counted.insert(id).second) s.experts += w.weight_bytes(id);
        }
      }
      for (int id : op.weights) counted.insert(id);  // the unselected experts are not read
    } else {
      for (size_t j = 0; j < op.weights.size(); ++j) {
        int id = op.weights[j];
        if (id < 0) continue;
        uint64_t n = w.weight_bytes(id);
        if (op.spec->kind == OpKind::Embedding) n = row_bytes(id);
        else if (op.spec->kind == OpKind::Engram && j < 2) n = row_bytes(id) * uint64_t(plan.row_elems(op.inputs[1]));
        else if (op.spec->kind == OpKind::EngramLookup) n = row_bytes(id) * uint64_t(plan.row_elems(op.inputs[0]));
        mine += n;
        if (counted.insert(id).second) s.dense += n;
      }
    }
    for (size_t j = 0; j < op.states.size(); ++j) {
      if (op.states[j] < 0) continue;
      auto [rows, row] = used_rows(op.states[j]);
      if (op.spec->kind == OpKind::SparseAttention && j == 1 && op.inputs.size() > 2 && op.inputs[2] >= 0)
        rows = std::min<int64_t>(rows, plan.row_elems(op.inputs[2]));  // the selected entries only
      mine += uint64_t(rows) * row;
    }
    s.op_bytes.push_back(mine);
  }
  int n_states = plan.fb().states() ? int(plan.fb().states()->size()) : 0;
  for (int id = 0; id < n_states; ++id) {
    auto [rows, row] = used_rows(id);
    s.states += uint64_t(rows) * row;
  }
  return s;
}

}  // namespace

std::vector<CudaBackend::KernelTime> CudaBackend::run_profiled(const int32_t* ids, int64_t p0, int rows,
                                                               std::map<int, std::vector<int32_t>>* moe_idx) {
  // Pinned buffers for the routing copies first (allocating pinned memory may synchronise).
  std::vector<std::pair<size_t, void*>> copies;  // op index, host buffer
  auto free_all = [&](std::vector<std::pair<std::string, CUevent>>& marks) {
    profile_ = nullptr;
    for (auto& m : marks) d_.cuEventDestroy(m.second);
    for (auto& c : copies) d_.cuMemFreeHost(c.second);
  };
  std::vector<std::pair<std::string, CUevent>> marks;
  std::vector<int> op_of;  // per mark
  try {
    if (moe_idx)
      for (size_t k = 0; k < ops_.size(); ++k)
        if (ops_[k].op->spec->kind == OpKind::MoeExperts && ops_[k].in[2]) {
          void* h = nullptr;
          check(d_.cuMemAllocHost(&h, size_t(rows) * size_t(ops_[k].in_w[2]) * 4), "allocating pinned memory");
          copies.emplace_back(k, h);
        }
    stage_inputs(ids, p0, rows);
    unsigned long long ns = 50000000ull;  // 50 ms of GPU time while the host queues the step
    void* args[] = {&ns};
    try {
      launch_own("smelt_spin_ns", 1, 1, args);
    } catch (const Error&) {  // a plan compiled before the spin kernel existed: times include launch gaps
      std::fprintf(stderr, "warning: this plan has no smelt_spin_ns kernel (recompile it): the per-kernel times "
                           "include launch gaps\n");
    }
    profile_ = &marks;
    size_t next_copy = 0;
    for (size_t k = 0; k < ops_.size(); ++k) {
      run_op_at(k, rows);
      op_of.resize(marks.size(), int(k));
      if (next_copy < copies.size() && copies[next_copy].first == k) {
        CUevent e = nullptr;
        check(d_.cuEventCreate(&e, 0), "creating events");
        marks.emplace_back("(bench: routing copy)", e);
        op_of.push_back(-1);
        check(d_.cuEventRecord(e, stream_), "recording events");
        check(d_.cuMemcpyDtoHAsync(copies[next_copy].second, ops_[k].in[2], size_t(rows) * size_t(ops_[k].in_w[2]) * 4,
                                   stream_),
              "copying the routing");
        ++next_copy;
      }
    }
    CUevent end = nullptr;
    check(d_.cuEventCreate(&end, 0), "creating events");
    marks.emplace_back("", end);
    op_of.push_back(-1);
    check(d_.cuEventRecord(end, stream_), "recording events");
    profile_ = nullptr;
    check(d_.cuStreamSynchronize(stream_), "running the plan (set SMELT_CUDA_SYNC=1 to find the op)");
    std::vector<KernelTime> out;
    for (size_t i = 0; i + 1 < marks.size(); ++i) {
      float ms = 0.f;
      check(d_.cuEventElapsedTime(&ms, marks[i].second, marks[i + 1].second), "timing kernels");
      out.push_back({op_of[i], marks[i].first, double(ms)});
    }
    if (moe_idx)
      for (auto& [k, h] : copies) {
        const int32_t* v = static_cast<const int32_t*>(h);
        (*moe_idx)[ops_[k].op->index].assign(v, v + size_t(rows) * size_t(ops_[k].in_w[2]));
      }
    free_all(marks);
    return out;
  } catch (...) {
    free_all(marks);
    throw;
  }
}

// Per-op, per-op-kind and per-kernel GPU times of the profiled eager step, with the bytes each op reads.
static nlohmann::ordered_json profile_json(const Plan& plan, const std::vector<CudaBackend::KernelTime>& kt,
                                           const std::vector<uint64_t>& op_bytes) {
  struct Acc {
    int ops = 0, kernels = 0;
    double ms = 0.0;
    uint64_t bytes = 0;
  };
  std::vector<Acc> per_op(plan.ops().size());
  std::map<std::string, Acc> per_kernel;
  double total = 0.0, other = 0.0;
  for (const auto& k : kt) {
    total += k.ms;
    if (k.op < 0 || size_t(k.op) >= per_op.size()) {
      other += k.ms;
      continue;
    }
    per_op[size_t(k.op)].ms += k.ms;
    per_op[size_t(k.op)].kernels += 1;
    Acc& a = per_kernel[k.kernel];
    a.ms += k.ms;
    a.kernels += 1;
  }
  std::map<std::string, Acc> per_kind;
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (size_t i = 0; i < per_op.size(); ++i) {
    const OpRef& op = plan.ops()[i];
    const uint64_t bytes = i < op_bytes.size() ? op_bytes[i] : 0;
    Acc& a = per_kind[op.name];
    a.ops += 1, a.kernels += per_op[i].kernels, a.ms += per_op[i].ms, a.bytes += bytes;
    ops.push_back({{"op", op.index}, {"name", op.name}, {"layer", op.layer}, {"ms", per_op[i].ms},
                   {"kernels", per_op[i].kernels}, {"bytes", bytes},
                   {"gbps", per_op[i].ms > 0 ? double(bytes) / (per_op[i].ms * 1e6) : 0.0}});
  }
  auto sorted = [](const std::map<std::string, Acc>& m, bool with_bytes) {
    std::vector<std::pair<std::string, Acc>> v(m.begin(), m.end());
    std::stable_sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second.ms > y.second.ms; });
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& [name, acc] : v) {
      nlohmann::ordered_json e = {{"name", name}, {"ms", acc.ms}, {"kernels", acc.kernels}};
      if (with_bytes) {
        e["ops"] = acc.ops;
        e["bytes"] = acc.bytes;
        e["gbps"] = acc.ms > 0 ? double(acc.bytes) / (acc.ms * 1e6) : 0.0;
      }
      a.push_back(e);
    }
    return a;
  };
  nlohmann::ordered_json j;
  j["total_ms"] = total;
  j["bench_overhead_ms"] = other;  // the routing copies the bench itself adds
  j["op_kinds"] = sorted(per_kind, true);
  j["kernels"] = sorted(per_kernel, false);
  j["ops"] = ops;
  return j;
}

nlohmann::ordered_json bench(const BenchOptions& o) {
  if (Plan::load(o.plan).partitioned())
    throw Error(o.plan + ": bench on the cuda backend times one GPU; a partitioned plan runs with generate / logits");
  auto session = CudaSession::open(o.plan, o.backend);
  CudaBackend& b = session->backend();
  const Plan& plan = session->plan();
  int64_t vocab = session->vocab();
  for (const OpRef& op : plan.ops())  // ids must fit the embedding table
    if (op.name == "smelt.embedding") vocab = std::min(vocab, plan.weight_shape(op.weights[0])[0]);
  int64_t max_seq = plan.max_seq_len();
  int64_t p = o.prompt_len > 0 ? o.prompt_len : std::min<int64_t>({plan.max_rows(), 128, std::max<int64_t>(max_seq / 2, 1)});
  int64_t steps = std::max(o.steps, 1);
  if (p + steps + 2 > max_seq)
    throw Error(o.plan + ": bench needs " + std::to_string(p + steps + 2) + " positions but max_seq_len is " +
                std::to_string(max_seq) + "; lower --prompt-len or --steps");

  uint64_t copy_bytes = 0;
  double copy_bw = copy_bandwidth(b, &copy_bytes);

  std::vector<int32_t> prompt(static_cast<size_t>(p));
  for (int64_t i = 0; i < p; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 1) % vocab);
  auto next = [&](const float* l) {
    return int32_t(std::max_element(l, l + session->vocab()) - l) % int32_t(vocab);
  };
  double prefill_ms = 0.0;
  int32_t tok = prompt[size_t(p - 1)];
  if (o.synthetic_states) {
    session->assume_prefilled(p, o.backend.synthetic ? o.backend.seed : 1);
  } else {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits = session->prefill(prompt, o.chunk);
    prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tok = next(logits.data() + (p - 1) * session->vocab());
  }

  // Decode: the first step captures the graph (not timed); then `steps` replays, GPU time of each.
  std::vector<double> ms;
  std::vector<float> l = session->decode(tok);
  tok = next(l.data());
  for (int64_t k = 0; k < steps; ++k) {
    l = session->decode(tok);
    tok = next(l.data());
    ms.push_back(b.last_run_ms());
  }
  int64_t launches = b.last_launches();
  // The same graph replayed back to back (no host launch gap between steps) at the next two positions, so that both
  // phases of a ratio-2 compressor count: what a device-resident decode loop could reach.
  double b2b_ms = 0.0;
  if (o.backend.graphs) {
    const int n = int(std::max<int64_t>(steps / 2, 1));
    const int64_t at = session->position();
    b2b_ms = 0.5 * (b.replay_back_to_back(tok, at, n) + b.replay_back_to_back(tok, at + 1, n));
  }
  // Synthetic weights can drive the activations to inf / NaN, and that changes the timing (an FP8 tensor-core GEMV
  // redoes a segment whose sums come out NaN): the bench says when the last step's logits are not all finite.
  int64_t nonfinite = 0;
  for (int64_t i = 0; i < session->vocab(); ++i) nonfinite += std::isfinite(l[size_t(i)]) ? 0 : 1;
  // The mean is the time a generation spends a token: steps differ by position (a ratio-2 compressor emits an entry
  // every other step), so the median of a two-valued series can sit on either value.
  double step_ms = 0.0;
  for (double v : ms) step_ms += v;
  step_ms /= double(std::max<size_t>(ms.size(), 1));

  // One eager step with an event before every kernel (its routing decides the expert bytes), then one with
  // events at layer boundaries.
  int64_t pos = session->position();
  std::map<int, std::vector<int32_t>> moe_idx;
  std::vector<CudaBackend::KernelTime> kt = b.run_profiled(&tok, pos, 1, &moe_idx);
  StepBytes sb = step_bytes(b, pos, moe_idx);
  std::vector<CudaBackend::Span> spans = b.run_timed(&tok, pos + 1, 1);
  uint64_t total = sb.dense + sb.experts + sb.states;
  double achieved = double(total) / (step_ms * 1e-3);
  // One eager prefill chunk (--chunk rows, else max_rows) after the decode steps, with an event before every kernel:
  // where prefill's time goes (its wall time above includes the host's launches).
  const int64_t chunk_at = pos + 2;
  const int chunk_rows = int(std::min<int64_t>(o.chunk > 0 ? o.chunk : plan.max_rows(), max_seq - chunk_at));
  std::vector<CudaBackend::KernelTime> kc;
  if (chunk_rows > 1) {
    std::vector<int32_t> ids(static_cast<size_t>(chunk_rows));
    for (int i = 0; i < chunk_rows; ++i) ids[size_t(i)] = prompt[size_t(i % p)];
    kc = b.run_profiled(ids.data(), chunk_at, chunk_rows, nullptr);
  }

  nlohmann::ordered_json j;
  j["backend"] = "cuda";
  j["plan"] = o.plan;
  j["device"] = b.device().name;
  j["arch"] = b.device().arch;
  j["kernels_arch"] = b.arch();
  j["weights"] = o.backend.synthetic ? "synthetic (seed " + std::to_string(o.backend.seed) + ")" : "checkpoint";
  j["copy_bandwidth_gbps"] = copy_bw / 1e9;
  j["copy_bytes"] = copy_bytes;
  j["prompt_tokens"] = p;
  j["states"] = o.synthetic_states ? "synthetic (no prefill run)" : "prefilled";
  j["prefill_ms"] = prefill_ms;
  j["prefill_tokens_per_s"] = prefill_ms > 0 ? 1000.0 * double(p) / prefill_ms : 0.0;
  j["decode_steps"] = steps;
  j["decode_position"] = pos;
  j["decode_ms_mean"] = step_ms;
  j["decode_ms_median"] = median(ms);
  j["decode_ms_p10"] = percentile(ms, 0.1);
  j["decode_ms_p90"] = percentile(ms, 0.9);
  j["decode_tokens_per_s"] = step_ms > 0 ? 1000.0 / step_ms : 0.0;
  if (b2b_ms > 0) j["decode_ms_back_to_back"] = b2b_ms;
  j["bytes_per_step"] = {{"dense_weights", sb.dense}, {"routed_experts", sb.experts}, {"states", sb.states},
                         {"total", total}};
  j["experts_selected"] = sb.experts_selected;
  j["experts_total"] = sb.experts_total;
  j["hbm_floor_ms"] = copy_bw > 0 ? double(total) / copy_bw * 1e3 : 0.0;
  j["achieved_gbps"] = achieved / 1e9;
  j["ratio_to_copy_bandwidth"] = copy_bw > 0 ? achieved / copy_bw : 0.0;
  j["kernels_per_step"] = launches;
  j["seams"] = b.seams();
  j["decode_logits_nonfinite"] = nonfinite;
  if (const char* skip = std::getenv("SMELT_CUDA_SKIP_KERNELS"); skip && *skip) j["skipped_kernels"] = skip;
  j["graphs"] = o.backend.graphs;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  double eager_ms = 0.0;
  for (const auto& s : spans) {
    layers.push_back({{"layer", s.layer}, {"ms", s.ms}, {"ops", s.ops}, {"kernels", s.launches}});
    eager_ms += s.ms;
  }
  j["eager_step_ms"] = eager_ms;
  j["layers"] = layers;
  j["profile"] = profile_json(plan, kt, sb.op_bytes);
  if (!kc.empty()) {
    j["prefill_chunk_rows"] = chunk_rows;
    j["prefill_chunk_position"] = chunk_at;
    j["prefill_chunk_profile"] = profile_json(plan, kc, {});
  }
  return j;
}

std::string bench_text(const nlohmann::ordered_json& j) {
  std::ostringstream s;
  char buf[256];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    s << buf << "\n";
  };
  line("backend: cuda on %s (%s, kernels for %s), weights: %s", j["device"].get<std::string>().c_str(),
       j["arch"].get<std::string>().c_str(), j["kernels_arch"].get<std::string>().c_str(),
       j["weights"].get<std::string>().c_str());
  line("copy bandwidth: %.1f GB/s (read+write, cuMemcpyDtoD of %.2f GiB, median of 10)",
       j["copy_bandwidth_gbps"].get<double>(), double(j["copy_bytes"].get<uint64_t>()) / double(1ull << 30));
  if (j["states"] == "prefilled")
    line("prefill: %lld tokens in %.2f ms (%.1f tokens/s)", (long long)j["prompt_tokens"].get<int64_t>(),
         j["prefill_ms"].get<double>(), j["prefill_tokens_per_s"].get<double>());
  else
    line("prefill: not run; states synthetic as after %lld tokens (--states synthetic)",
         (long long)j["prompt_tokens"].get<int64_t>());
  line("decode: %.3f ms/step mean of %lld (median %.3f, p10 %.3f, p90 %.3f) at position %lld, %.1f tokens/s, %lld "
       "kernels/step",
       j["decode_ms_mean"].get<double>(), (long long)j["decode_steps"].get<int64_t>(),
       j["decode_ms_median"].get<double>(), j["decode_ms_p10"].get<double>(), j["decode_ms_p90"].get<double>(),
       (long long)j["decode_position"].get<int64_t>(),
       j["decode_tokens_per_s"].get<double>(), (long long)j["kernels_per_step"].get<int64_t>());
  if (j.value("seams", size_t(0)) > 0)
    line("fused: %zu sublayer seams ([add ->] hc_expand -> hc_collapse) as one launch each where their buffers allow",
         j["seams"].get<size_t>());
  if (j.contains("decode_ms_back_to_back"))
    line("decode back to back: %.3f ms/step (graph replays enqueued together, no host gap between steps)",
         j["decode_ms_back_to_back"].get<double>());
  if (j.value("decode_logits_nonfinite", int64_t(0)) > 0)
    line("WARNING: %lld of the last step's logits are not finite (the weights drive the activations to inf / NaN; "
         "NaN handling changes kernel times)",
         (long long)j["decode_logits_nonfinite"].get<int64_t>());
  if (j.contains("skipped_kernels"))
    line("TIMING ABLATION: kernels %s not launched (SMELT_CUDA_SKIP_KERNELS): every result is wrong",
         j["skipped_kernels"].get<std::string>().c_str());
  const auto& bytes = j["bytes_per_step"];
  line("bytes/step: %.1f MB (dense weights %.1f, routed experts %.1f [%d of %d selected], states %.1f)",
       double(bytes["total"].get<uint64_t>()) / 1e6, double(bytes["dense_weights"].get<uint64_t>()) / 1e6,
       double(bytes["routed_experts"].get<uint64_t>()) / 1e6, j["experts_selected"].get<int>(),
       j["experts_total"].get<int>(), double(bytes["states"].get<uint64_t>()) / 1e6);
  line("achieved: %.1f GB/s = %.1f%% of the copy bandwidth (HBM floor %.3f ms/step)", j["achieved_gbps"].get<double>(),
       100.0 * j["ratio_to_copy_bandwidth"].get<double>(), j["hbm_floor_ms"].get<double>());
  line("eager step by layer (%.3f ms):", j["eager_step_ms"].get<double>());
  for (const auto& l : j["layers"]) {
    int layer = l["layer"].get<int>();
    std::string name = layer < 0 ? "outside blocks" : "layer " + std::to_string(layer);
    line("  %-15s %8.3f ms  %3d ops  %3d kernels", name.c_str(), l["ms"].get<double>(), l["ops"].get<int>(),
         l["kernels"].get<int>());
  }
  if (!j.contains("profile")) return s.str();
  const auto& pr = j["profile"];
  const double tot = std::max(pr["total_ms"].get<double>(), 1e-9);
  line("eager step by op kind (an event before every kernel, launches queued ahead: %.3f ms GPU time, %.3f ms of "
       "it the bench's routing copies):", tot, pr["bench_overhead_ms"].get<double>());
  line("  %-24s %4s %7s %9s %6s %10s %8s", "op", "ops", "kernels", "ms", "%", "MB read", "GB/s");
  for (const auto& k : pr["op_kinds"])
    line("  %-24s %4d %7d %9.3f %5.1f%% %10.1f %8.1f", k["name"].get<std::string>().c_str(), k["ops"].get<int>(),
         k["kernels"].get<int>(), k["ms"].get<double>(), 100.0 * k["ms"].get<double>() / tot,
         double(k["bytes"].get<uint64_t>()) / 1e6, k["gbps"].get<double>());
  auto kernel_table = [&](const nlohmann::ordered_json& profile, double total) {
    line("  %-32s %7s %9s %6s", "kernel", "launches", "ms", "%");
    for (const auto& k : profile["kernels"])
      line("  %-32s %7d %9.3f %5.1f%%", k["name"].get<std::string>().c_str(), k["kernels"].get<int>(),
           k["ms"].get<double>(), 100.0 * k["ms"].get<double>() / total);
  };
  line("eager step by kernel:");
  kernel_table(pr, tot);
  std::vector<nlohmann::ordered_json> ops(pr["ops"].begin(), pr["ops"].end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& x, const auto& y) { return x["ms"].template get<double>() > y["ms"].template get<double>(); });
  line("slowest ops of the eager step:");
  for (size_t i = 0; i < ops.size() && i < 25; ++i) {
    const auto& o = ops[i];
    line("  op %3d %-24s layer %2d %9.3f ms %3d kernels %10.1f MB %8.1f GB/s", o["op"].get<int>(),
         o["name"].get<std::string>().c_str(), o["layer"].get<int>(), o["ms"].get<double>(), o["kernels"].get<int>(),
         double(o["bytes"].get<uint64_t>()) / 1e6, o["gbps"].get<double>());
  }
  if (!j.contains("prefill_chunk_profile")) return s.str();
  const auto& pc = j["prefill_chunk_profile"];
  const int rows = j["prefill_chunk_rows"].get<int>();
  const double ct = std::max(pc["total_ms"].get<double>(), 1e-9);
  line("eager prefill chunk of %d rows at position %lld (an event before every kernel): %.3f ms GPU time, %.3f ms a "
       "token",
       rows, (long long)j["prefill_chunk_position"].get<int64_t>(), ct, ct / rows);
  line("  %-24s %4s %7s %9s %6s", "op", "ops", "kernels", "ms", "%");
  for (const auto& k : pc["op_kinds"])
    line("  %-24s %4d %7d %9.3f %5.1f%%", k["name"].get<std::string>().c_str(), k["ops"].get<int>(),
         k["kernels"].get<int>(), k["ms"].get<double>(), 100.0 * k["ms"].get<double>() / ct);
  kernel_table(pc, ct);
  return s.str();
}

}  // namespace smelt::runtime::cuda
