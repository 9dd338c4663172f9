"""In-place ops on views: recording() and the CopySlices nodes it lets capture take.

CopySlices (an in-place op on a view: ``b = x * 1; b[0].mul_(2)``) shows
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

recording() also keeps what other nodes hide: the geometry (sizes, strides,
storage offset) of each tensor it sees, at the tensor's gradient edge, and
native_dropout's ``train``. AsStridedBackward0 saves ``self_geometry``, the
geometry of the tensor at its edge (the as_strided's self, or the base of a
view whose grad_fn torch regenerated after an in-place op), and torch shows
no strides of a non-leaf tensor; refgrad.torch.saved reads these records.
A geometry is noted for every non-leaf tensor that requires grad and is an
argument of an op while grad mode is on (autograd has then made its
grad_fn already, so reading it changes nothing), and for the tensor an
in-place op writes (its base, for a view) after the op, at its new edge.
Leaves need no record: their own geometry is what the forward saw.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import refgrad
from refgrad.torch.nodes import _dtype_name, _schema_of, _short_name


# The key of an in-place op's record in its CopySlices node's metadata dict.
_RECORD_KEY = "refgrad.torch.recording"
# The key of the geometries recording() saw at a node's outputs, in its metadata dict:
# {output_nr: {(sizes, strides, storage_offset), ...}}, one entry per distinct geometry.
_GEOMETRY_KEY = "refgrad.torch.recording.geometry"
# The key of a node's hidden saved values recording() saw, by field name: {"train": False}.
_HIDDEN_KEY = "refgrad.torch.recording.hidden"


def _geometry(tensor: torch.Tensor) -> refgrad.TensorGeometry:
    return refgrad.TensorGeometry(list(tensor.shape), list(tensor.stride()), tensor.storage_offset())


def _geometry_key(tensor: torch.Tensor) -> tuple:
    """A tensor's geometry as a hashable value: (sizes, strides, storage_offset)."""
    return tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset()


def _note_geometry(tensor: torch.Tensor) -> None:
    """Keeps the geometry of a non-leaf tensor at its gradient edge (grad_fn, output_nr): what an
    AsStridedBackward0 with that edge saved as self_geometry. All geometries seen there are kept,
    so that a tensor whose metadata changed without a new grad_fn (.set_(), an in-place
    metadata op under no_grad) shows as ambiguous instead of as one of them."""
    node = tensor.grad_fn
    if node is None:
        return  # a leaf, or no grad: capture reads a leaf's own geometry
    if tensor.layout != torch.strided or tensor.is_nested:
        return  # no strides to keep (sparse, nested): capture refuses a node that would need them
    seen = node.metadata.setdefault(_GEOMETRY_KEY, {}).setdefault(tensor.output_nr, set())
    seen.add(_geometry_key(tensor))


def _recorded_geometries(node, output_nr: int) -> set:
    """The geometries recording() saw at edge (node, output_nr); empty where it saw none."""
    return node.metadata.get(_GEOMETRY_KEY, {}).get(output_nr, set())


def _recorded_hidden(node) -> dict:
    """The hidden saved values recording() kept for node, by field name."""
    return node.metadata.get(_HIDDEN_KEY, {})


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


def _train_argument(args: tuple, kwargs: dict):
    """native_dropout(Tensor input, float p, bool? train)'s train."""
    return args[2] if len(args) > 2 else kwargs.get("train")


class _InPlaceOnViewRecorder(TorchDispatchMode):
    """Records each in-place aten op on a view while grad mode is on, and the geometries and hidden
    values the module's docstring lists. The op's node exists only after the op returns (autograd's
    kernel makes it, above this mode), so a record waits until the next op (or the end of recording)
    and then goes into the metadata dict of its node (for an in-place op on a view, the base's
    grad_fn, if that is a CopySlices without one): it lives as long as the node does."""

    def __init__(self):
        super().__init__()
        self.pending: list[tuple[torch.Tensor, _InPlaceRecord]] = []
        self.written: list[torch.Tensor] = []  # tensors an in-place op wrote: their geometry at their new edge
        self.dropouts: list[tuple[torch.Tensor, Any]] = []  # (native_dropout's output, its train)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.attach_pending()
        grad_enabled = torch.is_grad_enabled()
        if grad_enabled:
            for value in pytree.tree_leaves((args, kwargs)):
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    _note_geometry(value)
        view = args[0] if args else None
        if _writes_self(func) and isinstance(view, torch.Tensor) and grad_enabled:
            # A view's own new grad_fn is made lazily (regenerated on first use): its base's edge is what
            # that node points to, so the base is the tensor whose geometry matters.
            self.written.append(view._base if view._is_view() else view)
            if view._is_view() and _any_requires_grad(args, kwargs):
                self.pending.append((view._base, _InPlaceRecord.of(func, tuple(args), kwargs)))
        result = func(*args, **kwargs)
        if func is torch.ops.aten.native_dropout.default and grad_enabled:
            # Not a view op: autograd sets the node on this very output tensor.
            self.dropouts.append((result[0], _train_argument(args, kwargs)))
        return result

    def attach_pending(self) -> None:
        for base, record in self.pending:
            node = base.grad_fn
            if node is not None and _short_name(node) == "CopySlices" and _RECORD_KEY not in node.metadata:
                node.metadata[_RECORD_KEY] = record
        for tensor in self.written:
            if tensor.requires_grad:
                _note_geometry(tensor)
        for output, train in self.dropouts:
            node = output.grad_fn
            if node is not None and _short_name(node) == "NativeDropoutBackward0":
                node.metadata.setdefault(_HIDDEN_KEY, {})["train"] = train
        self.pending.clear()
        self.written.clear()
        self.dropouts.clear()


@contextlib.contextmanager
def recording():
    """Run a forward under this to let capture() take the in-place ops on views it makes (their
    CopySlices nodes), as_strided on non-leaf tensors and native_dropout called directly:
    ``with refgrad.torch.recording(): loss = model(x)``. See the module's docstring for what it
    records and why."""
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
