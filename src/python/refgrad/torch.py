"""Capture a real PyTorch backward graph as a refgrad program, and run it.

    import refgrad.torch
    loss = loss_fn(model(x), target)
    capture = refgrad.torch.capture(loss, names=dict(model.named_parameters()))
    grads = capture.run(precision="float64")  # {"0.weight": tensor, ...}, as .grad would be
    capture.save("model.safetensors")         # one bundle: program and tensors

capture() walks the grad_fn graph (name(), next_functions, _sequence_nr(),
_input_metadata, _saved_* fields, AccumulateGrad's .variable) into the graph
model of refgrad.graph, and refgrad.functionalize (the C++ functionalizer)
orders it as torch's engine would. Nothing of the engine is written here.
graph_of() returns the graph model without functionalizing it.
Call it before the backward (or after one with retain_graph=True): a backward
frees the saved values.

What torch 2.13 shows to Python, and so what a capture holds
(../shared/reference/pytorch-autograd.md §3):

* Saved fields: each node's exposed fields are read as ``_saved_<field>``.
  torch shows negative ints as unsigned 64-bit; they are read back signed.
  Hidden fields (``*_scalar_type``, ``*_options``, ``*_layout``, ``*_info``,
  ``*_geometry``, ``*_args_scalartypes``, ``*_args_sizes*``) are derived
  (§3, §6 5.): the forward input's dtype, shape and device from the
  producer's ``_input_metadata`` at the edge's input_nr, else from the saved
  tensor of that name, else from the node's own output metadata; the layout
  is strided. Two are assumptions: ``*_geometry`` takes contiguous strides at
  offset 0 (torch shows no strides of a forward input), and
  NativeDropoutBackward0's optional ``train`` is True (native_dropout records
  a backward only when called for training).
* Hooks that are visible, and captured: tensor hooks of leaves
  (``variable._backward_hooks``), post-accumulate-grad hooks
  (``variable._post_accumulate_grad_hooks``), and the hooks and retain_grad()
  of the non-leaf tensors capture is given (``outputs``, ``inputs`` and the
  values of ``names``). A post-accumulate-grad hook is given a stand-in leaf
  (the parameter's values, refgrad's .grad), so a run never changes the
  user's parameters.
* Hooks that are registered but invisible from Python, and so NOT captured
  (the program runs without them): node hooks and pre-hooks
  (``grad_fn.register_hook`` / ``register_prehook``, on C++ and
  autograd.Function nodes alike, so also nn.Module's legacy
  register_backward_hook), and hooks or retain_grad() of non-leaf tensors
  capture is not given. nn.Module full backward hooks put a
  BackwardHookFunctionBackward node in the graph, which is refused.
* autograd.Function nodes become host functions that call
  ``_forward_cls.backward(ctx, *grads)`` with the program's saved tensors
  (ctx is the node, its ``saved_tensors`` replaced). Undefined grads are
  materialized as zeros (torch's default; ``ctx.set_materialize_grads(False)``
  cannot be read back from Python).
* CopySlices (an in-place op on a view: ``b = x * 1; b[0].mul_(2)``) shows
  Python neither the base's and the view's geometry nor the node it wraps.
  A forward run under ``refgrad.torch.recording()`` records them; without
  it a CopySlices is refused, and the message says so. recording() is a
  TorchDispatchMode: for each in-place aten op on a view (grad mode on) it
  keeps the op, copies of its arguments as they were before it ran, and the
  sizes, strides and storage offsets of the view and of its base, and puts
  them in the metadata dict of the CopySlices the op makes (the base's new
  grad_fn), so the record lives exactly as long as the node. At capture,
  the wrapped node is made again by running the same in-place op on a
  non-view copy of the recorded self: that node is the op's own node, so
  its name and saved fields are those of the hidden one, also for ops whose
  in-place form saves something else than the out-of-place one (exp_ saves
  result; setitem's copy_ makes CopyBackwards). Refused: a CopySlices whose
  view torch replays with a view_fn (a dtype-reinterpreting view, view
  replay on) and one around a node refgrad lacks. Why not read compiled
  autograd's traced graph (its copy_slices_prologue carries the geometry):
  that runs dynamo on a backward, its saved values come as unnamed packed
  arguments, its calls must be matched back to torch's nodes by position,
  and it fails for whatever compiled autograd does not trace; the recorder
  reads only public values at the op itself.
* Refused, with an UnsupportedError naming the node, its saved fields and its
  path from the root: nodes refgrad lacks (and CopySlices outside
  recording(), above), saved-tensor hooks, and activation
  checkpointing. coverage() lists them without raising. The functionalizer
  refuses what it cannot express yet, and its message names the node and
  where it sits.
* CatBackward0 and StackBackward0 take a Tensor[]: torch gives them one
  next edge per list item, and their call has one result per item (``_``
  for an item with no edge, a constant) under one need bit for the list.
* With anomaly mode on during the forward (torch.autograd.detect_anomaly),
  each node's origin is the user's source line that created it.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import refgrad
from refgrad.graph import Edge, FunctionalizeOptions, Graph, GraphNode, Order, functionalize

__all__ = ["Capture", "Host", "Unsupported", "UnsupportedError", "capture", "coverage", "graph_of", "recording"]

_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
_TORCH_DIR = os.path.dirname(torch.__file__)
_REFGRAD_DIR = os.path.dirname(refgrad.__file__)


class UnsupportedError(refgrad.Error):
    """A graph refgrad cannot capture; ``.unsupported`` lists every node that is why."""

    def __init__(self, unsupported: list[Unsupported]):
        self.unsupported = unsupported
        lines = [f"refgrad.torch.capture: {len(unsupported)} node(s) refgrad cannot capture:"]
        lines += [f"  {item}" for item in unsupported]
        super().__init__("\n".join(lines))


@dataclass
class Unsupported:
    """A node capture refuses: its name, why, its saved fields and its path from the root."""

    name: str
    reason: str
    where: str  # node names from the root down to this node, "SumBackward0 -> ... -> name"
    saved_fields: list[str] = field(default_factory=list)  # the node's _saved_* / _raw_saved_* attributes

    def __str__(self) -> str:
        saved = ", ".join(self.saved_fields) or "none"
        return f"{self.name}: {self.reason} (saved fields: {saved}; at {self.where})"


@dataclass
class Host:
    """The Python side of a program: hooks and autograd.Function backwards by program name,
    as refgrad.Machine(hooks=..., functions=...) takes them."""

    hooks: dict[str, Callable] = field(default_factory=dict)
    functions: dict[str, Callable] = field(default_factory=dict)


# ---------------------------------------------------------------- reading ---


def _short_name(fn) -> str:
    return fn.name().removeprefix("torch::autograd::")


def _is_leaf_node(fn) -> bool:
    return fn.name() == _ACCUMULATE_GRAD


def _is_function_node(fn) -> bool:
    return hasattr(fn, "_forward_cls")


def _signed(value: int) -> int:
    """torch shows a saved int64 as unsigned 64-bit: 2**64 - 1 is -1."""
    return value - 2**64 if value >= 2**63 else value


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _snapshot(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A copy, so that later in-place changes (an optimizer step) leave the capture as it was."""
    return None if tensor is None else tensor.detach().clone()


def _freed_error(fn, error: RuntimeError) -> refgrad.Error:
    return refgrad.Error(f"refgrad.torch.capture: {_short_name(fn)}'s saved values were freed by a backward "
                         f"(capture before the backward, or run it with retain_graph=True): {error}")


def _saved_attributes(fn) -> list[str]:
    return sorted(a for a in dir(fn) if a.startswith("_saved_") or a.startswith("_raw_saved_"))


def _raw_saved(fn) -> list:
    """The node's SavedTensor objects (torch._C._autograd.SavedTensor)."""
    raw = []
    for attribute in _saved_attributes(fn):
        if not attribute.startswith("_raw_saved_"):
            continue
        try:
            value = getattr(fn, attribute)
        except RuntimeError as error:
            raise _freed_error(fn, error) from error
        raw += list(value) if isinstance(value, (tuple, list)) else [value]
    return [saved for saved in raw if saved is not None]


# ------------------------------------------------------------- unsupported ---


def _saved_tensor_hook_reason(fn) -> Optional[str]:
    for saved in _raw_saved(fn):
        unpack = getattr(saved, "unpack_hook", None)
        if unpack is None:
            continue
        if "checkpoint" in getattr(unpack, "__module__", ""):
            return ("activation checkpointing (torch.utils.checkpoint, use_reentrant=False) keeps its saved "
                    "tensors behind saved-tensor hooks, which refgrad does not run")
        return ("a saved tensor has saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks), "
                "which refgrad does not run")
    return None


def _function_reason(fn) -> Optional[str]:
    qualname = fn._forward_cls.__qualname__
    if qualname == "CheckpointFunction":
        return ("activation checkpointing (torch.utils.checkpoint, use_reentrant=True) recomputes the forward "
                "inside the backward, which refgrad does not run")
    if qualname == "BackwardHookFunction":
        return ("nn.Module full backward hooks are node hooks, which torch does not show to Python "
                "(remove them to capture the module)")
    return None


def _unsupported_reason(fn) -> Optional[str]:
    if _is_leaf_node(fn):
        return None
    if _is_function_node(fn):
        reason = _function_reason(fn)
    elif _short_name(fn) == "CopySlices":
        reason = _copy_slices_reason(fn)
    elif fn.name() not in _schemas():
        reason = f"refgrad has no node {_short_name(fn)} (refgrad.nodes() lists those it has)"
    else:
        reason = None
    return reason or _saved_tensor_hook_reason(fn)


@functools.cache
def _schemas() -> dict[str, refgrad.NodeSchema]:
    return {schema.name: schema for schema in refgrad.nodes()}


# -------------------------------------------------------------- CopySlices ---

# The key of an in-place op's record in its CopySlices node's metadata dict.
_RECORD_KEY = "refgrad.torch.recording"


def _geometry(tensor: torch.Tensor) -> refgrad.TensorGeometry:
    return refgrad.TensorGeometry(list(tensor.shape), list(tensor.stride()), tensor.storage_offset())


def _view_fn_reason(view: torch.Tensor) -> Optional[str]:
    """Why torch gives this view's CopySlices a view_fn (replaying the view instead of as_strided),
    which refgrad's CopySlices does not run; None when it does not."""
    base = view._base
    if torch._C._is_view_replay_enabled():
        return "view replay is enabled (torch.autograd._force_original_view_tracking), so CopySlices replays the view"
    if view.dtype != base.dtype:
        return f"the view ({_dtype_name(view.dtype)}) reinterprets its base ({_dtype_name(base.dtype)})"
    if base.layout != torch.strided or base.is_nested or base.is_conj() or base.is_neg():
        return "the base is not a plain strided tensor, so CopySlices replays the view"
    return None


@dataclass
class _Copied:
    """A tensor argument of an in-place op as it was before the op: its values and requires_grad."""

    values: torch.Tensor
    requires_grad: bool


@dataclass
class _InPlaceRecord:
    """What recording() keeps of one in-place op on a view, for its CopySlices node: the aten op,
    copies of its arguments as they were before it ran (each tensor a _Copied), and the base's and
    the view's geometry; ``refused`` says why refgrad cannot run this CopySlices (None: it can)."""

    op: Any  # a torch._ops.OpOverload, e.g. aten.mul_.Tensor
    args: tuple
    kwargs: dict
    base: refgrad.TensorGeometry
    view: refgrad.TensorGeometry
    refused: Optional[str] = None
    _replayed: Any = None  # (wrapped node, the tensors keeping its saved values alive)

    @staticmethod
    def of(op, args: tuple, kwargs: dict) -> _InPlaceRecord:
        view = args[0]

        def copy(value):
            return _Copied(value.detach().clone(), value.requires_grad) if isinstance(value, torch.Tensor) else value

        args_copy, kwargs_copy = pytree.tree_map(copy, (args, kwargs))
        return _InPlaceRecord(op, args_copy, kwargs_copy, _geometry(view._base), _geometry(view),
                              _view_fn_reason(view))

    def wrapped(self):
        """The node CopySlices wraps, made again: the same in-place op, run on copies of its
        arguments as they were, with self a non-view tensor (so that the node is the op's own node,
        not a CopySlices). Its name and saved fields are those of the hidden one."""
        if self._replayed is None:
            def leaf(value):
                return value.values.clone().requires_grad_(value.requires_grad) if isinstance(value, _Copied) else value

            args, kwargs = pytree.tree_map(leaf, (self.args, self.kwargs))
            self_ = args[0].clone() if args[0].requires_grad else args[0]  # a leaf cannot be written in place
            with torch.enable_grad():
                self.op(self_, *args[1:], **kwargs)
            self._replayed = (self_.grad_fn, (self_, args, kwargs))
        return self._replayed[0]


def _record_of(fn) -> Optional[_InPlaceRecord]:
    return fn.metadata.get(_RECORD_KEY)


def _writes_self(op) -> bool:
    """An in-place aten op: its first argument is written (mul_, copy_, fill_, relu_ ...)."""
    arguments = op._schema.arguments
    return bool(arguments) and arguments[0].alias_info is not None and arguments[0].alias_info.is_write


def _any_requires_grad(args, kwargs) -> bool:
    """Whether autograd records the op: only then does it make a CopySlices worth a record."""
    return any(isinstance(value, torch.Tensor) and value.requires_grad for value in pytree.tree_leaves((args, kwargs)))


class _InPlaceOnViewRecorder(TorchDispatchMode):
    """Records each in-place aten op on a view while grad mode is on. The op's CopySlices exists only
    after the op returns (autograd's kernel makes it, above this mode), so a record waits until the
    next op (or the end of recording) and then goes into the metadata dict of the base's grad_fn if
    that is a CopySlices without one: it lives as long as the node does."""

    def __init__(self):
        super().__init__()
        self.pending: list[tuple[torch.Tensor, _InPlaceRecord]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.attach_pending()
        view = args[0] if args else None
        if (_writes_self(func) and isinstance(view, torch.Tensor) and view._is_view()
                and torch.is_grad_enabled() and _any_requires_grad(args, kwargs)):
            self.pending.append((view._base, _InPlaceRecord.of(func, tuple(args), kwargs)))
        return func(*args, **kwargs)

    def attach_pending(self) -> None:
        for base, record in self.pending:
            node = base.grad_fn
            if node is not None and _short_name(node) == "CopySlices" and _RECORD_KEY not in node.metadata:
                node.metadata[_RECORD_KEY] = record
        self.pending.clear()


@contextlib.contextmanager
def recording():
    """Run a forward under this to let capture() take the in-place ops on views it makes (their
    CopySlices nodes): ``with refgrad.torch.recording(): loss = model(x)``. See the module's
    docstring for what it records and why."""
    recorder = _InPlaceOnViewRecorder()
    try:
        with recorder:
            yield
    finally:
        recorder.attach_pending()


def _copy_slices_reason(fn) -> Optional[str]:
    record = _record_of(fn)
    if record is None:
        return ("torch does not show CopySlices' base and view geometry, nor the node it wraps, to Python "
                "(an in-place op on a view); run the forward under refgrad.torch.recording() to capture it")
    if record.refused is not None:
        return f"an in-place {record.op} on a view: {record.refused}, which refgrad's CopySlices does not do"
    try:
        wrapped = record.wrapped()
    except (RuntimeError, TypeError, ValueError) as error:
        return f"replaying the in-place {record.op} (to read the node CopySlices wraps) failed: {error}"
    if wrapped is None:
        return f"replaying the in-place {record.op} made no node (none of its inputs requires grad)"
    if _schema_of(wrapped) is None:
        return (f"CopySlices wraps {_short_name(wrapped)} (in-place {record.op}), which refgrad has not "
                "(refgrad.nodes() lists those it has)")
    if [e is None for e, _ in wrapped.next_functions][1:] != [e is None for e, _ in fn.next_functions][1:]:
        return (f"the replayed {_short_name(wrapped)} (in-place {record.op}) has other edges than CopySlices: "
                "the record does not match the node")
    return None


def _schema_of(fn) -> Optional[refgrad.NodeSchema]:
    """refgrad's schema of a node, by torch's name or without its torch::autograd:: prefix (CopyBackwards)."""
    return _schemas().get(fn.name()) or _schemas().get(_short_name(fn))


# ------------------------------------------------------------------ walking ---


class _Walk:
    """The nodes reachable from some start nodes, breadth first, each with the node it was reached from."""

    def __init__(self, starts):
        self.order: list = []
        self.parent: dict = {}
        queue = collections.deque()
        for fn in starts:
            if fn not in self.parent:
                self.parent[fn] = None
                self.order.append(fn)
                queue.append(fn)
        while queue:
            fn = queue.popleft()
            for next_fn, _ in fn.next_functions:
                if next_fn is not None and next_fn not in self.parent:
                    self.parent[next_fn] = fn
                    self.order.append(next_fn)
                    queue.append(next_fn)
        self.index = {fn: i for i, fn in enumerate(self.order)}

    def where(self, fn) -> str:
        path = []
        while fn is not None:
            path.append(_short_name(fn))
            fn = self.parent[fn]
        return " -> ".join(reversed(path))

    def unsupported(self) -> list[Unsupported]:
        found = []
        for fn in self.order:
            reason = _unsupported_reason(fn)
            if reason is not None:
                found.append(Unsupported(_short_name(fn), reason, self.where(fn), _saved_attributes(fn)))
        return found


def _outputs_list(outputs) -> list[torch.Tensor]:
    return [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)


def _root_edges(outputs: list[torch.Tensor]):
    edges = []
    for i, output in enumerate(outputs):
        if not output.requires_grad:
            raise refgrad.Error(f"element {i} of tensors does not require grad and does not have a grad_fn")
        edges.append(torch.autograd.graph.get_gradient_edge(output))
    return edges


def coverage(outputs) -> list[Unsupported]:
    """The nodes of ``outputs``' backward graph that capture() would refuse, without raising."""
    walk = _Walk(edge.node for edge in _root_edges(_outputs_list(outputs)))
    return walk.unsupported()


# ----------------------------------------------------------- hidden fields ---


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

    def geometry(self) -> refgrad.TensorGeometry:
        """Contiguous at offset 0: torch shows no strides of a forward input (an assumption)."""
        strides, step = [], 1
        for size in reversed(self.shape):
            strides.insert(0, step)
            step *= max(size, 1)
        return refgrad.TensorGeometry(self.shape, strides, 0)


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


def _input_info(fn, schema, name: str) -> _TensorInfo:
    """Forward input ``name``'s dtype, shape and device: from the producer's metadata at the edge,
    else from the saved tensor of that name, else from the node's own output metadata."""
    edges = _input_edges(fn, schema, name)
    if edges is not None and len(edges) == 1 and edges[0][0] is not None:
        return _edge_info(edges[0])
    saved = getattr(fn, "_saved_" + name, None)
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


# (suffix, kind, what to read of the forward input the prefix names) for every hidden field refgrad's
# nodes have; "_args_" fields are one per item of a list input.
_HIDDEN = [
    ("_args_scalartypes", "dtype_list", lambda fn, s, x: [info.dtype for info in _list_infos(fn, s, x)]),
    ("_args_sizes_symint", "sizes_list", lambda fn, s, x: [info.shape for info in _list_infos(fn, s, x)]),
    ("_args_sizes", "sizes_list", lambda fn, s, x: [info.shape for info in _list_infos(fn, s, x)]),
    ("_scalar_type", "dtype", lambda fn, s, x: _input_info(fn, s, x).dtype),
    ("_layout", "layout", lambda fn, s, x: "strided"),
    ("_options", "tensor_options", lambda fn, s, x: _input_info(fn, s, x).options()),
    ("_info", "type_and_size", lambda fn, s, x: _input_info(fn, s, x).type_and_size()),
    ("_geometry", "tensor_geometry", lambda fn, s, x: _input_info(fn, s, x).geometry()),
]


def _hidden_field(fn, schema, saved_field):
    if saved_field.name == "train" and _short_name(fn) == "NativeDropoutBackward0":
        return True  # native_dropout records a backward only when called for training
    for suffix, kind, read in _HIDDEN:
        if saved_field.name.endswith(suffix) and saved_field.kind == kind:
            return read(fn, schema, saved_field.name[: -len(suffix)])
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
    return {f.name: _exposed_field(fn, f) if f.exposed else _hidden_field(fn, schema, f) for f in schema.saved}


# ---------------------------------------------------------------- building ---


def _metadata(value) -> refgrad.InputMetadata:
    info = _TensorInfo.of(value)
    return refgrad.InputMetadata(info.dtype, info.shape, info.device)


def _origin(fn) -> str:
    """The user's source line that created the node: the innermost frame of anomaly mode's forward
    traceback outside torch and refgrad."""
    traceback = fn.metadata.get("traceback_") if hasattr(fn, "metadata") else None
    for frame in reversed(traceback or []):
        match = re.match(r'\s*File "([^"]+)", line (\d+)', frame)
        if match and not match.group(1).startswith((_TORCH_DIR, _REFGRAD_DIR)):
            return f"{match.group(1)}:{match.group(2)}"
    return ""


def _program_name(text: str) -> str:
    """``text`` with what a program name may not hold (other than letters, digits, '_', '.') as '_'."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", text)


class _Names:
    """Program names of tensors: from the user's mapping, else prefix0, prefix1, ... Names keep
    the characters a program name may hold (letters, digits, '_', '.')."""

    def __init__(self, names):
        self._by_id: dict[int, str] = {}
        self._keep: list[torch.Tensor] = []  # the tensors named, so that their ids stay theirs
        self._used: set[str] = set()
        self._counts: collections.Counter = collections.Counter()
        for key, value in (names or {}).items():
            tensor, name = (value, key) if isinstance(key, str) else (key, value)
            if not isinstance(tensor, torch.Tensor) or not isinstance(name, str):
                raise refgrad.Error(f"refgrad.torch.capture: names maps str to tensor (or tensor to str), "
                                    f"got {type(key).__name__}: {type(value).__name__}")
            self._assign(tensor, _program_name(name))

    def _assign(self, tensor: torch.Tensor, name: str) -> str:
        if id(tensor) in self._by_id:
            return self._by_id[id(tensor)]
        if name in self._used:
            raise refgrad.Error(f"refgrad.torch.capture: two tensors are named '{name}'")
        self._by_id[id(tensor)] = name
        self._keep.append(tensor)
        self._used.add(name)
        return name

    def __call__(self, tensor: torch.Tensor, prefix: str) -> str:
        if id(tensor) in self._by_id:
            return self._by_id[id(tensor)]
        while f"{prefix}{self._counts[prefix]}" in self._used:
            self._counts[prefix] += 1
        return self._assign(tensor, f"{prefix}{self._counts[prefix]}")

    def tensors(self) -> list[torch.Tensor]:
        return list(self._keep)


def _hook_names(owner: str, kind: str, hooks) -> list[tuple[str, Callable]]:
    return [(f"{owner}_{kind}{i}", hook) for i, hook in enumerate((hooks or {}).values())]


class _Builder:
    """Fills a refgrad Graph from a walk of torch's graph, and the Host its hook and function names need."""

    def __init__(self, walk: _Walk, names: _Names):
        self.walk = walk
        self.names = names
        self.graph = Graph()
        self.leaves: dict[str, torch.Tensor] = {}
        self.tensor_hooks: dict[str, Callable] = {}  # by hook name: the user's callables
        self.post_acc_hooks: dict[str, Callable] = {}
        self.function_nodes: dict[str, Any] = {}  # by function name: the autograd.Function node

    def build(self) -> Graph:
        for fn in self.walk.order:
            try:
                self._add(fn)
            except refgrad.Error as error:
                raise refgrad.Error(f"{error} (at {self.walk.where(fn)})") from error
        return self.graph

    def edge(self, edge) -> Optional[Edge]:
        node, input_nr = edge
        return None if node is None else Edge(self.walk.index[node], input_nr)

    def _add(self, fn) -> None:
        index = len(self.graph.nodes)
        if _is_leaf_node(fn):
            self._add_leaf(fn)
            return
        node = GraphNode(
            name=_short_name(fn),
            next_edges=[self.edge(edge) for edge in fn.next_functions],
            sequence_nr=fn._sequence_nr(),
            input_metadata=[_metadata(m) for m in fn._input_metadata],
            origin=_origin(fn))
        if _is_function_node(fn):
            node.kind = "function"
            node.name = _program_name(f"{_short_name(fn)}_{index}")
            node.function_saved = self._function_saved(fn)
            self.function_nodes[node.name] = fn
        elif _short_name(fn) == "CopySlices":
            record = _record_of(fn)
            wrapped = record.wrapped()
            node.kind = "copy_slices"
            node.name = _short_name(wrapped)
            node.saved = {"base": record.base, "view": record.view, **_saved_fields(wrapped, _schema_of(wrapped))}
        else:
            schema = _schemas()[fn.name()]
            node.saved = _saved_fields(fn, schema)
        self.graph.add_node(node)

    @staticmethod
    def _function_saved(fn) -> list[torch.Tensor]:
        try:
            saved = fn.saved_tensors
        except RuntimeError as error:
            raise _freed_error(fn, error) from error
        if any(tensor is None for tensor in saved):
            raise refgrad.Error(f"refgrad.torch.capture: {_short_name(fn)} saved None with save_for_backward; "
                                "refgrad's function calls take tensors only")
        return [_snapshot(tensor) for tensor in saved]

    def _add_leaf(self, fn) -> None:
        variable = fn.variable
        name = self.names(variable, "input")
        index = self.graph.add_leaf(name, refgrad.TensorType(_dtype_name(variable.dtype), list(variable.shape),
                                                             str(variable.device)), _snapshot(variable.grad))
        self.leaves[name] = variable
        node = self.graph.nodes[index]
        node.origin = _origin(fn)
        self._add_tensor_hooks(node, 0, name, variable._backward_hooks)
        for hook_name, hook in _hook_names(name, "post_accumulate_grad_hook",
                                           getattr(variable, "_post_accumulate_grad_hooks", None)):
            node.post_acc_grad_hooks.append(hook_name)
            self.post_acc_hooks[hook_name] = hook

    def add_non_leaf_hooks(self, tensor: torch.Tensor) -> None:
        """A non-leaf tensor's hooks and retain_grad() act on its grad_fn's input output_nr."""
        if tensor.grad_fn is None or tensor.grad_fn not in self.walk.index:
            return
        if not (tensor._backward_hooks or tensor.retains_grad):
            return
        name = self.names(tensor, "output")
        node = self.graph.nodes[self.walk.index[tensor.grad_fn]]
        self._add_tensor_hooks(node, tensor.output_nr, name, tensor._backward_hooks)
        if tensor.retains_grad:
            node.retains_grad[tensor.output_nr] = name

    def _add_tensor_hooks(self, node: GraphNode, slot: int, name: str, hooks) -> None:
        """A tensor's hooks are tensor pre-hooks of the node its grad flows into, at its slot."""
        for hook_name, hook in _hook_names(name, "hook", hooks):
            node.tensor_pre_hooks.setdefault(slot, []).append(hook_name)
            self.tensor_hooks[hook_name] = hook


# -------------------------------------------------------------------- host ---


def _to_torch(tensor) -> Optional[torch.Tensor]:
    return None if tensor is None else tensor.torch()


def _tensor_hook(hook: Callable) -> Callable:
    """torch calls hook(grad) -> new grad or None. A hook that changes grad in place and returns None
    (torch's docs ask hooks not to, but torch then passes the changed grad on) changes it here too."""

    def call(grad):
        grad = _to_torch(grad)
        version = None if grad is None else grad._version  # torch counts in-place changes
        result = hook(grad)
        if result is None and grad is not None and grad._version != version:
            return grad
        return result

    return call


def _post_accumulate_grad_hook(hook: Callable, leaves: Mapping[str, torch.Tensor]) -> Callable:
    """torch calls hook(leaf) after writing leaf.grad. The hook gets a stand-in: a leaf with the
    parameter's values and refgrad's .grad, so the user's parameter is never changed. What the hook
    leaves in the stand-in's .grad becomes the leaf's .grad in refgrad's run, as it would in torch:
    None after an optimizer step in backward that frees it, a changed tensor if it changed it."""

    def call(leaf_name: str, grad):
        grad = _to_torch(grad)
        stand_in = leaves[leaf_name].detach().clone()
        if grad is not None:
            stand_in = stand_in.to(grad.dtype)
        stand_in.requires_grad_(True)
        stand_in.grad = grad
        version = None if grad is None else grad._version
        hook(stand_in)
        if stand_in.grad is None:
            return refgrad.NO_GRAD
        if stand_in.grad is grad and grad._version == version:
            return None  # unchanged
        return stand_in.grad

    return call


class _Context:
    """The ctx an autograd.Function's backward sees: the node, with the program's saved tensors
    (as torch._dynamo.external_utils.FakeBackwardCFunction does for compiled autograd)."""

    def __init__(self, node, saved_tensors: tuple):
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "saved_tensors", saved_tensors)

    def __getattr__(self, name: str):
        return getattr(self._node, name)


def _function_backward(fn, promote: bool) -> Callable:
    """The host function of an autograd.Function node: the machine calls it with the saved tensors,
    need (one per next edge) and the incoming grads; it returns one grad per next edge."""
    forward_cls = fn._forward_cls
    needs_input_grad = tuple(fn.needs_input_grad)
    valid_edges = [node is not None for node, _ in fn.next_functions]
    metadata = list(fn._input_metadata)

    def zeros(i: int) -> torch.Tensor:  # PyNode materializes an undefined grad as zeros of the output
        dtype = torch.float64 if promote and metadata[i].dtype == torch.float32 else metadata[i].dtype
        return torch.zeros(list(metadata[i].shape), dtype=dtype, device=metadata[i].device)

    def call(saved, need, grads):
        ctx = _Context(fn, tuple(_to_torch(t) for t in saved))
        grads = [zeros(i) if g is None else _to_torch(g) for i, g in enumerate(grads)]
        result = forward_cls.backward(ctx, *grads)
        result = result if isinstance(result, tuple) else (result,)
        if len(result) != len(needs_input_grad):
            raise RuntimeError(f"function {_short_name(fn)} returned an incorrect number of gradients "
                               f"(expected {len(needs_input_grad)}, got {len(result)})")
        # One grad per forward argument; the ones that need a grad go, in order, to the valid edges.
        wanted = iter(grad for grad, needed in zip(result, needs_input_grad) if needed)
        return [next(wanted, None) if valid else None for valid in valid_edges]

    return call


# ----------------------------------------------------------------- capture ---


def _promotes(precision: str, who: str) -> bool:
    """Whether `precision` asks for the float64 promotion; raises for a precision refgrad has not."""
    if precision not in ("float64", "float32"):
        raise refgrad.Error(f"{who}: precision must be 'float64' or 'float32', got {precision!r}")
    return precision == "float64"


@dataclass(repr=False)
class Capture:
    """A captured backward: the graph model, the program (in a bundle with its tensors), for each
    instruction the graph node it came from, the leaves by name, and the host (hooks, functions)."""

    graph: Graph
    bundle: refgrad.Bundle
    node_of_instruction: list[int]
    leaves: dict[str, torch.Tensor]
    captures: list[str]  # torch.autograd.grad's inputs, by name; empty for a backward()
    accumulate_grad: bool
    _builder: _Builder

    @property
    def program(self) -> refgrad.Program:
        return self.bundle.program

    @property
    def host(self) -> Host:
        """The hooks and functions, for the program as captured."""
        return self._host(promote=False)

    def _host(self, promote: bool) -> Host:
        builder = self._builder
        host = Host()
        for name, hook in builder.tensor_hooks.items():
            host.hooks[name] = _tensor_hook(hook)
        for name, hook in builder.post_acc_hooks.items():
            host.hooks[name] = _post_accumulate_grad_hook(hook, self.leaves)
        for name, fn in builder.function_nodes.items():
            host.functions[name] = _function_backward(fn, promote)
        return host

    def machine(self, precision: str = "float64", keep_values: bool = False) -> refgrad.Machine:
        """A refgrad Machine over the program, ready to step or run: as captured ("float32") or
        promoted to float64; keep_values keeps every register (for reading them after a run)."""
        promote = _promotes(precision, "Capture.machine")
        bundle = refgrad.promote_to_float64(self.bundle) if promote else self.bundle
        host = self._host(promote)
        return refgrad.Machine(bundle, hooks=host.hooks, functions=host.functions, keep_values=keep_values)

    def run(self, precision: str = "float64") -> dict[str, torch.Tensor]:
        """Runs the program in refgrad's Machine. precision "float64" promotes every float32 tensor
        and type to float64 first; "float32" runs the program as captured. Returns what torch would
        leave: for a backward(), each leaf's .grad (and retain_grad()'s grads) by name; for
        torch.autograd.grad's inputs, their grads by name (None where unused)."""
        promote = _promotes(precision, "Capture.run")
        bundle = refgrad.promote_to_float64(self.bundle) if promote else self.bundle
        host = self._host(promote)
        results = refgrad.run_program(bundle, hooks=host.hooks, functions=host.functions)
        if self.captures and not self.accumulate_grad:
            return {name: _to_torch(results.get("^" + name)) for name in self.captures}
        return {name[1:]: _to_torch(value) for name, value in results.items()}

    def save(self, path: str) -> None:
        """Writes the program and its tensors as one bundle (.safetensors)."""
        self.bundle.save(str(path))

    def __repr__(self) -> str:
        return (f"<Capture {self.program.name}: {len(self.program)} instructions, "
                f"{len(self.graph.nodes)} nodes, leaves {sorted(self.leaves)}>")


def _grad_outputs(outputs: list[torch.Tensor], grad_outputs) -> list[torch.Tensor]:
    """torch's _make_grads: the given grads, or ones for a one-element output."""
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, torch.Tensor):
        grad_outputs = [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise refgrad.Error(f"grad_outputs: expected {len(outputs)} grads (one per output), got {len(grad_outputs)}")
    grads = []
    for output, grad in zip(outputs, grad_outputs):
        if grad is None:
            if output.numel() != 1:
                raise refgrad.Error("grad can be implicitly created only for scalar outputs")
            grad = torch.ones_like(output)
        grads.append(grad.detach().clone())
    return grads


def _check_no_saved_tensor_hooks() -> None:
    if torch._C._autograd._top_saved_tensors_default_hooks(False) is not None:
        raise refgrad.Error("refgrad.torch.capture: saved-tensor hooks are active "
                            "(torch.autograd.graph.saved_tensors_hooks); refgrad does not run them")


@dataclass
class _Captured:
    """What walking torch's graph gives: the graph model and the names and callables it refers to."""

    graph: Graph
    builder: _Builder
    captures: list[str]


def _capture_graph(outputs, inputs, grad_outputs, names) -> _Captured:
    _check_no_saved_tensor_hooks()
    outputs = _outputs_list(outputs)
    inputs = [] if inputs is None else _outputs_list(inputs)
    tensor_names = _Names(names)
    root_edges = _root_edges(outputs)
    root_grads = _grad_outputs(outputs, grad_outputs)
    capture_edges = []
    for tensor in inputs:
        if not tensor.requires_grad:
            raise refgrad.Error("One of the differentiated Tensors does not require grad")
        capture_edges.append((tensor_names(tensor, "input"), torch.autograd.graph.get_gradient_edge(tensor)))

    walk = _Walk([edge.node for edge in root_edges] + [edge.node for _, edge in capture_edges])
    unsupported = walk.unsupported()
    if unsupported:
        raise UnsupportedError(unsupported)
    builder = _Builder(walk, tensor_names)
    graph = builder.build()
    for i, (edge, grad) in enumerate(zip(root_edges, root_grads)):
        graph.roots.append(Edge(walk.index[edge.node], edge.output_nr))
        graph.root_grads.append((f"grad_output{i}", grad))
    for name, edge in capture_edges:
        graph.captures.append((name, Edge(walk.index[edge.node], edge.output_nr)))
    given = {id(tensor): tensor for tensor in outputs + inputs + tensor_names.tensors()}
    for tensor in given.values():
        builder.add_non_leaf_hooks(tensor)
    return _Captured(graph, builder, [name for name, _ in capture_edges])


def _with_torch_path(message: str, walk: _Walk) -> str:
    """A functionalize error names a node by its index ("node 3 (CatBackward0)"); adds where that
    node sits in torch's graph."""
    found = re.search(r"\bnode (\d+) \(|Graph\.nodes\[(\d+)\]", message)
    if found is None:
        return message
    index = int(found.group(1) or found.group(2))
    if index >= len(walk.order):
        return message
    return f"{message} (at {walk.where(walk.order[index])})"


def graph_of(outputs, inputs=None, grad_outputs=None, *, names=None) -> Graph:
    """The refgrad.graph.Graph capture() builds, before functionalize orders it (capture's
    arguments). For looking at what was read from torch, or for functionalizing it by hand."""
    return _capture_graph(outputs, inputs, grad_outputs, names).graph


def capture(outputs, inputs=None, grad_outputs=None, *, names=None, allow_unused: bool = False,
            accumulate_grad: Optional[bool] = None, order: str = "eager",
            program_name: str = "backward") -> Capture:
    """Captures the backward of ``outputs`` (a tensor or a sequence of them) as a refgrad program.

    inputs: as torch.autograd.grad's (a tensor or a sequence): the program outputs their grads,
      named like leaves; with accumulate_grad=True, as backward(inputs=...) instead. None: a
      backward() into every leaf.
    grad_outputs: one grad per output (None for ones, allowed for a one-element output).
    names: a mapping of tensors to program names, either way round (dict(model.named_parameters())
      works as it is); unnamed leaves are input0, input1, ..., other tensors output0, ...
      Non-leaf tensors named here have their hooks and retain_grad() captured.
      A leaf's .grad at capture time is its declared starting .grad: the program adds into it, as a
      backward would, so a capture taken after a backward (retain_graph=True) runs a second one.
    allow_unused: torch.autograd.grad's. order: "eager" (the engine's ready queue) or
      "compiled_autograd".

    Raises UnsupportedError (a refgrad.Error) listing every node refgrad cannot capture, and
    refgrad.Error for saved-tensor hooks, a freed graph, what torch itself refuses, and what the
    functionalizer cannot express (its message names the node).
    See the module's docstring for what torch hides from Python.
    """
    captured = _capture_graph(outputs, inputs, grad_outputs, names)
    accumulate = not captured.captures if accumulate_grad is None else accumulate_grad
    options = FunctionalizeOptions(order=Order(order), accumulate_grad=accumulate, allow_unused=allow_unused,
                                   program_name=program_name)
    try:
        bundle, node_of_instruction = functionalize(captured.graph, options)
    except refgrad.Error as error:
        raise refgrad.Error(_with_torch_path(str(error), captured.builder.walk)) from error
    return Capture(captured.graph, bundle, list(node_of_instruction), captured.builder.leaves, captured.captures,
                   accumulate, captured.builder)
