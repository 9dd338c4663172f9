// Placeholder: filled in by the reduction work.
#include "kernel.hpp"

namespace refgrad {}  // namespace refgrad
