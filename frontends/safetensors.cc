// Safetensors reader. Format: 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the data section;
// offsets are relative to the data section. Everything is checked before a view is handed out, so a bad
// file is an error message, never an out-of-range read.
#include "frontends/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_set>

#include "schemas/plan_file.h"

namespace smelt {
namespace {

using json = nlohmann::json;

struct DTypeRow {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F32, "F32", 4},         {DType::BF16, "BF16", 2},       {DType::F16, "F16", 2},
    {DType::F64, "F64", 8},         {DType::I64, "I64", 8},         {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},         {DType::I8, "I8", 1},           {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1},
};

// The reference safetensors library refuses headers above 100 MB; so do we (a guard against absurd lengths).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string range_str(uint64_t b, uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + "]"; }

// A JSON value as a short one-line string for error messages.
std::string short_dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// One-line form of a library message (nlohmann parse errors may quote raw input).
std::string one_line(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  return s;
}

// A non-negative JSON integer that fits in int64, else nullopt.
std::optional<uint64_t> as_index(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t x = v.get<uint64_t>();
    if (x <= uint64_t(std::numeric_limits<int64_t>::max())) return x;
    return std::nullopt;
  }
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x >= 0) return uint64_t(x);
  }
  return std::nullopt;
}

// Finds a repeated top-level key in one linear pass. (nlohmann's callback parser would do, but it rescans
// the parent object at every nested object's end: quadratic in the tensor count, minutes for 10^5 tensors.)
struct TopLevelKeys : json::json_sax_t {
  int depth = 0;
  std::unordered_set<std::string> seen;
  std::string duplicate;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& k) override {
    if (depth == 1 && duplicate.empty() && !seen.insert(k).second) duplicate = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception&) override { return false; }
};

struct ParsedHeader {
  uint64_t header_size = 0;
  uint64_t header_hash = 0;
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

ParsedHeader parse_header(const uint8_t* data, uint64_t size, const std::string& name, uint32_t file_index) {
  auto fail = [&](const std::string& msg) -> Error { return Error(one_line(name + ": " + msg)); };
  if (size < 8)
    throw fail("file is " + std::to_string(size) + " bytes, shorter than the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian on any host
  if (n > size - 8)
    throw fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
               " bytes); the file is truncated or not safetensors");
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " exceeds the 100 MB safetensors limit");

  ParsedHeader out;
  out.header_size = n;
  out.header_hash = plan_file::fnv1a64(data, size_t(8 + n));
  const char* text = reinterpret_cast<const char*>(data + 8);

  json header;
  try {
    header = json::parse(text, text + n);
  } catch (const json::exception& e) {
    throw fail("header is not valid JSON: " + one_line(e.what()));
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  // nlohmann keeps the last of duplicate keys silently; a duplicate tensor name must be an error.
  TopLevelKeys keys;
  json::sax_parse(text, text + n, &keys);
  if (!keys.duplicate.empty()) throw fail("tensor '" + keys.duplicate + "' appears twice in the header");

  const uint64_t data_start = 8 + n, data_size = size - data_start;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw fail("__metadata__ is not a JSON object");
      for (auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) throw fail("__metadata__ value for '" + mk + "' is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    auto tfail = [&](const std::string& msg) { return fail("tensor '" + key + "' " + msg); };
    if (!v.is_object()) throw tfail("entry is not a JSON object");
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) throw tfail("has no string 'dtype'");
    auto dtype = parse_dtype(dt->get<std::string>());
    if (!dtype) throw tfail("has unknown dtype " + short_dump(*dt));
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) throw tfail("has no 'shape' array");
    TensorInfo t;
    t.name = key;
    t.dtype = *dtype;
    t.file = file_index;
    for (const auto& d : *sh) {
      auto x = as_index(d);
      if (!x) throw tfail("has shape entry " + short_dump(d) + ", not a non-negative integer");
      t.shape.push_back(int64_t(*x));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      throw tfail("has no 'data_offsets' pair [begin, end]");
    auto b = as_index((*off)[0]), e = as_index((*off)[1]);
    if (!b || !e) throw tfail("has data_offsets " + short_dump(*off) + ", not two non-negative integers");
    if (*e < *b) throw tfail("has data_offsets " + range_str(*b, *e) + " with end before begin");
    if (*e > data_size)
      throw tfail("has data_offsets " + range_str(*b, *e) + " past the end of the data section (" +
                  std::to_string(data_size) + " bytes)");
    // Bytes the shape needs, saturating: a product past 2^64 cannot match any real range anyway.
    unsigned __int128 need = dtype_size(*dtype);
    bool zero = false;
    for (int64_t d : t.shape) {
      if (d == 0) zero = true;
      need *= uint64_t(d);
      if (need > std::numeric_limits<uint64_t>::max()) need = std::numeric_limits<uint64_t>::max();
    }
    if (zero) need = 0;
    if (need != *e - *b)
      throw tfail("has data_offsets " + range_str(*b, *e) + " but shape " + shape_str(t.shape) + " x " +
                  std::string(dtype_name(*dtype)) + " needs " + std::to_string(uint64_t(need)) + " bytes");
    t.offset = data_start + *b;
    t.nbytes = *e - *b;
    ranges.push_back({*b, *e, out.tensors.size()});
    out.tensors.push_back(std::move(t));
  }

  // Overlaps: sort by begin; every non-empty range must start at or after the furthest end seen so far.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const Range* furthest = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (furthest && r.begin < furthest->end)
      throw fail("tensors '" + out.tensors[furthest->index].name + "' " + range_str(furthest->begin, furthest->end) +
                 " and '" + out.tensors[r.index].name + "' " + range_str(r.begin, r.end) + " overlap");
    if (!furthest || r.end > furthest->end) furthest = &r;
  }
  // File order (by offset, then name).
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
  });
  return out;
}

bool is_regular_file(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

std::string_view dtype_name(DType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r.size;
  return 0;
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& r : kDTypes)
    if (r.name == s) return r.dtype;
  if (s == "F8_E4M3FN") return DType::F8_E4M3;  // torch's spelling, seen in some writers
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  for (int64_t d : shape)
    if (d == 0) return 0;  // before multiplying: [2^62, 2^62, 0] is a valid empty tensor
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- MappedFile ----

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block us
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = uint64_t(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, size_t(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(path + ": cannot mmap " + std::to_string(f->size_) + " bytes: " + std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->owned_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

std::shared_ptr<MappedFile> MappedFile::borrow(const uint8_t* data, uint64_t size, const std::string& name) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = name;
  f->data_ = data;
  f->size_ = size;
  return f;
}

MappedFile::~MappedFile() {
  if (owned_ && data_) munmap(const_cast<uint8_t*>(data_), size_t(size_));
}

// ---- SafetensorsFile ----

SafetensorsFile SafetensorsFile::open(const std::string& path, uint32_t file_index) {
  return parse(MappedFile::open(path), file_index);
}

SafetensorsFile SafetensorsFile::parse(std::shared_ptr<MappedFile> file, uint32_t file_index) {
  ParsedHeader h = parse_header(file->data(), file->size(), file->path(), file_index);
  SafetensorsFile f;
  f.file_ = std::move(file);
  f.header_size_ = h.header_size;
  f.header_hash_ = h.header_hash;
  f.tensors_ = std::move(h.tensors);
  f.metadata_ = std::move(h.metadata);
  return f;
}

void SafetensorsFile::validate_bytes(const uint8_t* data, uint64_t size, const std::string& name) {
  parse_header(data, size, name, 0);
}

const std::string& SafetensorsFile::path() const { return file_->path(); }
uint64_t SafetensorsFile::file_size() const { return file_->size(); }

// ---- Checkpoint ----

Checkpoint Checkpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  Checkpoint ck;
  ck.dir_ = dir;
  std::vector<std::string> paths;
  std::map<std::string, std::string> weight_map;  // tensor -> file path (from the index)
  std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();

  if (is_regular_file(dir)) {
    paths.push_back(dir);  // a single .safetensors file given directly
  } else if (is_regular_file(index_path)) {
    std::ifstream in(index_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) throw Error(index_path + ": cannot read");
    json index;
    try {
      index = json::parse(ss.str());
    } catch (const json::exception& e) {
      throw Error(index_path + ": not valid JSON: " + one_line(e.what()));
    }
    if (!index.is_object()) throw Error(index_path + ": not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) throw Error(index_path + ": no 'weight_map' object");
    if (wm->empty()) throw Error(index_path + ": 'weight_map' is empty");
    std::set<std::string> files;
    for (auto& [tensor, file] : wm->items()) {
      if (!file.is_string() || file.get<std::string>().empty())
        throw Error(index_path + ": tensor '" + tensor + "' maps to " + short_dump(file) + ", not a file name");
      std::string p = (fs::path(dir) / file.get<std::string>()).string();
      if (!files.count(p) && !is_regular_file(p))
        throw Error(index_path + ": tensor '" + tensor + "' is mapped to '" + file.get<std::string>() +
                    "', which does not exist in " + dir);
      files.insert(p);
      weight_map[tensor] = p;
    }
    paths.assign(files.begin(), files.end());
  } else if (is_regular_file((fs::path(dir) / "model.safetensors").string())) {
    // A single-file checkpoint: other .safetensors beside it (logits, fixtures) are not weights.
    paths.push_back((fs::path(dir) / "model.safetensors").string());
  } else {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) throw Error(dir + ": cannot list directory: " + ec.message());
    for (const auto& entry : it)
      if (entry.path().extension() == ".safetensors" && entry.path().filename() != "engram_token_map.safetensors" &&
          is_regular_file(entry.path().string()))
        paths.push_back(entry.path().string());
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) throw Error(dir + ": no *.safetensors files and no model.safetensors.index.json");
  }

  std::map<std::string, uint32_t> file_index;
  for (const auto& p : paths) {
    uint32_t idx = uint32_t(ck.files_.size());
    file_index[p] = idx;
    ck.files_.push_back(SafetensorsFile::open(p, idx));
    for (const TensorInfo& t : ck.files_.back().tensors()) {
      auto [it, inserted] = ck.tensors_.emplace(t.name, t);
      if (!inserted)
        throw Error(dir + ": tensor '" + t.name + "' is in both '" + ck.files_[it->second.file].path() + "' and '" +
                    p + "'");
    }
  }
  for (const auto& [tensor, p] : weight_map) {
    auto it = ck.tensors_.find(tensor);
    if (it == ck.tensors_.end() || it->second.file != file_index[p])
      throw Error(index_path + ": tensor '" + tensor + "' is mapped to '" + fs::path(p).filename().string() +
                  "', but that file has no such tensor");
  }
  return ck;
}

const SafetensorsFile& Checkpoint::add_file(const std::string& path) {
  const uint32_t idx = uint32_t(files_.size());
  SafetensorsFile f = SafetensorsFile::open(path, idx);
  for (const TensorInfo& t : f.tensors())
    if (const TensorInfo* have = find(t.name))
      throw Error(path + ": tensor '" + t.name + "' is also in '" + files_[have->file].path() + "'");
  for (const TensorInfo& t : f.tensors()) tensors_.emplace(t.name, t);
  files_.push_back(std::move(f));
  return files_.back();
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::span<const uint8_t> Checkpoint::bytes(const TensorInfo& t) const {
  if (t.file >= files_.size()) throw Error(dir_ + ": tensor '" + t.name + "' refers to an unknown file");
  const auto& m = files_[t.file].mapping();
  if (t.offset > m->size() || t.nbytes > m->size() - t.offset)
    throw Error(m->path() + ": tensor '" + t.name + "' view lies outside the file");
  return {m->data() + t.offset, size_t(t.nbytes)};
}

uint64_t Checkpoint::payload_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes;
  return n;
}

}  // namespace smelt
