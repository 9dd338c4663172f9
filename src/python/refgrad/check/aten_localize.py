"""The first divergent ATen op inside compiled code (Inductor's), where no graph can be read.

When a compiled backward's outputs are not those of the graph it was compiled from (refgrad.check.compiled:
interpreted, the graph gives other outputs), the error is in the compiled code, whose intermediate values
are fused away. The graph's ops can still be asked for their values, in three runs on the values the
compiled backward was called with:

* **the engine's**: the same graph with every op's result made an output too, compiled again by the same
  compiler, in the same lazy-backward context AOTAutograd compiled it in (so a compiler pass that rewrote the
  graph rewrites this one the same way); an op whose result is an output cannot be fused away;
* **refgrad's**: the graph imported as aten instructions (refgrad.aot) and run in float64;
* **eager's**: torch running the graph op by op (torch.fx.Interpreter), for the rule's allowance.

In the graph's order, each op's engine value is judged against refgrad's by the check rule (an op's eager
value sets its allowance); the first op that fails while every tensor it reads passed is named, with the
forward source line AOTAutograd recorded for it. If the outputs of the recompiled code agree with the graph,
the error did not show with the intermediates kept (it lives in a fusion they prevent), and nothing is named.

The Divergence's pc and instruction are the region's program's (refgrad.aot.import_backward of the graph), not
the oracle's; it carries no values, since the reproducer bundle holds the oracle's program, whose registers
are not the region's.
"""
from __future__ import annotations

import copy
import operator
from typing import Any, Optional

import torch
import torch.fx

import refgrad
import refgrad.aot
from refgrad.aot.importing import RecordingInterpreter
from refgrad.check.report import Divergence


def _tensor_nodes(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The graph's ops whose result is one tensor (a getitem of a multi-result op counts, the op does not)."""
    return [node for node in graph_module.graph.nodes
            if node.op == "call_function" and isinstance(node.meta.get("val"), torch.Tensor)]


def _exposed(graph_module: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, int]:
    """A copy whose outputs are the graph's own, then every tensor op's result; and the own outputs' count."""
    exposed = copy.deepcopy(graph_module)
    output = next(node for node in exposed.graph.nodes if node.op == "output")
    own = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    output.args = (tuple(own + _tensor_nodes(exposed)),)
    exposed.recompile()
    return exposed, len(own)


def _recompiled(compiler: Any, graph_module: torch.fx.GraphModule) -> Any:
    """graph_module compiled as AOTAutograd compiled the backward (_AutogradBackwardCompiler.get_or_compile: its
    bw_compiler, in its lazy-backward context), leaving the compiler as it was."""
    kept = (compiler.compiled_bw, compiler.lazy_backward_info.bw_module, compiler.try_save_cache_entry)
    compiler.compiled_bw, compiler.try_save_cache_entry = None, None
    compiler.lazy_backward_info.bw_module = graph_module
    try:
        return type(compiler).get_or_compile(compiler, saved_tensors_use_once=False)
    finally:
        compiler.compiled_bw, compiler.lazy_backward_info.bw_module, compiler.try_save_cache_entry = kept


def _call(compiled: Any, inputs: list) -> list:
    from refgrad.check.compiled import _copy
    arguments = _copy(inputs)
    outputs = compiled(arguments) if getattr(compiled, "_boxed_call", False) else compiled(*arguments)
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def localize_in_compiled_code(number: int, graph_module: torch.fx.GraphModule, inputs: list, compiler: Any,
                              rule, eager_values: Optional[dict[str, Any]] = None) -> Divergence:
    """The first divergent ATen op of compiled backward ``number`` (its graph, the values it was called with
    and AOTAutograd's compiler of it), or a Divergence that says why none is named. eager_values: torch's run
    of the graph on those values, node by node, when the caller has it (else it is run here)."""
    from refgrad.check.compiled import _copy, _source_line
    from refgrad.check.rule import _compare

    where = f"compiled backward {number}'s graph, its ops' results kept as outputs and compiled again"
    if compiler is None or getattr(compiler, "lazy_backward_info", None) is None:
        return Divergence(reason=f"compiled backward {number} was compiled ahead of its first backward: it cannot "
                                 "be compiled again with its ops' results kept")
    exposed, own = _exposed(graph_module)
    try:
        engine = _call(_recompiled(compiler, exposed), inputs)
    except Exception as error:  # the compiler's own failure: say so, name nothing
        return Divergence(reason=f"{where} raised {type(error).__name__}: {error}", graph=where)
    if eager_values is None:
        interpreter = RecordingInterpreter(graph_module)
        interpreter.run(*_copy(inputs))
        eager_values = interpreter.values
    imported = refgrad.aot.import_backward(graph_module, inputs, f"compiled_backward{number}")
    machine = refgrad.Machine(refgrad.promote_to_float64(imported.bundle), keep_values=True)
    machine.run()
    ops = _tensor_nodes(graph_module)
    values = dict(zip((node.name for node in ops), engine[own:]))
    passed: set[str] = set()
    kept = set(ops)
    for pc, (line, node) in enumerate(zip(imported.emitted.lines, imported.emitted.nodes)):
        results = [node] if node in kept else [user for user in node.users
                                              if user.target is operator.getitem and user in kept]
        for result in results:
            reference = machine.register_value(result.name).torch()
            actual, eager = values[result.name], eager_values[result.name]
            if not actual.is_floating_point():
                if torch.equal(actual, eager):
                    passed.add(result.name)
                continue
            eager_error = float((eager.double() - reference.double()).abs().max()) if eager.numel() else 0.0
            measured = _compare(actual, reference, actual.dtype, rule, eager_error, False)
            if measured.passed:
                passed.add(result.name)
                continue
            read = [arg for arg in node.all_input_nodes if arg.op == "call_function"]
            if any(arg.name not in passed for arg in read):
                continue  # it reads a value that already disagrees: the error is before it
            return Divergence(node=refgrad.aot.op_name(node.target), pc=pc, instruction=line,
                              error=measured.max_abs, tolerance=measured.tolerance, relative=measured.max_rel,
                              gradient=(f"the result of {node.name}" if result is node else
                                        f"the result {result.name} of {node.name}") + f" in compiled backward {number}",
                              source=_source_line(node.meta.get("stack_trace")), graph=where)
    return Divergence(reason=f"{where}: every op's result agrees with refgrad's (the error does not show with the "
                             "intermediates kept: it lives in a fusion that keeping them prevents)", graph=where)
