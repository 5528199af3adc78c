#include "runtime/plan.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "schemas/plan_file.h"

namespace smelt::runtime {

namespace fb = smelt::plan;

namespace {

// Limits that keep every size computation far from overflow; real plans are well inside them.
constexpr int64_t kMaxRows = 1 << 20;
constexpr int64_t kMaxSeqLen = int64_t(1) << 40;
constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;  // kernels take int dims
constexpr int64_t kMaxNumel = int64_t(1) << 46;
constexpr uint64_t kMaxArena = uint64_t(1) << 48;

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// Copies a flatbuffer vector out. memcpy, because the verifier checks the alignment of a vector's length
// only: a crafted plan can place 8-byte elements at 4-byte boundaries.
template <typename T>
std::vector<T> vec(const flatbuffers::Vector<T>* v) {
  if (!v) return {};
  std::vector<T> out(v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  return out;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool is_float(fb::DType d) {
  return d == fb::DType::F32 || d == fb::DType::BF16 || d == fb::DType::F16 || d == fb::DType::F64;
}
bool is_int(fb::DType d) { return d == fb::DType::I64 || d == fb::DType::I32; }

// Checks a shape read from the plan: dims >= 0 and the element count bounded. Returns "" or the problem.
std::string check_shape(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxDim) return "has dimension " + std::to_string(d) + " in shape " + shape_str(shape);
    if (d != 0 && n > kMaxNumel / d) return "has too many elements, shape " + shape_str(shape);
    n *= d;
  }
  return {};
}

const char* kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "integer (i)";
    case AttrKind::Float: return "float (f)";
    case AttrKind::String: return "string (s)";
    case AttrKind::Ints: return "integer list (ints)";
  }
  return "?";
}

// Does a weight of dtype `d` fit a weight operand of type `t` (op_specs.h)?
bool weight_type_ok(char t, fb::DType d) {
  switch (t) {
    case 'i': return is_int(d);
    case 'q': return is_float(d) || d == fb::DType::F8_E4M3 || d == fb::DType::I8;
    case 's': return d == fb::DType::F8_E8M0;
    case '8': return d == fb::DType::F8_E4M3;
    default: return is_float(d);
  }
}
const char* weight_type_name(char t) {
  switch (t) {
    case 'i': return "an integer type";
    case 'q': return "a float type, F8_E4M3 or I8 (packed FP4)";
    case 's': return "F8_E8M0 (block scales)";
    case '8': return "F8_E4M3";
    default: return "a float type";
  }
}

}  // namespace

// ---- OpRef --------------------------------------------------------------------------------------------

int64_t OpRef::i(std::string_view a) const { return attrs.find(a)->second.i; }
double OpRef::f(std::string_view a) const { return attrs.find(a)->second.f; }
const std::string& OpRef::s(std::string_view a) const { return attrs.find(a)->second.s; }
const std::vector<int64_t>& OpRef::ints(std::string_view a) const { return attrs.find(a)->second.ints; }

int fp8_weight_block(const std::vector<int64_t>& w, const std::vector<int64_t>& s) {
  if (w.size() != 2 || s.size() != 2) return 0;
  for (int64_t b = 32; b <= 4096; b *= 2)
    if (s[0] == (w[0] + b - 1) / b && s[1] == (w[1] + b - 1) / b) return int(b);
  return 0;
}
std::string OpRef::where() const {
  return (program.empty() ? "" : program + " ") + "op " + std::to_string(index) + " (" + name + ", layer " +
         std::to_string(layer) + ")";
}

const Program* Plan::program(std::string_view name) const {
  for (const Program& p : programs_)
    if (p.name == name) return &p;
  return nullptr;
}

// ---- loading ------------------------------------------------------------------------------------------

Plan Plan::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open plan file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(path + ": read error");
  return from_bytes(bytes, path);
}

Plan Plan::from_bytes(std::span<const uint8_t> file, const std::string& name) {
  Plan p;
  p.path_ = name;
  p.bytes_.assign(file.begin(), file.end());  // own copy: aligned, and alive as long as the Plan
  std::span<const uint8_t> payload;
  std::string problem = plan_file::check(p.bytes_, &payload);
  if (!problem.empty()) p.fail(problem);
  std::memcpy(&p.major_, p.bytes_.data() + 8, 4);
  std::memcpy(&p.minor_, p.bytes_.data() + 12, 4);
  if (payload.size() >= FLATBUFFERS_MAX_BUFFER_SIZE) p.fail("payload is larger than a flatbuffer can be");
  flatbuffers::Verifier verifier(payload.data(), payload.size());
  // The identifier is not required: the header magic already says what the file is.
  if (!verifier.VerifyBuffer<fb::Plan>(nullptr)) p.fail("is corrupt: the plan flatbuffer does not verify");
  p.fb_ = flatbuffers::GetRoot<fb::Plan>(payload.data());
  p.validate();
  return p;
}

void Plan::fail(const std::string& msg) const { throw Error(path_ + ": " + msg); }
void Plan::fail(const OpRef& op, const std::string& msg) const { fail(op.where() + ": " + msg); }

std::string Plan::option(std::string_view key) const {
  if (fb_->options())
    for (const fb::KeyValue* kv : *fb_->options())
      if (kv->key() && kv->key()->string_view() == key) return str(kv->value());
  auto it = inherited_options_.find(key);
  return it == inherited_options_.end() ? std::string() : it->second;
}

static const Plan& output_plan(const Plan& p) { return p.partitioned() ? *p.ranks()[size_t(p.output_rank())].plan : p; }
int64_t Plan::max_rows() const { return partitioned() ? output_plan(*this).max_rows() : fb_->max_rows(); }
int64_t Plan::max_seq_len() const { return partitioned() ? output_plan(*this).max_seq_len() : fb_->max_seq_len(); }
int64_t Plan::vocab() const { return partitioned() ? output_plan(*this).vocab() : row_elems(logits()); }

std::vector<const Plan*> Plan::rank_plans() const {
  if (!partitioned()) return {this};
  std::vector<const Plan*> out;
  for (const Rank& r : ranks_) out.push_back(r.plan.get());
  return out;
}

std::vector<int64_t> Plan::weight_source_shape(int id) const {
  const fb::Weight& w = *fb_->weights()->Get(id);
  return w.source_shape() ? vec(w.source_shape()) : vec(w.shape());
}
std::string Plan::weight_name(int id) const { return str(fb_->weights()->Get(id)->name()); }
int64_t Plan::row_elems(int b) const { return fb_->buffers()->Get(b)->row_elems(); }
std::vector<int64_t> Plan::weight_shape(int id) const { return vec(fb_->weights()->Get(id)->shape()); }
std::vector<int64_t> Plan::state_shape(int id) const { return vec(fb_->states()->Get(id)->shape()); }

std::string_view plan_dtype_name(fb::DType d) {
  const char* const* names = fb::EnumNamesDType();
  int i = int(d);
  return (i >= 0 && i <= int(fb::DType::MAX)) ? names[i] : "?";
}

// ---- validation ---------------------------------------------------------------------------------------

void Plan::validate() {
  if (fb_->ranks() && fb_->ranks()->size() > 0) validate_partitioned();
  else validate_single();
}

void Plan::validate_single() {
  validate_tables();
  int n_ops = fb_->ops() ? int(fb_->ops()->size()) : 0;
  if (n_ops == 0) fail("has no ops");
  for (int i = 0; i < n_ops; ++i) ops_.push_back(validate_op(*fb_->ops()->Get(i), i, ""));
  for (const OpRef& op : ops_) check_op_shapes(*this, op);
  std::vector<bool> written(fb_->buffers()->size(), false);
  written[fb_->token_ids()] = true;
  std::vector<int> results;
  if (expect_logits_) results.push_back(fb_->logits());
  validate_dataflow(ops_, written, results, "the logits buffer");
  validate_programs();
}

namespace {

// The programs this runtime knows, with their input and output buffers (dtype, row_elems; 0 = any).
struct ProgramIo {
  const char* name;
  std::vector<std::pair<fb::DType, int64_t>> inputs, outputs;
};
const ProgramIo* known_program(const std::string& name) {
  static const ProgramIo known[] = {
      {"dspark_draft", {{fb::DType::I32, 1}}, {{fb::DType::I32, 1}, {fb::DType::F32, 1}, {fb::DType::F32, 0}}}};
  for (const ProgramIo& k : known)
    if (name == k.name) return &k;
  return nullptr;
}

}  // namespace

void Plan::validate_programs() {
  if (!fb_->programs()) return;
  const int n_buffers = int(fb_->buffers()->size());
  for (const fb::Program* fp : *fb_->programs()) {
    Program prog;
    prog.name = str(fp->name());
    const ProgramIo* io = known_program(prog.name);
    if (!io) fail("has program '" + prog.name + "', which this runtime does not know (expected dspark_draft)");
    if (program(prog.name)) fail("has program '" + prog.name + "' twice");
    prog.inputs = vec(fp->inputs());
    prog.outputs = vec(fp->outputs());
    using Io = std::vector<std::pair<fb::DType, int64_t>>;
    auto check_io = [&](const char* what, const std::vector<int>& ids, const Io& want) {
      if (ids.size() != want.size())
        fail("program " + prog.name + " has " + std::to_string(ids.size()) + " " + what + ", expected " +
             std::to_string(want.size()));
      for (size_t k = 0; k < ids.size(); ++k) {
        std::string which = "program " + prog.name + " " + what + " " + std::to_string(k);
        if (ids[k] < 0 || ids[k] >= n_buffers) fail(which + " is buffer " + std::to_string(ids[k]) + ", out of range");
        const fb::Buffer& b = *fb_->buffers()->Get(ids[k]);
        if (b.dtype() != want[k].first || (want[k].second > 0 && b.row_elems() != want[k].second))
          fail(which + " (buffer " + std::to_string(ids[k]) + ") is " + std::string(plan_dtype_name(b.dtype())) +
               " with row_elems " + std::to_string(b.row_elems()) + ", expected " +
               std::string(plan_dtype_name(want[k].first)) +
               (want[k].second > 0 ? " with row_elems " + std::to_string(want[k].second) : std::string()));
      }
    };
    check_io("inputs", prog.inputs, io->inputs);
    check_io("outputs", prog.outputs, io->outputs);
    int n_ops = fp->ops() ? int(fp->ops()->size()) : 0;
    if (n_ops == 0) fail("program " + prog.name + " has no ops");
    for (int i = 0; i < n_ops; ++i) prog.ops.push_back(validate_op(*fp->ops()->Get(i), i, prog.name));
    for (const OpRef& op : prog.ops) {
      check_op_shapes(*this, op);
      // A program runs beside the sequence (drafting): it reads the state the forward wrote, never writes it.
      OpKind k = op.spec->kind;
      if (k == OpKind::WindowKvUpdate || k == OpKind::Compressor || k == OpKind::KvCompressor ||
          k == OpKind::EngramHash)
        fail(op, "writes state; a program only reads what the forward wrote");
    }
    std::vector<bool> written(size_t(n_buffers), false);
    for (int b : prog.inputs) written[size_t(b)] = true;
    validate_dataflow(prog.ops, written, prog.outputs, "program " + prog.name + "'s output buffer");
    programs_.push_back(std::move(prog));
  }
}

// Everything outside the ops: limits, files, weights, buffers, states.
void Plan::validate_tables() {
  const fb::Plan& p = *fb_;
  if (p.max_rows() < 1 || p.max_rows() > kMaxRows)
    fail("max_rows " + std::to_string(p.max_rows()) + " is outside [1, " + std::to_string(kMaxRows) + "]");
  if (p.max_seq_len() < 1 || p.max_seq_len() > kMaxSeqLen)
    fail("max_seq_len " + std::to_string(p.max_seq_len()) + " is out of range");
  if (p.arena_bytes() > kMaxArena) fail("arena_bytes " + std::to_string(p.arena_bytes()) + " is out of range");

  int n_files = p.checkpoint_files() ? int(p.checkpoint_files()->size()) : 0;
  for (int i = 0; i < n_files; ++i) {
    std::string path = str(p.checkpoint_files()->Get(i)->path());
    std::filesystem::path fp(path);
    bool escapes = std::any_of(fp.begin(), fp.end(), [](const std::filesystem::path& c) { return c == ".."; });
    if (path.empty() || fp.is_absolute() || escapes)
      fail("checkpoint file " + std::to_string(i) + " has path '" + path +
           "'; it must be relative to the model directory");
  }

  int n_weights = p.weights() ? int(p.weights()->size()) : 0;
  for (int i = 0; i < n_weights; ++i) {
    const fb::Weight& w = *p.weights()->Get(i);
    std::string name = "weight " + std::to_string(i) + " (" + str(w.name()) + ")";
    if (w.file() >= uint32_t(n_files))
      fail(name + " names checkpoint file " + std::to_string(w.file()) + " but the plan lists " +
           std::to_string(n_files));
    if (int(w.dtype()) < 0 || int(w.dtype()) > int(fb::DType::MAX))
      fail(name + " has unknown dtype " + std::to_string(int(w.dtype())));
    std::string bad = check_shape(vec(w.shape()));
    if (!bad.empty()) fail(name + " " + bad);
    // The load transform must turn the stored shape into `shape` (docs/plan.md "Weight transforms").
    std::string transform = str(w.transform()), problem;
    std::vector<TransformStep> steps = parse_transform(transform, &problem);
    std::vector<int64_t> source = weight_source_shape(i), result;
    if (problem.empty()) problem = check_shape(source);
    if (problem.empty() && w.source_shape() && steps.empty() && source != vec(w.shape()))
      problem = "has source_shape " + shape_str(source) + " but no transform to make it " + shape_str(vec(w.shape()));
    if (problem.empty()) problem = transform_shape(steps, source, &result);
    if (problem.empty() && result != vec(w.shape()))
      problem = "makes shape " + shape_str(result) + " from source_shape " + shape_str(source) + ", but the weight's shape is " +
                shape_str(vec(w.shape()));
    if (!problem.empty()) fail(name + " transform '" + transform + "': " + problem);
    transforms_.push_back(std::move(steps));
  }

  int n_buffers = p.buffers() ? int(p.buffers()->size()) : 0;
  for (int i = 0; i < n_buffers; ++i) {
    const fb::Buffer& b = *p.buffers()->Get(i);
    std::string name = "buffer " + std::to_string(i) + " (" + str(b.name()) + ")";
    if (b.dtype() != fb::DType::F32 && b.dtype() != fb::DType::I32)
      fail(name + " has dtype " + std::string(plan_dtype_name(b.dtype())) + "; the cpu backend uses F32 and I32");
    if (b.row_elems() < 1 || b.row_elems() > kMaxDim)
      fail(name + " has row_elems " + std::to_string(b.row_elems()));
    if (b.offset() % 4 != 0) fail(name + " has arena offset " + std::to_string(b.offset()) + ", not 4-byte aligned");
    // max_rows <= 2^20 and row_elems < 2^31: the product times 4 fits in 53 bits.
    uint64_t bytes = uint64_t(p.max_rows()) * uint64_t(b.row_elems()) * 4;
    if (b.offset() > p.arena_bytes() || bytes > p.arena_bytes() - b.offset())
      fail(name + " ends at byte " + std::to_string(b.offset() + bytes) + " but arena_bytes is " +
           std::to_string(p.arena_bytes()));
  }
  auto check_buffer_id = [&](int id, const char* what, fb::DType dtype, int64_t row_elems) {
    if (id < 0 || id >= n_buffers)
      fail(std::string(what) + " is buffer " + std::to_string(id) + " but the plan has " + std::to_string(n_buffers));
    const fb::Buffer& b = *p.buffers()->Get(id);
    if (b.dtype() != dtype) fail(std::string(what) + " buffer " + std::to_string(id) + " is not " +
                                 std::string(plan_dtype_name(dtype)));
    if (row_elems > 0 && b.row_elems() != row_elems)
      fail(std::string(what) + " buffer " + std::to_string(id) + " has row_elems " + std::to_string(b.row_elems()) +
           ", expected " + std::to_string(row_elems));
  };
  check_buffer_id(p.token_ids(), "token_ids", fb::DType::I32, 1);
  if (expect_logits_) check_buffer_id(p.logits(), "logits", fb::DType::F32, 0);
  else if (p.logits() != -1)
    fail("is a rank before the last pipeline stage but has logits buffer " + std::to_string(p.logits()) +
         " (expected -1: the head lives on the last stage)");

  int n_states = p.states() ? int(p.states()->size()) : 0;
  static const std::set<std::string> kinds = {"window_ring", "compressor_ring", "compressed_pool", "index_pool",
                                              "engram_history"};
  for (int i = 0; i < n_states; ++i) {
    const fb::State& s = *p.states()->Get(i);
    std::string name = "state " + std::to_string(i) + " (" + str(s.name()) + ")";
    if (!kinds.count(str(s.kind()))) fail(name + " has unknown kind '" + str(s.kind()) + "'");
    if (s.dtype() != fb::DType::F32) fail(name + " has dtype " + std::string(plan_dtype_name(s.dtype())) +
                                          "; the cpu backend keeps state in F32");
    std::vector<int64_t> shape = vec(s.shape());
    std::string bad = check_shape(shape);
    if (!bad.empty()) fail(name + " " + bad);
    if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1) fail(name + " must have a 2-d shape, has " + shape_str(shape));
  }
}

// One op: known name, operand counts and ids, operand element types, attributes.
OpRef Plan::validate_op(const fb::Op& op, int index, const std::string& program) {
  OpRef r;
  r.index = index;
  r.program = program;
  r.name = str(op.name());
  r.layer = op.layer();
  r.inputs = vec(op.inputs());
  r.outputs = vec(op.outputs());
  r.weights = vec(op.weights());
  r.states = vec(op.states());
  r.spec = find_op_spec(r.name);
  if (!r.spec) fail(r, "unknown op '" + r.name + "' (not in docs/ops.md, or newer than this runtime)");
  const OpSpec& spec = *r.spec;

  const fb::Plan& p = *fb_;
  auto count = [](auto* v) { return v ? int(v->size()) : 0; };
  int n_buffers = count(p.buffers()), n_weights = count(p.weights()), n_states = count(p.states());

  // Operand lists: exact counts, ids in range, -1 only for optional operands, element types.
  auto check_list = [&](const char* what, const std::vector<int>& ids, const std::vector<OperandSpec>& specs,
                        size_t repeat, int n_items) {
    size_t expected = specs.size() * repeat;
    if (ids.size() != expected)
      fail(r, std::string("has ") + std::to_string(ids.size()) + " " + what + ", expected " + std::to_string(expected));
    for (size_t k = 0; k < ids.size(); ++k) {
      const OperandSpec& o = specs[k % specs.size()];
      int id = ids[k];
      std::string operand = std::string(what).substr(0, std::string(what).size() - 1) + " " + std::to_string(k) +
                            " (" + o.name + ")";
      if (id == -1 && o.optional) continue;
      if (id < 0 || id >= n_items)
        fail(r, operand + " is " + std::to_string(id) + ", out of range [0, " + std::to_string(n_items) + ")");
      if (std::string(what) == "inputs" || std::string(what) == "outputs") {
        fb::DType want = o.type == 'i' ? fb::DType::I32 : fb::DType::F32;
        if (p.buffers()->Get(id)->dtype() != want)
          fail(r, operand + " is buffer " + std::to_string(id) + " of dtype " +
                      std::string(plan_dtype_name(p.buffers()->Get(id)->dtype())) + ", expected " +
                      std::string(plan_dtype_name(want)));
      } else if (std::string(what) == "weights") {
        fb::DType d = p.weights()->Get(id)->dtype();
        if (!weight_type_ok(o.type, d))
          fail(r, operand + " is weight " + std::to_string(id) + " of dtype " + std::string(plan_dtype_name(d)) +
                      ", expected " + weight_type_name(o.type));
      } else {
        std::string kind = str(p.states()->Get(id)->kind());
        bool ok = std::string(o.state_kind) == "pool" ? (kind == "compressed_pool" || kind == "index_pool")
                                                      : kind == o.state_kind;
        if (!ok) fail(r, operand + " is state " + std::to_string(id) + " of kind " + kind + ", expected " + o.state_kind);
      }
    }
  };

  // Attributes: no unknown or duplicate names, each of its kind, required ones present, defaults filled.
  if (op.attrs())
    for (const fb::Attr* a : *op.attrs()) {
      std::string name = str(a->name());
      auto named = [&](const AttrSpec& s) { return name == s.name; };
      auto spec_it = std::find_if(spec.attrs.begin(), spec.attrs.end(), named);
      if (spec_it == spec.attrs.end()) {  // not the op's own: a scheduling hint any op may carry, or unknown
        spec_it = std::find_if(schedule_attrs().begin(), schedule_attrs().end(), named);
        if (spec_it == schedule_attrs().end()) fail(r, "has unknown attribute '" + name + "'");
      }
      if (r.attrs.count(name)) fail(r, "has attribute '" + name + "' twice");
      // Which fields were written (the generated accessors return 0 for absent ones).
      auto* table = reinterpret_cast<const flatbuffers::Table*>(a);
      bool has_i = table->CheckField(fb::Attr::VT_I), has_f = table->CheckField(fb::Attr::VT_F);
      bool has_s = table->CheckField(fb::Attr::VT_S), has_ints = table->CheckField(fb::Attr::VT_INTS);
      bool wrong = spec_it->kind == AttrKind::Int     ? (has_f || has_s || has_ints)
                   : spec_it->kind == AttrKind::Float ? (has_i || has_s || has_ints)
                   : spec_it->kind == AttrKind::Ints  ? (has_i || has_f || has_s || !has_ints)
                                                      : (has_i || has_f || has_ints || !has_s);
      if (wrong) fail(r, "attribute '" + name + "' must be " + kind_name(spec_it->kind));
      AttrValue v;
      v.kind = spec_it->kind;
      v.i = a->i();
      v.f = a->f();
      v.s = str(a->s());
      v.ints = vec(a->ints());
      r.attrs.emplace(name, v);
    }
  if (auto st = r.attrs.find("stream"); st != r.attrs.end())
    if (st->second.i != 0 && st->second.i != 1)
      fail(r, "attribute stream = " + std::to_string(st->second.i) + " must be 0 (main) or 1 (side)");
  for (const AttrSpec& s : spec.attrs) {
    if (r.attrs.count(s.name)) continue;
    if (s.required) fail(r, "is missing required attribute '" + std::string(s.name) + "'");
    AttrValue v;
    v.kind = s.kind;
    v.i = int64_t(s.default_value);
    v.f = s.default_value;
    r.attrs.emplace(s.name, v);
  }

  size_t repeat = 1;
  if (spec.weights_repeat) {
    int64_t n = r.i("n_experts");
    if (n < 1 || n > 1 << 20) fail(r, "attribute n_experts = " + std::to_string(n) + " is out of range");
    repeat = size_t(n);
  }
  // The scaled weight form (each weight followed by its scale) is told apart by the list's length.
  r.scaled = spec.scaled_weights && r.weights.size() == 2 * spec.weights.size() * repeat;
  // A plain list may end before trailing optional weights that an op gained later (hc_collapse's folded norm): plans
  // written before read them as absent (-1).
  if (repeat == 1 && !r.scaled)
    while (r.weights.size() < spec.weights.size() && spec.weights[r.weights.size()].optional) r.weights.push_back(-1);
  check_list("inputs", r.inputs, spec.inputs, 1, n_buffers);
  check_list("outputs", r.outputs, spec.outputs, 1, n_buffers);
  check_list("weights", r.weights, weight_specs(spec, r.scaled), repeat, n_weights);
  check_list("states", r.states, spec.states, 1, n_states);
  return r;
}

// Order and memory: every input is written before it is read, the token ids are never overwritten, and no
// op writes bytes that it also reads (except exact in-place updates the kernels allow).
void Plan::validate_dataflow(const std::vector<OpRef>& ops, std::vector<bool> written, const std::vector<int>& results,
                             const std::string& what) {
  const fb::Plan& p = *fb_;
  std::vector<bool> inputs = written;  // the buffers the caller fills: never overwritten
  auto range = [&](int b) {
    const fb::Buffer& buf = *p.buffers()->Get(b);
    return std::pair<uint64_t, uint64_t>(buf.offset(), buf.offset() + uint64_t(p.max_rows()) * buf.row_elems() * 4);
  };
  for (const OpRef& op : ops) {
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      int b = op.inputs[k];
      if (b >= 0 && !written[b])
        fail(op, "input " + std::to_string(k) + " reads buffer " + std::to_string(b) + " (" +
                     str(p.buffers()->Get(b)->name()) + ") before any op writes it, or after another buffer "
                     "sharing its arena bytes was written");
    }
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      int b = op.outputs[k];
      if (b < 0) continue;  // an absent optional output
      if (inputs[size_t(b)])
        fail(op, b == p.token_ids() && op.program.empty()
                     ? std::string("writes the token_ids buffer")
                     : "writes its program's input buffer " + std::to_string(b));
      auto [lo, hi] = range(b);
      auto overlaps = [&](int other) {
        auto [olo, ohi] = range(other);
        return lo < ohi && olo < hi;
      };
      for (size_t j = 0; j < op.inputs.size(); ++j) {
        int in = op.inputs[j];
        if (in < 0 || !overlaps(in)) continue;
        bool exact = range(in) == range(b);
        if (!(op.spec->in_place_ok && exact))
          fail(op, "output " + std::to_string(k) + " (buffer " + std::to_string(b) + ") overlaps input " +
                       std::to_string(j) + " (buffer " + std::to_string(in) + ") in the arena");
      }
      for (size_t j = 0; j < k; ++j)
        if (op.outputs[j] >= 0 && overlaps(op.outputs[j]))
          fail(op, "outputs " + std::to_string(j) + " and " + std::to_string(k) + " overlap in the arena");
    }
    // Writing a buffer clobbers every other buffer that shares its arena bytes.
    for (int b : op.outputs)
      for (int o = 0; b >= 0 && o < int(written.size()); ++o)
        if (o != b && written[o] && range(o).first < range(b).second && range(b).first < range(o).second)
          written[o] = false;
    for (int b : op.outputs)
      if (b >= 0) written[b] = true;
  }
  for (int b : results)
    if (!written[size_t(b)]) fail("no op writes " + what + " " + std::to_string(b));
}

}  // namespace smelt::runtime
