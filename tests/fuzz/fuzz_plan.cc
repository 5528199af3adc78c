// libFuzzer target: plan files from memory through the header check, the flatbuffers verifier and the
// semantic validation of runtime/plan. Every input must end in a valid Plan or a smelt::Error.
#include <cstring>
#include <span>

#include "runtime/inspect.h"
#include "runtime/plan.h"
#include "schemas/plan_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  try {
    smelt::runtime::Plan::from_bytes(in, "fuzz.smelt");
  } catch (const smelt::Error&) {
  }
  // The same bytes behind a freshly computed header, so that mutations reach the verifier and the semantic
  // checks instead of stopping at the payload hash.
  bool has_header = size >= smelt::plan_file::kHeaderSize && std::memcmp(data, smelt::plan_file::kMagic, 8) == 0;
  std::vector<uint8_t> file = smelt::plan_file::wrap(has_header ? in.subspan(smelt::plan_file::kHeaderSize) : in);
  try {
    smelt::runtime::Plan plan = smelt::runtime::Plan::from_bytes(file, "fuzz.smelt");
    (void)smelt::runtime::inspect_text(plan);
  } catch (const smelt::Error&) {
  }
  return 0;
}
