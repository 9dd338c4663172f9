// Placeholder: filled in by the linalg work.
#include "kernel.hpp"

namespace refgrad {}  // namespace refgrad
