// What a plan contains, for `smelt-run inspect`: provenance, configuration, tables and sizes.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/plan.h"

namespace smelt::runtime {

nlohmann::ordered_json inspect_json(const Plan& plan);
std::string inspect_text(const Plan& plan);  // the same facts, one per line

}  // namespace smelt::runtime
