// The autograd engine's own nodes, as pure functions: validate_outputs (what
// the engine does to every node's outputs), AccumulateGrad, CopyBackwards,
// CopySlices and GraphRoot. Sources: torch/csrc/autograd/engine.cpp
// (validate_outputs_impl), input_metadata.cpp (maybe_reduce),
// functions/accumulate_grad.h, functions/tensor.cpp, functions/basic_ops.h;
// behaviour checked against torch 2.13 in tests/nodes/test_engine.cpp.
//
// Devices: refgrad computes on CPU only, so a Device is metadata. These
// functions compare devices literally, as PyTorch does, and raise where
// PyTorch would move a tensor to a non-CPU device; an interpreter replaying a
// program recorded on another device maps its devices to CPU when it loads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "refgrad/nodes.hpp"

namespace refgrad {

// PyTorch's InputMetadata: what an edge records about the input it leads to,
// and what validate_outputs checks that input's gradient against. Layout and
// nestedness are left out (refgrad tensors are strided and not nested).
struct InputMetadata {
  DType dtype = DType::Float32;
  Shape shape;
  Device device = Device::CPU;
  bool is_tensor_subclass = false;
  // Tensor.grad_dtype (torch >= 2.9): the dtype the gradient is cast to. It
  // is the input's dtype unless set otherwise; nullopt (grad_dtype = None)
  // accepts a gradient of any dtype.
  std::optional<DType> grad_dtype = dtype;
  bool operator==(const InputMetadata& other) const = default;
};

// validate_outputs(edges' metadata, grads, "Function <node_name> returned an ...").
// For each grad i:
//   - no metadata (an invalid edge) or an undefined grad: passed on unchanged;
//   - shape: equal passes; metadata.shape expandable to the grad's shape
//     (is_expandable_to) -> sum_to(grad, metadata.shape); anything else raises
//     "Function <node_name> returned an invalid gradient at index i - got [2, 3]
//     but expected shape compatible with [3, 2]";
//   - dtype: cast to metadata.grad_dtype when set and different (int or
//     float64 grads for a float32 input are cast, as torch does; refgrad has no
//     complex dtypes, so PyTorch's complex/real check cannot fail);
//   - device: a mismatch raises "... invalid gradient at index i - expected
//     device cuda but got cpu" unless the metadata is a tensor subclass; a
//     0-dim grad, which PyTorch moves, raises too (refgrad cannot move data
//     off the CPU);
//   - the result must have a floating dtype (PyTorch's internal assert
//     isDifferentiableType), else an error.
// A count different from edges.size() raises "Function <node_name> returned an
// invalid number of gradients - expected 2, but got 1" (engine.cpp; the
// "incorrect number of gradients" message is PyNode's, for autograd.Function).
// An empty node_name is the roots' pass (Engine::execute): the same messages
// without "Function <node_name> returned an ", e.g. "invalid gradient at index
// 0 - got [2, 3] but expected shape compatible with [3]".
Grads validate_outputs(const Grads& grads, const std::vector<std::optional<InputMetadata>>& edges,
                       std::string_view node_name);

// AccumulateGrad for a leaf whose .grad is `old_grad` (nullopt: None): returns
// the new .grad.
//   - new_grad undefined: old_grad unchanged (AccumulateGrad::apply returns
//     early); an undefined Tensor if there was none;
//   - no old grad: new_grad itself when it is contiguous (PyTorch steals the
//     buffer when nothing else references it; refgrad never mutates a tensor in
//     place, so sharing it is safe), else a contiguous copy (PyTorch's
//     clone_obey_contract, for a contiguous leaf);
//   - old grad: old_grad + new_grad in old_grad's dtype, the values of
//     PyTorch's in-place `variable_grad += new_grad` (backward without
//     create_graph); new_grad must broadcast to old_grad's shape, as for +=,
//     and the sum's result type must cast to old_grad's dtype (a float grad
//     into an int64 .grad raises, as torch's in-place add does).
// PyTorch's checks on the leaf itself ("leaf variable has been moved into the
// graph interior" when it has a grad_fn; no accumulation when it does not
// require grad) are graph state, left to the interpreter.
Tensor accumulate_grad(const std::optional<Tensor>& old_grad, const Tensor& new_grad);

// CopyBackwards (x.copy_(src); name() is "torch::autograd::CopyBackwards"):
// inputs self and src, hidden field src_options (TensorOptions: src's dtype
// and device). self: zeros_like(grad) (its old value was overwritten); src:
// grad.to(src_options) (a float64 src copied into float32 self gets a float64
// grad). Undefined grad: both undefined. In the registry as "CopyBackwards".

// CopySlices: the node of an in-place op `fn` on a view of `base`
// (x[1:3].mul_(y) wraps MulBackward0; name() is "torch::autograd::CopySlices").
// One incoming grad, of base's shape; outputs as fn's inputs: output 0 for
// base, the others fn's own. fn must take one incoming grad and no Tensor[]
// input (an in-place op has one output), and both geometries must address
// storage int64 can count, from non-negative offsets; anything else raises.
//   result = grad copied into a tensor with base's sizes and strides;
//   grad_slice = result.as_strided(view.sizes, view.strides,
//                                  view.storage_offset - base.storage_offset);
//   res = fn(grad_slice.clone(), need);
//   output 0 = result with grad_slice overwritten by res[0] (broadcast and cast
//   to grad's dtype, as copy_ does); outputs i > 0 = res[i].
// refgrad writes the slice out of place: it works on a flat storage of base's
// extent, gathering and scattering (index_put) at the storage positions the
// two geometries address. As in PyTorch: an undefined grad gives undefined
// outputs; need[i] false or an undefined res[i] leaves output i undefined (an
// undefined res[0] gives no grad to base at all, not zeros). PyTorch's view_fn
// (views that as_strided cannot express) is not supported.
Grads copy_slices(const Grads& grads, const TensorGeometry& base, const TensorGeometry& view, const NodeDef& fn,
                  const BoundSaved& fn_saved, const Need& need);

// GraphRoot: returns the root grads as they are (the caller applies
// validate_outputs against the roots' metadata, as Engine::execute does).
Grads graph_root(const Grads& roots);

}  // namespace refgrad
