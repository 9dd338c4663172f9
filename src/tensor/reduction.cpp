// Reductions (sum, mean, prod, amax/amin, max/min, argmax/argmin, var, norms,
// logsumexp), the scans and normalisations along one dim (cumsum, softmax,
// log_softmax), and sum_to, which undoes broadcasting.
//
// Three ways in:
//  - sum and mean are loops over the input's strides (sum_kernel), split over
//    the kernels' threads by a partition of the outputs that depends on the
//    sizes alone (parallel.hpp), so any thread count gives the same bits.
//  - prod and amax/amin are xtensor reducers (xt::prod, xt::reduce) over the
//    reduced axes of a kernel::adapt view of the input's buffer, strided views
//    included. This file is C++17, where xtensor 0.24.3 is right; the tests
//    check it against torch (DESIGN.md, "Tensors and xtensor").
//  - The rest work on "rows": the reduced dims are moved last and copied
//    contiguously, so that the inputs of output element i are the i-th row.
//    Each op is then a small loop over a row, which is easy to read and to
//    check against the formula.
//
// Precision: floating inputs are accumulated in double and the result is
// rounded once to the output dtype; float32 outputs stay float32. We chose
// double over a pairwise float sum because it is simpler and at least as
// accurate as torch's CPU kernels (a cascade sum in float for sum/mean,
// double for cumsum), so results agree with torch within rtol 1e-5. Only
// adversarial cancellation tells them apart: the float32 sum of
// [1e8, 1, -1e8] is 1 here (the exact value) and 0 in torch. int64 and bool
// accumulate in uint64, whose arithmetic wraps modulo 2^64 without undefined
// behaviour; read back as int64 it wraps on overflow exactly as torch does.
#include <algorithm>
#include <cmath>
#include <limits>

#include <xtensor/xarray.hpp>
#include <xtensor/xreducer.hpp>

#include "kernel.hpp"

namespace refgrad {

namespace {

using kernel::Tag;

template <class T>
bool is_nan(T value) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(value);
  else return false;
}

// Rounds an accumulator to the output's element type; bool means "nonzero".
template <class To, class From>
To cast_to(From value) {
  if constexpr (std::is_same_v<To, bool>) return value != From(0);
  else return static_cast<To>(value);
}

// The output dtype of sum, prod and cumsum without a dtype argument: integral
// and bool inputs give int64, as in ATen.
DType integral_to_int64(DType dtype) { return is_integral(dtype, /*include_bool=*/true) ? DType::Int64 : dtype; }

Shape reduced_sizes(const Shape& sizes, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (!mask[d]) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// The number of elements each output element reduces over. An empty tensor
// has empty rows or none at all, and its reduced sizes alone may overflow
// int64 (e.g. [2^40, 2^40, 0] reduced over dims 0 and 1), so it gives 0.
std::int64_t reduced_numel(const Shape& sizes, const std::vector<bool>& mask) {
  if (numel_of(sizes) == 0) return 0;
  std::int64_t n = 1;
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (mask[d]) n *= sizes[d];
  return n;
}

// The mask for an op along one dim (a 0-d tensor accepts dim 0 and -1).
std::vector<bool> single_dim_mask(std::int64_t dim, std::int64_t ndim, const char* op) {
  return kernel::reduction_mask({dim}, ndim, op);
}

// ------------------------------------------------------------ sum and mean ---

// The dims of one group (the kept or the reduced ones) of a strided view, with
// size-1 dims dropped and neighbours merged where the outer one steps over the
// whole inner one (stride == inner size * inner stride). Outermost first.
struct DimGroup {
  std::vector<std::int64_t> sizes, strides;
  Shape outer_sizes, outer_strides;  // all but the innermost dim: made once, walked once per output

  DimGroup(const Tensor& t, const std::vector<bool>& mask, bool reduced) {
    for (std::size_t d = mask.size(); d-- > 0;) {
      const std::int64_t size = t.sizes()[d], stride = t.strides()[d];
      if (mask[d] != reduced || size == 1) continue;
      if (!sizes.empty() && stride == sizes.back() * strides.back()) {
        sizes.back() *= size;
        continue;
      }
      sizes.push_back(size);
      strides.push_back(stride);
    }
    std::reverse(sizes.begin(), sizes.end());
    std::reverse(strides.begin(), strides.end());
    if (!sizes.empty()) {
      outer_sizes.assign(sizes.begin(), sizes.end() - 1);
      outer_strides.assign(strides.begin(), strides.end() - 1);
    }
  }

  // The offset of element `index` (row-major over the group).
  std::int64_t offset_of(std::int64_t index) const {
    std::int64_t offset = 0;
    for (std::size_t d = sizes.size(); d-- > 0;) {
      offset += index % sizes[d] * strides[d];
      index /= sizes[d];
    }
    return offset;
  }

  // Calls run(offset) for each innermost run (length inner_size(), step inner_stride()), in row-major order.
  template <class Run>
  void for_each_run(Run&& run) const {
    if (sizes.empty()) {
      run(std::int64_t{0});
      return;
    }
    kernel::for_each_offset(outer_sizes, outer_strides, run);
  }
  std::int64_t inner_size() const { return sizes.empty() ? 1 : sizes.back(); }
  std::int64_t inner_stride() const { return strides.empty() ? 1 : strides.back(); }
};

// The sum of n elements `step` apart, in Acc. Contiguous elements go to eight
// partial sums in turn (lanes the compiler keeps in vector registers), which
// are added pairwise at the end; the order depends on n alone.
template <class Acc, class T>
Acc sum_of_run(const T* data, std::int64_t n, std::int64_t step) {
  if (step != 1) {
    Acc total = Acc(0);
    for (std::int64_t i = 0; i < n; ++i) total += static_cast<Acc>(data[i * step]);
    return total;
  }
  Acc lanes[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int lane = 0; lane < 8; ++lane) lanes[lane] += static_cast<Acc>(data[i + lane]);
  Acc tail = Acc(0);
  for (; i < n; ++i) tail += static_cast<Acc>(data[i]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}

// sum or mean of `input` (of element type T, any strides) over the masked
// dims, accumulating in Acc, into `out` (contiguous, the kept dims in order).
// Two loop orders, chosen by the layout alone:
//  - by rows: each output adds its inputs run by run (sum_of_run), the runs
//    in row-major order of the reduced dims;
//  - by columns, when the kept dims end in a contiguous one and the reduced
//    ones do not: a block of up to 256 neighbouring outputs is summed side by
//    side, each adding its inputs one by one in row-major order (a bias's
//    grad, summed over the batch).
// The outputs are cut into chunks by their count and the reduced count alone,
// and one output's sum never spans chunks: the thread count changes nothing.
template <class Acc, class T>
void sum_kernel(const Tensor& input, const std::vector<bool>& mask, bool mean, Tensor& out) {
  const DimGroup kept(input, mask, false), reduced(input, mask, true);
  const std::int64_t outputs = out.numel(), count = reduced_numel(input.sizes(), mask);
  const T* data = input.data_ptr<T>();
  T* result = out.data_ptr<T>();
  const auto finish = [&](Acc total) {
    if constexpr (std::is_floating_point_v<Acc>) {
      if (mean) return cast_to<T>(count == 0 ? Acc(NAN) : total / static_cast<Acc>(count));  // 0/0 = NaN
    }
    return cast_to<T>(total);
  };
  const std::int64_t per_output = std::max<std::int64_t>(count, 1);
  constexpr std::int64_t kBlock = 256;
  const bool by_columns = !kept.sizes.empty() && kept.strides.back() == 1 && kept.sizes.back() >= 4 &&
                          reduced.inner_stride() != 1 && count > 0;
  if (!by_columns) {
    const std::int64_t outputs_per_chunk = std::max<std::int64_t>(1, kernel::kElementwiseGrain / per_output);
    kernel::parallel_ranges(outputs, outputs_per_chunk, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t o = first; o < last; ++o) {
        const T* base = data + kept.offset_of(o);
        Acc total = Acc(0);
        if (count > 0)
          reduced.for_each_run([&](std::int64_t offset) {
            total += sum_of_run<Acc>(base + offset, reduced.inner_size(), reduced.inner_stride());
          });
        result[o] = finish(total);
      }
    });
    return;
  }
  // Blocks of the innermost kept dim, for each index of the kept dims outside it.
  const std::int64_t row = kept.sizes.back(), blocks_per_row = (row + kBlock - 1) / kBlock;
  const std::int64_t blocks = outputs / row * blocks_per_row;
  const std::int64_t blocks_per_chunk = std::max<std::int64_t>(1, kernel::kElementwiseGrain / (count * kBlock));
  kernel::parallel_ranges(blocks, blocks_per_chunk, [&](std::int64_t first, std::int64_t last) {
    Acc totals[kBlock];
    for (std::int64_t b = first; b < last; ++b) {
      const std::int64_t start = b / blocks_per_row * row + b % blocks_per_row * kBlock;
      const std::int64_t width = std::min(kBlock, row - b % blocks_per_row * kBlock);
      const T* base = data + kept.offset_of(start);
      std::fill(totals, totals + width, Acc(0));
      reduced.for_each_run([&](std::int64_t offset) {
        for (std::int64_t i = 0; i < reduced.inner_size(); ++i) {
          const T* values = base + offset + i * reduced.inner_stride();
          for (std::int64_t j = 0; j < width; ++j) totals[j] += static_cast<Acc>(values[j]);
        }
      });
      for (std::int64_t j = 0; j < width; ++j) result[start + j] = finish(totals[j]);
    }
  });
}

// sum (mean: false) or mean over the masked dims, accumulating in double for
// floating dtypes and in uint64 for integers; `input` already has out_dtype.
Tensor sum_or_mean(const Tensor& stored_input, const std::vector<bool>& mask, bool keepdim, DType out_dtype,
                   bool mean) {
  const Tensor input = kernel::to_opmath(stored_input);
  Tensor out = empty(reduced_sizes(input.sizes(), mask, keepdim), input.dtype());
  if (out.numel() > 0) {
    kernel::dispatch(input.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) sum_kernel<double, T>(input, mask, mean, out);
      else sum_kernel<std::uint64_t, T>(input, mask, mean, out);
    });
  }
  return with_rounding_noise(kernel::rounded_to(out, out_dtype));
}

// ------------------------------------------------------ xtensor reducers ---

// Reduces the masked axes of `input` with an xtensor reducer applied to the
// kernel::adapt view of its buffer (strided: transposed views are reduced in
// place), accumulating in Acc and rounding to `out_dtype`. An empty input
// reduces to `identity` (0 for sum, 1 for prod), without handing xtensor
// zero-sized views.
template <class Acc, class Reducer>
Tensor reduce_with_xtensor(const Tensor& stored_input, const std::vector<bool>& mask, bool keepdim, DType out_dtype,
                           Acc identity, Reducer reducer) {
  const Tensor input = kernel::to_opmath(stored_input);
  Tensor out = empty(reduced_sizes(input.sizes(), mask, keepdim), opmath_dtype(out_dtype));
  if (out.numel() == 0) return kernel::rounded_to(out, out_dtype);
  std::vector<std::size_t> axes;
  for (std::size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) axes.push_back(d);

  xt::xarray<Acc> result;
  if (input.numel() == 0) {
    result = xt::xarray<Acc>::from_shape({static_cast<std::size_t>(out.numel())});
    result.fill(identity);
  } else {
    kernel::dispatch(input.dtype(), [&](auto tag) {
      using In = typename decltype(tag)::type;
      // xtensor adapts dense views only: a gapped or broadcast input is copied.
      const Tensor dense_input = kernel::dense(input);
      if (axes.empty()) result = xt::cast<Acc>(kernel::adapt<In>(dense_input));  // a 0-d input: nothing to reduce
      else result = reducer.template apply<Acc>(kernel::adapt<In>(dense_input), axes);
    });
  }
  // The reducer's result is row-major over the kept dims, which is also the
  // order of `out` with or without keepdim.
  kernel::dispatch(out.dtype(), [&](auto tag) {
    using Out = typename decltype(tag)::type;
    std::transform(result.begin(), result.end(), out.data_ptr<Out>(), [](Acc v) { return cast_to<Out>(v); });
  });
  return with_rounding_noise(kernel::rounded_to(out, out_dtype));
}

struct ProdReducer {
  template <class Acc, class E, class Axes>
  xt::xarray<Acc> apply(const E& e, const Axes& axes) const {
    return xt::prod<Acc>(e, axes);
  }
};

// max/min that propagate NaN, as ATen's amax/amin do. xt::amax compares with
// `>` only and so drops NaN, and starts from lowest() instead of -inf; hence
// xt::reduce with our own functor and initial value.
template <class T>
struct Extreme {
  bool largest;
  T operator()(T acc, T value) const {
    if (is_nan(acc)) return acc;
    if (is_nan(value)) return value;
    return (largest ? value > acc : value < acc) ? value : acc;
  }
};

template <class T>
T worst_value(bool largest) {
  if constexpr (std::is_floating_point_v<T>) {
    return largest ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  } else {
    return largest ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
}

struct ExtremeReducer {
  bool largest;
  template <class T, class E, class Axes>
  xt::xarray<T> apply(const E& e, const Axes& axes) const {
    auto functor = xt::make_xreducer_functor(Extreme<T>{largest}, xt::const_value<T>(worst_value<T>(largest)));
    return xt::reduce(functor, e, axes);
  }
};

// ATen's checks before a reduction without an identity (max, min, amax, ...).
void check_reduction_has_values(const Tensor& self, const IntList& dim, const std::vector<bool>& mask,
                                const char* op) {
  check(!(dim.empty() && self.numel() == 0), op, ": Expected reduction dim to be specified for input.numel() == 0. ",
        "Specify the reduction dim with the 'dim' argument. (shape ", shape_text(self.sizes()), ")");
  for (std::size_t d = 0; d < mask.size(); ++d)
    check(!mask[d] || self.sizes()[d] != 0, op, ": Expected reduction dim ", d, " to have non-zero size. (shape ",
          shape_text(self.sizes()), ")");
}

Tensor extreme_values(const Tensor& self, const IntList& dim, bool keepdim, bool largest, const char* op) {
  check(self.defined(), op, ": tensor is undefined");
  const std::vector<bool> mask = kernel::reduction_mask(dim, self.dim(), op);
  check_reduction_has_values(self, dim, mask, op);
  const Tensor input = kernel::to_opmath(self);
  return kernel::rounded_to(kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return reduce_with_xtensor<T>(input, mask, keepdim, input.dtype(), worst_value<T>(largest),
                                  ExtremeReducer{largest});
  }), self.dtype());
}

// ----------------------------------------------------------------- rows ---

// A view of `t` with the masked dims moved last (each group keeps its order).
Tensor move_masked_dims_last(const Tensor& t, const std::vector<bool>& mask) {
  Shape sizes, strides;
  for (bool reduced : {false, true}) {
    for (std::size_t d = 0; d < mask.size(); ++d) {
      if (mask[d] != reduced) continue;
      sizes.push_back(t.sizes()[d]);
      strides.push_back(t.strides()[d]);
    }
  }
  return Tensor(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

// The elements of `self` converted to T, grouped so that row i holds (in
// row-major order of the masked dims) every element that reduces into
// output element i; the output elements are in row-major order of the kept dims.
template <class T>
struct Rows {
  Tensor buffer;  // contiguous, dtype_of<T>(); keeps data alive
  const T* data = nullptr;
  std::int64_t count = 0;   // number of rows (output elements)
  std::int64_t length = 0;  // elements per row
  const T* row(std::int64_t i) const { return data + i * length; }
};

template <class T>
Rows<T> rows_of(const Tensor& self, const std::vector<bool>& mask) {
  Rows<T> rows;
  rows.length = reduced_numel(self.sizes(), mask);
  rows.count = numel_of(reduced_sizes(self.sizes(), mask, false));
  if (self.numel() == 0) return rows;  // nothing to copy (the moved sizes' strides may not even fit int64)
  rows.buffer = kernel::contiguous_as(move_masked_dims_last(self, mask), dtype_of<T>());
  rows.data = rows.buffer.template data_ptr<T>();
  return rows;
}

// A new tensor of `sizes` and `dtype` whose masked dims, moved last, hold
// `values` in row-major order: the inverse of rows_of for ops that keep the
// shape (cumsum, softmax).
template <class T>
Tensor from_rows(const std::vector<T>& values, const Shape& sizes, const std::vector<bool>& mask, DType dtype) {
  Tensor out = empty(sizes, opmath_dtype(dtype));
  kernel::dispatch(out.dtype(), [&](auto tag) {
    using Out = typename decltype(tag)::type;
    Tensor moved = move_masked_dims_last(out, mask);
    Out* base = out.data_ptr<Out>();
    std::size_t i = 0;
    kernel::for_each_offset(moved.sizes(), moved.strides(),
                            [&](std::int64_t offset) { base[offset] = cast_to<Out>(values[i++]); });
  });
  return with_rounding_noise(kernel::rounded_to(out, dtype));
}

// Position of the first largest (or smallest) element of a non-empty row. A
// NaN counts as the extreme and its first position is taken, as in ATen.
template <class T>
std::int64_t index_of_extreme(const T* row, std::int64_t length, bool largest) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < length && !is_nan(row[best]); ++i) {
    const T value = row[i];
    if (is_nan(value) || (largest ? value > row[best] : value < row[best])) best = i;
  }
  return best;
}

std::pair<Tensor, Tensor> extreme_along(const Tensor& self, std::int64_t dim, bool keepdim, bool largest,
                                        bool want_values, const char* op) {
  check(self.defined(), op, ": tensor is undefined");
  const std::vector<bool> mask = single_dim_mask(dim, self.dim(), op);
  check_reduction_has_values(self, {dim}, mask, op);
  const Shape out_sizes = reduced_sizes(self.sizes(), mask, keepdim);
  const Tensor input = kernel::to_opmath(self);
  Tensor values = want_values ? empty(out_sizes, input.dtype()) : Tensor();
  Tensor indices = empty(out_sizes, DType::Int64);
  kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows<T> rows = rows_of<T>(input, mask);
    std::int64_t* index_out = indices.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < rows.count; ++i) {
      index_out[i] = index_of_extreme(rows.row(i), rows.length, largest);
      if (want_values) values.data_ptr<T>()[i] = rows.row(i)[index_out[i]];
    }
  });
  return {kernel::rounded_to(values, self.dtype()), indices};
}

Tensor arg_extreme(const Tensor& self, std::optional<std::int64_t> dim, bool keepdim, bool largest,
                   const char* op) {
  check(self.defined(), op, ": tensor is undefined");
  check(self.dtype() != DType::Bool, op, ": does not support bool input (shape ", shape_text(self.sizes()), ")");
  if (dim) return extreme_along(self, *dim, keepdim, largest, /*want_values=*/false, op).second;
  // No dim: the index into the flattened tensor; keepdim keeps every dim as 1.
  check(self.numel() > 0, op, ": Expected reduction dim to be specified for input.numel() == 0. (shape ",
        shape_text(self.sizes()), ")");
  const std::vector<bool> all(static_cast<std::size_t>(self.dim()), true);
  Tensor index = empty(reduced_sizes(self.sizes(), all, keepdim), DType::Int64);
  const Tensor input = kernel::to_opmath(self);
  kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows<T> rows = rows_of<T>(input, all);
    *index.data_ptr<std::int64_t>() = index_of_extreme(rows.row(0), rows.length, largest);
  });
  return index;
}

// ---------------------------------------------------------------- norms ---

Tensor vector_norm(const Tensor& self, double ord, const IntList& dim, bool keepdim, std::optional<DType> dtype,
                   const char* op) {
  check(self.defined(), op, ": tensor is undefined");
  check(self.is_floating_point(), op, ": expected a floating point tensor as input, got ", dtype_name(self.dtype()));
  if (dtype) {
    check(is_floating_point(*dtype), op, ": dtype should be floating point, but got ", dtype_name(*dtype));
    check(promote_types(self.dtype(), *dtype) == *dtype, op, ": the dtype of the input (", dtype_name(self.dtype()),
          ") should be convertible without narrowing to the specified dtype (", dtype_name(*dtype), ")");
  }
  const DType out_dtype = dtype.value_or(self.dtype());
  const std::vector<bool> mask = kernel::reduction_mask(dim, self.dim(), op);
  // inf and negative orders have no value for an empty set (max of nothing,
  // and sum(|x|^p)^(1/p) with p < 0 would be 0^(-) = inf, not an identity).
  if (ord < 0 || ord == INFINITY) {
    check(!(dim.empty() && self.numel() == 0), op, ": cannot compute the ", ord,
          " norm on an empty tensor because the operation does not have an identity (shape ", shape_text(self.sizes()), ")");
    for (std::size_t d = 0; d < mask.size(); ++d)
      check(!mask[d] || self.sizes()[d] != 0, op, ": cannot compute the ", ord, " norm on the dimension ", d,
            " because this dimension is empty and the operation does not have an identity (shape ",
            shape_text(self.sizes()), ")");
  }
  const Rows<double> rows = rows_of<double>(self.to(out_dtype), mask);
  std::vector<double> result(static_cast<std::size_t>(rows.count));
  for (std::int64_t i = 0; i < rows.count; ++i) {
    const double* row = rows.row(i);
    double acc = 0;
    if (ord == INFINITY || ord == -INFINITY) {
      acc = std::abs(row[0]);
      for (std::int64_t j = 1; j < rows.length; ++j)
        acc = Extreme<double>{ord > 0}(acc, std::abs(row[j]));
    } else if (ord == 0) {
      for (std::int64_t j = 0; j < rows.length; ++j) acc += row[j] != 0 ? 1 : 0;  // NaN counts: NaN != 0
    } else if (ord == 1) {
      for (std::int64_t j = 0; j < rows.length; ++j) acc += std::abs(row[j]);
    } else if (ord == 2) {
      for (std::int64_t j = 0; j < rows.length; ++j) acc += row[j] * row[j];
      acc = std::sqrt(acc);
    } else if (rows.length > 0) {  // an empty row's norm is 0, even for ord = NaN, as in ATen
      for (std::int64_t j = 0; j < rows.length; ++j) acc += std::pow(std::abs(row[j]), ord);
      acc = std::pow(acc, 1.0 / ord);
    }
    result[static_cast<std::size_t>(i)] = acc;
  }
  Tensor out = empty(reduced_sizes(self.sizes(), mask, keepdim), opmath_dtype(out_dtype));
  kernel::dispatch_floating(out.dtype(), op, [&](auto tag) {
    using Out = typename decltype(tag)::type;
    std::transform(result.begin(), result.end(), out.data_ptr<Out>(), [](double v) { return static_cast<Out>(v); });
  });
  return kernel::rounded_to(out, out_dtype);
}

// ------------------------------------------------------------- softmax ---

// softmax and log_softmax along `dim`, stable by subtracting the row's max:
//   softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m)
//   log_softmax(x)_j = x_j - m - log(sum_k exp(x_k - m)),   m = max_k x_k.
// A row of -inf (or with +inf) gives NaN, as in ATen: -inf - (-inf) is NaN.
Tensor softmax_impl(const Tensor& self, std::int64_t dim, std::optional<DType> dtype, bool log, const char* op) {
  check(self.defined(), op, ": tensor is undefined");
  const DType out_dtype = dtype.value_or(self.dtype());
  check(is_floating_point(out_dtype), op, ": not implemented for ", dtype_name(out_dtype),
        "; expected a floating point tensor or a floating point dtype argument (shape ", shape_text(self.sizes()), ")");
  const std::vector<bool> mask = single_dim_mask(dim, self.dim(), op);
  const Rows<double> rows = rows_of<double>(self.to(out_dtype), mask);
  std::vector<double> result(static_cast<std::size_t>(rows.count * rows.length));
  for (std::int64_t i = 0; i < rows.count; ++i) {
    const double* row = rows.row(i);
    double* out = result.data() + i * rows.length;
    double max = -INFINITY;
    for (std::int64_t j = 0; j < rows.length; ++j) max = Extreme<double>{true}(max, row[j]);
    double total = 0;
    for (std::int64_t j = 0; j < rows.length; ++j) total += std::exp(row[j] - max);
    for (std::int64_t j = 0; j < rows.length; ++j)
      out[j] = log ? row[j] - max - std::log(total) : std::exp(row[j] - max) / total;
  }
  return from_rows(result, self.sizes(), mask, out_dtype);
}

}  // namespace

// ------------------------------------------------------------------- sum ---

Tensor sum(const Tensor& self, std::optional<DType> dtype) { return sum(self, IntList{}, false, dtype); }

Tensor sum(const Tensor& self, const IntList& dim, bool keepdim, std::optional<DType> dtype) {
  check(self.defined(), "sum: tensor is undefined");
  const std::vector<bool> mask = kernel::reduction_mask(dim, self.dim(), "sum");
  const DType out_dtype = dtype.value_or(integral_to_int64(self.dtype()));
  // As in ATen, the input is converted to the requested dtype first: a sum
  // with dtype=int64 of floats adds the truncated values.
  const Tensor input = self.to(out_dtype);
  if (is_complex(out_dtype))  // the real and imaginary parts summed apart
    return kernel::by_parts(input, [&](const Tensor& part) { return sum(part, dim, keepdim); });
  return sum_or_mean(input, mask, keepdim, out_dtype, false);
}

// ------------------------------------------------------------------ mean ---

Tensor mean(const Tensor& self, std::optional<DType> dtype) { return mean(self, IntList{}, false, dtype); }

Tensor mean(const Tensor& self, const IntList& dim, bool keepdim, std::optional<DType> dtype) {
  check(self.defined(), "mean: tensor is undefined");
  if (dtype) {
    check(is_floating_point(*dtype) || is_complex(*dtype),
          "mean: could not infer output dtype. Optional dtype must be either a floating point or complex dtype, got ",
          dtype_name(*dtype));
  } else {
    check(self.is_floating_point() || is_complex(self.dtype()),
          "mean: could not infer output dtype. Input dtype must be either a floating point or complex dtype, got ",
          dtype_name(self.dtype()));
  }
  const std::vector<bool> mask = kernel::reduction_mask(dim, self.dim(), "mean");
  const DType out_dtype = dtype.value_or(self.dtype());
  if (is_complex(out_dtype))  // the real and imaginary parts averaged apart
    return kernel::by_parts(self.to(out_dtype), [&](const Tensor& part) { return mean(part, dim, keepdim); });
  // The mean of nothing is 0/0 = NaN.
  return sum_or_mean(self.to(out_dtype), mask, keepdim, out_dtype, true);
}

// ------------------------------------------------------------------ prod ---

namespace {

Tensor prod_over(const Tensor& self, const std::vector<bool>& mask, bool keepdim, std::optional<DType> dtype) {
  const DType out_dtype = dtype.value_or(integral_to_int64(self.dtype()));
  const Tensor input = self.to(out_dtype);
  if (is_complex(out_dtype)) {
    // A product is not linear: complex128 rows, multiplied in order, rounded once to the output dtype.
    const Rows<std::complex<double>> rows = rows_of<std::complex<double>>(input, mask);
    Tensor out = empty(reduced_sizes(input.sizes(), mask, keepdim), DType::ComplexDouble);
    std::complex<double>* data = out.data_ptr<std::complex<double>>();
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      std::complex<double> product = 1.0;
      for (std::int64_t j = 0; j < rows.length; ++j) product *= rows.row(i)[j];
      data[i] = product;
    }
    return out.to(out_dtype);
  }
  if (is_floating_point(out_dtype)) return reduce_with_xtensor<double>(input, mask, keepdim, out_dtype, 1.0, ProdReducer{});
  return reduce_with_xtensor<std::uint64_t>(input, mask, keepdim, out_dtype, 1, ProdReducer{});
}

}  // namespace

Tensor prod(const Tensor& self, std::optional<DType> dtype) {
  check(self.defined(), "prod: tensor is undefined");
  return prod_over(self, kernel::reduction_mask({}, self.dim(), "prod"), false, dtype);
}

Tensor prod(const Tensor& self, std::int64_t dim, bool keepdim, std::optional<DType> dtype) {
  check(self.defined(), "prod: tensor is undefined");
  return prod_over(self, single_dim_mask(dim, self.dim(), "prod"), keepdim, dtype);
}

// ----------------------------------------------------- amax, amin, max, min ---

Tensor amax(const Tensor& self, const IntList& dim, bool keepdim) {
  return extreme_values(self, dim, keepdim, true, "amax");
}

Tensor amin(const Tensor& self, const IntList& dim, bool keepdim) {
  return extreme_values(self, dim, keepdim, false, "amin");
}

Tensor max(const Tensor& self) { return extreme_values(self, {}, false, true, "max"); }

Tensor min(const Tensor& self) { return extreme_values(self, {}, false, false, "min"); }

std::pair<Tensor, Tensor> max(const Tensor& self, std::int64_t dim, bool keepdim) {
  return extreme_along(self, dim, keepdim, true, /*want_values=*/true, "max");
}

std::pair<Tensor, Tensor> min(const Tensor& self, std::int64_t dim, bool keepdim) {
  return extreme_along(self, dim, keepdim, false, /*want_values=*/true, "min");
}

Tensor argmax(const Tensor& self, std::optional<std::int64_t> dim, bool keepdim) {
  return arg_extreme(self, dim, keepdim, true, "argmax");
}

Tensor argmin(const Tensor& self, std::optional<std::int64_t> dim, bool keepdim) {
  return arg_extreme(self, dim, keepdim, false, "argmin");
}

// ------------------------------------------------------------------- var ---

// var = sum((x - mean)^2) / max(0, N - correction), two passes in double.
// N - correction <= 0 divides by zero: inf, or NaN when the sum is 0 (ATen
// clamps the divisor at 0 in the same way).
Tensor var(const Tensor& self, const IntList& dim, double correction, bool keepdim) {
  check(self.defined(), "var: tensor is undefined");
  check(self.is_floating_point(), "var: std and var only support floating point dtypes, got ",
        dtype_name(self.dtype()));
  const std::vector<bool> mask = kernel::reduction_mask(dim, self.dim(), "var");
  const Rows<double> rows = rows_of<double>(self, mask);
  Tensor out = empty(reduced_sizes(self.sizes(), mask, keepdim), opmath_dtype(self.dtype()));
  const double divisor = std::max(0.0, static_cast<double>(rows.length) - correction);
  kernel::dispatch_floating(out.dtype(), "var", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data_ptr<T>();
    for (std::int64_t i = 0; i < rows.count; ++i) {
      const double* row = rows.row(i);
      double total = 0;
      for (std::int64_t j = 0; j < rows.length; ++j) total += row[j];
      const double row_mean = total / static_cast<double>(rows.length);
      double squares = 0;
      for (std::int64_t j = 0; j < rows.length; ++j) squares += (row[j] - row_mean) * (row[j] - row_mean);
      dst[i] = static_cast<T>(squares / divisor);
    }
  });
  return with_rounding_noise(kernel::rounded_to(out, self.dtype()));
}

// ----------------------------------------------------------------- norms ---

Tensor linalg_vector_norm(const Tensor& self, double ord, const IntList& dim, bool keepdim,
                          std::optional<DType> dtype) {
  return vector_norm(self, ord, dim, keepdim, dtype, "linalg_vector_norm");
}

Tensor norm(const Tensor& self, double p, const IntList& dim, bool keepdim) {
  return vector_norm(self, p, dim, keepdim, std::nullopt, "norm");
}

// ---------------------------------------------------------------- cumsum ---

namespace {

// The running combination along each row of `input` (the masked dim): element j of a row is
// combine(...combine(combine(start, x_0), x_1)..., x_j), kept in Acc and written as Value (cumsum,
// cumprod). The result is in rows_of's order: from_rows puts it back in place.
template <class Value, class Acc, class Combine>
std::vector<Value> running_rows(const Tensor& input, const std::vector<bool>& mask, Acc start, Combine combine) {
  const Rows<Value> rows = rows_of<Value>(input, mask);
  std::vector<Value> result(static_cast<std::size_t>(rows.count * rows.length));
  for (std::int64_t i = 0; i < rows.count; ++i) {
    Acc running = start;
    for (std::int64_t j = 0; j < rows.length; ++j) {
      running = combine(running, static_cast<Acc>(rows.row(i)[j]));
      result[static_cast<std::size_t>(i * rows.length + j)] = static_cast<Value>(running);
    }
  }
  return result;
}

}  // namespace

Tensor cumsum(const Tensor& self, std::int64_t dim, std::optional<DType> dtype) {
  check(self.defined(), "cumsum: tensor is undefined");
  const DType out_dtype = dtype.value_or(integral_to_int64(self.dtype()));
  check(out_dtype != DType::Bool, "cumsum: not implemented for output dtype bool");
  const std::vector<bool> mask = single_dim_mask(dim, self.dim(), "cumsum");
  const Tensor input = self.to(out_dtype);  // converted first, as ATen
  if (is_complex(out_dtype))  // the real and imaginary parts summed apart
    return kernel::by_parts(input, [&](const Tensor& part) { return cumsum(part, dim); });
  // Value: the rows' element type; Acc: the running sum (uint64 wraps like torch's int64).
  auto scan = [&](auto value_tag, auto acc_tag) {
    using Value = typename decltype(value_tag)::type;
    using Acc = typename decltype(acc_tag)::type;
    const auto plus = [](Acc running, Acc x) { return running + x; };
    return from_rows(running_rows<Value, Acc>(input, mask, Acc(0), plus), self.sizes(), mask, out_dtype);
  };
  if (is_floating_point(out_dtype)) return scan(Tag<double>{}, Tag<double>{});
  return scan(Tag<std::int64_t>{}, Tag<std::uint64_t>{});
}

// ---------------------------------------------------------------- cumprod ---

// The running product along dim, accumulated in double (complex<double>) and
// rounded to the output dtype at each element, as ATen's CPU cumprod does with
// its accumulate type. Integral and bool inputs give int64 (wrapping like torch).
Tensor cumprod(const Tensor& self, std::int64_t dim, std::optional<DType> dtype) {
  check(self.defined(), "cumprod: tensor is undefined");
  const DType out_dtype = dtype.value_or(integral_to_int64(self.dtype()));
  check(out_dtype != DType::Bool, "cumprod: not implemented for output dtype bool");
  const std::vector<bool> mask = single_dim_mask(dim, self.dim(), "cumprod");
  const Tensor input = self.to(out_dtype);
  auto scan = [&](auto value_tag, auto acc_tag) {
    using Value = typename decltype(value_tag)::type;
    using Acc = typename decltype(acc_tag)::type;
    const auto times = [](Acc running, Acc x) { return running * x; };
    return running_rows<Value, Acc>(input, mask, Acc(1), times);
  };
  if (is_complex(out_dtype)) {
    // from_rows writes real dtypes: the complex128 products are written as a complex128 tensor here.
    const std::vector<std::complex<double>> values = scan(Tag<std::complex<double>>{}, Tag<std::complex<double>>{});
    Tensor out = empty(self.sizes(), DType::ComplexDouble);
    const Tensor moved = move_masked_dims_last(out, mask);
    std::complex<double>* base = out.data_ptr<std::complex<double>>();
    std::size_t i = 0;
    kernel::for_each_offset(moved.sizes(), moved.strides(), [&](std::int64_t offset) { base[offset] = values[i++]; });
    return out.to(out_dtype);
  }
  if (is_floating_point(out_dtype))
    return from_rows(scan(Tag<double>{}, Tag<double>{}), self.sizes(), mask, out_dtype);
  return from_rows(scan(Tag<std::int64_t>{}, Tag<std::uint64_t>{}), self.sizes(), mask, out_dtype);
}

// ----------------------------------------------------------- logcumsumexp ---

namespace {

// log(exp(x) + exp(y)) without overflow, as ATen's _log_add_exp_helper: max + log1p(exp(min - max)).
// Two equal infinities give that infinity (their difference would be NaN); NaN propagates.
double log_add_exp(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
  const double lo = std::min(x, y), hi = std::max(x, y);
  if (lo == hi && !std::isfinite(lo)) return x;
  return std::log1p(std::exp(lo - hi)) + hi;
}

// log(1 + z) for complex z, accurate when |z| is small: log|1 + z| = log1p(2 re z + |z|^2) / 2.
std::complex<double> complex_log1p(std::complex<double> z) {
  const double re = z.real(), im = z.imag();
  return {0.5 * std::log1p(2 * re + re * re + im * im), std::atan2(im, 1 + re)};
}

// The complex case, ordered by real parts. Both real parts -inf: -inf + 0i (the phase of a zero is
// lost); both +inf: log(exp(x) + exp(y)) directly; a NaN real part: NaN + NaN i.
std::complex<double> log_add_exp(std::complex<double> x, std::complex<double> y) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double lo_real = std::min(x.real(), y.real()), hi_real = std::max(x.real(), y.real());
  if (std::isnan(x.real()) || std::isnan(y.real())) return {nan, nan};
  if (lo_real == hi_real && !std::isfinite(lo_real)) {
    if (lo_real < 0) return {lo_real, 0};
    return std::log(std::exp(x) + std::exp(y));
  }
  const std::complex<double> lo = x.real() < y.real() ? x : y, hi = x.real() < y.real() ? y : x;
  return complex_log1p(std::exp(lo - hi)) + hi;
}

}  // namespace

// The running log(sum(exp(x))) along dim, from -inf, combined pairwise as ATen's CPU kernel does
// (log_add_exp above), accumulated in double (complex128) and rounded per element.
Tensor logcumsumexp(const Tensor& self, std::int64_t dim) {
  check(self.defined(), "logcumsumexp: tensor is undefined");
  check(is_floating_point(self.dtype()) || is_complex(self.dtype()),
        "logcumsumexp: expected a floating point or complex tensor, got ", dtype_name(self.dtype()));
  const std::vector<bool> mask = single_dim_mask(dim, self.dim(), "logcumsumexp");
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (is_complex(self.dtype())) {
    using C = std::complex<double>;
    const auto combine = [](C running, C x) { return log_add_exp(x, running); };
    const std::vector<C> values = running_rows<C, C>(self, mask, C(minus_inf, 0), combine);
    Tensor out = empty(self.sizes(), DType::ComplexDouble);
    const Tensor moved = move_masked_dims_last(out, mask);
    C* base = out.data_ptr<C>();
    std::size_t i = 0;
    kernel::for_each_offset(moved.sizes(), moved.strides(), [&](std::int64_t offset) { base[offset] = values[i++]; });
    return out.to(self.dtype());
  }
  const auto combine = [](double running, double x) { return log_add_exp(x, running); };
  return from_rows(running_rows<double, double>(self, mask, minus_inf, combine), self.sizes(), mask, self.dtype());
}

// ------------------------------------------------------------- logsumexp ---

// logsumexp(x) = m + log(sum exp(x - m)) with m = max x, for stability. When m
// is +-inf it is replaced by 0 (as ATen does): a row of -inf gives log(0) =
// -inf, a row with +inf gives inf, and an empty row gives -inf.
Tensor logsumexp(const Tensor& self, const IntList& dim, bool keepdim) {
  check(self.defined(), "logsumexp: tensor is undefined");
  // Integral inputs give the default float dtype, as for other float-valued ops.
  const DType out_dtype = self.is_floating_point() ? self.dtype() : default_dtype();
  const std::vector<bool> mask = kernel::reduction_mask(dim, self.dim(), "logsumexp");
  const Rows<double> rows = rows_of<double>(self, mask);
  Tensor out = empty(reduced_sizes(self.sizes(), mask, keepdim), opmath_dtype(out_dtype));
  kernel::dispatch_floating(out.dtype(), "logsumexp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data_ptr<T>();
    for (std::int64_t i = 0; i < rows.count; ++i) {
      const double* row = rows.row(i);
      double max = -INFINITY;
      for (std::int64_t j = 0; j < rows.length; ++j) max = Extreme<double>{true}(max, row[j]);
      if (std::isinf(max)) max = 0;
      double total = 0;
      for (std::int64_t j = 0; j < rows.length; ++j) total += std::exp(row[j] - max);
      dst[i] = static_cast<T>(std::log(total) + max);
    }
  });
  return with_rounding_noise(kernel::rounded_to(out, out_dtype));
}

// ------------------------------------------------------ softmax, log_softmax ---

Tensor softmax(const Tensor& self, std::int64_t dim, std::optional<DType> dtype) {
  return softmax_impl(self, dim, dtype, /*log=*/false, "softmax");
}

Tensor log_softmax(const Tensor& self, std::int64_t dim, std::optional<DType> dtype) {
  return softmax_impl(self, dim, dtype, /*log=*/true, "log_softmax");
}

// ---------------------------------------------------------------- sum_to ---

// True when a tensor of `shape` broadcasts to `desired`: aligned from the
// trailing dim, each size equals the desired one or is 1.
bool is_expandable_to(const Shape& shape, const Shape& desired) {
  if (shape.size() > desired.size()) return false;
  const std::size_t extra = desired.size() - shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != desired[extra + i] && shape[i] != 1) return false;
  return true;
}

// at::sum_to: the gradient of broadcasting self's `shape` up to self's sizes.
// Leading dims are summed away; dims where `shape` has size 1 are summed with
// keepdim. Nothing to sum returns self itself, as ATen.
Tensor sum_to(const Tensor& self, const Shape& shape) {
  check(self.defined(), "sum_to: tensor is undefined");
  check(is_expandable_to(shape, self.sizes()), "sum_to: size ", shape_text(shape), " is not expandable to size ",
        shape_text(self.sizes()));
  if (shape.empty()) return sum(self);
  const std::size_t leading = self.sizes().size() - shape.size();
  IntList reduce_dims;
  for (std::size_t d = 0; d < self.sizes().size(); ++d)
    if (d < leading || (shape[d - leading] == 1 && self.sizes()[d] != 1))
      reduce_dims.push_back(static_cast<std::int64_t>(d));
  if (reduce_dims.empty()) return self;
  Tensor summed = sum(self, reduce_dims, /*keepdim=*/true);
  // Dropping the leading size-1 dims of a contiguous result is a view.
  return Tensor(summed.storage(), shape, contiguous_strides(shape), summed.storage_offset(), summed.dtype());
}

}  // namespace refgrad
