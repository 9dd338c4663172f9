// The eager tape's shape, view and indexing ops (include/refgrad/eager.hpp):
// each computes its result with the L0 ops and records the nodes PyTorch records.
// Dims and indices are saved as given (negative ones stay negative), as
// PyTorch saves them.
#include <cstdint>
#include <limits>
#include <utility>

#include "refgrad/eager.hpp"
#include "refgrad/error.hpp"
#include "refgrad/ops.hpp"
#include "tape.hpp"

namespace refgrad::eager {

using tape::record_op;
using tape::Saved;

namespace {

// What the view-like nodes save to restore the input's shape.
Saved self_sizes_saved(const Variable& self) { return {{"self_sym_sizes", IntList(self.data().sizes())}}; }

// Tensor.clone(): a contiguous copy; its grad passes straight through.
Variable clone(const Variable& self) { return record_op("CloneBackward0", self.data().clone(), {self}, {}); }

// Tensor.options() as IndexBackward0 saves it: dtype, device and layout (no requires_grad).
TensorOptions options_of(const Tensor& tensor) {
  return TensorOptions{tensor.dtype(), tensor.device(), Layout::Strided, std::nullopt};
}

}  // namespace

Variable tape::unsafe_view(const Variable& self, const Shape& shape) {
  // Only ever called on a fresh contiguous result (a clone, an mm), so a view exists.
  return record_op("UnsafeViewBackward0", refgrad::view(self.data(), shape), {self}, self_sizes_saved(self));
}

Variable view(const Variable& self, const Shape& shape) {
  return record_op("ViewBackward0", refgrad::view(self.data(), shape), {self}, self_sizes_saved(self));
}

// ATen's reshape: a view of a contiguous tensor; _reshape_alias when the
// strides let the new shape be a view anyway (refgrad::reshape then returns a
// view of the same storage); otherwise a contiguous clone, _unsafe_view'd.
Variable reshape(const Variable& self, const Shape& shape) {
  const Tensor& data = self.data();
  if (data.is_contiguous()) return view(self, shape);
  Tensor reshaped = refgrad::reshape(data, shape);
  if (reshaped.storage() == data.storage()) {
    return record_op("ReshapeAliasBackward0", std::move(reshaped), {self}, self_sizes_saved(self));
  }
  return tape::unsafe_view(clone(self), reshaped.sizes());
}

// ATen's flatten: dims start_dim..end_dim merged by reshape; a 0-d tensor
// becomes [1]; a single dim (start == end) is the tensor itself.
Variable flatten(const Variable& self, std::int64_t start_dim, std::int64_t end_dim) {
  const Shape& sizes = self.data().sizes();
  if (sizes.empty()) return reshape(self, {1});
  const std::int64_t start = wrap_dim(start_dim, self.data().dim(), "eager::flatten");
  const std::int64_t end = wrap_dim(end_dim, self.data().dim(), "eager::flatten");
  check(start <= end, "eager::flatten: start_dim ", start_dim, " cannot come after end_dim ", end_dim,
        " (shape ", shape_text(sizes), ")");
  if (start == end) return self;
  Shape shape(sizes.begin(), sizes.begin() + start);
  std::int64_t merged = 1;
  for (std::int64_t d = start; d <= end; ++d) merged *= sizes[static_cast<std::size_t>(d)];
  shape.push_back(merged);
  shape.insert(shape.end(), sizes.begin() + end + 1, sizes.end());
  return reshape(self, shape);
}

Variable transpose(const Variable& self, std::int64_t dim0, std::int64_t dim1) {
  return record_op("TransposeBackward0", refgrad::transpose(self.data(), dim0, dim1), {self},
                   {{"dim0", dim0}, {"dim1", dim1}});
}

Variable permute(const Variable& self, const IntList& dims) {
  return record_op("PermuteBackward0", refgrad::permute(self.data(), dims), {self}, {{"dims", dims}});
}

Variable unsqueeze(const Variable& self, std::int64_t dim) {
  return record_op("UnsqueezeBackward0", refgrad::unsqueeze(self.data(), dim), {self}, {{"dim", dim}});
}

Variable expand(const Variable& self, const Shape& sizes) {
  return record_op("ExpandBackward0", refgrad::expand(self.data(), sizes), {self}, self_sizes_saved(self));
}

Variable contiguous(const Variable& self) {
  if (self.data().is_contiguous()) return self;
  return clone(self);
}

Variable select(const Variable& self, std::int64_t dim, std::int64_t index) {
  Saved saved = {{"dim", dim}, {"index", index}, {"self_sym_sizes", IntList(self.data().sizes())}};
  return record_op("SelectBackward0", refgrad::select(self.data(), dim, index), {self}, std::move(saved));
}

// Saves start and end as Python indexing passes them: an open start as 0, an open end as INT64_MAX.
Variable slice(const Variable& self, std::int64_t dim, std::optional<std::int64_t> start,
               std::optional<std::int64_t> end, std::int64_t step) {
  const std::int64_t saved_start = start.value_or(0);
  const std::int64_t saved_end = end.value_or(std::numeric_limits<std::int64_t>::max());
  Saved saved = {{"dim", dim},
                 {"end", saved_end},
                 {"self_sym_sizes", IntList(self.data().sizes())},
                 {"start", saved_start},
                 {"step", step}};
  return record_op("SliceBackward0", refgrad::slice(self.data(), dim, saved_start, saved_end, step), {self},
                   std::move(saved));
}

Variable index(const Variable& self, const Tensor& indices) {
  check(indices.defined() && indices.dtype() == DType::Int64, "eager::index: expected int64 indices, got ",
        indices.defined() ? dtype_name(indices.dtype()) : "an undefined tensor");
  check(self.data().dim() >= 1, "eager::index: cannot index a 0-d tensor");
  // x[indices] is index.Tensor with one index tensor, for dim 0: PyTorch saves the list.
  const std::vector<OptionalTensor> index_list = {indices};
  Saved saved = {{"indices", index_list},
                 {"self_options", options_of(self.data())},
                 {"self_sym_sizes", IntList(self.data().sizes())}};
  return record_op("IndexBackward0", refgrad::index(self.data(), index_list), {self}, std::move(saved));
}

Variable index_select(const Variable& self, std::int64_t dim, const Tensor& index) {
  Saved saved = {{"dim", dim}, {"index", index}, {"self_sym_sizes", IntList(self.data().sizes())}};
  return record_op("IndexSelectBackward0", refgrad::index_select(self.data(), dim, index), {self}, std::move(saved));
}

}  // namespace refgrad::eager
