"""Reproducers: one bundle per failed engine, which `refgrad check BUNDLE` re-runs without Python."""
from __future__ import annotations

import datetime
import os
import re
from typing import Any, Optional

import torch

import refgrad
from refgrad import engines as engines_module
from refgrad.check.oracle import _Oracle
from refgrad.check.report import Divergence
from refgrad.check.rule import _Rule
from refgrad.check.subject import _Subject


def _result_tensors(grads: dict[str, Optional[torch.Tensor]], marker: str = "@") -> dict[str, torch.Tensor]:
    """The gradients as a result set's tensors: "@leaf" for a leaf's .grad, "^name" for a gradient
    torch.autograd.grad captured (the program's `output ^name`), as `refgrad check` names its results."""
    return {f"{marker}{name}": grad.detach().cpu().contiguous() for name, grad in grads.items() if grad is not None}


def _config(engine: Any) -> dict[str, str]:
    config = {"device": str(getattr(engine, "device", "cpu"))}
    backend = getattr(engine, "backend", None)
    if backend is not None:
        config["backend"] = engines_module.backend_name(backend)
    return config


def _file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def _divergence_provenance(divergence: Divergence, engine: str) -> dict[str, str]:
    """The first divergence as provenance strings: `refgrad check BUNDLE` prints them."""
    if not divergence.localized:
        return {"divergence": f"not localized: {divergence.reason}"}
    values = {}
    if divergence.values:
        values["divergence_values"] = (
            f"{', '.join(divergence.values)} in {engine}'s result set: its values of those registers, as the run "
            f"that localized the divergence recorded them: {divergence.graph}")
    return {
        "divergence": str(divergence).splitlines()[0],
        "divergence_node": divergence.node,
        "divergence_pc": str(divergence.pc),
        "divergence_instruction": divergence.instruction,
        "divergence_gradient": divergence.gradient,
        "divergence_error": repr(divergence.error),
        "divergence_bound": repr(divergence.tolerance),
        "divergence_relative": repr(divergence.relative),
        "divergence_register": divergence.register,
        **values,
    }


def _write_reproducer(directory: str, oracle: _Oracle, subject: _Subject, rule: _Rule, precision: str,
                      eager: Any, eager_grads: dict, engine: Any, engine_grads: dict,
                      divergence: Optional[Divergence] = None) -> str:
    """One bundle: the program, eager's and the engine's gradients, the rule, provenance (with the first
    divergence check found, when it found one). The engine's result set holds its leaf grads ("@w"; "^w"
    under torch.autograd.grad, check's inputs=, whose program outputs them) and,
    when the divergence was localized, its values at the divergence under the program's register names
    ("%12": docs/program.md, "Bundles"), which `refgrad check` and `refgrad step` show beside refgrad's.
    Returns its path."""
    bundle = refgrad.Bundle(oracle.capture.program, oracle.capture.bundle.tensors)
    at_divergence = divergence.values if divergence is not None and divergence.localized else {}
    marker = "^" if oracle.capture.captures else "@"
    if engine is eager:
        results = [refgrad.ResultSet("eager", {**_result_tensors(eager_grads, marker), **at_divergence},
                                     _config(eager))]
    else:
        results = [refgrad.ResultSet("eager", _result_tensors(eager_grads, marker), _config(eager)),
                   refgrad.ResultSet(engine.name, {**_result_tensors(engine_grads, marker), **at_divergence},
                                     _config(engine))]
    bundle.results = results
    bundle.comparison = refgrad.Comparison("plain" if rule.plain else "reference", "refgrad", rule.rtol, rule.atol)
    calls = oracle.python_calls()
    now = datetime.datetime.now(datetime.timezone.utc)
    bundle.provenance = {
        "refgrad_version": refgrad.__version__,
        "torch_version": torch.__version__,
        "order": "eager",
        "engine": engine.name,
        **{f"engine_{k}": v for k, v in _config(engine).items()},
        "fn": subject.qualname,
        "date": now.isoformat(timespec="seconds"),
        "check_precision": precision,
        "rule": rule.describe(),
        "python_calls": "none" if not calls else (
            "needs Python (refgrad check cannot replay them; give --hook where it can): " + ", ".join(calls)),
    }
    if subject.inputs is not None:  # check's inputs=: the program outputs those grads (^name), as autograd.grad
        bundle.provenance = {**bundle.provenance, "inputs": ", ".join(subject.inputs)}
    if divergence is not None:  # (bundle.provenance is a copy each time it is read: assign it whole)
        bundle.provenance = {**bundle.provenance, **_divergence_provenance(divergence, engine.name)}
    os.makedirs(directory, exist_ok=True)
    stem = _file_name(f"{subject.qualname.rsplit('.', 1)[-1]}-{engine.name}-{now:%Y%m%dT%H%M%S}")
    path = os.path.join(directory, f"{stem}.safetensors")
    counter = 1
    while os.path.exists(path):
        path = os.path.join(directory, f"{stem}-{counter}.safetensors")
        counter += 1
    bundle.save(path)
    return path
