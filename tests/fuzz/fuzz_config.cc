// Feeds arbitrary text to the config.json parser. smelt::Error is the expected answer to bad input; any
// other exception, a crash or a sanitizer report is a bug. A config that parses must survive
// config_to_json -> parse_config unchanged, and its tensor list must be computable.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "frontends/config.h"
#include "frontends/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  smelt::ModelConfig c;
  try {
    c = smelt::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  } catch (const smelt::Error&) {
    return 0;
  }
  smelt::ModelConfig back = smelt::parse_config(smelt::config_to_json(c), "normalised.json");  // must not throw
  if (!(back == c)) abort();
  // Keep the tensor list small enough to build (the fuzzer can ask for 2^20 experts).
  if (c.family == smelt::ModelFamily::DeepseekV4 && int64_t(c.num_hidden_layers) * (c.n_routed_experts + 40) < 20000)
    smelt::expected_tensors(c);
  return 0;
}
