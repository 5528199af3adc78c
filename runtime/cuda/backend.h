// The cuda backend: runs a plan's ops on one GPU with the plan's NVRTC-compiled kernels (runtime/cuda/ops*.cc
// say which kernel each op launches; runtime/cuda/launch.h is that contract).
//
// Start-up: pick the device, check the plan has a cubin for its arch (never JIT), load the modules, allocate
// the arena (plan.arena_bytes), the states (zeroed) and the weights (uploaded, or synthesized on the GPU),
// prepare every op (scratch). A run: token ids and StepInfo copied in, then the ops launched in order on one
// stream — for one row (decode) as a CUDA graph captured on first use and replayed after; other row counts
// eagerly. `round = "bf16"` on an op is applied by its launcher (runtime/cuda/ops.cc), as on the cpu.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/sampling/reference.h"
#include "runtime/cuda/device_weights.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/launch.h"
#include "runtime/cuda/side_stream.h"
#include "runtime/plan.h"

namespace smelt::runtime::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  std::string arch;  // sm_90
  uint64_t memory_bytes = 0;
  int sms = 0;
};

struct BackendOptions {
  int device = 0;
  std::string model_dir;  // "" = the plan's model_dir
  bool synthetic = false; // --synthetic-weights: values generated on the GPU from `seed`
  uint64_t seed = 0;
  bool graphs = true;     // decode as CUDA graphs ($SMELT_CUDA_GRAPHS=0 also turns them off)
  // Partitioned plans: the GPU of each rank this process runs, by local position (the i-th lowest of local_ranks
  // on devices[i % size]); empty = the i-th on (device + i) % count. In one process running every rank, i = rank.
  std::vector<int> devices;
  // Several processes (docs/partition.md "Several processes / hosts"): the global ranks this process runs
  // (empty = all of them) and the rendezvous HOST:PORT ("" = one process; the process with rank 0 listens
  // there). A process running every rank ignores `coordinator`.
  std::vector<int> local_ranks;
  std::string coordinator;
  double bootstrap_timeout_s = 300;
};

// The cubin arch of `plan` to load on a GPU of compute capability major.minor: exactly sm_<major><minor>, else
// the newest sm_<major>x with x <= minor (binary compatible). Throws smelt::Error with one sentence when
// there is none (exposed for tests).
std::string choose_arch(const Plan& plan, const std::string& gpu_name, int major, int minor);

// The global function symbols of a cubin (an ELF64 image), i.e. its kernels' entry points; empty when the image
// is not an ELF this can read (the backend then asks every module for a name). Exposed for tests.
std::vector<std::string> cubin_functions(const std::vector<uint8_t>& image);

class NcclComms;  // runtime/cuda/nccl.h

class CudaBackend final : public Launcher {
 public:
  CudaBackend(const Plan& plan, const BackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const DeviceInfo& device() const { return dev_; }
  const std::string& arch() const { return arch_; }
  const Plan& plan() const { return plan_; }
  // A rank of a partitioned plan: its collectives go through `comms` as global rank `rank` (CudaSession).
  void attach(const NcclComms* comms, int rank) { comms_ = comms, rank_ = rank; }
  // Makes this backend's context current on the calling thread (a partitioned plan runs a thread per rank).
  void make_current();

  // Runs the main forward over `rows` tokens at positions p0 .. p0+rows-1 (graph for one row when graphs
  // are on) and waits; logits of the chunk are then read with read_logits.
  void run(const int32_t* ids, int64_t p0, int rows);
  void read_logits(float* out, int rows);
  // Sampling on the GPU (kernels/sampling/sampling.cu, runtime/cuda/sample.cc): the token kernels::sample_top_p
  // picks (greedy when p.temperature <= 0) from the last row of the last run()'s logits for draw number `step`;
  // copies back one int32, not the row. can_sample(): this plan's modules have the sampling kernels (plans
  // compiled before them do not; use the host Sampler on read_logits then). Output rank only.
  bool can_sample();
  int32_t sample(const kernels::SamplerParams& p, uint64_t step);
  // Where the logits rows live on the GPU (0 for a rank plan without the head): the broadcast between processes.
  CUdeviceptr logits_device() const {
    return plan_.logits() < 0 ? 0 : arena_ + plan_.fb().buffers()->Get(plan_.logits())->offset();
  }
  void reset_state();  // zero every state (a new sequence)
  // Bench: every state as if a prompt had filled it (rings and pools uniform in [-1, 1) from `seed`; Engram
  // histories token 0), so a decode step at a long position can be timed without running the prompt.
  void fill_states_synthetic(uint64_t seed);

  // Bench support. Per-layer GPU times of one eager run (events where op.layer changes; layer -1 = outside
  // the blocks); kernels launched by the last run (a graph replay counts the kernels it holds).
  struct Span {
    int layer = -1;
    int first_op = 0, ops = 0, launches = 0;
    double ms = 0.0;
  };
  std::vector<Span> run_timed(const int32_t* ids, int64_t p0, int rows);
  // GPU time of the last run() (events around the forward, after the input copies).
  double last_run_ms() const { return last_ms_; }
  // Bench: GPU ms a replay of the one-row decode graph (captured by an earlier run()) with n replays enqueued back to
  // back at position p0 and one event pair around them: the step without the host's launch gap between replays.
  double replay_back_to_back(int32_t id, int64_t p0, int n);
  int64_t last_launches() const { return last_launches_; }
  size_t seams() const;  // sublayer seams (distinct hc_collapse ops) run as one launch where their buffers allow
  void read_buffer(int buffer, void* out, uint64_t bytes);  // row 0 onwards of an arena buffer
  const DeviceWeights& weights() const { return weights_; }
  uint64_t state_bytes(int id) const;
  // Debugging tools (cuda_gpu_compare bisect): op `k` alone (eager, its `round` applied) over `rows` rows at p0
  // on whatever its buffers and states hold, then waits; buffer and state copies (bytes from row 0 / offset 0).
  void run_one(size_t k, int64_t p0, int rows);
  void write_buffer(int buffer, const void* in, uint64_t bytes);
  void read_state(int id, void* out);
  void write_state(int id, const void* in);
  const std::vector<std::string>& last_kernels() const { return last_kernels_; }  // launched by run_one
  // Bench support (runtime/cuda/bench.cc): one eager run with an event before every kernel launch, the GPU held
  // back by a spin kernel while the launches are queued so the times are GPU times, not launch gaps. Per launch:
  // op index, kernel name, ms. `moe_idx` (optional) gets each moe_experts op's idx input of that run, copied in
  // the stream right after the op (the arena reuses the buffer later in the step).
  struct KernelTime {
    int op = -1;
    std::string kernel;
    double ms = 0.0;
  };
  std::vector<KernelTime> run_profiled(const int32_t* ids, int64_t p0, int rows,
                                       std::map<int, std::vector<int32_t>>* moe_idx = nullptr);
  CUstream stream() const { return stream_; }
  // bytes from host memory (pageable or pinned) to `to`, ordered on stream() and complete on return.
  void copy_to_device(CUdeviceptr to, const void* from, uint64_t bytes, const char* what);

  void launch(const OpLaunch& l, const char* name, unsigned grid_x, unsigned grid_y, unsigned grid_z,
              unsigned block_x, unsigned shared_bytes, void** args, bool programmatic) override;
  // The backend's own kernels (kernels/backend): same lookup, no op.
  void launch_own(const char* name, unsigned grid_x, unsigned block_x, void** args);

 private:
  const Plan& plan_;
  const Driver& d_;
  DeviceInfo dev_;
  std::string arch_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUmodule> modules_;
  std::map<std::string, CUfunction, std::less<>> functions_;
  std::map<std::string, CUmodule, std::less<>> module_of_;  // entry point -> module (cubin symbol tables)
  std::map<CUfunction, unsigned> shared_set_;  // dynamic shared memory already allowed per function
  CUdeviceptr arena_ = 0, states_ = 0, scratch_ = 0, step_ = 0;
  std::vector<uint64_t> state_offset_;
  uint64_t states_bytes_ = 0;
  DeviceWeights weights_;
  std::vector<OpLaunch> ops_;
  void* host_ids_ = nullptr;   // pinned staging
  void* host_step_ = nullptr;
  void* host_logits_ = nullptr;
  void* host_token_ = nullptr;    // pinned, sample()'s result
  CUdeviceptr sample_scratch_ = 0;  // sample(): allocated on first use
  int last_rows_ = 0;               // rows of the last run()
  CUevent ev_start_ = nullptr, ev_end_ = nullptr;
  bool graphs_ = true;
  std::map<int, CUgraphExec> graphs_by_rows_;
  std::map<int, int64_t> graph_launches_;
  double last_ms_ = 0.0;
  bool record_kernels_ = false;
  bool pdl_ = false;  // launch with programmatic stream serialization (sm_90+)
  // The side stream: the ops the compiler marked `stream = 1` (compiler/passes/schedule_streams.cc) run there,
  // beside the main stream's ops (run_ops). side_busy_: the arena ranges and states the side stream's queued ops
  // read or write; a main-stream op that touches one first waits for the side stream.
  CUstream side_ = nullptr;
  CUevent side_fork_ = nullptr;
  std::vector<CUevent> side_done_;  // recorded after the side op of that slot (the side ops of a run, in order)
  int side_slots_ = 0;              // slots used in this run
  CUdeviceptr side_scratch_ = 0;
  CUdeviceptr zeroed_ = 0;  // every op's Prepare::zeroed_bytes, one after another
  bool side_on_ = false;
  int side_sms_ = 0;  // the multiprocessors side ops size their grids for (SMELT_CUDA_SIDE_SMS, else all)
  SideBusy side_busy_;
  std::vector<OpAccess> access_;  // per op: the arena ranges it reads and writes, its states (side_stream.h)
  SideSchedule side_plan_;
  void plan_side_stream();
  void plan_fusions();  // OpLaunch::fuse_shared pairs (called by plan_side_stream before its schedule)
  void plan_seams();   // OpLaunch::seam_collapse groups (plan_side_stream, before its schedule)
  void plan_attn_tails();  // OpLaunch::tail_kv / tail_rope (plan_side_stream, before its schedule)
  void check_seams();  // ... both undone where a side op launched inside the group conflicts with its later ops
  size_t next_main(size_t k) const;             // the first main-stream op after op k
  void fold_access(size_t head, size_t later);  // op `later`'s ranges into op `head`'s (it runs them in its launch)
  OpAccess written_rows(DevPtr p, int64_t width) const;  // max_rows rows of `width` floats at p, as a write
  struct Seam {
    size_t head, expand, collapse;
    bool tail = false;  // an attention tail (head: the attention, expand / collapse: its first / last fused op)
  };
  std::vector<Seam> seams_;
  void launch_side_after(int m, int rows);
  void side_join(int slot);
  std::vector<std::pair<std::string, CUevent>>* profile_ = nullptr;  // run_profiled: an event per launch
  std::vector<std::string> last_kernels_;
  int64_t launches_ = 0, last_launches_ = 0;
  const NcclComms* comms_ = nullptr;
  int rank_ = 0;

  CUfunction function(const char* name);
  void stage_inputs(const int32_t* ids, int64_t p0, int rows);
  void run_op_at(size_t k, int rows);
  void run_ops(int rows, std::vector<CUevent>* marks = nullptr, std::vector<Span>* spans = nullptr);
  void release() noexcept;
};

}  // namespace smelt::runtime::cuda
