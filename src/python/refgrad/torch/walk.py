"""The nodes reachable from some start edges, and what capture refuses.

Refused, with an UnsupportedError naming the node, its saved fields and its
path from the root: nodes refgrad lacks, CopySlices outside recording() (see
refgrad.torch.in_place), a node with a hidden saved field capture cannot know
(refgrad.torch.saved: AsStridedBackward0's self_geometry of a non-leaf
outside recording(), NativeDropoutBackward0's train), and a reentrant
checkpoint whose forward cannot be recomputed. coverage() lists them without raising. Activation checkpointing
is captured (refgrad.torch.checkpointing): a reentrant checkpoint's node is
replaced by its recomputed graph here, a non-reentrant one's saved values are
read through their unpack hooks. nn.Module full backward hooks are captured
(refgrad.torch.host). The functionalizer refuses what it cannot express yet,
and its message names the node and where it sits.
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from typing import Optional

import torch

import refgrad
from refgrad.torch.checkpointing import _is_reentrant_checkpoint, _Recomputation, _ReentrantCheckpoint
from refgrad.torch.in_place import _copy_slices_reason
from refgrad.torch.nodes import _is_function_node, _is_leaf_node, _raw_saved, _saved_attributes, _schema_of, _short_name
from refgrad.torch.saved import _hidden_reason


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


# torch's nodes that take or give a sparse tensor (Functions.h's names: to_sparse, to_dense, values,
# coalesce, the sparse ops). refgrad has none: its tensors are dense, and none can be added until they are not.
_SPARSE_LAYOUT_NODE = re.compile(r"^(ToSparse\w*|ToDense|Sparse\w+|Coalesce|Values)Backward\d+(_copy)?$")
SPARSE_LAYOUTS_REASON = ("it takes or gives a tensor of a sparse layout; refgrad's tensors are dense (torch.strided): "
                         "sparse layouts are not supported yet")


def _unsupported_reason(fn) -> Optional[str]:
    if _is_leaf_node(fn) or _is_function_node(fn):
        return None  # autograd.Function nodes are host calls (refgrad.torch.host)
    if _SPARSE_LAYOUT_NODE.match(_short_name(fn)):
        return SPARSE_LAYOUTS_REASON
    if _short_name(fn) == "CopySlices":
        return _copy_slices_reason(fn)
    schema = _schema_of(fn)  # by torch's name, or without its torch::autograd:: prefix (CopyBackwards)
    if schema is None:
        return f"refgrad has no node {_short_name(fn)} (refgrad.nodes() lists those it has)"
    return _hidden_reason(fn, schema)  # a hidden saved field capture cannot know


class _Walk:
    """The nodes reachable from some start edges, breadth first, each with the node it was reached from.

    A reentrant checkpoint's node (CheckpointFunctionBackward) is not among them: its recomputed graph is
    (refgrad.torch.checkpointing). ``resolve`` follows an edge into that graph: to the recomputed output's
    node, and from a detached input's AccumulateGrad on along the checkpoint's edge for that input. Where
    the recomputation fails the node stays, refused with the reason. Non-reentrant checkpoints' frames are
    given to ``recomputation`` before any of their saved values is unpacked.
    """

    def __init__(self, starts, recomputation: Optional[_Recomputation] = None):
        self.order: list = []
        self.parent: dict = {}
        self.through: dict = {}  # a node first reached through a reentrant checkpoint -> that node's name
        self.checkpoints: dict = {}  # CheckpointFunctionBackward -> _ReentrantCheckpoint
        self.refused: dict = {}  # a node whose recomputation failed -> why
        self.recomputation = recomputation or _Recomputation()
        self._queue = collections.deque()
        for start in starts:  # edges (node, input_nr), or nodes (their input 0)
            self._reach((start, 0) if hasattr(start, "next_functions") else start, None)
        self._run()
        # An output of a checkpoint that no grad reaches gets zeros in torch: its inner graph runs too.
        while True:
            unused = [(checkpoint, k) for checkpoint in self.checkpoints.values() for k in checkpoint.unused_outputs()]
            if not unused:
                break
            for checkpoint, k in unused:
                checkpoint.fed_zeros.append(k)
                self._reach((checkpoint.node, k), None)
            self._run()
        self.index = {fn: i for i, fn in enumerate(self.order)}

    def _run(self) -> None:
        while self._queue:
            fn = self._queue.popleft()
            for edge in fn.next_functions:
                self._reach(edge, fn)

    def _reach(self, edge, parent) -> None:
        through = []
        resolved = self.resolve(edge[0], edge[1], through=through)
        if resolved is None or resolved[0] in self.parent:
            return
        fn = resolved[0]
        self.parent[fn] = parent
        if through:
            self.through[fn] = " -> ".join(through)
        self.order.append(fn)
        self._queue.append(fn)
        self.recomputation.keep_frames_of(_raw_saved(fn))

    def resolve(self, node, input_nr: int, through: Optional[list] = None) -> Optional[tuple]:
        """Where a grad sent along edge (node, input_nr) lands among the walk's nodes; None where it is
        dropped (a recomputed output that needs no grad). ``through`` collects the checkpoints passed."""
        while node is not None:
            if _is_reentrant_checkpoint(node) and node not in self.refused:
                checkpoint = self._checkpoint(node)
                if checkpoint is None:
                    continue  # refused: the node itself is the target
                checkpoint.used.add(input_nr)
                if through is not None:
                    through.append(_short_name(node))
                root = checkpoint.roots[input_nr] if input_nr < len(checkpoint.roots) else None
                if root is None:
                    return None
                node, input_nr = root
                continue
            forwarded = self._forwarded(node)
            if forwarded is None:
                return node, input_nr
            node, input_nr = forwarded
        return None

    def _checkpoint(self, fn) -> Optional[_ReentrantCheckpoint]:
        if fn not in self.checkpoints:
            self.recomputation.keep_frames_of(_raw_saved(fn))
            try:
                self.checkpoints[fn] = _ReentrantCheckpoint.of(fn)
            except Exception as error:  # the user's function, recomputed
                self.refused[fn] = ("activation checkpointing (use_reentrant=True): recomputing the forward as "
                                    f"its backward does raised {type(error).__name__}: {error}")
                return None
        return self.checkpoints[fn]

    def _forwarded(self, fn) -> Optional[tuple]:
        """The checkpoint's next edge, when fn is the AccumulateGrad of a checkpoint's detached input."""
        if not _is_leaf_node(fn):
            return None
        for checkpoint in self.checkpoints.values():
            if fn in checkpoint.inputs:
                return checkpoint.inputs[fn]
        return None

    def zero_roots(self) -> list[tuple[tuple, torch.Tensor]]:
        """(edge, zeros) for each checkpoint output that no grad reaches: extra roots of the program, as
        torch's node materializes zeros for them (refgrad.torch.checkpointing)."""
        return [((checkpoint.node, k), checkpoint.zeros(k))
                for checkpoint in self.checkpoints.values() for k in checkpoint.fed_zeros]

    def where(self, fn) -> str:
        path = []
        while fn is not None:
            path.append(_short_name(fn))
            if fn in self.through:
                path.append(self.through[fn])
            fn = self.parent[fn]
        return " -> ".join(reversed(path))

    def unsupported(self) -> list[Unsupported]:
        found = []
        for fn in self.order:
            reason = self.refused.get(fn) or _unsupported_reason(fn)
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
        edges.append(gradient_edge(output))
    return edges


def gradient_edge(tensor: torch.Tensor) -> torch.autograd.graph.GradientEdge:
    """torch.autograd.graph.get_gradient_edge, also for a leaf that is a view (OpInfo's istft window): torch
    finds a leaf's AccumulateGrad through view_as, which for such a leaf leads into its base's graph and may
    find none ("Expected gradient function to be set"); an op that is not a view leads to the leaf's own.
    The edge's node is None where the leaf has none either: no output's gradient reaches it."""
    try:
        return torch.autograd.graph.get_gradient_edge(tensor)
    except AssertionError:
        if tensor.grad_fn is not None or not tensor.requires_grad:
            raise
    with torch.enable_grad():
        accumulator = tensor.mul(1).grad_fn.next_functions[0][0]
    return torch.autograd.graph.GradientEdge(accumulator, 0)


def coverage(outputs) -> list[Unsupported]:
    """The nodes of ``outputs``' backward graph that capture() would refuse, without raising. Reentrant
    checkpoints are recomputed to see their inner nodes (refgrad.torch.checkpointing)."""
    recomputation = _Recomputation()
    with recomputation.active():
        return _Walk(_root_edges(_outputs_list(outputs)), recomputation).unsupported()
