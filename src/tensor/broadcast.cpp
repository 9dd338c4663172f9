// Broadcasting: broadcast_shapes, expand and broadcast_to (views with stride 0).
#include "kernel.hpp"

namespace refgrad {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (std::size_t i = 0; i < ndim; ++i) {
    // Align from the trailing dim; a missing dim counts as size 1.
    const std::int64_t size_a = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const std::int64_t size_b = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    check(size_a >= 0 && size_b >= 0, "broadcast: shapes ", shape_text(a), " and ", shape_text(b),
          " have a negative size");
    check(size_a == size_b || size_a == 1 || size_b == 1, "broadcast: shapes ", shape_text(a), " and ", shape_text(b),
          " are not broadcastable (size ", size_a, " vs ", size_b, " at dim ", i, ")");
    out[i] = size_a == 1 ? size_b : size_a;
  }
  return out;
}

Tensor expand(const Tensor& self, const Shape& sizes) {
  check(self.defined(), "expand: tensor is undefined");
  check(sizes.size() >= self.sizes().size(), "expand: the number of sizes provided (", sizes.size(),
        ") must be greater or equal to the number of dimensions in the tensor (", self.dim(), ")");
  const std::size_t extra = sizes.size() - self.sizes().size();
  Shape out_sizes(sizes.size()), out_strides(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i < extra) {
      check(sizes[i] >= 0, "expand: the expanded size ", sizes[i], " is not allowed in a leading dimension (",
            shape_text(self.sizes()), " to ", shape_text(sizes), ")");
      out_sizes[i] = sizes[i];
      out_strides[i] = 0;
      continue;
    }
    const std::int64_t own = self.sizes()[i - extra];
    const std::int64_t want = sizes[i] == -1 ? own : sizes[i];
    check(own == want || own == 1, "expand: the expanded size of the tensor (", want,
          ") must match the existing size (", own, ") at non-singleton dimension ", i, ".  Target sizes: ",
          shape_text(sizes), ".  Tensor sizes: ", shape_text(self.sizes()));
    check(want >= 0, "expand: the expanded size ", want, " at dimension ", i, " is negative (", shape_text(self.sizes()),
          " to ", shape_text(sizes), ")");
    out_sizes[i] = want;
    out_strides[i] = own == want ? self.strides()[i - extra] : 0;
  }
  return Tensor(self.storage(), out_sizes, out_strides, self.storage_offset(), self.dtype());
}

Tensor broadcast_to(const Tensor& self, const Shape& sizes) {
  check(self.defined(), "broadcast_to: tensor is undefined");
  if (self.sizes() == sizes) return self;
  return expand(self, sizes);
}

Tensor to(const Tensor& self, DType dtype) { return self.to(dtype); }
Tensor contiguous(const Tensor& self) { return self.contiguous(); }
Tensor clone(const Tensor& self) {
  check(self.defined(), "clone: tensor is undefined");
  return self.clone();
}

}  // namespace refgrad
