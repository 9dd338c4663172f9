// Shape ops: reshape and view, squeeze/unsqueeze, permute/transpose/t,
// narrow/slice/select/as_strided (all views over the same storage), and the
// copying ops flip, cat, stack, repeat, constant_pad_nd, tril and triu.
// split, split_with_sizes and chunk return narrow views.
//
// Views reproduce ATen's sizes, strides and storage offsets exactly, so that a
// program that inspects them (AsStridedBackward0, CopySlices) sees what torch
// would. expand, sum_to, is_expandable_to, contiguous and clone live elsewhere.
#include <algorithm>
#include <optional>

#include <xtensor/xarray.hpp>
#include <xtensor/xpad.hpp>

#include "kernel.hpp"

namespace refgrad {

namespace {

// A tensor over self's storage with new geometry (the Tensor constructor
// checks that it stays inside the storage).
Tensor make_view(const Tensor& self, Shape sizes, Shape strides, std::int64_t storage_offset) {
  return Tensor(self.storage(), std::move(sizes), std::move(strides), storage_offset, self.dtype());
}

void check_defined(const Tensor& self, const char* op) { check(self.defined(), op, ": tensor is undefined"); }

// Marks the dims of a dim list, wrapped; a dim named twice is an error, as in
// ATen's dim_list_to_bitset. An empty list marks nothing.
std::vector<bool> dim_mask(const IntList& dims, std::int64_t ndim, const char* op) {
  std::vector<bool> mask(static_cast<std::size_t>(std::max<std::int64_t>(ndim, 1)), false);
  for (std::int64_t d : dims) {
    const std::int64_t w = wrap_dim(d, ndim, op);
    check(!mask[w], op, ": dim ", w, " appears multiple times in the list of dims");
    mask[w] = true;
  }
  return mask;
}

// Copies `src` (any layout, any dtype) into `dst` (a view of a fresh tensor of
// dst's dtype), converting values as Tensor::to does.
void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const Tensor values = kernel::contiguous_as(src, dst.dtype());
  kernel::dispatch_storage(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* from = values.data_ptr<T>();
    T* base = dst.data_ptr<T>();
    kernel::for_each_offset(dst.sizes(), dst.strides(), [&](std::int64_t offset) { base[offset] = *from++; });
  });
}

// self's storage offset plus `start` steps along dim `dim`, checked: the
// Tensor constructor bounds the strides of a non-empty view only, and an empty
// piece may start one past the end of a size-1 dim, whose stride can be anything.
std::int64_t offset_of(const Tensor& self, std::int64_t dim, std::int64_t start, const char* op) {
  return add_or_fail(self.storage_offset(), multiply_or_fail(start, self.strides()[dim], op), op);
}

// narrow without the argument checks: dim `dim` becomes [start, start + length).
Tensor narrow_view(const Tensor& self, std::int64_t dim, std::int64_t start, std::int64_t length, const char* op) {
  Shape sizes = self.sizes();
  sizes[dim] = length;
  return make_view(self, sizes, self.strides(), offset_of(self, dim, start, op));
}

// ATen's infer_size: replaces the one -1 in `shape` so that it holds `numel`.
Shape infer_size(const Shape& shape, std::int64_t numel, const char* op) {
  std::optional<std::size_t> inferred;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      check(!inferred, op, ": only one dimension can be inferred (shape ", shape_text(shape), ")");
      inferred = i;
    } else {
      check(shape[i] >= 0, op, ": invalid shape dimension ", shape[i], " at index ", i, " of shape ", shape_text(shape));
    }
  }
  // The product of the known sizes; one that overflows int64 cannot hold numel.
  std::int64_t known = 1;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    known = 0;
  } else {
    for (std::int64_t s : shape) {
      if (s == -1) continue;
      check(!__builtin_mul_overflow(known, s, &known), op, ": shape ", shape_text(shape), " is invalid for input of size ",
            numel);
    }
  }
  Shape out = shape;
  if (inferred) {
    // With 0 known elements the -1 could be anything, so torch refuses.
    check(known != 0, op, ": cannot reshape tensor of 0 elements into shape ", shape_text(shape),
          " because the unspecified dimension size -1 can be any value and is ambiguous");
    check(numel % known == 0, op, ": shape ", shape_text(shape), " is invalid for input of size ", numel);
    out[*inferred] = numel / known;
  }
  check(numel_of(out) == numel, op, ": shape ", shape_text(shape), " is invalid for input of size ", numel);
  return out;
}

// ATen's computeStride: the strides that let a tensor of (old_sizes,
// old_strides) be viewed as new_sizes, or nullopt when no view exists.
//
// The old dims are grouped into "chunks": maximal runs of dims that are
// contiguous with each other (stride[d-1] == size[d] * stride[d]; size-1 dims
// never break a run). A view exists iff the new dims can be grouped, from the
// right, into runs whose element counts match those chunks one for one; within
// a run the new strides are contiguous, starting at the chunk's innermost
// stride.
std::optional<Shape> compute_stride(const Shape& old_sizes, const Shape& old_strides, const Shape& new_sizes) {
  const auto new_ndim = static_cast<std::int64_t>(new_sizes.size());
  if (old_sizes.empty()) return Shape(new_sizes.size(), 1);  // a 0-d tensor has one element
  const std::int64_t numel = numel_of(old_sizes);
  if (numel == 0) {
    // No element is ever addressed: keep the old strides when the shape does
    // not change, else any strides do and torch picks contiguous ones.
    if (old_sizes == new_sizes) return old_strides;
    return contiguous_strides(new_sizes);
  }
  Shape new_strides(new_sizes.size(), 0);
  std::int64_t view_d = new_ndim - 1;
  std::int64_t chunk_base_stride = old_strides.back();  // stride of the chunk's innermost dim
  std::int64_t tensor_numel = 1;                        // elements in the old chunk so far
  std::int64_t view_numel = 1;                          // elements in the new run so far
  for (auto tensor_d = static_cast<std::int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    const bool chunk_ends =
        tensor_d == 0 || (old_sizes[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    // Take new dims (and any size-1 dims) until they hold the chunk's elements.
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;  // a new dim straddles two chunks
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// Iterates the (start, length) pieces of split_with_sizes.
// The lengths must be non-negative and sum to the size of dim `dim`.
TensorList split_pieces(const Tensor& self, std::int64_t dim, const IntList& lengths, const char* op) {
  TensorList out;
  out.reserve(lengths.size());
  std::int64_t start = 0;
  for (std::int64_t length : lengths) {
    out.push_back(narrow_view(self, dim, start, length, op));
    start += length;
  }
  return out;
}

// A list of `pieces` views is allocated before any of them: a count taken
// from a program (chunks of an empty dim) or a huge expanded dim split in
// ones must fail here rather than with std::bad_alloc.
void check_piece_count(std::int64_t pieces, const Tensor& self, const char* op) {
  const std::size_t bytes_per_piece = sizeof(Tensor) + 2 * sizeof(std::int64_t) * self.sizes().size();
  check(static_cast<std::uint64_t>(pieces) <= memory_limit() / bytes_per_piece, op, ": ", pieces,
        " pieces of a tensor of shape ", shape_text(self.sizes()), " would need more than the memory limit of ",
        memory_limit(), " bytes");
}

}  // namespace

// ------------------------------------------------------- reshape and view ---

Tensor view(const Tensor& self, const Shape& shape) {
  check_defined(self, "view");
  const Shape sizes = infer_size(shape, self.numel(), "view");
  const std::optional<Shape> strides = compute_stride(self.sizes(), self.strides(), sizes);
  check(strides.has_value(), "view: view size is not compatible with input tensor's size and stride (at least one "
        "dimension spans across two contiguous subspaces). Use .reshape(...) instead. (input shape ",
        shape_text(self.sizes()), ", strides ", shape_text(self.strides()), ", view shape ", shape_text(sizes), ")");
  return make_view(self, sizes, *strides, self.storage_offset());
}

Tensor reshape(const Tensor& self, const Shape& shape) {
  check_defined(self, "reshape");
  const Shape sizes = infer_size(shape, self.numel(), "reshape");
  if (const std::optional<Shape> strides = compute_stride(self.sizes(), self.strides(), sizes))
    return make_view(self, sizes, *strides, self.storage_offset());
  // No view exists: reshape a contiguous copy.
  const Tensor copy = self.clone();
  return make_view(copy, sizes, contiguous_strides(sizes), 0);
}

// ---------------------------------------------------- squeeze, unsqueeze ---

Tensor squeeze(const Tensor& self) {
  check_defined(self, "squeeze");
  Shape sizes, strides;
  for (std::int64_t d = 0; d < self.dim(); ++d) {
    if (self.sizes()[d] == 1) continue;
    sizes.push_back(self.sizes()[d]);
    strides.push_back(self.strides()[d]);
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor squeeze(const Tensor& self, const IntList& dims) {
  check_defined(self, "squeeze");
  // Dims of size other than 1 are left alone, as in torch.
  const std::vector<bool> mask = dim_mask(dims, self.dim(), "squeeze");
  Shape sizes, strides;
  for (std::int64_t d = 0; d < self.dim(); ++d) {
    if (mask[d] && self.sizes()[d] == 1) continue;
    sizes.push_back(self.sizes()[d]);
    strides.push_back(self.strides()[d]);
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor squeeze(const Tensor& self, std::int64_t dim) { return squeeze(self, IntList{dim}); }

Tensor unsqueeze(const Tensor& self, std::int64_t dim) {
  check_defined(self, "unsqueeze");
  const std::int64_t d = wrap_dim(dim, self.dim() + 1, "unsqueeze");
  Shape sizes = self.sizes(), strides = self.strides();
  // The new dim's stride is that of a dim just outside dim d (ATen's
  // inferUnsqueezeGeometry): size[d] * stride[d], or 1 when it goes last.
  const std::int64_t stride = d >= self.dim() ? 1 : multiply_or_fail(sizes[d], strides[d], "unsqueeze");
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return make_view(self, sizes, strides, self.storage_offset());
}

// ------------------------------------------------ permute, transpose, t ---

Tensor permute(const Tensor& self, const IntList& dims) {
  check_defined(self, "permute");
  check(static_cast<std::int64_t>(dims.size()) == self.dim(), "permute: number of dims in the permutation ",
        shape_text(dims), " does not match the number of dimensions of the input (", self.dim(), ", shape ",
        shape_text(self.sizes()), ")");
  std::vector<bool> seen(dims.size(), false);
  Shape sizes(dims.size()), strides(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = wrap_dim(dims[i], self.dim(), "permute");
    check(!seen[d], "permute: duplicate dims are not allowed in ", shape_text(dims));
    seen[d] = true;
    sizes[i] = self.sizes()[d];
    strides[i] = self.strides()[d];
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor transpose(const Tensor& self, std::int64_t dim0, std::int64_t dim1) {
  check_defined(self, "transpose");
  const std::int64_t d0 = wrap_dim(dim0, self.dim(), "transpose");
  const std::int64_t d1 = wrap_dim(dim1, self.dim(), "transpose");
  Shape sizes = self.sizes(), strides = self.strides();
  if (self.dim() > 0) {
    std::swap(sizes[d0], sizes[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor t(const Tensor& self) {
  check_defined(self, "t");
  check(self.dim() <= 2, "t: expects a tensor with <= 2 dimensions, but self is ", self.dim(), "D (shape ",
        shape_text(self.sizes()), ")");
  if (self.dim() < 2) return make_view(self, self.sizes(), self.strides(), self.storage_offset());
  return transpose(self, 0, 1);
}

// ------------------------------------------ narrow, slice, select, as_strided ---

Tensor narrow(const Tensor& self, std::int64_t dim, std::int64_t start, std::int64_t length) {
  check_defined(self, "narrow");
  check(self.dim() > 0, "narrow: cannot be applied to a 0-dim tensor");
  const std::int64_t d = wrap_dim(dim, self.dim(), "narrow");
  const std::int64_t size = self.sizes()[d];
  check(length >= 0, "narrow: length must be non-negative, got ", length);
  check(start >= -size && start <= size, "narrow: start out of range (expected to be in range of [", -size, ", ",
        size, "], but got ", start, ")");
  if (start < 0) start += size;
  check(length <= size - start, "narrow: start (", start, ") + length (", length, ") exceeds dimension size (",
        size, ") of dim ", d, " (shape ", shape_text(self.sizes()), ")");
  return narrow_view(self, d, start, length, "narrow");
}

Tensor slice(const Tensor& self, std::int64_t dim, std::optional<std::int64_t> start,
             std::optional<std::int64_t> end, std::int64_t step) {
  check_defined(self, "slice");
  check(self.dim() > 0, "slice: cannot be applied to a 0-dim tensor");
  const std::int64_t d = wrap_dim(dim, self.dim(), "slice");
  check(step > 0, "slice: step must be positive, got ", step);
  const std::int64_t size = self.sizes()[d];
  // Python's clamping: negative bounds count from the end, then both are
  // clamped into [0, size] and an empty range starts at `start`.
  std::int64_t begin = start.value_or(0);
  std::int64_t stop = end.value_or(size);
  if (begin < 0) begin += size;
  if (stop < 0) stop += size;
  begin = std::clamp<std::int64_t>(begin, 0, size);
  stop = std::clamp<std::int64_t>(stop, begin, size);
  Shape sizes = self.sizes(), strides = self.strides();
  sizes[d] = stop == begin ? 0 : (stop - begin - 1) / step + 1;  // ceil without overflow for a huge step
  strides[d] = multiply_or_fail(self.strides()[d], step, "slice");
  return make_view(self, sizes, strides, offset_of(self, d, begin, "slice"));
}

Tensor select(const Tensor& self, std::int64_t dim, std::int64_t index) {
  check_defined(self, "select");
  check(self.dim() > 0, "select: cannot be applied to a 0-dim tensor");
  const std::int64_t d = wrap_dim(dim, self.dim(), "select");
  const std::int64_t size = self.sizes()[d];
  check(index >= -size && index < size, "select: index ", index, " out of range for tensor of size ",
        shape_text(self.sizes()), " at dimension ", d);
  if (index < 0) index += size;
  Shape sizes = self.sizes(), strides = self.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(self, sizes, strides, offset_of(self, d, index, "select"));
}

Tensor as_strided(const Tensor& self, const Shape& sizes, const Shape& strides,
                  std::optional<std::int64_t> storage_offset) {
  check_defined(self, "as_strided");
  check(sizes.size() == strides.size(), "as_strided: mismatch in length of strides ", shape_text(strides), " and shape ",
        shape_text(sizes));
  for (std::int64_t s : sizes) check(s >= 0, "as_strided: negative size in shape ", shape_text(sizes));
  for (std::int64_t s : strides)
    check(s >= 0, "as_strided: negative strides are not supported, got strides ", shape_text(strides));
  const std::int64_t offset = storage_offset.value_or(self.storage_offset());
  check(offset >= 0, "as_strided: negative storage offset ", offset);
  if (numel_of(sizes) > 0) {
    // The last element addressed is offset + sum((size - 1) * stride); it must
    // lie inside the storage (counted in elements of self's dtype). Computed
    // with overflow checks, since the sizes come from the user.
    std::int64_t needed = 0;
    bool overflow = __builtin_add_overflow(offset, 1, &needed);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::int64_t reach = 0;
      overflow = overflow || __builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) ||
                 __builtin_add_overflow(needed, reach, &needed);
    }
    const auto available = static_cast<std::int64_t>(self.storage()->nbytes() / element_size(self.dtype()));
    check(!overflow && needed <= available, "as_strided: sizes ", shape_text(sizes), ", strides ", shape_text(strides),
          " and storage offset ", offset, " are out of bounds for a storage of ", available, " elements",
          overflow ? " (the extent overflows)" : concat(" (they need ", needed, ")"));
  }
  return make_view(self, sizes, strides, offset);
}

// ------------------------------------------------------------------- flip ---

Tensor flip(const Tensor& self, const IntList& dims) {
  check_defined(self, "flip");
  const std::vector<bool> mask = dim_mask(dims, self.dim(), "flip");
  Tensor out = empty(self.sizes(), self.dtype());
  if (out.numel() == 0) return out;
  // Read self through a reversed walk: a flipped dim starts at its last
  // element and steps by -stride (for_each_offset allows negative strides).
  Shape strides = self.strides();
  std::int64_t start = 0;
  for (std::int64_t d = 0; d < self.dim(); ++d) {
    if (!mask[d]) continue;
    start += (self.sizes()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  kernel::dispatch_storage(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = self.data_ptr<T>() + start;
    T* dst = out.data_ptr<T>();
    kernel::for_each_offset(self.sizes(), strides, [&](std::int64_t offset) { *dst++ = src[offset]; });
  });
  return out;
}

// ------------------------------------------------------------ cat, stack ---

Tensor cat(const TensorList& tensors, std::int64_t dim) {
  check(!tensors.empty(), "cat: expected a non-empty list of Tensors");
  DType dtype = tensors.front().dtype();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check(tensors[i].defined(), "cat: tensor ", i, " is undefined");
    check(tensors[i].dim() > 0, "cat: zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    dtype = promote_types(dtype, tensors[i].dtype());  // every input counts, even skipped ones
  }
  // Legacy behaviour kept by torch.cat: 1-d empty tensors (shape [0]) are
  // skipped whatever the other shapes are.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; };
  const auto reference = std::find_if_not(tensors.begin(), tensors.end(), skipped);
  if (reference == tensors.end()) return empty({0}, dtype);
  const std::int64_t ndim = reference->dim();
  const std::int64_t d = wrap_dim(dim, ndim, "cat");
  Shape sizes = reference->sizes();
  sizes[d] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (skipped(t)) continue;
    check(t.dim() == ndim, "cat: tensors must have same number of dimensions: got ", ndim, " and ", t.dim(),
          " (tensor number ", i, " in the list has shape ", shape_text(t.sizes()), ")");
    for (std::int64_t k = 0; k < ndim; ++k) {
      check(k == d || t.sizes()[k] == reference->sizes()[k], "cat: sizes of tensors must match except in dimension ",
            d, ". Expected size ", reference->sizes()[k], " but got size ", t.sizes()[k], " in dimension ", k,
            " for tensor number ", i, " in the list (shapes ", shape_text(reference->sizes()), " and ", shape_text(t.sizes()), ")");
    }
    sizes[d] = add_or_fail(sizes[d], t.sizes()[d], "cat");
  }
  Tensor out = empty(sizes, dtype);
  std::int64_t start = 0;
  for (const Tensor& t : tensors) {
    if (skipped(t)) continue;
    copy_into(narrow_view(out, d, start, t.sizes()[d], "cat"), t);
    start += t.sizes()[d];
  }
  return out;
}

Tensor stack(const TensorList& tensors, std::int64_t dim) {
  check(!tensors.empty(), "stack: expects a non-empty TensorList");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    check(tensors[i].sizes() == tensors[0].sizes(), "stack: expects each tensor to be equal size, but got ",
          shape_text(tensors[0].sizes()), " at entry 0 and ", shape_text(tensors[i].sizes()), " at entry ", i);
  }
  const std::int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  TensorList unsqueezed;
  unsqueezed.reserve(tensors.size());
  for (const Tensor& t : tensors) unsqueezed.push_back(unsqueeze(t, d));
  return cat(unsqueezed, d);
}

// ------------------------------------------------- split, chunk (views) ---

TensorList split(const Tensor& self, std::int64_t split_size, std::int64_t dim) {
  check_defined(self, "split");
  check(self.dim() > 0, "split: expects at least a 1-dimensional tensor");
  check(split_size >= 0, "split: expects split_size be non-negative, but got split_size=", split_size);
  const std::int64_t d = wrap_dim(dim, self.dim(), "split");
  const std::int64_t size = self.sizes()[d];
  check(split_size != 0 || size == 0, "split: split_size can only be 0 if dimension size is 0, but got dimension size of ",
        size);
  // ceil(size / split_size) pieces, at least one; the last holds the rest.
  const std::int64_t pieces = size == 0 ? 1 : (size - 1) / split_size + 1;
  check_piece_count(pieces, self, "split");
  IntList lengths(static_cast<std::size_t>(pieces), split_size);
  lengths.back() = size - split_size * (pieces - 1);
  return split_pieces(self, d, lengths, "split");
}

TensorList split_with_sizes(const Tensor& self, const IntList& split_sizes, std::int64_t dim) {
  check_defined(self, "split_with_sizes");
  check(self.dim() > 0, "split_with_sizes: expects at least a 1-dimensional tensor");
  const std::int64_t d = wrap_dim(dim, self.dim(), "split_with_sizes");
  std::int64_t total = 0;
  bool overflows = false;  // then the sizes sum to more than any dim holds
  for (std::int64_t s : split_sizes) {
    check(s >= 0, "split_with_sizes: expects split_sizes have only non-negative entries, but got split_sizes=",
          shape_text(split_sizes));
    overflows = __builtin_add_overflow(total, s, &total) || overflows;
  }
  check(!overflows && total == self.sizes()[d], "split_with_sizes: expects split_sizes to sum exactly to ",
        self.sizes()[d], " (input tensor's size at dimension ", d, "), but got split_sizes=", shape_text(split_sizes));
  check_piece_count(static_cast<std::int64_t>(split_sizes.size()), self, "split_with_sizes");
  return split_pieces(self, d, split_sizes, "split_with_sizes");
}

TensorList chunk(const Tensor& self, std::int64_t chunks, std::int64_t dim) {
  check_defined(self, "chunk");
  check(self.dim() > 0, "chunk: expects at least a 1-dimensional tensor");
  check(chunks > 0, "chunk: expects `chunks` to be greater than 0, got: ", chunks);
  const std::int64_t d = wrap_dim(dim, self.dim(), "chunk");
  const std::int64_t size = self.sizes()[d];
  // Pieces of ceil(size / chunks), so there may be fewer than `chunks`; an
  // empty dim still gives `chunks` empty pieces.
  if (size == 0) {
    check_piece_count(chunks, self, "chunk");
    return split_pieces(self, d, IntList(static_cast<std::size_t>(chunks), 0), "chunk");
  }
  return split(self, (size - 1) / chunks + 1, d);
}

// ---------------------------------------------------------------- repeat ---

Tensor repeat(const Tensor& self, const IntList& repeats) {
  check_defined(self, "repeat");
  check(static_cast<std::int64_t>(repeats.size()) >= self.dim(), "repeat: number of dimensions of repeat dims (",
        repeats.size(), ") can not be smaller than number of dimensions of tensor (", self.dim(), ", shape ",
        shape_text(self.sizes()), ")");
  for (std::int64_t r : repeats) check(r >= 0, "repeat: repeats ", shape_text(repeats), " must be non-negative");
  // Leading size-1 dims make self as long as `repeats`; then dim d is tiled
  // repeats[d] times.
  const std::size_t extra = repeats.size() - self.sizes().size();
  Shape padded_sizes(extra, 1), padded_strides(extra, 1);
  padded_sizes.insert(padded_sizes.end(), self.sizes().begin(), self.sizes().end());
  padded_strides.insert(padded_strides.end(), self.strides().begin(), self.strides().end());
  Shape sizes(repeats.size());
  for (std::size_t i = 0; i < repeats.size(); ++i) sizes[i] = multiply_or_fail(padded_sizes[i], repeats[i], "repeat");
  if (repeats.empty()) return self.clone();  // a 0-d tensor repeated over no dims
  Tensor out = empty(sizes, self.dtype());
  if (out.numel() == 0) return out;
  // Dim d of out, seen as [repeats[d], size[d]], reads self at stride 0 along
  // the repeats: a row-major walk of that view over self fills out in order.
  // (xt::tile read the uninitialized parts of its own result.)
  Shape tiled_sizes, tiled_strides;
  for (std::size_t i = 0; i < repeats.size(); ++i) {
    tiled_sizes.insert(tiled_sizes.end(), {repeats[i], padded_sizes[i]});
    tiled_strides.insert(tiled_strides.end(), {0, padded_strides[i]});
  }
  kernel::dispatch_storage(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = self.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    kernel::for_each_offset(tiled_sizes, tiled_strides, [&](std::int64_t offset) { *dst++ = src[offset]; });
  });
  return out;
}

// ------------------------------------------------------- constant_pad_nd ---

Tensor constant_pad_nd(const Tensor& self, const IntList& pad, Scalar value) {
  check_defined(self, "constant_pad_nd");
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(constant_pad_nd(kernel::to_opmath(self), pad, value), self.dtype());
  if (is_complex(self.dtype()))  // a real fill value: the imaginary part is padded with 0
    return complex(constant_pad_nd(real(self), pad, value), constant_pad_nd(imag(self), pad, Scalar(0.0)));
  check(pad.size() % 2 == 0, "constant_pad_nd: length of pad must be even but instead it equals ", pad.size());
  const auto padded_dims = static_cast<std::int64_t>(pad.size() / 2);
  check(padded_dims <= self.dim(), "constant_pad_nd: length of pad should be no more than twice the number of "
        "dimensions of the input. Pad length is ", pad.size(), " while the input has ", self.dim(),
        " dimensions (shape ", shape_text(self.sizes()), ")");
  // Pairs run from the last dim backwards: pad[2k], pad[2k+1] are the
  // (before, after) amounts of dim ndim-1-k. Negative amounts crop first
  // (a narrow view); the positive ones are then added by xt::pad.
  const std::int64_t ndim = self.dim();
  Tensor cropped = self;
  std::vector<std::vector<std::size_t>> widths(static_cast<std::size_t>(ndim), std::vector<std::size_t>{0, 0});
  bool any_padding = false;
  for (std::int64_t k = 0; k < padded_dims; ++k) {
    const std::int64_t d = ndim - 1 - k;
    const std::int64_t before = pad[2 * k], after = pad[2 * k + 1];
    const std::int64_t size = self.sizes()[d];
    // size + min(before, 0) + min(after, 0): an overflow is below INT64_MIN, so negative too.
    std::int64_t kept = 0;
    const bool overflows = __builtin_add_overflow(size, std::min<std::int64_t>(before, 0), &kept) ||
                           __builtin_add_overflow(kept, std::min<std::int64_t>(after, 0), &kept);
    check(!overflows && kept >= 0, "constant_pad_nd: the input size ", size, ", plus negative padding ", before, " and ",
          after, " resulted in a negative output size, which is invalid. Check dimension ", d, " of your input (shape ",
          shape_text(self.sizes()), ")");
    cropped = narrow_view(cropped, d, std::max<std::int64_t>(-before, 0), kept, "constant_pad_nd");
    widths[d] = {static_cast<std::size_t>(std::max<std::int64_t>(before, 0)),
                 static_cast<std::size_t>(std::max<std::int64_t>(after, 0))};
    any_padding = any_padding || before > 0 || after > 0;
  }
  if (!any_padding) return cropped.clone();
  Shape sizes = cropped.sizes();
  for (std::int64_t d = 0; d < ndim; ++d) {
    for (std::size_t width : widths[d])
      sizes[d] = add_or_fail(sizes[d], static_cast<std::int64_t>(width), "constant_pad_nd");
  }
  return kernel::dispatch(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The fill value is cast to the tensor's dtype (1.7 pads an int64 tensor with 1).
    const T fill = kernel::scalar_to<T>(value, "constant_pad_nd", "value");
    Tensor out = full(sizes, Scalar(fill), self.dtype());
    if (cropped.numel() == 0) return out;  // nothing to place: all padding
    const xt::xarray<T> padded = xt::pad(kernel::adapt<T>(kernel::dense(cropped)), widths, xt::pad_mode::constant, fill);
    std::copy(padded.storage().begin(), padded.storage().end(), out.data_ptr<T>());
    return out;
  });
}

// ------------------------------------------------------------ tril, triu ---

namespace {

// Copies self, zeroing the elements (i, j) of each trailing matrix for which
// keep(j - i) is false. j - i is the diagonal the element lies on.
template <class Keep>
Tensor triangle(const Tensor& self, const char* op, Keep keep) {
  check_defined(self, op);
  check(self.dim() >= 2, op, ": input tensor must have at least 2 dimensions (shape ", shape_text(self.sizes()), ")");
  if (kernel::is_storage_format(self)) return kernel::rounded_to(triangle(kernel::to_opmath(self), op, keep), self.dtype());
  Tensor out = self.clone();
  const std::int64_t rows = self.sizes()[self.dim() - 2], cols = self.sizes()[self.dim() - 1];
  if (out.numel() == 0) return out;
  const std::int64_t matrices = out.numel() / (rows * cols);
  kernel::dispatch_with_complex(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = out.data_ptr<T>();
    for (std::int64_t m = 0; m < matrices; ++m)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          if (!keep(j - i)) data[(m * rows + i) * cols + j] = T(0);
  });
  return out;
}

}  // namespace

Tensor tril(const Tensor& self, std::int64_t diagonal) {
  return triangle(self, "tril", [diagonal](std::int64_t d) { return d <= diagonal; });
}

Tensor triu(const Tensor& self, std::int64_t diagonal) {
  return triangle(self, "triu", [diagonal](std::int64_t d) { return d >= diagonal; });
}

}  // namespace refgrad
