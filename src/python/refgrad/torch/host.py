"""The Python side of a captured program: the hooks and autograd.Function backwards a refgrad
Machine calls, by program name.

* Hooks that are visible, and captured: tensor hooks of leaves
  (``variable._backward_hooks``), post-accumulate-grad hooks
  (``variable._post_accumulate_grad_hooks``), and the hooks and retain_grad()
  of the non-leaf tensors capture is given (``outputs``, ``inputs`` and the
  values of ``names``). A post-accumulate-grad hook is given a stand-in leaf
  (the parameter's values, refgrad's .grad), so a run never changes the
  user's parameters.
* nn.Module full backward hooks and backward pre-hooks (``register_full_backward_hook``,
  ``register_full_backward_pre_hook``, global ones too): torch puts a BackwardHookFunctionBackward node
  (an identity autograd.Function) around the module's inputs and one around its outputs, and
  torch.utils.hooks.BackwardHook registers the hooks as those nodes' post hooks. torch does not show a
  node's hooks to Python, but the handle that ``register_hook`` returns refers to the node's dict of
  them: capture reads it (refgrad.torch.nodes._node_post_hooks) and the program calls them as ``post``
  hooks right after the node, where torch's engine calls them, with what torch hands them; their
  return values replace the grads as in torch. They run with the user's BackwardHook objects (the
  output node's hook keeps grad_output there for the input node's) and modules.
* Hooks that are registered but invisible from Python, and so NOT captured
  (the program runs without them): node hooks and pre-hooks
  (``grad_fn.register_hook`` / ``register_prehook``, on C++ and
  autograd.Function nodes alike, so also nn.Module's legacy
  register_backward_hook), and hooks or retain_grad() of non-leaf tensors
  capture is not given.
* autograd.Function nodes become host functions that call
  ``_forward_cls.backward(ctx, *grads)`` (its ``vjp`` if it defines one) with
  the program's saved tensors (ctx is the node, its ``saved_tensors``
  replaced), grad mode off as in torch's engine. Undefined grads are
  materialized as zeros (torch's default; ``ctx.set_materialize_grads(False)``
  cannot be read back from Python).
* A torch.compile'd forward is one such node, CompiledFunctionBackward
  (AOTAutograd's autograd.Function, torch/_functorch/_aot_autograd/
  runtime_wrappers.py), called with the convention it has: grads boxed as one
  list (``boxed_grads_call``), ctx also holding ``_tensors_no_vc_check`` (the
  program keeps them after ``saved_tensors``), and its check for donated
  buffers off (each call gets fresh copies). Its compiled backward runs at the
  dtypes it was compiled for: a float64 run casts its saved tensors and grads
  back to those and its float32 results up to float64. So does, in a float64
  run, any Function's backward that raises when given float64 tensors (one
  written for its own dtypes, as torch's chunked linear_cross_entropy is);
  the Nones a Function saved are given back in their places.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch

import refgrad
from refgrad.torch.nodes import _is_compiled_function, _short_name


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


def _module_hook(hook: Callable, fn, promote: bool) -> Callable:
    """A post hook of a BackwardHookFunctionBackward node (nn.Module full backward hooks and pre-hooks),
    which torch calls as hook(grad_inputs, grad_outputs), both tuples: the node's validated results and
    its incoming grads; what it returns (a tuple, or None: unchanged) replaces the results. Its backward
    is the identity, and torch's node hands its hooks every result, each its incoming grad or, where
    none came, the zeros PyNode materializes: the hooks get those here too. One difference: for an input
    that needs no grad (no edge; torch marks its output non-differentiable and shows no metadata of it)
    torch hands the hooks zeros of that input's shape, which Python cannot read, and refgrad None.
    What the hooks return for such an input is dropped, as in torch."""
    metadata = list(fn._input_metadata)
    valid = [node is not None for node, _ in fn.next_functions]

    def handed(i: int, grad_input, grad_output) -> Optional[torch.Tensor]:
        if grad_input is not None:
            return _to_torch(grad_input)
        if grad_output is not None:
            return grad_output
        return _zeros(metadata[i], promote) if valid[i] else None

    def call(grad_inputs, grad_outputs):
        grad_outputs = tuple(_to_torch(g) for g in grad_outputs)
        grad_inputs = tuple(handed(i, grad_input, grad_output)
                            for i, (grad_input, grad_output) in enumerate(zip(grad_inputs, grad_outputs)))
        result = hook(grad_inputs, grad_outputs)
        return None if result is None else list(result)

    return call


# The reference precision (DESIGN.md): what a float64 run makes of each dtype.
_REFERENCE_DTYPES = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
                     torch.complex32: torch.complex128, torch.complex64: torch.complex128}


def _zeros(metadata, promote: bool) -> torch.Tensor:
    """The zeros PyNode materializes for an undefined grad of an output (in a float64 run, promoted)."""
    dtype = _REFERENCE_DTYPES.get(metadata.dtype, metadata.dtype) if promote else metadata.dtype
    return torch.zeros(list(metadata.shape), dtype=dtype, device=metadata.device)


@dataclass
class _FunctionNode:
    """An autograd.Function node as capture read it: the node, how many of the program's saved
    tensors (its function_saved, in order) are ctx.saved_tensors (a compiled forward's node keeps
    the rest in ctx._tensors_no_vc_check), each saved tensor's dtype as captured, and the positions
    in ctx's saved list where the forward saved None (left out of the program's tensors)."""

    node: Any
    saved_tensors: int
    saved_dtypes: list[torch.dtype]
    saved_nones: tuple[int, ...] = ()


class _Context:
    """The ctx an autograd.Function's backward sees: the node, with the program's saved tensors
    (as torch._dynamo.external_utils.FakeBackwardCFunction does for compiled autograd)."""

    def __init__(self, node, saved_tensors: tuple, tensors_no_vc_check: Optional[list] = None):
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "saved_tensors", saved_tensors)
        if tensors_no_vc_check is not None:
            object.__setattr__(self, "_tensors_no_vc_check", tensors_no_vc_check)

    def __getattr__(self, name: str):
        return getattr(self._node, name)

    def maybe_clear_saved_tensors(self) -> None:
        """A compiled backward frees its node's saved tensors when the graph is not retained; a run
        of refgrad's frees nothing of the user's graph (its saved tensors are the program's)."""


def _user_backward(forward_cls) -> Callable:
    """What torch calls for the node: the Function's vjp if it defines one, else its backward
    (torch.autograd.function.BackwardCFunction._get_user_fn)."""
    if forward_cls.vjp is not torch.autograd.Function.vjp:
        return forward_cls.vjp
    return forward_cls.backward


def _function_backward(function: _FunctionNode, promote: bool) -> Callable:
    """The host function of an autograd.Function node: the machine calls it with the saved tensors,
    need (one per next edge) and the incoming grads; it returns one grad per next edge. It runs as
    torch's engine runs a backward() (create_graph=False): grad mode off.

    A compiled forward's node (CompiledFunctionBackward, torch.compile's AOTAutograd) takes its
    grads boxed, as one list (``boxed_grads_call``), and its compiled backward runs at the dtypes it
    was compiled for: in a float64 run its saved tensors and grads are cast back to their captured
    dtypes, and its results (float16, bfloat16, float32) up to float64."""
    fn = function.node
    forward_cls = fn._forward_cls
    backward = _user_backward(forward_cls)
    boxed = getattr(forward_cls, "boxed_grads_call", False)
    compiled = _is_compiled_function(fn)
    needs_input_grad = tuple(fn.needs_input_grad)
    valid_edges = [node is not None for node, _ in fn.next_functions]
    metadata = list(fn._input_metadata)

    def run_backward(saved, grads, at_captured_dtypes: bool):
        if at_captured_dtypes:
            saved = [t.to(dtype) for t, dtype in zip(saved, function.saved_dtypes)]
            grads = [g.to(metadata[i].dtype) for i, g in enumerate(grads)]
        saved = list(saved)
        for position in function.saved_nones:  # ascending: each None goes back where it was saved
            saved.insert(position, None)
        count = function.saved_tensors
        ctx = _Context(fn, tuple(saved[:count]), saved[count:] if compiled else None)
        with torch.no_grad(), _donated_buffers_off() if compiled else contextlib.nullcontext():
            result = backward(ctx, grads) if boxed else backward(ctx, *grads)
        result = result if isinstance(result, tuple) else (result,)
        if at_captured_dtypes and promote:
            result = tuple(_promoted(grad) for grad in result)
        return result

    def call(saved, need, grads):
        saved = [_to_torch(t) for t in saved]
        grads = [_zeros(metadata[i], promote) if g is None else _to_torch(g) for i, g in enumerate(grads)]
        if compiled:
            result = run_backward(saved, grads, at_captured_dtypes=True)
        else:
            try:
                result = run_backward(saved, grads, at_captured_dtypes=False)
            except Exception:
                # A float64 run gives a Function's backward float64 tensors; one written for its own dtypes
                # (torch's chunked linear_cross_entropy checks them) refuses them, and then runs as it
                # ran in the forward's dtypes, its results promoted, as a compiled backward does.
                promoted = promote and (any(t.dtype != dtype for t, dtype in zip(saved, function.saved_dtypes))
                                        or any(g.dtype != m.dtype for g, m in zip(grads, metadata)))
                if not promoted:
                    raise
                result = run_backward(saved, grads, at_captured_dtypes=True)
        if len(result) != len(needs_input_grad):
            raise RuntimeError(f"function {_short_name(fn)} returned an incorrect number of gradients "
                               f"(expected {len(needs_input_grad)}, got {len(result)})")
        # One grad per forward argument; the ones that need a grad go, in order, to the valid edges.
        wanted = iter(grad for grad, needed in zip(result, needs_input_grad) if needed)
        return [next(wanted, None) if valid else None for valid in valid_edges]

    return call


def _promoted(grad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return grad.to(_REFERENCE_DTYPES[grad.dtype]) if grad is not None and grad.dtype in _REFERENCE_DTYPES else grad


def _donated_buffers_off():
    """AOTAutograd refuses to run a backward that may write into its saved tensors (donated
    buffers) but for their last use (retain_graph=False), which a call outside torch's engine never
    is. The tensors refgrad passes are fresh copies of the program's, made for this call: the
    compiled backward may overwrite them, so the check is turned off for the call."""
    return torch._functorch.config.patch(donated_buffer=False)
