"""How far the forward's own rounding may move a gradient: the allowance of an engine that compiles the forward.

An engine that compiles the forward too (torch_compile) computes its own saved activations, and they round
otherwise than eager's, whose forward R's backward starts from. R's noise (rule.py) measures the backward's
rounding only. Two measurements of the forward's, both in float64 (G: eager's gradient of the whole program
run in float64, `_Subject.forward(dtype=float64)`):

- the spread, max|eager - G|: how far eager's own forward and backward, in the program's dtypes, land from
  the exact gradient. A spread over sqrt(eps) max|R|, eps that of the lowest-precision dtype the program
  computes in (float16 under autocast(float16)), is not rounding (a random draw, a branch that depends on the
  dtype) and is left out;
- the sensitivity: G again with every result of every forward op moved by up to one rounding of that dtype
  (ForwardRounding), and by 1/16 of one with the same draw; the part of the move that is linear in it
  (refgrad.linear_sensitivity, as R~'s), the largest over the seeds. It holds where the spread cannot: a
  gradient that is all forward rounding (``layer_norm(x).sum()`` is 0 exactly and ~1e-7 in float32; a gradient
  scaled by it is a residue, and max|R| no scale for it; refgrad.fuzz case 200534 of generator version 3).

A tie broken or a boundary crossed by the moves is a jump, not linear, and left out: they do not excuse a
wrong gradient.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import refgrad
from refgrad.check.rule import SENSITIVITY_RATIO, SENSITIVITY_SEEDS, _max_abs, _max_magnitude
from refgrad.engines import differentiate


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the distance from 1 to the next number of ``dtype``: the most one rounding moves a number, relatively."""
    return torch.finfo(dtype).eps / 2


class ForwardRounding(TorchDispatchMode):
    """Moves the floating result of every ATen op by up to ``scale`` times one rounding of ``unit_roundoff``
    (relatively, a uniform draw per number from ``seed`` and the op's place in the forward), as a forward that
    rounds otherwise would. A view's result is its base's numbers, moved already; an in-place op's result is
    moved in place. Autograd, above this mode, saves the moved values: the backward starts from them. Complex
    results are left as they are."""

    def __init__(self, seed: int, unit_roundoff: float, scale: float = 1.0):
        super().__init__()
        self.seed, self.size = seed, unit_roundoff * scale
        self.ops = 0

    def bind(self, leaves) -> None:
        """_Subject.forward's mode protocol; the leaves themselves are not moved (they are the program's input)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        returns = func._schema.returns
        for i, value in enumerate(results):
            if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() == 0:
                continue
            alias = returns[i].alias_info if i < len(returns) else None
            if alias is not None and not alias.is_write:  # a view
                continue
            results[i] = self._moved(value, in_place=alias is not None)
        if isinstance(result, torch.Tensor):
            return results[0]
        return tuple(results) if isinstance(result, tuple) else results

    def _moved(self, value: torch.Tensor, in_place: bool) -> torch.Tensor:
        self.ops += 1
        draw = torch.Generator().manual_seed(self.seed * 1_000_003 + self.ops)
        uniform = torch.rand(value.shape, generator=draw, dtype=torch.float64, device="cpu")
        factor = (1 + self.size * (2 * uniform - 1)).to(value.device, value.dtype)
        return value.mul_(factor) if in_place else value * factor


def forward_allowance(subject, grad_outputs: list, reference: dict[str, torch.Tensor],
                      eager: dict[str, Optional[torch.Tensor]], computes_in: torch.dtype) -> dict[str, float]:
    """Per gradient, the most the forward's rounding moves it: max(spread, sensitivity), module docstring.
    ``reference`` is R per gradient, ``eager`` eager's gradients, ``computes_in`` the lowest-precision dtype
    the program computes in. A gradient without either measurement is left out (no allowance); so is every
    gradient of a program that does not run in float64."""
    float64_outputs = [g.to(torch.float64) if g.is_floating_point() else g for g in grad_outputs]
    try:
        exact = differentiate(subject.forward(dtype=torch.float64), float64_outputs)
    except Exception:  # the program does not run in float64: no allowance
        return {}
    allowance: dict[str, float] = {}
    for name, r in reference.items():
        got, whole = eager.get(name), exact.get(name)
        if got is None or whole is None or got.shape != whole.shape or not got.is_floating_point():
            continue
        spread = _max_abs(got, whole)
        if math.isfinite(spread) and spread <= math.sqrt(unit_roundoff(computes_in)) * _max_magnitude(r):
            allowance[name] = spread
    for name, sensitivity in _forward_sensitivity(subject, float64_outputs, exact, computes_in).items():
        if name in reference:
            allowance[name] = max(allowance.get(name, 0.0), sensitivity)
    return allowance


def _forward_sensitivity(subject, grad_outputs: list, exact: dict, computes_in: torch.dtype) -> dict[str, float]:
    """Per gradient, the largest linear move of G over SENSITIVITY_SEEDS when every forward op's result moves by
    up to one rounding of ``computes_in`` (and 1/SENSITIVITY_RATIO of one)."""
    largest: dict[str, float] = {}
    for seed in SENSITIVITY_SEEDS:
        try:
            moved, moved_less = [
                differentiate(subject.forward(dtype=torch.float64,
                                              mode=ForwardRounding(seed, unit_roundoff(computes_in), scale)),
                              grad_outputs)
                for scale in (1.0, 1.0 / SENSITIVITY_RATIO)]
        except Exception:  # a move the program cannot take (a NaN check of its own, say): this seed says nothing
            continue
        for name, g in exact.items():
            values = (g, moved.get(name), moved_less.get(name))
            if any(v is None or not v.is_floating_point() or v.shape != g.shape for v in values):
                continue
            step = refgrad.linear_sensitivity(*(v.detach().cpu() for v in values), SENSITIVITY_RATIO)
            largest[name] = max(largest.get(name, 0.0), step)
    return largest
