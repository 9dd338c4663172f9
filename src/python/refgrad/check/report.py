"""What check() returns: per engine and gradient a GradientResult, the first Divergence, the Report."""
from __future__ import annotations

import html
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional




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
