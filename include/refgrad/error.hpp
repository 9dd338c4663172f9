// refgrad::Error and check(): the one way refgrad reports bad input.
//
// Nothing in refgrad asserts or aborts on user input: a Jupyter kernel that
// loads a bad program must survive it. Every message names the operation and
// the shapes or dtypes involved, e.g.
//   "matmul: shapes [2,3] and [4,5] cannot be multiplied".
//
// This header is included by C++17 translation units (src/tensor), so it
// sticks to C++17.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace refgrad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<< into one message.
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// check(shape_ok, "matmul: shapes ", a, " and ", b, " cannot be multiplied");
template <class... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) throw Error(concat(parts...));
}

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace refgrad
