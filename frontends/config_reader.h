// Internal to the frontend: typed reads of config.json keys with their alternative spellings. Every
// failure is a smelt::Error naming the file and the key (with its path inside nested objects).
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "frontends/error.h"

namespace smelt {
struct ModelConfig;
}

namespace smelt::config_detail {

using json = nlohmann::json;
using Names = std::initializer_list<const char*>;

constexpr int64_t kMaxDim = int64_t(1) << 24;

inline std::string one_line(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  return s;
}

inline std::string short_dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

inline std::string num_str(double x) {
  std::ostringstream ss;
  ss << x;
  return ss.str();
}

// Reads typed keys (with their alternative spellings) from one JSON object; errors name the file and key.
struct Reader {
  const json& obj;
  const std::string& source;
  std::string prefix;  // "text_config." inside the nested layout

  [[noreturn]] void fail(const std::string& msg) const { throw Error(one_line(source + ": " + msg)); }
  std::string key(const std::string& k) const { return prefix + k; }

  // The first present, non-null spelling; `used` gets its name.
  const json* find(Names names, std::string* used = nullptr) const {
    for (const char* n : names) {
      auto it = obj.find(n);
      if (it != obj.end() && !it->is_null()) {
        if (used) *used = n;
        return &*it;
      }
    }
    return nullptr;
  }
  bool has(Names names) const { return find(names) != nullptr; }

  [[noreturn]] void missing(Names names) const {
    std::string msg = "missing required key '" + key(*names.begin()) + "'";
    if (names.size() > 1) {
      msg += " (or";
      for (auto it = names.begin() + 1; it != names.end(); ++it) msg += std::string(" '") + *it + "'";
      msg += ")";
    }
    fail(msg);
  }

  int64_t to_int(const json& v, const std::string& k, int64_t lo, int64_t hi) const {
    int64_t x = 0;
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) {
      fail("key '" + key(k) + "' = " + short_dump(v) + " is out of range [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
               std::fabs(v.get<double>()) < 9e15) {
      x = int64_t(v.get<double>());
    } else {
      fail("key '" + key(k) + "' must be an integer, got " + short_dump(v));
    }
    if (x < lo || x > hi)
      fail("key '" + key(k) + "' = " + short_dump(v) + " is out of range [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    return x;
  }
  double to_double(const json& v, const std::string& k, double lo, double hi) const {
    if (!v.is_number()) fail("key '" + key(k) + "' must be a number, got " + short_dump(v));
    double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      fail("key '" + key(k) + "' = " + short_dump(v) + " is out of range [" + num_str(lo) + ", " + num_str(hi) + "]");
    return x;
  }

  std::optional<int64_t> opt_int(Names names, int64_t lo, int64_t hi) const {
    std::string used;
    const json* v = find(names, &used);
    if (!v) return std::nullopt;
    return to_int(*v, used, lo, hi);
  }
  int64_t req_int(Names names, int64_t lo, int64_t hi) const {
    auto x = opt_int(names, lo, hi);
    if (!x) missing(names);
    return *x;
  }
  int64_t int_or(Names names, int64_t dflt, int64_t lo, int64_t hi) const { return opt_int(names, lo, hi).value_or(dflt); }
  std::optional<double> opt_double(Names names, double lo, double hi) const {
    std::string used;
    const json* v = find(names, &used);
    if (!v) return std::nullopt;
    return to_double(*v, used, lo, hi);
  }
  double double_or(Names names, double dflt, double lo, double hi) const {
    return opt_double(names, lo, hi).value_or(dflt);
  }
  bool bool_or(Names names, bool dflt) const {
    std::string used;
    const json* v = find(names, &used);
    if (!v) return dflt;
    if (!v->is_boolean()) fail("key '" + key(used) + "' must be true or false, got " + short_dump(*v));
    return v->get<bool>();
  }
  std::optional<std::string> opt_string(Names names) const {
    std::string used;
    const json* v = find(names, &used);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail("key '" + key(used) + "' must be a string, got " + short_dump(*v));
    return v->get<std::string>();
  }
  const json* opt_object(Names names) const {
    std::string used;
    const json* v = find(names, &used);
    if (v && !v->is_object()) fail("key '" + key(used) + "' must be a JSON object, got " + short_dump(*v));
    return v;
  }
  const json* opt_array(Names names) const {
    std::string used;
    const json* v = find(names, &used);
    if (v && !v->is_array()) fail("key '" + key(used) + "' must be a JSON array, got " + short_dump(*v));
    return v;
  }
  Reader sub(const json& o, const std::string& name) const { return Reader{o, source, prefix + name + "."}; }
};

// An integer list (e.g. layer ids); every entry in [lo, hi].
inline std::optional<std::vector<int64_t>> opt_int_list(const Reader& r, Names names, int64_t lo, int64_t hi) {
  std::string used;
  const json* v = r.find(names, &used);
  if (!v) return std::nullopt;
  if (!v->is_array()) r.fail("key '" + r.key(used) + "' must be a JSON array, got " + short_dump(*v));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) out.push_back(r.to_int((*v)[i], used + "[" + std::to_string(i) + "]", lo, hi));
  return out;
}

// config_v41.cc: the V4.1-only keys (sources, Engram, DSpark, vision, ...), after the common ones are read.
// `top` is the file's top level, `r` the text model's keys (text_config in the nested layout, else top).
void read_v41_fields(const Reader& top, const Reader& r, smelt::ModelConfig& c);

}  // namespace smelt::config_detail
