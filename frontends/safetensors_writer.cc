#include "frontends/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace smelt {

std::vector<uint8_t> encode_safetensors_header(const std::vector<HeaderEntry>& entries,
                                               const std::map<std::string, std::string>& metadata) {
  // Written entry by entry (an ordered_json object looks keys up linearly: quadratic for 10^4 tensors).
  // Same bytes as the safetensors library's compact header.
  auto quoted = [](const std::string& s) { return nlohmann::json(s).dump(); };
  std::string text = "{";
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      text += (first ? "" : ",") + quoted(k) + ":" + quoted(v);
      first = false;
    }
    text += "}";
  }
  for (const auto& e : entries) {
    if (text.size() > 1) text += ",";
    text += quoted(e.name) + ":{\"dtype\":\"" + std::string(dtype_name(e.dtype)) + "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) text += (i ? "," : "") + std::to_string(e.shape[i]);
    text += "],\"data_offsets\":[" + std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + text.size());
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(n >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<HeaderEntry> entries;
  std::set<std::string> names;
  uint64_t pos = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") throw Error(path + ": '__metadata__' cannot be a tensor name");
    if (!names.insert(t.name).second) throw Error(path + ": tensor '" + t.name + "' is written twice");
    unsigned __int128 need = dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) throw Error(path + ": tensor '" + t.name + "' has a negative dimension");
      need = std::min<unsigned __int128>(need * uint64_t(d), ~uint64_t(0));  // saturate: never matches
    }
    if (need != t.bytes.size())
      throw Error(path + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) + " bytes but its shape x " +
                  std::string(dtype_name(t.dtype)) + " needs " + std::to_string(uint64_t(need)));
    entries.push_back({t.name, t.dtype, t.shape, pos, pos + uint64_t(need)});
    pos += uint64_t(need);
  }
  std::vector<uint8_t> header = encode_safetensors_header(entries, metadata);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path + ": cannot open '" + tmp + "' for writing");
    out.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size()));
    for (const auto& t : tensors)
      if (!t.bytes.empty()) out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(path + ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename '" + tmp + "' into place");
  }
}

}  // namespace smelt
