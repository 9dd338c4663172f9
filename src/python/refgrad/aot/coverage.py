"""How much of AOTAutograd's backward graphs refgrad runs: per ATen op, the calls that ran right of those
attempted, and the ops refgrad lacks, by how many graphs they keep from running.

Each graph a refgrad.aot.Recorder recorded is imported with the values it was called with (it must import:
every op known, every argument spelled), and torch runs it op by op (torch.fx.Interpreter); each op call is
then run by refgrad alone (refgrad.call_aten_op) on the very values torch's call was given, so that an op is
judged on its own, not on the rounding of the ops before it (whole graphs are checked end to end by
tests/python/test_aten.py). An op's call is right when its result is torch's within the rounding of its dtype:
max|refgrad - torch| <= rtol max|torch's result| + rtol/100 max|each tensor it reads| (rtol 1e-4 for float32
and narrower floats, 1e-10 for float64; exact for integers and bools), the second term because a result that
is 0 in exact arithmetic (a sum that cancels) is rounding noise of its operands' size in both; a 1% error in
an op's result fails (tests/python/test_aten.py plants one). empty's values are
unspecified: only its shape and dtype are compared. A graph with an
op refgrad lacks is not run; each op it lacks is counted once per such graph.

tools/aten_coverage.py runs it over the zoo, the transformers models and OpInfo's samples (`make
aten-coverage`); tests/python/test_aten.py over the zoo.
"""
from __future__ import annotations

import collections
import operator
from dataclasses import dataclass, field
from typing import Iterable, Optional

import torch

import refgrad
from refgrad.aot.importing import RecordingInterpreter, op_name, schema_arguments

_RTOL = {torch.float64: 1e-10, torch.complex128: 1e-10}
_RTOL_DEFAULT = 1e-4
# Ops whose values torch leaves unspecified (refgrad's are zeros): only their shape and dtype are compared.
_UNSPECIFIED = {"aten.empty.memory_format", "aten.empty_like.default", "aten.new_empty_strided.default"}


@dataclass
class Coverage:
    """Per op (its program name): calls attempted and right; per missing op, the graphs it kept from running
    and the sources they came from; graphs recorded, run, and what went wrong where a graph could not run."""

    attempted: collections.Counter = field(default_factory=collections.Counter)
    right: collections.Counter = field(default_factory=collections.Counter)
    missing: collections.Counter = field(default_factory=collections.Counter)
    missing_in: dict[str, set] = field(default_factory=lambda: collections.defaultdict(set))
    wrong: dict[str, list[str]] = field(default_factory=lambda: collections.defaultdict(list))  # op -> sources
    graphs: int = 0
    graphs_run: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (source, error) of graphs that did not run

    def add(self, source: str, calls: list[tuple[str, bool]], error: Optional[str] = None) -> None:
        """One graph: its op calls, each right or not; or the error that kept it from running."""
        self.graphs += 1
        if error is not None:
            self.failures.append((source, error))
            return
        self.graphs_run += 1
        for op, passed in calls:
            self.attempted[op] += 1
            if passed:
                self.right[op] += 1
            else:
                self.wrong[op].append(source)

    def add_missing(self, source: str, graph: torch.fx.GraphModule, known: set[str]) -> None:
        self.graphs += 1
        for op in sorted({_name(node.target) for node in _calls_in(graph)} - known):
            self.missing[op] += 1
            self.missing_in[op].add(source)

    def table(self) -> str:
        """Markdown: every op attempted with right / attempted, then the missing ops ranked."""
        lines = [f"{self.graphs} backward graphs, {self.graphs_run} run by refgrad; "
                 f"{sum(self.right.values())} of {sum(self.attempted.values())} op calls right, "
                 f"{sum(1 for op in self.attempted if self.right[op] == self.attempted[op])} of "
                 f"{len(self.attempted)} ops right in every call", "",
                 "| ATen op | calls right / attempted |", "|---|---|"]
        for op in sorted(self.attempted):
            lines.append(f"| `{op}` | {self.right[op]} / {self.attempted[op]} |")
        if self.missing:
            lines += ["", "Missing ops, by the graphs they keep from running:", "",
                      "| ATen op | graphs | sources |", "|---|---|---|"]
            for op, count in self.missing.most_common():
                sources = sorted(self.missing_in[op])
                shown = ", ".join(sources[:6]) + (f", ... ({len(sources)})" if len(sources) > 6 else "")
                lines.append(f"| `{op}` | {count} | {shown} |")
        if self.failures:
            lines += ["", f"{len(self.failures)} graphs with every op known did not run:", ""]
            lines += [f"- {source}: {error}" for source, error in self.failures[:40]]
        return "\n".join(lines)


def _name(target) -> str:
    return op_name(target) if isinstance(target, torch._ops.OpOverload) else str(target)


def _calls_in(graph: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [node for node in graph.graph.nodes
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)]


def _magnitude(value) -> float:
    if not isinstance(value, torch.Tensor) or value.numel() == 0 or not (value.is_floating_point() or value.is_complex()):
        return 0.0
    return float(value.detach().abs().max().double())


def _agrees(got: torch.Tensor, expected: torch.Tensor, inputs: float) -> bool:
    """Within rtol of the result's size, plus rtol / 100 of its inputs' size (what a sum that cancels leaves)."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return False
    if not (expected.is_floating_point() or expected.is_complex()):
        return torch.equal(got, expected)
    if expected.numel() == 0:
        return True
    error = float((got.to(torch.complex128 if expected.is_complex() else torch.float64)
                   - expected.to(torch.complex128 if expected.is_complex() else torch.float64)).abs().max())
    same_nonfinite = torch.equal(torch.isfinite(got), torch.isfinite(expected))
    rtol = _RTOL.get(expected.dtype, _RTOL_DEFAULT)
    bound = rtol * _magnitude(expected) + rtol / 100 * inputs
    return same_nonfinite and (error <= bound or error == 0
                               or (error != error and torch.equal(torch.isnan(got), torch.isnan(expected))))


def _torch_values(value, values: dict):
    """An FX argument with each node replaced by torch's value of it (lists too)."""
    if isinstance(value, torch.fx.Node):
        return values[value.name]
    if isinstance(value, (list, tuple)):
        return [_torch_values(item, values) for item in value]
    return value


def _calls(graph: torch.fx.GraphModule, args: list) -> Iterable[tuple[str, bool]]:
    """(op, right) for each op call of the graph: refgrad's op (refgrad.call_aten_op) on the very values torch's
    run of the graph gave that call, against torch's result."""
    torch_run = RecordingInterpreter(graph)
    torch_run.run(*[v.detach().clone() if isinstance(v, torch.Tensor) else v for v in args])
    for node in _calls_in(graph):
        name = op_name(node.target)
        given = [_torch_values(value, torch_run.values) for _, value in schema_arguments(node)]
        given = [int(v) if isinstance(v, torch.SymInt) else v for v in given]
        expected = torch_run.values[node.name]
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        got = refgrad.call_aten_op(name, given)
        inputs = max([_magnitude(v) for v in given if isinstance(v, torch.Tensor)] + [0.0])
        if name in _UNSPECIFIED:
            passed = [(g.torch().shape, g.torch().dtype) for g in got] == [(e.shape, e.dtype) for e in expected]
        else:
            passed = len(got) == len(expected) and all(
                e is None or not isinstance(e, torch.Tensor) or (g is not None and _agrees(g.torch(), e, inputs))
                for g, e in zip(got, expected))
        yield name, passed


def measure(source: str, recorder, coverage: Coverage) -> None:
    """Adds every call the recorder recorded (each graph once: its first call) to ``coverage``."""
    known = {schema.name for schema in refgrad.aten_ops()}
    seen = set()
    for index, args in recorder.calls:
        if index in seen:
            continue
        seen.add(index)
        graph = recorder.graphs[index]
        if {_name(node.target) for node in _calls_in(graph)} - known:
            coverage.add_missing(source, graph, known)
            continue
        try:
            refgrad.aot.import_backward(graph, args, f"aot_backward{index}")  # the graph imports, as a program
            calls = list(_calls(graph, args))
        except Exception as error:  # noqa: BLE001 (a graph refgrad cannot run is reported with its error)
            message = str(error).splitlines()[0][:200] if str(error) else ""
            coverage.add(source, [], f"{type(error).__name__}: {message}")
            continue
        coverage.add(source, calls)
