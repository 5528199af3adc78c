// The compile driver behind smelt-compile. Passes run one pipeline element at a time so that the IR can be
// dumped after each and the run can stop at a phase; a resumed module skips the elements its
// `smelt.passes` record says it has been through.
#include "compiler/driver.h"

#include "compiler/cuda/kernels.h"
#include "compiler/cuda/target.h"

#include <filesystem>
#include <fstream>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "compiler/dialect/dialect.h"
#include "compiler/emit/emit.h"
#include "compiler/import/importer.h"
#include "compiler/passes/passes.h"
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
    p += "},";
  }
  return p;
}

std::string default_pipeline(const CompileOptions& o) {
  std::string numerics = o.numerics == "model" ? "" : "smelt-numerics{mode=" + o.numerics + "},";
  return "smelt-verify," + numerics + partition_passes(o) + "smelt-select-kernels{target=" + cuda_compile::pipeline_spelling(o.target) + "},smelt-plan-memory{max-rows=" +
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
    if (count != n)
      throw Error(std::string(flag) + " " + *list + ": lists " + std::to_string(count) + " values, expected " +
                  std::to_string(n) + (n == o.tp ? " (one per TP rank)" : " (one per pipeline stage)"));
  }
  const cuda_compile::Target target = cuda_compile::parse_target(o.target);  // throws on a bad target
  if (target.cuda && !cuda_compile::available())
    throw Error("--target " + o.target + ": this smelt-compile was built without NVRTC (no CUDA toolkit), so it "
                "can only compile for --target cpu");
  static const char* phases[] = {"", "import", "verify", "select-kernels", "plan-memory", "pad-heads", "partition"};
  if (!llvm::is_contained(phases, o.compile_to))
    throw Error("--compile-to " + o.compile_to + ": unknown phase (expected import, verify, select-kernels or plan-memory)");
  if (o.max_rows <= 0) throw Error("--max-rows must be positive");
  if (o.numerics != "model" && o.numerics != "fp32")
    throw Error("--numerics " + o.numerics + ": expected model (the model's own roundings, the default) or fp32");
  if (o.output.empty()) throw Error("no output file: pass -o PLAN.smelt");
  const std::vector<std::string> elements = split_pipeline(o.pipeline.empty() ? default_pipeline(o) : o.pipeline);

  progress("loading " + o.model_dir);
  ModelDescription model = load_model(o.model_dir);
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

  bool stopped = o.compile_to == "import" || (!stop.empty() && !done.empty() && done.back() == stop);
  for (size_t i = 0; i < elements.size() && !stopped; ++i) {
    const std::string name = pass_name(elements[i]);
    if (llvm::is_contained(done, name)) continue;
    progress("running " + elements[i]);
    mlir::PassManager pm(&ctx, mlir::ModuleOp::getOperationName());
    std::string parse_error;
    llvm::raw_string_ostream es(parse_error);
    if (mlir::failed(mlir::parsePassPipeline(elements[i], pm, es)))
      throw Error("--pipeline: cannot parse '" + elements[i] + "': " + parse_error);
    if (mlir::failed(pm.run(*module))) throw diags.fail(name + " failed");
    dump(int(i) + 1, name);
    stopped = name == stop;
  }

  if (!o.compile_to.empty()) {
    std::string text = print(*module);
    write_file(o.output, text.data(), text.size());
    progress("wrote the IR after " + o.compile_to + " to " + o.output + " (" + std::to_string(text.size()) + " bytes)");
    return;
  }
  EmitOptions eo;
  eo.target = target.cuda ? target.name : o.target;
  eo.target_json = target.json();
  if (target.cuda) eo.kernels = compile_kernels(target, progress);
  eo.tp = o.tp;
  eo.pp = o.pp;
  std::vector<uint8_t> plan = emit_plan(*module, eo);
  write_file(o.output, plan.data(), plan.size());
  progress("wrote plan " + o.output + ": " + std::to_string(plan.size()) + " bytes");
}

}  // namespace smelt
