// Engine nodes: validate_outputs, AccumulateGrad, CopyBackwards, CopySlices,
// GraphRoot (include/refgrad/engine.hpp documents each one's semantics).
#include "refgrad/engine.hpp"

#include <algorithm>
#include <sstream>
#include <string>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad {
namespace {

// A shape as PyTorch prints IntArrayRef in messages: "[2, 3]".
std::string torch_shape(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

// The storage positions (relative to `offset`) a geometry addresses, in
// row-major order of its elements, as a flat int64 tensor.
Tensor storage_positions(const Shape& sizes, const Shape& strides, std::int64_t offset, const char* which) {
  std::int64_t extent = 0, span = 0;  // _min_storage_size
  bool overflow = __builtin_add_overflow(offset, 1, &extent);
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return zeros({0}, DType::Int64);
    overflow = overflow || __builtin_mul_overflow(sizes[d] - 1, strides[d], &span) ||
               __builtin_add_overflow(extent, span, &extent);
  }
  check(!overflow, "CopySlices: ", which, " (sizes ", shape_text(sizes), ", strides ", shape_text(strides),
        ", storage offset ", offset, ") addresses more storage than int64 can count");
  return reshape(as_strided(arange(Scalar(extent), DType::Int64), sizes, strides, offset), {-1});
}

// True when two elements of the geometry share a storage position (copy_
// refuses to write into such a tensor).
bool overlaps_itself(const Tensor& positions) {
  std::vector<std::int64_t> sorted = positions.to_vector<std::int64_t>();
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
}

void check_geometry(const TensorGeometry& geometry, const char* which) {
  check(geometry.sizes.size() == geometry.strides.size(), "CopySlices: ", which, " has sizes ", shape_text(geometry.sizes),
        " but strides ", shape_text(geometry.strides));
  for (std::size_t d = 0; d < geometry.sizes.size(); ++d)
    check(geometry.sizes[d] >= 0 && geometry.strides[d] >= 0, "CopySlices: ", which, " has sizes ",
          shape_text(geometry.sizes), " and strides ", shape_text(geometry.strides), ": negative entries");
  check(geometry.storage_offset >= 0, "CopySlices: ", which, " has a negative storage offset ",
        geometry.storage_offset);
  nodes::check_sizes("CopySlices", which, geometry.sizes);
}

// torch.can_cast: what an in-place op may write into a tensor of dtype `to`
// (no complex value into a real tensor, no floating value into an integral
// one, nothing but bool into bool).
bool can_cast(DType from, DType to) {
  if (is_complex(from) && !is_complex(to)) return false;
  if (is_floating_point(from) && !is_floating_point(to) && !is_complex(to)) return false;
  return from == DType::Bool || to != DType::Bool;
}

}  // namespace

// ------------------------------------------------------- validate_outputs ---

Grads validate_outputs(const Grads& grads, const std::vector<std::optional<InputMetadata>>& edges,
                       std::string_view node_name) {
  // The roots' pass words its messages without the prefix (Engine::execute's format_error is the identity).
  const std::string prefix = node_name.empty() ? "" : "Function " + std::string(node_name) + " returned an ";
  check(grads.size() == edges.size(), prefix, "invalid number of gradients - expected ", edges.size(),
        ", but got ", grads.size());
  Grads out = grads;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!edges[i] || !out[i]) continue;
    const InputMetadata& metadata = *edges[i];
    Tensor grad = *out[i];
    // maybe_reduce: trailing dims equal or 1 in the metadata, which may have fewer dims.
    if (grad.sizes() != metadata.shape) {
      check(is_expandable_to(metadata.shape, grad.sizes()), prefix, "invalid gradient at index ", i, " - got ",
            torch_shape(grad.sizes()), " but expected shape compatible with ", torch_shape(metadata.shape));
      grad = sum_to(grad, metadata.shape);
    }
    if (metadata.grad_dtype && grad.dtype() != *metadata.grad_dtype) grad = to(grad, *metadata.grad_dtype);
    if (grad.device() != metadata.device && !metadata.is_tensor_subclass) {
      check(grad.dim() != 0, prefix, "invalid gradient at index ", i, " - a 0-dim gradient on ",
            device_name(grad.device()), " would be moved to ", device_name(metadata.device),
            ", and refgrad computes on cpu only");
      check(false, prefix, "invalid gradient at index ", i, " - expected device ", device_name(metadata.device),
            " but got ", device_name(grad.device()));
    }
    check(grad.is_floating_point() || is_complex(grad.dtype()), prefix, "invalid gradient at index ", i,
          " - expected a floating or complex dtype, got ",
          dtype_name(grad.dtype()));
    out[i] = grad;
  }
  return out;
}

// --------------------------------------------------------- AccumulateGrad ---

Tensor accumulate_grad(const std::optional<Tensor>& old_grad, const Tensor& new_grad) {
  if (!new_grad.defined()) return old_grad.value_or(Tensor());
  if (!old_grad || !old_grad->defined()) return contiguous(new_grad);
  check(is_expandable_to(new_grad.sizes(), old_grad->sizes()), "AccumulateGrad: the new gradient of shape ",
        shape_text(new_grad.sizes()), " does not broadcast to the existing .grad of shape ", shape_text(old_grad->sizes()));
  // `.grad += new_grad` is in place: its result type must fit the old grad's dtype.
  const DType result = result_type(*old_grad, new_grad);
  check(can_cast(result, old_grad->dtype()), "AccumulateGrad: the new gradient of dtype ", dtype_name(new_grad.dtype()),
        " cannot be added in place to the existing .grad of dtype ", dtype_name(old_grad->dtype()), " (result type ",
        dtype_name(result), " can't be cast to ", dtype_name(old_grad->dtype()), ")");
  return to(add(*old_grad, new_grad), old_grad->dtype());
}

// ----------------------------------------------------------- CopySlices ---

Grads copy_slices(const Grads& grads, const TensorGeometry& base, const TensorGeometry& view, const NodeDef& fn,
                  const BoundSaved& fn_saved, const Need& need) {
  const std::size_t num_outputs = fn.schema.inputs.size();
  check(grads.size() == 1, "CopySlices: expected 1 incoming grad, got ", grads.size());
  check(need.size() == num_outputs, "CopySlices: the need mask has ", need.size(), " entries, ", fn.schema.name,
        " has ", num_outputs, " inputs");
  // fn is the node of an in-place op: one output, and no Tensor[] input.
  check(fn.schema.num_grads == 1 && fn.schema.list_length_field.empty(), "CopySlices: ", fn.schema.name,
        " cannot be the node of an in-place op on a view (it takes ",
        fn.schema.num_grads == kVariadic ? std::string("a variable number of") : std::to_string(fn.schema.num_grads),
        " incoming grads", fn.schema.list_length_field.empty() ? "" : " and a Tensor[] input", ")");
  if (!grads[0]) return Grads(num_outputs);
  const Tensor& grad = *grads[0];
  check_geometry(base, "the base");
  check_geometry(view, "the view");
  check(is_expandable_to(grad.sizes(), base.sizes), "CopySlices: grad of shape ", shape_text(grad.sizes()),
        " does not broadcast to the base's shape ", shape_text(base.sizes));
  const std::int64_t view_offset = view.storage_offset - base.storage_offset;
  check(view_offset >= 0, "CopySlices: the view's storage offset ", view.storage_offset,
        " is before the base's ", base.storage_offset);

  // `result` lives in a flat storage covering both geometries; base_at and
  // view_at are the storage positions of base's and the view's elements.
  const Tensor base_at = storage_positions(base.sizes, base.strides, 0, "the base");
  const Tensor view_at = storage_positions(view.sizes, view.strides, view_offset, "the view");
  check(!overlaps_itself(base_at), "CopySlices: the base's geometry (sizes ", shape_text(base.sizes), ", strides ",
        shape_text(base.strides), ") has elements sharing a memory location");
  check(!overlaps_itself(view_at), "CopySlices: the view's geometry (sizes ", shape_text(view.sizes), ", strides ",
        shape_text(view.strides), ") has elements sharing a memory location");
  // new_empty_strided(base) allocates base's extent; the view must lie in it.
  const std::int64_t extent = base_at.numel() > 0 ? max(base_at).item<std::int64_t>() + 1 : 0;
  check(view_at.numel() == 0 || max(view_at).item<std::int64_t>() < extent, "CopySlices: the view (sizes ",
        shape_text(view.sizes), ", strides ", shape_text(view.strides), ", storage offset ", view.storage_offset,
        ") reaches outside the base (sizes ", shape_text(base.sizes), ", strides ", shape_text(base.strides),
        ", storage offset ", base.storage_offset, ")");
  // result = empty_strided(base); result.copy_(grad)
  Tensor storage = index_put(zeros({extent}, grad.dtype()), {base_at},
                             reshape(contiguous(broadcast_to(grad, base.sizes)), {-1}));
  // grad_slice.clone(): gathering makes the contiguous copy
  const Tensor grad_slice = reshape(index(storage, {view_at}), view.sizes);
  const Grads res = fn.apply({grad_slice}, fn_saved.get(), need);

  Grads grad_inputs(num_outputs);
  for (std::size_t i = 0; i < std::min(res.size(), num_outputs); ++i) {
    if (!need[i] || !res[i]) continue;
    if (i > 0) {
      grad_inputs[i] = res[i];
      continue;
    }
    // grad_slice.copy_(res[0]): broadcast to the view, cast to grad's dtype.
    check(is_expandable_to(res[0]->sizes(), view.sizes), "CopySlices: ", fn.schema.name,
          " returned a gradient of shape ", shape_text(res[0]->sizes()), " for the view of shape ", shape_text(view.sizes));
    const Tensor values = reshape(contiguous(broadcast_to(to(*res[0], grad.dtype()), view.sizes)), {-1});
    storage = index_put(storage, {view_at}, values);
    grad_inputs[0] = as_strided(storage, base.sizes, base.strides, 0);
  }
  return grad_inputs;
}

// -------------------------------------------------------------- GraphRoot ---

Grads graph_root(const Grads& roots) { return roots; }

namespace nodes {
namespace {

// CopyBackwards — self.copy_(src) (functions/tensor.cpp, CopyBackwards_apply_functional)
//   self: zeros_like(grad)
//   src:  grad.to(src_options) (a complex grad into a real src keeps its real
//         part, as torch's .to does)
struct CopyBackwardsSaved {
  TensorOptions src_options;
};

Grads CopyBackwards(const Grads& grads, const CopyBackwardsSaved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = zeros_like(grad);
  if (need[1]) {
    const Device device = saved.src_options.device.value_or(Device::CPU);
    check(device == grad.device(), "CopyBackwards: the grad would be moved to ", device_name(device),
          ", and refgrad computes on cpu only");
    out[1] = to(grad, saved.src_options.dtype.value_or(grad.dtype()));
  }
  return out;
}

}  // namespace

void add_engine_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<CopyBackwardsSaved, CopyBackwards>(
      {"CopyBackwards", "copy_", {"self", "src"}, 1, {},
       "self: zeros_like(grad)\n"
       "src: grad.to(src_options)"},
      {hidden<&CopyBackwardsSaved::src_options>("src_options", FieldKind::TensorOptions)}));
}

}  // namespace nodes

}  // namespace refgrad
