// Placeholder: filled in by the shape work.
#include "kernel.hpp"

namespace refgrad {}  // namespace refgrad
