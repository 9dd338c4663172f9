// Placeholder: filled in by the indexing work.
#include "kernel.hpp"

namespace refgrad {}  // namespace refgrad
