// Placeholder: filled in by the elementwise work.
#include "kernel.hpp"

namespace refgrad {}  // namespace refgrad
