"""Check backward engines against refgrad's oracle, and name the first node that went wrong.

    import refgrad.check
    report = refgrad.check.check(model, x, target)   # fn(*args): model(x, target) returns the loss
    print(report)                                    # a table: engine, gradient, errors, bound, verdict
    report.passed, report.results["compiled_autograd"]["0.weight"].max_abs
    report.first_divergence["compiled_autograd"]     # None, or the node, pc, instruction, error, source line
    report.reproducers["compiled_autograd"]          # the bundle `build/refgrad check` re-runs

What check does (DESIGN.md, "Numbers and precision"):

1. Every engine (refgrad.engines) gets its own fresh forward of fn(*args): an nn.Module fn (and any
   module among args) deep-copied, parameters and buffers alike, the RNG state restored, tensor args
   cloned, every .grad None. The user's module, tensors and RNG are left as they were.
2. The oracle R: one more fresh forward, captured by refgrad.torch.capture and run by refgrad's Machine
   at ``precision`` ("float64" promotes a float32 program).
3. Per gradient, with atol/rtol torch.testing.assert_close's for the engine's dtype (float32: rtol
   1.3e-6, atol 1e-5; float64: 1e-7, 1e-7): eager passes when max|Eager - R| <= atol + rtol max|R|;
   engine E when max|E - R| <= 2 max|Eager - R| + atol + rtol max|R|. Given rtol and atol, the rule is
   plain instead: max|E - R| <= atol + rtol max|R| for every engine. A missing gradient, a shape or
   dtype that differs, or a NaN where R has none fails.
4. The first divergent node of a failed engine, found by a second run of it:
   - an engine that runs torch's autograd graph (eager, compiled autograd, and engines whose
     gradients() takes observe=) gets a pre-hook (incoming grads) and a post-hook (validated outgoing
     grads) on every grad_fn node; compiled autograd traces them into its graph;
   - any other engine (a black box: torch_compile, an engine of your own) runs a forward under a
     TorchFunctionMode that adds a zero "probe" leaf to each tensor a torch function returns, and is
     asked, as for any leaf, for the probes' gradients: the gradients with respect to the forward's
     intermediates, i.e. the incoming grads of their grad_fn nodes;
   both are compared, in the oracle's program order, with the oracle's registers under the same rule:
   the first node whose incoming grads agree and one of whose outgoing grads (for AccumulateGrad: the
   leaf's .grad) does not is the first divergent node. Where gradients meet, the sum of a node's input
   buffer belongs to that node (DESIGN.md: its incoming grad k is its summed input-buffer slot k): a node
   whose incoming grad disagrees while each outgoing grad added into it agrees is named, for a wrong sum
   (node hooks only: a black box shows no gradient before the sum). Either way the second run's graph is
   not the plain run's: Divergence.graph says which was used.
5. Hooks fn registers in its forward are wrapped (a TorchFunctionMode sees Tensor.register_hook and
   register_post_accumulate_grad_hook) and each call recorded; an engine that runs torch's autograd
   graph passes only when its hooks fired as eager's did: the same hooks, as often, in the same order.
6. Each failed engine writes one bundle into ``reproducer_dir``: the program and its tensors, eager's
   and the engine's gradients as result sets, the rule and tolerances, and provenance (torch version,
   engine, backend, fn's qualname, date). ``build/refgrad check BUNDLE`` re-runs it without Python.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import html
import math
import os
import re
import sys
import types
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch.overrides import TorchFunctionMode

import refgrad
import refgrad.torch as refgrad_torch
from refgrad import engines as engines_module
from refgrad.engines import Forward

__all__ = ["Divergence", "GradientResult", "Report", "check"]

# torch.testing.assert_close's defaults (torch.testing._comparison._DTYPE_PRECISIONS): (rtol, atol).
_DTYPE_PRECISIONS = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


# ------------------------------------------------------------------- results ---


@dataclass
class GradientResult:
    """One gradient of one engine against R: max|E - R|, max|E - R| / max|R| (0/0 counts as 0), the
    bound it must stay under, and the verdict; ``note`` says why when it failed without figures."""

    max_abs: float
    max_rel: float
    tolerance: float
    passed: bool
    note: str = ""


@dataclass
class Divergence:
    """Where an engine first went wrong: the PyTorch node, the oracle's program counter and
    instruction, the error (max|E - R| of the worst outgoing grad, and its bound), the forward source
    line when known, and which backward was used. ``node`` None: not localized, ``reason`` says why."""

    node: Optional[str] = None
    pc: Optional[int] = None
    instruction: str = ""
    error: float = math.nan
    tolerance: float = math.nan
    gradient: str = ""  # which outgoing grad: "output 1 (to AddmmBackward0)" or "@0.weight"
    source: str = ""  # the forward source line, "file.py:12" (anomaly mode records it)
    graph: str = ""  # the backward used to localize
    reason: str = ""

    @property
    def localized(self) -> bool:
        return self.node is not None

    def __str__(self) -> str:
        if not self.localized:
            return f"not localized: {self.reason}"
        where = f" ({self.source})" if self.source else ""
        return (f"{self.node} at pc {self.pc}{where}: off by {_figure(self.error)} (bound {_figure(self.tolerance)}) "
                f"in {self.gradient}\n    {self.instruction}")


def _figure(value: float) -> str:
    return f"{value:.3g}"


@dataclass
class Report:
    """The outcome of check(): per engine and gradient a GradientResult, per engine the first
    divergence (None when it passed), the reproducer bundles written, engines skipped and why, and
    (when fn registers tensor hooks) the hooks each engine that runs torch's autograd graph fired,
    in order: an engine passes only when its hooks fired as eager's did."""

    fn: str
    precision: str
    rule: str
    results: dict[str, dict[str, GradientResult]] = field(default_factory=dict)
    first_divergence: dict[str, Optional[Divergence]] = field(default_factory=dict)
    reproducers: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hooks: dict[str, list[str]] = field(default_factory=dict)  # engine -> the hook calls, in order

    @property
    def passed(self) -> bool:
        return all(self.engine_passed(engine) for engine in self.results)

    def hooks_as_eager(self, engine: str) -> bool:
        """Whether the engine fired fn's hooks as eager did: the same hooks, as often, in the same order."""
        return engine not in self.hooks or self.hooks[engine] == self.hooks.get("eager", self.hooks[engine])

    def engine_passed(self, engine: str) -> bool:
        return all(result.passed for result in self.results[engine].values()) and self.hooks_as_eager(engine)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fn": self.fn, "precision": self.precision, "rule": self.rule, "passed": self.passed,
            "results": {e: {g: asdict(r) for g, r in grads.items()} for e, grads in self.results.items()},
            "first_divergence": {e: None if d is None else {**asdict(d), "localized": d.localized}
                                 for e, d in self.first_divergence.items()},
            "reproducers": dict(self.reproducers), "skipped": dict(self.skipped), "notes": list(self.notes),
            "hooks": {e: list(calls) for e, calls in self.hooks.items()},
        }

    def _rows(self) -> list[list[str]]:
        rows = []
        for engine, grads in self.results.items():
            for name, r in grads.items():
                verdict = "pass" if r.passed else ("FAIL" + (f" ({r.note})" if r.note else ""))
                rows.append([engine, name, _figure(r.max_abs), _figure(r.max_rel), _figure(r.tolerance), verdict])
        return rows

    _HEADER = ["engine", "gradient", "max abs", "max rel", "bound", ""]

    def _footer(self) -> list[str]:
        lines = []
        for engine, divergence in self.first_divergence.items():
            if divergence is not None:
                lines.append(f"{engine}: first divergence: {divergence}")
        for engine, calls in self.hooks.items():
            if not self.hooks_as_eager(engine):
                eager = self.hooks.get("eager")
                lines.append(f"{engine}: FAIL: hooks fired otherwise than eager's: {calls} (eager: {eager})")
            elif engine != "eager":
                lines.append(f"{engine}: hooks fired as eager's ({len(calls)} calls)")
        lines += [f"{engine}: reproducer {path}" for engine, path in self.reproducers.items()]
        lines += [f"{engine}: skipped: {why}" for engine, why in self.skipped.items()]
        lines += self.notes
        return lines

    def __str__(self) -> str:
        table = [self._HEADER] + self._rows()
        widths = [max(len(row[c]) for row in table) for c in range(len(self._HEADER))]
        lines = [f"refgrad.check {self.fn}: {'passed' if self.passed else 'FAILED'}",
                 f"  R = refgrad's run at {self.precision}", f"  {self.rule}"]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
        return "\n".join(lines + self._footer())

    def _repr_html_(self) -> str:
        escape = html.escape
        head = "".join(f"<th>{escape(cell)}</th>" for cell in self._HEADER)
        body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in self._rows())
        footer = "".join(f"<li><pre>{escape(line)}</pre></li>" for line in self._footer())
        verdict = "passed" if self.passed else "FAILED"
        return (f"<div><p><b>refgrad.check {escape(self.fn)}: {verdict}</b><br>R = refgrad's run at "
                f"{escape(self.precision)}</p><pre>{escape(self.rule)}</pre><table><tr>{head}</tr>{body}</table>"
                + (f"<ul>{footer}</ul>" if footer else "") + "</div>")


# ------------------------------------------------------------------ the rule ---


@dataclass
class _Rule:
    """DESIGN.md's rule (rtol/atol None: per dtype) or the plain one (both given)."""

    rtol: Optional[float] = None
    atol: Optional[float] = None

    @property
    def plain(self) -> bool:
        return self.rtol is not None

    def tolerances(self, dtype: torch.dtype) -> tuple[float, float]:
        return (self.rtol, self.atol) if self.plain else _DTYPE_PRECISIONS.get(dtype, (0.0, 0.0))

    def describe(self) -> str:
        if self.plain:
            return f"plain rule: max|E - R| <= atol + rtol max|R| (rtol {self.rtol:g}, atol {self.atol:g})"
        return ("eager passes when max|eager - R| <= atol + rtol max|R|,\n"
                "  engine E when max|E - R| <= 2 max|eager - R| + atol + rtol max|R|;\n"
                "  atol, rtol: torch.testing.assert_close's for E's dtype")

    def bound(self, dtype: torch.dtype, max_reference: float, eager_error: float, is_eager: bool) -> float:
        rtol, atol = self.tolerances(dtype)
        slack = 0.0 if is_eager or self.plain else 2 * eager_error
        return slack + atol + rtol * max_reference


def _as_float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to(device="cpu", dtype=torch.float64)


def _difference(actual: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """|E - R| and R in float64; equal values (infinities too) and NaN on both sides count as 0."""
    e, r = _as_float64(actual), _as_float64(reference)
    difference = (e - r).abs()
    difference[(e == r) | (torch.isnan(e) & torch.isnan(r))] = 0.0
    return difference, r


def _max_abs(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """max|E - R|; NaN when E has a NaN where R has none (or the other way round)."""
    difference, _ = _difference(actual, reference)
    if difference.numel() == 0:
        return 0.0
    return math.nan if bool(torch.isnan(difference).any()) else float(difference.max())


def _max_rel(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """max|E - R| / max|R|: the error in units of the gradient's scale, the scale the rule uses (an
    element-wise ratio is infinite wherever R is an exact zero, as attention's key bias gradient is);
    0/0 counts as 0."""
    difference, r = _difference(actual, reference)
    if difference.numel() == 0 or float(difference.max()) == 0:
        return 0.0
    return float(difference.max() / r.abs().max())


def _max_magnitude(reference: torch.Tensor) -> float:
    r = _as_float64(reference).abs()
    r = r[~torch.isnan(r)]
    return float(r.max()) if r.numel() else 0.0


def _mismatch(actual: Optional[torch.Tensor], reference: torch.Tensor, dtype: torch.dtype) -> str:
    """Why the two cannot be compared number by number ("" when they can)."""
    if actual is None:
        return "no gradient"
    if list(actual.shape) != list(reference.shape):
        return f"shape {list(actual.shape)}, R's {list(reference.shape)}"
    if actual.dtype != dtype:
        return f"dtype {actual.dtype}, expected {dtype}"
    return ""


def _compare(actual: Optional[torch.Tensor], reference: torch.Tensor, dtype: torch.dtype, rule: _Rule,
             eager_error: float, is_eager: bool) -> GradientResult:
    note = _mismatch(actual, reference, dtype)
    if note:
        return GradientResult(math.nan, math.nan, math.nan, False, note)
    max_abs = _max_abs(actual, reference)
    bound = rule.bound(dtype, _max_magnitude(reference), eager_error, is_eager)
    passed = max_abs <= bound  # NaN never passes
    return GradientResult(max_abs, _max_rel(actual, reference), bound, passed, "NaN" if math.isnan(max_abs) else "")


# ------------------------------------------------------------- the subject ---


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
        return value


def _ones(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.ones_like(output).detach().cpu() for output in outputs]


# ---------------------------------------------------------------- the oracle ---


def _torch(tensor: Optional[refgrad.Tensor]) -> Optional[torch.Tensor]:
    return None if tensor is None else tensor.torch()


_NODE_OPS = ("call", "CopySlices", "accumulate_grad", "call_backward")


class _Oracle:
    """The captured program of one fresh forward, run by refgrad's Machine (keeping every register)."""

    def __init__(self, subject: _Subject, precision: str):
        if precision not in ("float64", "float32"):
            raise refgrad.Error(f"refgrad.check: precision must be 'float64' or 'float32', got {precision!r}")
        # Anomaly mode keeps each node's forward traceback, from which capture takes its source line.
        # capture sees the hooks of non-leaf tensors only when it is given them: the hook mode finds them.
        # recording() keeps what capture needs of in-place ops on views (CopySlices).
        hooks = _HookMode()
        with torch.autograd.set_detect_anomaly(True, check_nan=False), refgrad_torch.recording():
            run = subject.forward(mode=hooks)
        self.grad_outputs = _ones(run.outputs)
        names = {**run.leaves, **{f"hooked{i}": tensor for i, tensor in enumerate(hooks.non_leaves)}}
        self.capture = refgrad_torch.capture(run.outputs, grad_outputs=self.grad_outputs, names=names)
        strangers = sorted(set(self.capture.leaves) - set(run.leaves))
        if strangers:
            raise refgrad.Error(f"refgrad.check: {subject.qualname} reaches leaves that are neither parameters of fn "
                                f"nor among args ({', '.join(strangers)}); pass the module as fn or as an argument "
                                "so that every engine gets a fresh copy")
        self.dtypes = {name: leaf.dtype for name, leaf in run.leaves.items()}
        self.machine = self.capture.machine(precision, keep_values=True)
        self.machine.run()
        self.grads = {name: _torch(self.machine.leaf_grad(name)) for name in self.capture.leaves}
        self.grads = {name: grad for name, grad in self.grads.items() if grad is not None}

    def python_calls(self) -> list[str]:
        """The host functions the program calls (hooks, autograd.Function backwards): these need Python."""
        program = self.capture.program
        return [f"&{hook.name} ({hook.kind} hook)" for hook in program.hooks] + \
               [f"&{function.name} (autograd.Function backward)" for function in program.functions]

    def register(self, name: Optional[str]) -> Optional[torch.Tensor]:
        return None if name is None else _torch(self.machine.register_value(name))

    def node_calls(self) -> list[tuple[int, int]]:
        """(pc, graph node index) of every instruction that calls a node, in program order."""
        code = self.capture.program.code
        node_of = self.capture.node_of_instruction
        return [(pc, node_of[pc]) for pc, instr in enumerate(code) if instr.op in _NODE_OPS and node_of[pc] >= 0]

    def divergence_at(self, pc: int, error: float, bound: float, gradient: str) -> Divergence:
        """A Divergence at the node called by instruction ``pc``."""
        instr = self.capture.program.code[pc]
        node = self.capture.graph.nodes[self.capture.node_of_instruction[pc]]
        return Divergence(node=_node_label(node), pc=pc, instruction=self.machine.instruction_text(pc), error=error,
                          tolerance=bound, gradient=gradient, source=instr.origin or node.origin)

    def validated_outputs(self, pc: int) -> list[Optional[str]]:
        """The registers validate makes of the results of the call at ``pc`` (its outgoing grads)."""
        code = self.capture.program.code
        results = list(code[pc].results)
        for instr in code[pc + 1:]:
            if instr.op == "validate" and list(instr.operands) == results:
                return list(instr.results)
        return results


# ------------------------------------------------------------ localization ---


def _clone_all(grads) -> tuple:
    return tuple(None if g is None else g.detach().clone() for g in grads)


class _NodeRecorder:
    """observe= for engines that run torch's autograd graph: hooks every grad_fn node of the forward
    (walked as refgrad.torch.capture walks it, so that node k is the oracle's graph node k) to record
    its incoming grads (pre-hook) and validated outgoing grads (post-hook)."""

    def __init__(self):
        self.names: list[str] = []
        self.incoming: dict[int, tuple] = {}
        self.outgoing: dict[int, tuple] = {}
        self.leaves: dict[str, Optional[torch.Tensor]] = {}

    def __call__(self, run: Forward) -> None:
        roots = [torch.autograd.graph.get_gradient_edge(output).node for output in run.outputs]
        walk = refgrad_torch._Walk(roots)
        self.names = [node.name() for node in walk.order]
        incoming, outgoing = self.incoming, self.outgoing
        for index, node in enumerate(walk.order):
            node.register_prehook(lambda grads, index=index: incoming.__setitem__(index, _clone_all(grads)))
            node.register_hook(lambda inputs, grads, index=index: outgoing.__setitem__(index, _clone_all(inputs)))


def _slot_error(engine_value, oracle_value, eager_value, rule: _Rule, is_eager: bool) -> tuple[float, float]:
    """(max|E - R|, bound) of one slot; an undefined grad counts as zeros, a shape mismatch as inf."""
    if oracle_value is None and engine_value is None:
        return 0.0, 0.0
    reference = oracle_value if oracle_value is not None else torch.zeros_like(engine_value, dtype=torch.float64)
    actual = engine_value if engine_value is not None else torch.zeros_like(reference)
    if list(actual.shape) != list(reference.shape):
        return math.inf, 0.0
    eager_error = 0.0
    if not is_eager and eager_value is not None and list(eager_value.shape) == list(reference.shape):
        eager_error = _max_abs(eager_value, reference)
    dtype = actual.dtype if actual.is_floating_point() else torch.float64
    return _max_abs(actual, reference), rule.bound(dtype, _max_magnitude(reference), eager_error, is_eager)


def _node_label(graph_node) -> str:
    """How reports name a graph node: PyTorch's name, AccumulateGrad(@leaf) for a leaf's accumulator."""
    return f"AccumulateGrad(@{graph_node.leaf})" if graph_node.kind == "accumulate_grad" else graph_node.name


def _same_node(graph_node, torch_name: str) -> bool:
    """Whether torch's node named ``torch_name`` is the oracle's graph node (the same walk finds both)."""
    if graph_node.kind == "accumulate_grad":
        return torch_name == "torch::autograd::AccumulateGrad"
    if graph_node.kind == "builtin":
        return torch_name.removeprefix("torch::autograd::") == graph_node.name
    return True  # an autograd.Function's node (named by capture) or CopySlices


def _agrees(error: float, bound: float) -> bool:
    return error <= bound


class _Localizer:
    """The first divergent node (DESIGN.md): in the oracle's program order, the first node whose incoming
    grads all agree with the oracle's registers and one of whose outgoing grads does not, or whose
    incoming grad disagrees although every outgoing grad added into its input buffer agrees (a wrong sum)."""

    def __init__(self, oracle: _Oracle, rule: _Rule, eager: _NodeRecorder, eager_grads: dict):
        self.oracle = oracle
        self.rule = rule
        self.eager = eager
        self.eager_grads = eager_grads

    def first_divergence(self, recorder: _NodeRecorder, grads: dict, is_eager: bool, graph: str) -> Divergence:
        graph_nodes = self.oracle.capture.graph.nodes
        if len(recorder.names) != len(graph_nodes) or not all(map(_same_node, graph_nodes, recorder.names)):
            return Divergence(reason="the engine's autograd graph differs from the oracle's (node names or count)",
                              graph=graph)
        for pc, index in self.oracle.node_calls():
            divergence = self._judge(pc, index, recorder, grads, is_eager)
            if divergence is not None:
                divergence.graph = graph
                return divergence
        return Divergence(reason="every node's outgoing grads agree with the oracle: the error arises outside the "
                                 "autograd graph (in what the engine returns)", graph=graph)

    def _judge(self, pc: int, index: int, recorder: _NodeRecorder, grads: dict, is_eager: bool) -> Optional[Divergence]:
        instr = self.oracle.capture.program.code[pc]
        if index not in recorder.incoming:
            return None  # the engine did not run this node's hooks: nothing to judge it by
        incoming = [self.oracle.register(name) for name in instr.operands]
        engine_in = recorder.incoming[index]
        eager_in = self.eager.incoming.get(index, ())
        for slot, oracle_value in enumerate(incoming):
            engine_value = engine_in[slot] if slot < len(engine_in) else None
            eager_value = eager_in[slot] if slot < len(eager_in) else None
            error, bound = _slot_error(engine_value, oracle_value, eager_value, self.rule, is_eager)
            if not _agrees(error, bound):
                # an earlier node is to blame, unless every gradient added into this slot agrees: then
                # the sum of this node's input buffer is wrong (DESIGN.md: the gradient with respect to a
                # node's output k is its summed input-buffer slot k), and this node is named
                return self._buffer_divergence(pc, index, slot, error, bound, recorder, is_eager)
        for label, engine_value, oracle_value, eager_value in self._outgoing(pc, index, recorder, grads):
            error, bound = _slot_error(engine_value, oracle_value, eager_value, self.rule, is_eager)
            if not _agrees(error, bound):
                return self.oracle.divergence_at(pc, error, bound, label)
        return None

    def _buffer_divergence(self, pc: int, index: int, slot: int, error: float, bound: float,
                           recorder: _NodeRecorder, is_eager: bool) -> Optional[Divergence]:
        """A Divergence at the node called by ``pc`` when its incoming grad ``slot`` disagrees while each
        outgoing grad of another node that goes into that input-buffer slot agrees (recorded by the
        producers' post-hooks, before the engine adds them); None when one of them disagrees or was not
        recorded (the error came from elsewhere)."""
        graph_nodes = self.oracle.capture.graph.nodes
        call_of_node = {node: call for call, node in self.oracle.node_calls()}
        producers = []
        for producer, graph_node in enumerate(graph_nodes):
            for out, edge in enumerate(graph_node.next_edges):
                if edge is not None and edge.node == index and edge.input_nr == slot:
                    producers.append((producer, out))
        if not producers:
            return None  # a root: its incoming grad is the grad_output
        for producer, out in producers:
            engine_out = recorder.outgoing.get(producer)
            register = self.oracle.validated_outputs(call_of_node[producer])[out] if producer in call_of_node else None
            if engine_out is None or out >= len(engine_out) or register is None:
                return None
            eager_out = self.eager.outgoing.get(producer, ())
            eager_value = eager_out[out] if out < len(eager_out) else None
            if not _agrees(*_slot_error(engine_out[out], self.oracle.register(register), eager_value, self.rule,
                                        is_eager)):
                return None
        names = ", ".join(_node_label(graph_nodes[producer]) for producer, _ in producers)
        label = (f"incoming grad {slot}, the sum of its input buffer: each of the {len(producers)} gradients added "
                 f"into it (from {names}) agrees, their sum does not")
        return self.oracle.divergence_at(pc, error, bound, label)

    def _outgoing(self, pc: int, index: int, recorder: _NodeRecorder, grads: dict):
        instr = self.oracle.capture.program.code[pc]
        if instr.op == "accumulate_grad":
            leaf = instr.target
            yield f"@{leaf}", grads.get(leaf), self.oracle.grads.get(leaf), self.eager_grads.get(leaf)
            return
        engine_out = recorder.outgoing.get(index, ())
        eager_out = self.eager.outgoing.get(index, ())
        node = self.oracle.capture.graph.nodes[index]
        for slot, register in enumerate(self.oracle.validated_outputs(pc)):
            if register is None:
                continue
            edge = node.next_edges[slot] if slot < len(node.next_edges) else None
            target = "" if edge is None else f" (to {_node_label(self.oracle.capture.graph.nodes[edge.node])})"
            yield (f"output {slot}{target}", engine_out[slot] if slot < len(engine_out) else None,
                   self.oracle.register(register), eager_out[slot] if slot < len(eager_out) else None)


@dataclass
class _Point:
    """A place where the engine's gradient can be read: the incoming grad ``slot`` of the oracle's
    node call at ``pc`` (register ``register``), read from the engine as leaf ``name`` (a probe, or a
    leaf whose .grad is the incoming grad of its AccumulateGrad)."""

    pc: int
    register: str
    name: str
    what: str  # for the report: "the output of torch.tanh" or "@0.weight"


class _Probing:
    """Black-box localization (issue 7, Deliver 4): one recording forward finds the tensors torch
    functions return; each engine then runs a forward that adds a zero probe leaf to each of them and
    is asked for the probes' gradients, which are the gradients with respect to those intermediates:
    the incoming grads of their grad_fn nodes, compared with the oracle's registers in program order."""

    def __init__(self, subject: _Subject, oracle: _Oracle):
        self.oracle = oracle
        recording = _ProbeMode(record=True)
        run = subject.forward(mode=recording)
        walk = refgrad_torch._Walk(torch.autograd.graph.get_gradient_edge(o).node for o in run.outputs)
        graph_nodes = oracle.capture.graph.nodes
        self.matches = len(walk.order) == len(graph_nodes) and all(
            map(_same_node, graph_nodes, [node.name() for node in walk.order]))
        call_of_node = {index: pc for pc, index in oracle.node_calls()}
        code = oracle.capture.program.code
        self.templates = [(t.shape, t.dtype) for t in recording.recorded]
        self.points: list[_Point] = []
        for i, (tensor, function) in enumerate(zip(recording.recorded, recording.functions)):
            pc = call_of_node.get(walk.index.get(tensor.grad_fn, -1))
            register = None if pc is None else code[pc].operands[tensor.output_nr]
            if register is not None:
                self.points.append(_Point(pc, register, f"{_PROBE}{i}", f"the output of {function}"))
        for pc, instr in enumerate(code):
            if instr.op == "accumulate_grad" and instr.operands[0] is not None:
                self.points.append(_Point(pc, instr.operands[0], instr.target, f"@{instr.target}"))
        self.points.sort(key=lambda point: point.pc)
        self.last_mode: Optional[_ProbeMode] = None
        self.defined_at = {r: pc for pc, instr in enumerate(code) for r in instr.results if r is not None}

    def probes(self, device: str) -> _ProbeMode:
        self.last_mode = _ProbeMode([torch.zeros(shape, dtype=dtype, device=device, requires_grad=True)
                                     for shape, dtype in self.templates])
        return self.last_mode

    def misaligned(self) -> str:
        """Why the last probed forward's intermediates were not the recording's ("" when they were)."""
        mode = self.last_mode
        if mode is not None and mode.aligned and mode.count == len(mode.probes):
            return ""
        count = "?" if mode is None else mode.count
        return (f"the probed forward's torch function results differ from the recording's ({count} results, "
                f"{len(self.templates)} recorded, or of other shapes)")

    def producers(self, register: str) -> list[int]:
        """The pcs of the node calls whose outgoing grads make ``register`` (through validate, add, hooks)."""
        pc = self.defined_at.get(register)
        if pc is None:
            return []
        instr = self.oracle.capture.program.code[pc]
        if instr.op in _NODE_OPS:
            return [pc]
        if instr.op in ("validate", "hook") and len(instr.operands) == len(instr.results):
            operand = instr.operands[list(instr.results).index(register)]
            return [] if operand is None else self.producers(operand)
        return [p for operand in instr.operands if operand is not None for p in self.producers(operand)]

    def first_divergence(self, grads: dict, eager_grads: dict, rule: _Rule, is_eager: bool, graph: str) -> Divergence:
        if not self.matches:
            return Divergence(reason="the recording forward's graph differs from the oracle's", graph=graph)
        if not any(name.startswith(_PROBE) for name in grads):
            return Divergence(reason="the engine returned no gradients for the recorded intermediates (probe leaves)",
                              graph=graph)
        recorded = set()
        for point in self.points:
            error, bound = _slot_error(grads.get(point.name), self.oracle.register(point.register),
                                       eager_grads.get(point.name), rule, is_eager)
            if _agrees(error, bound):
                recorded.add(point.pc)
                continue
            return self._blame(point, error, bound, recorded, graph)
        return Divergence(reason="the gradients of every recorded intermediate and leaf agree with the oracle",
                          graph=graph)

    def _blame(self, point: _Point, error: float, bound: float, agreeing: set, graph: str) -> Divergence:
        producers = self.producers(point.register)
        if not producers:
            return Divergence(reason=f"the gradient of {point.what} disagrees and no node makes it (a root's grad)",
                              graph=graph)
        pc = min(producers)
        consumer = self.oracle.capture.program.code[point.pc]
        gradient = f"its outgoing grad, read at {point.what} (the incoming grad of {consumer.node or 'AccumulateGrad'})"
        if pc not in agreeing:
            gradient += ("; its own incoming grad was not recorded: the error is in it or in a node between it "
                         "and the last recorded gradient that agrees")
        if len(producers) > 1:
            gradient += f"; {len(producers)} nodes add into that gradient, this is the first"
        divergence = self.oracle.divergence_at(pc, error, bound, gradient)
        divergence.graph = graph
        return divergence


# -------------------------------------------------------------- reproducers ---


def _result_tensors(grads: dict[str, Optional[torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {f"@{name}": grad.detach().cpu().contiguous() for name, grad in grads.items() if grad is not None}


def _config(engine: Any) -> dict[str, str]:
    config = {"device": str(getattr(engine, "device", "cpu"))}
    backend = getattr(engine, "backend", None)
    if backend is not None:
        config["backend"] = engines_module.backend_name(backend)
    return config


def _file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def _write_reproducer(directory: str, oracle: _Oracle, subject: _Subject, rule: _Rule, precision: str,
                      eager: Any, eager_grads: dict, engine: Any, engine_grads: dict) -> str:
    """One bundle: the program, eager's and the engine's gradients, the rule, provenance. Returns its path."""
    bundle = refgrad.Bundle(oracle.capture.program, oracle.capture.bundle.tensors)
    results = [refgrad.ResultSet("eager", _result_tensors(eager_grads), _config(eager))]
    if engine is not eager:
        results.append(refgrad.ResultSet(engine.name, _result_tensors(engine_grads), _config(engine)))
    bundle.results = results
    bundle.comparison = refgrad.Comparison("plain" if rule.plain else "reference", "refgrad", rule.rtol, rule.atol)
    calls = oracle.python_calls()
    now = datetime.datetime.now(datetime.timezone.utc)
    bundle.provenance = {
        "refgrad_version": refgrad.__version__,
        "torch_version": torch.__version__,
        "order": "eager",
        "engine": engine.name,
        **{f"engine_{k}": v for k, v in _config(engine).items()},
        "fn": subject.qualname,
        "date": now.isoformat(timespec="seconds"),
        "check_precision": precision,
        "rule": rule.describe(),
        "python_calls": "none" if not calls else (
            "needs Python (refgrad check cannot replay them; give --hook where it can): " + ", ".join(calls)),
    }
    os.makedirs(directory, exist_ok=True)
    stem = _file_name(f"{subject.qualname.rsplit('.', 1)[-1]}-{engine.name}-{now:%Y%m%dT%H%M%S}")
    path = os.path.join(directory, f"{stem}.safetensors")
    counter = 1
    while os.path.exists(path):
        path = os.path.join(directory, f"{stem}-{counter}.safetensors")
        counter += 1
    bundle.save(path)
    return path


# -------------------------------------------------------------------- check ---


def _error_text(error: Exception) -> str:
    """The exception's type and the first line of its message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _rule_from(rtol: Optional[float], atol: Optional[float]) -> _Rule:
    if (rtol is None) != (atol is None):
        raise refgrad.Error("refgrad.check: give both rtol and atol, or neither (as torch.testing.assert_close)")
    return _Rule(rtol, atol)


def _engines_from(specs: Sequence[Any], report: Report) -> list[Any]:
    """The engines, eager first (every other engine's bound needs it); a CUDA engine without a GPU is
    skipped, with a printed reason."""
    found = []
    for spec in ([specs] if isinstance(specs, str) else list(specs)):
        try:
            found.append(engines_module.engine(spec))
        except engines_module.NoDevice as error:
            report.skipped[str(spec)] = str(error)
            print(f"refgrad.check: skipping engine {spec}: {error}")
    eager = [e for e in found if isinstance(e, engines_module.Eager) and e.device == "cpu"]
    if not eager:
        eager = [engines_module.Eager()]
        report.notes.append("eager ran as the baseline of the rule (not among the engines asked for)")
    return eager[:1] + [e for e in found if e is not eager[0]]


class _Checker:
    def __init__(self, subject: _Subject, oracle: _Oracle, rule: _Rule, report: Report, reproducer_dir: Optional[str]):
        self.subject, self.oracle, self.rule, self.report = subject, oracle, rule, report
        self.reproducer_dir = reproducer_dir
        self._eager_record: Optional[tuple[_NodeRecorder, dict]] = None
        self._probing: Optional[_Probing] = None
        self._probed: dict[int, dict] = {}

    def forward_for(self, engine: Any, mode: Optional[Union[_ProbeMode, _HookMode]] = None) -> Callable[..., Forward]:
        """The engine's forward(transform=None): a fresh forward on the engine's device (under ``mode``)."""
        device = getattr(engine, "device", "cpu")
        return lambda transform=None: self.subject.forward(transform, device, mode)

    def gradients(self, engine: Any) -> dict[str, Optional[torch.Tensor]]:
        """The engine's gradients; for an engine that runs torch's autograd graph (its forward is plain
        torch), the hooks fn registers are recorded too, into report.hooks."""
        if not engines_module.accepts_observe(engine):
            return engine.gradients(self.forward_for(engine), self.oracle.grad_outputs)
        mode = _HookMode()
        grads = engine.gradients(self.forward_for(engine, mode), self.oracle.grad_outputs)
        if mode.registered:
            self.report.hooks[engine.name] = mode.fired
        return grads

    def compare(self, engine: Any, grads: dict, eager_grads: dict) -> dict[str, GradientResult]:
        is_eager = engine is self.eager
        results = {}
        for name, reference in self.oracle.grads.items():
            eager_error = 0.0
            if not is_eager:
                eager_result = self.report.results[self.eager.name][name]
                eager_error = eager_result.max_abs if eager_result.max_abs == eager_result.max_abs else 0.0
            results[name] = _compare(grads.get(name), reference, self.oracle.dtypes[name], self.rule, eager_error,
                                     is_eager)
        for name, grad in grads.items():
            if name not in self.oracle.grads and grad is not None:
                results[name] = GradientResult(math.nan, math.nan, math.nan, False, "R computes no gradient")
        return results

    def run(self, engines: list[Any]) -> None:
        self.eager = engines[0]
        eager_grads = self.gradients(self.eager)
        self.eager_grads = eager_grads
        for engine in engines:
            try:
                grads = eager_grads if engine is self.eager else self.gradients(engine)
            except Exception as error:  # an engine that cannot run fails; the others are still checked
                self.record_crash(engine, error)
                continue
            self.report.results[engine.name] = self.compare(engine, grads, eager_grads)
            if self.report.engine_passed(engine.name):
                self.report.first_divergence[engine.name] = None
                continue
            try:
                self.report.first_divergence[engine.name] = self.localize(engine)
            except Exception as error:
                self.report.first_divergence[engine.name] = Divergence(
                    reason=f"the localizing run raised {_error_text(error)}")
            if self.reproducer_dir is not None:
                self.report.reproducers[engine.name] = _write_reproducer(
                    self.reproducer_dir, self.oracle, self.subject, self.rule, self.report.precision, self.eager,
                    eager_grads, engine, grads)

    def record_crash(self, engine: Any, error: Exception) -> None:
        """An engine that raised: every gradient fails, with the error as the note."""
        note = f"raised {_error_text(error)}"
        self.report.results[engine.name] = {
            name: GradientResult(math.nan, math.nan, math.nan, False, note) for name in self.oracle.grads}
        self.report.first_divergence[engine.name] = Divergence(reason=f"{engine.name} {note}")

    def eager_record(self) -> tuple[_NodeRecorder, dict]:
        if self._eager_record is None:
            self._eager_record = self._recorded(self.eager)
        return self._eager_record

    def _recorded(self, engine: Any) -> tuple[_NodeRecorder, dict]:
        recorder = _NodeRecorder()
        grads = engine.gradients(self.forward_for(engine), self.oracle.grad_outputs, observe=recorder)
        return recorder, grads

    def probed(self, engine: Any) -> dict[str, Optional[torch.Tensor]]:
        """The engine's gradients with a probe added to every recorded intermediate of the forward."""
        if self._probing is None:
            self._probing = _Probing(self.subject, self.oracle)
        key = id(engine)
        if key not in self._probed:
            probes = self._probing.probes(getattr(engine, "device", "cpu"))
            grads = engine.gradients(self.forward_for(engine, probes), self.oracle.grad_outputs)
            misaligned = self._probing.misaligned()
            if misaligned:
                raise refgrad.Error(misaligned)
            self._probed[key] = grads
        return self._probed[key]

    def localize_black_box(self, engine: Any) -> Divergence:
        eager_grads, grads = self.probed(self.eager), self.probed(engine)
        graph = (f"a second run of {engine.name} asked for the gradients of {len(self._probing.templates)} "
                 "intermediates of the forward (a zero leaf added to each torch function's result, so its graph "
                 "is not the plain run's)")
        return self._probing.first_divergence(grads, eager_grads, self.rule, engine is self.eager, graph)

    def localize(self, engine: Any) -> Divergence:
        if not engines_module.accepts_observe(engine):
            return self.localize_black_box(engine)
        eager_recorder, eager_grads = self.eager_record()
        is_eager = engine is self.eager
        recorder, grads = (eager_recorder, eager_grads) if is_eager else self._recorded(engine)
        graph = ("eager's backward with node hooks (hooks do not change its numbers)" if is_eager else
                 f"a second backward of {engine.name} with a pre- and a post-hook on every node (a compiler traces "
                 "the hooks into its graph, so it is not the plain run's graph)")
        if not recorder.incoming:
            return Divergence(reason=f"{engine.name} ran none of the node hooks", graph=graph)
        return _Localizer(self.oracle, self.rule, eager_recorder, eager_grads).first_divergence(
            recorder, grads, is_eager, graph)


def check(fn: Callable, *args: Any, engines: Sequence[Any] = ("eager", "compiled_autograd"), precision: str = "float64",
          rtol: Optional[float] = None, atol: Optional[float] = None,
          reproducer_dir: Optional[str] = "refgrad-reproducers", keep_grad: bool = False) -> Report:
    """Checks each engine's gradients of fn(*args) against refgrad's oracle; see the module docstring.

    fn: a callable or an nn.Module returning the tensor(s) to differentiate (each gets a grad of
      ones). Gradients are taken for every leaf that requires grad and that the backward reaches:
      fn's parameters (named as named_parameters() names them) and args' tensors ("arg0", "arg1",
      ...; a module among args: "arg1.weight"; a list: "arg2.0").
    engines: names (refgrad.engines.engine()) or Engine objects. eager always runs (the rule needs it).
    precision: the oracle's, "float64" (a float32 program promoted) or "float32".
    rtol, atol: both or neither; given, the plain rule replaces DESIGN.md's.
    reproducer_dir: where failed engines' bundles go (None: write none).
    keep_grad: every fresh leaf starts with a copy of the user's .grad (where it has one) instead of None,
      so that each engine's accumulation into an existing .grad is checked too.
    """
    rule = _rule_from(rtol, atol)
    subject = _Subject(fn, args, keep_grad)
    try:
        oracle = _Oracle(subject, precision)
        report = Report(fn=subject.qualname, precision=precision, rule=rule.describe())
        calls = oracle.python_calls()
        if calls:
            report.notes.append("the program calls Python (reproducers need it; refgrad check takes --hook for "
                                "tensor hooks): " + ", ".join(calls))
        _Checker(subject, oracle, rule, report, reproducer_dir).run(_engines_from(engines, report))
    finally:
        subject.restore_rng()
    return report


class _CallableModule(types.ModuleType):
    """The issue asks for refgrad.check(fn, ...), and this module is refgrad.check: calling the module
    calls check(), so that both refgrad.check(fn, ...) and refgrad.check.Report work. (A package that
    did `from refgrad.check import check` would hide the module behind the function instead.)"""

    def __call__(self, *args, **kwargs) -> Report:
        return check(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
