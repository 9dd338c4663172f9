// The ATen ops refgrad runs as instructions: torch's schema (verbatim, checked by tests/python/test_aten.py)
// next to a function over L0's primitives. A backward kernel (tanh_backward, native_layer_norm_backward,
// ...) runs the node whose derivatives.yaml formula calls it, with the kernel's arguments as that
// node's saved fields: the same arithmetic the node's instruction runs.
#include <algorithm>
#include <map>

#include "define.hpp"
#include "functions_manual.hpp"
#include "refgrad/aten.hpp"

namespace refgrad::nodes {
namespace {

using Run = AtenResults (*)(const AtenArgs&);

FieldValue field(const OptionalTensor& tensor) { return tensor ? FieldValue(*tensor) : FieldValue(None{}); }
template <class T>
FieldValue field(const std::optional<T>& value) {
  return value ? FieldValue(*value) : FieldValue(None{});
}

// The node `name` called with this incoming grad (a node whose forward had several outputs, as
// native_group_norm's, gets none for the others) and these saved fields; its results, one per input.
AtenResults run_node(std::string_view name, const Tensor& grad, Need need,
                     const std::map<std::string, FieldValue>& saved) {
  const std::size_t count = get_node(name).schema.num_grads;
  Grads grads(count == kVariadic ? 1 : count);
  grads.at(0) = grad;
  const Grads results = call_node(name, grads, need, saved);
  return AtenResults(results.begin(), results.end());
}

AtenResults one(const Tensor& result) { return {result}; }

// self[..., index, ...] = src along dim, out of place: index_put with a one-element index at dim.
Tensor select_scatter(const Tensor& self, const Tensor& src, std::int64_t dim, std::int64_t index) {
  const std::int64_t rank = static_cast<std::int64_t>(self.sizes().size());
  if (dim < 0) dim += rank;
  if (index < 0) index += self.sizes().at(static_cast<std::size_t>(dim));
  std::vector<OptionalTensor> indices(static_cast<std::size_t>(dim), std::nullopt);
  indices.push_back(full({1}, index, DType::Int64));
  return index_put(self, indices, unsqueeze(src, dim));
}

// Inductor's decomposition of index_put with accumulate for masked indices (torch/_decomp's
// _unsafe_masked_index_put_accumulate): indices clamped into range, masked-off values made 0.
Tensor unsafe_masked_index_put_accumulate(const Tensor& self, const Tensor& mask, std::vector<OptionalTensor> indices,
                                          const Tensor& values) {
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (!indices[i]) continue;
    const std::int64_t size = self.sizes().at(i);
    indices[i] = clamp(*indices[i], std::optional<Scalar>(-size), std::optional<Scalar>(size - 1));
  }
  return index_put(self, indices, masked_fill(values, logical_not(mask), 0), true);
}

// Inductor's max pooling keeps the argmax as an offset within the window (int8); this turns offsets back
// into flat indices into each input plane, as max_pool*d_with_indices gives them (inductor_prims.py's
// _low_memory_max_pool_offsets_to_indices_aten).
Tensor max_pool_offsets_to_indices(const Tensor& offsets, const IntList& kernel_size, const IntList& input_size,
                                   const IntList& stride, const IntList& padding, const IntList& dilation) {
  const std::size_t dims = kernel_size.size();
  check(input_size.size() == dims && stride.size() == dims && padding.size() == dims && dilation.size() == dims &&
            offsets.sizes().size() >= dims,
        "_low_memory_max_pool_offsets_to_indices: kernel_size, input_size, stride, padding and dilation must have "
        "one entry per pooled dim");
  const std::size_t rank = offsets.sizes().size();
  Tensor remaining = to(offsets, DType::Int64);
  Tensor flat;
  for (std::size_t d = 0; d < dims; ++d) {
    std::int64_t window = 1;  // the window's size over the dims after d
    for (std::size_t e = d + 1; e < dims; ++e) window *= kernel_size[e];
    const Tensor step = div(remaining, Scalar(window), std::string("floor"));
    remaining = sub(remaining, mul(step, Scalar(window)));
    Shape along(rank, 1);
    along[rank - dims + d] = offsets.sizes()[rank - dims + d];
    const Tensor start = sub(mul(reshape(arange(Scalar(along[rank - dims + d]), DType::Int64), along), Scalar(stride[d])),
                             Scalar(padding[d]));
    const Tensor index = add(start, mul(step, Scalar(dilation[d])));
    flat = d == 0 ? index : add(mul(flat, Scalar(input_size[d])), index);
  }
  return flat;
}

// self with self[..., start:end:step, ...] = src along dim, out of place (Python's slice bounds).
Tensor slice_scatter(const Tensor& self, const Tensor& src, std::int64_t dim, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> end, std::int64_t step) {
  const std::int64_t rank = static_cast<std::int64_t>(self.sizes().size());
  if (dim < 0) dim += rank;
  check(dim >= 0 && dim < rank && step > 0, "slice_scatter: dim ", dim, " and step ", step, " do not fit a tensor of rank ",
        rank);
  const std::int64_t size = self.sizes()[static_cast<std::size_t>(dim)];
  const auto bound = [size](std::optional<std::int64_t> value, std::int64_t fallback) {
    std::int64_t at = value.value_or(fallback);
    if (at < 0) at += size;
    return std::clamp<std::int64_t>(at, 0, size);
  };
  const std::int64_t first = bound(start, 0), last = std::max(first, bound(end, size));
  std::vector<OptionalTensor> indices(static_cast<std::size_t>(dim), std::nullopt);
  indices.push_back(arange(Scalar(first), Scalar(last), Scalar(step), DType::Int64));
  return index_put(self, indices, src);
}

// a * b + c rounded once: exact products of float32 (and narrower) numbers in float64, one rounding there,
// then one to the dtype; float64 operands round twice (no wider type here).
Tensor fma(const Tensor& a, const Tensor& b, const Tensor& c) {
  const DType dtype = result_type({Operand(a), Operand(b), Operand(c)});
  const auto wide = [](const Tensor& t) { return to(t, DType::Float64); };
  return to(add(mul(wide(a), wide(b)), wide(c)), dtype);
}

// self with its (offset, dim1, dim2) diagonal replaced by src (whose last dim runs along it), out of place:
// index_put with the diagonal's two index tensors. Advanced indices at two dims give their dim where the
// first of them is when the two are adjacent, else first of all (ATen's rule), so src's last dim goes there.
Tensor diagonal_scatter(const Tensor& self, const Tensor& src, std::int64_t offset, std::int64_t dim1,
                        std::int64_t dim2) {
  const std::int64_t rank = static_cast<std::int64_t>(self.sizes().size());
  if (dim1 < 0) dim1 += rank;
  if (dim2 < 0) dim2 += rank;
  check(dim1 >= 0 && dim1 < rank && dim2 >= 0 && dim2 < rank && dim1 != dim2, "diagonal_scatter: dims ", dim1, " and ",
        dim2, " must be two different dims of a tensor of rank ", rank);
  const std::int64_t length = diagonal(self, offset, dim1, dim2).sizes().back();
  std::vector<OptionalTensor> indices(static_cast<std::size_t>(rank), std::nullopt);
  indices[static_cast<std::size_t>(dim1)] = arange(Scalar(std::max<std::int64_t>(-offset, 0)),
                                                   Scalar(std::max<std::int64_t>(-offset, 0) + length), Scalar(1),
                                                   DType::Int64);
  indices[static_cast<std::size_t>(dim2)] = arange(Scalar(std::max<std::int64_t>(offset, 0)),
                                                   Scalar(std::max<std::int64_t>(offset, 0) + length), Scalar(1),
                                                   DType::Int64);
  while (!indices.empty() && !indices.back()) indices.pop_back();
  const std::int64_t src_rank = static_cast<std::int64_t>(src.sizes().size());
  const std::int64_t target = std::abs(dim1 - dim2) == 1 ? std::min(dim1, dim2) : 0;
  IntList order;  // src's last dim moved to `target`
  for (std::int64_t d = 0; d + 1 < src_rank; ++d) order.push_back(d);
  order.insert(order.begin() + target, src_rank - 1);
  return index_put(self, indices, permute(src, order));
}

// x - floor(x / s) s (remainder) or x - trunc(x / s) s (fmod), as ATen defines them.
Tensor remainder_of(const Tensor& self, Scalar other, const char* rounding) {
  return sub(self, mul(div(self, other, std::string(rounding)), other));
}

std::vector<std::pair<const char*, Run>> ops() {
  return {
      // ------------------------------------------------------------- views and copies ---
      // A program's values carry no aliasing: a view op gives the values the view has.
      {"aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
       [](const AtenArgs& a) { return one(reshape(a.tensor(0), a.ints(1))); }},
      {"aten::_unsafe_view(Tensor self, SymInt[] size) -> Tensor",
       [](const AtenArgs& a) { return one(reshape(a.tensor(0), a.ints(1))); }},
      {"aten::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
       [](const AtenArgs& a) { return one(reshape(a.tensor(0), a.ints(1))); }},
      {"aten::t(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(t(a.tensor(0))); }},
      {"aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)",
       [](const AtenArgs& a) { return one(permute(a.tensor(0), a.ints(1))); }},
      {"aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
       [](const AtenArgs& a) { return one(transpose(a.tensor(0), a.integer(1), a.integer(2))); }},
      {"aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
       [](const AtenArgs& a) { return one(expand(a.tensor(0), a.ints(1))); }},
      {"aten::squeeze(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(squeeze(a.tensor(0))); }},
      {"aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
       [](const AtenArgs& a) { return one(squeeze(a.tensor(0), a.integer(1))); }},
      {"aten::squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)",
       [](const AtenArgs& a) { return one(squeeze(a.tensor(0), a.ints(1))); }},
      {"aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)",
       [](const AtenArgs& a) { return one(unsqueeze(a.tensor(0), a.integer(1))); }},
      {"aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)",
       [](const AtenArgs& a) {
         return one(slice(a.tensor(0), a.integer(1), a.optional_integer(2), a.optional_integer(3), a.integer(4)));
       }},
      {"aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
       [](const AtenArgs& a) { return one(select(a.tensor(0), a.integer(1), a.integer(2))); }},
      {"aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
       [](const AtenArgs& a) {
         return one(as_strided(a.tensor(0), a.ints(1), a.ints(2), a.optional_integer(3)));
       }},
      {"aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
       [](const AtenArgs& a) {
         const TensorList parts = split(a.tensor(0), a.integer(1), a.integer(2));
         return AtenResults(parts.begin(), parts.end());
       }},
      {"aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
       [](const AtenArgs& a) {
         const TensorList parts = split_with_sizes(a.tensor(0), a.ints(1), a.integer(2));
         return AtenResults(parts.begin(), parts.end());
       }},
      {"aten::cat(Tensor[] tensors, int dim=0) -> Tensor",
       [](const AtenArgs& a) { return one(cat(a.tensor_list(0), a.integer(1))); }},
      {"aten::clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor",
       [](const AtenArgs& a) { return one(clone(a.tensor(0))); }},
      {"aten::detach(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(a.tensor(0)); }},
      {"aten::alias(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(a.tensor(0)); }},
      {"aten::_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
       [](const AtenArgs& a) {
         const std::optional<DType> dtype = a.optional_dtype(1);
         return one(dtype ? to(a.tensor(0), *dtype) : clone(a.tensor(0)));
       }},
      // ------------------------------------------------------------------ arithmetic ---
      {"aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
       [](const AtenArgs& a) { return one(add(a.tensor(0), a.tensor(1), a.scalar(2))); }},
      {"aten::add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
       [](const AtenArgs& a) { return one(add(a.tensor(0), a.scalar(1), a.scalar(2))); }},
      {"aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
       [](const AtenArgs& a) { return one(sub(a.tensor(0), a.tensor(1), a.scalar(2))); }},
      {"aten::sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
       [](const AtenArgs& a) { return one(sub(a.tensor(0), a.scalar(1), a.scalar(2))); }},
      {"aten::rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",  // other - alpha * self
       [](const AtenArgs& a) {
         const Tensor self = a.tensor(0);
         return one(sub(scalar_tensor(a.scalar(1), result_type(self, a.scalar(1))), self, a.scalar(2)));
       }},
      {"aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(mul(a.tensor(0), a.tensor(1))); }},
      {"aten::mul.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(mul(a.tensor(0), a.scalar(1))); }},
      {"aten::div.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(div(a.tensor(0), a.tensor(1))); }},
      {"aten::div.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(div(a.tensor(0), a.scalar(1))); }},
      {"aten::neg(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(neg(a.tensor(0))); }},
      {"aten::pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
       [](const AtenArgs& a) { return one(pow(a.tensor(0), a.scalar(1))); }},
      {"aten::sqrt(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(sqrt(a.tensor(0))); }},
      {"aten::rsqrt(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(rsqrt(a.tensor(0))); }},
      {"aten::exp(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(exp(a.tensor(0))); }},
      {"aten::log(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(log(a.tensor(0))); }},
      {"aten::tanh(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(tanh(a.tensor(0))); }},
      {"aten::sigmoid(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(sigmoid(a.tensor(0))); }},
      {"aten::relu(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(relu(a.tensor(0))); }},
      {"aten::sign(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(sign(a.tensor(0))); }},
      {"aten::abs(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(abs(a.tensor(0))); }},
      {"aten::reciprocal(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(reciprocal(a.tensor(0))); }},
      {"aten::erf(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(erf(a.tensor(0))); }},
      {"aten::sin(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(sin(a.tensor(0))); }},
      {"aten::cos(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(cos(a.tensor(0))); }},
      {"aten::log1p(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(log1p(a.tensor(0))); }},
      {"aten::expm1(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(expm1(a.tensor(0))); }},
      {"aten::pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor",
       [](const AtenArgs& a) { return one(pow(a.tensor(0), a.tensor(1))); }},
      {"aten::maximum(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(maximum(a.tensor(0), a.tensor(1))); }},
      {"aten::minimum(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(minimum(a.tensor(0), a.tensor(1))); }},
      {"aten::atan2(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(atan2(a.tensor(0), a.tensor(1))); }},
      {"aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
       [](const AtenArgs& a) { return one(clamp(a.tensor(0), a.optional_scalar(1), a.optional_scalar(2))); }},
      {"aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
       [](const AtenArgs& a) { return one(masked_fill(a.tensor(0), a.tensor(1), a.scalar(2))); }},
      {"aten::where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(where(a.tensor(0), a.scalar(1), a.tensor(2))); }},
      {"aten::where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(where(a.tensor(0), a.tensor(1), a.scalar(2))); }},
      {"aten::lt.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(lt(a.tensor(0), a.tensor(1))); }},
      {"aten::le.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(le(a.tensor(0), a.tensor(1))); }},
      {"aten::gt.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(gt(a.tensor(0), a.tensor(1))); }},
      {"aten::ge.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(ge(a.tensor(0), a.tensor(1))); }},
      {"aten::eq.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(eq(a.tensor(0), a.tensor(1))); }},
      {"aten::logical_and(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(logical_and(a.tensor(0), a.tensor(1))); }},
      {"prims::fma(Tensor a, Tensor b, Tensor c) -> Tensor",
       [](const AtenArgs& a) { return one(fma(a.tensor(0), a.tensor(1), a.tensor(2))); }},
      {"aten::where.self(Tensor condition, Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(where(a.tensor(0), a.tensor(1), a.tensor(2))); }},
      {"aten::ge.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(ge(a.tensor(0), a.scalar(1))); }},
      {"aten::le.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(le(a.tensor(0), a.scalar(1))); }},
      {"aten::lt.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(lt(a.tensor(0), a.scalar(1))); }},
      {"aten::gt.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(gt(a.tensor(0), a.scalar(1))); }},
      {"aten::eq.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(eq(a.tensor(0), a.scalar(1))); }},
      {"aten::ne.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(ne(a.tensor(0), a.scalar(1))); }},
      {"aten::bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) {
         const Tensor self = a.tensor(0), other = a.tensor(1);
         check(self.dtype() == DType::Bool && other.dtype() == DType::Bool, a.op(),
               ": refgrad computes it on bool tensors only, got ", dtype_name(self.dtype()), " and ",
               dtype_name(other.dtype()));
         return one(logical_and(self, other));
       }},
      {"aten::logical_not(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(logical_not(a.tensor(0))); }},
      // ------------------------------------------------------------------- factories ---
      // Layout, device and pin_memory are metadata here (DESIGN.md: a program computes on the CPU).
      {"aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, "
       "Device? device=None, bool? pin_memory=None) -> Tensor",
       [](const AtenArgs& a) { return one(full(a.ints(0), a.scalar(1), a.optional_dtype(2))); }},
      {"aten::scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None) -> Tensor",
       [](const AtenArgs& a) { return one(scalar_tensor(a.scalar(0), a.optional_dtype(1).value_or(DType::Float32))); }},
      {"aten::new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
       "Device? device=None, bool? pin_memory=None) -> Tensor",
       [](const AtenArgs& a) { return one(zeros(a.ints(1), a.optional_dtype(2).value_or(a.tensor(0).dtype()))); }},
      {"aten::full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, "
       "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
       [](const AtenArgs& a) { return one(full_like(a.tensor(0), a.scalar(1), a.optional_dtype(2))); }},
      {"aten::zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
       [](const AtenArgs& a) { return one(full_like(a.tensor(0), 0, a.optional_dtype(1))); }},
      {"aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None) -> Tensor",
       [](const AtenArgs& a) { return one(zeros(a.ints(0), a.optional_dtype(1).value_or(DType::Float32))); }},
      {"aten::ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None) -> Tensor",
       [](const AtenArgs& a) { return one(ones(a.ints(0), a.optional_dtype(1).value_or(DType::Float32))); }},
      {"aten::arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, "
       "Device? device=None, bool? pin_memory=None) -> Tensor",
       [](const AtenArgs& a) { return one(arange(a.scalar(0), a.scalar(1), a.scalar(2), a.optional_dtype(3))); }},
      {"aten::copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor",  // src's values in self's dtype and shape
       [](const AtenArgs& a) {
         const Tensor self = a.tensor(0);
         return one(contiguous(expand(to(a.tensor(1), self.dtype()), self.sizes())));
       }},
      {"aten::ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
       [](const AtenArgs& a) { return one(full_like(a.tensor(0), 1, a.optional_dtype(1))); }},
      // ------------------------------------------------------------------ reductions ---
      {"aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) { return one(sum(a.tensor(0), a.optional_dtype(1))); }},
      {"aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) {
         return one(sum(a.tensor(0), a.optional_ints(1).value_or(IntList{}), a.boolean(2), a.optional_dtype(3)));
       }},
      {"aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) {
         return one(mean(a.tensor(0), a.optional_ints(1).value_or(IntList{}), a.boolean(2), a.optional_dtype(3)));
       }},
      {"aten::mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) { return one(mean(a.tensor(0), a.optional_dtype(1))); }},
      {"aten::var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
       [](const AtenArgs& a) {
         const std::optional<Scalar> correction = a.optional_scalar(2);
         return one(var(a.tensor(0), a.optional_ints(1).value_or(IntList{}), correction ? correction->to_double() : 1.0,
                        a.boolean(3)));
       }},
      {"aten::var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> "
       "(Tensor, Tensor)",
       [](const AtenArgs& a) {
         const Tensor self = a.tensor(0);
         const IntList dims = a.optional_ints(1).value_or(IntList{});
         const std::optional<Scalar> correction = a.optional_scalar(2);
         return AtenResults{var(self, dims, correction ? correction->to_double() : 1.0, a.boolean(3)),
                            mean(self, dims, a.boolean(3))};
       }},
      {"aten::cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) { return one(cumsum(a.tensor(0), a.integer(1), a.optional_dtype(2))); }},
      {"aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
       [](const AtenArgs& a) { return one(amax(a.tensor(0), a.ints(1), a.boolean(2))); }},
      // --------------------------------------------------------------------- linalg ---
      {"aten::mm(Tensor self, Tensor mat2) -> Tensor",
       [](const AtenArgs& a) { return one(mm(a.tensor(0), a.tensor(1))); }},
      {"aten::bmm(Tensor self, Tensor mat2) -> Tensor",
       [](const AtenArgs& a) { return one(bmm(a.tensor(0), a.tensor(1))); }},
      {"aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
       [](const AtenArgs& a) { return one(addmm(a.tensor(0), a.tensor(1), a.tensor(2), a.scalar(3), a.scalar(4))); }},
      // ------------------------------------------------------------ indexing, scatter ---
      {"aten::scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
       [](const AtenArgs& a) { return one(scatter(a.tensor(0), a.integer(1), a.tensor(2), a.scalar(3))); }},
      {"aten::scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
       [](const AtenArgs& a) { return one(scatter(a.tensor(0), a.integer(1), a.tensor(2), a.tensor(3))); }},
      {"aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) "
       "-> Tensor",
       [](const AtenArgs& a) {
         return one(slice_scatter(a.tensor(0), a.tensor(1), a.integer(2), a.optional_integer(3), a.optional_integer(4),
                                  a.integer(5)));
       }},
      {"aten::index_select(Tensor self, int dim, Tensor index) -> Tensor",
       [](const AtenArgs& a) { return one(index_select(a.tensor(0), a.integer(1), a.tensor(2))); }},
      {"aten::gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
       [](const AtenArgs& a) { return one(gather(a.tensor(0), a.integer(1), a.tensor(2))); }},
      {"aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
       [](const AtenArgs& a) { return one(index(a.tensor(0), a.optional_tensor_list(1))); }},
      {"aten::_unsafe_index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
       [](const AtenArgs& a) { return one(index(a.tensor(0), a.optional_tensor_list(1))); }},
      {"aten::_unsafe_index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
       [](const AtenArgs& a) {
         return one(index_put(a.tensor(0), a.optional_tensor_list(1), a.tensor(2), a.boolean(3)));
       }},
      {"aten::index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor",
       [](const AtenArgs& a) {
         return one(index_add(a.tensor(0), a.integer(1), a.tensor(2), a.tensor(3), a.scalar(4)));
       }},
      {"aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor",
       [](const AtenArgs& a) { return one(constant_pad_nd(a.tensor(0), a.ints(1), a.scalar(2))); }},
      {"aten::scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
       [](const AtenArgs& a) { return one(scatter_add(a.tensor(0), a.integer(1), a.tensor(2), a.tensor(3))); }},
      {"aten::select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor",
       [](const AtenArgs& a) { return one(select_scatter(a.tensor(0), a.tensor(1), a.integer(2), a.integer(3))); }},
      {"aten::_unsafe_masked_index_put_accumulate(Tensor self, Tensor mask, Tensor?[] indices, Tensor values) -> Tensor",
       [](const AtenArgs& a) {
         return one(unsafe_masked_index_put_accumulate(a.tensor(0), a.tensor(1), a.optional_tensor_list(2), a.tensor(3)));
       }},
      {"prims::_low_memory_max_pool_offsets_to_indices(Tensor self, SymInt[] kernel_size, SymInt[] input_size, "
       "SymInt[] stride, SymInt[] padding, SymInt[] dilation) -> Tensor",
       [](const AtenArgs& a) {
         return one(max_pool_offsets_to_indices(a.tensor(0), a.ints(1), a.ints(2), a.ints(3), a.ints(4), a.ints(5)));
       }},
      {"aten::index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
       [](const AtenArgs& a) {
         return one(index_put(a.tensor(0), a.optional_tensor_list(1), a.tensor(2), a.boolean(3)));
       }},
      // --------------------------------------------- backward kernels: their node's formula ---
      {"aten::threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor",
       [](const AtenArgs& a) { return one(threshold_backward(a.tensor(0), a.tensor(1), a.scalar(2))); }},
      {"aten::tanh_backward(Tensor grad_output, Tensor output) -> Tensor",
       [](const AtenArgs& a) { return run_node("TanhBackward0", a.tensor(0), {true}, {{"result", a.tensor(1)}}); }},
      {"aten::sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("SigmoidBackward0", a.tensor(0), {true}, {{"result", a.tensor(1)}});
       }},
      {"aten::gelu_backward(Tensor grad_output, Tensor self, *, str approximate=\"none\") -> Tensor",
       [](const AtenArgs& a) {
         return run_node("GeluBackward0", a.tensor(0), {true}, {{"approximate", a.string(2)}, {"self", a.tensor(1)}});
       }},
      {"aten::_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("SoftmaxBackward0", a.tensor(0), {true},
                         {{"dim", a.integer(2)}, {"self_scalar_type", a.dtype(3)}, {"result", a.tensor(1)}});
       }},
      {"aten::_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("LogSoftmaxBackward0", a.tensor(0), {true},
                         {{"dim", a.integer(2)}, {"self_scalar_type", a.dtype(3)}, {"result", a.tensor(1)}});
       }},
      {"aten::native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, "
       "Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
       [](const AtenArgs& a) {
         return run_node("NativeLayerNormBackward0", a.tensor(0), a.bools(7),
                         {{"bias", field(a.optional_tensor(6))},
                          {"input", a.tensor(1)},
                          {"normalized_shape", a.ints(2)},
                          {"weight", field(a.optional_tensor(5))},
                          {"result1", a.tensor(3)},
                          {"result2", a.tensor(4)}});
       }},
      {"aten::native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean, "
       "Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps, bool[3] output_mask) -> "
       "(Tensor, Tensor, Tensor)",
       [](const AtenArgs& a) {
         return run_node("NativeBatchNormBackward0", a.tensor(0), a.bools(9),
                         {{"eps", a.floating(8)},
                          {"input", a.tensor(1)},
                          {"running_mean", field(a.optional_tensor(3))},
                          {"running_var", field(a.optional_tensor(4))},
                          {"training", a.boolean(7)},
                          {"weight", field(a.optional_tensor(2))},
                          {"result1", field(a.optional_tensor(5))},
                          {"result2", field(a.optional_tensor(6))}});
       }},
      {"aten::convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, "
       "SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, "
       "SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
       [](const AtenArgs& a) {
         return run_node("ConvolutionBackward0", a.tensor(0), a.bools(10),
                         {{"bias_sym_sizes_opt", field(a.optional_ints(3))},
                          {"dilation", a.ints(6)},
                          {"groups", a.integer(9)},
                          {"input", a.tensor(1)},
                          {"output_padding", a.ints(8)},
                          {"padding", a.ints(5)},
                          {"stride", a.ints(4)},
                          {"transposed", a.boolean(7)},
                          {"weight", a.tensor(2)}});
       }},
      {"aten::max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, "
       "int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("MaxPool2DWithIndicesBackward0", a.tensor(0), {true},
                         {{"ceil_mode", a.boolean(6)},
                          {"dilation", a.ints(5)},
                          {"kernel_size", a.ints(2)},
                          {"padding", a.ints(4)},
                          {"self", a.tensor(1)},
                          {"stride", a.ints(3)},
                          {"result1", a.tensor(7)}});
       }},
      {"aten::avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, "
       "bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("AvgPool2DBackward0", a.tensor(0), {true},
                         {{"ceil_mode", a.boolean(5)},
                          {"count_include_pad", a.boolean(6)},
                          {"divisor_override", field(a.optional_integer(7))},
                          {"kernel_size", a.ints(2)},
                          {"padding", a.ints(4)},
                          {"self", a.tensor(1)},
                          {"stride", a.ints(3)}});
       }},
      {"aten::silu_backward(Tensor grad_output, Tensor self) -> Tensor",
       [](const AtenArgs& a) { return run_node("SiluBackward0", a.tensor(0), {true}, {{"self", a.tensor(1)}}); }},
      {"aten::log_sigmoid_backward(Tensor grad_output, Tensor self, Tensor buffer) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("LogSigmoidBackward0", a.tensor(0), {true}, {{"self", a.tensor(1)}, {"buffer", a.tensor(2)}});
       }},
      {"aten::hardtanh_backward(Tensor grad_output, Tensor self, Scalar min_val, Scalar max_val) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("HardtanhBackward0", a.tensor(0), {true},
                         {{"max_val", a.scalar(3)}, {"min_val", a.scalar(2)}, {"self", a.tensor(1)}});
       }},
      {"aten::leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) -> Tensor",
       [](const AtenArgs& a) {  // the sign of self and of the result are one for a positive slope: one formula
         return run_node("LeakyReluBackward0", a.tensor(0), {true},
                         {{"negative_slope", a.scalar(2)}, {"self", a.tensor(1)}});
       }},
      {"aten::elu_backward(Tensor grad_output, Scalar alpha, Scalar scale, Scalar input_scale, bool is_result, "
       "Tensor self_or_result) -> Tensor",
       [](const AtenArgs& a) {
         const bool is_result = a.boolean(4);
         return run_node(is_result ? "EluBackward1" : "EluBackward0", a.tensor(0), {true},
                         {{"alpha", a.scalar(1)},
                          {"input_scale", a.scalar(3)},
                          {"scale", a.scalar(2)},
                          {is_result ? "result" : "self", a.tensor(5)}});
       }},
      {"aten::softplus_backward(Tensor grad_output, Tensor self, Scalar beta, Scalar threshold) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("SoftplusBackward0", a.tensor(0), {true},
                         {{"beta", a.scalar(2)}, {"self", a.tensor(1)}, {"threshold", a.scalar(3)}});
       }},
      {"aten::native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor",  // ATen: grad * mask * scale
       [](const AtenArgs& a) { return one(mul(mul(a.tensor(0), a.tensor(1)), Scalar(a.floating(2)))); }},
      {"aten::diagonal_backward(Tensor grad_output, SymInt[] input_sizes, int offset, int dim1, int dim2) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("DiagonalBackward0", a.tensor(0), {true},
                         {{"dim1", a.integer(3)}, {"dim2", a.integer(4)}, {"offset", a.integer(2)},
                          {"self_sym_sizes", a.ints(1)}});
       }},
      {"aten::_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("AdaptiveAvgPool2DBackward0", a.tensor(0), {true}, {{"self", a.tensor(1)}});
       }},
      {"aten::embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, "
       "bool scale_grad_by_freq) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("EmbeddingBackward0", a.tensor(0), {true},
                         {{"indices", a.tensor(1)},
                          {"padding_idx", a.integer(3)},
                          {"scale_grad_by_freq", a.boolean(4)},
                          {"sparse", false},
                          {"weight_sym_argsize_0", a.integer(2)}});
       }},
      {"aten::select_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt index) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("SelectBackward0", a.tensor(0), {true},
                         {{"dim", a.integer(2)}, {"index", a.integer(3)}, {"self_sym_sizes", a.ints(1)}});
       }},
      {"aten::slice_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt start, SymInt end, "
       "SymInt step) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("SliceBackward0", a.tensor(0), {true},
                         {{"dim", a.integer(2)},
                          {"end", a.integer(4)},
                          {"self_sym_sizes", a.ints(1)},
                          {"start", a.integer(3)},
                          {"step", a.integer(5)}});
       }},
      {"aten::nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int reduction, "
       "SymInt ignore_index, Tensor total_weight) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("NllLossBackward0", a.tensor(0), {true},
                         {{"ignore_index", a.integer(5)},
                          {"reduction", a.integer(4)},
                          {"self", a.tensor(1)},
                          {"target", a.tensor(2)},
                          {"weight", field(a.optional_tensor(3))},
                          {"total_weight", a.tensor(6)}});
       }},
      {"aten::mse_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction) -> Tensor",
       [](const AtenArgs& a) {
         const AtenResults both = run_node("MseLossBackward0", a.tensor(0), {true, false},
                                           {{"reduction", a.integer(3)}, {"self", a.tensor(1)}, {"target", a.tensor(2)}});
         return AtenResults{both.at(0)};
       }},
      {"aten::_scaled_dot_product_flash_attention_for_cpu_backward(Tensor grad_out, Tensor query, Tensor key, "
       "Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, *, Tensor? attn_mask=None, "
       "float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)",
       [](const AtenArgs& a) {
         return run_node("ScaledDotProductFlashAttentionForCpuBackward0", a.tensor(0), {true, true, true},
                         {{"attn_mask", field(a.optional_tensor(8))},
                          {"dropout_p", a.floating(6)},
                          {"is_causal", a.boolean(7)},
                          {"key", a.tensor(2)},
                          {"query", a.tensor(1)},
                          {"scale", field(a.optional_floating(9))},
                          {"value", a.tensor(3)},
                          {"logsumexp", a.tensor(5)},
                          {"output", a.tensor(4)}});
       }},

      // ---------------------------------------------------- more ops OpInfo's backward graphs call ---
      {"aten::sgn(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(sgn(a.tensor(0))); }},
      {"aten::sinh(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(sinh(a.tensor(0))); }},
      {"aten::cosh(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(cosh(a.tensor(0))); }},
      {"aten::tan(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(tan(a.tensor(0))); }},
      {"aten::asin(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(asin(a.tensor(0))); }},
      {"aten::acos(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(acos(a.tensor(0))); }},
      {"aten::atan(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(atan(a.tensor(0))); }},
      {"aten::asinh(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(asinh(a.tensor(0))); }},
      {"aten::acosh(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(acosh(a.tensor(0))); }},
      {"aten::atanh(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(atanh(a.tensor(0))); }},
      {"aten::square(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(square(a.tensor(0))); }},
      {"aten::erfinv(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(erfinv(a.tensor(0))); }},
      {"aten::lgamma(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(lgamma(a.tensor(0))); }},
      {"aten::digamma(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(digamma(a.tensor(0))); }},
      {"aten::polygamma(int n, Tensor self) -> Tensor",
       [](const AtenArgs& a) { return one(polygamma(a.integer(0), a.tensor(1))); }},
      {"aten::i0(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(i0(a.tensor(0))); }},
      {"aten::special_i0e(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(special_i0e(a.tensor(0))); }},
      {"aten::special_i1(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(special_i1(a.tensor(0))); }},
      {"aten::special_i1e(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(special_i1e(a.tensor(0))); }},
      {"aten::special_erfcx(Tensor self) -> Tensor",
       [](const AtenArgs& a) { return one(special_erfcx(a.tensor(0))); }},
      {"aten::special_ndtri(Tensor self) -> Tensor",
       [](const AtenArgs& a) { return one(special_ndtri(a.tensor(0))); }},
      {"aten::special_log_ndtr(Tensor self) -> Tensor",
       [](const AtenArgs& a) { return one(special_log_ndtr(a.tensor(0))); }},
      {"aten::isnan(Tensor self) -> Tensor", [](const AtenArgs& a) {  // NaN is the one value unequal to itself
         const Tensor self = a.tensor(0);
         return one(ne(self, self));
       }},
      {"aten::ne.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(ne(a.tensor(0), a.tensor(1))); }},
      {"aten::logical_or(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(logical_or(a.tensor(0), a.tensor(1))); }},
      {"aten::div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor",
       [](const AtenArgs& a) { return one(div(a.tensor(0), a.tensor(1), a.optional_string(2))); }},
      {"aten::pow.Scalar(Scalar self, Tensor exponent) -> Tensor",
       [](const AtenArgs& a) { return one(pow(a.scalar(0), a.tensor(1))); }},
      {"aten::clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor",
       [](const AtenArgs& a) { return one(clamp(a.tensor(0), a.optional_tensor(1), a.optional_tensor(2))); }},
      {"aten::clamp_min(Tensor self, Scalar min) -> Tensor",
       [](const AtenArgs& a) { return one(clamp(a.tensor(0), std::optional<Scalar>(a.scalar(1)), std::nullopt)); }},
      {"aten::clamp_max(Tensor self, Scalar max) -> Tensor",
       [](const AtenArgs& a) { return one(clamp(a.tensor(0), std::nullopt, std::optional<Scalar>(a.scalar(1)))); }},
      {"aten::fill.Scalar(Tensor self, Scalar value) -> Tensor",
       [](const AtenArgs& a) { return one(full_like(a.tensor(0), a.scalar(1))); }},
      {"aten::tril(Tensor self, SymInt diagonal=0) -> Tensor",
       [](const AtenArgs& a) { return one(tril(a.tensor(0), a.integer(1))); }},
      {"aten::triu(Tensor self, SymInt diagonal=0) -> Tensor",
       [](const AtenArgs& a) { return one(triu(a.tensor(0), a.integer(1))); }},
      {"aten::diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)",
       [](const AtenArgs& a) { return one(diagonal(a.tensor(0), a.integer(1), a.integer(2), a.integer(3))); }},
      {"aten::flip(Tensor self, int[] dims) -> Tensor",
       [](const AtenArgs& a) { return one(flip(a.tensor(0), a.ints(1))); }},
      {"aten::repeat(Tensor self, SymInt[] repeats) -> Tensor",
       [](const AtenArgs& a) { return one(repeat(a.tensor(0), a.ints(1))); }},
      {"aten::stack(Tensor[] tensors, int dim=0) -> Tensor",
       [](const AtenArgs& a) { return one(stack(a.tensor_list(0), a.integer(1))); }},
      {"aten::cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) { return one(cumprod(a.tensor(0), a.integer(1), a.optional_dtype(2))); }},
      {"aten::prod(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) { return one(prod(a.tensor(0), a.optional_dtype(1))); }},
      {"aten::prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) { return one(prod(a.tensor(0), a.integer(1), a.boolean(2), a.optional_dtype(3))); }},
      {"aten::amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
       [](const AtenArgs& a) { return one(amin(a.tensor(0), a.ints(1), a.boolean(2))); }},
      {"aten::max(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(max(a.tensor(0))); }},
      {"aten::min(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(min(a.tensor(0))); }},
      {"aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
       [](const AtenArgs& a) {
         const auto [values, indices] = max(a.tensor(0), a.integer(1), a.boolean(2));
         return AtenResults{values, indices};
       }},
      {"aten::logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
       [](const AtenArgs& a) { return one(logsumexp(a.tensor(0), a.ints(1), a.boolean(2))); }},
      {"aten::linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, "
       "ScalarType? dtype=None) -> Tensor",
       [](const AtenArgs& a) {
         return one(linalg_vector_norm(a.tensor(0), a.scalar(1).to_double(), a.optional_ints(2).value_or(IntList{}),
                                       a.boolean(3), a.optional_dtype(4)));
       }},
      {"aten::mv(Tensor self, Tensor vec) -> Tensor",
       [](const AtenArgs& a) { return one(matmul(a.tensor(0), a.tensor(1))); }},
      {"aten::dot(Tensor self, Tensor tensor) -> Tensor",
       [](const AtenArgs& a) { return one(dot(a.tensor(0), a.tensor(1))); }},
      {"aten::outer(Tensor self, Tensor vec2) -> Tensor",
       [](const AtenArgs& a) { return one(outer(a.tensor(0), a.tensor(1))); }},
      {"aten::matmul(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) { return one(matmul(a.tensor(0), a.tensor(1))); }},
      {"aten::linalg_cross(Tensor self, Tensor other, *, int dim=-1) -> Tensor",
       [](const AtenArgs& a) { return one(linalg_cross(a.tensor(0), a.tensor(1), a.integer(2))); }},
      {"aten::linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) "
       "-> Tensor",
       [](const AtenArgs& a) {
         return one(linalg_solve_triangular(a.tensor(0), a.tensor(1), a.boolean(2), a.boolean(3), a.boolean(4)));
       }},
      {"aten::linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor",
       [](const AtenArgs& a) {
         return one(linalg_lu_solve(a.tensor(0), a.tensor(1), a.tensor(2), a.boolean(3), a.boolean(4)));
       }},
      {"aten::lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> "
       "(Tensor P, Tensor L, Tensor U)",
       [](const AtenArgs& a) {
         const auto [P, L, U] = lu_unpack(a.tensor(0), a.tensor(1), a.boolean(2), a.boolean(3));
         return AtenResults{P, L, U};
       }},
      {"aten::view_as_real(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(view_as_real(a.tensor(0))); }},
      {"aten::view_as_complex(Tensor(a) self) -> Tensor(a)",
       [](const AtenArgs& a) { return one(view_as_complex(a.tensor(0))); }},
      {"aten::real(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(real(a.tensor(0))); }},
      {"aten::imag(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(imag(a.tensor(0))); }},
      {"aten::_conj(Tensor(a) self) -> Tensor(a)", [](const AtenArgs& a) { return one(conj(a.tensor(0))); }},
      {"aten::_conj_physical(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(conj(a.tensor(0))); }},
      {"aten::conj_physical(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(conj(a.tensor(0))); }},
      {"aten::_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor",
       [](const AtenArgs& a) { return one(_fft_c2c(a.tensor(0), a.ints(1), a.integer(2), a.boolean(3))); }},
      {"aten::_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor",
       [](const AtenArgs& a) { return one(_fft_r2c(a.tensor(0), a.ints(1), a.integer(2), a.boolean(3))); }},
      {"aten::_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor",
       [](const AtenArgs& a) { return one(_fft_c2r(a.tensor(0), a.ints(1), a.integer(2), a.integer(3))); }},
      {"aten::masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor",
       [](const AtenArgs& a) { return one(masked_scatter(a.tensor(0), a.tensor(1), a.tensor(2))); }},
      {"aten::masked_select(Tensor self, Tensor mask) -> Tensor",
       [](const AtenArgs& a) { return one(masked_select(a.tensor(0), a.tensor(1))); }},
      {"aten::scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) "
       "-> Tensor",
       [](const AtenArgs& a) {
         return one(scatter_reduce(a.tensor(0), a.integer(1), a.tensor(2), a.tensor(3), a.string(4), a.boolean(5)));
       }},
      {"aten::index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) "
       "-> Tensor",
       [](const AtenArgs& a) {
         return one(index_reduce(a.tensor(0), a.integer(1), a.tensor(2), a.tensor(3), a.string(4), a.boolean(5)));
       }},
      {"aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, "
       "bool sparse=False) -> Tensor",
       [](const AtenArgs& a) { return one(embedding(a.tensor(0), a.tensor(1), a.integer(2))); }},

      // ------------------------------------------- Inductor's prims, and the values torch leaves unspecified ---
      {"prims::iota(SymInt length, *, SymInt start, SymInt step, ScalarType dtype, Device device, bool requires_grad) "
       "-> Tensor",
       [](const AtenArgs& a) {  // start, start + step, ..., length values
         const Tensor positions = arange(Scalar(0), Scalar(a.integer(0)), Scalar(1), a.dtype(3));
         return one(add(mul(positions, Scalar(a.integer(2))), Scalar(a.integer(1))));
       }},
      {"prims::convert_element_type(Tensor a, ScalarType dtype) -> Tensor",
       [](const AtenArgs& a) { return one(to(a.tensor(0), a.dtype(1))); }},
      {"prims::rev(Tensor a, int[] dims) -> Tensor", [](const AtenArgs& a) { return one(flip(a.tensor(0), a.ints(1))); }},
      // torch leaves empty's values unspecified; refgrad's are zeros (a program overwrites them before use).
      {"aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
       [](const AtenArgs& a) { return one(zeros(a.ints(0), a.optional_dtype(1).value_or(DType::Float32))); }},
      {"aten::empty_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
       [](const AtenArgs& a) { return one(full_like(a.tensor(0), 0, a.optional_dtype(1))); }},
      {"aten::new_empty_strided(Tensor self, SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, "
       "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
       [](const AtenArgs& a) { return one(zeros(a.ints(1), a.optional_dtype(3).value_or(a.tensor(0).dtype()))); }},
      {"aten::diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor",
       [](const AtenArgs& a) {
         return one(diagonal_scatter(a.tensor(0), a.tensor(1), a.integer(2), a.integer(3), a.integer(4)));
       }},
      {"aten::index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
       [](const AtenArgs& a) {
         const Tensor self = a.tensor(0);
         const bool scalar = self.sizes().empty();  // a 0-dim self is filled as a one-element vector
         const Tensor target = scalar ? reshape(self, {1}) : self;
         std::int64_t dim = a.integer(1);
         if (dim < 0) dim += static_cast<std::int64_t>(target.sizes().size());
         check(dim >= 0 && dim < static_cast<std::int64_t>(target.sizes().size()), "index_fill: dim ", a.integer(1),
               " is out of range for a tensor of rank ", self.sizes().size());
         std::vector<OptionalTensor> indices(static_cast<std::size_t>(dim), std::nullopt);
         indices.push_back(reshape(a.tensor(2), {-1}));
         const Tensor filled = index_put(target, indices, scalar_tensor(a.scalar(3), self.dtype()));
         return one(scalar ? reshape(filled, {}) : filled);
       }},
      {"aten::_unsafe_masked_index(Tensor self, Tensor mask, Tensor?[] indices, Scalar fill) -> Tensor",
       [](const AtenArgs& a) {  // torch/_decomp: indices clamped into range, then masked-off elements filled
         const Tensor self = a.tensor(0);
         std::vector<OptionalTensor> indices = a.optional_tensor_list(2);
         for (std::size_t i = 0; i < indices.size(); ++i) {
           if (!indices[i]) continue;
           const std::int64_t size = self.sizes().at(i);
           indices[i] = clamp(*indices[i], std::optional<Scalar>(-size), std::optional<Scalar>(size - 1));
         }
         return one(masked_fill(index(self, indices), logical_not(a.tensor(1)), a.scalar(3)));
       }},
      {"aten::bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor",
       [](const AtenArgs& a) {
         const Tensor self = a.tensor(0), other = a.tensor(1);
         check(self.dtype() == DType::Bool && other.dtype() == DType::Bool, a.op(),
               ": refgrad computes it on bool tensors only, got ", dtype_name(self.dtype()), " and ",
               dtype_name(other.dtype()));
         return one(logical_or(self, other));
       }},
      {"aten::bitwise_not(Tensor self) -> Tensor",
       [](const AtenArgs& a) {
         const Tensor self = a.tensor(0);
         check(self.dtype() == DType::Bool, a.op(), ": refgrad computes it on bool tensors only, got ",
               dtype_name(self.dtype()));
         return one(logical_not(self));
       }},
      {"aten::remainder.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(remainder_of(a.tensor(0), a.scalar(1), "floor")); }},
      {"aten::fmod.Scalar(Tensor self, Scalar other) -> Tensor",
       [](const AtenArgs& a) { return one(remainder_of(a.tensor(0), a.scalar(1), "trunc")); }},
      {"aten::diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor",
       [](const AtenArgs& a) {
         const std::int64_t rank = static_cast<std::int64_t>(a.tensor(0).sizes().size()) + 1;
         const auto last_two = [rank](std::int64_t d1, std::int64_t d2) {
           return (d1 < 0 ? d1 + rank : d1) == rank - 2 && (d2 < 0 ? d2 + rank : d2) == rank - 1;
         };
         check(a.integer(1) == 0 && last_two(a.integer(2), a.integer(3)), a.op(),
               ": refgrad has diag_embed on the main diagonal of the last two dims only, got offset ", a.integer(1),
               " and dims ", a.integer(2), ", ", a.integer(3));
         return one(diag_embed(a.tensor(0)));
       }},
      {"aten::exp2(Tensor self) -> Tensor", [](const AtenArgs& a) { return one(pow(Scalar(2.0), a.tensor(0))); }},
      {"aten::logcumsumexp(Tensor self, int dim) -> Tensor",
       [](const AtenArgs& a) { return one(logcumsumexp(a.tensor(0), a.integer(1))); }},
      {"aten::linalg_matrix_exp(Tensor self) -> Tensor",
       [](const AtenArgs& a) { return one(linalg_matrix_exp(a.tensor(0))); }},
      // ------------------------------------------------------ more backward kernels: their node's formula ---
      {"aten::glu_backward(Tensor grad_output, Tensor self, int dim) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("GluBackward0", a.tensor(0), {true}, {{"dim", a.integer(2)}, {"self", a.tensor(1)}});
       }},
      {"aten::hardsigmoid_backward(Tensor grad_output, Tensor self) -> Tensor",
       [](const AtenArgs& a) { return run_node("HardsigmoidBackward0", a.tensor(0), {true}, {{"self", a.tensor(1)}}); }},
      {"aten::hardswish_backward(Tensor grad_output, Tensor self) -> Tensor",
       [](const AtenArgs& a) { return run_node("HardswishBackward0", a.tensor(0), {true}, {{"self", a.tensor(1)}}); }},
      {"aten::mish_backward(Tensor grad_output, Tensor self) -> Tensor",
       [](const AtenArgs& a) { return run_node("MishBackward0", a.tensor(0), {true}, {{"self", a.tensor(1)}}); }},
      {"aten::logit_backward(Tensor grad_output, Tensor self, float? eps=None) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("LogitBackward0", a.tensor(0), {true},
                         {{"eps", field(a.optional_floating(2))}, {"self", a.tensor(1)}});
       }},
      {"aten::huber_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, float delta) -> Tensor",
       [](const AtenArgs& a) {
         return AtenResults{run_node("HuberLossBackward0", a.tensor(0), {true, false},
                                     {{"delta", a.floating(4)}, {"reduction", a.integer(3)}, {"self", a.tensor(1)},
                                      {"target", a.tensor(2)}}).at(0)};
       }},
      {"aten::smooth_l1_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, float beta) -> "
       "Tensor",
       [](const AtenArgs& a) {
         return AtenResults{run_node("SmoothL1LossBackward0", a.tensor(0), {true, false},
                                     {{"beta", a.floating(4)}, {"reduction", a.integer(3)}, {"self", a.tensor(1)},
                                      {"target", a.tensor(2)}}).at(0)};
       }},
      {"aten::soft_margin_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("SoftMarginLossBackward0", a.tensor(0), {true},
                         {{"reduction", a.integer(3)}, {"self", a.tensor(1)}, {"target", a.tensor(2)}});
       }},
      {"aten::binary_cross_entropy_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight=None, "
       "int reduction=1) -> Tensor",
       [](const AtenArgs& a) {
         return AtenResults{run_node("BinaryCrossEntropyBackward0", a.tensor(0), {true, false},
                                     {{"reduction", a.integer(4)}, {"self", a.tensor(1)}, {"target", a.tensor(2)},
                                      {"weight", field(a.optional_tensor(3))}}).at(0)};
       }},
      {"aten::native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, "
       "SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
       [](const AtenArgs& a) {  // eps is the node's for its double backward: the first derivative does not read it
         return run_node("NativeGroupNormBackward0", a.tensor(0), a.bools(9),
                         {{"C", a.integer(6)}, {"HxW", a.integer(7)}, {"N", a.integer(5)}, {"eps", 0.0},
                          {"group", a.integer(8)}, {"input", a.tensor(1)}, {"weight", field(a.optional_tensor(4))},
                          {"result1", a.tensor(2)}, {"result2", a.tensor(3)}});
       }},
      {"aten::max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, "
       "int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("MaxPool3DWithIndicesBackward0", a.tensor(0), {true},
                         {{"ceil_mode", a.boolean(6)}, {"dilation", a.ints(5)}, {"kernel_size", a.ints(2)},
                          {"padding", a.ints(4)}, {"self", a.tensor(1)}, {"stride", a.ints(3)},
                          {"result1", a.tensor(7)}});
       }},
      {"aten::avg_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, "
       "bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("AvgPool3DBackward0", a.tensor(0), {true},
                         {{"ceil_mode", a.boolean(5)}, {"count_include_pad", a.boolean(6)},
                          {"divisor_override", field(a.optional_integer(7))}, {"kernel_size", a.ints(2)},
                          {"padding", a.ints(4)}, {"self", a.tensor(1)}, {"stride", a.ints(3)}});
       }},
      {"aten::_adaptive_avg_pool3d_backward(Tensor grad_output, Tensor self) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("AdaptiveAvgPool3DBackward0", a.tensor(0), {true}, {{"self", a.tensor(1)}});
       }},
      {"aten::adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("AdaptiveMaxPool2DBackward0", a.tensor(0), {true},
                         {{"self", a.tensor(1)}, {"result1", a.tensor(2)}});
       }},
      {"aten::adaptive_max_pool3d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("AdaptiveMaxPool3DBackward0", a.tensor(0), {true},
                         {{"self", a.tensor(1)}, {"result1", a.tensor(2)}});
       }},
      {"aten::reflection_pad1d_backward(Tensor grad_output, Tensor self, SymInt[2] padding) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("ReflectionPad1DBackward0", a.tensor(0), {true},
                         {{"padding", a.ints(2)}, {"self", a.tensor(1)}});
       }},
      {"aten::replication_pad1d_backward(Tensor grad_output, Tensor self, SymInt[2] padding) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("ReplicationPad1DBackward0", a.tensor(0), {true},
                         {{"padding", a.ints(2)}, {"self", a.tensor(1)}});
       }},
      {"aten::replication_pad2d_backward(Tensor grad_output, Tensor self, SymInt[4] padding) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("ReplicationPad2DBackward0", a.tensor(0), {true},
                         {{"padding", a.ints(2)}, {"self", a.tensor(1)}});
       }},
      {"aten::grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, "
       "int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)",
       [](const AtenArgs& a) {
         return run_node("GridSampler2DBackward0", a.tensor(0), a.bools(6),
                         {{"align_corners", a.boolean(5)}, {"grid", a.tensor(2)}, {"input", a.tensor(1)},
                          {"interpolation_mode", a.integer(3)}, {"padding_mode", a.integer(4)}});
       }},
      {"aten::unfold_backward(Tensor grad_in, SymInt[] input_sizes, int dim, int size, int step) -> Tensor",
       [](const AtenArgs& a) {
         return run_node("UnfoldBackward0", a.tensor(0), {true},
                         {{"dimension", a.integer(2)}, {"self_sym_sizes", a.ints(1)}, {"size", a.integer(3)},
                          {"step", a.integer(4)}});
       }},
  };
}

}  // namespace

void add_aten_ops(std::vector<AtenOpDef>& registry) {
  for (const auto& [text, run] : ops()) registry.push_back(AtenOpDef{parse_aten_schema(text), run});
}

}  // namespace refgrad::nodes
