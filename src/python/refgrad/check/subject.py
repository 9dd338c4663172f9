"""fn and its args, and the fresh forwards every engine and the oracle run: modules copied, tensors cloned,
the RNG restored; the TorchFunctionModes that record fn's hooks and add probes to its intermediates."""
from __future__ import annotations

import contextlib
import copy
import types
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch.overrides import TorchFunctionMode

import refgrad
from refgrad.engines import Forward


class _HookMode(TorchFunctionMode):
    """Wraps each hook fn registers in its forward (Tensor.register_hook,
    Tensor.register_post_accumulate_grad_hook) so that every call of it is recorded, in order, by a
    label that names the hook and its tensor: "tensor hook 0 on net.0.weight"."""

    _KINDS = {torch.Tensor.register_hook: "tensor hook",
              torch.Tensor.register_post_accumulate_grad_hook: "post-accumulate-grad hook"}

    def __init__(self):
        super().__init__()
        self.fired: list[str] = []
        self.registered = 0
        self.leaf_names: dict[int, str] = {}
        self.non_leaves: list[torch.Tensor] = []  # the non-leaf tensors hooks were registered on

    def bind(self, leaves: dict[str, torch.Tensor]) -> None:
        """Learns the leaves' names, for the labels."""
        self.leaf_names = {id(leaf): name for name, leaf in leaves.items()}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kind = self._KINDS.get(func)
        if kind is None:
            return func(*args, **(kwargs or {}))
        tensor, hook = args[0], args[1]
        if tensor.grad_fn is not None and not any(tensor is seen for seen in self.non_leaves):
            self.non_leaves.append(tensor)
        owner = self.leaf_names.get(id(tensor)) or f"the output of {tensor.grad_fn.name()}"
        label = f"{kind} {self.registered} on {owner}"
        self.registered += 1
        fired = self.fired

        def recorded(*hook_args):
            fired.append(label)
            return hook(*hook_args)

        return func(tensor, recorded)



_PROBE = "~probe"  # leaf names of probes: no parameter or argument is named so


class _ProbeMode(TorchFunctionMode):
    """Records the tensors that torch functions return in the forward (those that require grad), or,
    given probes, adds probe i (zeros that require grad: a leaf) to the i-th of them, so that any engine,
    asked for the probes' gradients, gives the gradients with respect to the forward's intermediates.
    In-place functions are left alone (their result is their argument). A probe whose shape or dtype
    differs from the tensor's is not added (it would broadcast): ``aligned`` turns False."""

    def __init__(self, probes: Optional[list[torch.Tensor]] = None, record: bool = False):
        super().__init__()
        self.probes = probes or []
        self.record = record
        self.recorded: list[torch.Tensor] = []
        self.functions: list[str] = []
        self.count = 0
        self.aligned = True

    def bind(self, leaves: dict[str, torch.Tensor]) -> None:
        """Adds the probes to the forward's leaves."""
        leaves.update({f"{_PROBE}{i}": probe for i, probe in enumerate(self.probes)})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if (not isinstance(out, torch.Tensor) or not out.requires_grad or not out.is_floating_point()
                or name.endswith("_") or name.startswith("__set") or any(out is arg for arg in args)):
            return out
        if self.record:
            self.recorded.append(out)
            self.functions.append(name)
        elif self.count < len(self.probes):
            probe = self.probes[self.count]
            if probe.shape == out.shape and probe.dtype == out.dtype:
                out = out + probe
            else:
                self.aligned = False
            self.count += 1
        return out


class _Subject:
    """fn and its args, and fresh forwards of them: modules deep-copied, tensors cloned, RNG restored."""

    def __init__(self, fn: Callable, args: Sequence[Any], keep_grad: bool = False):
        self.fn = fn
        self.args = list(args)
        self.keep_grad = keep_grad
        self.rng_state = torch.random.get_rng_state()
        self.cuda_rng_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None

    @property
    def qualname(self) -> str:
        target = type(self.fn) if isinstance(self.fn, torch.nn.Module) else self.fn
        return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"

    def restore_rng(self) -> None:
        torch.random.set_rng_state(self.rng_state)
        if self.cuda_rng_state is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng_state)

    def forward(self, transform: Optional[Callable] = None, device: str = "cpu",
                mode: Optional[Union[_ProbeMode, _HookMode]] = None) -> Forward:
        """A fresh forward; under ``mode`` when given (bound to the leaves first)."""
        pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        fn = self._fresh(self.fn, "", pairs, device)
        args = [self._fresh(arg, f"arg{i}", pairs, device) for i, arg in enumerate(self.args)]
        leaves = {}
        for name, (leaf, original) in pairs.items():
            keep = self.keep_grad and original.grad is not None
            leaf.grad = original.grad.detach().to(device, copy=True) if keep else None
            leaves[name] = leaf
        self.restore_rng()
        if mode is not None:
            mode.bind(leaves)
        with mode if mode is not None else contextlib.nullcontext():
            outputs = (transform(fn) if transform else fn)(*args)
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        for i, output in enumerate(outputs):
            if not isinstance(output, torch.Tensor) or not output.requires_grad:
                raise refgrad.Error(f"refgrad.check: output {i} of {self.qualname} is not a tensor that requires grad")
        return Forward(outputs, leaves)

    @staticmethod
    def _fresh(value: Any, name: str, leaves: dict[str, tuple[torch.Tensor, torch.Tensor]], device: str) -> Any:
        """A copy of one argument (or of fn); its leaves that require grad go into ``leaves`` by name,
        each with the user's tensor it copies."""
        prefix = f"{name}." if name else ""
        if isinstance(value, torch.nn.Module):
            module = copy.deepcopy(value).to(device)
            for (parameter_name, parameter), original in zip(module.named_parameters(), value.parameters()):
                if parameter.requires_grad:
                    leaves[prefix + parameter_name] = (parameter, original)
            return module
        if isinstance(value, torch.Tensor):
            fresh = value.detach().to(device, copy=True).requires_grad_(value.requires_grad)
            if fresh.requires_grad:
                leaves[name] = (fresh, value)
            return fresh
        if isinstance(value, (list, tuple)):
            items = [_Subject._fresh(item, f"{name}.{j}", leaves, device) for j, item in enumerate(value)]
            return type(value)(items) if isinstance(value, list) else tuple(items)
        if isinstance(value, types.FunctionType) and not name:
            return _Subject._fresh_function(value, leaves, device)
        return value

    @staticmethod
    def _fresh_function(fn: types.FunctionType, leaves: dict[str, tuple[torch.Tensor, torch.Tensor]],
                        device: str) -> types.FunctionType:
        """fn itself, but with fresh copies of the modules and tensors that require grad which it reaches
        through its closure cells or the globals its code names; their leaves are named by the variable's
        name (`dw.weight`, `scale`). What fn reaches only through other functions is not found (the oracle
        then refuses the leaves it cannot name)."""
        def wanted(value: Any) -> bool:
            return isinstance(value, torch.nn.Module) or (isinstance(value, torch.Tensor) and value.requires_grad)

        free = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        closure_values = {}
        for variable, cell in free.items():
            try:
                if wanted(cell.cell_contents):
                    closure_values[variable] = cell.cell_contents
            except ValueError:  # a cell not filled yet
                continue
        global_values = {variable: fn.__globals__[variable] for variable in fn.__code__.co_names
                         if variable in fn.__globals__ and variable not in free and wanted(fn.__globals__[variable])}
        if not closure_values and not global_values:
            return fn
        fresh = {variable: _Subject._fresh(value, variable, leaves, device)
                 for variable, value in {**closure_values, **global_values}.items()}
        closure = None if fn.__closure__ is None else tuple(
            types.CellType(fresh[variable]) if variable in closure_values else free[variable]
            for variable in fn.__code__.co_freevars)
        scope = {**fn.__globals__, **{variable: fresh[variable] for variable in global_values}}
        copied = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, closure)
        copied.__kwdefaults__ = fn.__kwdefaults__
        copied.__qualname__ = fn.__qualname__
        return copied


def _ones(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.ones_like(output).detach().cpu() for output in outputs]
