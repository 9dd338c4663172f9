// Placeholder: filled in by the repr work.
#include "kernel.hpp"

namespace refgrad {}  // namespace refgrad
