"""The rule that says whether an engine's gradient agrees with the oracle R, and the comparisons it uses."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from refgrad.check.report import GradientResult

# torch.testing.assert_close's defaults (torch.testing._comparison._DTYPE_PRECISIONS): (rtol, atol).
_DTYPE_PRECISIONS = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}



@dataclass
class _Rule:
    """DESIGN.md's rule (rtol/atol None: per dtype) or the plain one (both given)."""

    rtol: Optional[float] = None
    atol: Optional[float] = None

    @property
    def plain(self) -> bool:
        return self.rtol is not None

    def tolerances(self, dtype: torch.dtype) -> tuple[float, float]:
        return (self.rtol, self.atol) if self.plain else _DTYPE_PRECISIONS.get(dtype, (0.0, 0.0))

    def describe(self) -> str:
        if self.plain:
            return f"plain rule: max|E - R| <= atol + rtol max|R| (rtol {self.rtol:g}, atol {self.atol:g})"
        return ("eager passes when max|eager - R| <= atol + rtol max|R|,\n"
                "  engine E when max|E - R| <= 2 max|eager - R| + atol + rtol max|R|;\n"
                "  atol, rtol: torch.testing.assert_close's for E's dtype")

    def bound(self, dtype: torch.dtype, max_reference: float, eager_error: float, is_eager: bool) -> float:
        rtol, atol = self.tolerances(dtype)
        slack = 0.0 if is_eager or self.plain else 2 * eager_error
        return slack + atol + rtol * max_reference


def _as_float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to(device="cpu", dtype=torch.float64)


def _difference(actual: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """|E - R| and R in float64; equal values (infinities too) and NaN on both sides count as 0."""
    e, r = _as_float64(actual), _as_float64(reference)
    difference = (e - r).abs()
    difference[(e == r) | (torch.isnan(e) & torch.isnan(r))] = 0.0
    return difference, r


def _max_abs(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """max|E - R|; NaN when E has a NaN where R has none (or the other way round)."""
    difference, _ = _difference(actual, reference)
    if difference.numel() == 0:
        return 0.0
    return math.nan if bool(torch.isnan(difference).any()) else float(difference.max())


def _max_rel(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """max|E - R| / max|R|: the error in units of the gradient's scale, the scale the rule uses (an
    element-wise ratio is infinite wherever R is an exact zero, as attention's key bias gradient is);
    0/0 counts as 0."""
    difference, r = _difference(actual, reference)
    if difference.numel() == 0 or float(difference.max()) == 0:
        return 0.0
    return float(difference.max() / r.abs().max())


def _max_magnitude(reference: torch.Tensor) -> float:
    r = _as_float64(reference).abs()
    r = r[~torch.isnan(r)]
    return float(r.max()) if r.numel() else 0.0


def _mismatch(actual: Optional[torch.Tensor], reference: torch.Tensor, dtype: torch.dtype) -> str:
    """Why the two cannot be compared number by number ("" when they can)."""
    if actual is None:
        return "no gradient"
    if list(actual.shape) != list(reference.shape):
        return f"shape {list(actual.shape)}, R's {list(reference.shape)}"
    if actual.dtype != dtype:
        return f"dtype {actual.dtype}, expected {dtype}"
    return ""


def _compare(actual: Optional[torch.Tensor], reference: torch.Tensor, dtype: torch.dtype, rule: _Rule,
             eager_error: float, is_eager: bool) -> GradientResult:
    note = _mismatch(actual, reference, dtype)
    if note:
        return GradientResult(math.nan, math.nan, math.nan, False, note)
    max_abs = _max_abs(actual, reference)
    bound = rule.bound(dtype, _max_magnitude(reference), eager_error, is_eager)
    passed = max_abs <= bound  # NaN never passes
    return GradientResult(max_abs, _max_rel(actual, reference), bound, passed, "NaN" if math.isnan(max_abs) else "")
