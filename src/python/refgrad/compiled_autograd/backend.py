"""refgrad as a compiled autograd backend, and capture through compiled autograd.

    torch._dynamo.compiled_autograd._enable(refgrad.compiled_autograd.backend)
        runs every backward in refgrad: the graph compiled autograd traced is imported as a program,
        refgrad runs it, and refgrad's gradients are left in .grad.
    recorder = refgrad.compiled_autograd.backend(record=True)
    torch._dynamo.compiled_autograd._enable(recorder)
        records each backward's program (recorder.recorded, and a bundle file when save_to is given)
        and runs torch's own graph, so what the backward does is unchanged.

A compiler for compiled autograd takes the FX graph and returns the function compiled autograd then
calls with (inputs, sizes, scalars, hooks, packed_data); it may call it again for a later backward of
the same shape, so the program is imported at each call, from that call's values.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch._dynamo import compiled_autograd

import refgrad
from refgrad.compiled_autograd.importing import Imported, import_graph
from refgrad.torch.builder import _Names

__all__ = ["Backend", "backend", "capture"]


class Backend:
    """A compiled autograd compiler. record=False: run the backward in refgrad (precision "float32",
    as torch; "float64" runs promoted and casts the grads back). record=True: import each backward's
    program into ``recorded`` (and save it to ``save_to``, numbered after the first), then call
    ``compiler(gm)`` (default: the graph itself, run eagerly) as compiled autograd would.
    run=False with record=True imports and runs nothing at all (what capture() uses).
    Either way ``recorded`` keeps every imported program, in the order of the backwards."""

    def __init__(self, *, record: bool = False, names=None, save_to: Optional[str] = None,
                 compiler: Optional[Callable] = None, precision: str = "float32", run: bool = True,
                 program_name: str = "backward", output_names=()):
        self.program_name = program_name
        self.output_names = list(output_names)
        self.record = record
        self.names = names
        self.save_to = save_to
        self.compiler = compiler
        self.precision = precision
        self.run = run
        self.recorded: list[Imported] = []

    def __call__(self, gm: torch.fx.GraphModule) -> Callable:
        compiled = (self.compiler or (lambda module: module))(gm) if self.record and self.run else None

        def call(inputs, sizes, scalars, hooks, packed_data):
            # imported first: the graph clears `inputs` as it runs (compiled autograd lets it steal them)
            imported = import_graph(gm, inputs, sizes, scalars, hooks, packed_data, names=self.names,
                                    program_name=self.program_name, output_names=self.output_names)
            if not self.record:
                self._keep(imported)
                return _run_in_refgrad(imported, self.precision)
            if not self.run:
                self._keep(imported)
                # torch checks that each of autograd.grad's inputs got a grad: zeros stand in
                return [torch.zeros(decl.type.sizes, dtype=getattr(torch, decl.type.dtype))
                        for decl in imported.program.outputs]
            outputs = compiled(inputs, sizes, scalars, hooks, packed_data)
            _add_result_set(imported, outputs)
            self._keep(imported)
            return outputs

        return call

    def _keep(self, imported: Imported) -> None:
        if self.save_to is not None and self.record:
            path = str(self.save_to)
            if self.recorded:
                stem, dot, extension = path.rpartition(".")
                path = f"{stem}{len(self.recorded)}.{extension}" if dot else f"{path}{len(self.recorded)}"
            imported.save(path)
        self.recorded.append(imported)


def _add_result_set(imported: Imported, outputs) -> None:
    """What torch's graph computed, as the bundle's result set "compiled_autograd": each leaf's .grad
    and each output, so that `refgrad check BUNDLE` compares refgrad's run with it."""
    tensors = {}
    for spelled, name in imported.leaf_names.items():
        if name not in imported.leaves:
            continue  # an output's name
        grad = imported.leaves[name].grad
        if grad is not None:
            tensors["@" + spelled] = grad.detach().clone()
    for name, grad in zip(imported.outputs, outputs or []):
        if grad is not None:
            tensors["^" + name] = grad.detach().clone()
    imported.bundle.results = [refgrad.ResultSet("compiled_autograd", tensors,
                                                 {"torch": torch.__version__, "engine": "compiled autograd"})]


def _run_in_refgrad(imported: Imported, precision: str) -> list[Optional[torch.Tensor]]:
    """Runs the program and does what torch's graph does with its results: each leaf's .grad
    becomes refgrad's (a new tensor, where torch may add into the old one in place), and the graph
    returns the outputs (torch.autograd.grad's)."""
    results = imported.run(precision)
    for name, variable in imported.leaves.items():
        grad = results.get(name)
        variable.grad = None if grad is None else grad.to(variable.dtype)
    outputs = [results.get(imported.leaf_names.get(name, name)) for name in imported.outputs]
    declared = [getattr(torch, decl.type.dtype) for decl in imported.program.outputs]
    return [None if grad is None else grad.to(dtype) for grad, dtype in zip(outputs, declared)]


def backend(gm: Optional[torch.fx.GraphModule] = None, **options) -> Any:
    """``backend(gm)``: the compiler that runs the backward in refgrad. ``backend(record=True, ...)``
    (no graph): a Backend with those options (see Backend)."""
    if gm is None:
        return Backend(**options)
    return Backend(**options)(gm)


def capture(outputs, inputs=None, grad_outputs=None, *, names=None, allow_unused: bool = False,
            accumulate_grad: Optional[bool] = None, program_name: str = "backward") -> Imported:
    """refgrad.torch.capture(..., via="compiled_autograd"): the program compiled autograd traces for
    this backward, imported. The backward is traced but not run (retain_graph=True: the graph stays
    usable, no .grad changes, no hook runs). Compiled autograd's cache is cleared first, so that a graph
    compiled earlier by another compiler is never called instead."""
    outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    inputs = None if inputs is None else ([inputs] if isinstance(inputs, torch.Tensor) else list(inputs))
    accumulate = inputs is None if accumulate_grad is None else accumulate_grad
    # torch.autograd.grad's inputs are named as leaves are (names, else input0, ...), as capture() names them
    tensor_names = _Names(names)
    output_names = [] if accumulate else [tensor_names(tensor, "input") for tensor in inputs]
    recorder = Backend(record=True, run=False, names=names, program_name=program_name, output_names=output_names)
    compiled_autograd.reset()
    try:
        with compiled_autograd._enable(recorder):
            if accumulate:
                torch.autograd.backward(outputs, grad_outputs, retain_graph=True, inputs=inputs)
            else:
                torch.autograd.grad(outputs, inputs, grad_outputs, retain_graph=True, allow_unused=allow_unused)
    except refgrad.Error:
        raise
    except Exception as error:
        raise refgrad.Error(f"refgrad.compiled_autograd.capture: {type(error).__name__}: {error}") from error
    finally:
        compiled_autograd.reset()
    if len(recorder.recorded) != 1:
        raise refgrad.Error(f"refgrad.compiled_autograd.capture: compiled autograd compiled "
                            f"{len(recorder.recorded)} graphs for one backward, expected 1")
    return recorder.recorded[0]
