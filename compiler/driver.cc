// The compile driver behind smelt-compile. Passes run one pipeline element at a time so that the IR can be
// dumped after each and the run can stop at a phase; a resumed module skips the elements its
// `smelt.passes` record says it has been through.
#include "compiler/driver.h"

#include "compiler/cuda/kernels.h"
#include "compiler/cuda/target.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "compiler/dialect/dialect.h"
#include "compiler/emit/emit.h"
#include "compiler/import/importer.h"
#include "compiler/passes/passes.h"
#include "compiler/rig.h"
#include "frontends/model.h"

namespace smelt {

namespace {

namespace fs = std::filesystem;

std::string pass_name(const std::string& element) { return element.substr(0, element.find('{')); }

std::string print(mlir::ModuleOp m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m->print(os);
  return s + "\n";
}

// Writes to a temporary file then renames it, so a failed run never leaves half a file; "-" is stdout.
void write_file(const std::string& path, const void* data, size_t size) {
  if (path == "-") {
    std::fwrite(data, 1, size, stdout);
    std::fflush(stdout);
    return;
  }
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(path + ": cannot open for writing");
    f.write(static_cast<const char*>(data), std::streamsize(size));
    if (!f) throw Error(path + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot rename " + tmp + " into place: " + ec.message());
}

// Collects error diagnostics (with their location) and prints warnings as they come.
struct Diagnostics {
  std::vector<std::string> errors;
  std::function<void(const std::string&)> warn;

  void handle(mlir::Diagnostic& d) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    d.getLocation().print(os);
    std::string line = loc + ": " + d.str();
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error) errors.push_back(line);
    else if (warn && d.getSeverity() == mlir::DiagnosticSeverity::Warning) warn("warning: " + line);
  }
  Error fail(const std::string& what) {
    std::string msg = what;
    for (size_t i = 0; i < errors.size(); ++i) msg += (i ? "\nerror: " : ": ") + errors[i];
    errors.clear();
    return Error(msg);
  }
};

// The checkpoint a resumed module was compiled from must be the one in MODEL_DIR (same sizes and headers).
void check_same_checkpoint(mlir::ModuleOp m, const ModelDescription& model, const std::string& from) {
  auto files = m->getAttrOfType<mlir::ArrayAttr>("smelt.checkpoint_files");
  if (!files) throw Error(from + ": the module has no smelt.checkpoint_files attribute");
  const auto& have = model.checkpoint.files();
  if (files.size() != have.size())
    throw Error(from + ": compiled from a checkpoint of " + std::to_string(files.size()) + " files, but " +
                model.dir + " has " + std::to_string(have.size()));
  for (size_t i = 0; i < have.size(); ++i) {
    auto d = llvm::dyn_cast<mlir::DictionaryAttr>(files[i]);
    auto size = d ? d.getAs<mlir::IntegerAttr>("size") : nullptr;
    auto hash = d ? d.getAs<mlir::IntegerAttr>("header_hash") : nullptr;
    if (!size || !hash || size.getValue().getZExtValue() != have[i].file_size() ||
        hash.getValue().getZExtValue() != have[i].header_hash())
      throw Error(from + ": was compiled from a different checkpoint: " + have[i].path() +
                  " does not match the recorded size and header hash");
  }
}

}  // namespace

// --tp / --pp: head padding and the partition (docs/partition.md); tp = pp = 1 adds nothing.
std::string partition_passes(const CompileOptions& o) {
  std::string p;
  if (o.tp > 1) p += "smelt-pad-heads{tp=" + std::to_string(o.tp) + "},";
  if (o.tp > 1 || o.pp > 1) {
    p += "smelt-partition{tp=" + std::to_string(o.tp) + " pp=" + std::to_string(o.pp);
    if (!o.shares.empty()) p += " shares=" + o.shares;
    if (!o.stages.empty()) p += " stages=" + o.stages;
    if (!o.archs.empty()) p += " archs=" + o.archs;
    p += "},";
  }
  return p;
}

const std::vector<KernelKnob>& kernel_knobs() {
  static const std::vector<KernelKnob> k = {
      {"SMELT_MMA_WG_POS", "FP4 wgmma up: four blocks a wgmma chain in column pairs, in 1 or 2 accumulators, or one "
                           "block a wait (0, the default)"},
      {"SMELT_MMA_WG_POS_DOWN", "FP4 wgmma down: the same where a block runs one group (1, 2), or never (0, the default)"},
      {"SMELT_MMA_HL_CHAIN", "weight-only FP4 ring (the sm_80 path's experts): four blocks a chain in 2 or 1 "
                             "accumulators, or one block a fold (0)"},
      {"SMELT_MMA_AQ_CHAIN", "act-quant FP4 experts on mma.sync (sm_89 / sm_120): the same chains (2, 1) or none (0)"},
      {"SMELT_MMA_WO_PAIR_STAGES", "weight-only FP4 ring (the sm_80 path's experts): ring stages of its two-matrix "
                                   "segments, the gate + up and the down's two tiles a warp (8 or 16)"},
      {"SMELT_MMA_FP4_SMEM_SCALES", "FP4 scale words through a shared-memory ring (1) or registers (0)"},
      {"SMELT_MMA_FULL_GROUPS", "tensor-core rings: whole groups without a bound check a block (1) or with (0)"},
      {"SMELT_MMA_L2PF", "L2 prefetch hint of the tensor-core rings' weight copies in bytes (0, 64, 128, 256)"},
      {"SMELT_W_EVICT_FIRST", "weights streamed with an L2 evict-first policy (1) or plain loads (0)"},
  };
  return k;
}

std::vector<std::string> kernel_define_options(const std::vector<std::string>& defines) {
  std::map<std::string, std::string> set;
  for (const std::string& d : defines) {
    const size_t eq = d.find('=');
    const std::string name = d.substr(0, eq), value = eq == std::string::npos ? "" : d.substr(eq + 1);
    const bool known = llvm::any_of(kernel_knobs(), [&](const KernelKnob& k) { return name == k.name; });
    if (!known) {
      std::string list;
      for (const KernelKnob& k : kernel_knobs()) list += std::string("\n  ") + k.name + ": " + k.what;
      throw Error("--kernel-define " + d + ": " + (name.empty() ? std::string("no name") : "unknown knob " + name) +
                  " (expected NAME=VALUE with one of:" + list + ")");
    }
    char* end = nullptr;
    (void)std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0') throw Error("--kernel-define " + d + ": the value of " + name + " is not an integer");
    if (!set.emplace(name, value).second) throw Error("--kernel-define " + d + ": " + name + " is already set");
  }
  std::vector<std::string> out;
  for (const auto& [n, v] : set) out.push_back("-D" + n + "=" + v);
  return out;
}

std::string default_pipeline(const CompileOptions& o) {
  std::string numerics = o.numerics == "model" ? "" : "smelt-numerics{mode=" + o.numerics + "},";
  // GPU targets: the ops the cuda runtime may run on its side stream (smelt-schedule-streams).
  const bool gpu = cuda_compile::parse_target(o.target).cuda;
  const std::string streams = gpu ? "smelt-schedule-streams," : "";
  // ... and the Engram lookup and projection as their own ops, which the side stream runs beside the layer before.
  const std::string split = gpu ? "smelt-split-engram," : "";
  return "smelt-verify," + numerics + partition_passes(o) + split + "smelt-select-kernels{target=" +
         cuda_compile::pipeline_spelling(o.target) + "}," + streams + "smelt-plan-memory{max-rows=" +
         std::to_string(o.max_rows) + "}";
}

std::vector<std::string> split_pipeline(const std::string& pipeline) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : pipeline) {
    if (ch == '{' || ch == '(') ++depth;
    if (ch == '}' || ch == ')') --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(ch)) || depth > 0) {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

void compile(const CompileOptions& o) {
  auto progress = [&](const std::string& s) { if (o.progress) o.progress(s); };
  if (o.tp < 1 || o.tp > 64) throw Error("--tp " + std::to_string(o.tp) + ": expected 1 to 64");
  if (o.pp < 1 || o.pp > 64) throw Error("--pp " + std::to_string(o.pp) + ": expected 1 to 64");
  for (auto [flag, list, n] : {std::tuple{"--shares", &o.shares, o.tp}, std::tuple{"--stages", &o.stages, o.pp}}) {
    if (list->empty()) continue;
    int64_t count = 1;
    for (char ch : *list) {
      if (ch == ',') ++count;
      else if (!std::isdigit(static_cast<unsigned char>(ch)))
        throw Error(std::string(flag) + " " + *list + ": expected comma-separated positive integers");
    }
    if (count != n && !(n == o.tp && count == o.tp * o.pp))  // shares may also give every rank its own
      throw Error(std::string(flag) + " " + *list + ": lists " + std::to_string(count) + " values, expected " +
                  std::to_string(n) + (n != o.tp ? " (one per pipeline stage)"
                                       : o.pp > 1 ? " (one per TP rank) or " + std::to_string(o.tp * o.pp) + " (one per rank)"
                                                  : " (one per TP rank)"));
  }
  const cuda_compile::Target target = cuda_compile::parse_target(o.target);  // throws on a bad target
  if (target.cuda && !cuda_compile::available() && o.compile_to.empty())  // IR alone needs no device code
    throw Error("--target " + o.target + ": this smelt-compile was built without NVRTC (no CUDA toolkit), so it "
                "can only compile for --target cpu");
  // The rank -> GPU map (a rig: rank r on GPU r), the ranks' archs and the default shares (docs/partition.md, "Rigs").
  const std::vector<int> gpus = rig::rank_gpus(target, o.tp, o.pp);  // throws when a rig is too small
  auto resolve = [&](const CompileOptions& c) {
    CompileOptions e = c;
    std::vector<int> g = rig::rank_gpus(target, c.tp, c.pp);
    e.archs = rig::rank_archs(target, g);
    if (e.shares.empty()) e.shares = rig::memory_shares(target, g, c.tp, c.pp);
    return e;
  };
  const CompileOptions eff = resolve(o);
  if (target.rig) {
    const std::string last = std::to_string(o.tp * o.pp - 1);
    progress("rig " + target.name + ": " + std::to_string(target.gpus.size()) + " GPU(s); " +
             (o.tp * o.pp == 1 ? "rank 0 on GPU 0" : "ranks 0-" + last + " on GPUs 0-" + last + " (stage-major)"));
    if (o.shares.empty() && !eff.shares.empty())
      progress("shares " + eff.shares + ": proportional to GPU memory, since a TP group's GPUs differ (--shares overrides)");
  }
  static const char* phases[] = {"", "import", "verify", "select-kernels", "plan-memory", "pad-heads", "partition"};
  if (!llvm::is_contained(phases, o.compile_to))
    throw Error("--compile-to " + o.compile_to + ": unknown phase (expected import, verify, select-kernels or plan-memory)");
  if (o.max_rows <= 0) throw Error("--max-rows must be positive");
  if (o.numerics != "model" && o.numerics != "fp32")
    throw Error("--numerics " + o.numerics + ": expected model (the model's own roundings, the default) or fp32");
  if (o.output.empty()) throw Error("no output file: pass -o PLAN.smelt");
  const std::vector<std::string> kernel_defines = kernel_define_options(o.kernel_defines);  // before the model loads
  if (!o.kernel_defines.empty() && !target.cuda)
    throw Error("--kernel-define: target " + o.target + " has no CUDA GPU (kernel defines set CUDA kernels' knobs)");
  const std::vector<std::string> elements = split_pipeline(o.pipeline.empty() ? default_pipeline(eff) : o.pipeline);

  progress("loading " + o.model_dir);
  ModelDescription model = load_model(o.model_dir, o.engram_token_map);
  progress("loaded " + std::to_string(model.tensors.size()) + " tensors from " +
           std::to_string(model.checkpoint.files().size()) + " checkpoint file(s), " +
           std::to_string(model.checkpoint.payload_bytes()) + " bytes");

  register_passes();
  mlir::DialectRegistry registry;
  register_dialects(registry);
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.loadAllAvailableDialects();
  Diagnostics diags;
  diags.warn = progress;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic& d) {
    diags.handle(d);
    return mlir::success();
  });

  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (!o.compile_from.empty()) {
    progress("resuming from " + o.compile_from);
    module = mlir::parseSourceFile<mlir::ModuleOp>(o.compile_from, &ctx);
    if (!module) throw diags.fail(o.compile_from + ": cannot read the IR");
    check_same_checkpoint(*module, model, o.compile_from);
  } else {
    ImportOptions io;
    io.max_seq_len = o.max_seq_len;
    io.capture_intermediates = o.capture_intermediates;
    io.progress = progress;
    module = import_model(ctx, model, io);
  }

  if (!o.dump_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.dump_dir, ec);
    if (ec) throw Error(o.dump_dir + ": cannot create the dump directory: " + ec.message());
  }
  auto dump = [&](int index, const std::string& name) {
    if (o.dump_dir.empty()) return;
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%02d-", index);
    std::string text = print(*module);
    write_file((fs::path(o.dump_dir) / (prefix + name + ".mlir")).string(), text.data(), text.size());
  };
  if (o.compile_from.empty()) dump(0, "import");

  // Which elements has the module been through already (resumed modules)?
  std::vector<std::string> done;
  if (auto passes = (*module)->getAttrOfType<mlir::ArrayAttr>("smelt.passes"))
    for (auto p : passes.getAsValueRange<mlir::StringAttr>()) done.push_back(pass_name(p.str()));
  const std::string stop = o.compile_to.empty() || o.compile_to == "import" ? "" : "smelt-" + o.compile_to;
  if (!stop.empty() && llvm::is_contained(done, stop) && done.back() != stop)
    throw Error("--compile-to " + o.compile_to + ": " + o.compile_from + " is already past that phase");
  if (!stop.empty() && !llvm::any_of(elements, [&](const std::string& e) { return pass_name(e) == stop; }))
    throw Error("--compile-to " + o.compile_to + ": the pipeline has no " + stop + " pass");

  // Device code first when a plan is written: the cubins of a rank's arch count against its GPU.
  std::vector<cuda_compile::PlanKernel> kernels;
  std::map<std::string, uint64_t> kernel_bytes;  // cubins per arch
  bool compiled = false;
  auto compile_device_code = [&] {
    if (compiled || !o.compile_to.empty() || !target.cuda) return;
    compiled = true;
    kernels = compile_kernels(target, progress, kernel_defines);
    for (const auto& k : kernels)
      if (k.image.format == "cubin") kernel_bytes[k.image.arch] += k.image.bytes.size();
  };

  // Memory per rank against its GPU (docs/partition.md, "Rigs"), checked on a copy of the module planned without
  // smelt-select-kernels (memory does not depend on the kernels), as soon as the layout is known: before
  // smelt-select-kernels, so that a layout that cannot fit is refused first. Candidates run the same way.
  auto memory_elements = [&](const std::vector<std::string>& els, size_t from) {
    std::vector<std::string> out;
    for (size_t k = from; k < els.size(); ++k) {
      std::string n = pass_name(els[k]);
      if (n != "smelt-select-kernels") out.push_back(els[k]);
      if (n == "smelt-plan-memory") return out;
    }
    return std::vector<std::string>{};
  };
  auto run_elements = [&](mlir::ModuleOp m, const std::vector<std::string>& els) {
    for (const std::string& el : els) {
      mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
      std::string err;
      llvm::raw_string_ostream es(err);
      if (mlir::failed(mlir::parsePassPipeline(el, pm, es)) || mlir::failed(pm.run(m))) return false;
    }
    return true;
  };
  // Only a rig file states the memory its owner has; the built-in h200's 141 GB is nominal (the device reports
  // more), so its plans are not checked.
  const bool check = target.rig && !gpus.empty();
  const std::string gpu0_arch = gpus.empty() ? "" : target.gpus[size_t(gpus[0])].arch;
  auto try_config = [&](const CompileOptions& c) -> std::optional<std::vector<rig::RankMemory>> {
    try {
      ImportOptions io;
      io.max_seq_len = c.max_seq_len;
      io.capture_intermediates = c.capture_intermediates;
      mlir::OwningOpRef<mlir::ModuleOp> m = import_model(ctx, model, io);
      bool ok = run_elements(*m, memory_elements(split_pipeline(default_pipeline(resolve(c))), 0));
      diags.errors.clear();
      if (!ok) return std::nullopt;
      return rig::measure(*m, kernel_bytes, gpu0_arch);
    } catch (const Error&) {
      diags.errors.clear();
      return std::nullopt;
    }
  };
  std::string target_json = target.json();
  bool checked = false;
  auto check_memory = [&](mlir::ModuleOp planned) {
    checked = true;
    compile_device_code();
    auto L = planned->getAttrOfType<mlir::IntegerAttr>("smelt.max_seq_len");
    std::vector<rig::RankMemory> mem = rig::measure(planned, kernel_bytes, gpu0_arch);
    nlohmann::json tj = nlohmann::json::parse(target_json), per_rank = nlohmann::json::array();
    const rig::RankMemory* worst = nullptr;
    int64_t over = 0, failing = 0;
    for (const rig::RankMemory& r : mem) {
      const int g = gpus.at(size_t(r.rank));
      const uint64_t avail = rig::available(target, target.gpus[size_t(g)].memory_bytes);
      const bool ok = r.total() <= avail;
      progress("rank " + std::to_string(r.rank) + " on " + rig::gpu_text(target, g) + ": " + rig::breakdown(r) + " = " +
               rig::bytes_text(r.total()) + " of " + rig::bytes_text(avail) + " available" + (ok ? "" : ": does not fit"));
      per_rank.push_back({{"rank", r.rank}, {"gpu", g}, {"weights", r.weights}, {"states", r.states},
                          {"arena", r.arena}, {"kernels", r.kernels}, {"available", avail}});
      if (!ok && (++failing, !worst || int64_t(r.total() - avail) > over)) worst = &r, over = int64_t(r.total() - avail);
    }
    if (kernels.empty() && target.cuda) progress("kernel images not counted (not compiled with --compile-to)");
    if (worst) {
      const int g = gpus.at(size_t(worst->rank));
      const uint64_t mem_bytes = target.gpus[size_t(g)].memory_bytes, avail = rig::available(target, mem_bytes);
      std::string msg = "rank " + std::to_string(worst->rank) + " on " + rig::gpu_text(target, g) + " needs " +
                        rig::bytes_text(worst->total()) + " (" + rig::breakdown(*worst) + ") but " +
                        rig::bytes_text(avail) + " is available (" + rig::bytes_text(mem_bytes) + " less " +
                        rig::bytes_text(rig::headroom(target, mem_bytes)) + " headroom)";
      if (worst->largest_bytes > avail)
        msg += "; its weight @" + worst->largest + " alone is " + rig::bytes_text(worst->largest_bytes);
      if (failing > 1) msg += "; " + std::to_string(failing - 1) + " more rank(s) do not fit";
      CompileOptions base = o;
      base.max_seq_len = L ? L.getInt() : o.max_seq_len;
      diags.warn = nullptr;
      std::string near = rig::nearest(target, base, eff.shares, mem, try_config, progress);
      throw Error(msg + "; " + (near.empty() ? "no configuration of this rig fits"
                                             : "nearest configuration that fits: " + near));
    }
    tj["rank_gpus"] = gpus;
    tj["rank_memory"] = per_rank;
    target_json = tj.dump();
  };

  bool stopped = o.compile_to == "import" || (!stop.empty() && !done.empty() && done.back() == stop);
  auto check_copy = [&](size_t from) {  // the memory check on a copy planned by the elements from `from` on
    std::vector<std::string> rest = memory_elements(elements, from);
    if (rest.empty()) return;
    mlir::OwningOpRef<mlir::ModuleOp> copy(module->clone());
    if (!run_elements(*copy, rest)) throw diags.fail("the memory check's smelt-plan-memory failed");
    check_memory(*copy);
  };
  size_t next = elements.size();  // the first element not run (--compile-to)
  for (size_t i = 0; i < elements.size() && !stopped; ++i) {
    const std::string name = pass_name(elements[i]);
    if (llvm::is_contained(done, name)) continue;
    if (check && !checked && (name == "smelt-select-kernels" || name == "smelt-plan-memory")) check_copy(i);
    progress("running " + elements[i]);
    mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
    std::string parse_error;
    llvm::raw_string_ostream es(parse_error);
    if (mlir::failed(mlir::parsePassPipeline(elements[i], pm, es)))
      throw Error("--pipeline: cannot parse '" + elements[i] + "': " + parse_error);
    if (mlir::failed(pm.run(*module))) throw diags.fail(name + " failed");
    dump(int(i) + 1, name);
    stopped = name == stop;
    if (stopped) next = i + 1;
  }
  if (check && !checked) {
    if ((*module)->hasAttr("smelt.arena_bytes")) check_memory(*module);
    else check_copy(next);  // --compile-to partition: the layout is known, plan a copy to check it
    if (!checked) progress("memory per rank not checked: the pipeline has no smelt-plan-memory");
  }

  if (!o.compile_to.empty()) {
    std::string text = print(*module);
    write_file(o.output, text.data(), text.size());
    progress("wrote the IR after " + o.compile_to + " to " + o.output + " (" + std::to_string(text.size()) + " bytes)");
    return;
  }
  EmitOptions eo;
  eo.target = target.cuda ? target.name : o.target;
  eo.target_json = target_json;
  compile_device_code();
  eo.kernels = std::move(kernels);
  eo.tp = o.tp;
  eo.pp = o.pp;
  for (const std::string& d : kernel_defines)
    eo.kernel_defines += (eo.kernel_defines.empty() ? "" : ",") + d.substr(2);  // "-DNAME=VALUE" -> "NAME=VALUE"
  std::vector<uint8_t> plan = emit_plan(*module, eo);
  write_file(o.output, plan.data(), plan.size());
  progress("wrote plan " + o.output + ": " + std::to_string(plan.size()) + " bytes");
}

}  // namespace smelt
