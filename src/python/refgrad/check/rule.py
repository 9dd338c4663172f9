"""The rule that says whether an engine's gradient agrees with the oracle R, and the comparisons it uses."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

import refgrad
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
        return ("eager passes when max|eager - R| <= rtol max|R| + 32 noise,\n"
                "  engine E when max|E - R| <= rtol max|R| + 32 max(noise, max|eager - R|) (E compiling the forward\n"
                "  too, torch_compile, failing that: + 16 F, F the forward's rounding of the gradient);\n"
                "  noise: max(max|R' - R|, max|R~ - R|), R' refgrad's run in the other precision (float32 and\n"
                "  float64), R~ its float64 run with values and results moved by one rounding of their dtypes;\n"
                "  rtol: torch.testing.assert_close's for E's dtype (float64 leaves: atol too, no noise)")

    def bound(self, dtype: torch.dtype, max_reference: float, eager_error: float, is_eager: bool,
              noise: Optional[float] = None, forward: float = 0.0) -> float:
        """The most max|E - R| may be for one gradient (or intermediate) whose R has largest magnitude
        ``max_reference``. ``noise`` is max(max|R' - R|, max|R~ - R|) for it: R' refgrad's run of the same
        program in the other precision (the rounding error that this very computation has in E's dtype,
        measured), R~ the float64 run with values and results moved by one rounding of their dtypes (how far the exact
        result moves with its inputs' last bits); None where it cannot be measured: a float64 gradient,
        whose program "as captured" is R itself. ``forward`` is how far the forward's own rounding moves it
        (refgrad.check.forward_rounding), for an engine that compiles the forward too: FORWARD_FACTOR times it
        is added (not under the plain rule)."""
        rtol, atol = self.tolerances(dtype)
        if self.plain:
            return atol + rtol * max_reference
        if noise is None or not math.isfinite(noise):
            slack = 0.0 if is_eager else 2 * eager_error
            return slack + atol + rtol * max_reference + FORWARD_FACTOR * forward
        spread = noise if is_eager else max(noise, eager_error)
        return rtol * max_reference + NOISE_FACTOR * spread + FORWARD_FACTOR * forward + torch.finfo(dtype).tiny


# The sensitivity runs of the noise: R~ moves each number the program starts from by up to one rounding of
# its dtype, R~' by 1/SENSITIVITY_RATIO of one, with the same draw (refgrad.perturbed_to_float64); the part
# of R~ - R that is linear in the move (refgrad.linear_sensitivity) is how far the exact gradient moves with
# its inputs' last bits. One pair of runs per seed, and the largest of their sensitivities: one draw's signs
# can cancel where another's add up (refgrad.fuzz cases 4381, 5627 and 8526 of generator version 3: eager's
# float32 within 32 times the sensitivity of most draws, and over it for seed 0's alone, by up to 1.9x). The
# seeds are fixed so that a check's verdicts are the same run after run.
SENSITIVITY_SEEDS = (0, 1, 2)
SENSITIVITY_RATIO = 16.0
# Where the moves broke a node (amax's saved result moved apart from its saved input: 0 / 0), the runs are
# made again holding that node's saved values still (refgrad.saved_values_broken_by_moving), at most this
# many times: each time holds the nodes broken first, and one further down may break next.
HOLD_ROUNDS = 3


def _sensitivity(exact, moved, moved_less) -> float:
    """max|R~ - R| of one value where it is linear in the move (0 where a run has no such value)."""
    values = (exact, moved, moved_less)
    if any(value is None for value in values) or len({tuple(value.shape) for value in values}) != 1:
        return 0.0
    return refgrad.linear_sensitivity(*(value.detach().cpu() for value in values), SENSITIVITY_RATIO)


# How many times the measured float32 noise a correct engine may be off by: two float32 computations of
# one gradient round differently (another order of the sums, fused kernels), and their errors differ
# from R' 's by up to 15x over the zoo and a 12-layer MLP (eager against R', inductor against the
# larger of eager's and R' 's; bench/noise.py measures it). 32 leaves a margin of two.
NOISE_FACTOR = 32


# How many times the forward's own rounding (refgrad.check.forward_rounding: the spread of eager's gradient
# around the float64 program's, or its sensitivity to a rounding of every forward op) an engine that compiles
# the forward too may be off by, beyond the rule's other terms. torch_compile's gradients of programs whose
# forward rounding shows were up to 1.3 times the spread, 2.2 times the sensitivity, so 2.2 times F, off R
# (refgrad.fuzz cases 200069, 200450, 200502, 200534, 200588 of generator version 3: bench/forward_rounding.py;
# 0.4 times the spread in case 100130 of version 2): 16 leaves a margin of seven.
FORWARD_FACTOR = 16


@dataclass
class _Measured:
    """One value of an engine against R: max|E - R|, the rule's bound, and max|R| (its scale)."""

    error: float
    bound: float
    scale: float

    @property
    def agrees(self) -> bool:
        return self.error <= self.bound  # NaN never agrees

    @property
    def relative(self) -> float:
        """max|E - R| / max|R| (0/0 counts as 0)."""
        if self.error == 0:
            return 0.0
        return math.inf if self.scale == 0 else self.error / self.scale


def _as_float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to(device="cpu", dtype=torch.float64)


def _difference(actual: torch.Tensor, reference: torch.Tensor,
                overflowed: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """|E - R| and R in float64; equal values (infinities too) and NaN on both sides count as 0, and so
    does an infinity in E where R itself rounds to that infinity in E's dtype (a float16 gradient of
    70000 is inf: the dtype's overflow, not an error), and a NaN or Inf of E where refgrad's own run in
    the captured dtypes has one too and R has none (``overflowed``, _overflowed: an intermediate overflowed
    the dtype in both)."""
    e, r = _as_float64(actual), _as_float64(reference)
    difference = (e - r).abs()
    difference[(e == r) | (torch.isnan(e) & torch.isnan(r))] = 0.0
    if actual.is_floating_point() and actual.dtype != torch.float64:
        r_rounded = r.to(actual.dtype).to(torch.float64)
        difference[torch.isinf(e) & (e == r_rounded)] = 0.0
    if overflowed is not None and overflowed.shape == difference.shape:
        difference[overflowed & ~torch.isfinite(e)] = 0.0
    return difference, r


def _overflowed(in_dtype: Optional[torch.Tensor], reference: torch.Tensor) -> Optional[torch.Tensor]:
    """Where refgrad's own run of the program in its captured dtypes (R' at precision float64) has a NaN
    or an Inf and R has a finite number: an intermediate overflowed the dtype (a float16 sum past 65504,
    then inf - inf), as any computation in that dtype may. None where there is no such run or no such
    element."""
    if in_dtype is None or list(in_dtype.shape) != list(reference.shape) or in_dtype.dtype == torch.float64:
        return None
    mask = ~torch.isfinite(in_dtype.detach().cpu()) & torch.isfinite(_as_float64(reference))
    return mask if bool(mask.any()) else None


def _max_abs(actual: torch.Tensor, reference: torch.Tensor, overflowed: Optional[torch.Tensor] = None) -> float:
    """max|E - R|; NaN when E has a NaN where R has none (or the other way round), but where refgrad's own
    dtype run overflowed too (``overflowed``)."""
    difference, _ = _difference(actual, reference, overflowed)
    if difference.numel() == 0:
        return 0.0
    return math.nan if bool(torch.isnan(difference).any()) else float(difference.max())


def _max_rel(actual: torch.Tensor, reference: torch.Tensor, overflowed: Optional[torch.Tensor] = None) -> float:
    """max|E - R| / max|R|: the error in units of the gradient's scale, the scale the rule uses (an
    element-wise ratio is infinite wherever R is an exact zero, as attention's key bias gradient is);
    0/0 counts as 0."""
    difference, r = _difference(actual, reference, overflowed)
    if difference.numel() == 0 or float(difference.max()) == 0:
        return 0.0
    magnitude = _max_magnitude(r)
    return math.inf if magnitude == 0 else float(difference.max()) / magnitude


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


def _nonfinite(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values = tensor.detach().cpu()
    return torch.isnan(values), torch.isinf(values)


def _nonfinite_note(actual: torch.Tensor, reference: torch.Tensor, eager: Optional[torch.Tensor],
                    is_eager: bool, overflowed: Optional[torch.Tensor] = None) -> tuple[bool, str]:
    """NaN and Inf called out: (fails, note). A NaN where R has none fails (max|E - R| is NaN then), but
    where refgrad's own dtype run has a NaN or an Inf too (``overflowed``); so does a NaN where eager has
    none, even where R has one; NaN or Inf that R has too pass, with a note."""
    nan, inf = _nonfinite(actual)
    if not bool(nan.any()) and not bool(inf.any()):
        return False, ""
    if not is_eager and eager is not None and list(eager.shape) == list(actual.shape):
        eager_nan, _ = _nonfinite(eager)
        extra = int((nan & ~eager_nan).sum())
        if extra:
            return True, f"NaN in {extra} elements where eager has none"
    reference_nan, _ = _nonfinite(reference)
    shared = torch.zeros_like(nan) if overflowed is None or overflowed.shape != nan.shape else overflowed
    if bool((nan & ~reference_nan & ~shared).any()):
        return True, f"NaN in {int((nan & ~reference_nan & ~shared).sum())} elements where R has none"
    parts = [f"{kind} in {int((mask & ~shared).sum())} elements, as R" for kind, mask in (("NaN", nan), ("Inf", inf))
             if bool((mask & ~shared).any())]
    if bool(((nan | inf) & shared).any()):
        parts.append(f"NaN or Inf in {int(((nan | inf) & shared).sum())} elements where R has none, as refgrad's own "
                     "run in the captured dtypes: the dtype overflowed")
    return False, "; ".join(parts)


def _compare(actual: Optional[torch.Tensor], reference: torch.Tensor, dtype: torch.dtype, rule: _Rule,
             eager_error: float, is_eager: bool, noise: Optional[float] = None,
             eager: Optional[torch.Tensor] = None, in_dtype: Optional[torch.Tensor] = None,
             forward: float = 0.0) -> GradientResult:
    """One gradient against R under the rule; ``in_dtype`` is refgrad's own run of the gradient in the
    captured dtypes, whose overflows (_overflowed) an engine may share; ``forward``, _Rule.bound's."""
    note = _mismatch(actual, reference, dtype)
    if note:
        return GradientResult(math.nan, math.nan, math.nan, False, note)
    overflowed = _overflowed(in_dtype, reference)
    max_abs = _max_abs(actual, reference, overflowed)
    bound = rule.bound(dtype, _max_magnitude(reference), eager_error, is_eager, noise, forward)
    nonfinite_fails, note = _nonfinite_note(actual, reference, eager, is_eager, overflowed)
    passed = max_abs <= bound and not nonfinite_fails  # NaN never passes
    return GradientResult(max_abs, _max_rel(actual, reference, overflowed), bound, passed, note,
                          math.nan if noise is None else noise)
