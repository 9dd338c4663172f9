// Reduction nodes: sum, nansum, mean, prod, max/min (all, dim), amax/amin, aminmax, median,
// nanmedian, kthvalue, cumsum, cumprod, cummax/cummin, logcumsumexp, linalg_vector_norm, norm, renorm,
// var, std, var_mean, std_mean, logsumexp.
#include <cmath>
#include <limits>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// ------------------------------------------------ FunctionsManual helpers ---
// Under PyTorch's names (torch/csrc/autograd/FunctionsManual.cpp, and
// at::dim_list_to_bitset); several are likely to be shared with other groups.

// at::dim_list_to_bitset: which of a tensor's n_dims dims a dim list names
// (wrapped); None names every dim. A 0-d tensor accepts dim 0 and -1.
std::vector<bool> dim_list_to_bitset(const std::optional<IntList>& opt_dims, std::int64_t n_dims) {
  std::vector<bool> bits(static_cast<std::size_t>(std::max<std::int64_t>(n_dims, 1)), !opt_dims.has_value());
  if (!opt_dims) return bits;
  for (const std::int64_t dim : *opt_dims) {
    const std::int64_t d = wrap_dim(dim, n_dims, "dim_list_to_bitset");
    check(!bits[static_cast<std::size_t>(d)], "dim ", d, " appears multiple times in the list of dims");
    bits[static_cast<std::size_t>(d)] = true;
  }
  return bits;
}

// Puts back, as size-1 dims, the dims of an n_dims-d tensor that a reduction
// without keepdim removed from t. None means every dim.
Tensor unsqueeze_multiple(const Tensor& t, const std::optional<IntList>& opt_dim, std::int64_t n_dims) {
  if (opt_dim && opt_dim->empty()) return t;
  if (opt_dim && opt_dim->size() == 1) return unsqueeze(t, opt_dim->front());  // PyTorch's shortcut
  const std::vector<bool> dims_to_unsqueeze = dim_list_to_bitset(opt_dim, n_dims);
  Tensor res = t;
  for (std::int64_t i = 0; i < n_dims; ++i)
    if (dims_to_unsqueeze[static_cast<std::size_t>(i)]) res = unsqueeze(res, i);
  return res;
}

// The number of elements a reduction over `dims` combines (1 for a 0-d tensor).
std::int64_t _safe_size(const IntList& sizes, const IntList& dims) {
  if (sizes.empty()) return 1;
  std::int64_t size = 1;
  const auto ndim = static_cast<std::int64_t>(sizes.size());
  for (const std::int64_t dim : dims) {
    const std::int64_t d = wrap_dim(dim, ndim, "_safe_size");
    check(!__builtin_mul_overflow(size, sizes[static_cast<std::size_t>(d)], &size), "_safe_size: dims ",
          shape_text(dims), " of sizes ", shape_text(sizes), " have more elements than int64 can count");
  }
  return size;
}

// sum's grad: the reduced dims put back (None or [] reduced every dim, so a
// 0-d grad just expands), then expanded to the input's sizes.
Tensor sum_backward(const Tensor& grad, const IntList& sizes, const std::optional<IntList>& opt_dims, bool keepdim) {
  if (!keepdim && !sizes.empty() && opt_dims && !opt_dims->empty())
    return expand(unsqueeze_multiple(grad, opt_dims, static_cast<std::int64_t>(sizes.size())), sizes);
  return expand(grad, sizes);
}

Tensor mean_backward(const Tensor& grad, const IntList& shape, const std::optional<IntList>& opt_dim,
                     std::int64_t numel, bool keepdim) {
  const bool is_all_reduce = !opt_dim || opt_dim->empty();
  const std::int64_t n = is_all_reduce ? numel : _safe_size(shape, *opt_dim);
  return div(sum_backward(grad, shape, opt_dim, keepdim), Scalar(n));
}

// The reduced dims of `output` put back as size-1 dims (a reshape). PyTorch
// indexes its target shape unchecked; refgrad rejects a bad or repeated dim.
Tensor restore_reduced_dims(const Tensor& output, const IntList& dims, bool keepdim) {
  if (keepdim) return output;
  const std::int64_t total_dims = output.dim() + static_cast<std::int64_t>(dims.size());
  Shape target_shape(static_cast<std::size_t>(total_dims), 0);
  for (const std::int64_t dim : dims) {
    const auto d = static_cast<std::size_t>(wrap_dim(dim, total_dims, "restore_reduced_dims"));
    check(target_shape[d] == 0, "restore_reduced_dims: dim ", d, " appears multiple times in the list of dims");
    target_shape[d] = 1;
  }
  std::size_t j = 0;
  for (const std::int64_t size : output.sizes()) {
    while (target_shape[j] > 0) ++j;
    target_shape[j++] = size;
  }
  return reshape(output, target_shape);
}

// amax/amin: the grad split evenly among the elements equal to the extreme.
Tensor scale_grad_by_count(const Tensor& grad, const Tensor& mask, const IntList& dims) {
  return mul(div(grad, sum(mask, dims, true)), mask);
}

// max()/min()/median() over all elements: the grad split evenly among the
// elements equal to the result (NaN ones when the result is NaN). This is
// PyTorch's CPU path; its CUDA path gives the same values.
Tensor evenly_distribute_backward(const Tensor& grad, const Tensor& input, const Tensor& value) {
  check(value.numel() == 1, "evenly_distribute_backward: expected a one-element result, got shape ",
        shape_text(value.sizes()));
  const Tensor mask = std::isnan(value.item<double>()) ? ne(input, input) : eq(input, value);
  return masked_fill(zeros(input.sizes(), input.dtype()), mask, div(grad, sum(mask)));
}

// max(dim), min(dim), median(dim), kthvalue: the grad goes to the selected
// element of each slice, named by `indices`; the others get 0.
Tensor value_selecting_reduction_backward(const Tensor& grad, std::int64_t dim, const Tensor& indices,
                                          const IntList& sizes, bool keepdim) {
  check_sizes("value_selecting_reduction_backward", "self_sym_sizes", sizes);
  const Tensor grad_in = zeros(sizes, grad.dtype());
  if (!keepdim && !sizes.empty()) return scatter(grad_in, dim, unsqueeze(indices, dim), unsqueeze(grad, dim));
  return scatter(grad_in, dim, indices, grad);
}

// The product of all other elements of each slice along dim, without
// dividing (so zeros are safe): exclusive prefix times exclusive suffix products (conjugated for complex).
Tensor prod_safe_zeros_backward(const Tensor& grad, const Tensor& inp, std::int64_t dim) {
  if (inp.numel() == 0) return expand(grad, inp.sizes());
  const std::int64_t n = inp.size(dim);
  if (n == 1) return grad;
  Shape ones_size = inp.sizes();
  ones_size[static_cast<std::size_t>(dim)] = 1;
  const Tensor ones_ = ones(ones_size, grad.dtype());
  const Tensor exclusive_normal = cumprod(cat({ones_, narrow(inp, dim, 0, n - 1)}, dim), dim);
  const Tensor narrow_reverse = flip(narrow(inp, dim, 1, n - 1), {dim});
  const Tensor exclusive_reverse = flip(cumprod(cat({ones_, narrow_reverse}, dim), dim), {dim});
  return mul(grad, conj(mul(exclusive_normal, exclusive_reverse)));
}

// prod() over all elements. No zero: result / input. One zero: the safe
// products. Two or more: every product is 0, and PyTorch (grad mode off, as
// always in refgrad: no double backward) returns zeros_like(input) directly.
Tensor prod_backward(const Tensor& grad, const Tensor& input, const Tensor& result) {
  if (input.dim() == 0) return grad;
  const std::int64_t zeros_count = sum(eq(input, 0)).item<std::int64_t>();
  if (zeros_count == 0) return mul(grad, conj(div(result, input)));
  if (zeros_count > 1) return zeros_like(input);
  return reshape(prod_safe_zeros_backward(grad, reshape(input, {-1}), 0), input.sizes());
}

// prod(dim): result / input when the input has no zero at all, else the safe
// products (for every slice).
Tensor prod_backward(const Tensor& grad, const Tensor& input, const Tensor& result, std::int64_t dim, bool keepdim) {
  if (input.dim() == 0) return grad;
  dim = wrap_dim(dim, input.dim(), "prod_backward");
  const Tensor g = keepdim ? grad : unsqueeze(grad, dim);
  const Tensor r = keepdim ? result : unsqueeze(result, dim);
  if (sum(eq(input, 0)).item<std::int64_t>() == 0) return mul(g, conj(div(r, input)));
  return prod_safe_zeros_backward(g, input, dim);
}

// The reversed cumulative sum.
Tensor cumsum_backward(const Tensor& grad, std::int64_t dim) {
  if (grad.numel() <= 1 || grad.size(dim) == 1) return grad;
  return flip(cumsum(flip(grad, {dim}), dim), {dim});
}

// The sums from each position to the end along dim.
Tensor reversed_cumsum(const Tensor& w, std::int64_t dim) { return flip(cumsum(flip(w, {dim}), dim), {dim}); }

// cumprod's grad (aten/src/ATen/native/ReduceOps.cpp, the path without grad mode, the only one refgrad
// runs). With y = cumprod(x) along dim and g the incoming grad,
//   dL/dx_k = sum_{j >= k} g_j * prod_{i <= j, i != k} x_i,
// which is reversed_cumsum(g * y)_k / x_k while no x is zero. With zeros, let z1 be the first zero of a
// slice and z2 the second (or the end): for k < z1 the sum stops before z1 (every later y_j is 0), so
// the same quotient of the masked sum holds; for k > z1 every term holds x_z1 = 0, so 0; and for k = z1
//   dL/dx_z1 = y_{z1-1} * sum_{z1 <= j < z2} g_j * prod_{z1 < i <= j} x_i,
// a cumprod of the x strictly between the two zeros. For complex x the map is holomorphic: its
// backward uses the conjugates of x and y.
Tensor cumprod_backward(const Tensor& grad, const Tensor& input, std::int64_t dim, const Tensor& output) {
  if (input.numel() <= 1) return grad;
  dim = wrap_dim(dim, input.dim(), "cumprod_backward");
  const std::int64_t dim_size = input.size(dim);
  if (dim_size == 1) return grad;
  const Tensor input_conj = conj(input), output_conj = conj(output);
  const Tensor w = mul(output_conj, grad);
  const Tensor is_zero = eq(input, 0);
  if (sum(is_zero).item<std::int64_t>() == 0) return div(reversed_cumsum(w, dim), input_conj);

  // Masks along dim from the count of zeros so far: for is_zero = [F, T, F, T, F] it is [0, 1, 1, 2, 2].
  Tensor grad_input = zeros(input.sizes(), grad.dtype());
  const Tensor zeros_so_far = cumsum(is_zero, dim);
  // k < z1: [0, z1).
  Tensor mask = eq(zeros_so_far, 0);
  // (ATen writes into grad_input in place: a result of a wider dtype, when the forward's dtype argument
  // made result wider than self, is cast to grad_input's.)
  grad_input = masked_scatter(
      grad_input, mask,
      masked_select(div(reversed_cumsum(masked_fill(w, logical_not(mask), 0), dim), input_conj), mask)
          .to(grad_input.dtype()));
  // k = z1: the first position where one zero has been seen. A slice without zeros has no such
  // position; max then picks index 0, which `and mask` drops.
  mask = eq(zeros_so_far, 1);
  const Tensor first_zero_index = max(mask.to(DType::Int64), dim, /*keepdim=*/true).second;
  const Tensor first_zero_mask = logical_and(scatter(zeros_like(mask), dim, first_zero_index, Scalar(1)), mask);
  // (z1, z2): the factors of the products after the first zero.
  mask = logical_and(mask, logical_not(first_zero_mask));
  // y_{z1-1}, or 1 when the zero is the slice's first element.
  const Tensor before_zero = masked_fill(gather(output_conj, dim, relu(sub(first_zero_index, 1))),
                                         eq(first_zero_index, 0), 1);
  const Tensor at_zero = mul(sum(mul(cumprod(masked_fill(input_conj, logical_not(mask), 1), dim),
                                     masked_fill(grad, ne(zeros_so_far, 1), 0)),
                                 IntList{dim}, /*keepdim=*/true),
                             before_zero);
  return masked_scatter(grad_input, first_zero_mask, masked_select(at_zero, first_zero_mask).to(grad_input.dtype()));
}

// nansum's grad: sum's, zeroed where self is NaN (those elements were skipped).
Tensor nansum_backward(const Tensor& grad, const Tensor& self, const std::optional<IntList>& dims, bool keepdim) {
  return mul(sum_backward(grad, self.sizes(), dims, keepdim), logical_not(ne(self, self)));
}

// linalg_vector_norm's grad for each ord (sgn is sign for real self: z / |z| for complex). ord 0 has none: PyTorch returns an
// undefined tensor (nullopt). At a zero norm the grad is 0; for inf norms it
// is split evenly among the elements of largest |x| (NaNs included).
std::optional<Tensor> norm_backward(Tensor grad, const Tensor& self, double p, Tensor norm, const IntList& dim,
                                    bool keepdim) {
  if (!keepdim && self.dim() != 0) {
    grad = unsqueeze_multiple(grad, dim, self.dim());
    norm = unsqueeze_multiple(norm, dim, self.dim());
  }
  if (p == 0.0) return std::nullopt;
  if (p == 1.0) return mul(sgn(self), grad);
  if (p == 2.0) return mul(grad, masked_fill(div(self, norm), eq(norm, 0), 0));
  if (std::isinf(p)) {
    const Tensor self_abs = abs(self);
    // PyTorch compares |self| with the saved norm; refgrad compares with the extreme |self| recomputed,
    // which is the saved norm in the program's own dtype, and still marks the extreme element when a
    // float64 run reads a complex64 program: there the saved norm is |z| rounded to float32, which no |z|
    // computed in float64 equals (every element would be unmarked and the grad 0/0).
    const Tensor extreme = p > 0 ? amax(self_abs, dim, true) : amin(self_abs, dim, true);
    const Tensor mask = logical_or(eq(self_abs, extreme), ne(self_abs, self_abs));
    return mul(sgn(self), mul(div(grad, sum(mask, dim, true)), mask));
  }
  if (p < 1.0) {
    const Tensor self_scaled = mul(sgn(self), masked_fill(pow(abs(self), p - 1), eq(self, 0), 0));
    return mul(mul(self_scaled, grad), pow(norm, 1 - p));
  }
  const Tensor self_scaled = p < 2.0 ? mul(sgn(self), pow(abs(self), p - 1)) : mul(self, pow(abs(self), p - 2));
  const Tensor scale_v = masked_fill(div(grad, pow(norm, p - 1)), eq(norm, 0), 0);
  return mul(self_scaled, scale_v);
}

// 2 / (N - correction) * grad * (self - mean). With no dim (or a 0-d self)
// and N <= correction, the factor is infinite: PyTorch returns grad times inf,
// or NaN where self equals its mean; at::where(cond, Scalar, Scalar) makes
// that factor a default-dtype (float32) tensor, and so does refgrad.
// A dim list of [] (not None) counts N as 1 while the mean is over every dim,
// as in PyTorch.
Tensor var_backward(Tensor grad, const Tensor& self, const std::optional<IntList>& dim_opt,
                    const std::optional<Scalar>& correction_opt, bool keepdim) {
  const double correction = correction_opt.value_or(Scalar(1)).to_double();
  if (self.dim() == 0 || !dim_opt) {
    const double dof = static_cast<double>(self.numel()) - correction;
    if (dof <= 0) {
      const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
      return mul(grad, where(eq(self, mean(self)), scalar_tensor(nan), scalar_tensor(inf)));
    }
    return mul(mul(grad, 2.0 / dof), sub(self, mean(self)));
  }
  if (!keepdim && self.dim() > 1) grad = unsqueeze_multiple(grad, dim_opt, self.dim());
  const auto rnumel = static_cast<double>(_safe_size(self.sizes(), *dim_opt));
  return mul(mul(grad, 2.0 / (rnumel - correction)), sub(self, mean(self, *dim_opt, true)));
}

// d std = d var / (2 std); 0 where std is 0.
Tensor std_backward(const Tensor& result, const Tensor& grad, const Tensor& self, const std::optional<IntList>& dim,
                    const std::optional<Scalar>& correction, bool keepdim) {
  const Tensor grad_var = masked_fill(div(grad, mul(result, 2)), eq(result, 0), 0);
  return var_backward(grad_var, self, dim, correction, keepdim);
}

// grad * softmax(self) over the reduced dims, computed as exp(self - result).conj().
Tensor logsumexp_backward(Tensor grad, const Tensor& self, Tensor result, const IntList& dim, bool keepdim) {
  if (!keepdim && self.dim() != 0) {
    grad = unsqueeze_multiple(grad, dim, self.dim());
    result = unsqueeze_multiple(result, dim, self.dim());
  }
  return mul(grad, conj(exp(sub(self, result))));
}

// var_mean's grad: var's and mean's, each where its incoming grad is defined, summed.
// mean_backward reads a dim of None as [] (every dim, divided by numel).
std::optional<Tensor> var_mean_backward(const OptionalTensor& gvar, const OptionalTensor& gmean, const Tensor& self,
                                        const std::optional<IntList>& dim_opt,
                                        const std::optional<Scalar>& correction_opt, bool keepdim) {
  std::optional<Tensor> gself;
  if (gvar) gself = var_backward(*gvar, self, dim_opt, correction_opt, keepdim);
  if (gmean) {
    const Tensor aux = mean_backward(*gmean, self.sizes(), dim_opt.value_or(IntList{}), self.numel(), keepdim);
    gself = gself ? add(*gself, aux) : aux;
  }
  return gself;
}

// std_mean's grad: std's (from the saved std, result0) and mean's, summed.
std::optional<Tensor> std_mean_backward(const OptionalTensor& gstd, const OptionalTensor& gmean, const Tensor& self,
                                        const Tensor& std, const std::optional<IntList>& dim_opt,
                                        const std::optional<Scalar>& correction_opt, bool keepdim) {
  std::optional<Tensor> gself;
  if (gstd) gself = std_backward(std, *gstd, self, dim_opt, correction_opt, keepdim);
  if (gmean) {
    const Tensor aux = mean_backward(*gmean, self.sizes(), dim_opt.value_or(IntList{}), self.numel(), keepdim);
    gself = gself ? add(*gself, aux) : aux;
  }
  return gself;
}

// aminmax's grad: amin's and amax's (each split evenly among the ties, scale_grad_by_count), summed.
// dim None reduces every dim: the dim list is then [], which mask.sum([]) reads as every dim.
std::optional<Tensor> aminmax_backward(const Tensor& self, std::optional<std::int64_t> dim, bool keepdim,
                                       const OptionalTensor& grad_min, const OptionalTensor& grad_max,
                                       const Tensor& min, const Tensor& max) {
  const IntList dims = dim ? IntList{*dim} : IntList{};
  std::optional<Tensor> result;
  if (grad_min) {
    const Tensor min_reduced = restore_reduced_dims(min, dims, keepdim);
    result = scale_grad_by_count(restore_reduced_dims(*grad_min, dims, keepdim), eq(min_reduced, self), dims);
  }
  if (grad_max) {
    const Tensor max_reduced = restore_reduced_dims(max, dims, keepdim);
    const Tensor max_grad =
        scale_grad_by_count(restore_reduced_dims(*grad_max, dims, keepdim), eq(max_reduced, self), dims);
    result = result ? add(*result, max_grad) : max_grad;
  }
  return result;
}

// cummax/cummin: each grad element goes to the element its running extreme came from (`indices`);
// an element that stayed the extreme for several steps collects all of their grads (scatter_add).
Tensor cummaxmin_backward(const Tensor& grad, const Tensor& input, const Tensor& indices, std::int64_t dim) {
  if (input.numel() == 0) return input;
  return scatter_add(zeros(input.sizes(), input.dtype()), dim, indices, grad);
}

// ------------------------------------------------------------------ nodes ---

// SumBackward0 — sum(Tensor self, *, ScalarType? dtype=None)
//   self: grad.expand_symint(self.sym_sizes())
struct SumBackward0Saved {
  IntList self_sym_sizes;
};

Grads SumBackward0(const Grads& grads, const SumBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{expand(*grads[0], saved.self_sym_sizes)};
}

// SumBackward1 — sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
//   self: sum_backward(grad, self.sym_sizes(), dim, keepdim)
struct SumBackward1Saved {
  std::optional<IntList> dim;
  bool keepdim;
  IntList self_sym_sizes;
};

Grads SumBackward1(const Grads& grads, const SumBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{sum_backward(*grads[0], saved.self_sym_sizes, saved.dim, saved.keepdim)};
}

// MeanBackward0 — mean(Tensor self, *, ScalarType? dtype=None)
//   self: grad.expand_symint(self.sym_sizes()) / self.sym_numel()
struct MeanBackward0Saved {
  std::int64_t self_sym_numel;
  IntList self_sym_sizes;
};

Grads MeanBackward0(const Grads& grads, const MeanBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{div(expand(*grads[0], saved.self_sym_sizes), Scalar(saved.self_sym_numel))};
}

// MeanBackward1 — mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
//   self: mean_backward(grad, self.sym_sizes(), dim, self.sym_numel(), keepdim)
struct MeanBackward1Saved {
  std::optional<IntList> dim;
  bool keepdim;
  std::int64_t self_sym_numel;
  IntList self_sym_sizes;
};

Grads MeanBackward1(const Grads& grads, const MeanBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{mean_backward(*grads[0], saved.self_sym_sizes, saved.dim, saved.self_sym_numel, saved.keepdim)};
}

// ProdBackward0 — prod(Tensor self, *, ScalarType? dtype=None)
//   self: prod_backward(grad, self.to(grad.scalar_type()), result)
struct ProdBackward0Saved {
  Tensor self;
  Tensor result;
};

Grads ProdBackward0(const Grads& grads, const ProdBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  return Grads{prod_backward(grad, saved.self.to(grad.dtype()), saved.result)};
}

// ProdBackward1 — prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None)
//   self: prod_backward(grad, self.to(grad.scalar_type()), result, dim, keepdim)
struct ProdBackward1Saved {
  std::int64_t dim;
  bool keepdim;
  Tensor self;
  Tensor result;
};

Grads ProdBackward1(const Grads& grads, const ProdBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  return Grads{prod_backward(grad, saved.self.to(grad.dtype()), saved.result, saved.dim, saved.keepdim)};
}

// MaxBackward0 — max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
//   self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), keepdim)
// Also MinBackward0 (min.dim), MedianBackward1 (median.dim), NanmedianBackward1
// (nanmedian.dim), KthvalueBackward0 (kthvalue) and ModeBackward0 (mode): the same fields and formula.
// One incoming grad, the values': indices are not differentiable, and torch's
// node records no input for them. Without it the output is undefined.
struct ValueSelectingSaved {
  std::int64_t dim;
  bool keepdim;
  IntList self_sym_sizes;
  Tensor indices;
};

Grads ValueSelectingBackward(const Grads& grads, const ValueSelectingSaved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{
      value_selecting_reduction_backward(*grads[0], saved.dim, saved.indices, saved.self_sym_sizes, saved.keepdim)};
}

// SortBackward0 — sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)
//   self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), true)
// Also SortBackward1 (sort.stable) and TopkBackward0 (topk): the same fields and formula. Their values
// keep every dim (keepdim is true), so each grad element goes back to the place `indices` names.
struct SortingSaved {
  std::int64_t dim;
  IntList self_sym_sizes;
  Tensor indices;
};

Grads SortingBackward(const Grads& grads, const SortingSaved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{value_selecting_reduction_backward(*grads[0], saved.dim, saved.indices, saved.self_sym_sizes, true)};
}

// MaxBackward1 — max(Tensor self) -> Tensor
//   self: evenly_distribute_backward(grad, self, result)
// Also MinBackward1 (min), MedianBackward0 (median) and NanmedianBackward0 (nanmedian).
struct EvenlyDistributeSaved {
  Tensor self;
  Tensor result;
};

Grads EvenlyDistributeBackward(const Grads& grads, const EvenlyDistributeSaved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{evenly_distribute_backward(*grads[0], saved.self, saved.result)};
}

// AmaxBackward0 — amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor
//   self: scale_grad_by_count(restore_reduced_dims(grad, dim, keepdim),
//                             restore_reduced_dims(result, dim, keepdim) == self, dim)
// Also AminBackward0 (amin).
struct AmaxBackward0Saved {
  IntList dim;
  bool keepdim;
  Tensor self;
  Tensor result;
};

Grads AmaxBackward0(const Grads& grads, const AmaxBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor mask = eq(restore_reduced_dims(saved.result, saved.dim, saved.keepdim), saved.self);
  return Grads{scale_grad_by_count(restore_reduced_dims(*grads[0], saved.dim, saved.keepdim), mask, saved.dim)};
}

// CumsumBackward0 — cumsum(Tensor self, int dim, *, ScalarType? dtype=None)
//   self: cumsum_backward(grad.to(self.scalar_type()), dim)
struct CumsumBackward0Saved {
  std::int64_t dim;
  DType self_scalar_type;
};

Grads CumsumBackward0(const Grads& grads, const CumsumBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{cumsum_backward(grads[0]->to(saved.self_scalar_type), saved.dim)};
}

// LinalgVectorNormBackward0 — linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None,
//                                                bool keepdim=False, *, ScalarType? dtype=None)
//   self: linalg_vector_norm_backward(grad, self, ord, result, dim, keepdim)
// linalg_vector_norm_backward is norm_backward with dim None read as [].
struct LinalgVectorNormBackward0Saved {
  std::optional<IntList> dim;
  bool keepdim;
  Scalar ord;
  Tensor self;
  Tensor result;
};

Grads LinalgVectorNormBackward0(const Grads& grads, const LinalgVectorNormBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{norm_backward(*grads[0], saved.self, saved.ord.to_double(), saved.result,
                             saved.dim.value_or(IntList{}), saved.keepdim)};
}

// CumprodBackward0 — cumprod(Tensor self, int dim, *, ScalarType? dtype=None)
//   self: cumprod_backward(grad.to(self.scalar_type()), self, dim, result)
struct CumprodBackward0Saved {
  std::int64_t dim;
  Tensor self;
  DType self_scalar_type;
  Tensor result;
};

Grads CumprodBackward0(const Grads& grads, const CumprodBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check(saved.result.sizes() == saved.self.sizes() && grads[0]->sizes() == saved.self.sizes(),
        "CumprodBackward0: grad ", shape_text(grads[0]->sizes()), " and result ", shape_text(saved.result.sizes()),
        " must have self's shape ", shape_text(saved.self.sizes()));
  return Grads{cumprod_backward(grads[0]->to(saved.self_scalar_type), saved.self, saved.dim, saved.result)};
}

// NormBackward1 — norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False)
//   self: norm_backward(grad, self, p, result, dim, keepdim)
// p None is 2. (norm_backward is linalg_vector_norm's, above.)
struct NormBackward1Saved {
  IntList dim;
  bool keepdim;
  std::optional<Scalar> p;
  Tensor self;
  Tensor result;
};

Grads NormBackward1(const Grads& grads, const NormBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const double p = saved.p ? saved.p->to_double() : 2.0;
  return Grads{norm_backward(*grads[0], saved.self, p, saved.result, saved.dim, saved.keepdim)};
}

// NansumBackward0 — nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)
//   self: nansum_backward(grad.to(self.scalar_type()), self, dim, keepdim)
struct NansumBackward0Saved {
  std::optional<IntList> dim;
  bool keepdim;
  Tensor self;
  DType self_scalar_type;
};

Grads NansumBackward0(const Grads& grads, const NansumBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{nansum_backward(grads[0]->to(saved.self_scalar_type), saved.self, saved.dim, saved.keepdim)};
}

// VarBackward0 — var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False)
//   self: var_backward(grad, self, dim, correction, keepdim)
struct VarBackward0Saved {
  std::optional<Scalar> correction;
  std::optional<IntList> dim;
  bool keepdim;
  Tensor self;
};

Grads VarBackward0(const Grads& grads, const VarBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{var_backward(*grads[0], saved.self, saved.dim, saved.correction, saved.keepdim)};
}

// StdBackward0 — std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False)
//   self: std_backward(result, grad, self, dim, correction, keepdim)
struct StdBackward0Saved {
  std::optional<Scalar> correction;
  std::optional<IntList> dim;
  bool keepdim;
  Tensor self;
  Tensor result;
};

Grads StdBackward0(const Grads& grads, const StdBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{std_backward(saved.result, *grads[0], saved.self, saved.dim, saved.correction, saved.keepdim)};
}

// LogsumexpBackward0 — logsumexp(Tensor self, int[1] dim, bool keepdim=False)
//   self: logsumexp_backward(grad, self, result, dim, keepdim)
struct LogsumexpBackward0Saved {
  IntList dim;
  bool keepdim;
  Tensor self;
  Tensor result;
};

Grads LogsumexpBackward0(const Grads& grads, const LogsumexpBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{logsumexp_backward(*grads[0], saved.self, saved.result, saved.dim, saved.keepdim)};
}

// VarMeanBackward0 — var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None,
//                                         bool keepdim=False) -> (Tensor, Tensor)
//   self: var_mean_backward(grads[0], grads[1], self, dim, correction, keepdim)
struct VarMeanBackward0Saved {
  std::optional<Scalar> correction;
  std::optional<IntList> dim;
  bool keepdim;
  Tensor self;
};

Grads VarMeanBackward0(const Grads& grads, const VarMeanBackward0Saved& saved, const Need& need) {
  if (!need[0]) return Grads(1);
  return Grads{var_mean_backward(grads[0], grads[1], saved.self, saved.dim, saved.correction, saved.keepdim)};
}

// StdMeanBackward0 — std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None,
//                                         bool keepdim=False) -> (Tensor, Tensor)
//   self: std_mean_backward(grads[0], grads[1], self, result0, dim, correction, keepdim)
struct StdMeanBackward0Saved {
  std::optional<Scalar> correction;
  std::optional<IntList> dim;
  bool keepdim;
  Tensor self;
  Tensor result0;
};

Grads StdMeanBackward0(const Grads& grads, const StdMeanBackward0Saved& saved, const Need& need) {
  if (!need[0]) return Grads(1);
  return Grads{std_mean_backward(grads[0], grads[1], saved.self, saved.result0, saved.dim, saved.correction,
                                 saved.keepdim)};
}

// AminmaxBackward0 — aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)
//   self: aminmax_backward(self, dim, keepdim, grad_min, grad_max, min, max)
struct AminmaxBackward0Saved {
  std::optional<std::int64_t> dim;
  bool keepdim;
  Tensor self;
  Tensor max;
  Tensor min;
};

Grads AminmaxBackward0(const Grads& grads, const AminmaxBackward0Saved& saved, const Need& need) {
  if (!need[0]) return Grads(1);
  return Grads{
      aminmax_backward(saved.self, saved.dim, saved.keepdim, grads[0], grads[1], saved.min, saved.max)};
}

// CummaxBackward0 — cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)
//   self: cummaxmin_backward(grad, self, indices, dim)
// Also CumminBackward0 (cummin). One incoming grad, the values' (indices are not differentiable).
struct CummaxminSaved {
  std::int64_t dim;
  Tensor self;
  Tensor indices;
};

Grads CummaxminBackward(const Grads& grads, const CummaxminSaved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check(grads[0]->sizes() == saved.self.sizes() && saved.indices.sizes() == saved.self.sizes(), "grad ",
        shape_text(grads[0]->sizes()), " and indices ", shape_text(saved.indices.sizes()),
        " must have self's shape ", shape_text(saved.self.sizes()));
  return Grads{cummaxmin_backward(*grads[0], saved.self, saved.indices, saved.dim)};
}

// RenormBackward0 — renorm(Tensor self, Scalar p, int dim, Scalar maxnorm) -> Tensor
//   self: renorm_backward(grad, self, p, dim, maxnorm)
// The forward scales each slice self[..., i, ...] (index i along dim) whose p-norm exceeds maxnorm by
// maxnorm / (norm + 1e-7). With s = maxnorm / (norm + 1e-7) and invnorm = 1 / (norm + 1e-7):
//   norm        = vector_norm(self, p, every dim but dim, keepdim, dtype = acc type)
//   nb          = norm_backward(sum(real(self.conj() * grad)), self, p, norm)   (over the same dims)
//   self's grad = where(norm > maxnorm, s * (grad - invnorm * nb), grad)
// The norm is taken in the CPU accumulate type (float32 in float64, float16/bfloat16 in float32,
// complex64 in complex128) and the grad comes out in grad's dtype.
struct RenormBackward0Saved {
  std::int64_t dim;
  Scalar maxnorm;
  Scalar p;
  Tensor self;
};

DType cpu_accumulate_type(DType dtype) {
  switch (dtype) {
    case DType::Float16:
    case DType::BFloat16: return DType::Float32;
    case DType::Float32: return DType::Float64;
    case DType::ComplexFloat: return DType::ComplexDouble;
    default: return dtype;
  }
}

Grads RenormBackward0(const Grads& grads, const RenormBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self;
  check_same_shape("RenormBackward0", grad, self, "self");
  check(self.dim() >= 1, "RenormBackward0: self must have at least one dim, got a 0-d tensor");
  const std::int64_t dim = wrap_saved_dim("RenormBackward0", "dim", saved.dim, "self", self.sizes());
  IntList reduce_dims;
  for (std::int64_t d = 0; d < self.dim(); ++d)
    if (d != dim) reduce_dims.push_back(d);
  const double p = saved.p.to_double(), maxnorm = saved.maxnorm.to_double();
  check(p > 0 && maxnorm >= 0, "RenormBackward0: p must be positive and maxnorm non-negative (as renorm checks), got p=",
        p, " and maxnorm=", maxnorm);
  const DType acc_type = cpu_accumulate_type(self.dtype());
  // A complex slice's norm is that of its moduli (refgrad's linalg_vector_norm takes real tensors).
  const Tensor norm = linalg_vector_norm(is_complex(self.dtype()) ? abs(self) : self, p, reduce_dims, true,
                                         to_real_value_type(acc_type));
  const Tensor grad_output =
      sum(handle_r_to_c(DType::Float64, mul(conj(self), grad)), reduce_dims, true, to_real_value_type(acc_type));
  const std::optional<Tensor> nb = norm_backward(grad_output, self, p, norm, reduce_dims, true);
  const Tensor invnorm = reciprocal(add(norm, 1e-7));
  const Tensor factor = mul(invnorm, maxnorm);
  const Tensor scaled = mul(factor, sub(grad, mul(invnorm, *nb)));
  return Grads{to(where(gt(norm, maxnorm), scaled, grad), grad.dtype())};
}

// DistBackward0 — dist(Tensor self, Tensor other, Scalar p=2) -> Tensor
//   self:  norm_backward(grad, self - other, p, result)
//   other: -norm_backward(grad, self - other, p, result)
// The norm is over every element of the broadcast difference; each grad has the broadcast shape
// (validate sums it back). p = 0 has no gradient: norm_backward is undefined, and so are both grads
// (torch itself raises when it negates the undefined tensor for other).
struct DistBackward0Saved {
  Tensor other;
  Scalar p;
  Tensor self;
  Tensor result;
};

Grads DistBackward0(const Grads& grads, const DistBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check(grad.dim() == 0 && saved.result.dim() == 0, "DistBackward0: grad ", shape_text(grad.sizes()),
        " and result ", shape_text(saved.result.sizes()), " must be 0-d");
  check(is_expandable_to(saved.self.sizes(), broadcast_shapes(saved.self.sizes(), saved.other.sizes())),
        "DistBackward0: self ", shape_text(saved.self.sizes()), " and other ", shape_text(saved.other.sizes()),
        " do not broadcast");
  const std::optional<Tensor> self_grad =
      norm_backward(grad, sub(saved.self, saved.other), saved.p.to_double(), saved.result, {}, false);
  Grads out(2);
  if (need[0]) out[0] = self_grad;
  if (need[1] && self_grad) out[1] = neg(*self_grad);
  return out;
}

// LogcumsumexpBackward0 — logcumsumexp(Tensor self, int dim) -> Tensor
//   self: logcumsumexp_backward(grad, self, result, dim)
// d result_j / d self_i = exp(self_i - result_j) for i <= j, so self's grad is
//   sum_{j >= i} grad_j exp(self_i - result_j) = exp(self_i + revlcse(log(grad) - result)_i)
// with revlcse the logcumsumexp from the end. A real grad may be negative: its positive and negative
// parts go through the log separately (log of 0 read as the dtype's lowest value) and are subtracted;
// a complex grad goes through log(grad.conj()) and the result is conjugated back.
struct LogcumsumexpBackward0Saved {
  std::int64_t dim;
  Tensor self;
  Tensor result;
};

double lowest_value(DType dtype) {
  switch (dtype) {
    case DType::Float16: return -65504.0;
    case DType::BFloat16: return -3.3895313892515355e38;
    case DType::Float32:
    case DType::ComplexFloat: return std::numeric_limits<float>::lowest();
    default: return std::numeric_limits<double>::lowest();
  }
}

Grads LogcumsumexpBackward0(const Grads& grads, const LogcumsumexpBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self, &result = saved.result;
  check_same_shape("LogcumsumexpBackward0", grad, self, "self");
  check_same_shape("LogcumsumexpBackward0", grad, result, "result");
  if (grad.dim() == 0 || grad.numel() == 0) return Grads{grad};
  const std::int64_t dim = wrap_saved_dim("LogcumsumexpBackward0", "dim", saved.dim, "self", self.sizes());
  auto reverse_logcumsumexp = [dim](const Tensor& x) { return flip(logcumsumexp(flip(x, {dim}), dim), {dim}); };
  if (is_complex(grad.dtype())) {
    const Tensor log_grad = log(conj(grad));
    return Grads{conj(exp(add(reverse_logcumsumexp(sub(log_grad, result)), self)))};
  }
  const Tensor grad_min = scalar_tensor(lowest_value(grad.dtype()), grad.dtype());
  const Tensor log_abs_grad = log(abs(grad));
  const Tensor log_grad_positive = where(gt(grad, 0), log_abs_grad, grad_min);
  const Tensor log_grad_negative = where(lt(grad, 0), log_abs_grad, grad_min);
  const Tensor output_pos = exp(add(reverse_logcumsumexp(sub(log_grad_positive, result)), self));
  const Tensor output_neg = exp(add(reverse_logcumsumexp(sub(log_grad_negative, result)), self));
  return Grads{sub(output_pos, output_neg)};
}

// SegmentReduceBackward0 — segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None,
//     Tensor? indices=None, Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None)
//   data: _segment_reduce_backward(grad, result, data, reduce, lengths, offsets, axis, initial)
// Segment s of a row along axis holds lengths[..., s] consecutive elements (or offsets[..., s] to
// offsets[..., s + 1]); lengths/offsets have data's dims before axis and the segments last, so each
// row has its own segments; they may end before the row does (unsafe=True skips the check), and the
// elements after them get no grad. result and grad have one element per segment where data has the axis.
// What ATen's kernel gives each element of segment s (g = grad[s], out = result[s]):
//   sum:  g          mean: g / length
//   max, min: g where the element equals out or is NaN, 0 elsewhere; with several such elements
//         the positive g are divided by their count, the others are kept whole (ATen's kernel, as is)
//   prod: g * out / x, but for x = 0 or NaN g times the product of the segment's other elements and
//         initial (1 when there is none)
struct SegmentReduceBackward0Saved {
  std::int64_t axis;
  Tensor data;
  std::optional<Scalar> initial;
  std::optional<Tensor> lengths;
  std::optional<Tensor> offsets;
  std::string reduce;
  Tensor result;
};

Grads SegmentReduceBackward0(const Grads& grads, const SegmentReduceBackward0Saved& saved, const Need& need) {
  const char* node = "SegmentReduceBackward0";
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &data = saved.data, &result = saved.result;
  const std::string& reduce = saved.reduce;
  check(reduce == "sum" || reduce == "mean" || reduce == "max" || reduce == "min" || reduce == "prod", node,
        ": reduce must be sum, mean, max, min or prod, got '", reduce, "'");
  check(data.dim() >= 1, node, ": data must have at least one dim, got a 0-d tensor");
  const std::int64_t axis = wrap_saved_dim(node, "axis", saved.axis, "data", data.sizes());
  check(saved.lengths.has_value() != saved.offsets.has_value(), node,
        ": exactly one of lengths and offsets must be saved");
  // The segment lengths, [data's dims before axis..., S].
  Tensor lengths;
  if (saved.lengths) {
    lengths = to(*saved.lengths, DType::Int64);
  } else {
    const Tensor offsets = to(*saved.offsets, DType::Int64);
    check(offsets.dim() >= 1 && offsets.size(-1) >= 1, node, ": offsets ", shape_text(offsets.sizes()),
          " must have at least one offset per row");
    const std::int64_t last = offsets.dim() - 1, count = offsets.size(last) - 1;
    lengths = sub(narrow(offsets, last, 1, count), narrow(offsets, last, 0, count));
  }
  Shape lengths_shape(data.sizes().begin(), data.sizes().begin() + axis);
  const std::int64_t segments = lengths.dim() == axis + 1 ? lengths.size(axis) : -1;
  lengths_shape.push_back(segments);
  Shape result_shape = data.sizes();
  result_shape[static_cast<std::size_t>(axis)] = segments;
  check(lengths.sizes() == lengths_shape && result.sizes() == result_shape && grad.sizes() == result_shape, node,
        ": for data ", shape_text(data.sizes()), " and axis ", axis, ", lengths ", shape_text(lengths.sizes()),
        " must have data's dims before axis and one more, and grad ", shape_text(grad.sizes()), " and result ",
        shape_text(result.sizes()), " data's shape with the segments along axis");
  const std::int64_t n = data.size(axis);
  const Tensor ends = cumsum(lengths, axis);
  // The segments may stop short of the row's end (segment_reduce's unsafe=True samples do): the
  // elements after the last segment are in none and get no grad.
  check(sum(lt(lengths, 0)).item<std::int64_t>() == 0 &&
            (segments == 0 || sum(gt(select(ends, axis, segments - 1), n)).item<std::int64_t>() == 0),
        node, ": lengths must be non-negative and add up to at most data's size ", n, " along axis ", axis);
  if (data.numel() == 0 || segments == 0) return Grads{zeros(data.sizes(), grad.dtype())};

  // segment[..., i] = the segment of element i of its row: how many segments end at or before i
  // (`segments` for an element after the last segment: in_segment is false there, and its index is
  // clamped to a real segment so that gather can read something).
  Shape column = Shape(static_cast<std::size_t>(axis), 1);
  column.push_back(n);
  column.push_back(1);
  const Tensor segment = sum(ge(reshape(arange(n, DType::Int64), column), unsqueeze(ends, axis)), {axis + 1});
  // ... with data's trailing dims, so that gather(t, axis, index) reads each element's segment in t.
  Shape index_view = segment.sizes();
  index_view.resize(static_cast<std::size_t>(data.dim()), 1);
  const Tensor in_segment = expand(reshape(lt(segment, segments), index_view), data.sizes());
  const Tensor index =
      contiguous(expand(reshape(clamp(segment, std::nullopt, Scalar(segments - 1)), index_view), data.sizes()));
  auto per_element = [&](const Tensor& per_segment) { return gather(per_segment, axis, index); };
  auto segment_sum = [&](const Tensor& t) {  // sums t over each segment: one value per segment
    return scatter_add(zeros(result_shape, t.dtype()), axis, index, where(in_segment, t, 0));
  };
  auto only_in_segments = [&](const Tensor& t) { return Grads{where(in_segment, t, 0)}; };

  const Tensor grad_e = per_element(grad);
  if (reduce == "sum") return only_in_segments(grad_e);
  if (reduce == "mean") {
    Shape lengths_view = lengths.sizes();
    lengths_view.resize(static_cast<std::size_t>(data.dim()), 1);
    return only_in_segments(div(grad_e, per_element(contiguous(expand(reshape(lengths, lengths_view), result_shape)))));
  }
  const Tensor result_e = per_element(result);
  const Tensor is_nan = ne(data, data);
  if (reduce == "max" || reduce == "min") {
    const Tensor selected = logical_or(eq(data, result_e), is_nan);
    const Tensor grad_input = where(selected, grad_e, 0);
    const Tensor count = per_element(segment_sum(to(selected, DType::Int64)));
    return only_in_segments(where(logical_and(ge(count, 2), gt(grad_input, 0)), div(grad_input, count), grad_input));
  }
  // prod: an element that is 0 or NaN gets initial * (the product of the others): the product of the
  // segment's other elements that are neither, times 0 if another is 0, times NaN if another is NaN.
  const Tensor is_zero = eq(data, 0);
  const Tensor special = logical_or(is_zero, is_nan);
  const Tensor plain_product = per_element(
      scatter_reduce(ones(result_shape, data.dtype()), axis, index,
                     where(logical_or(special, logical_not(in_segment)), 1, data), "prod", true));
  const Tensor other_zeros = sub(per_element(segment_sum(to(is_zero, DType::Int64))), to(is_zero, DType::Int64));
  const Tensor other_nans = sub(per_element(segment_sum(to(is_nan, DType::Int64))), to(is_nan, DType::Int64));
  const Scalar initial = saved.initial.value_or(Scalar(1));
  Tensor exclusive = mul(plain_product, initial);
  exclusive = where(gt(other_zeros, 0), mul(exclusive, 0), exclusive);
  exclusive = where(gt(other_nans, 0), mul(exclusive, std::numeric_limits<double>::quiet_NaN()), exclusive);
  return only_in_segments(where(special, mul(grad_e, exclusive), div(mul(grad_e, result_e), data)));
}

// The registrations of the nodes that share a struct and a function.
NodeDef value_selecting_node(const char* name, const char* aten_op) {
  using S = ValueSelectingSaved;
  return define_node<S, ValueSelectingBackward>(
      {name, aten_op, {"self"}, 1, {},
       "self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), keepdim)"},
      {saved<&S::dim>("dim", FieldKind::Int), saved<&S::keepdim>("keepdim", FieldKind::Bool),
       saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&S::indices>("indices", FieldKind::Tensor)});
}

NodeDef sorting_node(const char* name, const char* aten_op) {
  using S = SortingSaved;
  return define_node<S, SortingBackward>(
      {name, aten_op, {"self"}, 1, {},
       "self: value_selecting_reduction_backward_symint(grad, dim, indices, self.sym_sizes(), true)"},
      {saved<&S::dim>("dim", FieldKind::Int), saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&S::indices>("indices", FieldKind::Tensor)});
}

NodeDef evenly_distribute_node(const char* name, const char* aten_op) {
  using S = EvenlyDistributeSaved;
  return define_node<S, EvenlyDistributeBackward>(
      {name, aten_op, {"self"}, 1, {}, "self: evenly_distribute_backward(grad, self, result)"},
      {saved<&S::self>("self", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)});
}

NodeDef cummaxmin_node(const char* name, const char* aten_op) {
  using S = CummaxminSaved;
  return define_node<S, CummaxminBackward>(
      {name, aten_op, {"self"}, 1, {}, "self: cummaxmin_backward(grad, self, indices, dim)"},
      {saved<&S::dim>("dim", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
       saved<&S::indices>("indices", FieldKind::Tensor)});
}

NodeDef amax_node(const char* name, const char* aten_op) {
  using S = AmaxBackward0Saved;
  return define_node<S, AmaxBackward0>(
      {name, aten_op, {"self"}, 1, {},
       "self: scale_grad_by_count(restore_reduced_dims(grad, dim, keepdim), "
       "restore_reduced_dims(result, dim, keepdim) == self, dim)"},
      {saved<&S::dim>("dim", FieldKind::IntList), saved<&S::keepdim>("keepdim", FieldKind::Bool),
       saved<&S::self>("self", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)});
}

}  // namespace

void add_reduction_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<SumBackward0Saved, SumBackward0>(
      {"SumBackward0", "sum", {"self"}, 1, {}, "self: grad.expand_symint(self.sym_sizes())"},
      {saved<&SumBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));

  {
    using S = SumBackward1Saved;
    registry.push_back(define_node<S, SumBackward1>(
        {"SumBackward1", "sum.dim_IntList", {"self"}, 1, {},
         "self: sum_backward(grad, self.sym_sizes(), dim, keepdim)"},
        {saved<&S::dim>("dim", FieldKind::IntList, true), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  }
  {
    using S = MeanBackward0Saved;
    registry.push_back(define_node<S, MeanBackward0>(
        {"MeanBackward0", "mean", {"self"}, 1, {}, "self: grad.expand_symint(self.sym_sizes()) / self.sym_numel()"},
        {saved<&S::self_sym_numel>("self_sym_numel", FieldKind::Int),
         saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  }
  {
    using S = MeanBackward1Saved;
    registry.push_back(define_node<S, MeanBackward1>(
        {"MeanBackward1", "mean.dim", {"self"}, 1, {},
         "self: mean_backward(grad, self.sym_sizes(), dim, self.sym_numel(), keepdim)"},
        {saved<&S::dim>("dim", FieldKind::IntList, true), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::self_sym_numel>("self_sym_numel", FieldKind::Int),
         saved<&S::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  }
  {
    using S = ProdBackward0Saved;
    registry.push_back(define_node<S, ProdBackward0>(
        {"ProdBackward0", "prod", {"self"}, 1, {}, "self: prod_backward(grad, self.to(grad.scalar_type()), result)"},
        {saved<&S::self>("self", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = ProdBackward1Saved;
    registry.push_back(define_node<S, ProdBackward1>(
        {"ProdBackward1", "prod.dim_int", {"self"}, 1, {},
         "self: prod_backward(grad, self.to(grad.scalar_type()), result, dim, keepdim)"},
        {saved<&S::dim>("dim", FieldKind::Int), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  registry.push_back(value_selecting_node("MaxBackward0", "max.dim"));
  registry.push_back(value_selecting_node("MinBackward0", "min.dim"));
  registry.push_back(value_selecting_node("MedianBackward1", "median.dim"));
  registry.push_back(value_selecting_node("NanmedianBackward1", "nanmedian.dim"));
  registry.push_back(value_selecting_node("ModeBackward0", "mode"));
  registry.push_back(sorting_node("SortBackward0", "sort"));
  registry.push_back(sorting_node("SortBackward1", "sort.stable"));
  registry.push_back(sorting_node("TopkBackward0", "topk"));
  registry.push_back(value_selecting_node("KthvalueBackward0", "kthvalue"));
  registry.push_back(evenly_distribute_node("MaxBackward1", "max"));
  registry.push_back(evenly_distribute_node("MinBackward1", "min"));
  registry.push_back(evenly_distribute_node("MedianBackward0", "median"));
  registry.push_back(evenly_distribute_node("NanmedianBackward0", "nanmedian"));
  registry.push_back(amax_node("AmaxBackward0", "amax"));
  registry.push_back(amax_node("AminBackward0", "amin"));
  {
    using S = CumsumBackward0Saved;
    registry.push_back(define_node<S, CumsumBackward0>(
        {"CumsumBackward0", "cumsum", {"self"}, 1, {}, "self: cumsum_backward(grad.to(self.scalar_type()), dim)"},
        {saved<&S::dim>("dim", FieldKind::Int), hidden<&S::self_scalar_type>("self_scalar_type", FieldKind::DType)}));
  }
  {
    using S = LinalgVectorNormBackward0Saved;
    registry.push_back(define_node<S, LinalgVectorNormBackward0>(
        {"LinalgVectorNormBackward0", "linalg_vector_norm", {"self"}, 1, {},
         "self: linalg_vector_norm_backward(grad, self, ord, result, dim, keepdim)"},
        {saved<&S::dim>("dim", FieldKind::IntList, true), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::ord>("ord", FieldKind::Scalar), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = CumprodBackward0Saved;
    registry.push_back(define_node<S, CumprodBackward0>(
        {"CumprodBackward0", "cumprod", {"self"}, 1, {},
         "self: cumprod_backward(grad.to(self.scalar_type()), self, dim, result)"},
        {saved<&S::dim>("dim", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         hidden<&S::self_scalar_type>("self_scalar_type", FieldKind::DType),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = NormBackward1Saved;
    registry.push_back(define_node<S, NormBackward1>(
        {"NormBackward1", "norm.ScalarOpt_dim", {"self"}, 1, {},
         "self: norm_backward(grad, self, p, result, dim, keepdim)"},
        {saved<&S::dim>("dim", FieldKind::IntList), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::p>("p", FieldKind::Scalar, true), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = NansumBackward0Saved;
    registry.push_back(define_node<S, NansumBackward0>(
        {"NansumBackward0", "nansum", {"self"}, 1, {},
         "self: nansum_backward(grad.to(self.scalar_type()), self, dim, keepdim)"},
        {saved<&S::dim>("dim", FieldKind::IntList, true), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::self>("self", FieldKind::Tensor),
         hidden<&S::self_scalar_type>("self_scalar_type", FieldKind::DType)}));
  }
  {
    using S = VarBackward0Saved;
    registry.push_back(define_node<S, VarBackward0>(
        {"VarBackward0", "var.correction", {"self"}, 1, {}, "self: var_backward(grad, self, dim, correction, keepdim)"},
        {saved<&S::correction>("correction", FieldKind::Scalar, true), saved<&S::dim>("dim", FieldKind::IntList, true),
         saved<&S::keepdim>("keepdim", FieldKind::Bool), saved<&S::self>("self", FieldKind::Tensor)}));
  }
  {
    using S = StdBackward0Saved;
    registry.push_back(define_node<S, StdBackward0>(
        {"StdBackward0", "std.correction", {"self"}, 1, {},
         "self: std_backward(result, grad, self, dim, correction, keepdim)"},
        {saved<&S::correction>("correction", FieldKind::Scalar, true), saved<&S::dim>("dim", FieldKind::IntList, true),
         saved<&S::keepdim>("keepdim", FieldKind::Bool), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = VarMeanBackward0Saved;
    registry.push_back(define_node<S, VarMeanBackward0>(
        {"VarMeanBackward0", "var_mean.correction", {"self"}, 2, {},
         "self: var_mean_backward(grads[0], grads[1], self, dim, correction, keepdim)"},
        {saved<&S::correction>("correction", FieldKind::Scalar, true), saved<&S::dim>("dim", FieldKind::IntList, true),
         saved<&S::keepdim>("keepdim", FieldKind::Bool), saved<&S::self>("self", FieldKind::Tensor)}));
  }
  {
    using S = StdMeanBackward0Saved;
    registry.push_back(define_node<S, StdMeanBackward0>(
        {"StdMeanBackward0", "std_mean.correction", {"self"}, 2, {},
         "self: std_mean_backward(grads[0], grads[1], self, result0, dim, correction, keepdim)"},
        {saved<&S::correction>("correction", FieldKind::Scalar, true), saved<&S::dim>("dim", FieldKind::IntList, true),
         saved<&S::keepdim>("keepdim", FieldKind::Bool), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::result0>("result0", FieldKind::Tensor)}));
  }
  {
    using S = AminmaxBackward0Saved;
    registry.push_back(define_node<S, AminmaxBackward0>(
        {"AminmaxBackward0", "aminmax", {"self"}, 2, {},
         "self: aminmax_backward(self, dim, keepdim, grad_min, grad_max, min, max)"},
        {saved<&S::dim>("dim", FieldKind::Int, true), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::max>("max", FieldKind::Tensor),
         saved<&S::min>("min", FieldKind::Tensor)}));
  }
  registry.push_back(cummaxmin_node("CummaxBackward0", "cummax"));
  registry.push_back(cummaxmin_node("CumminBackward0", "cummin"));
  {
    using S = LogsumexpBackward0Saved;
    registry.push_back(define_node<S, LogsumexpBackward0>(
        {"LogsumexpBackward0", "logsumexp", {"self"}, 1, {},
         "self: logsumexp_backward(grad, self, result, dim, keepdim)"},
        {saved<&S::dim>("dim", FieldKind::IntList), saved<&S::keepdim>("keepdim", FieldKind::Bool),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = RenormBackward0Saved;
    registry.push_back(define_node<S, RenormBackward0>(
        {"RenormBackward0", "renorm", {"self"}, 1, {}, "self: renorm_backward(grad, self, p, dim, maxnorm)"},
        {saved<&S::dim>("dim", FieldKind::Int), saved<&S::maxnorm>("maxnorm", FieldKind::Scalar),
         saved<&S::p>("p", FieldKind::Scalar), saved<&S::self>("self", FieldKind::Tensor)}));
  }
  {
    using S = DistBackward0Saved;
    registry.push_back(define_node<S, DistBackward0>(
        {"DistBackward0", "dist", {"self", "other"}, 1, {},
         "self: norm_backward(grad, self - other, p, result); other: -norm_backward(grad, self - other, p, result)"},
        {saved<&S::other>("other", FieldKind::Tensor), saved<&S::p>("p", FieldKind::Scalar),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = LogcumsumexpBackward0Saved;
    registry.push_back(define_node<S, LogcumsumexpBackward0>(
        {"LogcumsumexpBackward0", "logcumsumexp", {"self"}, 1, {},
         "self: logcumsumexp_backward(grad, self, result, dim)"},
        {saved<&S::dim>("dim", FieldKind::Int), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = SegmentReduceBackward0Saved;
    registry.push_back(define_node<S, SegmentReduceBackward0>(
        {"SegmentReduceBackward0", "segment_reduce", {"data"}, 1, {},
         "data: _segment_reduce_backward(grad, result, data, reduce, lengths, offsets, axis, initial)"},
        {saved<&S::axis>("axis", FieldKind::Int), saved<&S::data>("data", FieldKind::Tensor),
         saved<&S::initial>("initial", FieldKind::Scalar, true),
         saved<&S::lengths>("lengths", FieldKind::Tensor, true),
         saved<&S::offsets>("offsets", FieldKind::Tensor, true), saved<&S::reduce>("reduce", FieldKind::String),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
}

}  // namespace refgrad::nodes
