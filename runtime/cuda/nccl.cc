#include "runtime/cuda/nccl.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "frontends/error.h"
#include "runtime/cuda/driver.h"
#include "runtime/net/bootstrap.h"

namespace smelt::runtime::cuda {

namespace {

template <typename F>
void bind(void* lib, const std::string& library, F& fn, const char* symbol) {
  void* p = dlsym(lib, symbol);
  if (!p) throw Error("NCCL " + library + " lacks " + symbol + ": partitioned plans on the cuda backend need NCCL 2.19 or newer");
  fn = reinterpret_cast<F>(p);
}

std::unique_ptr<Nccl> open_nccl(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw Error("no NCCL found (" + library + "): partitioned plans on the cuda backend need it");
  auto n = std::make_unique<Nccl>();
  Nccl& x = *n;
#define SMELT_BIND(field) bind(lib, library, x.field, #field)
  SMELT_BIND(ncclGetVersion);
  SMELT_BIND(ncclGetUniqueId);
  SMELT_BIND(ncclCommInitRank);
  SMELT_BIND(ncclCommInitAll);
  SMELT_BIND(ncclCommDestroy);
  SMELT_BIND(ncclCommAbort);
  SMELT_BIND(ncclGetErrorString);
  SMELT_BIND(ncclAllReduce);
  SMELT_BIND(ncclAllGather);
  SMELT_BIND(ncclSend);
  SMELT_BIND(ncclRecv);
  SMELT_BIND(ncclBroadcast);
  SMELT_BIND(ncclGroupStart);
  SMELT_BIND(ncclGroupEnd);
#undef SMELT_BIND
  return n;
}

std::vector<int64_t> pair_of(int64_t a, int64_t b) { return {std::min(a, b), std::max(a, b)}; }

void no_shared_gpu(const std::vector<int64_t>& key, const std::vector<int>& devs) {
  std::set<int> distinct(devs.begin(), devs.end());
  if (distinct.size() != devs.size())
    throw Error("ranks " + net::rank_list(key) + " exchange rows through NCCL but share a GPU: give every rank of a group its own " +
                "GPU (--devices), or run the plan with --backend cpu");
}

// ncclCommInitRank works on the calling thread's current device; the backends use the driver API, and the
// runtime API NCCL uses sees a device's primary context made current here (the backend holds it open).
void make_device_current(int device) {
  const Driver& d = driver();
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, device), "opening the GPU for NCCL");
  CUcontext ctx = nullptr;
  check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "opening the GPU for NCCL");
  CUresult r = d.cuCtxSetCurrent(ctx);
  d.cuDevicePrimaryCtxRelease(dev);
  check(r, "opening the GPU for NCCL");
}

}  // namespace

const Nccl& load_nccl(const std::string& library) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Nccl>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(library);
  if (it == loaded.end()) it = loaded.emplace(library, open_nccl(library)).first;
  return *it->second;
}

const Nccl& nccl() { return load_nccl("libnccl.so.2"); }

void check_nccl(ncclResult_t r, const char* what) {
  if (r == 0) return;
  const char* s = nccl().ncclGetErrorString ? nccl().ncclGetErrorString(r) : nullptr;
  throw Error(std::string("NCCL error in ") + what + ": " + (s ? s : "error " + std::to_string(r)));
}

std::vector<std::vector<int64_t>> NcclComms::keys(const std::vector<const Plan*>& plans) {
  // Every group and every sending pair of the ranks' forwards and programs, and the order of the pairs' messages:
  // NCCL matches a pair's sends and recvs in the order they are issued, so both sides must list the same tags.
  std::set<std::vector<int64_t>> keys;
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> sent, received;
  for (size_t r = 0; r < plans.size(); ++r) {
    auto scan = [&](const std::vector<OpRef>& ops) {
      for (const OpRef& op : ops) {
        if (!is_collective(op.spec->kind)) continue;
        const OpKind k = op.spec->kind;
        if (k == OpKind::AllReduce || k == OpKind::AllGather) {
          keys.insert(op.ints("group"));
        } else {
          keys.insert(pair_of(int64_t(r), op.i("peer")));
          if (k == OpKind::Send) sent[{int64_t(r), op.i("peer")}].push_back(op.i("tag"));
          else received[{op.i("peer"), int64_t(r)}].push_back(op.i("tag"));
        }
      }
    };
    scan(plans[r]->ops());
    for (const Program& p : plans[r]->programs()) scan(p.ops);
  }
  for (const auto& [link, tags] : sent)
    if (received[link] != tags)
      throw Error(plans[0]->path() + ": rank " + std::to_string(link.first) + " sends to rank " +
                  std::to_string(link.second) + " in a tag order the receiver does not follow; NCCL matches messages " +
                  "in issue order (run this plan with --backend cpu)");
  for (const auto& key : keys)
    for (int64_t m : key)
      if (m < 0 || m >= int64_t(plans.size())) throw Error(plans[0]->path() + ": a collective names rank " + std::to_string(m));
  return {keys.begin(), keys.end()};
}

NcclComms::NcclComms(const std::vector<int>& devices, const std::vector<const Plan*>& plans) {
  nccl();  // the one-sentence error before anything else
  // NVLink multicast (NVLS) stays off unless asked for: decode-sized messages gain nothing from it, and a process
  // that dies holding multicast objects can leave shared GPUs unusable.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  try {
    for (const auto& key : keys(plans)) {
      std::vector<int> devs;
      for (int64_t m : key) {
        if (m >= int64_t(devices.size())) throw Error(plans[0]->path() + ": a collective names rank " + std::to_string(m));
        devs.push_back(devices[size_t(m)]);
      }
      make(key, devs);
    }
  } catch (...) {
    destroy();
    throw;
  }
}

NcclComms::NcclComms(const std::vector<int>& devices, const std::vector<const Plan*>& plans,
                     const std::vector<ncclUniqueId>& ids, const World& world) {
  const Nccl& n = nccl();
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // as above
  const std::vector<std::vector<int64_t>> ks = keys(plans);
  if (ids.size() != ks.size())
    throw Error(plans[0]->path() + ": the coordinator sent " + std::to_string(ids.size()) + " NCCL ids but this process " +
                "needs " + std::to_string(ks.size()) + " (run the same smelt-run build everywhere)");
  try {
    // Keys in the same (sorted) order in every process: a blocking init waits only for members that have
    // finished every earlier key, so the processes cannot wait on each other in a circle.
    for (size_t k = 0; k < ks.size(); ++k) {
      const std::vector<int64_t>& key = ks[k];
      std::vector<int> here, devs;
      for (size_t pos = 0; pos < key.size(); ++pos) {
        const int64_t m = key[pos];
        if (m < int64_t(devices.size()) && devices[size_t(m)] >= 0) here.push_back(int(pos)), devs.push_back(devices[size_t(m)]);
      }
      if (here.empty()) continue;
      std::vector<int64_t> local_key;
      for (int pos : here) local_key.push_back(key[size_t(pos)]);
      no_shared_gpu(local_key, devs);
      std::vector<ncclComm_t>& cs = comms_.emplace(key, std::vector<ncclComm_t>(key.size(), nullptr)).first->second;
      // Several members here: one group, so that NCCL does not wait for the first before starting the second.
      ncclResult_t first = n.ncclGroupStart();
      try {
        for (size_t i = 0; i < here.size() && first == 0; ++i) {
          make_device_current(devs[i]);
          first = n.ncclCommInitRank(&cs[size_t(here[i])], int(key.size()), ids[k], here[i]);
        }
      } catch (...) {
        n.ncclGroupEnd();
        throw;
      }
      ncclResult_t end = n.ncclGroupEnd();
      check_nccl(first ? first : end, ("creating the communicator of ranks " + net::rank_list(key)).c_str());
    }
    if (world.size > 1) {
      make_device_current(world.device);
      check_nccl(n.ncclCommInitRank(&world_, world.size, world.id, world.self), "creating the communicator of the processes");
      world_root_ = world.root;
    }
  } catch (const Error& e) {
    destroy();
    // The usual causes across processes, which NCCL's one-word descriptions do not name.
    const std::string m = e.what();
    if (m.rfind("NCCL error", 0) != 0) throw;
    throw Error(m + " (NCCL_DEBUG=INFO says why; processes on one host need distinct GPUs, --devices; " +
                "NCCL_SOCKET_IFNAME picks the network)");
  } catch (...) {
    destroy();
    throw;
  }
}

void NcclComms::make(const std::vector<int64_t>& key, const std::vector<int>& devs) {
  no_shared_gpu(key, devs);
  std::vector<ncclComm_t> cs(key.size(), nullptr);
  check_nccl(nccl().ncclCommInitAll(cs.data(), int(cs.size()), devs.data()), "creating the communicators");
  comms_.emplace(key, std::move(cs));
}

NcclComms::~NcclComms() {
  if (!aborted_) destroy();  // else abort() released them
}

void NcclComms::destroy() noexcept {
  for (auto& [key, cs] : comms_)
    for (ncclComm_t& c : cs)
      if (c) nccl().ncclCommDestroy(c), c = nullptr;
  if (world_) nccl().ncclCommDestroy(world_), world_ = nullptr;
}

void NcclComms::abort() noexcept {
  if (aborted_.exchange(true)) return;
  for (auto& [key, cs] : comms_)
    for (ncclComm_t c : cs)
      if (c) nccl().ncclCommAbort(c);
  if (world_) nccl().ncclCommAbort(world_);
}

void NcclComms::broadcast(DevPtr buffer, size_t count, void* stream) const {
  if (!world_ || aborted_)
    throw Error(std::string("no NCCL communicator between the processes") + (aborted_ ? " (a rank failed)" : ""));
  void* p = reinterpret_cast<void*>(buffer);
  check_nccl(nccl().ncclBroadcast(p, p, count, kNcclFloat32, world_root_, world_, stream), "broadcasting the logits");
}

ncclComm_t NcclComms::comm(const std::vector<int64_t>& key, int rank, int& position) const {
  auto it = comms_.find(key);
  auto at = std::find(key.begin(), key.end(), int64_t(rank));
  if (it == comms_.end() || at == key.end() || aborted_ || !it->second[size_t(at - key.begin())])
    throw Error("rank " + std::to_string(rank) + " has no NCCL communicator for this collective" +
                (aborted_ ? " (another rank failed)" : ""));
  position = int(at - key.begin());
  return it->second[size_t(position)];
}

uint64_t NcclComms::scratch_bytes(const Plan&, const OpRef& op, int64_t max_rows) {
  if (op.spec->kind != OpKind::AllGather) return 0;
  int64_t total = 0;
  for (int64_t w : op.ints("widths")) total += (w + 63) / 64 * 64;  // each member's block 256-byte aligned
  return uint64_t(max_rows) * uint64_t(total) * 4;
}

void NcclComms::run(const OpLaunch& l, int rank) const {
  const Nccl& n = nccl();
  const Driver& d = driver();
  const OpRef& op = *l.op;
  const size_t rows = size_t(l.rows);
  int pos = 0;
  switch (op.spec->kind) {
    case OpKind::AllReduce: {
      ncclComm_t c = comm(op.ints("group"), rank, pos);
      const size_t count = rows * size_t(l.out_w[0]);
      DevPtr x = l.in[0];
      if (!x) {  // an empty shard contributes zeros: reduce in place from a zeroed output
        check(d.cuMemsetD8Async(l.out[0], 0, count * 4, static_cast<CUstream>(l.stream)), "zeroing an all_reduce input");
        x = l.out[0];
      }
      check_nccl(n.ncclAllReduce(reinterpret_cast<const void*>(x), reinterpret_cast<void*>(l.out[0]), count,
                                 kNcclFloat32, kNcclSum, c, l.stream),
                 "all_reduce");
      if (op.attrs.count("round") && op.s("round") == "bf16") {
        const int64_t total = int64_t(count);
        DevPtr y = l.out[0];
        void* args[] = {&y, const_cast<int64_t*>(&total), nullptr};
        l.backend->launch(l, "smelt_round_bf16_rows", unsigned(std::min<int64_t>((total + 255) / 256, 4096)), 1, 1,
                          256, 0, args, true);
      }
      break;
    }
    case OpKind::AllGather: {
      const std::vector<int64_t>& group = op.ints("group");
      const std::vector<int64_t>& widths = op.ints("widths");
      ncclComm_t c = comm(group, rank, pos);
      int64_t total = 0;
      for (int64_t w : widths) total += w;
      // Peers' rows arrive whole ([rows, w_k] each) in scratch, then go side by side into y with strided copies.
      std::vector<DevPtr> part(group.size(), 0);
      uint64_t off = 0;
      for (size_t k = 0; k < group.size(); ++k) {
        part[k] = int(k) == pos ? l.in[0] : l.scratch + off;
        off += rows * uint64_t((widths[k] + 63) / 64 * 64) * 4;
      }
      check_nccl(n.ncclGroupStart(), "all_gather");
      for (size_t k = 0; k < group.size(); ++k) {
        if (int(k) == pos) continue;
        if (widths[size_t(pos)] > 0)
          check_nccl(n.ncclSend(reinterpret_cast<const void*>(l.in[0]), rows * size_t(widths[size_t(pos)]), kNcclFloat32,
                                int(k), c, l.stream),
                     "all_gather");
        if (widths[k] > 0)
          check_nccl(n.ncclRecv(reinterpret_cast<void*>(part[k]), rows * size_t(widths[k]), kNcclFloat32, int(k), c,
                                l.stream),
                     "all_gather");
      }
      check_nccl(n.ncclGroupEnd(), "all_gather");
      int64_t col = 0;
      for (size_t k = 0; k < group.size(); ++k) {
        if (widths[k] > 0) {
          Memcpy2D m{};
          m.srcMemoryType = kMemoryTypeDevice;
          m.srcDevice = part[k];
          m.srcPitch = size_t(widths[k]) * 4;
          m.dstMemoryType = kMemoryTypeDevice;
          m.dstDevice = l.out[0];
          m.dstXInBytes = size_t(col) * 4;
          m.dstPitch = size_t(total) * 4;
          m.WidthInBytes = size_t(widths[k]) * 4;
          m.Height = rows;
          check(d.cuMemcpy2DAsync(&m, static_cast<CUstream>(l.stream)), "interleaving an all_gather");
        }
        col += widths[k];
      }
      break;
    }
    case OpKind::Send: {
      const int64_t peer = op.i("peer");
      ncclComm_t c = comm(pair_of(rank, peer), rank, pos);
      check_nccl(n.ncclSend(reinterpret_cast<const void*>(l.in[0]), rows * size_t(l.in_w[0]), kNcclFloat32, 1 - pos, c,
                            l.stream),
                 "send");
      break;
    }
    case OpKind::Recv: {
      const int64_t peer = op.i("peer");
      ncclComm_t c = comm(pair_of(rank, peer), rank, pos);
      check_nccl(n.ncclRecv(reinterpret_cast<void*>(l.out[0]), rows * size_t(l.out_w[0]), kNcclFloat32, 1 - pos, c,
                            l.stream),
                 "recv");
      break;
    }
    default:
      l.plan->fail(op, "is not a collective (runtime bug)");
  }
}

}  // namespace smelt::runtime::cuda
