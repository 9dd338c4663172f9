"""A generated case as data: its leaves, its ops (each a few lines of Python source) and its outputs;
and its source, which is both what runs and the reproducer.

A Program is what the generator (refgrad.fuzz.generator) builds and what the minimizer
(refgrad.fuzz.minimize) shrinks. Its source (Program.source()) is a standalone Python file using torch
alone:

    def program(x0, x1, w2):          # the forward, which refgrad.check checks
        v0 = torch.sin(x0)
        ...
        return v3, v7                  # the outputs; each gets a gradient of ones

    def make_inputs():                 # the leaves, each from its own seed
        return [leaf((3, 4), 101), ...]

    GRAD_INPUTS = [0, 2]               # torch.autograd.grad over these leaves; None: backward() into all

and, run as a script, it compares eager's gradients with one engine's (torch only: ready for an
upstream bug report). A program whose ``inputs`` names some of its leaves differentiates with
torch.autograd.grad(outputs, [those leaves], allow_unused=True) in every engine (refgrad.check's
inputs=, the leaves named arg0, arg1, ... by their place in make_inputs()), and its script does too. Every case runs exactly this source (refgrad.fuzz.case.load), so what ran is what
the finding shows.

Ops refer to variables by name. A leaf and an op's output never share a name, so that the minimizer can
replace an op by a leaf of the same name, shape and dtype (Program.replaced_by_leaf) without rewriting
any other op.
"""
from __future__ import annotations

import collections
import hashlib
import linecache
from dataclasses import dataclass, field, replace
from typing import Optional

import torch

# Source that the ops may use: each helper is emitted only when an op names it (Op.helpers).
HELPERS = {
    "halve_grad": '''def halve_grad(grad):
    """A tensor hook: the gradient flowing on is halved."""
    return grad * 0.5
''',
    "negate_grad": '''def negate_grad(grad):
    """A tensor hook: the gradient flowing on is negated."""
    return -grad
''',
    "watch_grad": '''def watch_grad(param):
    """A post-accumulate-grad hook: it changes nothing; refgrad.check compares when it fires."""
    return None
''',
    "ScaledTanh": '''class ScaledTanh(torch.autograd.Function):
    """2 tanh(x), with a hand-written backward that uses the saved output."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return 2 * y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * 2 * (1 - y * y)
''',
}

_LEAF_HELPER = '''def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()
'''

_MAIN = '''if __name__ == "__main__":
    # torch alone: eager's gradients against ENGINE's ("eager", "compiled_autograd:BACKEND",
    # "torch_compile:BACKEND"; default the engine this case was written for), on fresh inputs each.
    import sys

    def differentiate(inputs, outputs, grads):
        """backward() into every leaf, or torch.autograd.grad over the leaves GRAD_INPUTS names."""
        if GRAD_INPUTS is None:
            torch.autograd.backward(outputs, grads)
            return [x.grad for x in inputs]
        return list(torch.autograd.grad(outputs, [inputs[i] for i in GRAD_INPUTS], grads, allow_unused=True))

    def gradients(engine):
        inputs = make_inputs()
        kind, _, backend = engine.partition(":")
        if kind == "torch_compile":
            torch._dynamo.reset()
            outputs = torch.compile(program, backend=backend or "inductor")(*inputs)
        else:
            outputs = program(*inputs)
        grads = [torch.ones_like(output) for output in outputs]
        if kind == "compiled_autograd":
            from torch._dynamo import compiled_autograd
            compiled_autograd.reset()
            with compiled_autograd._enable(torch.compile(backend=backend or "aot_eager")):
                return differentiate(inputs, outputs, grads)
        return differentiate(inputs, outputs, grads)

    engine = sys.argv[1] if len(sys.argv) > 1 else ENGINE
    names = [f"arg{i}" for i in (range(len(make_inputs())) if GRAD_INPUTS is None else GRAD_INPUTS)]
    for name, e, g in zip(names, gradients("eager"), gradients(engine)):
        diff = "no grad" if e is None or g is None else f"max|{engine} - eager| = {(g.double() - e.double()).abs().max().item():.3g}"
        print(f"{name}: {diff}")
'''


@dataclass(frozen=True)
class Leaf:
    """A leaf tensor that requires grad: its variable name, shape and seed (make_inputs draws its values).
    ``dtype`` None: the program's dtype."""

    name: str
    shape: tuple[int, ...]
    seed: int
    dtype: Optional[str] = None


@dataclass(frozen=True)
class Op:
    """One step of the forward: ``kind`` is the generator's name for it (what the op set of a finding's
    signature lists), ``lines`` its source (one or more statements), ``out`` the variable it defines (None
    for a statement that defines none: a hook, retain_grad), ``uses`` the variables it reads, and the
    shape and dtype of ``out`` (torch's, from running it while generating)."""

    kind: str
    lines: tuple[str, ...]
    uses: tuple[str, ...]
    out: Optional[str] = None
    shape: tuple[int, ...] = ()
    dtype: str = ""
    helpers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Program:
    """A generated forward: leaves, ops in order, the outputs returned. ``dtype`` is the leaves'
    ("float32" or "float64"); ``autocast`` ("float16", "bfloat16") runs the ops under
    torch.autocast("cpu", dtype=...). ``seed`` and ``version`` name the case; ``note`` says what was
    done to it since (the minimizer's steps). ``inputs``: None (a backward into every leaf), or the names
    of the leaves torch.autograd.grad differentiates with respect to (non-empty; in the leaves' order)."""

    seed: int
    version: int
    dtype: str
    autocast: Optional[str]
    leaves: tuple[Leaf, ...]
    ops: tuple[Op, ...]
    outputs: tuple[str, ...]
    note: str = ""
    inputs: Optional[tuple[str, ...]] = None

    @property
    def op_kinds(self) -> tuple[str, ...]:
        """The sorted set of the ops' kinds: part of a finding's signature."""
        return tuple(sorted({op.kind for op in self.ops}))

    @property
    def name(self) -> str:
        return f"case {self.seed} (generator version {self.version})"

    def describe(self) -> str:
        """One line: how many ops and leaves, the dtype, the op kinds."""
        mode = self.dtype + (f" under autocast({self.autocast})" if self.autocast else "")
        grad = "" if self.inputs is None else f", autograd.grad over {', '.join(self.inputs)}"
        return (f"{self.name}: {len(self.ops)} ops, {len(self.leaves)} leaves, {len(self.outputs)} outputs{grad}, "
                f"{mode}: {', '.join(self.op_kinds)}")

    @property
    def grad_inputs(self) -> Optional[list[int]]:
        """The places in make_inputs() of the leaves ``inputs`` names (None: every leaf, by backward())."""
        if self.inputs is None:
            return None
        places = {leaf.name: i for i, leaf in enumerate(self.leaves)}
        return [places[name] for name in self.inputs if name in places]

    def source(self, engine: str = "compiled_autograd:aot_eager") -> str:
        """The program as a standalone Python file (torch only); run as a script it compares eager with
        ``engine``."""
        helpers = [name for name in HELPERS if any(name in op.helpers for op in self.ops)]
        head = [f"# refgrad.fuzz {self.describe()}"]
        if self.note:
            head.append(f"# {self.note}")
        head += ["import torch", "import torch.nn.functional as F", "", f"DTYPE = torch.{self.dtype}",
                 f"ENGINE = {engine!r}", "", ""]
        body = [_LEAF_HELPER, ""] + [HELPERS[name] + "\n" for name in helpers]
        params = ", ".join(leaf.name for leaf in self.leaves)
        lines = [f"def program({params}):"]
        indent = "    "
        if self.autocast:
            lines.append(f'    with torch.autocast("cpu", dtype=torch.{self.autocast}):')
            indent = "        "
        lines += [indent + line for op in self.ops for line in op.lines]
        if not self.ops:
            lines.append(indent + "pass")
        lines.append(f"    return {', '.join(self.outputs)}" + ("," if len(self.outputs) == 1 else ""))
        inputs = ["def make_inputs():", "    return ["]
        for leaf in self.leaves:
            dtype = "" if leaf.dtype is None else f", torch.{leaf.dtype}"
            inputs.append(f"        leaf({leaf.shape!r}, {leaf.seed}{dtype}),  # {leaf.name}")
        inputs.append("    ]")
        places = self.grad_inputs
        chosen = "" if places is None else "  # " + ", ".join(self.leaves[i].name for i in places)
        inputs += ["", "",
                   "# torch.autograd.grad over these leaves (their places in make_inputs()); None: backward() into all",
                   f"GRAD_INPUTS = {places!r}{chosen}"]
        return "\n".join(head + body + lines + ["", ""] + inputs + ["", ""] + [_MAIN])

    # --- what the minimizer does to a program ---

    def replaced_by_leaf(self, index: int) -> "Program":
        """The program with op ``index`` replaced by a leaf of the same name, shape and dtype (a statement
        that defines nothing, a hook say, is just dropped); then pruned."""
        op = self.ops[index]
        ops = self.ops[:index] + self.ops[index + 1:]
        leaves = self.leaves
        if op.out is not None:
            dtype = None if op.dtype == self.dtype else op.dtype
            leaves = leaves + (Leaf(op.out, op.shape, 1000 + index, dtype),)
        return replace(self, ops=ops, leaves=leaves).pruned()

    def pruned(self) -> "Program":
        """Without the ops and leaves no output needs (a statement that defines nothing stays while
        every variable it reads does)."""
        live = set(self.outputs)
        kept: list[Op] = []
        for op in reversed(self.ops):
            if op.out is not None and op.out in live:
                live.update(op.uses)
                kept.append(op)
        defined = {leaf.name for leaf in self.leaves if leaf.name in live} | {op.out for op in kept}
        ops = tuple(op for op in self.ops if op in kept or (op.out is None and set(op.uses) <= defined))
        leaves = tuple(leaf for leaf in self.leaves if leaf.name in live
                       or any(leaf.name in op.uses for op in ops))
        # the leaves autograd.grad differentiates that are left (empty: the program is not valid, see run_eager)
        inputs = None if self.inputs is None else tuple(name for name in self.inputs
                                                         if any(leaf.name == name for leaf in leaves))
        return replace(self, ops=ops, leaves=leaves, inputs=inputs)


@dataclass
class Loaded:
    """A program's source executed: ``program`` (the forward), ``make_inputs`` and ``grad_inputs`` (its
    GRAD_INPUTS: the places in make_inputs() of the leaves torch.autograd.grad differentiates; None: all)."""

    program: "object"
    make_inputs: "object"
    source: str
    filename: str = field(default="")
    grad_inputs: Optional[list[int]] = None

    @property
    def check_inputs(self) -> Optional[list[str]]:
        """refgrad.check's inputs= for the leaves GRAD_INPUTS names: "arg0", "arg2", ... (None: every leaf)."""
        return None if self.grad_inputs is None else [f"arg{i}" for i in self.grad_inputs]


_REGISTERED: collections.deque = collections.deque()  # the sources linecache holds for us, oldest first


def load(program: Program, engine: str = "compiled_autograd:aot_eager") -> Loaded:
    """Executes the program's source (registered with linecache, so that tracebacks and anomaly mode show
    its lines: the last few loaded stay registered) and returns its functions."""
    source = program.source(engine)
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    filename = f"<refgrad.fuzz case {program.seed} v{program.version} {digest}>"
    if filename not in linecache.cache:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        _REGISTERED.append(filename)
        while len(_REGISTERED) > 16:
            linecache.cache.pop(_REGISTERED.popleft(), None)
    namespace: dict = {"__name__": "refgrad_fuzz_case"}
    exec(compile(source, filename, "exec"), namespace)
    return Loaded(namespace["program"], namespace["make_inputs"], source, filename, namespace.get("GRAD_INPUTS"))


def run_eager(program: Program) -> list[Optional[torch.Tensor]]:
    """The program's forward and backward in eager autograd (torch.autograd.grad over its inputs, when it
    names some): each leaf's gradient (None for a leaf not among them). Raises whatever torch raises (a
    program the generator made must never raise), and ValueError for inputs that name no leaf left (the
    minimizer dropped them all)."""
    if program.inputs is not None and not program.inputs:
        raise ValueError(f"{program.name}: torch.autograd.grad over no leaf (the leaves it named are gone)")
    loaded = load(program)
    inputs = loaded.make_inputs()
    outputs = loaded.program(*inputs)
    grads = [torch.ones_like(output) for output in outputs]
    if loaded.grad_inputs is None:
        torch.autograd.backward(outputs, grads)
        return [x.grad for x in inputs]
    found = torch.autograd.grad(outputs, [inputs[i] for i in loaded.grad_inputs], grads, allow_unused=True)
    by_place = dict(zip(loaded.grad_inputs, found))
    return [by_place.get(i) for i in range(len(inputs))]
