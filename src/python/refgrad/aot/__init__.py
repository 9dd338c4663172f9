"""AOTAutograd's backward graphs as refgrad programs: inside a torch.compile'd region.

torch.compile's region shows up in the autograd graph as one node, CompiledFunctionBackward, whose
backward is AOTAutograd's backward graph: a functionalized backward program in ATen ops, which a
refgrad program runs as `aten` instructions (docs/program.md, "ATen instructions").

    import refgrad.aot
    captured = refgrad.torch.capture(loss, names=..., inline_compiled=True)   # the region opened up
    captured.run("float64")

    recorder = refgrad.aot.Recorder()                       # or one graph at a time, as compiled:
    compiled = torch.compile(model, backend=recorder.backend)
    compiled(x).sum().backward()
    recorder.imported[0].run("float64")                     # {"grad0": ..., ...}: the graph's outputs

* refgrad.aot.importing: one backward graph's calls as instructions (emit).
* refgrad.aot.inlining: the CompiledFunctionBackward nodes of a capture replaced by their graphs,
  prologue and epilogue as torch runs them.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import refgrad
from refgrad.aot.importing import Emitted, emit, op_name
from refgrad.aot.inlining import backward_graph, inline_compiled_regions
from refgrad.compiled_autograd.importing import _tensor_type

__all__ = ["Imported", "Recorder", "backward_graph", "emit", "import_backward", "inline_compiled_regions",
           "op_name"]


@dataclass
class Imported:
    """One backward graph as a program: its tangents are grads (%tangents_1, ...), its saved tensors
    and activations saved tensors ($primals_1, $tanh, ...), its SymInts their values, its outputs
    ^grad0, ^grad1, ... (one per tensor the graph returns; None outputs have none)."""

    bundle: refgrad.Bundle
    graph: torch.fx.GraphModule
    emitted: Emitted
    args: list  # the values the graph was called with (torch's)

    @property
    def program(self) -> refgrad.Program:
        return self.bundle.program

    def run(self, precision: str = "float64") -> dict[str, Optional[torch.Tensor]]:
        """Runs the program: "float64" promotes it first, "as_captured" runs it in its own dtypes."""
        if precision not in ("float64", "as_captured"):
            raise refgrad.Error(f"refgrad.aot: precision must be 'float64' or 'as_captured', got {precision!r}")
        bundle = refgrad.promote_to_float64(self.bundle) if precision == "float64" else self.bundle
        results = refgrad.run_program(bundle)
        return {name[1:]: None if value is None else value.torch() for name, value in results.items()}


def import_backward(gm: torch.fx.GraphModule, args: list, program_name: str = "aot_backward") -> Imported:
    """The backward graph `gm`, called with `args` (what the compiled backward is given: AOTAutograd's
    prologue's output), as a program with its values in a bundle."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(args):
        raise refgrad.Error(f"refgrad.aot: the graph has {len(placeholders)} placeholders, {len(args)} values given")
    operands, values, declarations = {}, {}, []
    for node, value in zip(placeholders, args):
        if isinstance(value, (int, torch.SymInt)):
            operands[node] = int(value)
        elif value is None:
            operands[node] = None
        elif node.name.startswith("tangents"):
            operands[node] = f"%{node.name}"
            values[f"%{node.name}"] = value.detach()
            declarations.append(f"  grad %{node.name} : {_tensor_type(value)}")
        else:
            operands[node] = f"${node.name}"
            values[f"${node.name}"] = value.detach()
            declarations.append(f"  saved ${node.name} : {_tensor_type(value)}")
    emitted = emit(gm, operands)
    for name, value in emitted.constants.items():
        values[f"${name}"] = value
        declarations.append(f"  saved ${name} : {_tensor_type(value)}")
    code = ["  " + line for line in emitted.lines]
    expected = gm(*args)
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    for i, (operand, value) in enumerate(zip(emitted.outputs, expected)):
        if operand is None or not isinstance(value, torch.Tensor):
            continue
        declarations.append(f"  output ^grad{i} : {_tensor_type(value)}")
        if isinstance(operand, str) and operand.startswith("$"):
            code.append(f"  %output{i} = aten.alias.default {operand}")
            operand = f"%output{i}"
        code.append(f"  output ^grad{i} {operand}")
    text = "\n".join([f"program {program_name}", *declarations, "code", *code]) + "\n"
    program = refgrad.Program.parse(text, f"<{program_name}>")
    return Imported(refgrad.make_bundle(program, values), gm, emitted, list(args))


@dataclass
class Recorder:
    """A torch.compile backend that records each backward graph AOTAutograd makes, and the values each
    backward is called with: ``torch.compile(model, backend=recorder.backend)``. Graphs run as they are
    (aot_eager's way). ``decompositions``: None (aot_eager's graphs), a decomposition table, or "inductor":
    the graphs Inductor is given, made as Inductor makes them (its decomposition table, and its partition
    function: its joint-graph passes and the min-cut partitioner, which recomputes cheap forward ops in the
    backward, a LayerNorm's var_mean)."""

    decompositions: Optional[object] = None
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    calls: list[tuple[int, list]] = field(default_factory=list)  # (graph index, its arguments), per call

    @property
    def backend(self) -> Callable:
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        decompositions, partition = self.decompositions, {}
        if decompositions == "inductor":
            importlib.import_module("torch._inductor.lowering")  # some of the table's entries need it loaded
            from torch._inductor.compile_fx import partition_fn
            from torch._inductor.decomposition import select_decomp_table
            decompositions, partition = select_decomp_table(), {"partition_fn": partition_fn}

        def compile_forward(gm, example_inputs):
            return make_boxed_func(gm.forward)

        def compile_backward(gm, example_inputs):
            index = len(self.graphs)
            self.graphs.append(gm)

            def call(args):
                self.calls.append((index, [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]))
                return gm(*args)

            call._boxed_call = True
            return call

        return aot_autograd(fw_compiler=compile_forward, bw_compiler=compile_backward,
                            decompositions=decompositions, **partition)

    @property
    def imported(self) -> list[Imported]:
        """Each recorded call's graph as a program, with the values it was called with."""
        return [import_backward(self.graphs[index], args, f"aot_backward{index}") for index, args in self.calls]
