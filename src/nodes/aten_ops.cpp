// The ATen ops refgrad runs as instructions: torch's schema (verbatim, checked by tests/python/test_aten.py)
// next to a function over L0's primitives. A backward kernel (tanh_backward, native_layer_norm_backward,
// ...) runs the node whose derivatives.yaml formula calls it, with the kernel's arguments as that
// node's saved fields: the same arithmetic the node's instruction runs.
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

// The node `name` called with one incoming grad and these saved fields; its results, one per input.
AtenResults run_node(std::string_view name, const Tensor& grad, Need need,
                     const std::map<std::string, FieldValue>& saved) {
  const Grads results = call_node(name, Grads{grad}, need, saved);
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
  };
}

}  // namespace

void add_aten_ops(std::vector<AtenOpDef>& registry) {
  for (const auto& [text, run] : ops()) registry.push_back(AtenOpDef{parse_aten_schema(text), run});
}

}  // namespace refgrad::nodes
