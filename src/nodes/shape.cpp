// Shape nodes: views (view, reshape, transpose, permute, expand, squeeze,
// unsqueeze, select, slice, as_strided, unfold) and the ops that move elements
// without arithmetic (cat, stack, split, unbind, repeat, constant_pad_nd, flip,
// tril, triu).
//
// PyTorch saves dims as the user passed them (negative dims stay negative), so
// every formula wraps them, as FunctionsManual does.
#include <algorithm>
#include <limits>
#include <numeric>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

using std::int64_t;

int64_t ndim_of(const IntList& sizes) { return static_cast<int64_t>(sizes.size()); }

// PyTorch's generated nodes run a formula only when some incoming grad is
// defined (any_grad_defined); the multi-output nodes check it here.
bool any_grad_defined(const Grads& grads) {
  return std::any_of(grads.begin(), grads.end(), [](const auto& g) { return g.has_value(); });
}

// An int64 index tensor [first, first + step, ...] of `count` entries, whose
// last entry, first + step * (count - 1), is an index of a real dim (so
// nothing overflows on the way there).
Tensor strided_indices(int64_t first, int64_t step, int64_t count) {
  if (count == 0) return zeros({0}, DType::Int64);
  return arange(Scalar(first), Scalar(first + step * (count - 1) + 1), Scalar(step), DType::Int64);
}

// ------------------------------------------------- FunctionsManual helpers ---

// permute_backwards: grad permuted by the inverse of the forward's dims.
Tensor permute_backwards(const Tensor& grad, const IntList& fwd_dims) {
  const int64_t ndims = ndim_of(fwd_dims);
  IntList dims(fwd_dims.size(), -1);
  for (int64_t i = 0; i < ndims; ++i) {
    const int64_t dim = wrap_dim(fwd_dims[i], ndims, "PermuteBackward0");
    check(dims[dim] == -1, "PermuteBackward0: dims ", shape_text(fwd_dims), " name dim ", dim,
          " twice (permute() allows no duplicate dims)");
    dims[dim] = i;
  }
  return permute(grad, dims);
}

// The dims of `sizes` a squeeze may have removed, as at::dim_list_to_bitset
// marks them: `dims` wrapped, each at most once (a 0-d input accepts 0 and -1).
std::vector<bool> squeezable_dims(const IntList& dims, const IntList& sizes, const char* node) {
  std::vector<bool> squeezable(std::max<std::size_t>(sizes.size(), 1), false);
  for (int64_t dim : dims) {
    const auto d = static_cast<std::size_t>(wrap_saved_dim(node, "dim", dim, "self_sym_sizes", sizes));
    check(!squeezable[d], node, ": dim ", shape_text(dims), " names dim ", d, " more than once");
    squeezable[d] = true;
  }
  squeezable.resize(sizes.size());
  return squeezable;
}

// unsqueeze_to(grad, sizes) and unsqueeze_to(grad, dims, sizes): puts back the
// size-1 dims of `sizes` that the squeeze removed (every size-1 dim for
// squeeze(), those among `dims` for squeeze.dim and squeeze.dims). The grad
// must be the squeezed input.
Tensor unsqueeze_to(const Tensor& grad, const std::vector<bool>& squeezable, const IntList& sizes, const char* node) {
  Shape squeezed;
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (!(squeezable[d] && sizes[d] == 1)) squeezed.push_back(sizes[d]);
  check(grad.sizes() == squeezed, node, ": grad of shape ", shape_text(grad.sizes()),
        " is not the squeezed input of shape ", shape_text(sizes));
  Tensor result = grad;
  for (int64_t dim = 0; dim < ndim_of(sizes); ++dim)
    if (squeezable[dim] && sizes[dim] == 1) result = unsqueeze(result, dim);
  return result;
}

// zeros(input_sizes) with `grad` added at `index` along `dim`: what PyTorch
// does by copying into a view of zeros (select_backward, slice_backward).
Tensor scatter_into_zeros(const Tensor& grad, const IntList& input_sizes, int64_t dim, const Tensor& index,
                          const char* node) {
  Shape expected = input_sizes;
  expected[dim] = index.numel();
  check(grad.sizes() == expected, node, ": grad has shape ", shape_text(grad.sizes()), ", expected ", shape_text(expected),
        " for an input of shape ", shape_text(input_sizes));
  return index_add(zeros(input_sizes, grad.dtype()), dim, index, grad);
}

// select_backward(grad, input_sizes, dim, index)
Tensor select_backward(const Tensor& grad, const IntList& input_sizes, int64_t dim, int64_t index) {
  check(!input_sizes.empty(), "SelectBackward0: self_sym_sizes is [], and select() cannot be applied to a 0-dim tensor");
  check_sizes("SelectBackward0", "self_sym_sizes", input_sizes);
  dim = wrap_saved_dim("SelectBackward0", "dim", dim, "self_sym_sizes", input_sizes);
  const int64_t size = input_sizes[dim];
  check(index >= -size && index < size, "SelectBackward0: index ", index, " is out of range for dim ", dim,
        " of size ", size, " (input shape ", shape_text(input_sizes), ")");
  if (index < 0) index += size;
  return scatter_into_zeros(unsqueeze(grad, dim), input_sizes, dim, strided_indices(index, 1, 1),
                            "SelectBackward0");
}

// slice_backward_wrapper(grad, input_sizes, dim, start, end, step): start and
// end are clamped to the dim as the forward slice clamped them.
Tensor slice_backward_wrapper(const Tensor& grad, const IntList& input_sizes, int64_t dim,
                              std::optional<int64_t> start, std::optional<int64_t> end, int64_t step,
                              const char* node = "SliceBackward0") {
  check(!input_sizes.empty(), node, ": self_sym_sizes is [], and slice() cannot be applied to a 0-dim tensor");
  dim = wrap_saved_dim(node, "dim", dim, "self_sym_sizes", input_sizes);
  check(step > 0, node, ": step must be positive, got ", step);
  check_sizes(node, "self_sym_sizes", input_sizes);
  const int64_t size = input_sizes[dim];
  int64_t start_val = start.value_or(0);
  int64_t end_val = end.value_or(std::numeric_limits<int64_t>::max());
  if (start_val < 0) start_val += size;
  if (end_val < 0) end_val += size;
  start_val = std::clamp<int64_t>(start_val, 0, size);
  end_val = std::clamp<int64_t>(end_val, start_val, size);
  const int64_t count = end_val == start_val ? 0 : (end_val - start_val - 1) / step + 1;
  return scatter_into_zeros(grad, input_sizes, dim, strided_indices(start_val, step, count), node);
}

// split_with_sizes_backward(grads, split_sizes, dim, sizes, options): an
// undefined grad becomes zeros of its piece's shape, then the pieces are cat.
// `split_field` names the saved field the split sizes come from.
Tensor split_with_sizes_backward(const Grads& grads, const IntList& split_sizes, int64_t dim, const IntList& sizes,
                                 const TensorOptions& options, const char* node, const char* split_field) {
  check(!sizes.empty(), node, ": self_sym_sizes is [], and split expects at least a 1-dimensional tensor");
  dim = wrap_saved_dim(node, "dim", dim, "self_sym_sizes", sizes);
  check_sizes(node, "self_sym_sizes", sizes);
  check(grads.size() == split_sizes.size(), node, ": ", grads.size(), " incoming grads for ", split_sizes.size(),
        " pieces (input shape ", shape_text(sizes), ")");
  int64_t total = 0;
  for (int64_t split_size : split_sizes) {
    check(split_size >= 0 && split_size <= sizes[dim] - total, node, ": ", split_field, " ", shape_text(split_sizes),
          " do not split dim ", dim, " of self_sym_sizes ", shape_text(sizes));
    total += split_size;
  }
  check(total == sizes[dim], node, ": ", split_field, " ", shape_text(split_sizes), " do not split dim ", dim,
        " of self_sym_sizes ", shape_text(sizes));
  TensorList pieces;
  for (std::size_t j = 0; j < grads.size(); ++j) {
    if (grads[j]) {
      pieces.push_back(*grads[j]);
    } else {
      Shape piece_sizes = sizes;
      piece_sizes[dim] = split_sizes[j];
      pieces.push_back(zeros(piece_sizes, options.dtype.value_or(default_dtype())));
    }
  }
  Tensor result = cat(pieces, dim);
  check(result.sizes() == sizes, node, ": the grads make a tensor of shape ", shape_text(result.sizes()),
        ", the input had shape ", shape_text(sizes));
  return result;
}

// split_backward: the pieces have split_size along dim, the last one the rest.
Tensor split_backward(const Grads& grads, int64_t split_size, int64_t dim, const IntList& sizes,
                      const TensorOptions& options, const char* node = "SplitBackward0") {
  check(!sizes.empty(), node, ": self_sym_sizes is [], and split expects at least a 1-dimensional tensor");
  dim = wrap_saved_dim(node, "dim", dim, "self_sym_sizes", sizes);
  check_sizes(node, "self_sym_sizes", sizes);
  const auto num_splits = static_cast<int64_t>(grads.size());
  IntList split_sizes(grads.size(), split_size);
  if (num_splits > 0) {
    int64_t before_last = 0;  // the pieces before the last, split_size each
    check(split_size >= 0 && !__builtin_mul_overflow(split_size, num_splits - 1, &before_last) &&
              before_last <= sizes[dim],
          node, ": ", num_splits, " pieces of split_size ", split_size, " do not fit dim ", dim,
          " of self_sym_sizes ", shape_text(sizes));
    split_sizes.back() = sizes[dim] - before_last;
  }
  return split_with_sizes_backward(grads, split_sizes, dim, sizes, options, node, "split sizes");
}

// repeat_backward(grad, repeats, input_shape): sums the copies. The leading
// dims repeat added are summed away; every other dim is split into
// (repeat, size) and the repeat part summed.
Tensor repeat_backward(const Tensor& grad, const IntList& repeats, const IntList& input_shape) {
  check(repeats.size() >= input_shape.size() && grad.dim() == ndim_of(repeats), "RepeatBackward0: repeats ",
        shape_text(repeats), " do not fit an input of shape ", shape_text(input_shape), " and a grad of shape ",
        shape_text(grad.sizes()));
  check(std::all_of(repeats.begin(), repeats.end(), [](int64_t r) { return r >= 0; }), "RepeatBackward0: repeats ",
        shape_text(repeats), " has a negative entry");
  check_sizes("RepeatBackward0", "self_sym_sizes", input_shape);
  if (std::find(repeats.begin(), repeats.end(), 0) != repeats.end()) return zeros(input_shape, grad.dtype());
  const int64_t num_unsqueezed = ndim_of(repeats) - ndim_of(input_shape);
  // repeat's output: the leading repeats, then each input size times its repeat.
  bool fits = true;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    int64_t size = repeats[d];
    if (d >= num_unsqueezed) fits = fits && !__builtin_mul_overflow(size, input_shape[d - num_unsqueezed], &size);
    fits = fits && size == grad.size(d);
  }
  check(fits, "RepeatBackward0: grad of shape ", shape_text(grad.sizes()), " is not input shape ",
        shape_text(input_shape), " repeated ", shape_text(repeats));
  // Nothing to sum; and the split shape below need not be countable then ([1, 2, INT64_MAX, 0]).
  if (grad.numel() == 0) return zeros(input_shape, grad.dtype());
  Shape grad_size;
  IntList sum_dims;
  for (int64_t i = 0; i < num_unsqueezed; ++i) {
    grad_size.push_back(repeats[i]);
    sum_dims.push_back(i);
  }
  for (int64_t dim = 0; dim < ndim_of(input_shape); ++dim) {
    grad_size.push_back(repeats[dim + num_unsqueezed]);
    sum_dims.push_back(ndim_of(grad_size) - 1);
    grad_size.push_back(input_shape[dim]);
  }
  return sum(reshape(grad, grad_size), sum_dims);
}

// constant_pad_nd_backward(grad, pad): padding by the negated pads crops.
Tensor constant_pad_nd_backward(const Tensor& grad, const IntList& pad) {
  check(pad.size() % 2 == 0 && ndim_of(pad) / 2 <= grad.dim(), "ConstantPadNdBackward0: pad ", shape_text(pad),
        " is not (before, after) pairs for the dims of a grad of shape ", shape_text(grad.sizes()));
  check(std::find(pad.begin(), pad.end(), std::numeric_limits<int64_t>::min()) == pad.end(),
        "ConstantPadNdBackward0: pad ", shape_text(pad), " has an entry that cannot be negated in int64");
  // Pairs run from the last dim backwards; each dim of the grad is its input's padded.
  for (std::size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t size = grad.sizes()[grad.sizes().size() - 1 - k];
    int64_t input_size = 0;
    check(!__builtin_sub_overflow(size, pad[2 * k], &input_size) &&
              !__builtin_sub_overflow(input_size, pad[2 * k + 1], &input_size) && input_size >= 0,
          "ConstantPadNdBackward0: pad ", shape_text(pad), " does not fit a grad of shape ", shape_text(grad.sizes()));
  }
  IntList negated_pad(pad.size());
  std::transform(pad.begin(), pad.end(), negated_pad.begin(), [](int64_t p) { return -p; });
  return constant_pad_nd(grad, negated_pad, 0);
}

// unfold_backward(grad, input_sizes, dim, size, step): window k of the
// forward covers input positions k*step .. k*step+size-1 along dim, so each
// grad element is added at its position. grad's dims are the input's, with
// dim holding the windows and a last dim the position in the window; that
// last dim is moved next to dim and merged with it, and one index_add adds
// everything.
Tensor unfold_backward(const Tensor& grad, const IntList& input_sizes, int64_t dim, int64_t size, int64_t step) {
  const char* node = "UnfoldBackward0";
  const int64_t ndim = ndim_of(input_sizes);
  dim = wrap_saved_dim(node, "dimension", dim, "self_sym_sizes", input_sizes);
  check_sizes(node, "self_sym_sizes", input_sizes);
  check(step > 0, node, ": step is ", step, " but must be > 0");
  const int64_t dim_size = ndim == 0 ? 1 : input_sizes[dim];  // a 0-d input unfolds as one element
  check(size >= 0 && size <= dim_size, node, ": size ", size, " does not fit dim ", dim, " of self_sym_sizes ",
        shape_text(input_sizes));
  // The forward's output: the input's dims, dim holding the windows, and a last dim of `size`.
  Shape unfolded = input_sizes;
  if (ndim > 0) unfolded[dim] = (dim_size - size) / step + 1;
  unfolded.push_back(size);
  check(grad.sizes() == unfolded, node, ": grad of shape ", shape_text(grad.sizes()), " does not fit windows of size ",
        size, " over an input of shape ", shape_text(input_sizes));
  if (grad.numel() == 0) return zeros(input_sizes, grad.dtype());
  if (ndim == 0) return reshape(grad, {});
  const int64_t windows = grad.size(dim);
  IntList order;
  for (int64_t d = 0; d < ndim; ++d) {
    order.push_back(d);
    if (d == dim) order.push_back(ndim);
  }
  Shape merged = input_sizes;
  merged[dim] = windows * size;
  const Tensor flat_grad = reshape(permute(grad, order), merged);
  IntList positions;
  for (int64_t k = 0; k < windows; ++k)
    for (int64_t j = 0; j < size; ++j) positions.push_back(k * step + j);
  const Tensor index = from_vector(positions, {ndim_of(positions)});
  return scatter_into_zeros(flat_grad, input_sizes, dim, index, "UnfoldBackward0");
}

// A geometry AsStridedBackward0 works with: one stride per size, no negative
// size, stride or offset (ATen's as_strided refuses negative strides; a
// tensor's geometry has none).
void check_geometry(const IntList& sizes, const IntList& strides, int64_t storage_offset, const char* what) {
  const auto negative = [](int64_t v) { return v < 0; };
  check(sizes.size() == strides.size() && std::none_of(sizes.begin(), sizes.end(), negative) &&
            std::none_of(strides.begin(), strides.end(), negative) && storage_offset >= 0,
        "AsStridedBackward0: ", what, " (sizes ", shape_text(sizes), ", strides ", shape_text(strides),
        ", storage offset ", storage_offset, ") is not a geometry of non-negative sizes, strides and offset");
}

// _maybe_overlapping_memory: whether a strided geometry (sizes > 1) may
// address one element twice (false means it certainly does not).
bool maybe_overlapping_memory(const IntList& sizes, const IntList& strides) {
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return strides[a] < strides[b]; });
  int64_t max_index_in_slice = 0;
  for (std::size_t i : order) {
    if (strides[i] <= max_index_in_slice) return true;
    max_index_in_slice = add_or_fail(max_index_in_slice, multiply_or_fail(strides[i], sizes[i] - 1, "AsStridedBackward0"),
                                     "AsStridedBackward0");
  }
  return false;
}

// _min_storage_size: the storage a geometry (`what`, for the error) needs.
int64_t min_storage_size(const IntList& sizes, const IntList& strides, int64_t storage_offset, const char* what) {
  int64_t storage_size = 0, extent = 0;
  bool overflow = __builtin_add_overflow(storage_offset, 1, &storage_size);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return storage_offset;
    overflow = overflow || __builtin_mul_overflow(sizes[i] - 1, strides[i], &extent) ||
               __builtin_add_overflow(storage_size, extent, &storage_size);
  }
  check(!overflow, "AsStridedBackward0: ", what, " (sizes ", shape_text(sizes), ", strides ", shape_text(strides),
        ", storage offset ", storage_offset, ") addresses more storage than int64 can count");
  return storage_size;
}

// as_strided_backward(grad, input_geometry, sizes, strides, storage_offset),
// FunctionsManual's algorithm: scatter grad into a zero storage through the
// output's geometry (adding where the output overlaps itself), divide each
// storage element by the number of times the input's geometry reads it, and
// view the storage with the input's geometry. PyTorch copies when the output
// cannot overlap; an index_add into zeros is the same then.
Tensor as_strided_backward(Tensor grad, const TensorGeometry& input_geometry, const IntList& sizes,
                           const IntList& strides, std::optional<int64_t> storage_offset_) {
  check(ndim_of(sizes) == grad.dim() && sizes.size() == strides.size() && grad.sizes() == sizes,
        "AsStridedBackward0: grad of shape ", shape_text(grad.sizes()), " does not fit the view's size ", shape_text(sizes),
        " and stride ", shape_text(strides));
  check_geometry(input_geometry.sizes, input_geometry.strides, input_geometry.storage_offset, "self_geometry");
  check_sizes("AsStridedBackward0", "self_geometry", input_geometry.sizes);
  check_geometry(sizes, strides, storage_offset_.value_or(0), "the view (size, stride, storage_offset)");
  const int64_t storage_offset = storage_offset_.value_or(input_geometry.storage_offset);
  const Shape& input_sizes = input_geometry.sizes;
  // The output's geometry without size-1 dims, with its expanded (stride 0) dims summed away.
  IntList out_sizes, out_strides;
  for (int64_t i = grad.dim() - 1; i >= 0; --i) {
    if (sizes[i] == 0) return zeros(input_sizes, grad.dtype());
    if (sizes[i] == 1) {
      grad = squeeze(grad, i);
    } else if (strides[i] == 0) {
      grad = sum(grad, IntList{i});
    } else {
      out_sizes.insert(out_sizes.begin(), sizes[i]);
      out_strides.insert(out_strides.begin(), strides[i]);
    }
  }
  IntList inp_sizes, inp_strides;
  for (int64_t i = static_cast<int64_t>(input_sizes.size()) - 1; i >= 0; --i) {
    if (input_sizes[i] == 0) return zeros(input_sizes, grad.dtype());
    if (input_sizes[i] != 1) {
      inp_sizes.insert(inp_sizes.begin(), input_sizes[i]);
      inp_strides.insert(inp_strides.begin(), input_geometry.strides[i]);
    }
  }
  const int64_t shared_offset = std::min(input_geometry.storage_offset, storage_offset);
  const int64_t inp_effective_offset = input_geometry.storage_offset - shared_offset;
  const int64_t out_effective_offset = storage_offset - shared_offset;
  const int64_t base_size = std::max(min_storage_size(inp_sizes, inp_strides, inp_effective_offset, "self_geometry"),
                                     min_storage_size(out_sizes, out_strides, out_effective_offset, "the view"));
  const Tensor flatten_full_indices = arange(Scalar(base_size), DType::Int64);
  const Tensor out_indices =
      reshape(as_strided(flatten_full_indices, out_sizes, out_strides, out_effective_offset), {-1});
  Tensor storage = index_add(zeros({base_size}, grad.dtype()), 0, out_indices, reshape(grad, {-1}));
  if (maybe_overlapping_memory(inp_sizes, inp_strides)) {
    // Divides by how often each element is read: 0/0 = nan outside the input's view, never read.
    const Tensor inp_indices =
        reshape(as_strided(flatten_full_indices, inp_sizes, inp_strides, inp_effective_offset), {-1});
    const Tensor count =
        index_add(zeros({base_size}, grad.dtype()), 0, inp_indices, ones({inp_indices.numel()}, grad.dtype()));
    storage = div(storage, count);
  }
  return as_strided(storage, input_sizes, input_geometry.strides, inp_effective_offset);
}

// ------------------------------------------------------------------ nodes ---

// ViewBackward0 — view(Tensor(a) self, SymInt[] size)
// UnsafeViewBackward0 — _unsafe_view(Tensor self, SymInt[] size)
// ReshapeAliasBackward0 — _reshape_alias(Tensor(a) self, SymInt[] size, SymInt[] stride)
//   self: grad.reshape_symint(self.sym_sizes())
// reshape() gives ViewBackward0 when the input can be viewed, else
// CloneBackward0 then UnsafeViewBackward0.
struct ReshapeToSelfSaved {
  IntList self_sym_sizes;
};

Grads ReshapeToSelf(const Grads& grads, const ReshapeToSelfSaved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  // Three nodes share this formula: call_node and the interpreter put the node's name in front.
  check_sizes("reshape", "self_sym_sizes", saved.self_sym_sizes);
  return Grads{reshape(*grads[0], saved.self_sym_sizes)};
}

// TBackward0 — t(Tensor(a) self)
//   self: grad.t()
struct TBackward0Saved {};

Grads TBackward0(const Grads& grads, const TBackward0Saved& /*saved*/, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{t(*grads[0])};
}

// ------------------------------------------------------------- diagonals ---

// The view self.diagonal(offset, dim1, dim2) of a contiguous tensor of `sizes`, as ATen's diagonal makes
// it: dim1 and dim2 dropped, one last dim as long as the diagonal, whose stride is the sum of theirs,
// starting `offset` steps along dim2 (offset >= 0) or -offset steps along dim1.
struct DiagonalView {
  Shape sizes;
  Shape strides;
  std::int64_t storage_offset = 0;
};

DiagonalView diagonal_view(const char* node, const IntList& sizes, std::int64_t offset, std::int64_t dim1,
                           std::int64_t dim2) {
  check(sizes.size() >= 2, node, ": diagonal needs a tensor of at least 2 dims, got sizes ", shape_text(sizes));
  const std::int64_t ndim = static_cast<std::int64_t>(sizes.size());
  const std::int64_t d1 = wrap_dim(dim1, ndim, node), d2 = wrap_dim(dim2, ndim, node);
  check(d1 != d2, node, ": diagonal dimensions cannot be identical ", dim1, ", ", dim2);
  check(offset > std::numeric_limits<std::int64_t>::min() / 2 && offset < std::numeric_limits<std::int64_t>::max() / 2,
        node, ": offset ", offset, " is out of range");
  const Shape strides = contiguous_strides(sizes);
  const std::int64_t length = offset >= 0 ? std::max<std::int64_t>(std::min(sizes[d1], sizes[d2] - offset), 0)
                                          : std::max<std::int64_t>(std::min(sizes[d1] + offset, sizes[d2]), 0);
  DiagonalView view;
  if (length > 0) view.storage_offset = offset >= 0 ? offset * strides[d2] : -offset * strides[d1];
  for (std::int64_t d = 0; d < ndim; ++d) {
    if (d == d1 || d == d2) continue;
    view.sizes.push_back(sizes[d]);
    view.strides.push_back(strides[d]);
  }
  view.sizes.push_back(length);
  view.strides.push_back(strides[d1] + strides[d2]);
  return view;
}

// self.diagonal(offset, dim1, dim2), of a contiguous copy of self.
Tensor diagonal(const char* node, const Tensor& self, std::int64_t offset, std::int64_t dim1, std::int64_t dim2) {
  const DiagonalView view = diagonal_view(node, self.sizes(), offset, dim1, dim2);
  return as_strided(contiguous(self), view.sizes, view.strides, view.storage_offset);
}

// FunctionsManual's diagonal_backward: zeros of the input's sizes with grad written along the diagonal
// (the positions of the diagonal in the flattened input, read off an arange viewed as the diagonal).
Tensor diagonal_backward(const char* node, const Tensor& grad, const IntList& sizes, std::int64_t offset,
                         std::int64_t dim1, std::int64_t dim2) {
  check_sizes(node, "self_sym_sizes", sizes);
  const DiagonalView view = diagonal_view(node, sizes, offset, dim1, dim2);
  check(grad.sizes() == view.sizes, node, ": grad has shape ", shape_text(grad.sizes()), " but the diagonal of ",
        shape_text(sizes), " (offset ", offset, ", dims ", dim1, ", ", dim2, ") has shape ", shape_text(view.sizes));
  const std::int64_t numel = numel_of(sizes);
  const Tensor positions = as_strided(arange(numel), view.sizes, view.strides, view.storage_offset);
  const Tensor flat = index_put(zeros({numel}, grad.dtype()), {reshape(contiguous(positions), {-1})},
                                reshape(contiguous(grad), {-1}));
  return reshape(flat, sizes);
}

// DiagonalBackward0 — diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1)
//   self: diagonal_backward_symint(grad, self.sym_sizes(), offset, dim1, dim2)
struct DiagonalBackward0Saved {
  std::int64_t dim1;
  std::int64_t dim2;
  std::int64_t offset;
  IntList self_sym_sizes;
};

Grads DiagonalBackward0(const Grads& grads, const DiagonalBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{diagonal_backward("DiagonalBackward0", *grads[0], saved.self_sym_sizes, saved.offset, saved.dim1,
                                 saved.dim2)};
}

// TraceBackward0 — trace(Tensor self)
//   self: trace_backward_symint(grad, self.sym_sizes())
// trace_backward: zeros of the matrix's sizes with the 0-d grad along the main diagonal.
struct TraceBackward0Saved {
  IntList self_sym_sizes;
};

Grads TraceBackward0(const Grads& grads, const TraceBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check(saved.self_sym_sizes.size() == 2, "TraceBackward0: trace of a matrix, but self_sym_sizes is ",
        shape_text(saved.self_sym_sizes));
  check((*grads[0]).dim() == 0, "TraceBackward0: grad has shape ", shape_text((*grads[0]).sizes()),
        " but trace is 0-d");
  check_sizes("TraceBackward0", "self_sym_sizes", saved.self_sym_sizes);
  const std::int64_t length = std::min(saved.self_sym_sizes[0], saved.self_sym_sizes[1]);
  return Grads{diagonal_backward("TraceBackward0", expand(*grads[0], {length}), saved.self_sym_sizes, 0, 0, 1)};
}

// DiagEmbedBackward0 — diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1)
//   self: grad.diagonal(offset, dim1, dim2)
struct DiagEmbedBackward0Saved {
  std::int64_t dim1;
  std::int64_t dim2;
  std::int64_t offset;
};

Grads DiagEmbedBackward0(const Grads& grads, const DiagEmbedBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{diagonal("DiagEmbedBackward0", *grads[0], saved.offset, saved.dim1, saved.dim2)};
}

// ------------------------------------------------------------------ roll ---

// t rolled back by `shift` along dim: element i moves to i - shift (mod the dim's size), as
// roll(t, -shift, dim) does. The two pieces, cut where the roll wraps, are put back in the other order.
Tensor roll_back(const Tensor& t, std::int64_t shift, std::int64_t dim) {
  const std::int64_t n = t.size(dim);
  if (n == 0) return t;
  const std::int64_t forward = ((shift % n) + n) % n;  // no negation: shift may be INT64_MIN
  const std::int64_t back = (n - forward) % n;         // rolling by -shift is rolling by n - forward
  if (back == 0) return t;
  return cat({narrow(t, dim, n - back, back), narrow(t, dim, 0, n - back)}, dim);
}

// RollBackward0 — roll(Tensor self, SymInt[1] shifts, int[1] dims=[])
//   self: grad.roll_symint(fmap(reverse_list_symint(shifts), [](c10::SymInt i){return -i;}), reverse_list(dims))
// Each roll is undone in the reverse order (rolls along different dims commute, so the order only
// matters for reading the formula). Without dims, the flattened tensor was rolled.
struct RollBackward0Saved {
  IntList dims;
  IntList shifts;
};

Grads RollBackward0(const Grads& grads, const RollBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  if (saved.dims.empty()) {
    check(saved.shifts.size() == 1, "RollBackward0: without dims, roll takes one shift, got shifts ",
          shape_text(saved.shifts));
    return Grads{reshape(roll_back(reshape(contiguous(grad), {-1}), saved.shifts[0], 0), grad.sizes())};
  }
  check(saved.shifts.size() == saved.dims.size(), "RollBackward0: shifts ", shape_text(saved.shifts), " and dims ",
        shape_text(saved.dims), " differ in length");
  Tensor result = grad;
  for (std::size_t i = saved.dims.size(); i-- > 0;) {
    const std::int64_t dim = wrap_dim(saved.dims[i], grad.dim(), "RollBackward0");
    result = roll_back(result, saved.shifts[i], dim);
  }
  return Grads{result};
}

// --------------------------------------------------- pixel and channel shuffles ---

// r² for a shuffle factor r, checked: positive, and r² fits int64.
std::int64_t factor_squared(const char* node, const char* field, std::int64_t r) {
  std::int64_t squared = 0;
  check(r > 0 && !__builtin_mul_overflow(r, r, &squared), node, ": ", field, " ", r, " must be positive and its square "
        "must fit int64");
  return squared;
}

// ATen's pixel_shuffle: [*, C r², H, W] -> [*, C, H r, W r], each channel's r² values spread over an r x r
// block: reshape to [*, C, r, r, H, W], move the two r dims after H and W, reshape.
Tensor pixel_shuffle(const char* node, const char* field, const Tensor& self, std::int64_t r) {
  const std::int64_t squared = factor_squared(node, field, r);
  check(self.dim() >= 3, node, ": pixel_shuffle needs at least 3 dims, got shape ", shape_text(self.sizes()));
  const std::int64_t n = self.dim(), c = self.size(n - 3), h = self.size(n - 2), w = self.size(n - 1);
  check(c % squared == 0, node, ": the channels ", c, " of shape ", shape_text(self.sizes()),
        " are not divisible by ", field, "² ", squared);
  const Shape batch(self.sizes().begin(), self.sizes().end() - 3);
  Shape split = batch;
  for (std::int64_t size : {c / squared, r, r, h, w}) split.push_back(size);
  IntList order;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(batch.size()); ++d) order.push_back(d);
  const std::int64_t b = static_cast<std::int64_t>(batch.size());
  for (std::int64_t d : {b, b + 3, b + 1, b + 4, b + 2}) order.push_back(d);  // C, H, r, W, r
  std::int64_t height = 0, width = 0;
  check(!__builtin_mul_overflow(h, r, &height) && !__builtin_mul_overflow(w, r, &width), node, ": shape ",
        shape_text(self.sizes()), " shuffled by ", field, " ", r, " has more elements than int64 can count");
  Shape out = batch;
  for (std::int64_t size : {c / squared, height, width}) out.push_back(size);
  return reshape(contiguous(permute(reshape(self, split), order)), out);
}

// ATen's pixel_unshuffle, pixel_shuffle's inverse: [*, C, H r, W r] -> [*, C r², H, W].
Tensor pixel_unshuffle(const char* node, const char* field, const Tensor& self, std::int64_t r) {
  const std::int64_t squared = factor_squared(node, field, r);
  check(self.dim() >= 3, node, ": pixel_unshuffle needs at least 3 dims, got shape ", shape_text(self.sizes()));
  const std::int64_t n = self.dim(), c = self.size(n - 3), h = self.size(n - 2), w = self.size(n - 1);
  check(h % r == 0 && w % r == 0, node, ": the height and width of shape ", shape_text(self.sizes()),
        " are not divisible by ", field, " ", r);
  const Shape batch(self.sizes().begin(), self.sizes().end() - 3);
  Shape split = batch;
  for (std::int64_t size : {c, h / r, r, w / r, r}) split.push_back(size);
  IntList order;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(batch.size()); ++d) order.push_back(d);
  const std::int64_t b = static_cast<std::int64_t>(batch.size());
  for (std::int64_t d : {b, b + 2, b + 4, b + 1, b + 3}) order.push_back(d);  // C, r, r, H, W
  std::int64_t channels = 0;
  check(!__builtin_mul_overflow(c, squared, &channels), node, ": shape ", shape_text(self.sizes()),
        " unshuffled by ", field, " ", r, " has more channels than int64 can count");
  Shape out = batch;
  for (std::int64_t size : {channels, h / r, w / r}) out.push_back(size);
  return reshape(contiguous(permute(reshape(self, split), order)), out);
}

// PixelShuffleBackward0 — pixel_shuffle(Tensor self, int upscale_factor)
//   self: pixel_unshuffle(grad, upscale_factor)
struct PixelShuffleBackward0Saved {
  std::int64_t upscale_factor;
};

Grads PixelShuffleBackward0(const Grads& grads, const PixelShuffleBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{pixel_unshuffle("PixelShuffleBackward0", "upscale_factor", *grads[0], saved.upscale_factor)};
}

// PixelUnshuffleBackward0 — pixel_unshuffle(Tensor self, int downscale_factor)
//   self: pixel_shuffle(grad, downscale_factor)
struct PixelUnshuffleBackward0Saved {
  std::int64_t downscale_factor;
};

Grads PixelUnshuffleBackward0(const Grads& grads, const PixelUnshuffleBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{pixel_shuffle("PixelUnshuffleBackward0", "downscale_factor", *grads[0], saved.downscale_factor)};
}

// ChannelShuffleBackward0 — channel_shuffle(Tensor self, SymInt groups)
//   self: channel_shuffle_symint(grad, grad.sym_size(1) / groups)
// channel_shuffle(x, g): [N, C, *] viewed as [N, g, C / g, *], the two group dims swapped; shuffling
// with C / g groups undoes it.
struct ChannelShuffleBackward0Saved {
  std::int64_t groups;
};

Tensor channel_shuffle(const Tensor& self, std::int64_t groups) {
  Shape split = {self.size(0), groups, self.size(1) / groups};
  split.insert(split.end(), self.sizes().begin() + 2, self.sizes().end());
  return reshape(contiguous(transpose(reshape(self, split), 1, 2)), self.sizes());
}

Grads ChannelShuffleBackward0(const Grads& grads, const ChannelShuffleBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  check(grad.dim() >= 2, "ChannelShuffleBackward0: grad of shape ", shape_text(grad.sizes()), " has no channel dim");
  const std::int64_t channels = grad.size(1);
  check(saved.groups > 0 && channels % saved.groups == 0, "ChannelShuffleBackward0: groups ", saved.groups,
        " does not divide the ", channels, " channels");
  const std::int64_t per_group = channels / saved.groups;
  if (per_group == 0) return Grads{grad};  // no channels: nothing to move
  return Grads{channel_shuffle(grad, per_group)};
}

// TransposeBackward0 — transpose.int(Tensor(a) self, int dim0, int dim1)
//   self: grad.transpose(dim0, dim1)
struct TransposeBackward0Saved {
  int64_t dim0;
  int64_t dim1;
};

Grads TransposeBackward0(const Grads& grads, const TransposeBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{transpose(*grads[0], saved.dim0, saved.dim1)};
}

// PermuteBackward0 — permute(Tensor(a) self, int[] dims)
//   self: permute_backwards(grad, dims)
struct PermuteBackward0Saved {
  IntList dims;
};

Grads PermuteBackward0(const Grads& grads, const PermuteBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check(grads[0]->dim() == ndim_of(saved.dims), "PermuteBackward0: grad of shape ", shape_text(grads[0]->sizes()),
        " does not fit dims ", shape_text(saved.dims));
  return Grads{permute_backwards(*grads[0], saved.dims)};
}

// ExpandBackward0 — expand(Tensor(a) self, SymInt[] size, *, bool implicit=False)
//   self: at::sum_to(grad, self.sym_sizes())
struct ExpandBackward0Saved {
  IntList self_sym_sizes;
};

Grads ExpandBackward0(const Grads& grads, const ExpandBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{sum_to(*grads[0], saved.self_sym_sizes)};
}

// UnsqueezeBackward0 — unsqueeze(Tensor(a) self, int dim)
//   self: grad.squeeze(dim)
struct UnsqueezeBackward0Saved {
  int64_t dim;
};

Grads UnsqueezeBackward0(const Grads& grads, const UnsqueezeBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{squeeze(*grads[0], saved.dim)};
}

constexpr char kSqueezeBackward0[] = "SqueezeBackward0", kSqueezeBackward1[] = "SqueezeBackward1",
               kSqueezeBackward3[] = "SqueezeBackward3", kSqueezeBackward4[] = "SqueezeBackward4";

// SqueezeBackward0 — squeeze(Tensor(a) self)
//   self: unsqueeze_to(grad, self.sym_sizes())
struct SqueezeBackward0Saved {
  IntList self_sym_sizes;
};

// (SqueezeBackward3, squeeze_, shares it: `Node` is the name its errors give.)
template <const char* Node>
Grads SqueezeBackward0(const Grads& grads, const SqueezeBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const std::vector<bool> every_dim(saved.self_sym_sizes.size(), true);
  return Grads{unsqueeze_to(*grads[0], every_dim, saved.self_sym_sizes, Node)};
}

// SqueezeBackward1 — squeeze.dim(Tensor(a) self, int dim)
//   self: unsqueeze_to(grad, dim, self.sym_sizes())
struct SqueezeBackward1Saved {
  int64_t dim;
  IntList self_sym_sizes;
};

// (SqueezeBackward4, squeeze_.dim, shares it.)
template <const char* Node>
Grads SqueezeBackward1(const Grads& grads, const SqueezeBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{unsqueeze_to(*grads[0], squeezable_dims({saved.dim}, saved.self_sym_sizes, Node), saved.self_sym_sizes, Node)};
}

// SqueezeBackward2 — squeeze.dims(Tensor(a) self, int[] dim)
//   self: unsqueeze_to(grad, dim, self.sym_sizes())
struct SqueezeBackward2Saved {
  IntList dim;
  IntList self_sym_sizes;
};

Grads SqueezeBackward2(const Grads& grads, const SqueezeBackward2Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const char* node = "SqueezeBackward2";
  return Grads{unsqueeze_to(*grads[0], squeezable_dims(saved.dim, saved.self_sym_sizes, node), saved.self_sym_sizes, node)};
}

// SelectBackward0 — select.int(Tensor(a) self, int dim, SymInt index)
//   self: select_backward_symint(grad, self.sym_sizes(), dim, index)
struct SelectBackward0Saved {
  int64_t dim;
  int64_t index;
  IntList self_sym_sizes;
};

Grads SelectBackward0(const Grads& grads, const SelectBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{select_backward(*grads[0], saved.self_sym_sizes, saved.dim, saved.index)};
}

// SliceBackward0 — slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)
//   self: slice_backward_wrapper(grad, self.sym_sizes(), dim, start, end, step)
// narrow() records a slice too.
struct SliceBackward0Saved {
  int64_t dim;
  std::optional<int64_t> end;
  IntList self_sym_sizes;
  std::optional<int64_t> start;
  int64_t step;
};

Grads SliceBackward0(const Grads& grads, const SliceBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{
      slice_backward_wrapper(*grads[0], saved.self_sym_sizes, saved.dim, saved.start, saved.end, saved.step)};
}

// AsStridedBackward0 — as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None)
//   self: as_strided_backward(grad, TensorGeometry(self), size, stride, storage_offset)
struct AsStridedBackward0Saved {
  TensorGeometry self_geometry;
  IntList size;
  std::optional<int64_t> storage_offset;
  IntList stride;
};

Grads AsStridedBackward0(const Grads& grads, const AsStridedBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{as_strided_backward(*grads[0], saved.self_geometry, saved.size, saved.stride, saved.storage_offset)};
}

// CatBackward0 — cat(Tensor[] tensors, int dim=0)
//   tensors: cat_tensors_backward(grad, to_args_sizes_symint(tensors), to_args_scalartypes(tensors), dim)
// Tensor[] convention: one need bit, one output per list element (the count
// is the number of saved sizes, as many as the scalar types that
// list_length_field names). A legacy empty 1-d input ([0]) takes no part
// in the cat and gets an empty grad. The scalar types only matter for complex.
struct CatBackward0Saved {
  int64_t dim;
  std::vector<DType> tensors_args_scalartypes;
  std::vector<IntList> tensors_args_sizes_symint;
};

Grads CatBackward0(const Grads& grads, const CatBackward0Saved& saved, const Need& need) {
  const std::vector<IntList>& shapes = saved.tensors_args_sizes_symint;
  check(shapes.size() == saved.tensors_args_scalartypes.size(), "CatBackward0: tensors_args_sizes_symint has ",
        shapes.size(), " entries but tensors_args_scalartypes has ", saved.tensors_args_scalartypes.size());
  if (!grads[0] || !need[0]) return Grads(shapes.size());
  const Tensor& grad = *grads[0];
  auto is_legacy_empty = [](const IntList& shape) { return shape.size() == 1 && shape[0] == 0; };
  // legacy_cat_wrap_dim: the first input that is not a legacy empty decides the rank.
  const auto ranked = std::find_if_not(shapes.begin(), shapes.end(), is_legacy_empty);
  if (ranked == shapes.end()) return Grads(shapes.size(), zeros({0}, grad.dtype()));
  check(!ranked->empty(), "CatBackward0: tensors_args_sizes_symint has a 0-d input, and a zero-dimensional tensor "
                          "cannot be concatenated");
  const int64_t dim = wrap_saved_dim("CatBackward0", "dim", saved.dim, "the inputs' sizes", *ranked);
  // The inputs have the grad's sizes but along dim, where their sizes add up to the grad's.
  const auto fits = [&](const IntList& shape) {
    if (ndim_of(shape) != grad.dim()) return false;
    for (int64_t d = 0; d < grad.dim(); ++d)
      if (d != dim && shape[d] != grad.size(d)) return false;
    return shape[dim] >= 0;
  };
  Grads out;
  int64_t accumulate = 0;
  for (const IntList& shape : shapes) {
    if (is_legacy_empty(shape)) {
      out.push_back(zeros({0}, grad.dtype()));
      continue;
    }
    check(fits(shape) && shape[dim] <= grad.size(dim) - accumulate, "CatBackward0: grad of shape ",
          shape_text(grad.sizes()), " is not the inputs of tensors_args_sizes_symint concatenated along dim ", dim,
          " (input ", out.size(), " has shape ", shape_text(shape), ")");
    out.push_back(narrow(grad, dim, accumulate, shape[dim]));
    accumulate += shape[dim];
  }
  check(accumulate == grad.size(dim), "CatBackward0: grad of shape ", shape_text(grad.sizes()),
        " is larger along dim ", dim, " than the inputs of tensors_args_sizes_symint (", accumulate, ")");
  return out;
}

// StackBackward0 — stack(Tensor[] tensors, int dim=0)
//   tensors: stack_tensors_backward(grad, dim, to_args_scalartypes(tensors))
// Tensor[] convention: one need bit, one output per list element (the count
// is the number of saved scalar types, list_length_field): grad.unbind(dim).
struct StackBackward0Saved {
  int64_t dim;
  std::vector<DType> tensors_args_scalartypes;
};

Grads StackBackward0(const Grads& grads, const StackBackward0Saved& saved, const Need& need) {
  const auto count = static_cast<int64_t>(saved.tensors_args_scalartypes.size());
  if (!grads[0] || !need[0]) return Grads(count);
  const Tensor& grad = *grads[0];
  check(grad.dim() > 0, "StackBackward0: grad is 0-d, but stack's result has at least one dim");
  const int64_t dim = wrap_dim(saved.dim, grad.dim(), "StackBackward0");
  check(grad.size(dim) == count, "StackBackward0: grad of shape ", shape_text(grad.sizes()), " has ", grad.size(dim),
        " entries along dim ", dim, " for ", count, " stacked tensors");
  Grads out;
  for (int64_t i = 0; i < count; ++i) out.push_back(select(grad, dim, i));
  return out;
}

// SplitBackward0 — split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0)
//   self: split_backward(grads, split_size, dim, self.sym_sizes(), self.options())
struct SplitBackward0Saved {
  int64_t dim;
  TensorOptions self_options;
  IntList self_sym_sizes;
  int64_t split_size;
};

Grads SplitBackward0(const Grads& grads, const SplitBackward0Saved& saved, const Need& need) {
  if (!any_grad_defined(grads) || !need[0]) return Grads(1);
  return Grads{split_backward(grads, saved.split_size, saved.dim, saved.self_sym_sizes, saved.self_options)};
}

// SplitWithSizesBackward0 — split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0)
//   self: split_with_sizes_backward(grads, split_sizes, dim, self.sym_sizes(), self.options())
struct SplitWithSizesBackward0Saved {
  int64_t dim;
  TensorOptions self_options;
  IntList self_sym_sizes;
  IntList split_sizes;
};

Grads SplitWithSizesBackward0(const Grads& grads, const SplitWithSizesBackward0Saved& saved, const Need& need) {
  if (!any_grad_defined(grads) || !need[0]) return Grads(1);
  return Grads{split_with_sizes_backward(grads, saved.split_sizes, saved.dim, saved.self_sym_sizes,
                                         saved.self_options, "SplitWithSizesBackward0", "split_sizes")};
}

// UnbindBackward0 — unbind.int(Tensor(a -> *) self, int dim=0)
//   self: unbind_backward(grads, dim)
// An undefined grad becomes zeros shaped and typed like the first defined one.
struct UnbindBackward0Saved {
  int64_t dim;
};

Grads UnbindBackward0(const Grads& grads, const UnbindBackward0Saved& saved, const Need& need) {
  if (!any_grad_defined(grads) || !need[0]) return Grads(1);
  const auto defined = std::find_if(grads.begin(), grads.end(), [](const auto& g) { return g.has_value(); });
  const Tensor zero = zeros_like(**defined);
  TensorList pieces;
  for (const auto& g : grads) {
    check(!g || g->sizes() == zero.sizes(), "UnbindBackward0: grads of shapes ", shape_text(zero.sizes()), " and ",
          shape_text(g ? g->sizes() : Shape{}), " cannot come from one unbind");
    pieces.push_back(g ? *g : zero);
  }
  return Grads{stack(pieces, saved.dim)};
}

// RepeatBackward0 — repeat(Tensor self, SymInt[] repeats)
//   self: repeat_backward(grad, repeats, self.sym_sizes())
struct RepeatBackward0Saved {
  IntList repeats;
  IntList self_sym_sizes;
};

Grads RepeatBackward0(const Grads& grads, const RepeatBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{repeat_backward(*grads[0], saved.repeats, saved.self_sym_sizes)};
}

// ConstantPadNdBackward0 — constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0)
//   self: constant_pad_nd_backward(grad, pad)
struct ConstantPadNdBackward0Saved {
  IntList pad;
};

Grads ConstantPadNdBackward0(const Grads& grads, const ConstantPadNdBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{constant_pad_nd_backward(*grads[0], saved.pad)};
}

// FlipBackward0 — flip(Tensor self, int[] dims)
//   self: grad.flip(dims)
struct FlipBackward0Saved {
  IntList dims;
};

Grads FlipBackward0(const Grads& grads, const FlipBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{flip(*grads[0], saved.dims)};
}

// TrilBackward0 — tril(Tensor self, SymInt diagonal=0)
//   self: grad.tril_symint(diagonal)
struct TrilBackward0Saved {
  int64_t diagonal;
};

Grads TrilBackward0(const Grads& grads, const TrilBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{tril(*grads[0], saved.diagonal)};
}

// TriuBackward0 — triu(Tensor self, SymInt diagonal=0)
//   self: grad.triu_symint(diagonal)
struct TriuBackward0Saved {
  int64_t diagonal;
};

Grads TriuBackward0(const Grads& grads, const TriuBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{triu(*grads[0], saved.diagonal)};
}

// UnfoldBackward0 — unfold(Tensor(a) self, int dimension, int size, int step)
//   self: unfold_backward_symint(grad, self.sym_sizes(), dimension, size, step)
struct UnfoldBackward0Saved {
  int64_t dimension;
  IntList self_sym_sizes;
  int64_t size;
  int64_t step;
};

Grads UnfoldBackward0(const Grads& grads, const UnfoldBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{unfold_backward(*grads[0], saved.self_sym_sizes, saved.dimension, saved.size, saved.step)};
}


// ------------------------------------------- unsafe splits, narrow_copy, rot90 ---

// UnsafeSplitBackward0 — unsafe_split.Tensor(Tensor self, SymInt split_size, int dim=0)
//   self: split_backward(grads, split_size, dim, self.sym_sizes(), self.options())
// unsafe_chunk records it too. split's formula: only the outputs' aliasing differs.
Grads UnsafeSplitBackward0(const Grads& grads, const SplitBackward0Saved& saved, const Need& need) {
  if (!any_grad_defined(grads) || !need[0]) return Grads(1);
  return Grads{split_backward(grads, saved.split_size, saved.dim, saved.self_sym_sizes, saved.self_options,
                              "UnsafeSplitBackward0")};
}

// UnsafeSplitWithSizesBackward0 — unsafe_split_with_sizes(Tensor self, SymInt[] split_sizes, int dim=0)
//   self: split_with_sizes_backward(grads, split_sizes, dim, self.sym_sizes(), self.options())
Grads UnsafeSplitWithSizesBackward0(const Grads& grads, const SplitWithSizesBackward0Saved& saved, const Need& need) {
  if (!any_grad_defined(grads) || !need[0]) return Grads(1);
  return Grads{split_with_sizes_backward(grads, saved.split_sizes, saved.dim, saved.self_sym_sizes,
                                         saved.self_options, "UnsafeSplitWithSizesBackward0", "split_sizes")};
}

// NarrowCopyBackward0 — narrow_copy(Tensor self, int dim, SymInt start, SymInt length)
//   self: slice_backward_wrapper(grad, self.sym_sizes(), dim, start, start + length, 1)
// narrow_copy takes a negative start as counted from the end (start + size), as narrow does. The
// formula passes start + length on unwrapped, which for a negative start ends the slice before it
// begins (torch 2.13's backward then fails: "The size of tensor a (0) must match the size of tensor
// b (2)"); refgrad wraps start first, giving the gradient of the forward that ran.
struct NarrowCopyBackward0Saved {
  int64_t dim;
  int64_t length;
  IntList self_sym_sizes;
  int64_t start;
};

Grads NarrowCopyBackward0(const Grads& grads, const NarrowCopyBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const char* node = "NarrowCopyBackward0";
  const IntList& sizes = saved.self_sym_sizes;
  check(!sizes.empty(), node, ": self_sym_sizes is [], and narrow() cannot be applied to a 0-dim tensor");
  const int64_t dim = wrap_saved_dim(node, "dim", saved.dim, "self_sym_sizes", sizes);
  const int64_t size = sizes[dim];
  check(saved.start >= -size && saved.start <= size, node, ": start ", saved.start, " is out of range for dim ", dim,
        " of self_sym_sizes ", shape_text(sizes));
  const int64_t start = saved.start < 0 ? saved.start + size : saved.start;
  check(saved.length >= 0 && saved.length <= size - start, node, ": start ", start, " + length ", saved.length,
        " exceeds dim ", dim, " of self_sym_sizes ", shape_text(sizes));
  return Grads{slice_backward_wrapper(*grads[0], sizes, dim, start, start + saved.length, 1, node)};
}

// ATen's rot90(self, k, dims): a quarter turn from dims[0] towards dims[1] is a flip of dims[1]
// then a transpose; a half turn flips both; k is taken mod 4.
Tensor rot90(const char* node, const Tensor& self, int64_t k, const IntList& dims) {
  check(dims.size() == 2, node, ": rot90 takes 2 dims, got dims ", shape_text(dims));
  check(self.dim() >= 2, node, ": rot90 needs a tensor of at least 2 dims, got shape ", shape_text(self.sizes()));
  const int64_t d0 = wrap_dim(dims[0], self.dim(), node), d1 = wrap_dim(dims[1], self.dim(), node);
  check(d0 != d1, node, ": rot90's dims ", shape_text(dims), " name one dim twice");
  switch (((k % 4) + 4) % 4) {
    case 1: return transpose(flip(self, {d1}), d0, d1);
    case 2: return flip(self, {d0, d1});
    case 3: return transpose(flip(self, {d0}), d0, d1);
    default: return self;
  }
}

// Rot90Backward0 — rot90(Tensor self, int k=1, int[] dims=[0,1])
//   self: grad.rot90(-k, dims)
struct Rot90Backward0Saved {
  IntList dims;
  int64_t k;
};

Grads Rot90Backward0(const Grads& grads, const Rot90Backward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{rot90("Rot90Backward0", *grads[0], -(saved.k % 4), saved.dims)};  // k % 4: -k cannot overflow
}

// BlockDiagBackward0 — block_diag(Tensor[] tensors)
//   tensors: block_diag_backward(grad, to_args_sizes(tensors), to_args_scalartypes(tensors))
// Tensor i is the block after those before it, down the diagonal: a matrix [r, c] is an r x c
// block, a vector [n] a 1 x n block, a 0-d tensor a 1 x 1 block. Its grad is that block of grad,
// in its own shape; a real tensor's is the real part (handle_r_to_c).
struct BlockDiagBackward0Saved {
  std::vector<DType> tensors_args_scalartypes;
  std::vector<IntList> tensors_args_sizes;
};

Grads BlockDiagBackward0(const Grads& grads, const BlockDiagBackward0Saved& saved, const Need& need) {
  const char* node = "BlockDiagBackward0";
  const std::vector<IntList>& shapes = saved.tensors_args_sizes;
  check(shapes.size() == saved.tensors_args_scalartypes.size(), node, ": tensors_args_sizes has ", shapes.size(),
        " entries but tensors_args_scalartypes has ", saved.tensors_args_scalartypes.size());
  if (!grads[0] || !need[0]) return Grads(shapes.size());
  const Tensor& grad = *grads[0];
  check(grad.dim() == 2, node, ": grad of shape ", shape_text(grad.sizes()), " is not a matrix");
  Grads out;
  int64_t row = 0, col = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const IntList& shape = shapes[i];
    check(shape.size() <= 2, node, ": tensor ", i, " of tensors_args_sizes has shape ", shape_text(shape),
          ", and block_diag takes tensors of at most 2 dims");
    check_sizes(node, "tensors_args_sizes", shape);
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    const int64_t cols = shape.empty() ? 1 : shape.back();
    check(rows <= grad.size(0) - row && cols <= grad.size(1) - col, node, ": grad of shape ", shape_text(grad.sizes()),
          " has no room for block ", i, " of shape ", shape_text(shape), " at (", row, ", ", col, ")");
    const Tensor block = narrow(narrow(grad, 0, row, rows), 1, col, cols);
    out.push_back(handle_r_to_c(saved.tensors_args_scalartypes[i], reshape(block, shape)));
    row += rows;
    col += cols;
  }
  check(row == grad.size(0) && col == grad.size(1), node, ": grad of shape ", shape_text(grad.sizes()),
        " is larger than the blocks of tensors_args_sizes (", row, " x ", col, ")");
  return out;
}

// ------------------------------------------------------- the *_scatter ops ---

// src_info is what torch's zeros_like(src) reads: src's sizes and options. refgrad zeroes the view's
// elements of grad in place of scattering those zeros, so it does not need them for self; it checks
// them against src's grad, the view of grad, when src needs one (only then does capture see src's
// edge, and so its shape, for this hidden field).
void check_src_info(const char* node, const TypeAndSize& src_info, const Tensor& src_grad) {
  check(src_info.sizes == src_grad.sizes(), node, ": src_info has sizes ", shape_text(src_info.sizes),
        " but the view of grad src was scattered into has shape ", shape_text(src_grad.sizes()));
}

// grad with the elements a view of it picks set to 0: PyTorch's
// select_scatter(grad, zeros_like(src), ...) and its siblings. `view_of` makes the same view of an
// arange of grad's element positions, which says where they are.
template <class View>
Tensor zero_view_elements(const Tensor& grad, const View& view_of) {
  const Tensor positions = view_of(reshape(arange(Scalar(grad.numel()), DType::Int64), grad.sizes()));
  const Tensor flat_positions = reshape(contiguous(positions), {-1});
  const Tensor flat = index_put(reshape(contiguous(grad), {-1}), {flat_positions},
                                zeros({flat_positions.numel()}, grad.dtype()));
  return reshape(flat, grad.sizes());
}

// SelectScatterBackward0 — select_scatter(Tensor self, Tensor src, int dim, SymInt index)
//   self: select_scatter_symint(grad, zeros_like(src), dim, index)
//   src:  grad.select_symint(dim, index)
struct SelectScatterBackward0Saved {
  int64_t dim;
  int64_t index;
  TypeAndSize src_info;
};

Grads SelectScatterBackward0(const Grads& grads, const SelectScatterBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check(grad.dim() > 0, "SelectScatterBackward0: grad is 0-d, and select() cannot be applied to a 0-dim tensor");
  const auto view_of = [&](const Tensor& t) { return select(t, saved.dim, saved.index); };
  Grads out(2);
  if (need[0]) out[0] = zero_view_elements(grad, view_of);
  if (need[1]) {
    out[1] = view_of(grad);
    check_src_info("SelectScatterBackward0", saved.src_info, *out[1]);
  }
  return out;
}

// SliceScatterBackward0 — slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None,
//                                       SymInt step=1)
//   self: slice_scatter_symint(grad, zeros_like(src), dim, start, end, step)
//   src:  grad.slice_symint(dim, start, end, step)
struct SliceScatterBackward0Saved {
  int64_t dim;
  std::optional<int64_t> end;
  std::optional<int64_t> start;
  int64_t step;
  TypeAndSize src_info;
};

Grads SliceScatterBackward0(const Grads& grads, const SliceScatterBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  check(grad.dim() > 0, "SliceScatterBackward0: grad is 0-d, and slice() cannot be applied to a 0-dim tensor");
  check(saved.step > 0, "SliceScatterBackward0: step must be positive, got ", saved.step);
  const auto view_of = [&](const Tensor& t) { return slice(t, saved.dim, saved.start, saved.end, saved.step); };
  Grads out(2);
  if (need[0]) out[0] = zero_view_elements(grad, view_of);
  if (need[1]) {
    out[1] = view_of(grad);
    check_src_info("SliceScatterBackward0", saved.src_info, *out[1]);
  }
  return out;
}

// DiagonalScatterBackward0 — diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1)
//   self: diagonal_scatter(grad, zeros_like(src), offset, dim1, dim2)
//   src:  grad.diagonal(offset, dim1, dim2)
struct DiagonalScatterBackward0Saved {
  int64_t dim1;
  int64_t dim2;
  int64_t offset;
  TypeAndSize src_info;
};

Grads DiagonalScatterBackward0(const Grads& grads, const DiagonalScatterBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  const auto view_of = [&](const Tensor& t) { return diagonal("DiagonalScatterBackward0", t, saved.offset, saved.dim1, saved.dim2); };
  Grads out(2);
  if (need[0]) out[0] = zero_view_elements(grad, view_of);
  if (need[1]) {
    out[1] = view_of(grad);
    check_src_info("DiagonalScatterBackward0", saved.src_info, *out[1]);
  }
  return out;
}

// AsStridedScatterBackward0 — as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride,
//                                                SymInt? storage_offset=None)
//   self: as_strided_scatter_backward(grad, TensorGeometry(self), TensorGeometry(src), size, stride, storage_offset)
//   src:  grad.contiguous().as_strided_symint(size, stride, storage_offset)
// PyTorch allows autograd through as_strided_scatter only for a contiguous self (its Note
// [as_strided_scatter backward support]), so the view's positions are those of the contiguous grad.
// The forward overwrote self's elements at those positions with src's, so self's gradient is grad
// with them set to 0. torch 2.13's as_strided_scatter_backward returns the complement (grad at
// those positions, 0 elsewhere), which torch.autograd.gradcheck refuses and OpInfo marks as an
// expected failure of test_fn_grad; refgrad computes the gradient.
struct AsStridedScatterBackward0Saved {
  TensorGeometry self_geometry;
  IntList size;
  TensorGeometry src_geometry;
  std::optional<int64_t> storage_offset;
  IntList stride;
};

Grads AsStridedScatterBackward0(const Grads& grads, const AsStridedScatterBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const char* node = "AsStridedScatterBackward0";
  const Tensor& grad = *grads[0];
  const TensorGeometry& self = saved.self_geometry;
  check(grad.sizes() == self.sizes, node, ": grad has shape ", shape_text(grad.sizes()), " but self_geometry has sizes ",
        shape_text(self.sizes));
  check(saved.size.size() == saved.stride.size(), node, ": size ", shape_text(saved.size), " and stride ",
        shape_text(saved.stride), " differ in length");
  const auto negative = [](int64_t v) { return v < 0; };
  check(std::none_of(saved.size.begin(), saved.size.end(), negative) &&
            std::none_of(saved.stride.begin(), saved.stride.end(), negative) && saved.storage_offset.value_or(0) >= 0,
        node, ": size ", shape_text(saved.size), ", stride ", shape_text(saved.stride), " and storage_offset ",
        saved.storage_offset.value_or(0), " are not a geometry of non-negative sizes, strides and offset");
  const int64_t offset = saved.storage_offset.value_or(0);
  const int64_t needed = min_storage_size(saved.size, saved.stride, offset, "the view (size, stride, storage_offset)");
  check(needed <= grad.numel(), node, ": the view (size ", shape_text(saved.size), ", stride ", shape_text(saved.stride),
        ", storage offset ", offset, ") reaches past the ", grad.numel(), " elements of self");
  const auto view_of = [&](const Tensor& t) { return as_strided(contiguous(t), saved.size, saved.stride, offset); };
  Grads out(2);
  if (need[0]) {
    check(self.strides == contiguous_strides(self.sizes) && self.storage_offset == 0, node,
          ": self_geometry (sizes ", shape_text(self.sizes), ", strides ", shape_text(self.strides), ", storage offset ",
          self.storage_offset, ") is not contiguous; as_strided_scatter's backward supports only a contiguous self");
    out[0] = zero_view_elements(grad, view_of);
  }
  if (need[1]) {
    check(saved.src_geometry.sizes == saved.size, node, ": src_geometry has sizes ", shape_text(saved.src_geometry.sizes),
          " but the view has size ", shape_text(saved.size));
    out[1] = contiguous(view_of(grad));
  }
  return out;
}

// ------------------------------------------------- unfold's backward, im2col ---

// ATen's t.unfold(dim, size, step): dim holds the windows, a new last dim the position in each,
// as a view of contiguous t (a 0-d t unfolds as one element).
Tensor unfold(const char* node, const Tensor& t, int64_t dim, int64_t size, int64_t step) {
  check(step > 0, node, ": step is ", step, " but must be > 0");
  if (t.dim() == 0) {
    check(size >= 0 && size <= 1, node, ": size ", size, " does not fit a 0-d grad");
    return reshape(narrow(reshape(t, {1}), 0, 0, size), {size});
  }
  dim = wrap_dim(dim, t.dim(), node);
  check(size >= 0 && size <= t.size(dim), node, ": size ", size, " does not fit dim ", dim, " of grad of shape ",
        shape_text(t.sizes()));
  Shape sizes = t.sizes(), strides = contiguous_strides(t.sizes());
  const int64_t element_stride = strides[dim];
  sizes[dim] = (t.size(dim) - size) / step + 1;
  strides[dim] *= step;
  sizes.push_back(size);
  strides.push_back(element_stride);
  return as_strided(contiguous(t), sizes, strides, 0);
}

// UnfoldBackwardBackward0 — unfold_backward(Tensor grad_in, SymInt[] input_sizes, int dim, int size, int step)
//   grad_in: grad.unfold(dim, size, step)
// unfold_backward is linear in grad_in and adds each window back at its place; its adjoint reads
// the windows again.
struct UnfoldBackwardBackward0Saved {
  int64_t dim;
  int64_t size;
  int64_t step;
};

Grads UnfoldBackwardBackward0(const Grads& grads, const UnfoldBackwardBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{contiguous(unfold("UnfoldBackwardBackward0", *grads[0], saved.dim, saved.size, saved.step))};
}

// ATen's col2im(grad, {height, width}, kernel_size, dilation, padding, stride), the adjoint of
// im2col: column (c, ki, kj) at output place (oh, ow) of grad [N, C kh kw, L] read input position
// (oh sh + ki dh - ph, ow sw + kj dw - pw), so it is added there. The additions run on the padded
// input, one index_add per channel plane, and the padding is cut away. An unbatched grad [C kh kw, L]
// gives [C, height, width].
Tensor col2im(const char* node, const Tensor& grad, int64_t height, int64_t width, const IntList& kernel_size,
              const IntList& dilation, const IntList& padding, const IntList& stride) {
  check(kernel_size.size() == 2 && dilation.size() == 2 && padding.size() == 2 && stride.size() == 2, node,
        ": kernel_size, dilation, padding and stride must have 2 entries each, got ", shape_text(kernel_size), ", ",
        shape_text(dilation), ", ", shape_text(padding), ", ", shape_text(stride));
  const int64_t kh = kernel_size[0], kw = kernel_size[1], dh = dilation[0], dw = dilation[1];
  const int64_t ph = padding[0], pw = padding[1], sh = stride[0], sw = stride[1];
  check(kh > 0 && kw > 0 && dh > 0 && dw > 0 && sh > 0 && sw > 0 && ph >= 0 && pw >= 0 && height >= 0 && width >= 0,
        node, ": kernel_size ", shape_text(kernel_size), ", dilation ", shape_text(dilation), " and stride ",
        shape_text(stride), " must be positive, padding ", shape_text(padding), " and the input size non-negative");
  const int64_t padded_h = height + 2 * ph, padded_w = width + 2 * pw;
  const int64_t out_h = (padded_h - dh * (kh - 1) - 1) / sh + 1, out_w = (padded_w - dw * (kw - 1) - 1) / sw + 1;
  check(padded_h >= dh * (kh - 1) + 1 && padded_w >= dw * (kw - 1) + 1, node, ": the kernel ", shape_text(kernel_size),
        " with dilation ", shape_text(dilation), " does not fit the padded input ", padded_h, " x ", padded_w);
  const bool batched = grad.dim() == 3;
  check(grad.dim() == 2 || batched, node, ": grad of shape ", shape_text(grad.sizes()),
        " is not [N, C * kernel, L] or [C * kernel, L]");
  const Tensor columns = batched ? grad : unsqueeze(grad, 0);
  const int64_t kernel = kh * kw, places = out_h * out_w;
  check(columns.size(1) % kernel == 0 && columns.size(2) == places, node, ": grad of shape ",
        shape_text(grad.sizes()), " does not fit kernel ", shape_text(kernel_size), " over ", out_h, " x ", out_w,
        " places of an input ", height, " x ", width);
  const int64_t batch = columns.size(0), channels = columns.size(1) / kernel;
  IntList positions;  // in the order of grad's (ki, kj, oh, ow)
  for (int64_t ki = 0; ki < kh; ++ki)
    for (int64_t kj = 0; kj < kw; ++kj)
      for (int64_t oh = 0; oh < out_h; ++oh)
        for (int64_t ow = 0; ow < out_w; ++ow) positions.push_back((oh * sh + ki * dh) * padded_w + ow * sw + kj * dw);
  const Tensor index = from_vector(positions, {ndim_of(positions)});
  const Tensor planes = index_add(zeros({batch, channels, padded_h * padded_w}, grad.dtype()), 2, index,
                                  reshape(columns, {batch, channels, kernel * places}));
  const Tensor image =
      contiguous(narrow(narrow(reshape(planes, {batch, channels, padded_h, padded_w}), 2, ph, height), 3, pw, width));
  return batched ? image : squeeze(image, 0);
}

// Im2ColBackward0 — im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride)
//   self: col2im_symint(grad, {self.sym_size(-2), self.sym_size(-1)}, kernel_size, dilation, padding, stride)
// nn.functional.unfold records it.
struct Im2ColBackward0Saved {
  IntList dilation;
  IntList kernel_size;
  IntList padding;
  int64_t self_sym_argsize_minus_1;
  int64_t self_sym_argsize_minus_2;
  IntList stride;
};

Grads Im2ColBackward0(const Grads& grads, const Im2ColBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{col2im("Im2ColBackward0", *grads[0], saved.self_sym_argsize_minus_2, saved.self_sym_argsize_minus_1,
                      saved.kernel_size, saved.dilation, saved.padding, saved.stride)};
}

}  // namespace

void add_shape_nodes(std::vector<NodeDef>& registry) {
  const char* reshape_formula = "self: grad.reshape_symint(self.sym_sizes())";
  for (const auto& [name, aten_op] : {std::pair{"ViewBackward0", "view"},
                                      std::pair{"UnsafeViewBackward0", "_unsafe_view"},
                                      std::pair{"ReshapeAliasBackward0", "_reshape_alias"}}) {
    registry.push_back(define_node<ReshapeToSelfSaved, ReshapeToSelf>(
        {name, aten_op, {"self"}, 1, {}, reshape_formula},
        {saved<&ReshapeToSelfSaved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  }
  registry.push_back(
      define_node<TBackward0Saved, TBackward0>({"TBackward0", "t", {"self"}, 1, {}, "self: grad.t()"}, {}));
  registry.push_back(define_node<TransposeBackward0Saved, TransposeBackward0>(
      {"TransposeBackward0", "transpose.int", {"self"}, 1, {}, "self: grad.transpose(dim0, dim1)"},
      {saved<&TransposeBackward0Saved::dim0>("dim0", FieldKind::Int),
       saved<&TransposeBackward0Saved::dim1>("dim1", FieldKind::Int)}));
  // transpose_, in place: the same formula and fields as transpose's (its node replaces the tensor's grad_fn)
  registry.push_back(define_node<TransposeBackward0Saved, TransposeBackward0>(
      {"TransposeBackward1", "transpose_", {"self"}, 1, {}, "self: grad.transpose(dim0, dim1)"},
      {saved<&TransposeBackward0Saved::dim0>("dim0", FieldKind::Int),
       saved<&TransposeBackward0Saved::dim1>("dim1", FieldKind::Int)}));
  registry.push_back(define_node<DiagonalBackward0Saved, DiagonalBackward0>(
      {"DiagonalBackward0", "diagonal", {"self"}, 1, {},
       "self: diagonal_backward_symint(grad, self.sym_sizes(), offset, dim1, dim2)"},
      {saved<&DiagonalBackward0Saved::dim1>("dim1", FieldKind::Int),
       saved<&DiagonalBackward0Saved::dim2>("dim2", FieldKind::Int),
       saved<&DiagonalBackward0Saved::offset>("offset", FieldKind::Int),
       saved<&DiagonalBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<TraceBackward0Saved, TraceBackward0>(
      {"TraceBackward0", "trace", {"self"}, 1, {}, "self: trace_backward_symint(grad, self.sym_sizes())"},
      {saved<&TraceBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<DiagEmbedBackward0Saved, DiagEmbedBackward0>(
      {"DiagEmbedBackward0", "diag_embed", {"self"}, 1, {}, "self: grad.diagonal(offset, dim1, dim2)"},
      {saved<&DiagEmbedBackward0Saved::dim1>("dim1", FieldKind::Int),
       saved<&DiagEmbedBackward0Saved::dim2>("dim2", FieldKind::Int),
       saved<&DiagEmbedBackward0Saved::offset>("offset", FieldKind::Int)}));
  registry.push_back(define_node<PixelShuffleBackward0Saved, PixelShuffleBackward0>(
      {"PixelShuffleBackward0", "pixel_shuffle", {"self"}, 1, {}, "self: pixel_unshuffle(grad, upscale_factor)"},
      {saved<&PixelShuffleBackward0Saved::upscale_factor>("upscale_factor", FieldKind::Int)}));
  registry.push_back(define_node<PixelUnshuffleBackward0Saved, PixelUnshuffleBackward0>(
      {"PixelUnshuffleBackward0", "pixel_unshuffle", {"self"}, 1, {}, "self: pixel_shuffle(grad, downscale_factor)"},
      {saved<&PixelUnshuffleBackward0Saved::downscale_factor>("downscale_factor", FieldKind::Int)}));
  registry.push_back(define_node<ChannelShuffleBackward0Saved, ChannelShuffleBackward0>(
      {"ChannelShuffleBackward0", "channel_shuffle", {"self"}, 1, {},
       "self: channel_shuffle_symint(grad, grad.sym_size(1) / groups)"},
      {saved<&ChannelShuffleBackward0Saved::groups>("groups", FieldKind::Int)}));
  registry.push_back(define_node<RollBackward0Saved, RollBackward0>(
      {"RollBackward0", "roll", {"self"}, 1, {},
       "self: grad.roll_symint(fmap(reverse_list_symint(shifts), [](c10::SymInt i){return -i;}), reverse_list(dims))"},
      {saved<&RollBackward0Saved::dims>("dims", FieldKind::IntList),
       saved<&RollBackward0Saved::shifts>("shifts", FieldKind::Sizes)}));
  registry.push_back(define_node<PermuteBackward0Saved, PermuteBackward0>(
      {"PermuteBackward0", "permute", {"self"}, 1, {}, "self: permute_backwards(grad, dims)"},
      {saved<&PermuteBackward0Saved::dims>("dims", FieldKind::IntList)}));
  registry.push_back(define_node<ExpandBackward0Saved, ExpandBackward0>(
      {"ExpandBackward0", "expand", {"self"}, 1, {}, "self: at::sum_to(grad, self.sym_sizes())"},
      {saved<&ExpandBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<UnsqueezeBackward0Saved, UnsqueezeBackward0>(
      {"UnsqueezeBackward0", "unsqueeze", {"self"}, 1, {}, "self: grad.squeeze(dim)"},
      {saved<&UnsqueezeBackward0Saved::dim>("dim", FieldKind::Int)}));
  // unsqueeze_, in place: unsqueeze's formula and field
  registry.push_back(define_node<UnsqueezeBackward0Saved, UnsqueezeBackward0>(
      {"UnsqueezeBackward1", "unsqueeze_", {"self"}, 1, {}, "self: grad.squeeze(dim)"},
      {saved<&UnsqueezeBackward0Saved::dim>("dim", FieldKind::Int)}));
  registry.push_back(define_node<SqueezeBackward0Saved, SqueezeBackward0<kSqueezeBackward0>>(
      {"SqueezeBackward0", "squeeze", {"self"}, 1, {}, "self: unsqueeze_to(grad, self.sym_sizes())"},
      {saved<&SqueezeBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<SqueezeBackward1Saved, SqueezeBackward1<kSqueezeBackward1>>(
      {"SqueezeBackward1", "squeeze.dim", {"self"}, 1, {}, "self: unsqueeze_to(grad, dim, self.sym_sizes())"},
      {saved<&SqueezeBackward1Saved::dim>("dim", FieldKind::Int),
       saved<&SqueezeBackward1Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  // squeeze_ and squeeze_.dim (in place) have the formulas of squeeze and squeeze.dim.
  registry.push_back(define_node<SqueezeBackward0Saved, SqueezeBackward0<kSqueezeBackward3>>(
      {"SqueezeBackward3", "squeeze_", {"self"}, 1, {}, "self: unsqueeze_to(grad, self.sym_sizes())"},
      {saved<&SqueezeBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<SqueezeBackward1Saved, SqueezeBackward1<kSqueezeBackward4>>(
      {"SqueezeBackward4", "squeeze_.dim", {"self"}, 1, {}, "self: unsqueeze_to(grad, dim, self.sym_sizes())"},
      {saved<&SqueezeBackward1Saved::dim>("dim", FieldKind::Int),
       saved<&SqueezeBackward1Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<SqueezeBackward2Saved, SqueezeBackward2>(
      {"SqueezeBackward2", "squeeze.dims", {"self"}, 1, {}, "self: unsqueeze_to(grad, dim, self.sym_sizes())"},
      {saved<&SqueezeBackward2Saved::dim>("dim", FieldKind::IntList),
       saved<&SqueezeBackward2Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<SelectBackward0Saved, SelectBackward0>(
      {"SelectBackward0", "select.int", {"self"}, 1, {},
       "self: select_backward_symint(grad, self.sym_sizes(), dim, index)"},
      {saved<&SelectBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&SelectBackward0Saved::index>("index", FieldKind::Int),
       saved<&SelectBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<SliceBackward0Saved, SliceBackward0>(
      {"SliceBackward0", "slice.Tensor", {"self"}, 1, {},
       "self: slice_backward_wrapper(grad, self.sym_sizes(), dim, start, end, step)"},
      {saved<&SliceBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&SliceBackward0Saved::end>("end", FieldKind::Int, true),
       saved<&SliceBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&SliceBackward0Saved::start>("start", FieldKind::Int, true),
       saved<&SliceBackward0Saved::step>("step", FieldKind::Int)}));
  registry.push_back(define_node<AsStridedBackward0Saved, AsStridedBackward0>(
      {"AsStridedBackward0", "as_strided", {"self"}, 1, {},
       "self: as_strided_backward(grad, TensorGeometry(self), size, stride, storage_offset)"},
      {hidden<&AsStridedBackward0Saved::self_geometry>("self_geometry", FieldKind::TensorGeometry),
       saved<&AsStridedBackward0Saved::size>("size", FieldKind::Sizes),
       saved<&AsStridedBackward0Saved::storage_offset>("storage_offset", FieldKind::Int, true),
       saved<&AsStridedBackward0Saved::stride>("stride", FieldKind::Sizes)}));
  registry.push_back(define_node<CatBackward0Saved, CatBackward0>(
      {"CatBackward0", "cat", {"tensors"}, 1, {},
       "tensors: cat_tensors_backward(grad, to_args_sizes_symint(tensors), to_args_scalartypes(tensors), dim)",
       "tensors_args_scalartypes"},
      {saved<&CatBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&CatBackward0Saved::tensors_args_scalartypes>("tensors_args_scalartypes", FieldKind::DTypeList),
       hidden<&CatBackward0Saved::tensors_args_sizes_symint>("tensors_args_sizes_symint", FieldKind::SizesList)}));
  registry.push_back(define_node<StackBackward0Saved, StackBackward0>(
      {"StackBackward0", "stack", {"tensors"}, 1, {},
       "tensors: stack_tensors_backward(grad, dim, to_args_scalartypes(tensors))", "tensors_args_scalartypes"},
      {saved<&StackBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&StackBackward0Saved::tensors_args_scalartypes>("tensors_args_scalartypes", FieldKind::DTypeList)}));
  registry.push_back(define_node<SplitBackward0Saved, SplitBackward0>(
      {"SplitBackward0", "split.Tensor", {"self"}, kVariadic, {},
       "self: split_backward(grads, split_size, dim, self.sym_sizes(), self.options())"},
      {saved<&SplitBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&SplitBackward0Saved::self_options>("self_options", FieldKind::TensorOptions),
       saved<&SplitBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&SplitBackward0Saved::split_size>("split_size", FieldKind::Int)}));
  registry.push_back(define_node<SplitWithSizesBackward0Saved, SplitWithSizesBackward0>(
      {"SplitWithSizesBackward0", "split_with_sizes", {"self"}, kVariadic, {},
       "self: split_with_sizes_backward(grads, split_sizes, dim, self.sym_sizes(), self.options())"},
      {saved<&SplitWithSizesBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&SplitWithSizesBackward0Saved::self_options>("self_options", FieldKind::TensorOptions),
       saved<&SplitWithSizesBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&SplitWithSizesBackward0Saved::split_sizes>("split_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<UnbindBackward0Saved, UnbindBackward0>(
      {"UnbindBackward0", "unbind.int", {"self"}, kVariadic, {}, "self: unbind_backward(grads, dim)"},
      {saved<&UnbindBackward0Saved::dim>("dim", FieldKind::Int)}));
  registry.push_back(define_node<RepeatBackward0Saved, RepeatBackward0>(
      {"RepeatBackward0", "repeat", {"self"}, 1, {}, "self: repeat_backward(grad, repeats, self.sym_sizes())"},
      {saved<&RepeatBackward0Saved::repeats>("repeats", FieldKind::Sizes),
       saved<&RepeatBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<ConstantPadNdBackward0Saved, ConstantPadNdBackward0>(
      {"ConstantPadNdBackward0", "constant_pad_nd", {"self"}, 1, {}, "self: constant_pad_nd_backward(grad, pad)"},
      {saved<&ConstantPadNdBackward0Saved::pad>("pad", FieldKind::Sizes)}));
  registry.push_back(define_node<FlipBackward0Saved, FlipBackward0>(
      {"FlipBackward0", "flip", {"self"}, 1, {}, "self: grad.flip(dims)"},
      {saved<&FlipBackward0Saved::dims>("dims", FieldKind::IntList)}));
  registry.push_back(define_node<TrilBackward0Saved, TrilBackward0>(
      {"TrilBackward0", "tril", {"self"}, 1, {}, "self: grad.tril_symint(diagonal)"},
      {saved<&TrilBackward0Saved::diagonal>("diagonal", FieldKind::Int)}));
  registry.push_back(define_node<TriuBackward0Saved, TriuBackward0>(
      {"TriuBackward0", "triu", {"self"}, 1, {}, "self: grad.triu_symint(diagonal)"},
      {saved<&TriuBackward0Saved::diagonal>("diagonal", FieldKind::Int)}));
  registry.push_back(define_node<UnfoldBackward0Saved, UnfoldBackward0>(
      {"UnfoldBackward0", "unfold", {"self"}, 1, {},
       "self: unfold_backward_symint(grad, self.sym_sizes(), dimension, size, step)"},
      {saved<&UnfoldBackward0Saved::dimension>("dimension", FieldKind::Int),
       saved<&UnfoldBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&UnfoldBackward0Saved::size>("size", FieldKind::Int),
       saved<&UnfoldBackward0Saved::step>("step", FieldKind::Int)}));

  registry.push_back(define_node<SplitBackward0Saved, UnsafeSplitBackward0>(
      {"UnsafeSplitBackward0", "unsafe_split.Tensor", {"self"}, kVariadic, {},
       "self: split_backward(grads, split_size, dim, self.sym_sizes(), self.options())"},
      {saved<&SplitBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&SplitBackward0Saved::self_options>("self_options", FieldKind::TensorOptions),
       saved<&SplitBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&SplitBackward0Saved::split_size>("split_size", FieldKind::Int)}));
  registry.push_back(define_node<SplitWithSizesBackward0Saved, UnsafeSplitWithSizesBackward0>(
      {"UnsafeSplitWithSizesBackward0", "unsafe_split_with_sizes", {"self"}, kVariadic, {},
       "self: split_with_sizes_backward(grads, split_sizes, dim, self.sym_sizes(), self.options())"},
      {saved<&SplitWithSizesBackward0Saved::dim>("dim", FieldKind::Int),
       hidden<&SplitWithSizesBackward0Saved::self_options>("self_options", FieldKind::TensorOptions),
       saved<&SplitWithSizesBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&SplitWithSizesBackward0Saved::split_sizes>("split_sizes", FieldKind::Sizes)}));
  registry.push_back(define_node<NarrowCopyBackward0Saved, NarrowCopyBackward0>(
      {"NarrowCopyBackward0", "narrow_copy", {"self"}, 1, {},
       "self: slice_backward_wrapper(grad, self.sym_sizes(), dim, start, start + length, 1)"},
      {saved<&NarrowCopyBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&NarrowCopyBackward0Saved::length>("length", FieldKind::Int),
       saved<&NarrowCopyBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes),
       saved<&NarrowCopyBackward0Saved::start>("start", FieldKind::Int)}));
  registry.push_back(define_node<Rot90Backward0Saved, Rot90Backward0>(
      {"Rot90Backward0", "rot90", {"self"}, 1, {}, "self: grad.rot90(-k, dims)"},
      {saved<&Rot90Backward0Saved::dims>("dims", FieldKind::IntList),
       saved<&Rot90Backward0Saved::k>("k", FieldKind::Int)}));
  registry.push_back(define_node<BlockDiagBackward0Saved, BlockDiagBackward0>(
      {"BlockDiagBackward0", "block_diag", {"tensors"}, 1, {},
       "tensors: block_diag_backward(grad, to_args_sizes(tensors), to_args_scalartypes(tensors))",
       "tensors_args_scalartypes"},
      {hidden<&BlockDiagBackward0Saved::tensors_args_scalartypes>("tensors_args_scalartypes", FieldKind::DTypeList),
       hidden<&BlockDiagBackward0Saved::tensors_args_sizes>("tensors_args_sizes", FieldKind::SizesList)}));
  registry.push_back(define_node<SelectScatterBackward0Saved, SelectScatterBackward0>(
      {"SelectScatterBackward0", "select_scatter", {"self", "src"}, 1, {},
       "self: select_scatter_symint(grad, zeros_like(src), dim, index)\n"
       "src: grad.select_symint(dim, index)"},
      {saved<&SelectScatterBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&SelectScatterBackward0Saved::index>("index", FieldKind::Int),
       hidden<&SelectScatterBackward0Saved::src_info>("src_info", FieldKind::TypeAndSize)}));
  registry.push_back(define_node<SliceScatterBackward0Saved, SliceScatterBackward0>(
      {"SliceScatterBackward0", "slice_scatter", {"self", "src"}, 1, {},
       "self: slice_scatter_symint(grad, zeros_like(src), dim, start, end, step)\n"
       "src: grad.slice_symint(dim, start, end, step)"},
      {saved<&SliceScatterBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&SliceScatterBackward0Saved::end>("end", FieldKind::Int, true),
       saved<&SliceScatterBackward0Saved::start>("start", FieldKind::Int, true),
       saved<&SliceScatterBackward0Saved::step>("step", FieldKind::Int),
       hidden<&SliceScatterBackward0Saved::src_info>("src_info", FieldKind::TypeAndSize)}));
  registry.push_back(define_node<DiagonalScatterBackward0Saved, DiagonalScatterBackward0>(
      {"DiagonalScatterBackward0", "diagonal_scatter", {"self", "src"}, 1, {},
       "self: diagonal_scatter(grad, zeros_like(src), offset, dim1, dim2)\n"
       "src: grad.diagonal(offset, dim1, dim2)"},
      {saved<&DiagonalScatterBackward0Saved::dim1>("dim1", FieldKind::Int),
       saved<&DiagonalScatterBackward0Saved::dim2>("dim2", FieldKind::Int),
       saved<&DiagonalScatterBackward0Saved::offset>("offset", FieldKind::Int),
       hidden<&DiagonalScatterBackward0Saved::src_info>("src_info", FieldKind::TypeAndSize)}));
  registry.push_back(define_node<AsStridedScatterBackward0Saved, AsStridedScatterBackward0>(
      {"AsStridedScatterBackward0", "as_strided_scatter", {"self", "src"}, 1, {},
       "self: as_strided_scatter_backward(grad, TensorGeometry(self), TensorGeometry(src), size, stride, "
       "storage_offset)\n"
       "src: grad.contiguous().as_strided_symint(size, stride, storage_offset)"},
      {hidden<&AsStridedScatterBackward0Saved::self_geometry>("self_geometry", FieldKind::TensorGeometry),
       saved<&AsStridedScatterBackward0Saved::size>("size", FieldKind::Sizes),
       hidden<&AsStridedScatterBackward0Saved::src_geometry>("src_geometry", FieldKind::TensorGeometry),
       saved<&AsStridedScatterBackward0Saved::storage_offset>("storage_offset", FieldKind::Int, true),
       saved<&AsStridedScatterBackward0Saved::stride>("stride", FieldKind::Sizes)}));
  registry.push_back(define_node<UnfoldBackwardBackward0Saved, UnfoldBackwardBackward0>(
      {"UnfoldBackwardBackward0", "unfold_backward", {"grad_in"}, 1, {}, "grad_in: grad.unfold(dim, size, step)"},
      {saved<&UnfoldBackwardBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&UnfoldBackwardBackward0Saved::size>("size", FieldKind::Int),
       saved<&UnfoldBackwardBackward0Saved::step>("step", FieldKind::Int)}));
  registry.push_back(define_node<Im2ColBackward0Saved, Im2ColBackward0>(
      {"Im2ColBackward0", "im2col", {"self"}, 1, {},
       "self: col2im_symint(grad, {self.sym_size(-2), self.sym_size(-1)}, kernel_size, dilation, padding, stride)"},
      {saved<&Im2ColBackward0Saved::dilation>("dilation", FieldKind::IntList),
       saved<&Im2ColBackward0Saved::kernel_size>("kernel_size", FieldKind::IntList),
       saved<&Im2ColBackward0Saved::padding>("padding", FieldKind::IntList),
       saved<&Im2ColBackward0Saved::self_sym_argsize_minus_1>("self_sym_argsize_minus_1", FieldKind::Int),
       saved<&Im2ColBackward0Saved::self_sym_argsize_minus_2>("self_sym_argsize_minus_2", FieldKind::Int),
       saved<&Im2ColBackward0Saved::stride>("stride", FieldKind::IntList)}));
}

}  // namespace refgrad::nodes
