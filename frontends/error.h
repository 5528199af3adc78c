// One error type for bad input everywhere in smelt: its message is one line that names the file and the
// tensor or key at fault. Tools print it as "error: <message>" and exit non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace smelt {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace smelt
