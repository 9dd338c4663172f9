"""A node's saved fields: those torch shows to Python, and the hidden ones, derived.

* Saved fields: each node's exposed fields are read as ``_saved_<field>``.
  torch shows negative ints as unsigned 64-bit; they are read back signed.
  Hidden fields (``*_scalar_type``, ``*_options``, ``*_layout``, ``*_info``,
  ``*_geometry``, ``*_args_scalartypes``, ``*_args_sizes*``) are derived
  (../shared/reference/pytorch-autograd.md §3, §6 5.): the forward input's
  dtype, shape and device from the producer's ``_input_metadata`` at the
  edge's input_nr, else from the saved tensor of that name, else from the
  node's own output metadata; the layout is strided (it only picks the
  memory layout of mm's grads, not their values). Two hidden fields cannot
  be derived from what torch shows, and a wrong guess is a wrong gradient,
  so they are read where they are known and the node is refused where not
  (walk.py lists it, naming the field and why):
  ``*_geometry`` (AsStridedBackward0's ``self_geometry``: the sizes,
  strides and storage offset of the tensor at the node's edge, which may be
  non-contiguous or start at an offset, as a slice does) is a leaf's own
  geometry, else what refgrad.torch.recording() saw at that edge; and
  NativeDropoutBackward0's ``train`` (torch.native_dropout called with
  train=False or None scales the grad by 1, not 1/(1-p)) is what
  recording() saw, or needless when p is 0.
* Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks, save_on_cpu):
  a saved field is read as the engine reads it in the backward, through its
  unpack hook, so the program holds what the hook returns. capture runs each
  unpack hook once, at capture time: a hook whose result would change before
  the backward is seen as it was at capture, and one that allows a single
  unpack (pops its store) leaves nothing for a later torch backward.
  autograd.Function's ctx.saved_tensors are unpacked the same way.
  Non-reentrant checkpointing's unpack hooks recompute the region's forward:
  capture reads them in a scope of its own (refgrad.torch.checkpointing), so
  that a later torch backward recomputes and unpacks for itself.
* CatBackward0 and StackBackward0 take a Tensor[]: torch gives them one
  next edge per list item, and their call has one result per item (``_``
  for an item with no edge, a constant) under one need bit for the list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

import refgrad
from refgrad.torch.in_place import _geometry, _recorded_geometries, _recorded_hidden, _RECORD_KEY
from refgrad.torch.nodes import (_dtype_name, _freed_error, _is_leaf_node, _saved_attributes, _short_name, _signed,
                                 _snapshot)


@dataclass
class _TensorInfo:
    """What a backward formula may know of a forward input: dtype, shape, device."""

    dtype: str
    shape: list[int]
    device: str

    @staticmethod
    def of(value) -> _TensorInfo:  # a tensor or torch's _InputMetadata
        return _TensorInfo(_dtype_name(value.dtype), [int(s) for s in value.shape], str(value.device))

    def options(self) -> refgrad.TensorOptions:
        return refgrad.TensorOptions(dtype=self.dtype, device=self.device, layout="strided")

    def type_and_size(self) -> refgrad.TypeAndSize:
        return refgrad.TypeAndSize(self.shape, self.options())


def _list_inputs(schema) -> set[str]:
    """The forward inputs that are tensor lists (cat's tensors): they take one edge per item."""
    return {name for name in schema.inputs
            if any(f.name.startswith(name + "_args_") or (f.name == name and "list" in f.kind) for f in schema.saved)}


def _input_edges(fn, schema, name: str) -> Optional[list]:
    """next_functions of forward input ``name``: one edge, or one per item of a list input."""
    if name not in schema.inputs:
        return None
    edges = list(fn.next_functions)
    lists = _list_inputs(schema)
    list_length = len(edges) - (len(schema.inputs) - 1)
    start = 0
    for input_name in schema.inputs:
        count = list_length if input_name in lists else 1
        if input_name == name:
            return edges[start:start + count]
        start += count
    return None


def _edge_info(edge) -> Optional[_TensorInfo]:
    node, input_nr = edge
    if node is None:
        return None
    return _TensorInfo.of(node._input_metadata[input_nr])


def _input_info(fn, schema, name: str, exposed: dict[str, Any]) -> _TensorInfo:
    """Forward input ``name``'s dtype, shape and device: from the producer's metadata at the edge,
    else from the saved tensor of that name (as already read into ``exposed``, so that an unpack
    hook runs once), else from the node's own output metadata. The last is no fact about the input:
    it is used only where the input has no edge, so needs no grad, and its own formula does not run;
    no other input's formula of a node refgrad has reads it (test_capture.py checks that against
    derivatives.yaml: index_put's and put's self gradients, which torch writes with zeros_like of the
    values, do not read their sizes in refgrad)."""
    edges = _input_edges(fn, schema, name)
    if edges is not None and len(edges) == 1 and edges[0][0] is not None:
        return _edge_info(edges[0])
    saved = exposed[name] if name in exposed else getattr(fn, "_saved_" + name, None)
    if isinstance(saved, torch.Tensor):
        return _TensorInfo.of(saved)
    return _TensorInfo.of(fn._input_metadata[0])


def _list_infos(fn, schema, name: str) -> list[_TensorInfo]:
    """Each item of list input ``name``; an item that needs no grad has no edge to read, so its
    shape is derived: stack's items all have one shape, and a cat item's is what the output leaves
    for it along ``dim`` (possible for one such item only). Its dtype is taken to be the output's."""
    edges = _input_edges(fn, schema, name) or []
    infos = [_edge_info(edge) for edge in edges]
    missing = [i for i, info in enumerate(infos) if info is None]
    if not missing:
        return infos
    output = _TensorInfo.of(fn._input_metadata[0])
    known = [info for info in infos if info is not None]
    if fn.name() == "StackBackward0" and known:
        shape = list(known[0].shape)
    elif len(missing) == 1 and hasattr(fn, "_saved_dim"):
        dim = _signed(fn._saved_dim) % len(output.shape)
        shape = list(output.shape)
        shape[dim] -= sum(info.shape[dim] for info in known)
    else:
        raise refgrad.Error(f"refgrad.torch.capture: {_short_name(fn)}: {len(missing)} items of '{name}' need no "
                            f"grad, so torch shows no sizes of them; refgrad cannot derive {name}'s sizes")
    for index in missing:
        infos[index] = _TensorInfo(output.dtype, shape, output.device)
    return infos


class _Unknown(refgrad.Error):
    """A hidden saved field that capture cannot know (walk.py refuses its node with this reason)."""


def _geometry_text(geometry: tuple) -> str:
    sizes, strides, offset = geometry
    return f"sizes {list(sizes)}, strides {list(strides)}, storage offset {offset}"


def _input_geometry(fn, schema, name: str) -> refgrad.TensorGeometry:
    """TensorGeometry(name) as the forward saved it: the sizes, strides and storage offset of the
    tensor at the node's edge for input ``name``. That is the input itself for a node made by its op
    (as_strided's self), or the base of a view whose grad_fn torch regenerated (an AsStridedBackward0
    whose edge is the base's). Read from a leaf (AccumulateGrad's variable), else from what
    recording() saw at that edge; raises _Unknown where neither tells."""
    field = f"{name}_geometry"
    edges = _input_edges(fn, schema, name)
    node, input_nr = edges[0] if edges is not None and len(edges) == 1 else (None, 0)
    if node is None:
        raise _Unknown(f"torch hides saved field '{field}' and '{name}' has no edge to read it from")
    recorded = _recorded_geometries(node, input_nr)
    if len(recorded) > 1:
        seen = "; ".join(_geometry_text(g) for g in sorted(recorded))
        raise _Unknown(f"torch hides saved field '{field}', and refgrad.torch.recording() saw the tensor at its "
                       f"edge ({_short_name(node)}, output {input_nr}) with {len(recorded)} geometries ({seen}): "
                       "its metadata changed without a new grad_fn, so which one the node saved is unknown")
    if recorded:
        sizes, strides, offset = next(iter(recorded))
        return refgrad.TensorGeometry(list(sizes), list(strides), offset)
    if _is_leaf_node(node) and node.variable.layout == torch.strided and not node.variable.is_nested:
        return _geometry(node.variable)  # a leaf's geometry is the forward's (a view's offset and strides too)
    copy_slices = node.metadata.get(_RECORD_KEY) if _short_name(node) == "CopySlices" else None
    if copy_slices is not None:
        return copy_slices.base  # the edge is the base of an in-place op on a view, recorded with it
    raise _Unknown(f"torch hides saved field '{field}' (the sizes, strides and storage offset '{name}' had in the "
                   f"forward; it need not be contiguous nor start at offset 0), and '{name}' is not a leaf, whose "
                   f"own geometry capture could read, but an output of {_short_name(node)}: run the forward under "
                   "refgrad.torch.recording() to record it")


def _dropout_train(fn) -> Optional[bool]:
    """NativeDropoutBackward0's train (bool?): what recording() saw. Without a record it does not
    matter only when p is 0 (the grad is scaled by 1 either way). F.dropout calls native_dropout
    only with train=True (on CUDA; on the CPU it multiplies by a mask), but torch.native_dropout may
    be called with False or None, which scale by 1: a guess of True would be a wrong gradient."""
    recorded = _recorded_hidden(fn)
    if "train" in recorded:
        return recorded["train"]
    if float(fn._saved_p) == 0.0:
        return True
    raise _Unknown("torch hides saved field 'train' (native_dropout scales the grad by 1/(1-p) when it is True, by "
                   "1 when False or None, as torch.native_dropout may be called): run the forward under "
                   "refgrad.torch.recording() to record it")


# (suffix, kind, what to read of the forward input the prefix names) for every hidden field refgrad's
# nodes have; "_args_" fields are one per item of a list input. Each reads (node, schema, input
# name, the exposed fields already read).
_HIDDEN = [
    ("_args_scalartypes", "dtype_list", lambda fn, s, x, e: [info.dtype for info in _list_infos(fn, s, x)]),
    ("_args_sizes_symint", "sizes_list", lambda fn, s, x, e: [info.shape for info in _list_infos(fn, s, x)]),
    ("_args_sizes", "sizes_list", lambda fn, s, x, e: [info.shape for info in _list_infos(fn, s, x)]),
    ("_scalar_type", "dtype", lambda fn, s, x, e: _input_info(fn, s, x, e).dtype),
    ("_layout", "layout", lambda fn, s, x, e: "strided"),
    ("_options", "tensor_options", lambda fn, s, x, e: _input_info(fn, s, x, e).options()),
    ("_info", "type_and_size", lambda fn, s, x, e: _input_info(fn, s, x, e).type_and_size()),
    ("_geometry", "tensor_geometry", lambda fn, s, x, e: _input_geometry(fn, s, x)),
]


def _hidden_reason(fn, schema) -> Optional[str]:
    """Why capture cannot know one of the node's hidden saved fields; None when it knows them all.
    Only the fields above that can be unknown are read (no saved tensor is unpacked)."""
    try:
        for saved_field in schema.saved:
            if saved_field.exposed:
                continue
            if saved_field.kind == "tensor_geometry":
                _input_geometry(fn, schema, saved_field.name.removesuffix("_geometry"))
            elif saved_field.name == "train" and _short_name(fn) == "NativeDropoutBackward0":
                _dropout_train(fn)
    except _Unknown as unknown:
        return str(unknown)
    return None


def _hidden_field(fn, schema, saved_field, exposed: dict[str, Any]):
    try:
        return _derived_field(fn, schema, saved_field, exposed)
    except _Unknown as unknown:
        raise refgrad.Error(f"refgrad.torch.capture: {_short_name(fn)}: {unknown}") from None


def _derived_field(fn, schema, saved_field, exposed: dict[str, Any]):
    if saved_field.name == "train" and _short_name(fn) == "NativeDropoutBackward0":
        return _dropout_train(fn)
    if saved_field.name == "input_dtype" and _short_name(fn) == "SoftmaxBackwardDataBackward0":
        return _TensorInfo.of(fn._input_metadata[0]).dtype  # _softmax_backward_data's result has input_dtype
    for suffix, kind, read in _HIDDEN:
        if saved_field.name.endswith(suffix) and saved_field.kind == kind:
            return read(fn, schema, saved_field.name[: -len(suffix)], exposed)
    raise refgrad.Error(f"refgrad.torch.capture: {_short_name(fn)}: torch hides saved field '{saved_field.name}' "
                        f"({saved_field.type}) and refgrad.torch does not know how to derive it")


def _exposed_field(fn, saved_field):
    try:
        value = getattr(fn, "_saved_" + saved_field.name)
    except AttributeError:
        fields = ", ".join(_saved_attributes(fn))
        raise refgrad.Error(f"refgrad.torch.capture: {_short_name(fn)} has no _saved_{saved_field.name}, which "
                            f"refgrad's schema of it expects (its fields: {fields})") from None
    except RuntimeError as error:
        raise _freed_error(fn, error) from error
    kind = saved_field.kind
    if value is None:
        return None
    if kind == "tensor":
        return _snapshot(value)
    if kind in ("tensor_list", "optional_tensor_list"):
        return [_snapshot(item) for item in value]
    if kind == "int":
        return _signed(value)
    if kind in ("int_list", "sizes"):
        return [_signed(int(item)) for item in value]
    return value


def _saved_fields(fn, schema) -> dict[str, Any]:
    """The node's saved fields by refgrad's schema: each exposed one read once (a saved tensor's
    unpack hook runs once), then the hidden ones derived."""
    exposed = {f.name: _exposed_field(fn, f) for f in schema.saved if f.exposed}
    return {f.name: exposed[f.name] if f.exposed else _hidden_field(fn, schema, f, exposed) for f in schema.saved}
