// The eager tape's neural-network ops (include/refgrad/eager.hpp): each
// computes its result with the L0 ops and records the node PyTorch records.
#include <utility>

#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/ops.hpp"
#include "tape.hpp"

namespace refgrad::eager {

using tape::record_op;
using tape::Saved;

namespace {

// at::Reduction, as the loss nodes save it.
constexpr std::int64_t kReductionMean = 1;

}  // namespace

Variable mse_loss(const Variable& self, const Variable& target) {
  const Tensor result = refgrad::mean(refgrad::square(refgrad::sub(self.data(), target.data())));
  Saved saved = {{"reduction", kReductionMean}, {"self", self.data()}, {"target", target.data()}};
  return record_op("MseLossBackward0", result, {self, target}, std::move(saved));
}

}  // namespace refgrad::eager
