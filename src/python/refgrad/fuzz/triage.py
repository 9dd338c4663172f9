"""Triage: what a checked case found, as findings, each with a signature that deduplicates it.

A finding's ``kind`` is one of:

    oracle_raised      refgrad.check itself raised (capture or refgrad's run of the program): an oracle bug
    oracle_disagrees   eager's gradients fail the rule against refgrad's run: an oracle bug (or, rarely,
                       eager's), named by the first divergent node check found
    engine_raised      an engine raised (a compile error, a compiled backward that did not run, ...)
    wrong_gradient     an engine's gradient fails the rule, named by its first divergent node
    hooks_differ       an engine fired fn's hooks otherwise than eager (not as often, or in another order)
    nondeterministic   an engine gave different gradients, bit for bit, in two runs of the same case
    worker_crashed     the process running the case died (a segfault in torch, os._exit, ...)
    timeout            the case ran past the per-case timeout (the process was killed)
    fuzzer_error       refgrad.fuzz itself raised (the generator, say): a bug of the fuzzer
    not_compiled       torch.compile ran no compiled code: dynamo skipped the whole frame, as it does by
                       design for some programs (retain_grad under AOTDispatcher, "Tensor.retain_grad() does
                       not work with AOTDispatcher"); not a bug, and the case says nothing of that engine

Rounding within DESIGN.md's rule is no finding: check's verdict decides, per gradient.

The signature is (engine, kind, where, ops): ``where`` is the node (PyTorch's name, "unlocalized" when
check could not name one) or the error's type, and ``ops`` the sorted set of the program's op kinds. Two
cases with one signature are one finding; the findings directory keeps one folder per signature
(Finding.slug). The minimizer keeps (engine, kind, where), the bug, while the ops shrink (Finding.bug).
Where ``where`` names no node (an error's type, which many bugs share, or "unlocalized"), the gist of
the detail tells bugs apart too (Finding.distinct_bug): a campaign's --minimize minimizes one folder
per distinct bug.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

KINDS = ("oracle_raised", "oracle_disagrees", "engine_raised", "wrong_gradient", "hooks_differ",
         "nondeterministic", "worker_crashed", "timeout", "fuzzer_error", "not_compiled")

# engines.TorchCompile's error when the forward ran no compiled code
_FELL_BACK = "the forward ran no compiled code"

# the kinds whose ``where`` is an error's type, which says little ("InductorError" holds many bugs)
_WHERE_IS_AN_ERROR_TYPE = ("oracle_raised", "engine_raised", "fuzzer_error")


@dataclass(frozen=True)
class Finding:
    """One thing a case found: see the module docstring for ``kind`` and the signature; ``detail`` is one
    line that says what happened (not part of the signature)."""

    kind: str
    engine: str
    where: str
    ops: tuple[str, ...]
    detail: str = ""

    @property
    def signature(self) -> tuple[str, str, str, tuple[str, ...]]:
        return (self.engine, self.kind, self.where, self.ops)

    @property
    def bug(self) -> tuple[str, str, str]:
        """The signature without the op set: what the minimizer keeps while it drops ops."""
        return (self.engine, self.kind, self.where)

    @property
    def distinct_bug(self) -> tuple[str, ...]:
        """The bug, told apart from other bugs of the same ``where`` when ``where`` names no node (an
        error's type, or "unlocalized"): ``bug`` and the gist of the detail (gist()); elsewhere the gist is
        "", since the detail there tells cases apart, not bugs (which leaves, which hooks). An unlocalized
        wrong gradient's detail says only that it was not localized, the same for every bug of an engine (a
        one-hour campaign's ten torch_compile folders held avg_pool2d's, index_add's and others), so its op
        set is part of it too: each such folder is minimized, and the minimized programs tell the bugs apart."""
        if self.where == "unlocalized":
            return (*self.bug, gist(self.detail), ",".join(self.ops))
        if self.kind in _WHERE_IS_AN_ERROR_TYPE:
            return (*self.bug, gist(self.detail))
        return (*self.bug, "")

    @property
    def slug(self) -> str:
        """The finding's folder name: readable parts, then a hash of the whole signature."""
        digest = hashlib.sha1(repr(self.signature).encode()).hexdigest()[:8]
        parts = [self.kind, self.engine, self.where]
        return "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", part).strip("_")[:40] for part in parts) + f"-{digest}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ops": list(self.ops), "signature": [self.engine, self.kind, self.where, list(self.ops)]}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "Finding":
        return Finding(data["kind"], data["engine"], data["where"], tuple(data["ops"]), data.get("detail", ""))


def error_type(text: str) -> str:
    """"RuntimeError" of check's error text "RuntimeError: message"; the text itself when it has none."""
    head = text.split(":", 1)[0].strip()
    return head if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", head) else (text.strip()[:60] or "error")


def gist(detail: str) -> str:
    """A finding's detail less what differs between the cases of one bug, its first 120 characters: of a
    failing gradient, the leaves that fail (why its divergence could not be localized is kept); of any,
    numbers (shapes, counts, line numbers), hashes and addresses, files' paths, runs of spaces.
    "gradients failing the rule: arg1, arg3; first divergence: not localized: the engine ran 1 compiled
    backward(s) ..." becomes "not localized: the engine ran N compiled backward(s) ..."."""
    if detail.startswith("gradients failing the rule:"):
        detail = detail.partition("; first divergence: ")[2]
    detail = re.sub(r"(?:/[\w.-]+){2,}", "PATH", detail)
    detail = re.sub(r"\b(?:0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*\b", "N", detail)  # numbers, hashes, addresses
    detail = re.sub(r"[0-9]+", "N", detail)  # the numbers in names: arg1, buf0
    return " ".join(detail.split())[:120]


def _node(divergence: Any) -> str:
    return divergence.node if divergence is not None and divergence.localized else "unlocalized"


def classify(report: Any, ops: tuple[str, ...], repeats: Optional[dict[str, str]] = None,
             first_grads: Optional[dict[str, dict]] = None) -> list[Finding]:
    """The findings of one refgrad.check Report of a case with op kinds ``ops``. ``repeats`` maps the name
    of an engine's second run (check ran it as another engine) to the engine's name: its verdicts are not
    findings of their own, but its gradients, in ``first_grads`` (engine name -> leaf -> tensor) beside
    the engine's, show nondeterminism."""
    repeats = repeats or {}
    findings = []
    for engine in report.results:
        if engine in repeats:
            continue
        divergence = report.first_divergence.get(engine)
        is_eager = engine == report.eager
        if engine in report.errors:
            if _FELL_BACK in report.errors[engine]:
                findings.append(Finding("not_compiled", engine, "fell_back", ops, report.errors[engine]))
                continue
            kind = "engine_raised"  # eager raising: a program the generator should not have made
            findings.append(Finding(kind, engine, error_type(report.errors[engine]), ops, report.errors[engine]))
            continue
        failed = [name for name, result in report.results[engine].items() if not result.passed]
        if failed:
            kind = "oracle_disagrees" if is_eager else "wrong_gradient"
            detail = f"gradients failing the rule: {', '.join(failed)}"
            if divergence is not None:
                detail += f"; first divergence: {str(divergence).splitlines()[0]}"
            findings.append(Finding(kind, engine, _node(divergence), ops, detail))
        elif not report.hooks_as_eager(engine):
            findings.append(Finding("hooks_differ", engine, "hooks", ops,
                                    f"{report.hooks.get(engine)} (eager: {report.hooks_expected(engine)})"))
    for again, engine in repeats.items():
        first, second = (first_grads or {}).get(engine), (first_grads or {}).get(again)
        if first is None or second is None:
            continue
        differ = [name for name in first if not _same(first[name], second.get(name))]
        if differ:
            findings.append(Finding("nondeterministic", engine, "gradients", ops,
                                    f"two runs differ bit for bit in {', '.join(differ)}"))
    return findings


def _same(a: Any, b: Any) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    return (a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.isnan(), b.isnan())
            and torch.equal(a.nan_to_num(), b.nan_to_num()))
