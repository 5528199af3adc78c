// smelt-run: runs a compiled plan on the cpu backend (a partitioned plan: all its ranks, one thread each).
//   generate PLAN --prompt-ids 1,2,3 --max-new-tokens N [--greedy | --temperature T --top-p P --seed S]
//            [--format text|json] [--chunk N] [--model DIR] [--show-drafts]
//   logits   PLAN --prompt-ids ... [--decode-ids ...] --out FILE.safetensors [--chunk N] [--model DIR]
//            [--captures FILE.safetensors]   (plans compiled with --capture-intermediates)
//   inspect  PLAN [--format text|json]   (partitioned plans: per rank stage, TP rank, layers, bytes, collectives)
//   bench    PLAN [--prompt-len N] [--decode-tokens N] [--repeat R] [--format text|json] [--model DIR]
//            cuda: [--steps N] (decode steps timed; see docs/performance.md)
// generate, logits and bench take [--backend cpu|cuda] (default: cuda when the plan has GPU kernels) and, on
// cuda, [--device N] [--synthetic-weights SEED] (random weights generated on the GPU; no checkpoint read); a
// partitioned plan on cuda runs rank r on GPU (N + r) % count, or on the r-th of [--devices a,b,...], through NCCL.
// Several processes / hosts (cuda): [--ranks 0,1 --coordinator HOST:PORT [--bootstrap-timeout S]] in every process
// (the one with rank 0 listens on PORT); --devices then lists the GPUs of this process's ranks in order. Every
// process prints / writes the same output (docs/partition.md "Several processes / hosts").
// Errors: one line "error: ..." on stderr; exit 1 for bad input, 2 for bad usage.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "frontends/safetensors_writer.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/session_cuda.h"
#include "runtime/inspect.h"
#include "runtime/session.h"

namespace {

using smelt::runtime::Session;
using smelt::runtime::cuda::CudaSession;

// Which backend runs a plan (--backend, default cuda when the plan holds GPU kernels).
struct BackendArgs {
  std::string backend = "auto";
  int device = 0;
  std::vector<int> devices;     // --devices: a partitioned plan's GPU per rank (of this process)
  int64_t synthetic_seed = -1;  // >= 0: --synthetic-weights
  std::vector<int> ranks;       // --ranks: this process's global ranks (several processes)
  std::string coordinator;      // --coordinator HOST:PORT
  double bootstrap_timeout = 300;
};

// The cpu backend runs every rank in one process: the cuda-only flags are mistakes there.
void check_cpu(const BackendArgs& b) {
  if (b.synthetic_seed >= 0) throw smelt::Error("--synthetic-weights needs --backend cuda");
  if (!b.ranks.empty() || !b.coordinator.empty())
    throw smelt::Error("--ranks and --coordinator need --backend cuda (the cpu backend runs every rank in one process)");
}

bool use_cuda(const std::string& plan_path, const BackendArgs& b) {
  if (b.backend == "cpu") {
    check_cpu(b);
    return false;
  }
  if (b.backend == "cuda") return true;
  if (smelt::runtime::cuda::plan_has_kernels(smelt::runtime::Plan::load(plan_path))) return true;
  check_cpu(b);
  return false;
}

smelt::runtime::cuda::BackendOptions cuda_options(const BackendArgs& b, const std::string& model) {
  smelt::runtime::cuda::BackendOptions o;
  o.device = b.device;
  o.devices = b.devices;
  o.model_dir = model;
  o.synthetic = b.synthetic_seed >= 0;
  o.seed = uint64_t(std::max<int64_t>(b.synthetic_seed, 0));
  o.local_ranks = b.ranks;
  o.coordinator = b.coordinator;
  o.bootstrap_timeout_s = b.bootstrap_timeout;
  return o;
}

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > INT32_MAX)
      throw UsageError(flag + ": '" + item + "' is not a token id (a non-negative integer)");
    ids.push_back(int32_t(v));
    start = end + 1;
  }
  return ids;
}

// Plan strings are not checked for UTF-8; print bad bytes as U+FFFD rather than fail.
constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::span<const float> row(const std::vector<float>& logits, int64_t r, int64_t vocab) {
  return {logits.data() + r * vocab, size_t(vocab)};
}

// ---- generate --------------------------------------------------------------------------------------------

struct GenerateArgs : BackendArgs {
  std::string plan, prompt_ids, prompt, format = "text", model;
  int max_new_tokens = 0, chunk = 0, spec_k = 0;
  bool greedy = false, has_temperature = false, show_drafts = false;
  double temperature = 0.0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

template <typename S>
int generate_on(const GenerateArgs& a, std::unique_ptr<S> session);

// Whether the next token is sampled on the GPU: a cuda plan with the sampling kernels (the same token as the host
// Sampler, kernels/sampling/reference.h; $SMELT_HOST_SAMPLING=1 forces the host).
template <typename S>
bool samples_on_device(S& session) {
  if constexpr (std::is_same_v<S, CudaSession>) {
    static const bool host = [] {
      const char* v = std::getenv("SMELT_HOST_SAMPLING");
      return v && *v && std::string(v) != "0";
    }();
    // Several processes sample on the host from the broadcast logits: the same token in every process.
    return !host && !session.several_processes() && session.backend().can_sample();
  }
  return false;
}

// Feeds `ids`; returns their logits [n, vocab], or nothing when the GPU samples the next token (the logits then
// stay on the GPU: no copy of n x vocab floats to the host).
template <typename S>
std::vector<float> feed(S& session, std::span<const int32_t> ids, int chunk, bool on_device) {
  if constexpr (std::is_same_v<S, CudaSession>) {
    if (on_device) {
      session.advance(ids, chunk);
      return {};
    }
  }
  return session.prefill(ids, chunk);
}

// The next token: on the GPU from the logits it holds, else from `row` (the last logits row) on the host.
template <typename S>
int32_t sample_next(S& session, smelt::runtime::Sampler& sampler, std::span<const float> row, bool on_device) {
  if constexpr (std::is_same_v<S, CudaSession>) {
    if (on_device) return session.backend().sample(sampler.params(), sampler.next_step());
  }
  return sampler.sample(row);
}

int generate(const GenerateArgs& a) {
  if (use_cuda(a.plan, a)) return generate_on(a, CudaSession::open(a.plan, cuda_options(a, a.model)));
  return generate_on(a, Session::open(a.plan, a.model));
}

template <typename S>
int generate_on(const GenerateArgs& a, std::unique_ptr<S> session) {
  if (!a.prompt.empty())
    throw smelt::Error("--prompt needs a tokenizer, which smelt-run does not have yet; pass token ids with --prompt-ids");
  if (a.prompt_ids.empty()) throw UsageError("generate needs --prompt-ids");
  if (a.greedy && a.has_temperature) throw UsageError("--greedy and --temperature exclude each other");
  if (a.spec_k > 0) throw smelt::Error("--spec-k: speculative decoding is not implemented yet");
  std::vector<int32_t> prompt = parse_ids(a.prompt_ids, "--prompt-ids");
  if (a.show_drafts && !session->can_draft())
    throw smelt::Error(a.plan + ": --show-drafts needs a plan with the dspark_draft program (DeepSeek-V4.1 with "
                       "DSpark stages)");
  int64_t need = int64_t(prompt.size()) + std::max(a.max_new_tokens - 1, 0);
  // Drafting after the last decode step runs its block at the positions after it.
  if (a.show_drafts && a.max_new_tokens > 1) need += session->draft_block();
  if (need > session->plan().max_seq_len())
    throw smelt::Error(a.plan + ": " + std::to_string(prompt.size()) + " prompt tokens + " +
                       std::to_string(a.max_new_tokens) + " new tokens need " + std::to_string(need) +
                       " positions but the plan was compiled for max_seq_len " +
                       std::to_string(session->plan().max_seq_len()));
  smelt::runtime::Sampler sampler(a.greedy ? 0.0 : a.temperature, a.top_p, a.seed);
  int64_t vocab = session->vocab();

  const bool on_device = samples_on_device(*session);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = feed(*session, prompt, a.chunk, on_device);
  double prefill_ms = ms_since(t0);
  std::vector<int32_t> tokens;
  double decode_ms = 0.0;
  auto last_row = [&](const std::vector<float>& l) {
    return l.empty() ? std::span<const float>() : row(l, int64_t(l.size() / size_t(vocab)) - 1, vocab);
  };
  if (a.max_new_tokens > 0) tokens.push_back(sample_next(*session, sampler, last_row(logits), on_device));
  // DSpark: after each decode step (the main model fed the token at position t and produced the next one),
  // one drafting step from that token; it leaves the sequence as it was.
  nlohmann::ordered_json drafts = nlohmann::ordered_json::array();
  double draft_ms = 0.0;
  auto t1 = std::chrono::steady_clock::now();
  while (int(tokens.size()) < a.max_new_tokens) {
    const int32_t last = tokens.back();
    std::vector<float> next = feed(*session, std::span<const int32_t>(&last, 1), 1, on_device);
    tokens.push_back(sample_next(*session, sampler, last_row(next), on_device));
    if (a.show_drafts) {
      auto td = std::chrono::steady_clock::now();
      smelt::runtime::Draft d = session->draft(tokens.back());
      draft_ms += ms_since(td);
      nlohmann::ordered_json j;
      j["step"] = drafts.size();
      j["position"] = session->position() - 1;
      j["input_id"] = tokens.back();
      j["ids"] = d.ids;
      j["confidence"] = d.confidence;
      drafts.push_back(j);
    }
  }
  decode_ms = ms_since(t1) - draft_ms;
  int decode_steps = std::max(a.max_new_tokens - 1, 0);
  double per_token = decode_steps ? decode_ms / decode_steps : 0.0;
  double tokens_per_s = per_token > 0 ? 1000.0 / per_token : 0.0;

  if (a.format == "json") {
    nlohmann::ordered_json j;
    j["tokens"] = tokens;
    j["prompt_tokens"] = prompt.size();
    j["prefill_ms"] = prefill_ms;
    j["decode_ms_per_token"] = per_token;
    j["tokens_per_s"] = tokens_per_s;
    if (a.show_drafts) {
      j["draft_ms_per_step"] = drafts.empty() ? 0.0 : draft_ms / double(drafts.size());
      j["drafts"] = drafts;
    }
    std::cout << j.dump(-1, ' ', false, kReplace) << "\n";
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) std::cout << (i ? " " : "") << tokens[i];
    std::cout << "\n";
    for (const auto& d : drafts) {  // one line per step: "draft STEP POSITION INPUT_ID: IDS / CONFIDENCES"
      std::cout << "draft " << d["step"] << " " << d["position"] << " " << d["input_id"] << ":";
      for (const auto& id : d["ids"]) std::cout << " " << id;
      std::cout << " /";
      for (const auto& c : d["confidence"]) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.6g", c.get<double>());
        std::cout << buf;
      }
      std::cout << "\n";
    }
    std::fprintf(stderr, "prefill: %zu tokens in %.2f ms; decode: %d steps at %.3f ms/token (%.1f tokens/s)\n",
                 prompt.size(), prefill_ms, decode_steps, per_token, tokens_per_s);
  }
  return 0;
}

// ---- logits ----------------------------------------------------------------------------------------------

struct LogitsArgs : BackendArgs {
  std::string plan, prompt_ids, decode_ids, out, model, captures;
  int chunk = 0;
};

// Captured tensors named "<phase>.<capture name>", F32 [rows, row_shape...].
void add_captures(smelt::runtime::cpu::CaptureTable table, const std::string& phase,
                  std::vector<std::vector<float>>& keep, std::vector<smelt::WriteTensor>& out) {
  for (auto& e : table.entries) {
    std::vector<int64_t> shape{e.rows};
    shape.insert(shape.end(), e.row_shape.begin(), e.row_shape.end());
    keep.push_back(std::move(e.data));
    out.push_back({phase + "." + e.name, smelt::DType::F32, shape, smelt::as_byte_span(keep.back())});
  }
}

template <typename S>
int logits_on(const LogitsArgs& a, std::unique_ptr<S> session);

int logits(const LogitsArgs& a) {
  if (use_cuda(a.plan, a)) return logits_on(a, CudaSession::open(a.plan, cuda_options(a, a.model)));
  return logits_on(a, Session::open(a.plan, a.model));
}

template <typename S>
int logits_on(const LogitsArgs& a, std::unique_ptr<S> session) {
  std::vector<int32_t> prompt = parse_ids(a.prompt_ids, "--prompt-ids");
  std::vector<int32_t> decode = a.decode_ids.empty() ? std::vector<int32_t>() : parse_ids(a.decode_ids, "--decode-ids");
  if (!a.captures.empty() && !session->has_capture_ops())
    throw smelt::Error(a.plan + ": the plan has no smelt.capture ops; compile it with --capture-intermediates");
  session->set_capturing(!a.captures.empty());
  std::vector<std::vector<float>> capture_data;  // kept alive until the file is written (moves keep the data)
  std::vector<smelt::WriteTensor> capture_tensors;
  int64_t vocab = session->vocab();
  std::vector<float> prompt_logits = session->prefill(prompt, a.chunk);
  add_captures(session->take_captures(), "prefill", capture_data, capture_tensors);
  std::vector<float> decode_logits;
  for (size_t s = 0; s < decode.size(); ++s) {
    std::vector<float> l = session->decode(decode[s]);
    decode_logits.insert(decode_logits.end(), l.begin(), l.end());
    add_captures(session->take_captures(), "decode" + std::to_string(s), capture_data, capture_tensors);
  }
  if (!a.captures.empty()) {
    smelt::write_safetensors(a.captures, capture_tensors, {{"plan", a.plan}, {"prompt_ids", a.prompt_ids},
                                                           {"decode_ids", a.decode_ids}});
    std::fprintf(stderr, "wrote %s: %zu captured tensors\n", a.captures.c_str(), capture_tensors.size());
  }
  std::vector<smelt::WriteTensor> tensors;
  tensors.push_back({"prompt_logits", smelt::DType::F32, {int64_t(prompt.size()), vocab}, smelt::as_byte_span(prompt_logits)});
  if (!decode.empty())
    tensors.push_back({"decode_logits", smelt::DType::F32, {int64_t(decode.size()), vocab}, smelt::as_byte_span(decode_logits)});
  smelt::write_safetensors(a.out, tensors, {{"plan", a.plan}, {"prompt_ids", a.prompt_ids}, {"decode_ids", a.decode_ids}});
  std::fprintf(stderr, "wrote %s: prompt_logits [%zu, %lld]%s\n", a.out.c_str(), prompt.size(), (long long)vocab,
               decode.empty() ? "" : (", decode_logits [" + std::to_string(decode.size()) + ", " + std::to_string(vocab) + "]").c_str());
  return 0;
}

// ---- bench -----------------------------------------------------------------------------------------------

struct BenchArgs : BackendArgs {
  std::string plan, format = "text", model;
  int prompt_len = 0, decode_tokens = 32, repeat = 3, chunk = 0, steps = 32;
  std::string states = "prefill";
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Prefill a synthetic prompt, then decode greedily; `repeat` runs after one warm-up, medians reported.
int bench(const BenchArgs& a) {
  if (use_cuda(a.plan, a)) {
    smelt::runtime::cuda::BenchOptions o;
    o.plan = a.plan;
    o.backend = cuda_options(a, a.model);
    o.prompt_len = a.prompt_len;
    o.steps = a.steps;
    o.chunk = a.chunk;
    o.synthetic_states = a.states == "synthetic";
    nlohmann::ordered_json j = smelt::runtime::cuda::bench(o);
    if (a.format == "json") std::cout << j.dump(-1, ' ', false, kReplace) << "\n";
    else std::cout << smelt::runtime::cuda::bench_text(j);
    return 0;
  }
  if (a.synthetic_seed >= 0) throw smelt::Error("--synthetic-weights needs --backend cuda");
  if (a.states != "prefill") throw smelt::Error("--states synthetic needs --backend cuda");
  auto session = Session::open(a.plan, a.model);
  const smelt::runtime::Plan& plan = session->plan();
  int64_t vocab = session->vocab();
  for (const smelt::runtime::Plan* rp : plan.rank_plans())  // ids must fit the embedding table (every rank's)
    for (const smelt::runtime::OpRef& op : rp->ops())
      if (op.name == "smelt.embedding") vocab = std::min(vocab, rp->weight_shape(op.weights[0])[0]);
  int64_t max_seq = plan.max_seq_len();
  int64_t p = a.prompt_len > 0 ? a.prompt_len : std::min<int64_t>({plan.max_rows(), 128, std::max<int64_t>(max_seq / 2, 1)});
  int64_t d = a.decode_tokens;
  if (p + d > max_seq)
    throw smelt::Error(a.plan + ": bench needs " + std::to_string(p + d) + " positions but max_seq_len is " +
                       std::to_string(max_seq) + "; lower --prompt-len or --decode-tokens");
  std::vector<int32_t> prompt(p);
  for (int64_t i = 0; i < p; ++i) prompt[i] = int32_t((i * 7919 + 1) % vocab);

  std::vector<double> prefill_ms, decode_ms;
  for (int run = 0; run <= a.repeat; ++run) {
    session->reset();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> l = session->prefill(prompt, a.chunk);
    double pm = ms_since(t0);
    int32_t next = smelt::runtime::sample_greedy(row(l, p - 1, session->vocab()));
    auto t1 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < d; ++k) next = int32_t(smelt::runtime::sample_greedy(session->decode(next)) % vocab);
    double dm = ms_since(t1);
    if (run == 0) continue;  // warm-up: page faults of the weight mapping, cold caches
    prefill_ms.push_back(pm);
    decode_ms.push_back(dm);
  }
  double pm = median(prefill_ms), dm = median(decode_ms);
  double prefill_per = pm / double(p), decode_per = d ? dm / double(d) : 0.0;
  if (a.format == "json") {
    nlohmann::ordered_json j;
    j["backend"] = "cpu";
    j["plan"] = a.plan;
    j["prompt_tokens"] = p;
    j["prefill_ms"] = pm;
    j["prefill_ms_per_token"] = prefill_per;
    j["prefill_tokens_per_s"] = prefill_per > 0 ? 1000.0 / prefill_per : 0.0;
    j["decode_tokens"] = d;
    j["decode_ms_per_token"] = decode_per;
    j["decode_tokens_per_s"] = decode_per > 0 ? 1000.0 / decode_per : 0.0;
    j["repeats"] = a.repeat;
    std::cout << j.dump(-1, ' ', false, kReplace) << "\n";
  } else {
    std::printf("backend: cpu (reference kernels), median of %d runs after one warm-up\n", a.repeat);
    std::printf("prefill: %lld tokens in %.2f ms = %.3f ms/token (%.1f tokens/s)\n", (long long)p, pm, prefill_per,
                prefill_per > 0 ? 1000.0 / prefill_per : 0.0);
    std::printf("decode:  %lld tokens at %.3f ms/token (%.1f tokens/s)\n", (long long)d, decode_per,
                decode_per > 0 ? 1000.0 / decode_per : 0.0);
  }
  return 0;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const CLI::Range kCount(0, 1 << 30);  // token and row counts
  CLI::App app{"smelt-run: run a compiled smelt plan (cpu or cuda backend)"};
  app.require_subcommand(1);

  GenerateArgs g;
  CLI::App* gen = app.add_subcommand("generate", "generate tokens from a prompt");
  gen->add_option("plan", g.plan, "plan file")->required();
  gen->add_option("--prompt-ids", g.prompt_ids, "prompt token ids, comma-separated");
  gen->add_option("--prompt", g.prompt, "prompt text (needs a tokenizer)");
  gen->add_option("--max-new-tokens", g.max_new_tokens, "tokens to generate")->required()->check(kCount);
  gen->add_flag("--greedy", g.greedy, "argmax sampling (the default)");
  CLI::Option* temperature =
      gen->add_option("--temperature", g.temperature, "sampling temperature (0 = greedy)")->check(CLI::Range(0.0, 1e6));
  gen->add_option("--top-p", g.top_p, "nucleus mass kept when sampling")->check(CLI::Range(1e-9, 1.0));
  gen->add_option("--seed", g.seed, "sampler seed (splitmix64 draws, the same tokens on cpu and cuda; docs/sampling.md)");
  gen->add_option("--spec-k", g.spec_k, "speculative draft length (not implemented yet)");
  gen->add_option("--format", g.format, "text or json")->check(CLI::IsMember({"text", "json"}));
  gen->add_option("--chunk", g.chunk, "prefill chunk rows (0 = the plan's max_rows)")->check(kCount);
  gen->add_option("--model", g.model, "checkpoint directory (default: the one recorded in the plan)");
  gen->add_flag("--show-drafts", g.show_drafts,
                "DeepSeek-V4.1 DSpark: after each decode step, draft a block and report its ids and confidences");

  LogitsArgs l;
  CLI::App* lg = app.add_subcommand("logits", "write float32 logits of a prompt (and decode steps) to safetensors");
  lg->add_option("plan", l.plan, "plan file")->required();
  lg->add_option("--prompt-ids", l.prompt_ids, "prompt token ids, comma-separated")->required();
  lg->add_option("--decode-ids", l.decode_ids, "ids fed one decode step at a time after the prompt");
  lg->add_option("--out", l.out, "output .safetensors file")->required();
  lg->add_option("--chunk", l.chunk, "prefill chunk rows (0 = the plan's max_rows)")->check(kCount);
  lg->add_option("--model", l.model, "checkpoint directory (default: the one recorded in the plan)");
  lg->add_option("--captures", l.captures,
                 "write the smelt.capture tensors (prefill.<name>, decode<s>.<name>) to this .safetensors file");

  std::string inspect_plan, inspect_format = "text";
  CLI::App* ins = app.add_subcommand("inspect", "describe a plan");
  ins->add_option("plan", inspect_plan, "plan file")->required();
  ins->add_option("--format", inspect_format, "text or json")->check(CLI::IsMember({"text", "json"}));

  BenchArgs b;
  CLI::App* bn = app.add_subcommand("bench", "time prefill and decode on the cpu backend");
  bn->add_option("plan", b.plan, "plan file")->required();
  bn->add_option("--prompt-len", b.prompt_len, "prompt tokens (default: min(max_rows, 128))")->check(kCount);
  bn->add_option("--decode-tokens", b.decode_tokens, "decode steps")->check(kCount);
  bn->add_option("--repeat", b.repeat, "measured runs (median reported)")->check(CLI::Range(1, 1000));
  bn->add_option("--chunk", b.chunk, "prefill chunk rows (0 = the plan's max_rows)")->check(kCount);
  bn->add_option("--format", b.format, "text or json")->check(CLI::IsMember({"text", "json"}));
  bn->add_option("--model", b.model, "checkpoint directory (default: the one recorded in the plan)");

  for (auto [cmd, args] : {std::pair<CLI::App*, BackendArgs*>{gen, &g}, {lg, &l}, {bn, &b}}) {
    cmd->add_option("--backend", args->backend, "cpu or cuda (default: cuda when the plan has GPU kernels)")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    cmd->add_option("--device", args->device, "cuda: GPU ordinal")->check(CLI::Range(0, 1023));
    cmd->add_option("--devices", args->devices, "cuda, partitioned plans: the GPU of each rank this process runs, in rank order (default: the i-th on --device + i)")
        ->delimiter(',')
        ->check(CLI::Range(0, 1023));
    cmd->add_option("--synthetic-weights", args->synthetic_seed,
                    "cuda: fill the weights on the GPU with random values from SEED instead of reading the checkpoint")
        ->check(CLI::Range(int64_t(0), INT64_MAX));
    cmd->add_option("--ranks", args->ranks,
                    "cuda, several processes: the global ranks of the partitioned plan this process runs (needs "
                    "--coordinator; --devices then gives their GPUs in this order). Every process prints the same output "
                    "(logits: each writes its own --out)")
        ->delimiter(',')
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--coordinator", args->coordinator,
                    "cuda, several processes: HOST:PORT where the process with rank 0 listens and the others connect "
                    "(the same in every process)");
    cmd->add_option("--bootstrap-timeout", args->bootstrap_timeout,
                    "cuda, several processes: seconds to wait for the other processes (default 300)")
        ->check(CLI::Range(0.1, 1e6));
  }
  bn->add_option("--steps", b.steps, "cuda: decode steps timed (median reported)")->check(CLI::Range(1, 1 << 20));
  bn->add_option("--states", b.states,
                 "cuda: prefill (run the prompt) or synthetic (fill the states as after --prompt-len tokens, no prefill)")
      ->check(CLI::IsMember({"prefill", "synthetic"}));

  const std::string first = argc > 1 ? argv[1] : "";
  if (!first.empty() && first[0] != '-' && first != "generate" && first != "logits" && first != "inspect" &&
      first != "bench") {
    std::fprintf(stderr, "error: unknown subcommand '%s'; expected generate, logits, inspect or bench\n", argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s (see smelt-run --help)\n", one_line(e.what()).c_str());
    return 2;
  }

  g.has_temperature = temperature->count() > 0;
  try {
    if (gen->parsed()) return generate(g);
    if (lg->parsed()) return logits(l);
    if (bn->parsed()) return bench(b);
    if (ins->parsed()) {
      smelt::runtime::Plan plan = smelt::runtime::Plan::load(inspect_plan);
      if (inspect_format == "json") std::cout << smelt::runtime::inspect_json(plan).dump(2, ' ', false, kReplace) << "\n";
      else std::cout << smelt::runtime::inspect_text(plan);
      return 0;
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s (see smelt-run --help)\n", one_line(e.what()).c_str());
    return 2;
  } catch (const smelt::Error& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  return 2;
}
