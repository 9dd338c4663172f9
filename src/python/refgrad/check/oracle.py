"""The oracle R: the captured program of one fresh forward, run by refgrad's Machine; or, where
refgrad.torch.capture refuses the backward, eager's backward, saying which nodes it could not cover."""
from __future__ import annotations

import math
from typing import Optional, Union

import torch

import refgrad
import refgrad.torch as refgrad_torch
from refgrad import engines as engines_module
from refgrad.check.report import Divergence
from refgrad.check.rule import HOLD_ROUNDS, SENSITIVITY_RATIO, SENSITIVITY_SEEDS, _Measured, _max_abs, _sensitivity
from refgrad.check.subject import _HookMode, _Subject, _ones


def _torch(tensor: Optional[refgrad.Tensor]) -> Optional[torch.Tensor]:
    return None if tensor is None else tensor.torch()


def _node_label(graph_node) -> str:
    """How reports name a graph node: PyTorch's name, AccumulateGrad(@leaf) for a leaf's accumulator."""
    return f"AccumulateGrad(@{graph_node.leaf})" if graph_node.kind == "accumulate_grad" else graph_node.name


_NODE_OPS = ("call", "CopySlices", "accumulate_grad", "call_backward")


def _grad_of(capture, machine, name: str):
    """Leaf ``name``'s gradient from a run: under torch.autograd.grad (capture's inputs) the captured grad the
    program outputs (`output ^name`; None for an input no output reaches), else the leaf's .grad."""
    if not capture.captures:
        return machine.leaf_grad(name)
    return machine.output(name) if name in {output.name for output in capture.program.outputs} else None


def _broken(exact: Optional[torch.Tensor], moved: Optional[torch.Tensor]) -> bool:
    """Whether a sensitivity run's value is not finite where R's is (same shapes only)."""
    return exact is not None and moved is not None and refgrad.not_finite_where_finite(moved, exact)


def _lowest_precision(dtypes: list) -> torch.dtype:
    """The floating dtype of ``dtypes`` (torch dtypes or refgrad's names of them) whose numbers are furthest apart
    (float16 of float16 and float32; bfloat16 of all); a complex dtype counts as its parts'. float32 if none."""
    floating = set()
    for dtype in dtypes:
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if dtype.is_complex:
            dtype = dtype.to_real()
        if dtype.is_floating_point:
            floating.add(dtype)
    return max(floating, key=lambda dtype: torch.finfo(dtype).eps, default=torch.float32)


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
        # check's inputs=: the backward torch.autograd.grad(outputs, those leaves, allow_unused=True) runs
        inputs = None if run.inputs is None else [run.leaves[name] for name in run.inputs]
        self.capture = refgrad_torch.capture(run.outputs, inputs=inputs, grad_outputs=self.grad_outputs, names=names,
                                             allow_unused=inputs is not None)
        strangers = sorted(set(self.capture.leaves) - set(run.leaves))
        if strangers:
            raise refgrad.Error(f"refgrad.check: {subject.qualname} reaches leaves that are neither parameters of fn, "
                                f"among args, nor in fn's closure or the globals it names ({', '.join(strangers)}), "
                                "through another function perhaps; pass the module as fn or as an argument so that "
                                "every engine gets a fresh copy")
        self.dtypes = {name: leaf.dtype for name, leaf in run.leaves.items()}
        program = self.capture.program
        self.computes_in = _lowest_precision(
            list(self.dtypes.values()) + [declared.type.dtype for declared in (*program.saved, *program.grads)])
        # the run as captured keeps a trace: its types say which validates cast grads to a narrower dtype
        self.machine = self.capture.machine(precision, keep_values=True, trace=precision == "float32")
        self.machine.run()
        self.grads = {name: _torch(_grad_of(self.capture, self.machine, name))
                      for name in (self.capture.captures or self.capture.leaves)}
        self.grads = {name: grad for name, grad in self.grads.items() if grad is not None}
        # The rounding noise of each gradient (and register) in its own dtype, measured: R', refgrad's
        # run of the program as captured (float32, say); max|R' - R| is how far one correct float32
        # computation lands from R (docs/check.md, "The rule"). The rule's tolerance scales with it.
        # At precision "float32" R is that run, and R' the float64 one.
        self.other = self.capture.machine("float32" if precision == "float64" else "float64", keep_values=True,
                                          trace=precision == "float64")
        self.other.run()
        # R~ and R~', the float64 runs with every number the program starts from moved by up to one rounding
        # of its dtype, and by 1/16 of one: how far the result moves with its inputs' last bits (linearly:
        # rule._sensitivity), a floor under any dtype computation's noise that R' misses where refgrad's own
        # formula cancels exactly and another's does not (layer_norm over equal values; docs/check.md).
        # Made on first use: a float64 program has no noise to measure, and never runs them.
        self._perturbed: Optional[list] = None
        self._perturbed_made = False
        self._rounded: Optional[list] = None
        self.float64 = self.machine if precision == "float64" else self.other
        # refgrad's own run in the captured dtypes: where it overflows and R does not, an engine may too
        as_captured = self.other if precision == "float64" else self.machine
        self.in_dtype = {name: _torch(_grad_of(self.capture, as_captured, name)) for name in self.grads}
        self.as_captured_trace = as_captured.trace
        self.noise = {name: self._noise_of(lambda machine: _grad_of(self.capture, machine, name))
                      for name in self.grads}

    def _sensitivity_pair(self, seed: int, move_values: bool,
                          held: frozenset = frozenset()) -> tuple[refgrad.Machine, refgrad.Machine]:
        """One seed's pair of sensitivity runs (scales 1 and 1/SENSITIVITY_RATIO), run, keeping their values."""
        pair = tuple(self.capture.machine("float64", keep_values=True, perturbed=scale, seed=seed,
                                          move_values=move_values, held=held, as_captured=self.as_captured_trace)
                     for scale in (1.0, 1.0 / SENSITIVITY_RATIO))
        for machine in pair:
            machine.run()
        return pair

    def _held_pair(self, seed: int) -> tuple[refgrad.Machine, refgrad.Machine]:
        """Seed's pair of runs with moved values, made again holding still the saved values of the nodes the
        moves broke (refgrad.saved_values_broken_by_moving), for up to HOLD_ROUNDS rounds: each round holds the
        nodes broken first, and a node further down may break next."""
        held: frozenset = frozenset()
        pair = self._sensitivity_pair(seed, move_values=True)
        for _ in range(HOLD_ROUNDS):
            broken = frozenset().union(*(refgrad.saved_values_broken_by_moving(self.float64, machine)
                                         for machine in pair))
            if broken <= held:
                break
            held |= broken
            pair = self._sensitivity_pair(seed, move_values=True, held=held)
        return pair

    @property
    def perturbed(self) -> Optional[list]:
        """The sensitivity runs, one pair per seed of SENSITIVITY_SEEDS (_held_pair), run on first use; None
        where a node refuses moved values: a saved float tensor that holds marks, not numbers (multilabel
        margin loss's is_target must be 0 or 1, in torch too). Then R' alone is the noise, the stricter rule."""
        if not self._perturbed_made:
            self._perturbed_made = True
            try:
                self._perturbed = [self._held_pair(seed) for seed in SENSITIVITY_SEEDS]
            except refgrad.Error:
                self._perturbed = None
        return self._perturbed

    @property
    def rounded(self) -> list:
        """The sensitivity runs without the moved starting values (their instructions' rounding noise alone),
        run on first use: R~ where moving the values broke what a node relies on (_noise_of)."""
        if self._rounded is None:
            self._rounded = [self._sensitivity_pair(seed, move_values=False) for seed in SENSITIVITY_SEEDS]
        return self._rounded

    def _noise_of(self, value_of) -> Optional[float]:
        """The rule's noise of one value (``value_of(machine)`` reads it from a run): max(max|R' - R|,
        max|R~ - R|), None where R' says nothing (see _noise).

        Moving the numbers a program starts from one by one can break an equality that the forward made
        exactly and a node relies on: amax's saved result is one of its saved input's numbers, and its
        backward sends the grad where the two are equal; moved apart, no number is, and R~ is NaN. The runs
        then hold that node's saved values still and move the others (_held_pair); where R~ is still not
        finite but R is, R~ is the runs with the instructions' rounding noise alone (self.rounded)."""
        measured = self._noise(value_of(self.other), value_of(self.machine))
        if measured is None or self.perturbed is None:
            return measured
        exact = _torch(value_of(self.float64))
        largest = measured
        for index, pair in enumerate(self.perturbed):
            moved, moved_less = (_torch(value_of(machine)) for machine in pair)
            if _broken(exact, moved) or _broken(exact, moved_less):
                moved, moved_less = (_torch(value_of(machine)) for machine in self.rounded[index])
            largest = max(largest, _sensitivity(exact, moved, moved_less))
        return largest

    @staticmethod
    def _noise(other, reference) -> Optional[float]:
        """max|R' - R| of one value; None where it says nothing: a float64 value (R' and R are both the
        program as captured), a value not floating point, or no value."""
        if other is None or reference is None:
            return None
        other, reference = _torch(other), _torch(reference)
        captured = min(other, reference, key=lambda value: value.element_size())
        if captured.dtype == torch.float64 or not captured.is_floating_point():
            return None
        noise = _max_abs(other, reference)
        return noise if math.isfinite(noise) else None

    def register_noise(self, name: Optional[str]) -> Optional[float]:
        """The rounding noise of register ``name`` (see _noise_of)."""
        if name is None:
            return None
        return self._noise_of(lambda machine: machine.register_value(name))

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

    def divergence_at(self, pc: int, measured: _Measured, gradient: str, register: str = "",
                      values: Optional[dict[str, Optional[torch.Tensor]]] = None) -> Divergence:
        """A Divergence at the node called by instruction ``pc``, off by ``measured`` in ``gradient``, the
        program's ``register`` ("%12", or "@leaf"); ``values`` are the engine's at the divergence, by
        register (undefined ones are left out; the rest copied to the CPU, for the reproducer)."""
        instr = self.capture.program.code[pc]
        node = self.capture.graph.nodes[self.capture.node_of_instruction[pc]]
        kept = {name: value.detach().cpu().contiguous() for name, value in (values or {}).items() if value is not None}
        return Divergence(node=_node_label(node), pc=pc, instruction=self.machine.instruction_text(pc),
                          error=measured.error, tolerance=measured.bound, relative=measured.relative,
                          gradient=gradient, source=instr.origin or node.origin, register=register, values=kept)

    def validated_outputs(self, pc: int) -> list[Optional[str]]:
        """The registers validate makes of the results of the call at ``pc`` (its outgoing grads)."""
        code = self.capture.program.code
        results = list(code[pc].results)
        for instr in code[pc + 1:]:
            if instr.op == "validate" and list(instr.operands) == results:
                return list(instr.results)
        return results


class _EagerOracle:
    """R where capture refuses fn's backward (refgrad.torch.UnsupportedError): eager's own gradients, from
    one more fresh forward and torch's backward, so that the engines are still checked, against eager.
    ``uncovered`` names each node refgrad could not capture and why; there is no program, so no
    divergence can be localized and no reproducer written."""

    def __init__(self, subject: _Subject, refused: refgrad_torch.UnsupportedError):
        self.uncovered = [str(item) for item in refused.unsupported]
        run = subject.forward()
        self.grad_outputs = _ones(run.outputs)
        grads = engines_module.Eager().gradients(lambda transform=None: run, self.grad_outputs)
        self.grads = {name: grad for name, grad in grads.items() if grad is not None}
        self.dtypes = {name: leaf.dtype for name, leaf in run.leaves.items()}
        self.computes_in = _lowest_precision(list(self.dtypes.values()))  # what the leaves say, with no program
        self.noise: dict[str, Optional[float]] = {}  # R's own rounding is unknown: the rule falls back on atol
        self.in_dtype: dict[str, Optional[torch.Tensor]] = {}

    @property
    def capture(self):
        raise refgrad.Error("refgrad.check: R is eager's backward, as refgrad could not capture it (see "
                            "report.uncovered): there is no program to localize a divergence in")

    def python_calls(self) -> list[str]:
        return []


def _oracle_for(subject: _Subject, precision: str) -> Union[_Oracle, _EagerOracle]:
    """refgrad's run of the captured backward; eager's backward where capture refuses it."""
    try:
        return _Oracle(subject, precision)
    except refgrad_torch.UnsupportedError as refused:
        return _EagerOracle(subject, refused)
