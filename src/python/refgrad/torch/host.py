"""The Python side of a captured program: the hooks and autograd.Function backwards a refgrad
Machine calls, by program name.

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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import torch

import refgrad
from refgrad.torch.nodes import _short_name


@dataclass
class Host:
    """The Python side of a program: hooks and autograd.Function backwards by program name,
    as refgrad.Machine(hooks=..., functions=...) takes them."""

    hooks: dict[str, Callable] = field(default_factory=dict)
    functions: dict[str, Callable] = field(default_factory=dict)


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
