"""Checking one case: its program's source executed, refgrad.check run on it with the engines, the report
triaged into findings (refgrad.fuzz.triage).

    from refgrad.fuzz import generate, run_case
    result = run_case(generate(17), ["eager", "compiled_autograd:aot_eager"])
    result.findings     # [] for a case where every engine passed

Engines are named as refgrad.engines.engine() names them ("eager", "compiled_autograd:inductor",
"torch_compile:aot_eager", ...), or ``py:MODULE:ATTR`` for one of your own: ATTR of the importable
MODULE is an engine object (the Engine protocol of refgrad.engines), a class or function that makes one
with no arguments, or a torch.compile backend function (run under compiled autograd). Objects are taken
as they are.

With ``repeat`` (the default), every engine but eager runs twice, as two engines of one check (the
second named "<engine>#2"): their gradients, bit for bit, show a nondeterministic engine.
"""
from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence, Union

import refgrad
import refgrad.check
from refgrad import engines as engines_module
from refgrad.fuzz.program import Program, load
from refgrad.fuzz.triage import Finding, classify, error_type


def root_cause(error: BaseException) -> str:
    """The innermost exception of the chain that ``error`` ends (its __cause__, else its __context__), as
    "Type: first line"; "" when error is its own root. torch wraps errors (TorchRuntimeError "when making
    fake tensor call", BackendCompilerFailed, ...): the root says what went wrong."""
    root, seen = error, {id(error)}
    while (root.__cause__ or root.__context__) is not None and id(root.__cause__ or root.__context__) not in seen:
        root = root.__cause__ or root.__context__
        seen.add(id(root))
    if root is error:
        return ""
    lines = str(root).strip().splitlines()
    return f"{type(root).__name__}: {lines[0] if lines else ''}"


def resolve_engine(spec: Union[str, Any]) -> Any:
    """An engine object from its spec (see the module docstring)."""
    if not isinstance(spec, str) or not spec.startswith("py:"):
        return engines_module.engine(spec)
    try:
        _, module, attr = spec.split(":", 2)
    except ValueError:
        raise engines_module.EngineError(f"refgrad.fuzz: engine {spec!r} is not py:MODULE:ATTR") from None
    value = getattr(importlib.import_module(module), attr)
    if hasattr(value, "gradients") and hasattr(value, "name") and not isinstance(value, type):
        return value
    if isinstance(value, type) or getattr(value, "__refgrad_engine_factory__", False):
        return value()
    # anything else callable is a torch.compile backend, run under compiled autograd
    return engines_module.CompiledAutograd(backend=value, name=f"compiled_autograd:{module}.{attr}")


def engine_name(spec: Union[str, Any]) -> str:
    """How reports name the engine of ``spec`` (without making it where the name says it)."""
    if isinstance(spec, str) and not spec.startswith("py:"):
        return engines_module.engine(spec).name
    return resolve_engine(spec).name


# Called with an engine's name each time one of the case's engines starts a run (the runner's workers tell
# the campaign, so that a crash or a hang is blamed on the engine that was running).
engine_started: list = []


def _started(name: str) -> None:
    for callback in engine_started:
        callback(name)


class _Recorded:
    """An engine that keeps a copy of the gradients of its first run (check's plain run), and answers
    to ``name``; it runs torch's autograd graph as the engine does (observe= is passed on)."""

    def __init__(self, inner: Any, name: str):
        self.inner, self.name, self.first = inner, name, None
        self.error: Optional[BaseException] = None  # what its first failed run raised (check keeps only its text)

    def __getattr__(self, attribute: str) -> Any:
        """What check reads of an engine beyond its name and gradients (device, backend, compiles_forward: the
        rule's allowance for a compiled forward) is the inner engine's."""
        if attribute.startswith("_") or attribute == "inner":  # not set yet (copying), or private
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def gradients(self, forward, grad_outputs, *, observe=None):
        _started(self.name)
        try:
            grads = self.inner.gradients(forward, grad_outputs, **({} if observe is None else {"observe": observe}))
        except Exception as error:
            self.error = self.error or error
            raise
        self._keep(grads)
        return grads

    def _keep(self, grads: dict) -> None:
        if self.first is None:
            self.first = {name: None if grad is None else grad.detach().cpu().clone() for name, grad in grads.items()}


class _RecordedBlackBox(_Recorded):
    """_Recorded for an engine that is a black box to check (no observe=)."""

    def gradients(self, forward, grad_outputs):
        _started(self.name)
        try:
            grads = self.inner.gradients(forward, grad_outputs)
        except Exception as error:
            self.error = self.error or error
            raise
        self._keep(grads)
        return grads


def _recorded(inner: Any, name: str) -> _Recorded:
    kind = _Recorded if engines_module.accepts_observe(inner) else _RecordedBlackBox
    return kind(inner, name)


@dataclass
class CaseResult:
    """What one case found: its findings, the nodes refgrad could not capture (R was then eager's
    backward), check's report as text, the reproducer bundles check wrote (engine -> path), the program's
    source (what ran), how long it took."""

    seed: int
    version: int
    ops: tuple[str, ...]
    findings: list[Finding] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)
    report: str = ""
    reproducers: dict[str, str] = field(default_factory=dict)
    source: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "version": self.version, "ops": list(self.ops),
                "findings": [finding.to_dict() for finding in self.findings], "uncovered": list(self.uncovered),
                "report": self.report, "reproducers": dict(self.reproducers), "source": self.source,
                "seconds": self.seconds}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "CaseResult":
        return CaseResult(data["seed"], data["version"], tuple(data["ops"]),
                          [Finding.from_dict(f) for f in data["findings"]], data["uncovered"], data["report"],
                          data["reproducers"], data["source"], data["seconds"])


def run_case(program: Program, engines: Sequence[Union[str, Any]] = ("eager", "compiled_autograd"),
             reproducer_dir: Optional[str] = None, repeat: bool = True) -> CaseResult:
    """Checks ``program`` with ``engines`` (eager is always the rule's baseline) and triages the report.
    Reproducer bundles of failed engines go into ``reproducer_dir`` (None: none written)."""
    start = time.perf_counter()
    objects = [resolve_engine(spec) for spec in engines]
    shown = next((spec for spec, e in zip(engines, objects) if isinstance(spec, str) and
                  not isinstance(e, engines_module.Eager) and not spec.startswith("py:")), "compiled_autograd:aot_eager")
    loaded = load(program, engine=shown)
    result = CaseResult(program.seed, program.version, program.op_kinds, source=loaded.source)
    chosen, repeats, recorded = [], {}, []
    for spec, engine in zip(engines, objects):
        if isinstance(engine, engines_module.Eager):
            chosen.append(engine)
            continue
        chosen.append(_recorded(engine, engine.name))
        recorded.append(chosen[-1])
        if repeat:
            again = _recorded(resolve_engine(spec), f"{engine.name}#2")
            repeats[again.name] = engine.name
            chosen.append(again)
            recorded.append(again)
    try:
        # a program whose GRAD_INPUTS names some leaves asks every engine for torch.autograd.grad over them
        report = refgrad.check(loaded.program, *loaded.make_inputs(), engines=chosen, reproducer_dir=reproducer_dir,
                               inputs=loaded.check_inputs)
    except Exception as error:  # check itself raised: capture or refgrad's run of the program
        trace = traceback.format_exc(limit=-8)
        result.findings.append(Finding("oracle_raised", "refgrad", type(error).__name__, program.op_kinds,
                                       f"{error_type(f'{type(error).__name__}: {error}')}: "
                                       f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}"))
        result.report = f"refgrad.check raised:\n{trace}"
        result.seconds = time.perf_counter() - start
        return result
    first = {engine.name: engine.first for engine in recorded}
    result.findings = classify(report, program.op_kinds, repeats, first)
    causes = {engine.name: root_cause(engine.error) for engine in recorded if engine.error is not None}
    result.findings = [replace(finding, detail=f"{finding.detail} <- {causes[finding.engine]}")
                       if finding.kind == "engine_raised" and causes.get(finding.engine) else finding
                       for finding in result.findings]
    result.uncovered = list(report.uncovered)
    result.report = report.format(eager=True)
    result.reproducers = {engine: path for engine, path in report.reproducers.items() if engine not in repeats}
    result.seconds = time.perf_counter() - start
    return result
