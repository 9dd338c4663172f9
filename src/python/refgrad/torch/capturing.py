"""capture(), graph_of() and the Capture they return: a backward read from torch, functionalized
into a refgrad program, run in refgrad's Machine."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

import refgrad
from refgrad.graph import FunctionalizeOptions, Graph, Order, functionalize
from refgrad.torch.builder import _Builder, _Names
from refgrad.torch.checkpointing import _REENTRANT_WITH_INPUTS, _Recomputation
from refgrad.torch.host import (Host, _function_backward, _module_hook, _post_accumulate_grad_hook, _tensor_hook,
                               _to_torch)
from refgrad.torch.walk import UnsupportedError, _outputs_list, _root_edges, _Walk, gradient_edge


def _refgrad_errors(who: str) -> Callable:
    """No foreign exception leaves capture() or a Capture's run: one that torch, a host call or the
    user's code raises becomes a refgrad.Error that names it, raised from it."""

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def call(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except refgrad.Error:
                raise
            except Exception as error:
                raise refgrad.Error(f"{who}: {type(error).__name__}: {error}") from error

        return call

    return decorate


def _promotes(precision: str, who: str) -> bool:
    """Whether `precision` asks for the float64 promotion; raises for a precision refgrad has not."""
    if precision not in ("float64", "as_captured", "float32"):
        raise refgrad.Error(f"{who}: precision must be 'float64' or 'as_captured' (also spelled 'float32'), "
                            f"got {precision!r}")
    return precision == "float64"


@dataclass(repr=False)
class Capture:
    """A captured backward: the graph model, the program (in a bundle with its tensors), for each
    instruction the graph node it came from, the leaves by name, and the host (hooks, functions)."""

    graph: Graph
    bundle: refgrad.Bundle
    node_of_instruction: list[int]
    leaves: dict[str, torch.Tensor]
    captures: list[str]  # torch.autograd.grad's inputs, by name; empty for a backward()
    accumulate_grad: bool
    _builder: _Builder

    @property
    def program(self) -> refgrad.Program:
        return self.bundle.program

    @property
    def host(self) -> Host:
        """The hooks and functions, for the program as captured."""
        return self._host(promote=False)

    def _host(self, promote: bool) -> Host:
        """The host callables the program declares: under torch.autograd.grad's inputs it leaves out what no
        captured grad needs (the hooks of a leaf that is not an input, every post-accumulate-grad hook, the
        nodes it does not run), and a Machine refuses a callable its program does not declare."""
        builder = self._builder
        program = self.program
        hooks, functions = {hook.name for hook in program.hooks}, {function.name for function in program.functions}
        host = Host()
        for name, hook in builder.tensor_hooks.items():
            host.hooks[name] = _tensor_hook(hook)
        for name, hook in builder.post_acc_hooks.items():
            host.hooks[name] = _post_accumulate_grad_hook(hook, self.leaves)
        for name, (hook, fn) in builder.node_post_hooks.items():
            host.hooks[name] = _module_hook(hook, fn, promote)
        for name, fn in builder.function_nodes.items():
            host.functions[name] = _function_backward(fn, promote)
        host.hooks = {name: hook for name, hook in host.hooks.items() if name in hooks}
        host.functions = {name: function for name, function in host.functions.items() if name in functions}
        return host

    def _bundle(self, precision: str, perturbed: Optional[float], seed: int, who: str, move_values: bool = True,
                held: frozenset = frozenset(),
                as_captured: Sequence = ()) -> tuple[refgrad.Bundle, bool, Optional[refgrad.RoundingNoise]]:
        """The bundle a run at ``precision`` starts from, whether it is promoted to float64, and the
        rounding noise its instructions run with (None but for a sensitivity run)."""
        promote = _promotes(precision, who)
        if perturbed is not None:
            if not promote:
                raise refgrad.Error(f"{who}: perturbed= moves the values of the float64 run; precision must be "
                                    f"'float64', got {precision!r}")
            start = (refgrad.perturbed_to_float64(self.bundle, seed, perturbed, set(held)) if move_values
                     else refgrad.promote_to_float64(self.bundle))
            return start, True, refgrad.rounding_noise_of(self.bundle, seed, perturbed, list(as_captured))
        return (refgrad.promote_to_float64(self.bundle) if promote else self.bundle), promote, None

    @_refgrad_errors("Capture.machine")
    def machine(self, precision: str = "float64", keep_values: bool = False, perturbed: Optional[float] = None,
                seed: int = 0, move_values: bool = True, held: frozenset = frozenset(), trace: bool = False,
                as_captured: Sequence = ()) -> refgrad.Machine:
        """A refgrad Machine over the program, ready to step or run: as captured ("float32") or
        promoted to float64; keep_values keeps every register (for reading them after a run).
        perturbed=SCALE: the check rule's sensitivity run, the float64 program with each number it starts
        from moved by up to SCALE roundings of its own dtype (refgrad.perturbed_to_float64) and each
        instruction's arithmetic results by up to SCALE roundings of the dtype it computes in as captured
        (refgrad.rounding_noise_of), drawn from seed; with move_values=False only the latter (the numbers it
        starts from are as captured); the values ``held`` names ("$n1_result") are not moved
        (refgrad.saved_values_broken_by_moving says which need it); ``as_captured``, the trace of a run as
        captured (``machine("as_captured", trace=True).trace``), says which validates cast grads to a narrower
        dtype, whose results then round once more (refgrad.rounding_noise_of). trace records a TraceEntry per
        instruction."""
        bundle, promote, noise = self._bundle(precision, perturbed, seed, "Capture.machine", move_values, held,
                                              as_captured)
        host = self._host(promote)
        return refgrad.Machine(bundle, hooks=host.hooks, functions=host.functions, keep_values=keep_values,
                               trace=trace, rounding_noise=noise)

    @_refgrad_errors("Capture.run")
    def run(self, precision: str = "float64", perturbed: Optional[float] = None,
            seed: int = 0) -> dict[str, torch.Tensor]:
        """Runs the program in refgrad's Machine. precision "float64" promotes every float16, bfloat16
        and float32 tensor and type to float64 (complex64 to complex128) first; "as_captured" (or its
        older spelling "float32") runs the program in its own dtypes; perturbed and seed as for machine().
        Returns what torch would leave: for a backward(), each leaf's .grad (and retain_grad()'s grads)
        by name; for torch.autograd.grad's inputs, their grads by name (None where unused)."""
        bundle, promote, noise = self._bundle(precision, perturbed, seed, "Capture.run")
        host = self._host(promote)
        results = refgrad.run_program(bundle, hooks=host.hooks, functions=host.functions, rounding_noise=noise)
        if self.captures and not self.accumulate_grad:
            return {name: _to_torch(results.get("^" + name)) for name in self.captures}
        return {name[1:]: _to_torch(value) for name, value in results.items()}

    def save(self, path: str) -> None:
        """Writes the program and its tensors as one bundle (.safetensors)."""
        self.bundle.save(str(path))

    def __repr__(self) -> str:
        return (f"<Capture {self.program.name}: {len(self.program)} instructions, "
                f"{len(self.graph.nodes)} nodes, leaves {sorted(self.leaves)}>")


def _grad_outputs(outputs: list[torch.Tensor], grad_outputs) -> list[torch.Tensor]:
    """torch's _make_grads: the given grads, or ones for a one-element output."""
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, torch.Tensor):
        grad_outputs = [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise refgrad.Error(f"grad_outputs: expected {len(outputs)} grads (one per output), got {len(grad_outputs)}")
    grads = []
    for output, grad in zip(outputs, grad_outputs):
        if grad is None:
            if output.numel() != 1:
                raise refgrad.Error("grad can be implicitly created only for scalar outputs")
            grad = torch.ones_like(output)
        grads.append(grad.detach().clone())
    return grads


@dataclass
class _Captured:
    """What walking torch's graph gives: the graph model and the names and callables it refers to."""

    graph: Graph
    builder: _Builder
    captures: list[str]


def _refuse_sparse_layouts(outputs, inputs, grads) -> None:
    """refgrad's tensors are dense (torch.strided): a sparse output, input or grad is refused by name
    here, before torch raises on it deep inside the walk."""
    for what, tensors in (("output", outputs), ("input", inputs), ("grad_outputs", grads)):
        for i, tensor in enumerate(tensors):
            if tensor.layout != torch.strided:
                raise refgrad.Error(f"refgrad.torch.capture: {what} {i} is a {tensor.layout} tensor; refgrad's "
                                    "tensors are dense (torch.strided): sparse layouts are not supported yet")


_NOT_USED = ("One of the differentiated Tensors appears to not have been used in the graph. Set allow_unused=True "
             "if this is the desired behavior.")


def _capture_graph(outputs, inputs, grad_outputs, names, allow_unused: bool = False) -> _Captured:
    outputs = _outputs_list(outputs)
    inputs = [] if inputs is None else _outputs_list(inputs)
    tensor_names = _Names(names)
    root_edges = _root_edges(outputs)
    root_grads = _grad_outputs(outputs, grad_outputs)
    _refuse_sparse_layouts(outputs, inputs, root_grads)
    capture_edges, unreached = [], []
    for tensor in inputs:
        if not tensor.requires_grad:
            raise refgrad.Error("One of the differentiated Tensors does not require grad")
        edge = gradient_edge(tensor)
        if edge.node is None:
            # no node accumulates its gradient (a leaf view of a base whose graph was not recorded): no output
            # reaches it, and torch.autograd.grad gives None for it
            if not allow_unused:
                raise refgrad.Error(f"refgrad.torch.capture: input {len(capture_edges) + len(unreached)}: {_NOT_USED}")
            unreached.append(tensor_names(tensor, "input"))
            continue
        capture_edges.append((tensor_names(tensor, "input"), edge))
    if inputs and not capture_edges:
        raise refgrad.Error(f"refgrad.torch.capture: no input has a node that accumulates its gradient: {_NOT_USED}")

    # Reading saved values may recompute checkpointed regions: the capture's own recomputation.
    recomputation = _Recomputation()
    with recomputation.active():
        walk = _Walk(root_edges + [edge for _, edge in capture_edges], recomputation)
        unsupported = walk.unsupported()
        if unsupported:
            raise UnsupportedError(unsupported)
        if capture_edges and walk.checkpoints:
            raise refgrad.Error(f"refgrad.torch.capture: torch refuses this backward: {_REENTRANT_WITH_INPUTS}")
        builder = _Builder(walk, tensor_names)
        graph = builder.build()
    for i, (edge, grad) in enumerate(zip(root_edges, root_grads)):
        root = builder.edge(edge)
        if root is None:
            raise refgrad.Error(f"refgrad.torch.capture: output {i} is a checkpointed output whose recomputation "
                                "needs no grad: torch's checkpoint gives it none")
        graph.roots.append(root)
        graph.root_grads.append((f"grad_output{i}", grad))
    for i, (edge, zeros) in enumerate(walk.zero_roots()):
        # a checkpoint output no grad reaches: torch's node runs its inner backward with zeros for it
        graph.roots.append(builder.edge(edge))
        graph.root_grads.append((f"checkpoint_zeros{i}", zeros))
    for name, edge in capture_edges:
        graph.captures.append((name, builder.edge(edge)))
    given = {id(tensor): tensor for tensor in outputs + inputs + tensor_names.tensors()}
    for tensor in given.values():
        builder.add_non_leaf_hooks(tensor)
    # an unreached input is among the names but not the program's captures: Capture.run gives it None
    return _Captured(graph, builder, [name for name, _ in capture_edges] + unreached)


def _with_torch_path(message: str, walk: _Walk) -> str:
    """A functionalize error names a node by its index ("node 3 (CatBackward0)"); adds where that
    node sits in torch's graph."""
    found = re.search(r"\bnode (\d+) \(|Graph\.nodes\[(\d+)\]", message)
    if found is None:
        return message
    index = int(found.group(1) or found.group(2))
    if index >= len(walk.order):
        return message
    return f"{message} (at {walk.where(walk.order[index])})"


@_refgrad_errors("refgrad.torch.graph_of")
def graph_of(outputs, inputs=None, grad_outputs=None, *, names=None) -> Graph:
    """The refgrad.graph.Graph capture() builds, before functionalize orders it (capture's
    arguments). For looking at what was read from torch, or for functionalizing it by hand."""
    return _capture_graph(outputs, inputs, grad_outputs, names).graph


@_refgrad_errors("refgrad.torch.capture")
def capture(outputs, inputs=None, grad_outputs=None, *, names=None, allow_unused: bool = False,
            accumulate_grad: Optional[bool] = None, order: str = "eager",
            program_name: str = "backward", via: str = "grad_fn", inline_compiled: bool = False) -> Capture:
    """Captures the backward of ``outputs`` (a tensor or a sequence of them) as a refgrad program.

    inputs: as torch.autograd.grad's (a tensor or a sequence): the program outputs their grads,
      named like leaves; with accumulate_grad=True, as backward(inputs=...) instead. None: a
      backward() into every leaf.
    grad_outputs: one grad per output (None for ones, allowed for a one-element output).
    names: a mapping of tensors to program names, either way round (dict(model.named_parameters())
      works as it is); unnamed leaves are input0, input1, ..., other tensors output0, ...
      Non-leaf tensors named here have their hooks and retain_grad() captured.
      A leaf's .grad at capture time is its declared starting .grad: the program adds into it, as a
      backward would, so a capture taken after a backward (retain_graph=True) runs a second one.
    allow_unused: torch.autograd.grad's. order: "eager" (the engine's ready queue) or
      "compiled_autograd".
    via: "grad_fn" (walk the grad_fn graph; this page) or "compiled_autograd": let torch's compiled
      autograd trace the backward and import its graph (refgrad.compiled_autograd.capture, which
      returns a refgrad.compiled_autograd.Imported; it has the program in compiled autograd's own
      order, and node hooks, grad_fn.register_hook / register_prehook, that a grad_fn walk cannot see).
    inline_compiled: a torch.compile'd region's node (CompiledFunctionBackward) becomes the ATen
      instructions of its AOT backward graph (refgrad.aot), instead of one call of torch's compiled code.

    Raises UnsupportedError (a refgrad.Error) listing every node refgrad cannot capture, and
    refgrad.Error for a freed graph, what torch itself refuses, and what the
    functionalizer cannot express (its message names the node).
    refgrad.Error also for whatever else goes wrong in it (naming the original exception).
    See the docstrings of refgrad.torch's modules for what torch hides from Python.
    """
    if via == "compiled_autograd":
        from refgrad.compiled_autograd import capture as capture_compiled_autograd
        return capture_compiled_autograd(outputs, inputs, grad_outputs, names=names, allow_unused=allow_unused,
                                         accumulate_grad=accumulate_grad, program_name=program_name)
    if via != "grad_fn":
        raise refgrad.Error(f"refgrad.torch.capture: via must be 'grad_fn' or 'compiled_autograd', got {via!r}")
    captured = _capture_graph(outputs, inputs, grad_outputs, names, allow_unused)
    accumulate = not captured.captures if accumulate_grad is None else accumulate_grad
    options = FunctionalizeOptions(order=Order(order), accumulate_grad=accumulate, allow_unused=allow_unused,
                                   program_name=program_name)
    try:
        bundle, node_of_instruction = functionalize(captured.graph, options)
    except refgrad.Error as error:
        raise refgrad.Error(_with_torch_path(str(error), captured.builder.walk)) from error
    if inline_compiled:
        from refgrad.aot import inline_compiled_regions
        bundle, old_pc = inline_compiled_regions(bundle, captured.builder.function_nodes)
        node_of_instruction = [node_of_instruction[pc] for pc in old_pc]
    return Capture(captured.graph, bundle, list(node_of_instruction), captured.builder.leaves, captured.captures,
                   accumulate, captured.builder)
