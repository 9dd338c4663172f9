"""Reading one node of torch's backward graph (a grad_fn): its name and kind, its saved values as
torch shows them to Python, and refgrad's schema of it."""
from __future__ import annotations

import functools
from typing import Optional

import torch

import refgrad


_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


def _short_name(fn) -> str:
    return fn.name().removeprefix("torch::autograd::")


def _is_leaf_node(fn) -> bool:
    return fn.name() == _ACCUMULATE_GRAD


def _is_function_node(fn) -> bool:
    return hasattr(fn, "_forward_cls")


def _is_compiled_function(fn) -> bool:
    """A torch.compile'd forward's node, CompiledFunctionBackward: the autograd.Function AOTAutograd
    makes (torch/_functorch/_aot_autograd/runtime_wrappers.py), which has an _aot_id."""
    return _is_function_node(fn) and hasattr(fn._forward_cls, "_aot_id")


def _is_module_hook_node(fn) -> bool:
    """BackwardHookFunctionBackward: the node nn.Module full backward hooks and backward pre-hooks put
    around a module's inputs and outputs (torch.utils.hooks.BackwardHook); the hooks are its post hooks."""
    return _is_function_node(fn) and fn._forward_cls is torch.nn.modules._functions.BackwardHookFunction


def _node_post_hooks(fn) -> list:
    """The Python post hooks of node ``fn`` (``grad_fn.register_hook``), in the order torch calls them.
    torch keeps them in one dict per node and does not show it, but the handle that registering a hook
    returns refers to that dict: one hook is registered, the dict read, and the hook removed at once.
    A node that had no post hook is left with an empty dict (torch calls nothing from it): call this
    for nodes known to have hooks."""
    handle = fn.register_hook(lambda grad_inputs, grad_outputs: None)
    try:
        return [hook for key, hook in handle.hooks_dict_ref().items() if key != handle.id]
    finally:
        handle.remove()


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


@functools.cache
def _schemas() -> dict[str, refgrad.NodeSchema]:
    return {schema.name: schema for schema in refgrad.nodes()}


def _schema_of(fn) -> Optional[refgrad.NodeSchema]:
    """refgrad's schema of a node, by torch's name or without its torch::autograd:: prefix (CopyBackwards)."""
    return _schemas().get(fn.name()) or _schemas().get(_short_name(fn))
