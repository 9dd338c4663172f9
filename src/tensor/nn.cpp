// Placeholder: filled in by the nn work.
#include "kernel.hpp"

namespace refgrad {}  // namespace refgrad
