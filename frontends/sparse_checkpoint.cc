#include "frontends/sparse_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frontends/config.h"
#include "frontends/model.h"
#include "frontends/safetensors_writer.h"

namespace smelt {
namespace {

namespace fs = std::filesystem;

// The order of the safetensors library's dtype enum; it writes the larger ranks first.
int dtype_rank(DType d) {
  switch (d) {
    case DType::BOOL: return 0;
    case DType::U8: return 1;
    case DType::I8: return 2;
    case DType::F8_E5M2: return 3;
    case DType::F8_E4M3: return 4;
    case DType::F8_E8M0: return 5;
    case DType::I16: return 6;
    case DType::F16: return 7;
    case DType::BF16: return 8;
    case DType::I32: return 9;
    case DType::F32: return 10;
    case DType::F64: return 11;
    case DType::I64: return 12;
  }
  return -1;
}

bool is_engram_table(const std::string& name) {
  return name.find(".engram.embed.") != std::string::npos;
}

// Release order of the shard groups (see the header).
std::vector<std::string> group_order(const ModelConfig& c) {
  std::vector<std::string> g;
  if (c.vision.present()) g.push_back("vision");
  g.push_back("embed");
  for (int i = 0; i < c.num_hidden_layers; ++i) g.push_back("layers." + std::to_string(i));
  g.push_back("head");
  for (int s = 0; s < c.num_nextn_predict_layers; ++s) g.push_back("mtp." + std::to_string(s));
  for (int id : c.engram_layer_ids) g.push_back("engram." + std::to_string(id));
  return g;
}

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

// One file: the header, then a hole as long as the data section.
SparseShard write_shard(const std::string& dir, const std::string& file, const std::vector<const StoredTensor*>& ts) {
  std::vector<HeaderEntry> entries;
  uint64_t pos = 0;
  for (const StoredTensor* t : ts) {
    entries.push_back({t->name, t->dtype, t->shape, pos, pos + t->nbytes()});
    pos += t->nbytes();
  }
  std::vector<uint8_t> header = encode_safetensors_header(entries);
  const std::string path = (fs::path(dir) / file).string(), tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create '" + tmp + "': " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(path + ": " + what + ": " + std::strerror(err));
  };
  for (size_t done = 0; done < header.size();) {
    ssize_t w = ::write(fd, header.data() + done, header.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write the header");
    done += size_t(w);
  }
  const uint64_t size = header.size() + pos;
  if (::ftruncate(fd, off_t(size)) != 0) fail("cannot extend to " + std::to_string(size) + " bytes (sparse)");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot close: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot rename '" + tmp + "' into place");
  }
  return {file, ts.size(), pos, size};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) throw Error(path + ": cannot write");
}

}  // namespace

SparseCheckpointSummary write_sparse_checkpoint(
    const std::string& config_path, const std::string& out_dir, int shards,
    const std::function<void(const SparseShard&, size_t, size_t)>& progress) {
  const ModelConfig c = load_config(config_path);
  const std::vector<StoredTensor> all = release_tensors(c);
  if (shards < 0) throw Error(out_dir + ": the shard count must be positive (got " + std::to_string(shards) + ")");
  if (size_t(shards) > all.size())
    throw Error(out_dir + ": " + std::to_string(shards) + " shards for only " + std::to_string(all.size()) + " tensors");

  // The release's sequence: groups in release order, each in the safetensors library's order.
  std::map<std::string, std::vector<const StoredTensor*>> by_group;
  for (const StoredTensor& t : all) by_group[t.group].push_back(&t);
  std::vector<std::vector<const StoredTensor*>> units;
  for (const std::string& g : group_order(c)) {
    auto it = by_group.find(g);
    if (it == by_group.end()) continue;
    std::vector<const StoredTensor*> u = std::move(it->second);
    by_group.erase(it);
    std::sort(u.begin(), u.end(), [](const StoredTensor* a, const StoredTensor* b) {
      bool ta = is_engram_table(a->name), tb = is_engram_table(b->name);
      if (ta != tb) return ta;
      if (ta) return a->dtype == DType::F8_E4M3 && b->dtype != DType::F8_E4M3;  // table weight, then its scale
      int ra = dtype_rank(a->dtype), rb = dtype_rank(b->dtype);
      return ra != rb ? ra > rb : a->name < b->name;
    });
    units.push_back(std::move(u));
  }
  if (!by_group.empty()) throw Error(config_path + ": internal error: tensor group '" + by_group.begin()->first + "' has no shard");

  std::vector<std::vector<const StoredTensor*>> files;
  if (shards == 0) {
    files = std::move(units);
  } else {
    // Cut the sequence into `shards` runs: each run takes tensors until it reaches the bytes still to
    // place divided by the runs still to fill, keeping one tensor for every later run.
    std::vector<const StoredTensor*> seq;
    uint64_t remaining = 0;
    for (const auto& u : units)
      for (const StoredTensor* t : u) {
        seq.push_back(t);
        remaining += t->nbytes();
      }
    size_t next = 0;
    for (int k = 0; k < shards; ++k) {
      const size_t runs_left = size_t(shards - k);
      const uint64_t target = remaining / runs_left;
      std::vector<const StoredTensor*> f;
      uint64_t bytes = 0;
      while (next < seq.size() && seq.size() - next > runs_left - 1 &&
             (f.empty() || k == shards - 1 || bytes + seq[next]->nbytes() <= target ||
              bytes + seq[next]->nbytes() / 2 <= target)) {
        bytes += seq[next]->nbytes();
        f.push_back(seq[next++]);
      }
      remaining -= bytes;
      files.push_back(std::move(f));
    }
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir + ": cannot create the directory: " + ec.message());

  SparseCheckpointSummary summary;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string name = shard_name(k, files.size());
    SparseShard s = write_shard(out_dir, name, files[k]);
    for (const StoredTensor* t : files[k]) weight_map[t->name] = name;
    summary.tensors += s.tensors;
    summary.payload_bytes += s.payload_bytes;
    summary.shards.push_back(s);
    if (progress) progress(summary.shards.back(), k, files.size());
  }
  // The index as transformers writes it: sorted keys, two-space indent.
  nlohmann::json index = {{"metadata", {{"total_size", summary.payload_bytes}}}, {"weight_map", std::move(weight_map)}};
  write_text((fs::path(out_dir) / "model.safetensors.index.json").string(), index.dump(2));

  const fs::path config_out = fs::path(out_dir) / "config.json";
  if (!fs::exists(config_out) || !fs::equivalent(config_path, config_out)) {
    std::ifstream in(config_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) throw Error(config_path + ": cannot read");
    write_text(config_out.string(), ss.str());
  }
  return summary;
}

}  // namespace smelt
