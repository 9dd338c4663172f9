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
    what NaN and Inf it has. ``noise`` is max|R' - R|, the rule's measure of the gradient's rounding
    (NaN where there is none: a float64 gradient)."""

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
