"""fn and its args, and the fresh forwards every engine and the oracle run: modules copied, tensors cloned,
the RNG restored; the recorder of fn's hooks, and the TorchFunctionModes that find its hooked non-leaves and
add probes to its intermediates."""
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
    """Finds the non-leaf tensors fn registers tensor hooks on in its forward (Tensor.register_hook), in the
    order of their first hook, each with the name of its grad_fn then. A leaf's hooks are found on the leaf
    after the forward; a non-leaf's only through the tensor, which nothing else hands out."""

    def __init__(self):
        super().__init__()
        self.non_leaves: list[torch.Tensor] = []
        self.owners: list[str] = []  # per non-leaf: "the output of AddmmBackward0"

    def bind(self, leaves: dict[str, torch.Tensor]) -> None:
        """Nothing to learn from the leaves (_Subject.forward binds every mode it is given)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.register_hook:
            tensor = args[0]
            if tensor.grad_fn is not None and not any(tensor is seen for seen in self.non_leaves):
                self.non_leaves.append(tensor)
                self.owners.append(f"the output of {tensor.grad_fn.name()}")
        return func(*args, **(kwargs or {}))


# Where a tensor keeps its hooks: OrderedDicts keyed by the RemovableHandle's id, in registration order.
# torch's autograd holds the dict itself (PyFunctionTensorPreHook, PyFunctionTensorPostAccGradHooks) and
# reads it when the hooks fire, so a hook replaced in it is the one that fires, in eager autograd and in
# compiled autograd, which collects the dict's hooks when its backward starts.
_HOOK_DICTS = (("_backward_hooks", "tensor hook"), ("_post_accumulate_grad_hooks", "post-accumulate-grad hook"))


class _HookRecorder:
    """Records, in order, every call of the hooks that fn's forward left on its tensors, labelled by kind,
    number and tensor: "tensor hook 1 on linear.weight", the number counting fn's hook registrations in
    eager's forward, so that every engine's record names a hook as eager's does.

    Why after the forward, not at registration: an engine's forward may be compiled (torch.compile, the
    torch_compile engine), and a TorchFunctionMode around it is traced by dynamo and changes what it
    compiles (graph breaks, several graphs: the very code under test would change). So the forward runs
    as the engine runs it, and the hooks are wrapped after it and before the engine's backward, where
    they are whatever the forward registered:
    - a leaf (a parameter, an argument) keeps them in its own dicts; in a compiled forward dynamo replays
      fn's registrations on the real leaves after its graph (side effects), so they are there too;
    - a non-leaf's hooks are found through the tensor, which a TorchFunctionMode sees being hooked: a
      plain forward (no transform) runs under _HookMode, harmless there. A forward under a transform runs
      under none, so its non-leaves' hooks are not recorded: torch.compile (2.13) traces a hook on an
      intermediate into its graph (the register_hook higher-order op), so that it runs inside the compiled
      backward, and no Python call of it could be recorded anyway. ``looked_for_non_leaves`` says which.
    """

    def __init__(self, numbering: Optional[dict[tuple[str, str, int], int]] = None):
        self.fired: list[str] = []
        self.labels: list[str] = []  # the hooks wrapped, in registration order
        self.non_leaf_labels: list[str] = []
        self.looked_for_non_leaves = True
        # (tensor, kind, index among that tensor's hooks of that kind) -> the label's number; given: eager's
        self.numbering = None if numbering is None else dict(numbering)

    def forward(self, subject: "_Subject", transform: Optional[Callable], device: str) -> Forward:
        """subject's fresh forward (under _HookMode when it is plain), its hooks wrapped."""
        finder = _HookMode() if transform is None else None
        run = subject.forward(transform, device, finder)
        self.looked_for_non_leaves = finder is not None
        owners = [(name, leaf, True) for name, leaf in run.leaves.items()]
        if finder is not None:
            owners += [(owner, tensor, False) for owner, tensor in zip(finder.owners, finder.non_leaves)]
        self.wrap(owners)
        return run

    def wrap(self, owners: list[tuple[str, torch.Tensor, bool]]) -> None:
        """Replaces each hook of each (owner, tensor, is_leaf) by one that records its call first."""
        found = []
        for owner, tensor, is_leaf in owners:
            for attribute, kind in _HOOK_DICTS:
                hooks = getattr(tensor, attribute, None) or {}
                found += [(handle_id, (owner, kind, index), hooks, is_leaf) for index, handle_id in enumerate(hooks)]
        found.sort(key=lambda hook: hook[0])  # handle ids count up: registration order, across tensors
        if self.numbering is None:
            self.numbering = {key: number for number, (_, key, _, _) in enumerate(found)}
        for handle_id, key, hooks, is_leaf in found:
            owner, kind, _ = key
            number = self.numbering.setdefault(key, len(self.numbering))  # one eager's forward did not register
            label = f"{kind} {number} on {owner}"
            hooks[handle_id] = self._recorded(hooks[handle_id], label)
            self.labels.append(label)
            if not is_leaf:
                self.non_leaf_labels.append(label)

    def _recorded(self, hook: Callable, label: str) -> Callable:
        fired = self.fired

        def recorded(*hook_args):
            fired.append(label)
            return hook(*hook_args)

        return recorded


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
    """fn and its args, and fresh forwards of them: modules deep-copied, tensors cloned, RNG restored.
    ``inputs``: None (a backward into every leaf), or the names of the leaves to differentiate with respect
    to (check's inputs=): each forward carries them, with its probes, as Forward.inputs."""

    def __init__(self, fn: Callable, args: Sequence[Any], keep_grad: bool = False,
                 inputs: Optional[Sequence[str]] = None):
        self.fn = fn
        self.args = list(args)
        self.keep_grad = keep_grad
        self.inputs = None if inputs is None else list(inputs)
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
                mode: Optional[Union[_ProbeMode, _HookMode]] = None, dtype: Optional[torch.dtype] = None) -> Forward:
        """A fresh forward; under ``mode`` when given (bound to the leaves first). ``dtype`` (float64): every
        floating tensor argument, parameter and buffer converted to it, and the default dtype set to it while
        fn runs, so that the tensors fn makes are of it too: the program in that dtype, forward included."""
        pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        fn = self._fresh(self.fn, "", pairs, device, dtype)
        args = [self._fresh(arg, f"arg{i}", pairs, device, dtype) for i, arg in enumerate(self.args)]
        leaves = {}
        for name, (leaf, original) in pairs.items():
            keep = self.keep_grad and original.grad is not None
            leaf.grad = original.grad.detach().to(device, dtype=leaf.dtype, copy=True) if keep else None
            leaves[name] = leaf
        inputs = self._inputs(leaves)
        self.restore_rng()
        if mode is not None:
            mode.bind(leaves)
            if inputs is not None:  # a probe's gradient is asked for as a leaf's
                inputs += [name for name in leaves if name.startswith(_PROBE)]
        with mode if mode is not None else contextlib.nullcontext(), _default_dtype(dtype):
            outputs = (transform(fn) if transform else fn)(*args)
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        for i, output in enumerate(outputs):
            if not isinstance(output, torch.Tensor) or not output.requires_grad:
                raise refgrad.Error(f"refgrad.check: output {i} of {self.qualname} is not a tensor that requires grad")
        return Forward(outputs, leaves, inputs)

    def _inputs(self, leaves: dict[str, torch.Tensor]) -> Optional[list[str]]:
        """check's inputs= for this forward's leaves; a name that is not one of them is refused, naming it."""
        if self.inputs is None:
            return None
        unknown = [name for name in self.inputs if name not in leaves]
        if unknown:
            raise refgrad.Error(f"refgrad.check: inputs names {', '.join(map(repr, unknown))}, which "
                                f"{'is' if len(unknown) == 1 else 'are'} not among the leaves of {self.qualname} "
                                f"(tensors that require grad, named as check names them): "
                                f"{', '.join(leaves) or 'none'}")
        return list(self.inputs)

    @staticmethod
    def _fresh(value: Any, name: str, leaves: dict[str, tuple[torch.Tensor, torch.Tensor]], device: str,
               dtype: Optional[torch.dtype] = None) -> Any:
        """A copy of one argument (or of fn); its leaves that require grad go into ``leaves`` by name,
        each with the user's tensor it copies. ``dtype``: floating tensors, parameters and buffers become it."""
        prefix = f"{name}." if name else ""
        if isinstance(value, torch.nn.Module):
            module = copy.deepcopy(value).to(device)
            if dtype is not None:
                module = module.to(dtype)
            for (parameter_name, parameter), original in zip(module.named_parameters(), value.parameters()):
                if parameter.requires_grad:
                    leaves[prefix + parameter_name] = (parameter, original)
            return module
        if isinstance(value, torch.Tensor):
            to_dtype = dtype if dtype is not None and value.is_floating_point() else value.dtype
            fresh = value.detach().to(device, dtype=to_dtype, copy=True).requires_grad_(value.requires_grad)
            if fresh.requires_grad:
                leaves[name] = (fresh, value)
            return fresh
        if isinstance(value, (list, tuple)):
            items = [_Subject._fresh(item, f"{name}.{j}", leaves, device, dtype) for j, item in enumerate(value)]
            return type(value)(items) if isinstance(value, list) else tuple(items)
        if isinstance(value, types.FunctionType) and not name:
            return _Subject._fresh_function(value, leaves, device, dtype)
        return value

    @staticmethod
    def _fresh_function(fn: types.FunctionType, leaves: dict[str, tuple[torch.Tensor, torch.Tensor]],
                        device: str, dtype: Optional[torch.dtype] = None) -> types.FunctionType:
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
        fresh = {variable: _Subject._fresh(value, variable, leaves, device, dtype)
                 for variable, value in {**closure_values, **global_values}.items()}
        closure = None if fn.__closure__ is None else tuple(
            types.CellType(fresh[variable]) if variable in closure_values else free[variable]
            for variable in fn.__code__.co_freevars)
        scope = {**fn.__globals__, **{variable: fresh[variable] for variable in global_values}}
        copied = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, closure)
        copied.__kwdefaults__ = fn.__kwdefaults__
        copied.__qualname__ = fn.__qualname__
        return copied


@contextlib.contextmanager
def _default_dtype(dtype: Optional[torch.dtype]):
    """torch's default dtype set to ``dtype`` inside (unchanged for None)."""
    if dtype is None:
        yield
        return
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _ones(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.ones_like(output).detach().cpu() for output in outputs]
