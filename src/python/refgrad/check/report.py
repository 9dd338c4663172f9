"""What check() returns: per engine and gradient a GradientResult, the first Divergence, the Report."""
from __future__ import annotations

import html
import math
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Optional

from refgrad import display

if TYPE_CHECKING:
    import torch




@dataclass
class GradientResult:
    """One gradient of one engine against R: max|E - R|, max|E - R| / max|R| (0/0 counts as 0), the
    bound it must stay under, and the verdict; ``note`` says why when it failed without figures, or
    what NaN and Inf it has. ``noise`` is max(max|R' - R|, max|R~ - R|), the rule's measure of the
    gradient's rounding (NaN where there is none: a float64 gradient)."""

    max_abs: float
    max_rel: float
    tolerance: float
    passed: bool
    note: str = ""
    noise: float = math.nan


@dataclass
class Divergence:
    """Where an engine first went wrong: the PyTorch node, the oracle's program counter and
    instruction, the error (max|E - R| of the worst outgoing grad, and its bound), the forward source
    line when known, and which backward was used. ``node`` None: not localized, ``reason`` says why.

    ``register`` names the divergent gradient in the oracle's program: "%12", or "@0.weight" when it is
    a leaf's .grad (AccumulateGrad's outgoing gradient). ``values`` holds what the engine computed there,
    by register ("%12"), as the localizing run recorded it: the divergent gradient and the node's
    incoming gradients that were judged to agree (those that were recorded), so that a reproducer can
    show them beside refgrad's."""

    node: Optional[str] = None
    pc: Optional[int] = None
    instruction: str = ""
    error: float = math.nan
    tolerance: float = math.nan
    relative: float = math.nan  # error / max|R| of that grad
    gradient: str = ""  # which outgoing grad: "output 1 (to AddmmBackward0)" or "@0.weight"
    source: str = ""  # the forward source line, "file.py:12" (anomaly mode records it)
    graph: str = ""  # the backward used to localize
    reason: str = ""
    observed: dict[str, GradientResult] = field(default_factory=dict)  # the second run's, when it failed otherwise
    register: str = ""
    values: dict[str, "torch.Tensor"] = field(default_factory=dict)

    @property
    def localized(self) -> bool:
        return self.node is not None

    def __str__(self) -> str:
        if not self.localized:
            return f"not localized: {self.reason}"
        where = f" ({self.source})" if self.source else ""
        return (f"{self.node} at pc {self.pc}{where}: off by {_figure(self.error)} ({_percent(self.relative)} of "
                f"max|R|; bound {_figure(self.tolerance)}) in {self.gradient}\n    {self.instruction}")


@dataclass
class SwapCall:
    """A node call of compiled autograd's graph that swap mode can swap (refgrad.check.swap): its position among
    the graph's node calls, its FX node, PyTorch's node it calls, and the pc of the oracle's instruction that
    calls that node (None where the graph's calls could not be matched with the oracle's program)."""

    position: int
    fx_name: str
    node: str
    pc: Optional[int]

    def __str__(self) -> str:
        return f"call {self.position} `{self.fx_name}` ({self.node}{'' if self.pc is None else f', pc {self.pc}'})"


@dataclass
class SwapRun:
    """One run of swap mode: the node calls (positions) that ran refgrad's implementation, and the verdict:
    ``passed`` when every gradient passed the rule, ``failed`` the gradients that did not, ``error`` why a run
    that raised has none."""

    swapped: list[int]
    passed: bool = False
    failed: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def verdict(self) -> str:
        return f"raised {self.error}" if self.error else "pass" if self.passed else f"FAIL ({', '.join(self.failed)})"


_SWAP_MODES = {"only_one": "refgrad's implementation of only one node", "all_but_one":
               "refgrad's implementation of every node but one"}


def _positions(positions: list[int], calls: list[SwapCall]) -> str:
    """"call 7 `x` (Node, pc 12)" for one call, "calls 0-8, 12" for several."""
    if len(positions) == 1:
        return str(calls[positions[0]])
    spans: list[list[int]] = []
    for position in sorted(positions):
        if spans and position == spans[-1][1] + 1:
            spans[-1][1] = position
        else:
            spans.append([position, position])
    return "calls " + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass
class Swap:
    """What swap mode found for one engine: ``mode`` ("only_one" or "all_but_one"), the graph's swappable node
    calls (``calls``), every run in the order it ran, the calls named (``named``: for only_one the call whose
    swap alone makes every gradient pass; for all_but_one each call whose torch implementation alone, among
    refgrad's, fails) and, for the first of them, its instruction and forward source line in the oracle's
    program; ``reason`` says why no call is named."""

    mode: str
    calls: list[SwapCall] = field(default_factory=list)
    runs: list[SwapRun] = field(default_factory=list)
    named: list[SwapCall] = field(default_factory=list)
    instruction: str = ""
    source: str = ""
    reason: str = ""

    @property
    def node(self) -> Optional[str]:
        """PyTorch's name of the node named first (in the graph's order); None when none is."""
        return self.named[0].node if self.named else None

    @property
    def pc(self) -> Optional[int]:
        return self.named[0].pc if self.named else None

    def describe(self, run: SwapRun) -> str:
        """Which calls a run swapped, and its verdict: "refgrad's: calls 0-8: pass" (only_one), "torch's: call 3
        `tanh_backward0` (TanhBackward0, pc 9), the other 5 refgrad's: FAIL (...)" (all_but_one)."""
        kept = [call.position for call in self.calls if call.position not in run.swapped]
        if not kept:
            which = "refgrad's: every call"
        elif self.mode == "all_but_one":
            which = f"torch's: {_positions(kept, self.calls)}, the other {len(run.swapped)} refgrad's"
        else:
            which = f"refgrad's: {_positions(run.swapped, self.calls)}"
        return f"{which}: {run.verdict}"

    def _run_with(self, swapped: set[int]) -> Optional[SwapRun]:
        return next((run for run in self.runs if set(run.swapped) == swapped), None)

    def __str__(self) -> str:
        head = (f"swap ({_SWAP_MODES.get(self.mode, self.mode)}; {len(self.runs)} runs over {len(self.calls)} "
                "node calls)")
        if not self.named:
            return f"{head}: no node named: {self.reason}"
        first = self.named[0]
        where = ("" if first.pc is None else f" at pc {first.pc}") + (f" ({self.source})" if self.source else "")
        if self.mode == "only_one":
            why = f"with refgrad's {first.node} there and torch's everywhere else, every gradient passes"
        else:
            run = self._run_with({call.position for call in self.calls} - {first.position})
            why = (f"torch's {first.node} alone among refgrad's nodes fails {', '.join(run.failed) if run else '?'} "
                   "(every node refgrad's passes)")
        text = f"{head}: {first.node}{where}, compiled autograd's `{first.fx_name}`: {why}"
        if self.named[1:]:
            text += "; also named: " + ", ".join(map(str, self.named[1:]))
        return text + (f"\n    {self.instruction}" if self.instruction else "")


def error_text(error: Exception) -> str:
    """The exception's type and the first line of its message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _divergence_dict(divergence: Divergence) -> dict[str, Any]:
    """A Divergence as plain Python values: the engine's values by their shapes (the tensors are in the
    reproducer bundle; a gradient's elements would swamp a JSON report)."""
    plain = {f.name: getattr(divergence, f.name) for f in fields(divergence) if f.name not in ("values", "observed")}
    plain["observed"] = {name: asdict(result) for name, result in divergence.observed.items()}
    plain["values"] = {name: list(value.shape) for name, value in divergence.values.items()}
    return {**plain, "localized": divergence.localized}


def _figure(value: float) -> str:
    return f"{value:.3g}"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3g}%" if math.isfinite(fraction) else _figure(fraction)


@dataclass
class Report:
    """The outcome of check(): per engine and gradient a GradientResult, per engine the first
    divergence (None when it passed), the reproducer bundles written, engines skipped and why, and
    (when fn registers tensor hooks) the hooks each engine fired, in order: an engine passes only when
    its hooks fired as eager's did. ``hooks_not_recorded`` names, per engine whose forward ran under a
    transform (torch_compile), eager's hooks on non-leaf tensors, which its run could not record (its
    compiler traces them into its backward); they are left out of its comparison."""

    fn: str
    precision: str
    rule: str
    results: dict[str, dict[str, GradientResult]] = field(default_factory=dict)
    first_divergence: dict[str, Optional[Divergence]] = field(default_factory=dict)
    reproducers: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hooks: dict[str, list[str]] = field(default_factory=dict)  # engine -> the hook calls, in order
    hooks_not_recorded: dict[str, list[str]] = field(default_factory=dict)  # engine -> hooks its run could not see
    eager: str = "eager"  # the engine that ran as the rule's baseline
    errors: dict[str, str] = field(default_factory=dict)  # engine -> why it produced no gradients
    # The nodes refgrad could not capture, and why: R is then eager's backward, not refgrad's run.
    uncovered: list[str] = field(default_factory=list)
    swaps: dict[str, Swap] = field(default_factory=dict)  # engine -> what swap mode found (check's swap=)
    inputs: Optional[list[str]] = None  # check's inputs=: torch.autograd.grad over these leaves (None: backward())

    @property
    def reference(self) -> str:
        """What R is."""
        if self.uncovered:
            return (f"eager's backward (refgrad could not capture {len(self.uncovered)} node(s), listed below: "
                    "the engines are checked against eager, not against refgrad)")
        return f"refgrad's run at {self.precision}"

    @property
    def passed(self) -> bool:
        return all(self.engine_passed(engine) for engine in self.results)

    def hooks_expected(self, engine: str) -> list[str]:
        """Eager's hook calls, less those of the hooks the engine's run could not record."""
        unseen = set(self.hooks_not_recorded.get(engine, ()))
        return [call for call in self.hooks.get(self.eager, []) if call not in unseen]

    def hooks_as_eager(self, engine: str) -> bool:
        """Whether the engine fired fn's hooks as eager did: the same hooks, as often, in the same order."""
        return engine not in self.hooks or self.hooks[engine] == self.hooks_expected(engine)

    def engine_passed(self, engine: str) -> bool:
        return (engine not in self.errors and all(result.passed for result in self.results[engine].values())
                and self.hooks_as_eager(engine))

    def to_dict(self) -> dict[str, Any]:
        return {
            "fn": self.fn, "precision": self.precision, "rule": self.rule, "passed": self.passed,
            "results": {e: {g: asdict(r) for g, r in grads.items()} for e, grads in self.results.items()},
            "first_divergence": {e: None if d is None else _divergence_dict(d) for e, d in self.first_divergence.items()},
            "reproducers": dict(self.reproducers), "skipped": dict(self.skipped), "notes": list(self.notes),
            "errors": dict(self.errors), "uncovered": list(self.uncovered),
            "hooks": {e: list(calls) for e, calls in self.hooks.items()},
            "hooks_not_recorded": {e: list(labels) for e, labels in self.hooks_not_recorded.items()},
            "swaps": {e: {**asdict(swap), "node": swap.node, "pc": swap.pc} for e, swap in self.swaps.items()},
            "inputs": None if self.inputs is None else list(self.inputs),
        }

    def summary(self) -> str:
        """One line: the verdict, how many gradients and engines, which engines failed and how much."""
        gradients = max((len(grads) for grads in self.results.values()), default=0)
        failed = [engine for engine in self.results if not self.engine_passed(engine)]
        line = (f"refgrad.check {self.fn}: {'passed' if self.passed else 'FAILED'}: {gradients} gradients, "
                f"{len(self.results)} engines")
        if failed:
            counts = []
            for engine in failed:
                if engine in self.errors:
                    counts.append(f"{engine} (raised)")
                    continue
                bad = sum(not r.passed for r in self.results[engine].values())
                hooks = "" if self.hooks_as_eager(engine) else ", hooks"
                counts.append(f"{engine} ({bad} of {len(self.results[engine])} gradients{hooks})")
            line += f"; {len(failed)} failed: " + ", ".join(counts)
        return line

    def _shows(self, engine: str, eager: Optional[bool]) -> bool:
        """Whether the table shows engine's rows: eager's only when it failed, or when asked."""
        if engine != self.eager:
            return True
        return not self.engine_passed(engine) if eager is None else eager

    def _rows(self, eager: Optional[bool] = None) -> list[list[str]]:
        rows = []
        for engine, grads in self.results.items():
            if not self._shows(engine, eager):
                continue
            if engine in self.errors:
                rows.append([engine, "-", "-", "-", "-", f"ERROR: {self.errors[engine]}"])
            for name, r in grads.items():
                verdict = ("pass" + (f" ({r.note})" if r.note else "") if r.passed else
                           "FAIL" + (f" ({r.note})" if r.note else ""))
                rows.append([engine, name, _figure(r.max_abs), _figure(r.max_rel), _figure(r.tolerance), verdict])
        return rows

    _HEADER = ["engine", "gradient", "max abs", "max rel", "bound", ""]

    def _footer(self, eager: Optional[bool] = None) -> list[str]:
        lines = []
        if self.eager in self.results and not self._shows(self.eager, eager):
            lines.append(f"{self.eager}: all {len(self.results[self.eager])} gradients pass "
                         "(its rows: print(report.format(eager=True)))")
        for engine, divergence in self.first_divergence.items():
            if divergence is not None:
                lines.append(f"{engine}: first divergence: {divergence}")
                for name, r in divergence.observed.items():
                    verdict = "pass" if r.passed else "FAIL" + (f" ({r.note})" if r.note else "")
                    lines.append(f"    observed run: {name}  max abs {_figure(r.max_abs)}  max rel "
                                 f"{_figure(r.max_rel)}  bound {_figure(r.tolerance)}  {verdict}")
        lines += [f"{engine}: {swap}" for engine, swap in self.swaps.items()]
        for engine, calls in self.hooks.items():
            if not self.hooks_as_eager(engine):
                lines.append(f"{engine}: FAIL: hooks fired otherwise than eager's: {calls} "
                             f"(eager: {self.hooks_expected(engine)})")
            elif engine != self.eager:
                lines.append(f"{engine}: hooks fired as eager's ({len(calls)} calls)")
            if self.hooks_not_recorded.get(engine):
                lines.append(f"{engine}: hooks not recorded: {', '.join(self.hooks_not_recorded[engine])} (on "
                             "non-leaf tensors of a forward run under a transform, such as torch.compile, which "
                             "traces them into its backward)")
        lines += [f"{engine}: reproducer {path}" for engine, path in self.reproducers.items()]
        lines += [f"{engine}: skipped: {why}" for engine, why in self.skipped.items()]
        lines += [f"not covered by the oracle: {node}" for node in self.uncovered]
        lines += self.notes
        return lines

    def format(self, eager: Optional[bool] = None) -> str:
        """The report as text; eager: show eager's rows (None: only when eager failed)."""
        table = [self._HEADER] + self._rows(eager)
        widths = [max(len(row[c]) for row in table) for c in range(len(self._HEADER))]
        lines = [self.summary(), f"  R = {self.reference}", f"  {self.rule}"]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
        return "\n".join(lines + self._footer(eager))

    def __str__(self) -> str:
        return self.format()

    def _repr_html_(self) -> str:
        escape = html.escape
        footer = "".join(f"<li><pre>{escape(line)}</pre></li>" for line in self._footer())
        return display.block_html(
            f"<p><b>{escape(self.summary())}</b><br>R = {escape(self.reference)}</p>"
            f"<pre>{escape(self.rule)}</pre>" + display.text_table_html(self._HEADER, self._rows())
            + (f"<ul>{footer}</ul>" if footer else ""))
