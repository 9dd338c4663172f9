"""The graph model of refgrad.graph, filled from a walk of torch's graph: one GraphNode per node
(C++ nodes with their saved fields, autograd.Function nodes as function calls, CopySlices with
its record), the leaves and their names, and the hooks read (refgrad.torch.host says which).

With anomaly mode on during the forward (torch.autograd.detect_anomaly),
each node's origin is the user's source line that created it.
"""
from __future__ import annotations

import collections
import os
import re
from typing import Any, Callable, Optional

import torch

import refgrad
from refgrad.graph import Edge, Graph, GraphNode
from refgrad.torch.in_place import _record_of
from refgrad.torch.host import _FunctionNode
from refgrad.torch.nodes import (_dtype_name, _freed_error, _is_compiled_function, _is_function_node, _is_leaf_node,
                                 _is_module_hook_node, _node_post_hooks, _schema_of, _short_name,
                                 _snapshot)
from refgrad.torch.saved import _TensorInfo, _saved_fields
from refgrad.torch.walk import _Walk

_TORCH_DIR = os.path.dirname(torch.__file__)
_REFGRAD_DIR = os.path.dirname(refgrad.__file__)


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
            return refgrad.display.source_line(match.group(1), int(match.group(2)))  # "cell 3, line 8" in Jupyter
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
        self.node_post_hooks: dict[str, tuple[Callable, Any]] = {}  # by hook name: (the hook, its node)
        self.function_nodes: dict[str, _FunctionNode] = {}  # by function name: the autograd.Function node

    def build(self) -> Graph:
        for fn in self.walk.order:
            try:
                self._add(fn)
            except refgrad.Error as error:
                raise refgrad.Error(f"{error} (at {self.walk.where(fn)})") from error
        return self.graph

    def edge(self, edge) -> Optional[Edge]:
        """The graph edge of torch's edge (node, input_nr), through reentrant checkpoints (see _Walk.resolve)."""
        resolved = self.walk.resolve(edge[0], edge[1])
        return None if resolved is None else Edge(self.walk.index[resolved[0]], resolved[1])

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
            saved, count, nones = self._function_saved(fn)
            node.function_saved = saved
            self.function_nodes[node.name] = _FunctionNode(fn, count, [tensor.dtype for tensor in saved], nones)
            if _is_module_hook_node(fn):  # nn.Module full backward (pre-)hooks: post hooks of this node
                for i, hook in enumerate(_node_post_hooks(fn)):
                    node.post_hooks.append(f"{node.name}_post_hook{i}")
                    self.node_post_hooks[node.post_hooks[-1]] = (hook, fn)
        elif _short_name(fn) == "CopySlices":
            record = _record_of(fn)
            wrapped = record.wrapped()
            node.kind = "copy_slices"
            node.name = _short_name(wrapped)
            node.saved = {"base": record.base, "view": record.view, **_saved_fields(wrapped, _schema_of(wrapped))}
        else:
            node.saved = _saved_fields(fn, _schema_of(fn))
        self.graph.add_node(node)

    @staticmethod
    def _function_saved(fn) -> tuple[list[torch.Tensor], int, tuple[int, ...]]:
        """Copies of the node's saved tensors, how many of them are ctx.saved_tensors (a compiled
        forward's node keeps more in ctx._tensors_no_vc_check, which follow them), and the positions
        among those where save_for_backward was given None: the program holds tensors only, so the
        Nones are left out of it and put back when the backward is called (host._function_backward)."""
        try:
            saved = list(fn.saved_tensors)
        except RuntimeError as error:
            raise _freed_error(fn, error) from error
        count = len(saved)
        if _is_compiled_function(fn):
            saved += list(getattr(fn, "_tensors_no_vc_check", None) or [])
        nones = tuple(i for i, tensor in enumerate(saved) if tensor is None)
        tensors = [_snapshot(tensor) for tensor in saved if tensor is not None]
        return tensors, count, nones

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
        if tensor.grad_fn is None or not (tensor._backward_hooks or tensor.retains_grad):
            return
        if tensor.grad_fn not in self.walk.index and tensor.grad_fn not in self.walk.checkpoints:
            return  # not in this backward
        edge = self.edge((tensor.grad_fn, tensor.output_nr))  # a reentrant checkpoint's output: its recomputed one's
        if edge is None:
            return  # the recomputed output needs no grad
        name = self.names(tensor, "output")
        node = self.graph.nodes[edge.node]
        self._add_tensor_hooks(node, edge.input_nr, name, tensor._backward_hooks)
        if tensor.retains_grad:
            node.retains_grad[edge.input_nr] = name

    def _add_tensor_hooks(self, node: GraphNode, slot: int, name: str, hooks) -> None:
        """A tensor's hooks are tensor pre-hooks of the node its grad flows into, at its slot."""
        for hook_name, hook in _hook_names(name, "hook", hooks):
            node.tensor_pre_hooks.setdefault(slot, []).append(hook_name)
            self.tensor_hooks[hook_name] = hook
