// The eager tape's shape, view and indexing ops (include/refgrad/eager.hpp):
// each computes its result with the L0 ops and records the nodes PyTorch records.
#include <utility>

#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/ops.hpp"
#include "tape.hpp"

namespace refgrad::eager {

using tape::record_op;
using tape::Saved;

}  // namespace refgrad::eager
