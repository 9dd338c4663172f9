// Indexing: index_select, gather, scatter, scatter_add, index_add, advanced
// indexing (index, index_put), masked_select, masked_scatter, embedding and
// one_hot, with ATen's semantics.
//
// Every index is checked before it is used: an index out of range raises
// refgrad::Error naming the op, the index, the dim and its size; nothing reads
// or writes outside a tensor. Only `index` and `index_put` wrap negative
// indices (as Python's x[-1] does); the other ops reject them, as ATen does.
//
// All kernels are plain strided loops: for_each_offsets below walks one shape
// and yields, for every element, its offset in several strided views at once.
// Gather-like ops set the stride of the indexed dim to 0 in the view of the
// indexed tensor and add `index * stride` by hand.
#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>

#include "kernel.hpp"

namespace refgrad {

namespace {

// target + value and a * b in the tensor's dtype; int64 wraps around, as ATen's kernels do (signed
// overflow is undefined behaviour in C++).
template <class T>
T accumulated(T target, T value) {
  if constexpr (std::is_same_v<T, std::int64_t>) return kernel::wrapping_add(target, value);
  else return static_cast<T>(target + value);
}

template <class T>
T multiplied(T a, T b) {
  if constexpr (std::is_same_v<T, std::int64_t>) return kernel::wrapping_mul(a, b);
  else return static_cast<T>(a * b);
}

// Visits every element of `sizes` in row-major order and calls f(offsets),
// where offsets[k] is the element's offset in a view with strides[k] (each of
// strides[k] has one stride per dim of `sizes`; 0 repeats along that dim).
template <std::size_t N, class F>
void for_each_offsets(const Shape& sizes, const std::array<Shape, N>& strides, F&& f) {
  for (std::int64_t s : sizes)
    if (s == 0) return;
  const std::size_t ndim = sizes.size();
  std::vector<std::int64_t> index(ndim, 0);
  std::array<std::int64_t, N> offsets{};
  while (true) {
    f(offsets);
    // Advance the odometer, last dim fastest.
    std::size_t d = ndim;
    while (true) {
      if (d == 0) return;
      --d;
      ++index[d];
      for (std::size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (index[d] < sizes[d]) break;
      for (std::size_t k = 0; k < N; ++k) offsets[k] -= index[d] * strides[k][d];
      index[d] = 0;
    }
  }
}

// ATen's gather/scatter/index_add treat a 0-d tensor as a 1-d tensor of one
// element (ensure_nonempty_dim / ensure_nonempty_size). This is that view.
Tensor as_nonempty(const Tensor& t) {
  if (t.dim() > 0) return t;
  return Tensor(t.storage(), {1}, {1}, t.storage_offset(), t.dtype());
}

void check_defined(const Tensor& t, const char* op, const char* name) {
  check(t.defined(), op, ": ", name, " is an undefined tensor");
}

void check_index_dtype(const Tensor& index, const char* op) {
  check(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, op,
        ": expected an int32 or int64 index tensor, got ", dtype_name(index.dtype()));
}

// torch takes int32 indices as well as int64; the kernels read int64.
Tensor as_int64_index(const Tensor& index) {
  return index.defined() && index.dtype() == DType::Int32 ? index.to(DType::Int64) : index;
}

// True when an op on `self` with `index` must first convert them: a storage
// format (computed in its opmath type and rounded back) or int32 indices.
bool needs_conversion(const Tensor& self, const Tensor& index) {
  return kernel::is_storage_format(self) || (index.defined() && index.dtype() == DType::Int32);
}

void check_same_dtype(const Tensor& self, const Tensor& other, const char* op, const char* other_name) {
  check(self.dtype() == other.dtype(), op, ": expected self and ", other_name, " to have the same dtype, got ",
        dtype_name(self.dtype()), " and ", dtype_name(other.dtype()));
}

// Checks one index against the size of the dim it indexes and returns it in
// [0, size). Negative indices count from the end only when `wrap` is true.
std::int64_t checked_index(std::int64_t i, std::int64_t size, std::int64_t dim, const char* op, bool wrap) {
  const std::int64_t lowest = wrap ? -size : 0;
  check(i >= lowest && i < size, op, ": index ", i, " is out of bounds for dimension ", dim, " with size ", size);
  return i < 0 ? i + size : i;
}

// The values of an int64 index tensor, each checked against `size`.
std::vector<std::int64_t> checked_indices(const Tensor& index, std::int64_t size, std::int64_t dim, const char* op,
                                          bool wrap) {
  std::vector<std::int64_t> values = index.to_vector<std::int64_t>();
  for (std::int64_t& i : values) i = checked_index(i, size, dim, op, wrap);
  return values;
}

// strides with the entry at `dim` set to 0: the view of an indexed tensor in
// which the indexed dim does not move (its offset is added from the index).
Shape without_dim(Shape strides, std::int64_t dim) {
  strides[static_cast<std::size_t>(dim)] = 0;
  return strides;
}

// Strides that are 0 everywhere except `stride` at `dim`: a 1-d index tensor
// seen as running along `dim` of an n-d shape.
Shape only_dim(std::size_t ndim, std::int64_t dim, std::int64_t stride) {
  Shape strides(ndim, 0);
  strides[static_cast<std::size_t>(dim)] = stride;
  return strides;
}

// ---------------------------------------------------- gather and scatter ---

// ATen's shape rules for gather and scatter, on the 0-d-as-1-d views:
// index has as many dims as self (and src); index.size(d) <= src.size(d) for
// every d, and index.size(d) <= self.size(d) for every d but `dim`.
void check_gather_scatter_shapes(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor* src,
                                 const char* op) {
  const Tensor self1 = as_nonempty(self), index1 = as_nonempty(index);
  check(index1.dim() == self1.dim(), op,
        ": index tensor must have the same number of dimensions as self tensor (index ",
        shape_text(index.sizes()), ", self ", shape_text(self.sizes()), ")");
  for (std::int64_t d = 0; d < self1.dim(); ++d) {
    check(d == dim || index1.size(d) <= self1.size(d), op, ": index ", shape_text(index.sizes()),
          " must be no larger than self ", shape_text(self.sizes()), " apart from dimension ", dim, " (dimension ", d, ")");
  }
  if (src == nullptr) return;
  const Tensor src1 = as_nonempty(*src);
  check(index1.dim() == src1.dim(), op, ": index tensor must have the same number of dimensions as src tensor (index ",
        shape_text(index.sizes()), ", src ", shape_text(src->sizes()), ")");
  for (std::int64_t d = 0; d < src1.dim(); ++d) {
    check(index1.size(d) <= src1.size(d), op, ": index ", shape_text(index.sizes()), " must be no larger than src ",
          shape_text(src->sizes()), " (dimension ", d, ")");
  }
}

enum class ScatterMode { Assign, Add };

// out = self.clone(); then for every position p of index, with q = p but
// q[dim] = index[p]: out[q] = src[p] (Assign) or out[q] += src[p] (Add).
// `src` undefined means every src[p] is `value`.
Tensor scatter_impl(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src, Scalar value,
                    ScatterMode mode, const char* op) {
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  if (src.defined()) check_same_dtype(self, src, op, "src");
  if (needs_conversion(self, index))
    return kernel::rounded_to(scatter_impl(kernel::to_opmath(self), dim, as_int64_index(index), kernel::to_opmath(src),
                                           value, mode, op),
                              self.dtype());
  const std::int64_t d = wrap_dim(dim, self.dim(), op);
  Tensor out = self.clone();
  if (index.numel() == 0) return out;  // ATen skips the index's dtype and shape checks too
  check_index_dtype(index, op);
  check_gather_scatter_shapes(self, d, index, src.defined() ? &src : nullptr, op);

  const Tensor out1 = as_nonempty(out), index1 = as_nonempty(index);
  const std::int64_t size = out1.size(d), stride = out1.stride(d);
  const std::int64_t* idx = index.data_ptr<std::int64_t>();
  // Validate every index before writing anything.
  for_each_offsets<1>(index1.sizes(), {index1.strides()},
                      [&](const auto& o) { checked_index(idx[o[0]], size, d, op, /*wrap=*/false); });
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data_ptr<T>();
    const T constant = src.defined() ? T(0) : kernel::scalar_to<T>(value, op, "value");
    const T* source = src.defined() ? src.data_ptr<T>() : nullptr;
    const Shape src_strides = src.defined() ? as_nonempty(src).strides() : Shape(index1.sizes().size(), 0);
    for_each_offsets<3>(index1.sizes(), {index1.strides(), without_dim(out1.strides(), d), src_strides},
                        [&](const auto& o) {
                          T& target = dst[o[1] + idx[o[0]] * stride];
                          const T v = source ? source[o[2]] : constant;
                          if (mode == ScatterMode::Add) target = accumulated(target, v);
                          else target = v;
                        });
  });
  return mode == ScatterMode::Add ? with_rounding_noise(out) : out;  // a plain scatter moves values: no rounding
}

// --------------------------------------------------- advanced indexing ---

// Where each element of self[indices] lives in a tensor with self's sizes and
// the given strides: for result element r, the offset is
//   sum over r's dims of r[i] * slice_strides[i]  +  table[sum of r[i] * table_strides[i]]
// The slice dims (`:`) move with their own stride; the dims of the broadcast
// index shape look up `table`, the precomputed offset of each index tuple.
struct IndexPlan {
  Shape result_sizes;
  Shape slice_strides;
  Shape table_strides;
  std::vector<std::int64_t> table;
};

// Replaces each bool mask by the int64 indices of its true elements, one
// tensor per mask dim (as nonzero() would), so only int64 tensors remain.
std::vector<OptionalTensor> expand_masks(const Tensor& self, const std::vector<OptionalTensor>& indices,
                                         const char* op) {
  std::vector<OptionalTensor> out;
  for (const OptionalTensor& index : indices) {
    if (!index || !index->defined()) {
      out.push_back(std::nullopt);
      continue;
    }
    // torch reads int32 indices as int64 ones and a uint8 tensor as a bool mask.
    const Tensor t = index->dtype() == DType::Int32 || index->dtype() == DType::UInt8
                         ? index->to(index->dtype() == DType::Int32 ? DType::Int64 : DType::Bool)
                         : *index;
    if (t.dtype() == DType::Int64) {
      out.push_back(t);
      continue;
    }
    check(t.dtype() == DType::Bool, op, ": tensors used as indices must be long, int, byte or bool tensors, got ",
          dtype_name(t.dtype()));
    // x[True] in Python adds a dim, which aten::index cannot express.
    check(t.dim() > 0, op, ": a 0-d bool mask is not supported as an index");
    const std::int64_t first = static_cast<std::int64_t>(out.size());
    check(first + t.dim() <= self.dim(), op, ": too many indices for tensor of dimension ", self.dim());
    for (std::int64_t j = 0; j < t.dim(); ++j) {
      check(t.size(j) == self.size(first + j), op, ": the shape of the mask ", shape_text(t.sizes()), " at index ", j,
            " does not match the shape of the indexed tensor ", shape_text(self.sizes()), " at index ", first + j);
    }
    // Row-major coordinates of the true elements, one column per mask dim.
    const std::vector<bool> mask = t.to_vector<bool>();
    const std::int64_t count = std::count(mask.begin(), mask.end(), true);
    const Shape mask_strides = contiguous_strides(t.sizes());
    std::vector<Tensor> coordinates;
    for (std::int64_t j = 0; j < t.dim(); ++j) coordinates.push_back(empty({count}, DType::Int64));
    std::int64_t n = 0;
    for (std::size_t flat = 0; flat < mask.size(); ++flat) {
      if (!mask[flat]) continue;
      std::int64_t rest = static_cast<std::int64_t>(flat);
      for (std::int64_t j = 0; j < t.dim(); ++j) {
        coordinates[j].data_ptr<std::int64_t>()[n] = rest / mask_strides[j];
        rest %= mask_strides[j];
      }
      ++n;
    }
    for (Tensor& c : coordinates) out.push_back(c);
  }
  check(static_cast<std::int64_t>(out.size()) <= self.dim(), op, ": too many indices for tensor of dimension ",
        self.dim(), " (got ", indices.size(), ")");
  return out;
}

// The broadcast shape of the index tensors, with an error listing them all.
Shape broadcast_index_shapes(const std::vector<OptionalTensor>& indices, const char* op) {
  Shape result;
  std::string shapes;
  bool ok = true;
  for (const OptionalTensor& index : indices) {
    if (!index) continue;
    shapes += (shapes.empty() ? "" : ", ") + str(index->sizes());
    const Shape& s = index->sizes();
    const std::size_t ndim = std::max(result.size(), s.size());
    Shape merged(ndim);
    for (std::size_t i = 0; i < ndim; ++i) {
      const std::int64_t a = i < ndim - result.size() ? 1 : result[i - (ndim - result.size())];
      const std::int64_t b = i < ndim - s.size() ? 1 : s[i - (ndim - s.size())];
      ok = ok && (a == b || a == 1 || b == 1);
      merged[i] = a == 1 ? b : a;
    }
    result = merged;
  }
  check(ok, op, ": shape mismatch: indexing tensors could not be broadcast together with shapes ", shapes);
  return result;
}

// Plans self[indices] for a tensor with `sizes` and `strides` (those of self
// for index, those of the output buffer for index_put).
IndexPlan plan_index(const Tensor& self, const Shape& strides, const std::vector<OptionalTensor>& given,
                     const char* op) {
  check_defined(self, op, "self");
  check(!given.empty(), op, ": at least one index must be provided");
  const std::int64_t ndim = self.dim();
  check(static_cast<std::int64_t>(given.size()) <= ndim, op, ": too many indices for tensor of dimension ", ndim,
        " (got ", given.size(), ")");
  std::vector<OptionalTensor> indices = expand_masks(self, given, op);
  indices.resize(static_cast<std::size_t>(ndim));  // trailing dims are full slices

  std::vector<std::int64_t> advanced;  // the dims indexed by a tensor
  for (std::int64_t d = 0; d < ndim; ++d)
    if (indices[d]) advanced.push_back(d);
  check(!advanced.empty(), op, ": at least one index must be a tensor (all were full slices)");
  const Shape index_shape = broadcast_index_shapes(indices, op);
  const auto index_ndim = static_cast<std::int64_t>(index_shape.size());

  // NumPy's rule: when the indexed dims are adjacent, the broadcast index dims
  // replace them in place; when a slice separates them, they go first.
  const bool adjacent = advanced.back() - advanced.front() + 1 == static_cast<std::int64_t>(advanced.size());
  const std::int64_t insert_at = adjacent ? advanced.front() : 0;

  IndexPlan plan;
  const Shape table_contiguous = contiguous_strides(index_shape);
  auto add_slice_dim = [&](std::int64_t d) {
    plan.result_sizes.push_back(self.size(d));
    plan.slice_strides.push_back(strides[d]);
    plan.table_strides.push_back(0);
  };
  for (std::int64_t d = 0; d < insert_at; ++d)
    if (!indices[d]) add_slice_dim(d);
  for (std::int64_t i = 0; i < index_ndim; ++i) {
    plan.result_sizes.push_back(index_shape[i]);
    plan.slice_strides.push_back(0);
    plan.table_strides.push_back(table_contiguous[i]);
  }
  for (std::int64_t d = insert_at; d < ndim; ++d)
    if (!indices[d]) add_slice_dim(d);

  if (numel_of(plan.result_sizes) == 0) {
    // Nothing is read, so ATen checks no index values, except that a
    // non-empty index into a dim of size 0 can never be valid.
    for (std::int64_t d : advanced) {
      check(self.size(d) > 0 || indices[d]->numel() == 0, op, ": index is out of bounds for dimension ", d,
            " with size 0");
    }
    return plan;
  }
  // The offset of each index tuple, over the broadcast index shape. Small
  // index tensors ([n,1] and [1,n]) may broadcast to more tuples than the
  // memory limit allows.
  const std::int64_t tuples = numel_of(index_shape);
  check(static_cast<std::uint64_t>(tuples) <= memory_limit() / sizeof(std::int64_t), op,
        ": the index tensors broadcast to shape ", shape_text(index_shape),
        ", more index tuples than fit in the memory limit of ", memory_limit(), " bytes");
  plan.table.assign(static_cast<std::size_t>(tuples), 0);
  for (std::int64_t d : advanced) {
    const Tensor expanded = broadcast_to(*indices[d], index_shape);
    const std::vector<std::int64_t> values = checked_indices(expanded, self.size(d), d, op, /*wrap=*/true);
    for (std::size_t k = 0; k < values.size(); ++k) plan.table[k] += values[k] * strides[d];
  }
  return plan;
}

Shape broadcast_self_and_mask(const Tensor& self, const Tensor& mask, const char* op) {
  try {
    return broadcast_shapes(self.sizes(), mask.sizes());
  } catch (const Error& error) {
    throw Error(concat(op, ": self and mask: ", error.what()));
  }
}

// True when `values` broadcasts to `sizes` without adding dims to `sizes`.
bool broadcasts_to(const Shape& values, const Shape& sizes) {
  if (values.size() > sizes.size()) return false;
  const std::size_t extra = sizes.size() - values.size();
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] != 1 && values[i] != sizes[extra + i]) return false;
  return true;
}

}  // namespace

// ----------------------------------------------------------- index_select ---

Tensor index_select(const Tensor& self, std::int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  check_index_dtype(index, op);
  if (needs_conversion(self, index))
    return kernel::rounded_to(index_select(kernel::to_opmath(self), dim, as_int64_index(index)), self.dtype());
  check(index.dim() <= 1, op, ": index must be 0-d or 1-d, got shape ", shape_text(index.sizes()));
  const std::int64_t d = wrap_dim(dim, self.dim(), op);
  if (self.dim() == 0) {
    check(index.numel() == 1, op, ": an index into a 0-d tensor must have one value, got ", index.numel());
  }
  const Tensor self1 = as_nonempty(self);
  const std::vector<std::int64_t> idx = checked_indices(index, self1.size(d), d, op, /*wrap=*/false);

  Shape out_sizes = self.sizes();
  if (self.dim() > 0) out_sizes[d] = index.numel();
  Tensor out = empty(out_sizes, self.dtype());
  const Tensor out1 = as_nonempty(out);
  const std::int64_t stride = self1.stride(d);
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = self.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    // out[..., k, ...] = self[..., idx[k], ...]; o[2] walks idx along dim d.
    for_each_offsets<3>(out1.sizes(),
                        {out1.strides(), without_dim(self1.strides(), d), only_dim(out1.sizes().size(), d, 1)},
                        [&](const auto& o) { dst[o[0]] = src[o[1] + idx[o[2]] * stride]; });
  });
  return out;
}

// ----------------------------------------------------------------- gather ---

// out[p] = self[p with p[dim] replaced by index[p]]; out has index's shape.
Tensor gather(const Tensor& self, std::int64_t dim, const Tensor& index) {
  const char* op = "gather";
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  if (needs_conversion(self, index)) {
    check_index_dtype(index, op);
    return kernel::rounded_to(gather(kernel::to_opmath(self), dim, as_int64_index(index)), self.dtype());
  }
  const std::int64_t d = wrap_dim(dim, self.dim(), op);
  Tensor out = empty(index.sizes(), self.dtype());
  if (index.numel() == 0) return out;  // ATen skips the index's dtype and shape checks too
  check_index_dtype(index, op);
  check_gather_scatter_shapes(self, d, index, nullptr, op);

  const Tensor self1 = as_nonempty(self), index1 = as_nonempty(index), out1 = as_nonempty(out);
  const std::int64_t size = self1.size(d), stride = self1.stride(d);
  const std::int64_t* idx = index.data_ptr<std::int64_t>();
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = self.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_each_offsets<3>(index1.sizes(), {index1.strides(), out1.strides(), without_dim(self1.strides(), d)},
                        [&](const auto& o) {
                          const std::int64_t i = checked_index(idx[o[0]], size, d, op, /*wrap=*/false);
                          dst[o[1]] = src[o[2] + i * stride];
                        });
  });
  return out;
}

// ---------------------------------------------------------------- scatter ---

Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined(src, "scatter", "src");
  return scatter_impl(self, dim, index, src, 0, ScatterMode::Assign, "scatter");
}

Tensor scatter(const Tensor& self, std::int64_t dim, const Tensor& index, Scalar value) {
  return scatter_impl(self, dim, index, Tensor(), value, ScatterMode::Assign, "scatter");
}

Tensor scatter_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined(src, "scatter_add", "src");
  return scatter_impl(self, dim, index, src, 0, ScatterMode::Add, "scatter_add");
}

// -------------------------------------------------------------- index_add ---

// out = self.clone(); out[..., index[k], ...] += alpha * source[..., k, ...].
// Duplicate indices accumulate.
Tensor index_add(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  const char* op = "index_add";
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  check_defined(source, op, "source");
  check_same_dtype(self, source, op, "source");
  check_index_dtype(index, op);
  if (needs_conversion(self, index))
    return kernel::rounded_to(
        index_add(kernel::to_opmath(self), dim, as_int64_index(index), kernel::to_opmath(source), alpha), self.dtype());
  check(index.dim() <= 1, op, ": index must be 0-d or 1-d, got shape ", shape_text(index.sizes()));
  const std::int64_t d = wrap_dim(dim, self.dim(), op);
  const Tensor self1 = as_nonempty(self), source1 = as_nonempty(source);
  bool shapes_match = source.dim() == self.dim();
  for (std::int64_t i = 0; shapes_match && i < self1.dim(); ++i)
    shapes_match = i == d || source1.size(i) == self1.size(i);
  check(shapes_match, op, ": source shape ", shape_text(source.sizes()), " must match self shape ", shape_text(self.sizes()),
        " except at dimension ", d);
  check(source1.size(d) == index.numel(), op, ": the number of indices (", index.numel(),
        ") must equal source.size(", d, ") (", source1.size(d), ")");
  Tensor out = self.clone();
  // ATen's kernel for more than one dim returns before it reads an index or
  // alpha when there is nothing to add; the one for 0-d and 1-d reads both.
  if (self.dim() > 1 && (index.numel() == 0 || self.numel() == 0)) return out;
  const std::vector<std::int64_t> idx = checked_indices(index, self1.size(d), d, op, /*wrap=*/false);

  const Tensor out1 = as_nonempty(out);
  const std::int64_t stride = out1.stride(d);
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = kernel::scalar_to<T>(alpha, op, "alpha");  // torch truncates a float alpha for integer tensors
    const T* src = source.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_each_offsets<3>(source1.sizes(), {source1.strides(), without_dim(out1.strides(), d),
                                          only_dim(source1.sizes().size(), d, 1)},
                        [&](const auto& o) {
                          T& target = dst[o[1] + idx[o[2]] * stride];
                          target = accumulated(target, multiplied(a, src[o[0]]));
                        });
  });
  return with_rounding_noise(out);
}

// ------------------------------------------------------------------ index ---

Tensor index(const Tensor& self, const std::vector<OptionalTensor>& indices) {
  const char* op = "index";
  if (kernel::is_storage_format(self)) return kernel::rounded_to(index(kernel::to_opmath(self), indices), self.dtype());
  const IndexPlan plan = plan_index(self, self.strides(), indices, op);
  Tensor out = empty(plan.result_sizes, self.dtype());
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = self.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_each_offsets<3>(out.sizes(), {out.strides(), plan.slice_strides, plan.table_strides},
                        [&](const auto& o) { dst[o[0]] = src[o[1] + plan.table[o[2]]]; });
  });
  return out;
}

// Out of place: out = self.clone(); out[indices] = values (or += values),
// with values broadcast to the shape of self[indices]. Elements are written in
// row-major order of that shape, so with duplicate indices the last value
// wins (accumulate=false) or all values add up (accumulate=true).
Tensor index_put(const Tensor& self, const std::vector<OptionalTensor>& indices, const Tensor& values,
                 bool accumulate) {
  const char* op = "index_put";
  check_defined(self, op, "self");
  check_defined(values, op, "values");
  check_same_dtype(self, values, op, "values");
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(index_put(kernel::to_opmath(self), indices, kernel::to_opmath(values), accumulate),
                              self.dtype());
  Tensor out = self.clone();
  const IndexPlan plan = plan_index(out, out.strides(), indices, op);
  check(broadcasts_to(values.sizes(), plan.result_sizes), op, ": shape mismatch: value tensor of shape ",
        shape_text(values.sizes()), " cannot be broadcast to indexing result of shape ", shape_text(plan.result_sizes));
  const Tensor expanded = broadcast_to(values, plan.result_sizes);
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = expanded.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_each_offsets<3>(plan.result_sizes, {expanded.strides(), plan.slice_strides, plan.table_strides},
                        [&](const auto& o) {
                          T& target = dst[o[1] + plan.table[o[2]]];
                          target = accumulate ? accumulated(target, src[o[0]]) : src[o[0]];
                        });
  });
  return out;
}

// ---------------------------------------------------------------- masking ---

// The elements of self where mask is true (both broadcast), as a 1-d tensor
// in row-major order.
Tensor masked_select(const Tensor& self, const Tensor& mask) {
  const char* op = "masked_select";
  check_defined(self, op, "self");
  check_defined(mask, op, "mask");
  check(mask.dtype() == DType::Bool, op, ": expected a bool mask, got ", dtype_name(mask.dtype()));
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(masked_select(kernel::to_opmath(self), mask), self.dtype());
  const Shape sizes = broadcast_self_and_mask(self, mask, op);
  const Tensor self_b = broadcast_to(self, sizes), mask_b = broadcast_to(mask, sizes);
  const bool* m = mask_b.data_ptr<bool>();
  std::int64_t count = 0;
  for_each_offsets<1>(sizes, {mask_b.strides()}, [&](const auto& o) { count += m[o[0]] ? 1 : 0; });
  Tensor out = empty({count}, self.dtype());
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = self_b.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_each_offsets<2>(sizes, {self_b.strides(), mask_b.strides()}, [&](const auto& o) {
      if (m[o[1]]) *dst++ = src[o[0]];
    });
  });
  return out;
}

// self (broadcast with mask) with the elements where mask is true replaced,
// in row-major order, by consecutive elements of source (read row-major).
Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source) {
  const char* op = "masked_scatter";
  check_defined(self, op, "self");
  check_defined(mask, op, "mask");
  check_defined(source, op, "source");
  check(mask.dtype() == DType::Bool, op, ": expected a bool mask, got ", dtype_name(mask.dtype()));
  check_same_dtype(self, source, op, "source");
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(masked_scatter(kernel::to_opmath(self), mask, kernel::to_opmath(source)), self.dtype());
  // The out-of-place op broadcasts self and mask together, as torch does.
  const Shape sizes = broadcast_self_and_mask(self, mask, op);
  Tensor out = broadcast_to(self, sizes).clone();
  const Tensor mask_b = broadcast_to(mask, sizes);
  const bool* m = mask_b.data_ptr<bool>();
  std::int64_t count = 0;
  for_each_offsets<1>(sizes, {mask_b.strides()}, [&](const auto& o) { count += m[o[0]] ? 1 : 0; });
  check(count <= source.numel(), op, ": source has ", source.numel(), " elements but the mask has ", count,
        " true elements (mask ", shape_text(mask.sizes()), ", self ", shape_text(self.sizes()), ")");
  const Tensor flat_source = source.contiguous();
  kernel::dispatch_with_complex(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = flat_source.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for_each_offsets<2>(sizes, {out.strides(), mask_b.strides()}, [&](const auto& o) {
      if (m[o[1]]) dst[o[0]] = *src++;
    });
  });
  return out;
}

// -------------------------------------------------------------- embedding ---

// out[p, :] = weight[indices[p], :]; out has shape indices.shape + [D].
Tensor embedding(const Tensor& weight, const Tensor& indices, std::int64_t padding_idx) {
  const char* op = "embedding";
  check_defined(weight, op, "weight");
  check_defined(indices, op, "indices");
  check(weight.dim() == 2, op, ": weight must be 2-D, got shape ", shape_text(weight.sizes()));
  check(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32, op, ": expected int32 or int64 indices, got ",
        dtype_name(indices.dtype()));
  if (kernel::is_storage_format(weight))
    return kernel::rounded_to(embedding(kernel::to_opmath(weight), indices, padding_idx), weight.dtype());
  const std::int64_t rows = weight.size(0), width = weight.size(1);
  // padding_idx matters only for the backward, which leaves that row's
  // gradient zero; aten::embedding takes any value (F.embedding checks it and
  // wraps a negative one before calling it).
  const std::vector<std::int64_t> idx = checked_indices(indices, rows, 0, op, /*wrap=*/false);

  Shape out_sizes = indices.sizes();
  out_sizes.push_back(width);
  Tensor out = empty(out_sizes, weight.dtype());
  kernel::dispatch_with_complex(weight.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = weight.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    for (std::size_t k = 0; k < idx.size(); ++k)
      for (std::int64_t j = 0; j < width; ++j)
        *dst++ = src[idx[k] * weight.stride(0) + j * weight.stride(1)];
  });
  return out;
}

// ---------------------------------------------------------------- one_hot ---

// out[p, c] = 1 if self[p] == c else 0, an int64 tensor of shape
// self.shape + [num_classes]; num_classes = -1 means max(self) + 1.
Tensor one_hot(const Tensor& self, std::int64_t num_classes) {
  const char* op = "one_hot";
  check_defined(self, op, "self");
  check(self.dtype() == DType::Int64, op, ": expected an int64 tensor, got ", dtype_name(self.dtype()));
  const std::vector<std::int64_t> classes = self.to_vector<std::int64_t>();
  if (classes.empty()) {
    // torch infers nothing from an empty tensor (it treats num_classes <= 0 as "infer").
    check(num_classes > 0, op, ": cannot infer the number of classes from an empty tensor of shape ",
          shape_text(self.sizes()), " (num_classes ", num_classes, ")");
  } else {
    check(num_classes >= -1, op, ": num_classes must be -1 (infer) or non-negative, got ", num_classes);
    const std::int64_t lowest = *std::min_element(classes.begin(), classes.end());
    const std::int64_t highest = *std::max_element(classes.begin(), classes.end());
    check(lowest >= 0, op, ": class values must be non-negative, got ", lowest);
    if (num_classes == -1) num_classes = add_or_fail(highest, 1, "one_hot");
    check(highest < num_classes, op, ": class values must be smaller than num_classes (", num_classes, "), got ",
          highest);
  }
  Shape out_sizes = self.sizes();
  out_sizes.push_back(num_classes);
  Tensor out = zeros(out_sizes, DType::Int64);
  std::int64_t* dst = out.data_ptr<std::int64_t>();
  for (std::size_t k = 0; k < classes.size(); ++k) dst[static_cast<std::int64_t>(k) * num_classes + classes[k]] = 1;
  return out;
}

// ------------------------------------------------ scatter_reduce, index_reduce ---

namespace {

enum class Reduction { Sum, Prod, Mean, Amax, Amin };

Reduction reduction_named(const std::string& reduce, const char* op, bool sum_allowed) {
  if (reduce == "sum" && sum_allowed) return Reduction::Sum;
  if (reduce == "prod") return Reduction::Prod;
  if (reduce == "mean") return Reduction::Mean;
  if (reduce == "amax") return Reduction::Amax;
  if (reduce == "amin") return Reduction::Amin;
  fail(concat(op, ": reduce argument must be one of ", sum_allowed ? "sum, " : "", "prod, mean, amax, amin, got ",
              reduce));
}

// The value a target starts from when include_self is false (ATen's identities).
template <class T>
T reduction_identity(Reduction reduction) {
  switch (reduction) {
    case Reduction::Prod: return T(1);
    case Reduction::Amax:
      if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
      else return std::numeric_limits<T>::lowest();
    case Reduction::Amin:
      if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
      else return std::numeric_limits<T>::max();
    default: return T(0);
  }
}

// One step of the reduction, as ATen's CPU scatter kernels take it: amax and amin
// propagate NaN (a NaN src wins, and a NaN target stays).
template <class T>
T reduced(Reduction reduction, T target, T value) {
  switch (reduction) {
    case Reduction::Prod: return multiplied(target, value);
    case Reduction::Amax:
      if constexpr (std::is_floating_point_v<T>) if (std::isnan(value)) return value;
      return target < value ? value : target;
    case Reduction::Amin:
      if constexpr (std::is_floating_point_v<T>) if (std::isnan(value)) return value;
      return value < target ? value : target;
    default: return accumulated(target, value);
  }
}

// out = self, then each pair (target offset, value) that `visit` gives is reduced
// into out[target]. Without include_self, a target that receives a value starts
// from the identity instead of self; a target that receives none keeps self.
// mean divides each target by its count (of values, plus one for self when
// included): floor division for int64, as ATen.
template <class T, class Visit>
void reduce_into(Tensor& out, Reduction reduction, bool include_self, Visit visit) {
  T* dst = out.data_ptr<T>();
  std::vector<std::int64_t> count(static_cast<std::size_t>(out.numel()), 0);
  visit([&](std::int64_t target, T) { ++count[static_cast<std::size_t>(target)]; });
  if (!include_self)
    for (std::size_t t = 0; t < count.size(); ++t)
      if (count[t] > 0) dst[t] = reduction_identity<T>(reduction);
  visit([&](std::int64_t target, T value) { dst[target] = reduced(reduction, dst[target], value); });
  if (reduction != Reduction::Mean) return;
  for (std::size_t t = 0; t < count.size(); ++t) {
    const std::int64_t n = count[t] + (include_self ? 1 : 0);
    if (count[t] == 0 || n == 0) continue;
    if constexpr (std::is_floating_point_v<T>) {
      dst[t] = dst[t] / static_cast<T>(n);
    } else {
      const T quotient = dst[t] / n;
      dst[t] = (dst[t] % n != 0 && dst[t] < 0) ? quotient - 1 : quotient;
    }
  }
}

}  // namespace

Tensor scatter_reduce(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self) {
  const char* op = "scatter_reduce";
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  check_defined(src, op, "src");
  check_same_dtype(self, src, op, "src");
  const Reduction reduction = reduction_named(reduce, op, /*sum_allowed=*/true);
  check(!is_complex(self.dtype()) && self.dtype() != DType::Bool, op, ": not implemented for ",
        dtype_name(self.dtype()));
  if (needs_conversion(self, index))
    return kernel::rounded_to(scatter_reduce(kernel::to_opmath(self), dim, as_int64_index(index),
                                             kernel::to_opmath(src), reduce, include_self),
                              self.dtype());
  const std::int64_t d = wrap_dim(dim, self.dim(), op);
  Tensor out = self.clone();  // contiguous: its offsets index the counts of reduce_into
  if (index.numel() == 0) return out;
  check_index_dtype(index, op);
  check_gather_scatter_shapes(self, d, index, &src, op);
  const Tensor out1 = as_nonempty(out), index1 = as_nonempty(index), src1 = as_nonempty(src);
  const std::int64_t size = out1.size(d), stride = out1.stride(d);
  const std::int64_t* idx = index.data_ptr<std::int64_t>();
  for_each_offsets<1>(index1.sizes(), {index1.strides()},
                      [&](const auto& o) { checked_index(idx[o[0]], size, d, op, /*wrap=*/false); });
  kernel::dispatch(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* source = src.data_ptr<T>();
      reduce_into<T>(out, reduction, include_self, [&](auto&& each) {
        for_each_offsets<3>(index1.sizes(), {index1.strides(), without_dim(out1.strides(), d), src1.strides()},
                            [&](const auto& o) { each(o[1] + idx[o[0]] * stride, source[o[2]]); });
      });
    }
  }, op);
  return out;
}

Tensor index_reduce(const Tensor& self, std::int64_t dim, const Tensor& index, const Tensor& source,
                    const std::string& reduce, bool include_self) {
  const char* op = "index_reduce";
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  check_defined(source, op, "source");
  check_same_dtype(self, source, op, "source");
  check_index_dtype(index, op);
  const Reduction reduction = reduction_named(reduce, op, /*sum_allowed=*/false);
  check(is_floating_point(self.dtype()), op, ": not implemented for ", dtype_name(self.dtype()));
  if (needs_conversion(self, index))
    return kernel::rounded_to(index_reduce(kernel::to_opmath(self), dim, as_int64_index(index),
                                           kernel::to_opmath(source), reduce, include_self),
                              self.dtype());
  check(index.dim() <= 1, op, ": index must be 0-d or 1-d, got shape ", shape_text(index.sizes()));
  const std::int64_t d = wrap_dim(dim, self.dim(), op);
  const Tensor self1 = as_nonempty(self), source1 = as_nonempty(source);
  bool shapes_match = as_nonempty(source).dim() == self1.dim();
  for (std::int64_t i = 0; shapes_match && i < self1.dim(); ++i)
    shapes_match = i == d || source1.size(i) == self1.size(i);
  check(shapes_match, op, ": source shape ", shape_text(source.sizes()), " must match self shape ",
        shape_text(self.sizes()), " except at dimension ", d);
  check(source1.size(d) == index.numel(), op, ": the number of indices (", index.numel(),
        ") must equal source.size(", d, ") (", source1.size(d), ")");
  Tensor out = self.clone();  // contiguous: its offsets index the counts of reduce_into
  if (index.numel() == 0 || self.numel() == 0) return out;
  const std::vector<std::int64_t> idx = checked_indices(index, self1.size(d), d, op, /*wrap=*/false);
  const Tensor out1 = as_nonempty(out);
  const std::int64_t stride = out1.stride(d);
  kernel::dispatch_floating(self.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = source.data_ptr<T>();
    reduce_into<T>(out, reduction, include_self, [&](auto&& each) {
      for_each_offsets<3>(source1.sizes(),
                          {source1.strides(), without_dim(out1.strides(), d), only_dim(source1.sizes().size(), d, 1)},
                          [&](const auto& o) { each(o[1] + idx[static_cast<std::size_t>(o[2])] * stride, src[o[0]]); });
    });
  });
  return out;
}

}  // namespace refgrad
