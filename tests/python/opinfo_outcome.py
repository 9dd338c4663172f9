"""The outcome of one OpInfo sample in one dtype: does refgrad compute torch's gradient? (docs/conformance.md)

classify() runs one sample through torch and refgrad and says which of these it is, checked in this order:

  skip               torch itself gives no gradient to compare with (the forward or torch.autograd.grad
                     raises, or nothing requires grad): not refgrad's to answer; counted apart, never
                     in the expectations file
  unsupported dtype  refgrad has no such dtype (a probe capture in it fails so, or the capture's
                     message says so for a dtype inside the program: complex from a real op), or a
                     node of the program has not been checked for complex numbers ("complex128 in
                     ReluBackward0": refgrad refuses it rather than risk a missing conjugate)
  missing nodes      capture refuses nodes refgrad has not (refgrad.torch.UnsupportedError): their names,
                     sorted
  refgrad error      capture refuses a node for a reason (a sparse layout: "refgrad.torch.capture refuses
                     ToDenseBackward0: <why>"), or capture or the run raised anything else (the message's
                     first line)
  wrong gradient     refgrad ran and a gradient is off (the worst one, with its error and bound): an
                     oracle bug, listed so that it is seen
  torch inaccurate   (dtypes below float64) only torch's gradient is off, and torch's own float64
                     gradient says refgrad's formula is right: torch's kernel rounds worse than the
                     rule allows (layer_norm over one element: weight gradient exactly 0, torch 2.6e-5)
  torch wrong        refgrad and torch disagree beyond rounding, and central finite differences of the
                     sample in float64 side with refgrad: torch's formula is wrong (as_strided_scatter's
                     self gradient, which torch's own gradcheck fails)
  pass               every gradient agrees

Comparison (DESIGN.md "Numbers and precision", refgrad.check.rule):
- float64 and complex128, tightly: refgrad's run against torch.autograd.grad, torch being the authority,
  max|refgrad - torch| <= atol + rtol max|torch| with assert_close's float64 rtol = atol = 1e-7 (the
  float64 rule of docs/check.md; complex tensors compared as their real and imaginary parts).
- float32, float16, bfloat16, complex64: R is refgrad's float64 run of the captured program (its
  saved values promoted: the exact backward of this very forward). Two checks, each DESIGN.md's rule
  with the other side's error as the measured rounding noise of this computation in the dtype:
    torch's gradient:   max|torch - R|   <= rtol max|R| + 32 max(max|refgrad_dtype - R|, S)
      (fails when refgrad's formula is wrong: torch is then far from R, refgrad's own run is not)
    refgrad's dtype run: max|refgrad_dtype - R| <= rtol max|R| + 32 max(max|torch - R|, S)
      (fails when refgrad's low-precision path is wrong while its float64 formula is right).
  S is refgrad.check's sensitivity: how far R moves, linearly, when every number the program starts from
  moves by up to one rounding of its dtype (refgrad.perturbed_to_float64, refgrad.linear_sensitivity;
  docs/check.md): where a gradient cancels, another correct computation's rounding is that large even
  where refgrad's own is 0 (layer_norm over one element).
  Where only torch's gradient fails, torch's gradient with the sample promoted to float64 decides
  between a wrong formula and torch's rounding: R ten times closer to it than torch's own gradient is
  means torch inaccurate; otherwise wrong gradient. Where torch's gradient has a NaN that R has not (its
  kernel overflowed the dtype: matrix_exp in float16), R must agree with torch's float64 gradient within
  the dtype's rtol for torch inaccurate.
  Where refgrad's dtype run and torch's hold the same infinities or NaNs at the same elements, where R is
  finite (an intermediate overflowed the dtype in both: tan's 1 + tan(x)^2, soft_margin_loss's exp(-y x) in
  float16), neither can be near R there; R is then checked against torch's float64 gradient within the
  dtype's rtol instead, where both are finite, and the elements both ran finitely are compared as above.
  Where R is exactly 0 everywhere (a constant function), there is no scale: each side passes within
  assert_close's atol for the dtype (1e-5 below float64), as each is its own rounding of terms that cancel.
  A NaN where the other side has none, a missing gradient, or a shape or dtype that differs fails.
- Where a gradient fails, the sample's finite differences decide whose it is (inputs of at most
  FINITE_DIFFERENCE_ELEMENTS elements; promoted to float64 or complex128, central differences of
  Re <grad_outputs, outputs>): refgrad's R within FINITE_DIFFERENCE_RTOL of them at every input, and torch's float64
  gradient not, is torch wrong; anything else stays a wrong gradient.

Randomness is fixed: the samples come from a seed per op and dtype (opinfo_samples.samples) and the
grad_outputs from a seed per op, dtype and sample index.
"""
from __future__ import annotations

import functools
import math
import re
import warnings
from dataclasses import dataclass
from typing import Optional

import torch
import torch.utils._pytree as pytree

import refgrad
import refgrad.torch
from refgrad.check.rule import (SENSITIVITY_RATIO, SENSITIVITY_SEEDS, _compare, _max_abs, _max_magnitude, _Rule,
                                _sensitivity)

from opinfo_samples import differentiable_call, dtype_name, op_id, samples, seed_of

SKIP = "skip"
UNSUPPORTED_DTYPE = "unsupported dtype"
MISSING_NODES = "missing nodes"
REFGRAD_ERROR = "refgrad error"
WRONG_GRADIENT = "wrong gradient"
TORCH_INACCURATE = "torch inaccurate"
TORCH_WRONG = "torch wrong"
PASS = "pass"
# The kinds an expectation may name, in the order the table prints them.
FAILURES = (UNSUPPORTED_DTYPE, MISSING_NODES, REFGRAD_ERROR, WRONG_GRADIENT, TORCH_INACCURATE, TORCH_WRONG)
# Kinds whose detail must match too: a node added or a dtype gained changes the entry. Errors' and
# wrong gradients' details (a message, the measured errors) are shown, not matched: they are not a
# verdict, and their digits may differ with the BLAS or the machine.
MATCHED_DETAIL = (UNSUPPORTED_DTYPE, MISSING_NODES)


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""

    @property
    def reason(self) -> str:
        """The text an expectations entry holds: "missing nodes: CumprodBackward0", "pass"."""
        return f"{self.kind}: {self.detail}" if self.detail else self.kind

    @staticmethod
    def parse(reason: str) -> "Outcome":
        kind, _, detail = reason.partition(": ")
        if kind not in FAILURES + (PASS,):
            raise ValueError(f"an expectation's reason must start with one of {FAILURES}, got {reason!r}")
        return Outcome(kind, detail)

    def agrees_with(self, expected: "Outcome") -> bool:
        if self.kind != expected.kind:
            return False
        return self.detail == expected.detail if self.kind in MATCHED_DETAIL else True

    @property
    def missing_nodes(self) -> list[str]:
        return self.detail.split(", ") if self.kind == MISSING_NODES else []

    @property
    def complex_unchecked_node(self) -> Optional[str]:
        """For "unsupported dtype: complex128 in ReluBackward0": the node not yet checked for complex."""
        found = re.fullmatch(r"complex(?:64|128) in (\w+)", self.detail) if self.kind == UNSUPPORTED_DTYPE else None
        return found.group(1) if found else None


@functools.lru_cache(maxsize=None)
def refgrad_has_dtype(dtype: torch.dtype) -> bool:
    """Whether refgrad captures and runs a backward in ``dtype``: asked of refgrad itself (a NegBackward0
    program), so the harness notices the day a dtype is added."""
    x = torch.ones(2, dtype=dtype, requires_grad=True)
    y = -x
    try:
        refgrad.torch.capture(y, inputs=[x], grad_outputs=[torch.ones_like(y)]).run("float64")
    except refgrad.Error as error:
        if _no_dtype(str(error)):
            return False
        raise
    return True


def _no_dtype(message: str) -> Optional[str]:
    found = re.search(r"refgrad has no dtype (?:for NumPy's )?'?([\w.]+)'?", message) or \
        re.search(r"(complex64|complex128) is not supported yet", message)
    return found.group(1) if found else None


def _complex_unchecked_node(message: str) -> Optional[str]:
    """The node whose formula refgrad has not checked for complex numbers, when the error says so."""
    found = re.search(r"(\w+): complex(?:64|128) is not supported yet by this node", message)
    return found.group(1) if found else None


def _first_line(error: BaseException, limit: int = 200) -> str:
    """The error, short enough for one line of the expectations file: its first line, and for a failed
    instruction without the instruction's text (its node name follows)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if not isinstance(error, refgrad.Error):
        text = f"{type(error).__name__}: {text}"
    text = re.sub(r"^instruction (\d+) \(.*?\): ", r"instruction \1: ", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def grad_outputs_for(outputs: list[torch.Tensor], *seed) -> list[torch.Tensor]:
    """Random grads for the outputs, from a fixed seed: ones would hide errors that a sum hides (a
    permuted or transposed gradient)."""
    generator = torch.Generator().manual_seed(seed_of(*seed))
    return [torch.randn(out.shape, dtype=out.dtype, generator=generator) for out in outputs]


def _differentiable_outputs(output) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves(output)
    return [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad
            and (x.is_floating_point() or x.is_complex())]


def classify(op, dtype: torch.dtype, index: int, sample) -> Outcome:
    """Runs sample ``index`` of ``op`` in ``dtype`` through torch and refgrad; see the module's docstring."""
    fn, inputs = differentiable_call(op, sample)
    if not inputs:
        return Outcome(SKIP, "no input requires grad")
    try:
        with refgrad.torch.recording():  # lets capture take in-place ops on views (CopySlices)
            outputs = _differentiable_outputs(fn(*inputs))
    except Exception as error:
        return Outcome(SKIP, f"torch's forward fails: {_first_line(error)}")
    if not outputs:
        return Outcome(SKIP, "no output requires grad")
    grad_outputs = grad_outputs_for(outputs, op_id(op), dtype_name(dtype), index)
    try:  # retain_graph: capture reads the saved values afterwards
        expected = torch.autograd.grad(outputs, inputs, grad_outputs, retain_graph=True, allow_unused=True)
    except Exception as error:
        return Outcome(SKIP, f"torch.autograd.grad fails: {_first_line(error)}")

    if not refgrad_has_dtype(dtype):
        return Outcome(UNSUPPORTED_DTYPE, dtype_name(dtype))
    try:
        capture = refgrad.torch.capture(outputs, inputs=inputs, grad_outputs=grad_outputs, allow_unused=True)
    except refgrad.torch.UnsupportedError as error:
        refused = [item for item in error.unsupported if not item.reason.startswith("refgrad has no node")]
        if refused:  # a node refgrad refuses for a reason (a sparse layout, a hidden field), not one it lacks
            names = ", ".join(sorted({item.name for item in refused}))
            return Outcome(REFGRAD_ERROR, f"refgrad.torch.capture refuses {names}: {refused[0].reason}")
        return Outcome(MISSING_NODES, ", ".join(sorted({item.name for item in error.unsupported})))
    except refgrad.Error as error:
        return _refgrad_error(error)
    tight = dtype in (torch.float64, torch.complex128)
    try:
        # Capture.run("float32") runs the program as captured: for a float64 sample that is its own
        # dtypes (promoting would turn a float32 weight tensor of the sample into float64 too)
        reference = capture.run("float32" if tight else "float64")
        as_captured = None if tight else capture.run("float32")
    except refgrad.Error as error:
        return _refgrad_error(error)
    try:  # refgrad.check's sensitivity runs; a node may refuse moved values (is_target's marks): R' alone then
        perturbed = None if tight else [[capture.run("float64", perturbed=scale, seed=seed)
                                         for scale in (1.0, 1.0 / SENSITIVITY_RATIO)] for seed in SENSITIVITY_SEEDS]
    except refgrad.Error:
        perturbed = None
    names = capture.captures  # the program's outputs, in the order of inputs

    def torch_float64():
        """torch's gradient with the sample's floating tensors promoted to float64 (asked only when
        torch's own gradient in the dtype is off: is it refgrad's formula or torch's rounding?)"""
        promoted = [x.detach().to(_promoted(x.dtype)).requires_grad_() for x in inputs]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = _differentiable_outputs(fn(*promoted))
            grads = [g.detach().to(_promoted(g.dtype)) for g in grad_outputs]
            return torch.autograd.grad(out, promoted, grads, allow_unused=True)

    def in_order(results):
        return None if results is None else [results[name] for name in names]

    return _compare_all(dtype, in_order(reference), list(expected), in_order(as_captured), torch_float64,
                        lambda: _finite_differences(fn, inputs, grad_outputs),
                        None if perturbed is None else [[(moved[k], moved_less[k]) for moved, moved_less in
                                                         (map(in_order, pair) for pair in perturbed)]
                                                        for k in range(len(names))])


# The finite-difference verdict's limits: inputs of at most this many elements in all (two forwards an
# element), and how close (relative to the gradient's largest element, at least 1) R must be to them.
FINITE_DIFFERENCE_ELEMENTS = 4096
FINITE_DIFFERENCE_RTOL = 1e-5


def _finite_differences(fn, inputs, grad_outputs) -> Optional[list[Optional[torch.Tensor]]]:
    """Central differences, in float64 (complex128), of s(x) = sum Re(conj(g) out) over the outputs: the
    real function whose gradient torch's backward with grad_outputs g computes. A complex input's
    gradient is ds/d(re x) + i ds/d(im x), torch's convention. One per input (None: not floating); None
    when the inputs are too large for it."""
    if sum(x.numel() for x in inputs) > FINITE_DIFFERENCE_ELEMENTS:
        return None
    promoted = [x.detach().to(_promoted(x.dtype)) for x in inputs]
    grads = [g.detach().to(_promoted(g.dtype)) for g in grad_outputs]

    def s(values) -> float:
        # fresh leaves that require grad, as the sample's: its differentiable outputs are those that do
        leaves = [x.clone().requires_grad_(x.is_floating_point() or x.is_complex()) for x in values]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = _differentiable_outputs(fn(*leaves))
        return sum(float((torch.conj(g) * out.detach().to(g.dtype)).real.sum()) for g, out in zip(grads, outputs))

    def derivative(flat: torch.Tensor, i: int, direction: complex) -> float:
        value = flat[i].item()
        step = 1e-6 * max(1.0, abs(value))
        flat[i] = value + direction * step
        up = s(promoted)
        flat[i] = value - direction * step
        down = s(promoted)
        flat[i] = value
        return (up - down) / (2 * step)

    gradients = []
    for x in promoted:
        if not (x.is_floating_point() or x.is_complex()):
            gradients.append(None)
            continue
        gradient = torch.zeros_like(x)
        flat, grad_flat = x.view(-1), gradient.view(-1)
        for i in range(flat.numel()):
            if x.is_complex():
                grad_flat[i] = complex(derivative(flat, i, 1.0), derivative(flat, i, 1j))
            else:
                grad_flat[i] = derivative(flat, i, 1.0)
        gradients.append(gradient)
    return gradients


def _sides_with_refgrad(reference, exact, differences) -> Optional[str]:
    """Whether finite differences agree with refgrad's R at every input and not with torch's float64
    gradient at some: the detail of a torch-wrong outcome, or None."""
    if differences is None or exact is None:
        return None
    worst = None
    for k, (r, t, d) in enumerate(zip(reference, exact, differences)):
        if r is None or d is None:
            continue
        if t is None or list(r.shape) != list(d.shape) or list(t.shape) != list(d.shape):
            return None
        r, t, d = _real(r).to(torch.float64), _real(t).to(torch.float64), _real(d)
        tolerance = FINITE_DIFFERENCE_RTOL * max(1.0, _max_abs(d, torch.zeros_like(d)))
        refgrad_error, torch_error = _max_abs(r, d), _max_abs(t, d)
        if not refgrad_error <= tolerance:  # NaN never agrees
            return None
        if torch_error > 10 * tolerance and (worst is None or torch_error > worst[1]):
            worst = (k, torch_error, refgrad_error)
    if worst is None:
        return None
    k, torch_error, refgrad_error = worst
    return (f"input {k}: max|torch float64 - finite differences| {torch_error:.2g}, "
            f"max|R - finite differences| {refgrad_error:.2g}")


def _promoted(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point else dtype


def _refgrad_error(error: refgrad.Error) -> Outcome:
    missing = _no_dtype(str(error))
    node = _complex_unchecked_node(str(error))
    if missing and node:
        return Outcome(UNSUPPORTED_DTYPE, f"{missing} in {node}")
    if missing:
        return Outcome(UNSUPPORTED_DTYPE, f"{missing} inside the program")
    return Outcome(REFGRAD_ERROR, _first_line(error))


def _real(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A complex gradient as its real and imaginary parts (the rule's comparisons are real)."""
    if tensor is None or not tensor.is_complex():
        return tensor
    return torch.view_as_real(tensor.detach().resolve_conj())


def _failure(k: int, what: str, result) -> tuple[float, str]:
    """(how bad, what the entry says): the error, its bound and its size relative to max|R|."""
    text = (f"input {k}: {what} {result.max_abs:.2g} > bound {result.tolerance:.2g} "
            f"(relative {result.max_rel:.2g})")
    return result.max_rel, f"{text}; {result.note}" if result.note else text


def _compare_all(dtype, reference, expected, as_captured, torch_float64, finite_differences,
                 perturbed=None) -> Outcome:
    """The worst gradient's verdict over all inputs (see the module's docstring for the rule)."""
    rule = _Rule()
    failures, torch_off = [], []
    torch_exact = functools.lru_cache(maxsize=None)(lambda: _call_or_none(torch_float64))  # computed once, if asked
    for k, r in enumerate(reference):
        t = expected[k]
        if (r is None) != (t is None):
            failures.append((math.inf, f"input {k}: refgrad gives {'no' if r is None else 'a'} gradient, "
                                       f"torch {'none' if t is None else 'one'}"))
            continue
        if r is None:
            continue
        r, t = _real(r), _real(t)
        real_dtype = t.dtype
        if as_captured is None:  # float64, complex128: against torch itself
            result = _compare(r, t, real_dtype, rule, 0.0, is_eager=True)
            if not result.passed:
                failures.append(_failure(k, "max|refgrad - torch|", result))
            continue
        e = _real(as_captured[k])
        if e is None:
            failures.append((math.inf, f"input {k}: refgrad's {dtype_name(dtype)} run gives no gradient"))
            continue
        if _overflowed_alike(e, t, r):
            # refgrad's run in the dtype and torch's hold the same infinities (or the NaN of inf - inf) at the same
            # elements, where R is finite: an intermediate overflowed the dtype in both (tan's 1 + tan(x)^2,
            # soft_margin_loss's exp(-y x) in float16). Neither is near R there, by the dtype's range, not by an
            # error. R's formula is checked against torch's float64 gradient instead, within the dtype's rtol:
            # R differentiates the forward as it ran, in the dtype. Where R or that gradient is not finite (a
            # saved forward value overflowed too: pow's result), there is nothing to check. The elements both
            # computed finitely are compared as everywhere else.
            exact = torch_exact()
            if exact is None:
                continue
            dtype_rule = _Rule(rtol=rule.tolerances(real_dtype)[0], atol=0.0)
            exact_k = _real(exact[k]).to(torch.float64)
            finite = torch.isfinite(exact_k) & torch.isfinite(r.to(torch.float64))
            result = _compare(exact_k[finite], r.to(torch.float64)[finite], torch.float64, dtype_rule, 0.0,
                              is_eager=True)
            if not result.passed:
                failures.append(_failure(k, "max|R - torch float64|", result))
                continue
            both_finite = torch.isfinite(e)
            e, t, r = e[both_finite], t[both_finite], r[both_finite]
        else:
            both_finite = None
        e_error, t_error = _max_abs(e, r), _max_abs(t, r)
        # R~ (the float64 run with values and results moved by one rounding of their dtype) bounds the noise from below
        # where refgrad's own rounding cancels exactly and torch's does not (refgrad.check's rule)
        sensitivity = _masked_sensitivity(r, None if perturbed is None else perturbed[k], both_finite)
        checks = (("torch", t, max(e_error, sensitivity)), (f"refgrad {dtype_name(dtype)}", e, max(t_error, sensitivity)))
        # R exactly 0 everywhere (a constant function: corrcoef of one variable): there is no scale, and each
        # side's error is its own rounding of terms that cancel, which the other side may happen to round to
        # exactly 0 (how depends on the CPU's BLAS kernels); both get assert_close's atol for the dtype then
        zero_gradient = r.numel() > 0 and not bool(r.abs().gt(0).any())
        for who, value, noise in checks:
            result = _compare(value, r, real_dtype, rule, 0.0, is_eager=True, noise=noise, eager=None)
            if not result.passed and zero_gradient:
                result = _compare(value, r, real_dtype, _Rule(rtol=0.0, atol=rule.tolerances(real_dtype)[1]), 0.0,
                                  is_eager=True)
            if not result.passed:
                failures.append(_failure(k, f"max|{who} - R|", result))
                if who == "torch":
                    torch_off.append((k, r, t_error, failures[-1]))
    if torch_off and len(torch_off) == len(failures):
        # Only torch's gradient is off, and refgrad's float32 run agrees with R: either refgrad's formula
        # is wrong (R and its float32 run share it) or torch's float32 kernel rounds worse than the rule
        # allows (layer_norm over one element: its weight gradient is exactly 0, torch's 2.6e-5). torch's
        # own float64 gradient decides (_closer_to_torch_float64).
        try:
            exact = torch_float64()
        except Exception:
            exact = None
        rtol = rule.tolerances(_real(expected[torch_off[0][0]]).dtype)[0]
        if exact is not None and all(_closer_to_torch_float64(r, exact[k], error, rtol) for k, r, error, _ in torch_off):
            worst = max(torch_off, key=lambda item: _severity(item[3][0]))[3]
            return Outcome(TORCH_INACCURATE, worst[1].strip())
    if not failures:
        return Outcome(PASS)
    # torch's float64 gradient: the one compared at float64 already, asked for below it
    exact = expected if as_captured is None else torch_exact()
    verdict = _sides_with_refgrad(reference, exact, _call_or_none(finite_differences))
    if verdict is not None:
        return Outcome(TORCH_WRONG, verdict)
    worst = max(failures, key=lambda failure: _severity(failure[0]))
    return Outcome(WRONG_GRADIENT, worst[1].strip())


def _masked_sensitivity(reference: torch.Tensor, perturbed, elements) -> float:
    """refgrad.check's sensitivity (rule._sensitivity) of one gradient: ``perturbed`` is its (R~, R~') pair
    for each seed, the largest taken; ``elements`` the mask the comparison keeps (None: all); R has that mask
    applied already."""
    if perturbed is None:
        return 0.0
    largest = 0.0
    for pair in perturbed:
        moved, moved_less = (_real(value) for value in pair)
        if elements is not None and moved is not None and moved_less is not None:
            moved, moved_less = moved[elements], moved_less[elements]
        largest = max(largest, _sensitivity(reference, moved, moved_less))
    return largest


def _overflowed_alike(refgrad_dtype: torch.Tensor, torch_dtype: torch.Tensor, reference: torch.Tensor) -> bool:
    """Whether refgrad's run in the dtype and torch's are not finite at exactly the same elements, with the
    same values there (the same infinities, NaN for NaN), and some of those elements are finite in R."""
    if refgrad_dtype.dtype != torch_dtype.dtype or refgrad_dtype.shape != torch_dtype.shape:
        return False
    not_finite = ~torch.isfinite(refgrad_dtype)
    if not torch.equal(not_finite, ~torch.isfinite(torch_dtype)):
        return False
    same_values = torch.equal(refgrad_dtype[not_finite].nan_to_num(), torch_dtype[not_finite].nan_to_num()) and \
        torch.equal(torch.isnan(refgrad_dtype), torch.isnan(torch_dtype))
    return same_values and bool((not_finite & torch.isfinite(reference)).any())


def _call_or_none(function):
    try:
        return function()
    except Exception:
        return None


def _severity(relative: float) -> float:
    return math.inf if math.isnan(relative) else relative


def _closer_to_torch_float64(reference, exact, torch_error: float, rtol: float) -> bool:
    """Whether R is ten times closer to torch's float64 gradient than torch's own gradient in the dtype
    is to R. Were refgrad's formula off by d, R would be about d from both (ratio about 1); where torch
    rounds badly, R and torch's float64 gradient differ by the forward's rounding only. Where torch's
    gradient has a NaN that R has not (torch_error NaN: its kernel overflowed the dtype, as matrix_exp's
    float16 one does), it is no distance away: R must then agree with torch's float64 gradient within the
    dtype's rtol of max|R|, where that gradient has no NaN either."""
    if exact is None:
        return False
    exact = _real(exact)
    if list(exact.shape) != list(reference.shape):
        return False
    distance = _max_abs(exact, reference)
    if math.isnan(torch_error):
        return distance <= rtol * _max_magnitude(reference)  # NaN never is
    return distance * 10 <= torch_error  # NaN never is


def run_op(op, dtype: torch.dtype, limit: Optional[int] = None) -> list[tuple[int, Outcome]]:
    """Every sample's outcome (the first ``limit`` samples), by sample index. A sample whose drawing
    fails is torch's failure: a skip."""
    outcomes = []
    # fork_rng: samples() seeds the global generator; the tests that run after these keep theirs
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore")  # op_db's deprecated ops and beta features warn on every sample
        drawn = samples(op, dtype)
        index = 0
        while limit is None or index < limit:
            try:
                sample = next(drawn)
            except StopIteration:
                break
            except Exception as error:
                outcomes.append((index, Outcome(SKIP, f"drawing the sample fails: {_first_line(error)}")))
                break
            outcomes.append((index, classify(op, dtype, index, sample)))
            index += 1
    return outcomes


# The expectations file (opinfo_expectations.py) holds entries (op, dtype, samples, reason): samples is
# ALL, or the indices of the samples it is about where only some fail so.
ALL = "all"


@dataclass(frozen=True)
class Entry:
    op: str
    dtype: str
    samples: object  # ALL or a tuple of sample indices
    reason: str

    def covers(self, index: int) -> bool:
        return self.samples == ALL or index in self.samples

    def line(self) -> str:
        samples = "ALL" if self.samples == ALL else repr(tuple(self.samples))
        return f"    ({self.op!r}, {self.dtype!r}, {samples}, {self.reason!r}),"


class Expectations:
    """The entries by (op, dtype), checked: reasons parse, no sample is named twice."""

    def __init__(self, entries):
        self.by_key: dict[tuple[str, str], list[Entry]] = {}
        for entry in (Entry(*item) for item in entries):
            Outcome.parse(entry.reason)
            entries_here = self.by_key.setdefault((entry.op, entry.dtype), [])
            for other in entries_here:
                overlapping = ALL in (entry.samples, other.samples) or set(entry.samples) & set(other.samples)
                assert not overlapping, f"two entries name the same samples: {entry} and {other}"
            entries_here.append(entry)

    def expected(self, op: str, dtype: str, index: int) -> Outcome:
        for entry in self.by_key.get((op, dtype), []):
            if entry.covers(index):
                return Outcome.parse(entry.reason)
        return Outcome(PASS)

    def discrepancies(self, op: str, dtype: str, outcomes: list[tuple[int, Outcome]],
                      all_samples: bool) -> list[str]:
        """What differs between the run and the file, one line each: a regression, an unexpected pass, a
        changed reason; with all_samples, also an entry naming a sample that no longer exists."""
        lines = []
        for index, outcome in outcomes:
            if outcome.kind == SKIP:
                continue
            expected = self.expected(op, dtype, index)
            if outcome.agrees_with(expected):
                continue
            if outcome.kind == PASS:
                lines.append(f"sample {index}: unexpected pass (expected {expected.reason}): remove the entry")
            else:
                lines.append(f"sample {index}: {outcome.reason} (expected {expected.reason})")
        if all_samples:
            drawn = {index for index, _ in outcomes}
            for entry in self.by_key.get((op, dtype), []):
                if entry.samples != ALL and not set(entry.samples) <= drawn:
                    lines.append(f"{entry}: names samples the op does not have")
        return lines


def entries_for(op: str, dtype: str, outcomes: list[tuple[int, Outcome]]) -> list[Entry]:
    """The entries a run calls for: one for all samples where every sample (skips aside) fails in one way,
    else one per way of failing, naming its samples; the reason shown is its first sample's."""
    failing = [(index, outcome) for index, outcome in outcomes if outcome.kind not in (SKIP, PASS)]
    compared = [outcome for _, outcome in outcomes if outcome.kind != SKIP]
    if not failing:
        return []
    groups: dict[tuple[str, str], list[tuple[int, Outcome]]] = {}
    for index, outcome in failing:
        key = (outcome.kind, outcome.detail if outcome.kind in MATCHED_DETAIL else "")
        groups.setdefault(key, []).append((index, outcome))
    if len(groups) == 1 and len(failing) == len(compared):
        return [Entry(op, dtype, ALL, failing[0][1].reason)]
    return [Entry(op, dtype, tuple(index for index, _ in group), group[0][1].reason) for group in groups.values()]
