"""The nodes reachable from some start nodes, and what capture refuses.

Refused, with an UnsupportedError naming the node, its saved fields and its
path from the root: nodes refgrad lacks (and CopySlices outside
recording(), see refgrad.torch.in_place), activation checkpointing (both
modes; the non-reentrant one by its saved-tensor hooks), and nn.Module full
backward hooks. coverage() lists them without raising. The functionalizer
refuses what it cannot express yet, and its message names the node and
where it sits.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Optional

import torch

import refgrad
from refgrad.torch.in_place import _copy_slices_reason
from refgrad.torch.nodes import _is_function_node, _is_leaf_node, _raw_saved, _saved_attributes, _schemas, _short_name


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


def _saved_tensor_hook_reason(fn) -> Optional[str]:
    """Saved-tensor hooks are captured (reading a saved field runs its unpack hook, as the engine
    does), except non-reentrant checkpointing's: its unpack hook recomputes the forward."""
    for saved in _raw_saved(fn):
        unpack = getattr(saved, "unpack_hook", None)
        if unpack is not None and "checkpoint" in getattr(unpack, "__module__", ""):
            return ("activation checkpointing (torch.utils.checkpoint, use_reentrant=False) keeps its saved "
                    "tensors behind saved-tensor hooks that recompute the forward, which refgrad does not run")
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
