#include "runtime/cuda/backend.h"

#include "runtime/cuda/nccl.h"
#include "runtime/cuda/ops_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace smelt::runtime::cuda {

namespace fb = smelt::plan;

namespace {

uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1ull << 30));
  return buf;
}

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

// $SMELT_CUDA_SKIP_KERNELS=name,name,...: those kernels are not launched. A timing ablation only (what a decode step
// would cost without them, e.g. before fusing them away); every result after a skipped kernel is wrong, and
// `smelt-run bench` says so.
const std::set<std::string>& skipped_kernels() {
  static const std::set<std::string> s = env_names("SMELT_CUDA_SKIP_KERNELS");
  return s;
}
// $SMELT_CUDA_PDL_OFF=name,...: those kernels are launched without the programmatic-dependent-launch attribute: they
// start only once the previous kernel has finished (the results are the same). Timing experiments.
const std::set<std::string>& pdl_off_kernels() {
  static const std::set<std::string> s = env_names("SMELT_CUDA_PDL_OFF");
  return s;
}

// Ops the side stream runs (CudaBackend::run_ops), beside the main stream's: those the compiler marked `stream = 1`
// (compiler/passes/schedule_streams.cc; by default hc_mix, whose outputs are read only by the next hc_collapse /
// hc_expand: V4.1-Flash slice decode 1.511 -> 1.463 ms a step, and the attention's kv and indexer projections:
// 1.468 -> 1.420). A marked op touches arena buffers, states (counted whole, as written: plan_side_stream), weights
// and its own scratch.
// swiglu_mlp (the shared expert) beside the routing and the routed experts: marked only under fp32 numerics (the sm_80
// path: 1.295 -> 1.251 ms with its down launched after its up, ops.cc run_experts); with the act-quant tensor-core
// kernels it measured slower (session 8: 1.463 -> 1.554 ms; session 18: 1.175 -> 1.181-1.203 at best).
bool side_kind(const OpRef& op) {
  auto it = op.attrs.find("stream");
  return it != op.attrs.end() && it->second.i == 1;
}

int arch_num(const std::string& arch) {  // sm_90 -> 90, or -1
  if (arch.rfind("sm_", 0) != 0) return -1;
  std::string d = arch.substr(3);
  if (d.empty() || d.size() > 4 || d.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(d);
}

}  // namespace

// launch.h
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

bool env_off(const char* name) { return env_is(name, "0"); }

std::array<int, 3> env_ints3(const char* name) {
  std::array<int, 3> v{0, 0, 0};
  const char* s = std::getenv(name);
  if (s && std::sscanf(s, "%d,%d,%d", &v[0], &v[1], &v[2]) != 3) v = {0, 0, 0};
  return v;
}

std::set<std::string> env_names(const char* var) {
  std::set<std::string> out;
  const char* v = std::getenv(var);
  std::string all = v ? v : "";
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find(',', at);
    if (end == std::string::npos) end = all.size();
    if (end > at) out.insert(all.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

std::vector<std::string> cubin_functions(const std::vector<uint8_t>& img) {
  std::vector<std::string> names;
  auto rd = [&](uint64_t off, int bytes) -> uint64_t {
    uint64_t v = 0;
    if (off + uint64_t(bytes) > img.size()) return 0;
    for (int b = bytes - 1; b >= 0; --b) v = (v << 8) | img[size_t(off) + size_t(b)];
    return v;
  };
  if (img.size() < 64 || std::memcmp(img.data(), "\x7f" "ELF", 4) != 0 || img[4] != 2 || img[5] != 1) return names;
  const uint64_t shoff = rd(0x28, 8), shentsize = rd(0x3a, 2), shnum = rd(0x3c, 2);
  if (shentsize < 64 || shoff + shnum * shentsize > img.size()) return names;
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint64_t sh = shoff + i * shentsize;
    if (rd(sh + 4, 4) != 2) continue;  // SHT_SYMTAB
    const uint64_t off = rd(sh + 0x18, 8), size = rd(sh + 0x20, 8), link = rd(sh + 0x28, 4), ent = rd(sh + 0x38, 8);
    if (ent < 24 || link >= shnum || off + size > img.size()) continue;
    const uint64_t str_sh = shoff + link * shentsize, str_off = rd(str_sh + 0x18, 8), str_size = rd(str_sh + 0x20, 8);
    if (str_off + str_size > img.size()) continue;
    for (uint64_t e = off; e + ent <= off + size; e += ent) {
      const uint64_t name = rd(e, 4);
      const uint8_t info = img[size_t(e + 4)];
      if ((info & 0xf) != 2 || (info >> 4) != 1 || name >= str_size) continue;  // STT_FUNC, STB_GLOBAL
      const char* p = reinterpret_cast<const char*>(img.data() + str_off + name);
      names.emplace_back(p, strnlen(p, size_t(str_size - name)));
    }
  }
  return names;
}

std::string choose_arch(const Plan& plan, const std::string& gpu_name, int major, int minor) {
  std::set<int> have;
  const auto* kernels = plan.fb().kernels();
  if (kernels)
    for (const auto* k : *kernels)
      if (k->format() && k->format()->str() == "cubin" && k->arch() && arch_num(k->arch()->str()) > 0)
        have.insert(arch_num(k->arch()->str()));
  const int want = major * 10 + minor;
  const std::string gpu_arch = "sm_" + std::to_string(want);
  const std::string hint = "compile with --target " + gpu_arch + (want == 90 ? " or h200" : "");
  if (have.empty()) {
    const auto* t = plan.fb().target();
    throw Error(plan.path() + ": this plan has no GPU kernels (compiled for --target " + (t ? t->str() : "cpu") +
                "): " + hint + ", or run it with --backend cpu");
  }
  if (have.count(want)) return gpu_arch;
  // A cubin runs on GPUs of the same major version and an equal or newer minor one.
  for (auto it = have.rbegin(); it != have.rend(); ++it)
    if (*it / 10 == major && *it % 10 <= minor) return "sm_" + std::to_string(*it);
  std::string list;
  for (int a : have) list += (list.empty() ? "sm_" : ", sm_") + std::to_string(a);
  throw Error(plan.path() + ": this plan has kernels for " + list + "; this GPU (" + gpu_name + ") is " + gpu_arch +
              ": " + hint);
}

CudaBackend::CudaBackend(const Plan& plan, const BackendOptions& o) : plan_(plan), d_(driver()) {
  try {
    int count = 0;
    check(d_.cuDeviceGetCount(&count), "counting GPUs");
    if (o.device < 0 || o.device >= count)
      throw Error("--device " + std::to_string(o.device) + ": this machine has " + std::to_string(count) + " GPU(s)");
    CUdevice dev = 0;
    check(d_.cuDeviceGet(&dev, o.device), "opening the GPU");
    char name[256] = {};
    check(d_.cuDeviceGetName(name, sizeof name - 1, dev), "reading the GPU's name");
    int major = 0, minor = 0;
    check(d_.cuDeviceGetAttribute(&major, kAttrComputeCapabilityMajor, dev), "reading the compute capability");
    check(d_.cuDeviceGetAttribute(&minor, kAttrComputeCapabilityMinor, dev), "reading the compute capability");
    check(d_.cuDeviceGetAttribute(&dev_.sms, kAttrMultiprocessorCount, dev), "reading the SM count");
    size_t total = 0;
    check(d_.cuDeviceTotalMem(&total, dev), "reading the GPU's memory size");
    dev_.ordinal = o.device;
    dev_.name = name;
    dev_.arch = "sm_" + std::to_string(major * 10 + minor);
    dev_.memory_bytes = total;
    arch_ = choose_arch(plan, dev_.name, major, minor);
    // Programmatic dependent launch where the arch has it (sm_90+): a kernel's launch and block setup overlap the
    // previous kernel's tail (~160 small kernels per decode step). SMELT_CUDA_PDL=0 switches it off.
    pdl_ = arch_num(arch_) >= 90 && d_.cuLaunchKernelEx && !env_off("SMELT_CUDA_PDL");

    check(d_.cuDevicePrimaryCtxRetain(&ctx_, dev), "creating the CUDA context");
    check(d_.cuCtxSetCurrent(ctx_), "creating the CUDA context");
    check(d_.cuStreamCreate(&stream_, kStreamNonBlocking), "creating a stream");
    check(d_.cuEventCreate(&ev_start_, 0), "creating events");
    check(d_.cuEventCreate(&ev_end_, 0), "creating events");
    // SMELT_CUDA_SIDE_STREAM=0: every op on the one stream (A/B timing, bisecting).
    side_on_ = d_.cuStreamWaitEvent && !env_off("SMELT_CUDA_SIDE_STREAM");
    if (side_on_) {
      // SMELT_CUDA_SIDE_SMS=N: side ops size their persistent grids for N multiprocessors (tuning: a long side
      // GEMV then leaves the others to the main stream's kernels); all by default.
      side_sms_ = dev_.sms;
      if (const char* v = std::getenv("SMELT_CUDA_SIDE_SMS")) {
        char* end = nullptr;
        const long n = std::strtol(v, &end, 10);
        if (!*v || *end || n < 1) throw Error("SMELT_CUDA_SIDE_SMS=" + std::string(v) + ": expected a positive integer");
        side_sms_ = int(std::min<long>(n, dev_.sms));
      }
      check(d_.cuStreamCreate(&side_, kStreamNonBlocking), "creating a stream");
      check(d_.cuEventCreate(&side_fork_, kEventDisableTiming), "creating events");
    }

    for (const auto* k : *plan.fb().kernels()) {
      if (!k->format() || k->format()->str() != "cubin" || !k->arch() || k->arch()->str() != arch_ || !k->image()) continue;
      std::vector<uint8_t> image(k->image()->begin(), k->image()->end());  // aligned copy for the ELF loader
      CUmodule m = nullptr;
      CUresult r = d_.cuModuleLoadData(&m, image.data());
      if (r != 0)
        throw Error(plan.path() + ": kernel module '" + (k->name() ? k->name()->str() : "?") + "' for " + arch_ +
                    " does not load on " + dev_.name + " (CUDA error " + std::to_string(r) + "): recompile the plan");
      modules_.push_back(m);
      for (std::string& f : cubin_functions(image)) module_of_.emplace(std::move(f), m);
    }

    // Scratch: one region as large as the largest op asks for (the main stream's ops run one after another), and one
    // for the side stream's ops.
    uint64_t scratch = 0, side_scratch = 0;  // the side stream's ops carve their own region
    std::vector<int> act_quant_weights, weight_only_weights, fp4_pair_weights;
    std::vector<uint64_t> zeroed_at, zeroed_len;  // per op: the offset and size of its zeroed memory
    uint64_t zeroed = 0;
    for (const OpRef& op : plan.ops()) {
      Prepare p;
      if (is_collective(op.spec->kind)) p.scratch_bytes = NcclComms::scratch_bytes(plan, op, plan.max_rows());
      else prepare_op(plan, op, plan.max_rows(), p);
      scratch = std::max(scratch, p.scratch_bytes);
      zeroed_at.push_back(p.zeroed_bytes ? zeroed : ~uint64_t(0));
      zeroed_len.push_back(p.zeroed_bytes);
      zeroed += align256(p.zeroed_bytes);
      if (side_on_ && side_kind(op)) side_scratch = std::max(side_scratch, p.scratch_bytes);
      act_quant_weights.insert(act_quant_weights.end(), p.act_quant_weights.begin(), p.act_quant_weights.end());
      weight_only_weights.insert(weight_only_weights.end(), p.weight_only_weights.begin(), p.weight_only_weights.end());
      fp4_pair_weights.insert(fp4_pair_weights.end(), p.fp4_pair_weights.begin(), p.fp4_pair_weights.end());
    }

    weights_.plan_layout(plan);
    // The act-quant kernels compiled for sm_89+ read their FP8 / FP4 weights in tile order (kernels/linear/gemv.cuh
    // wtile_off): those weights are repacked at upload. A weight read by both kinds of kernel has no one layout.
    if (arch_num(arch_) >= 89) {
      std::vector<char> act_quant(weights_.size(), 0);  // a mark per weight: a real model has ~50k expert weights
      for (int id : act_quant_weights) act_quant[size_t(id)] = 1;
      for (int id : weight_only_weights)
        if (act_quant[size_t(id)])
          throw Error(plan.path() + ": weight " + std::to_string(id) + " (" + plan.weight_name(id) +
                      ") is read by act-quant and by weight-only kernels, which need different layouts on " + arch_);
      for (int id : act_quant_weights) weights_.set_tiled(id);
    }
    // The weight-only FP4 experts' tensor-core kernels read their codes in pair order (kernels/cuda/common.cuh
    // fp4_pair_order), written at upload; where those kernels do not run, the experts stay row-major like any
    // weight-only weight.
    if (fp4_pair_order_on(arch_num(arch_))) {
      std::vector<char> other(weights_.size(), 0);
      for (int id : act_quant_weights) other[size_t(id)] = 1;
      for (int id : weight_only_weights) other[size_t(id)] = 1;
      for (int id : fp4_pair_weights)
        if (other[size_t(id)])
          throw Error(plan.path() + ": weight " + std::to_string(id) + " (" + plan.weight_name(id) +
                      ") is read by the weight-only FP4 expert kernels, which need its codes in pair order, and by "
                      "other kernels, which need them row-major");
      for (int id : fp4_pair_weights) weights_.set_fp4_pairs(id);
    }
    int n_states = plan.fb().states() ? int(plan.fb().states()->size()) : 0;
    for (int s = 0; s < n_states; ++s) {
      std::vector<int64_t> shape = plan.state_shape(s);
      state_offset_.push_back(states_bytes_);
      states_bytes_ += align256(uint64_t(shape[0]) * uint64_t(shape[1]) * 4);
    }
    uint64_t arena = align256(plan.fb().arena_bytes());
    size_t free_bytes = 0, total_bytes = 0;
    check(d_.cuMemGetInfo(&free_bytes, &total_bytes), "reading the free GPU memory");
    uint64_t need = weights_.bytes() + arena + states_bytes_ + scratch + side_scratch + zeroed + (64ull << 20);
    if (need > free_bytes)
      throw Error(plan.path() + ": needs " + gib(need) + " on the GPU (weights " + gib(weights_.bytes()) + ", arena " +
                  gib(arena) + ", states " + gib(states_bytes_) + ") but " + dev_.name + " has " + gib(free_bytes) +
                  " free");
    check(d_.cuMemAlloc(&arena_, std::max<uint64_t>(arena, 256)), "allocating the arena");
    check(d_.cuMemAlloc(&states_, std::max<uint64_t>(states_bytes_, 256)), "allocating the states");
    if (scratch) check(d_.cuMemAlloc(&scratch_, align256(scratch)), "allocating op scratch");
    if (side_scratch) check(d_.cuMemAlloc(&side_scratch_, align256(side_scratch)), "allocating op scratch");
    if (zeroed) {
      check(d_.cuMemAlloc(&zeroed_, zeroed), "allocating zeroed op memory");
      check(d_.cuMemsetD8Async(zeroed_, 0, zeroed, stream_), "clearing zeroed op memory");
      check(d_.cuStreamSynchronize(stream_), "clearing zeroed op memory");
    }
    check(d_.cuMemAlloc(&step_, 256), "allocating the step info");
    check(d_.cuMemAllocHost(&host_ids_, size_t(plan.max_rows()) * 4), "allocating pinned memory");
    check(d_.cuMemAllocHost(&host_step_, sizeof(StepInfo)), "allocating pinned memory");
    reset_state();

    if (o.synthetic) weights_.synthesize(plan, o.seed, *this);
    else weights_.upload(plan, o.model_dir, *this);

    const auto* bufs = plan.fb().buffers();
    ops_.resize(plan.ops().size());
    for (size_t k = 0; k < plan.ops().size(); ++k) {
      const OpRef& op = plan.ops()[k];
      OpLaunch& l = ops_[k];
      l.plan = &plan;
      l.op = &op;
      l.step = step_;
      l.stream = stream_;
      l.scratch = scratch_;
      l.scratch_bytes = scratch;
      l.zeroed = zeroed_at[k] != ~uint64_t(0) ? zeroed_ + zeroed_at[k] : 0;
      l.zeroed_bytes = zeroed_len[k];
      l.backend = this;
      l.sms = dev_.sms;
      l.arch = arch_num(arch_);
      if (op.inputs.size() > std::size(l.in) || op.outputs.size() > std::size(l.out) ||
          op.states.size() > std::size(l.state))
        plan.fail(op, "has more operands than the cuda backend holds per op");
      for (size_t j = 0; j < op.inputs.size(); ++j)
        if (op.inputs[j] >= 0) {
          l.in[j] = arena_ + bufs->Get(op.inputs[j])->offset();
          l.in_w[j] = plan.row_elems(op.inputs[j]);
        }
      for (size_t j = 0; j < op.outputs.size(); ++j)
        if (op.outputs[j] >= 0) {
          l.out[j] = arena_ + bufs->Get(op.outputs[j])->offset();
          l.out_w[j] = plan.row_elems(op.outputs[j]);
        }
      for (int id : op.weights) l.w.push_back(id >= 0 ? &weights_[id] : nullptr);
      for (size_t j = 0; j < op.states.size(); ++j)
        if (op.states[j] >= 0) {
          std::vector<int64_t> shape = plan.state_shape(op.states[j]);
          l.state[j] = states_ + state_offset_[size_t(op.states[j])];
          l.state_rows[j] = shape[0];
          l.state_cols[j] = shape[1];
        }
    }
    plan_side_stream();
    // SMELT_CUDA_SYNC synchronises after every op, which a graph capture forbids.
    graphs_ = o.graphs && !env_off("SMELT_CUDA_GRAPHS") && !env_on("SMELT_CUDA_SYNC");
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() noexcept {
  if (!ctx_) return;
  d_.cuCtxSetCurrent(ctx_);
  if (stream_) d_.cuStreamSynchronize(stream_);
  for (auto& [rows, exec] : graphs_by_rows_) d_.cuGraphExecDestroy(exec);
  graphs_by_rows_.clear();
  if (side_) d_.cuStreamSynchronize(side_);
  for (CUdeviceptr p : {arena_, states_, scratch_, side_scratch_, zeroed_, step_, sample_scratch_})
    if (p) d_.cuMemFree(p);
  arena_ = states_ = scratch_ = side_scratch_ = zeroed_ = step_ = sample_scratch_ = 0;
  weights_.release();  // before the context goes
  for (void* h : {host_ids_, host_step_, host_token_})
    if (h) d_.cuMemFreeHost(h);
  host_ids_ = host_step_ = host_token_ = nullptr;
  for (CUmodule m : modules_) d_.cuModuleUnload(m);
  modules_.clear();
  module_of_.clear();
  functions_.clear();
  if (ev_start_) d_.cuEventDestroy(ev_start_);
  if (ev_end_) d_.cuEventDestroy(ev_end_);
  ev_start_ = ev_end_ = nullptr;
  if (side_fork_) d_.cuEventDestroy(side_fork_);
  side_fork_ = nullptr;
  for (CUevent e : side_done_) d_.cuEventDestroy(e);
  side_done_.clear();
  if (side_) d_.cuStreamDestroy(side_);
  side_ = nullptr;
  if (stream_) d_.cuStreamDestroy(stream_);
  stream_ = nullptr;
  CUdevice dev = 0;
  if (d_.cuDeviceGet(&dev, dev_.ordinal) == 0) d_.cuDevicePrimaryCtxRelease(dev);
  ctx_ = nullptr;
}

// $SMELT_CUDA_CARVEOUT=P (0..100): every kernel's preferred shared-memory carveout, P percent of the unified L1 /
// shared memory (A/B timing: the driver's default picks one per kernel, and a multiprocessor changes its split only
// when idle, so a GEMV's blocks may not join one still running a small kernel of another split); -1 when unset.
static int carveout_pref() {
  static const int p = [] {
    const char* v = std::getenv("SMELT_CUDA_CARVEOUT");
    if (!v || !*v) return -1;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end || n < 0 || n > 100) throw Error("SMELT_CUDA_CARVEOUT=" + std::string(v) + ": expected 0 to 100");
    return int(n);
  }();
  return p;
}

CUfunction CudaBackend::function(const char* name) {
  auto it = functions_.find(std::string_view(name));
  if (it != functions_.end()) return it->second;
  auto found = [&](CUfunction f) {
    if (carveout_pref() >= 0) check(d_.cuFuncSetAttribute(f, kFuncAttrPreferredSharedCarveout, carveout_pref()), name);
    functions_.emplace(name, f);
    return f;
  };
  // Ask only the module whose symbol table has the name (a miss is an error compute-sanitizer reports).
  auto mod = module_of_.find(std::string_view(name));
  if (mod != module_of_.end()) {
    CUfunction f = nullptr;
    check(d_.cuModuleGetFunction(&f, mod->second, name), name);
    return found(f);
  }
  for (CUmodule m : modules_) {
    CUfunction f = nullptr;
    if (d_.cuModuleGetFunction(&f, m, name) == 0) return found(f);
  }
  throw Error(plan_.path() + ": no kernel module of this plan for " + arch_ + " has the kernel " + name +
              " (the plan was compiled by a smelt without it: recompile the plan)");
}

void CudaBackend::launch(const OpLaunch& l, const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned shared, void** args, bool programmatic_ok) {
  auto where = [&] { return l.op ? ": " + l.op->where() : std::string(); };
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || bx > 1024)
    throw Error(plan_.path() + where() + ": kernel " + name + " launched with grid " + std::to_string(gx) + "x" +
                std::to_string(gy) + "x" + std::to_string(gz) + ", block " + std::to_string(bx));
  CUfunction f = function(name);
  if (!skipped_kernels().empty() && skipped_kernels().count(name)) return;
  if (shared > 48 * 1024) {
    unsigned& allowed = shared_set_[f];
    if (allowed < shared) {
      check(d_.cuFuncSetAttribute(f, kFuncAttrMaxDynamicSharedBytes, int(shared)), name);
      allowed = shared;
    }
  }
  if (profile_) {  // bench: an event before each launch (run_profiled)
    CUevent e = nullptr;
    check(d_.cuEventCreate(&e, 0), "creating events");
    profile_->emplace_back(name, e);
    check(d_.cuEventRecord(e, static_cast<CUstream>(l.stream)), "recording events");
  }
  CUresult r;
  const bool programmatic =
      pdl_ && programmatic_ok && (pdl_off_kernels().empty() || !pdl_off_kernels().count(name));
  if (programmatic) {  // programmatic dependent launch: every kernel starts with SMELT_KERNEL_PROLOGUE (kernels/cuda/common.cuh)
    LaunchAttribute attr{};
    attr.id = kLaunchAttrProgrammaticStreamSerialization;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const LaunchConfig cfg{gx, gy, gz, bx, 1, 1, shared, static_cast<CUstream>(l.stream), &attr, 1};
    r = d_.cuLaunchKernelEx(&cfg, f, args, nullptr);
  } else {
    r = d_.cuLaunchKernel(f, gx, gy, gz, bx, 1, 1, shared, static_cast<CUstream>(l.stream), args, nullptr);
  }
  if (r != 0) {
    const char* e = "unknown";
    d_.cuGetErrorName(r, &e);
    throw Error(plan_.path() + where() + ": launching " + name + " failed (" + e + ")");
  }
  ++launches_;
  if (record_kernels_) last_kernels_.push_back(name);
}

void CudaBackend::launch_own(const char* name, unsigned grid_x, unsigned block_x, void** args) {
  OpLaunch l;
  l.stream = stream_;
  launch(l, name, grid_x, 1, 1, block_x, 0, args, true);
}

void CudaBackend::stage_inputs(const int32_t* ids, int64_t p0, int rows) {
  if (rows < 1 || rows > plan_.max_rows())
    plan_.fail("chunk of " + std::to_string(rows) + " rows; the plan allows 1 to " + std::to_string(plan_.max_rows()));
  if (p0 < 0 || p0 + rows > plan_.max_seq_len())
    plan_.fail("the sequence would reach " + std::to_string(p0 + rows) + " tokens but the plan was compiled for " +
               "max_seq_len " + std::to_string(plan_.max_seq_len()));
  // The previous run has finished (run() waits), so the pinned staging is free to reuse.
  std::memcpy(host_ids_, ids, size_t(rows) * 4);
  StepInfo info{p0, rows, 0};
  std::memcpy(host_step_, &info, sizeof info);
  CUdeviceptr ids_dev = arena_ + plan_.fb().buffers()->Get(plan_.token_ids())->offset();
  check(d_.cuMemcpyHtoDAsync(ids_dev, host_ids_, size_t(rows) * 4, stream_), "copying the token ids");
  check(d_.cuMemcpyHtoDAsync(step_, host_step_, sizeof info, stream_), "copying the step info");
}

void CudaBackend::run_op_at(size_t k, int rows) {
  OpLaunch& l = ops_[k];
  l.rows = rows;
  if (is_collective(l.op->spec->kind)) {  // through NCCL (runtime/cuda/nccl.cc)
    if (!comms_) plan_.fail(*l.op, "is a collective, but this cuda backend runs without NCCL communicators");
    comms_->run(l, rank_);
    return;
  }
  run_op(l);  // applies the op's `round` too (in its kernels, or smelt_round_bf16_rows after them)
}

void CudaBackend::run_one(size_t k, int64_t p0, int rows) {
  if (k >= ops_.size()) plan_.fail("has no op " + std::to_string(k));
  if (rows < 1 || rows > plan_.max_rows() || p0 < 0 || p0 + rows > plan_.max_seq_len())
    plan_.fail("run_one: chunk of " + std::to_string(rows) + " rows at " + std::to_string(p0) + " is out of range");
  StepInfo info{p0, rows, 0};
  std::memcpy(host_step_, &info, sizeof info);
  check(d_.cuMemcpyHtoDAsync(step_, host_step_, sizeof info, stream_), "copying the step info");
  last_kernels_.clear();
  record_kernels_ = true;
  OpLaunch* fused = ops_[k].fuse_shared;  // one op alone runs only its own kernels
  OpLaunch* seam = ops_[k].seam_collapse;
  OpLaunch* tail_kv = ops_[k].tail_kv;
  OpLaunch* tail_rope = ops_[k].tail_rope;
  auto restore = [&] {
    ops_[k].fuse_shared = fused;
    ops_[k].seam_collapse = seam;
    ops_[k].tail_kv = tail_kv;
    ops_[k].tail_rope = tail_rope;
  };
  ops_[k].fuse_shared = nullptr;
  ops_[k].seam_collapse = nullptr;
  ops_[k].tail_kv = ops_[k].tail_rope = nullptr;
  try {
    run_op_at(k, rows);
  } catch (...) {
    record_kernels_ = false;
    restore();
    throw;
  }
  restore();
  record_kernels_ = false;
  CUresult r = d_.cuStreamSynchronize(stream_);
  if (r != 0) {
    const char* e = "unknown";
    d_.cuGetErrorName(r, &e);
    throw Error(plan_.path() + ": " + ops_[k].op->where() + " failed on the GPU (" + e + ")");
  }
}

// Host -> device copies go through the backend's stream and wait there: a plain cuMemcpyHtoD from pageable memory may
// return before its DMA lands (CUDA's API synchronisation rules), and it is ordered only with the legacy stream, not
// with the non-blocking stream the kernels run on, so the next kernel could read the old bytes (or the copy land
// after the kernel wrote them).
void CudaBackend::copy_to_device(CUdeviceptr to, const void* from, uint64_t bytes, const char* what) {
  check(d_.cuMemcpyHtoDAsync(to, from, bytes, stream_), what);
  check(d_.cuStreamSynchronize(stream_), what);
}

void CudaBackend::write_buffer(int buffer, const void* in, uint64_t bytes) {
  copy_to_device(arena_ + plan_.fb().buffers()->Get(buffer)->offset(), in, bytes, "writing a buffer");
}

void CudaBackend::read_state(int id, void* out) {
  check(d_.cuMemcpyDtoH(out, states_ + state_offset_[size_t(id)], state_bytes(id)), "reading a state");
}

void CudaBackend::write_state(int id, const void* in) {
  copy_to_device(states_ + state_offset_[size_t(id)], in, state_bytes(id), "writing a state");
}

void CudaBackend::run_ops(int rows, std::vector<CUevent>* marks, std::vector<Span>* spans) {
  static const bool sync_each = env_on("SMELT_CUDA_SYNC");  // debugging: find the op that faults
  // The side stream (plan_side_stream), not while timing op by op or synchronising after each op: a side op is
  // launched right after the last main op it depends on and runs beside the ops that follow; the main stream waits
  // for it before an op that reads what it writes or overwrites what it reads or writes.
  const bool side_now = side_on_ && !marks && !profile_ && !sync_each;
  side_busy_.clear();  // (a run that threw left its ranges behind)
  side_slots_ = 0;
  // SMELT_CUDA_SIDE_JOIN=all: wait for the whole side stream at a conflict (before session 13; A/B timing).
  static const bool join_all = env_is("SMELT_CUDA_SIDE_JOIN", "all");
  if (side_now) launch_side_after(-1, rows);
  int layer = -2;
  for (size_t k = 0; k < ops_.size(); ++k) {
    OpLaunch& l = ops_[k];
    if (marks && l.op->layer != layer) {
      layer = l.op->layer;
      CUevent e = nullptr;
      check(d_.cuEventCreate(&e, 0), "creating events");
      marks->push_back(e);
      check(d_.cuEventRecord(e, stream_), "recording events");
      spans->push_back({layer, int(k), 0, 0, 0.0});
    }
    int64_t before = launches_;
    if (side_now && side_plan_.side[k]) continue;  // launched earlier on the side stream
    if (side_now && !side_busy_.empty())
      if (const int slot = side_busy_.must_wait(access_[k]); slot >= 0)
        side_join(join_all ? side_busy_.queued.back().first : slot);
    run_op_at(k, rows);
    if (side_now) launch_side_after(int(k), rows);
    if (spans) {
      spans->back().ops += 1;
      spans->back().launches += int(launches_ - before);
    }
    if (sync_each && !marks) {
      CUresult r = d_.cuStreamSynchronize(stream_);
      if (r != 0) {
        const char* e = "unknown";
        d_.cuGetErrorName(r, &e);
        throw Error(plan_.path() + ": " + l.op->where() + " failed on the GPU (" + e + ")");
      }
    }
  }
  if (!side_busy_.empty()) side_join(side_busy_.queued.back().first);  // a captured graph ends with every stream joined
}

// Every op's arena ranges (whole buffers: max_rows rows of F32 / I32) and the side stream's schedule
// (side_stream.h plan_side_stream).
void CudaBackend::plan_side_stream() {
  access_.assign(ops_.size(), {});
  for (size_t k = 0; k < ops_.size(); ++k) {
    const OpLaunch& l = ops_[k];
    OpAccess& a = access_[k];
    auto range = [&](CUdeviceptr p, int64_t w) { return BufferRange{p, p + uint64_t(plan_.max_rows()) * uint64_t(w) * 4}; };
    for (size_t j = 0; j < std::size(l.in); ++j)
      if (l.in[j]) a.reads.push_back(range(l.in[j], l.in_w[j]));
    for (size_t j = 0; j < std::size(l.out); ++j)
      if (l.out[j]) a.writes.push_back(range(l.out[j], l.out_w[j]));
    // States, whole, as written (whether an op only reads one is not in its spec): ops that share a state never
    // overlap, in program order.
    for (size_t j = 0; j < l.op->states.size() && j < std::size(l.state); ++j)
      if (l.op->states[j] >= 0 && l.state[j])
        a.writes.push_back({l.state[j], l.state[j] + state_bytes(l.op->states[j])});
    a.side = side_on_ && side_kind(*l.op);
    a.fence = is_collective(l.op->spec->kind);
  }
  plan_fusions();
  plan_seams();
  plan_attn_tails();
  side_plan_ = smelt::runtime::cuda::plan_side_stream(access_);
  if (!env_is("SMELT_CUDA_SIDE_ROOTS", "1")) no_side_roots(side_plan_, access_);  // =1: as before (A/B)
  check_seams();
}

size_t CudaBackend::next_main(size_t k) const {
  for (++k; k < ops_.size() && access_[k].side; ++k) {
  }
  return k;
}

OpAccess CudaBackend::written_rows(DevPtr p, int64_t width) const {
  OpAccess a;
  a.writes.push_back({p, p + uint64_t(plan_.max_rows()) * uint64_t(width) * 4});
  return a;
}

void CudaBackend::fold_access(size_t head, size_t later) {
  access_[head].reads.insert(access_[head].reads.end(), access_[later].reads.begin(), access_[later].reads.end());
  access_[head].writes.insert(access_[head].writes.end(), access_[later].writes.begin(), access_[later].writes.end());
}

// Sublayer seams (OpLaunch::seam_collapse; ops.cc run_seam): the main-stream ops [add ->] hc_expand -> hc_collapse,
// consecutive but for side ops, where the expand reads the add's sum and the collapse the expanded streams, with the
// same hc_mult and rounding and no folded norm. One smelt_hc_seam* launch runs them at the first op, so that op's
// access takes the later ops' (the side stream's schedule and joins see every range where the launch touches it).
// H200, V4.1-Flash slice: one launch instead of three at each FFN's end and two at each attention's. Off with
// $SMELT_CUDA_SEAMS=0 or on plans compiled before the kernels.
void CudaBackend::plan_seams() {
  seams_.clear();
  if (env_is("SMELT_CUDA_SEAMS", "0") || !module_of_.count("smelt_hc_seam")) return;
  auto round = [](const OpLaunch& l) { return detail::is_round(*l.op); };
  for (size_t k = 0; k < ops_.size(); ++k) {
    OpLaunch& h = ops_[k];
    const OpKind hk = h.op->spec->kind;
    if (access_[k].side || (hk != OpKind::Add && hk != OpKind::HcExpand)) continue;
    const size_t ke = hk == OpKind::Add ? next_main(k) : k;
    if (ke >= ops_.size() || ops_[ke].op->spec->kind != OpKind::HcExpand) continue;
    OpLaunch& e = ops_[ke];
    if (hk == OpKind::Add && (!h.out[0] || e.in[1] != h.out[0] || h.in_w[0] != e.in_w[1] || round(h) != round(e)))
      continue;
    const size_t kc = next_main(ke);
    if (kc >= ops_.size() || ops_[kc].op->spec->kind != OpKind::HcCollapse) continue;
    OpLaunch& cl = ops_[kc];
    const bool norm = !cl.w.empty() && cl.w[0];
    const int64_t n = e.op->i("hc_mult");
    if (norm || !e.out[0] || cl.in[0] != e.out[0] || !cl.out[0] || cl.op->i("hc_mult") != n || n > 8 ||
        cl.out_w[0] != e.in_w[1] || round(cl) != round(e))
      continue;
    for (size_t j : {ke, kc})
      if (j != k) fold_access(k, j);
    h.seam_expand = hk == OpKind::Add ? &e : nullptr;
    h.seam_collapse = &cl;
    seams_.push_back({k, ke, kc});
  }
}

// Attention tails (OpLaunch::tail_kv / tail_rope; ops.cc split_attention): a main-stream sparse_attention op, then
// (consecutive but for side ops) its layer's window_kv_update and the inverse rope of its output, which the decode
// merge kernel runs in its own launch (kernels/attention/attention_decode.cu smelt_attn_dec_merge_tail: the same
// operations), so the head's access takes theirs, as a seam's does. The rope then runs before the update: only when
// neither touches what the other writes, and when its output is the attention's own buffer or overlaps it nowhere
// (a thread writes both). Two launches fewer a layer on the critical path. Off with $SMELT_CUDA_ATTN_TAIL=0 or on
// plans compiled before the kernel.
void CudaBackend::plan_attn_tails() {
  if (env_is("SMELT_CUDA_ATTN_TAIL", "0") || !module_of_.count("smelt_attn_dec_merge_tail")) return;
  for (size_t k = 0; k < ops_.size(); ++k) {
    OpLaunch& a = ops_[k];
    if (access_[k].side || a.op->spec->kind != OpKind::SparseAttention || !a.out[0]) continue;
    size_t j = next_main(k), first = 0, last = 0;
    OpLaunch *kv = nullptr, *rope = nullptr;
    if (j < ops_.size() && ops_[j].op->spec->kind == OpKind::WindowKvUpdate && ops_[j].in[0] && ops_[j].state[0]) {
      kv = &ops_[j];
      first = last = j;
      j = next_main(j);
    }
    if (j < ops_.size() && ops_[j].op->spec->kind == OpKind::Rope) {
      const OpLaunch& r = ops_[j];
      const int64_t hd = r.op->i("head_dim"), rd = r.op->i("rope_dim");
      const bool apart = r.out[0] == a.out[0] ||
                         !hazard(written_rows(a.out[0], a.out_w[0]), written_rows(r.out[0], r.out_w[0]));
      const bool ok = r.op->i("inverse") != 0 && r.in[0] == a.out[0] && r.out[0] && r.in_w[0] == a.out_w[0] &&
                      r.out_w[0] == a.out_w[0] && hd == a.op->i("head_dim") && r.op->i("heads") == a.op->i("heads") &&
                      rd > 0 && rd <= 512 && (hd - rd) % 2 == 0 && apart &&
                      (!kv || !hazard(access_[j], access_[first]));  // first: the kv update's index
      if (ok) {
        rope = &ops_[j];
        if (!kv) first = j;
        last = j;
      }
    }
    if (!kv && !rope) continue;
    fold_access(k, first);
    if (last != first) fold_access(k, last);
    a.tail_kv = kv;
    a.tail_rope = rope;
    Seam t{k, first, last};
    t.tail = true;
    seams_.push_back(t);
  }
}

// Seams by their collapse: an add-headed group and the expand-headed one inside it are one seam (the add's launch
// runs it when its buffers allow, else the expand's). Attention tails are not seams.
size_t CudaBackend::seams() const {
  std::set<size_t> collapses;
  for (const Seam& s : seams_)
    if (!s.tail) collapses.insert(s.collapse);
  return collapses.size();
}

// A side op launched after one of a seam's ops but the last runs after the seam's launch (at the first op): it must
// neither touch what the seam's later ops write nor write what they read, or the seam is undone (its first op's
// access stays the wider one: only more joins).
void CudaBackend::check_seams() {
  std::vector<Seam> kept;
  for (const Seam& s : seams_) {
    bool ok = true;
    for (size_t m = s.head; m < s.collapse && ok; ++m)
      for (int side : side_plan_.after[m + 1])
        for (size_t later : {s.expand, s.collapse})
          if (later > m && hazard(access_[size_t(side)], access_[later])) ok = false;
    if (ok) {
      kept.push_back(s);
    } else {
      if (env_is("SMELT_CUDA_SEAMS", "why"))
        std::fprintf(stderr, "%s at %s undone: a side op launched inside it conflicts with its later ops\n",
                     s.tail ? "attention tail" : "seam", ops_[s.head].op->where().c_str());
      ops_[s.head].seam_expand = nullptr;
      ops_[s.head].seam_collapse = nullptr;
      ops_[s.head].tail_kv = ops_[s.head].tail_rope = nullptr;
    }
  }
  seams_ = kept;
}

// Pairs of ops whose kernels one launch may run (OpLaunch::fuse_shared): a main-stream moe_experts op and the
// swiglu_mlp right after it on the same input (the V4.1 shared expert; ops.cc try_experts_with_shared pairs their
// kernels where it has a pair: the wgmma ups on sm_90 with the model's numerics, the weight-only ring ups on sm_80+
// under fp32 numerics), when the swiglu_mlp's output overlaps nothing the moe_experts op reads or writes: the arena
// is planned in program order, so that output may share bytes with the routing's results, which are dead by the
// swiglu_mlp but still read by the combine. The moe_experts op's access then writes that output too, so that the
// side stream's schedule and joins see the write where it happens. On by default since session 26, the ups paired
// and the downs as two launches ($SMELT_CUDA_FUSE_SHARED unset or =up; =1 pairs the downs too, =0 off): H200, V4.1
// slice, sm_90 path 1.123-1.128 -> 1.094-1.103 ms a step (=1: 1.116-1.122). Session 22 had measured it slower (the
// Engram projection after the first paired layer took 25-40 us more); since session 24 that projection runs on the
// side stream a layer earlier (docs/performance.md "Session 26").
void CudaBackend::plan_fusions() {
  if (env_off("SMELT_CUDA_FUSE_SHARED")) return;
  for (size_t k = 0; k + 1 < ops_.size(); ++k) {
    OpLaunch& a = ops_[k];
    OpLaunch& b = ops_[k + 1];
    if (a.op->spec->kind != OpKind::MoeExperts || b.op->spec->kind != OpKind::SwigluMlp) continue;
    if (access_[k].side || access_[k + 1].side || !a.in[0] || a.in[0] != b.in[0] || !b.out[0]) continue;
    const OpAccess y = written_rows(b.out[0], b.out_w[0]);  // the swiglu_mlp's output
    if (hazard(access_[k], y)) continue;
    a.fuse_shared = &b;
    access_[k].writes.push_back(y.writes[0]);
  }
}

// The side ops due after main op m (-1: before the first) on the side stream, after the main stream's work so far.
void CudaBackend::launch_side_after(int m, int rows) {
  for (int k : side_plan_.after[size_t(m + 1)]) {
    OpLaunch& l = ops_[size_t(k)];
    check(d_.cuEventRecord(side_fork_, stream_), "recording events");
    check(d_.cuStreamWaitEvent(side_, side_fork_, 0), "forking the side stream");
    l.stream = side_, l.scratch = side_scratch_, l.sms = side_sms_, l.side = true;
    try {
      run_op_at(size_t(k), rows);
    } catch (...) {
      l.stream = stream_, l.scratch = scratch_, l.sms = dev_.sms, l.side = false;
      throw;
    }
    l.stream = stream_, l.scratch = scratch_, l.sms = dev_.sms, l.side = false;  // run_one runs it on the main stream
    const int slot = side_slots_++;
    if (size_t(slot) == side_done_.size()) {
      CUevent e = nullptr;
      check(d_.cuEventCreate(&e, kEventDisableTiming), "creating events");
      side_done_.push_back(e);
    }
    check(d_.cuEventRecord(side_done_[size_t(slot)], side_), "recording events");
    side_busy_.add(slot, access_[size_t(k)]);
  }
}

void CudaBackend::side_join(int slot) {
  check(d_.cuStreamWaitEvent(stream_, side_done_[size_t(slot)], 0), "joining the side stream");
  side_busy_.joined(slot);
}

void CudaBackend::make_current() { check(d_.cuCtxSetCurrent(ctx_), "making the GPU's context current"); }

void CudaBackend::run(const int32_t* ids, int64_t p0, int rows) {
  make_current();
  stage_inputs(ids, p0, rows);
  last_rows_ = rows;
  int64_t before = launches_;
  if (graphs_ && rows == 1) {
    auto it = graphs_by_rows_.find(rows);
    if (it == graphs_by_rows_.end()) {
      // Capture once: the kernels read the position from `step`, so the same graph serves every decode step.
      check(d_.cuStreamBeginCapture(stream_, kCaptureModeThreadLocal), "capturing the decode graph");
      try {
        run_ops(rows);
      } catch (...) {
        CUgraph g = nullptr;
        d_.cuStreamEndCapture(stream_, &g);
        if (g) d_.cuGraphDestroy(g);
        throw;
      }
      CUgraph g = nullptr;
      check(d_.cuStreamEndCapture(stream_, &g), "capturing the decode graph");
      // SMELT_CUDA_GRAPH_DOT=FILE: the captured graph's nodes and edges as Graphviz (cuGraphDebugDotPrint).
      if (const char* dot = std::getenv("SMELT_CUDA_GRAPH_DOT"); dot && *dot && d_.cuGraphDebugDotPrint)
        d_.cuGraphDebugDotPrint(g, dot, 1u /* CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE */);
      CUgraphExec exec = nullptr;
      CUresult r = d_.cuGraphInstantiateWithFlags(&exec, g, 0);
      d_.cuGraphDestroy(g);
      check(r, "instantiating the decode graph");
      it = graphs_by_rows_.emplace(rows, exec).first;
      graph_launches_[rows] = launches_ - before;
    }
    check(d_.cuEventRecord(ev_start_, stream_), "recording events");
    check(d_.cuGraphLaunch(it->second, stream_), "launching the decode graph");
    last_launches_ = graph_launches_[rows];
  } else {
    check(d_.cuEventRecord(ev_start_, stream_), "recording events");
    run_ops(rows);
    last_launches_ = launches_ - before;
  }
  check(d_.cuEventRecord(ev_end_, stream_), "recording events");
  check(d_.cuStreamSynchronize(stream_), "running the plan (set SMELT_CUDA_SYNC=1 to find the op)");
  float ms = 0.f;
  check(d_.cuEventElapsedTime(&ms, ev_start_, ev_end_), "timing the run");
  last_ms_ = ms;
}

double CudaBackend::replay_back_to_back(int32_t id, int64_t p0, int n) {
  make_current();
  auto it = graphs_by_rows_.find(1);
  if (it == graphs_by_rows_.end() || n < 1) plan_.fail("replay_back_to_back: no decode graph captured yet");
  stage_inputs(&id, p0, 1);
  check(d_.cuEventRecord(ev_start_, stream_), "recording events");
  for (int k = 0; k < n; ++k) check(d_.cuGraphLaunch(it->second, stream_), "launching the decode graph");
  check(d_.cuEventRecord(ev_end_, stream_), "recording events");
  check(d_.cuStreamSynchronize(stream_), "running the plan");
  float ms = 0.f;
  check(d_.cuEventElapsedTime(&ms, ev_start_, ev_end_), "timing the run");
  return double(ms) / n;
}

std::vector<CudaBackend::Span> CudaBackend::run_timed(const int32_t* ids, int64_t p0, int rows) {
  stage_inputs(ids, p0, rows);
  std::vector<CUevent> marks;
  std::vector<Span> spans;
  try {
    run_ops(rows, &marks, &spans);
    CUevent end = nullptr;
    check(d_.cuEventCreate(&end, 0), "creating events");
    marks.push_back(end);
    check(d_.cuEventRecord(end, stream_), "recording events");
    check(d_.cuStreamSynchronize(stream_), "running the plan");
    for (size_t i = 0; i < spans.size(); ++i) {
      float ms = 0.f;
      check(d_.cuEventElapsedTime(&ms, marks[i], marks[i + 1]), "timing layers");
      spans[i].ms = ms;
    }
  } catch (...) {
    for (CUevent e : marks) d_.cuEventDestroy(e);
    throw;
  }
  for (CUevent e : marks) d_.cuEventDestroy(e);
  return spans;
}

void CudaBackend::read_logits(float* out, int rows) {
  make_current();
  CUdeviceptr p = arena_ + plan_.fb().buffers()->Get(plan_.logits())->offset();
  check(d_.cuMemcpyDtoH(out, p, size_t(rows) * size_t(plan_.vocab()) * 4), "reading the logits");
}

void CudaBackend::read_buffer(int buffer, void* out, uint64_t bytes) {
  CUdeviceptr p = arena_ + plan_.fb().buffers()->Get(buffer)->offset();
  check(d_.cuMemcpyDtoH(out, p, bytes), "reading a buffer");
}

void CudaBackend::reset_state() {
  make_current();
  check(d_.cuMemsetD8Async(states_, 0, std::max<uint64_t>(states_bytes_, 256), stream_), "clearing the states");
  check(d_.cuStreamSynchronize(stream_), "clearing the states");
}

void CudaBackend::fill_states_synthetic(uint64_t seed) {
  reset_state();
  const int n = plan_.fb().states() ? int(plan_.fb().states()->size()) : 0;
  for (int id = 0; id < n; ++id) {
    const auto* st = plan_.fb().states()->Get(id);
    const std::string kind = st->kind() ? st->kind()->str() : "";
    if (kind == "engram_history") continue;  // compressed token ids: 0 is a valid one
    CUdeviceptr p = states_ + state_offset_[size_t(id)];
    unsigned long long count = state_bytes(id) / 4, sd = seed * 1000003ull + uint64_t(id);
    float amp = 1.f;
    void* args[] = {&p, &count, &sd, &amp};
    launch_own("smelt_synth_f32", unsigned(std::min<unsigned long long>((count + 255) / 256, 4096)), 256, args);
  }
  check(d_.cuStreamSynchronize(stream_), "filling the states");
}

uint64_t CudaBackend::state_bytes(int id) const {
  std::vector<int64_t> shape = plan_.state_shape(id);
  return uint64_t(shape[0]) * uint64_t(shape[1]) * 4;
}

}  // namespace smelt::runtime::cuda
