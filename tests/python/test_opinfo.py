"""Issue 16, Deliver 1: the OpInfo conformance harness (docs/conformance.md).

Every autograd op of torch's OpInfo database (op_db) x each dtype of float64, float32, float16, bfloat16,
complex64, complex128 that its backward supports on the CPU. For each sample: the sample's tensors that
require grad are the inputs, its differentiable outputs get random grad_outputs (seeded), refgrad.torch
captures that backward and runs it, and the gradients are compared with torch.autograd.grad's.

- An outcome is one of (opinfo_outcome.py, checked in this order): skip (torch itself gives no gradient:
  its reason is shown, the sample is counted apart and never listed), unsupported dtype, missing nodes
  (their names), refgrad error (its message), wrong gradient (the worst error and its bound), torch
  inaccurate (below float64: torch's gradient alone is off, and its float64 gradient agrees with
  refgrad's), pass.
- float64 and complex128 are compared with torch tightly (assert_close's float64 rtol and atol, 1e-7);
  the other dtypes by DESIGN.md's rule against refgrad's float64 run of the captured program: torch's
  gradient and refgrad's run as captured must each be within rtol max|R| + 32 times the other's error.
- Randomness is fixed: samples are drawn from a seed per op and dtype (sample i is the same whether one or
  all are drawn), grad_outputs from a seed per op, dtype and sample index.
- opinfo_expectations.py names every op x dtype that does not pass, and why: one line per entry, (op, dtype,
  samples, reason), op being op_db's name plus ".variant", samples ALL or the indices of the samples the
  entry is about where only some fail that way, reason starting with the outcome's kind; sorted, and
  written by `tools/conformance.py --write` from a full run. The test fails on a regression, on a changed reason (for missing nodes and
  dtypes: the exact nodes), and on an unexpected pass, so the list only shrinks; a wrong gradient can only
  be expected by an entry that says "wrong gradient".
- `make test` runs the subset: the first sample of each op, float64, float32, float16 and bfloat16 (the
  complex dtypes' items skip and say so). REFGRAD_OPINFO_FULL=1 runs every sample in every dtype; `make conformance`
  (tools/conformance.py) runs the same classification and prints the table.
"""
import os

import pytest
import torch

import refgrad.torch

from opinfo_expectations import ENTRIES
from opinfo_outcome import (MISSING_NODES, PASS, REFGRAD_ERROR, SKIP, TORCH_INACCURATE, TORCH_WRONG, WRONG_GRADIENT,
                            Expectations, Outcome, classify, entries_for, run_op)
from opinfo_samples import DTYPES, autograd_ops, backward_dtypes, dtype_name, first_variant, op_id, samples

FULL = os.environ.get("REFGRAD_OPINFO_FULL") == "1"
SUBSET_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128)
EXPECTATIONS = Expectations(ENTRIES)
OPS = autograd_ops()

pytestmark = pytest.mark.filterwarnings("ignore")  # op_db's deprecated ops warn on every sample


@pytest.mark.parametrize("op, dtype", [pytest.param(op, dtype, id=f"{op_id(op)}-{dtype_name(dtype)}")
                                       for op in OPS for dtype in backward_dtypes(op)])
def test_op(op, dtype):
    if not FULL and dtype not in SUBSET_DTYPES:
        pytest.skip(f"{dtype_name(dtype)}: full suite only (REFGRAD_OPINFO_FULL=1, or make conformance)")
    outcomes = run_op(op, dtype, limit=None if FULL else 1)
    name = op_id(op)
    differences = EXPECTATIONS.discrepancies(name, dtype_name(dtype), outcomes, all_samples=FULL)
    assert not differences, (f"{name} {dtype_name(dtype)} differs from opinfo_expectations.py "
                             "(tools/conformance.py --write updates it; review the diff):\n  "
                             + "\n  ".join(differences))
    skipped = [f"sample {index}: {outcome.detail}" for index, outcome in outcomes if outcome.kind == SKIP]
    if len(skipped) == len(outcomes):
        pytest.skip(f"{name} {dtype_name(dtype)}: torch gives no gradient to compare with: "
                    + ("; ".join(skipped) if skipped else "the op has no samples"))
    if skipped:
        print(f"{name} {dtype_name(dtype)}: skipped (torch gives no gradient): " + "; ".join(skipped))


def test_the_expectations_file_names_real_ops_and_dtypes_in_order():
    """A stale entry (an op op_db no longer has, or a dtype its backward does not support) would never be
    checked; the file is in tools/conformance.py's order, so that its diffs read well."""
    dtypes = {op_id(op): [dtype_name(d) for d in backward_dtypes(op)] for op in OPS}
    for entry in EXPECTATIONS.by_key.values():
        for e in entry:
            assert e.dtype in dtypes.get(e.op, []), f"{e}: no such op x dtype in op_db's autograd ops"
    order = [dtype_name(d) for d in DTYPES]
    keys = [(op, order.index(dtype), () if samples == "all" else samples) for op, dtype, samples, _ in ENTRIES]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


# The harness itself must be able to fail: a planted error in refgrad's result is a wrong gradient.

def _planted(monkeypatch, factor, precisions):
    run = refgrad.torch.Capture.run

    def scaled(self, precision="float64", **perturbed):  # the sensitivity runs run the same formula
        grads = run(self, precision, **perturbed)
        if precision in precisions:
            grads = {name: None if g is None else g * factor for name, g in grads.items()}
        return grads

    monkeypatch.setattr(refgrad.torch.Capture, "run", scaled)


@pytest.mark.parametrize("dtype, precisions, named", [
    (torch.float64, ("float64", "float32"), "max|refgrad - torch|"),
    (torch.float32, ("float64", "float32"), "max|torch - R|"),
    (torch.float32, ("float32",), "max|refgrad float32 - R|")],
    ids=["float64", "float32-formula", "float32-as-captured"])
def test_a_planted_error_is_a_wrong_gradient(monkeypatch, dtype, precisions, named):
    """0.1% off: in float64 against torch; in float32 in the formula (both of refgrad's runs off, torch
    far from R and torch's float64 gradient as far: not torch's rounding) or in the float32 run alone
    (far from R while torch is not)."""
    op = first_variant("mul")
    sample = next(samples(op, dtype))
    assert classify(op, dtype, 0, sample) == Outcome(PASS)
    _planted(monkeypatch, 1.001, precisions)
    outcome = classify(op, dtype, 0, sample)
    assert outcome.kind == WRONG_GRADIENT and named in outcome.detail, outcome


def test_a_gradient_that_cancels_to_zero_is_judged_by_its_sensitivity():
    """layer_norm over one element (sample 2): its weight gradient is exactly 0 and torch's float32 kernel gives
    4e-5 (docs/check.md), where refgrad's float32 run gives 0. Moving the input by one float32 rounding moves
    the exact gradient by a fifth of that (R~, the rule's sensitivity; the rule allows 32 times it), so it
    passes; it was 'torch inaccurate' before."""
    op = first_variant("nn.functional.layer_norm")
    [(_, outcome)] = [item for item in run_op(op, torch.float32, limit=3) if item[0] == 2]
    assert outcome == Outcome(PASS), outcome


def test_a_nan_of_torch_where_its_float64_gradient_agrees_with_refgrad_is_torch_inaccurate():
    """matrix_exp in float16 (sample 0): torch's float16 kernel overflows (its forward is NaN too) and its
    gradient is NaN everywhere; refgrad's R is finite and agrees with torch's float64 gradient to 1e-15."""
    op = first_variant("matrix_exp")
    outcome = classify(op, torch.float16, 0, next(samples(op, torch.float16)))
    assert outcome.kind == TORCH_INACCURATE and "NaN in 25 elements where R has none" in outcome.detail, outcome


def test_a_planted_error_under_a_nan_of_torch_is_a_wrong_gradient(monkeypatch):
    op = first_variant("matrix_exp")
    _planted(monkeypatch, 1.01, ("float64", "float32"))  # R 1% off torch's float64 gradient, over float16's rtol
    outcome = classify(op, torch.float16, 0, next(samples(op, torch.float16)))
    assert outcome.kind == WRONG_GRADIENT, outcome


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=["float64", "complex128"])
def test_a_torch_gradient_that_finite_differences_refute_is_torch_wrong(dtype):
    """as_strided_scatter's self gradient: torch's fails torch's own gradcheck (torch masks the elements it
    should keep); finite differences side with refgrad, so the outcome is torch wrong, not a wrong gradient."""
    op = first_variant("as_strided_scatter")
    outcome = classify(op, dtype, 0, next(samples(op, dtype)))
    assert outcome.kind == TORCH_WRONG and outcome.detail.startswith("input 0: max|torch float64 - finite"), outcome
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    src = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    assert not torch.autograd.gradcheck(lambda a, b: torch.as_strided_scatter(a, b, (2, 2), (1, 2), 1), (x, src),
                                        raise_exception=False)  # the independent truth: torch's own check


def test_a_planted_error_is_not_blamed_on_torch_by_finite_differences(monkeypatch):
    """Finite differences side with torch, not with a refgrad 0.1% off: the outcome stays a wrong gradient."""
    op = first_variant("mul")
    sample = next(samples(op, torch.float64))
    _planted(monkeypatch, 1.001, ("float64", "float32"))
    assert classify(op, torch.float64, 0, sample).kind == WRONG_GRADIENT


def test_an_overflow_in_both_dtype_runs_is_checked_against_torch_float64():
    """soft_margin_loss in float16 (samples 4 and 5): torch's kernel and refgrad's float16 run both compute
    exp(-y x), which overflows float16 and leaves NaN at the same elements of the gradient, where R is finite.
    R is checked against torch's float64 gradient there: it passes, and fails when the formula is off."""
    op = first_variant("nn.functional.soft_margin_loss")
    samples_4_5 = [item for item in run_op(op, torch.float16, limit=6) if item[0] in (4, 5)]
    assert [outcome for _, outcome in samples_4_5] == [Outcome(PASS), Outcome(PASS)]


def test_a_planted_error_under_an_overflow_is_a_wrong_gradient(monkeypatch):
    op = first_variant("nn.functional.soft_margin_loss")
    _planted(monkeypatch, 1.01, ("float64", "float32"))  # R and refgrad's float16 run both 1% off
    outcome = dict(run_op(op, torch.float16, limit=5))[4]
    assert outcome.kind == WRONG_GRADIENT and "max|R - torch float64|" in outcome.detail, outcome


def test_regressions_changes_and_unexpected_passes_are_differences():
    expectations = Expectations([("mul", "float64", "all", "missing nodes: MulBackward0"),
                                 ("div", "float64", (1,), "refgrad error: boom")])
    passing = [(0, Outcome(PASS)), (1, Outcome(PASS))]
    assert "unexpected pass" in expectations.discrepancies("mul", "float64", passing, True)[0]
    other_node = [(0, Outcome(MISSING_NODES, "MulBackward0, SumBackward0")), (1, Outcome(SKIP, "torch fails"))]
    assert len(expectations.discrepancies("mul", "float64", other_node, True)) == 1
    assert expectations.discrepancies("div", "float64", [(0, Outcome(PASS)), (1, Outcome(REFGRAD_ERROR, "other"))],
                                      True) == []  # an error's message is shown, not matched
    assert expectations.discrepancies("div", "float64", [(0, Outcome(WRONG_GRADIENT, "x")), (1, Outcome(PASS))],
                                      True) == ["sample 0: wrong gradient: x (expected pass)",
                                                "sample 1: unexpected pass (expected refgrad error: boom): "
                                                "remove the entry"]
    # an entry naming a sample the op no longer has is stale (checked where all samples ran)
    assert "does not have" in expectations.discrepancies("div", "float64", [(0, Outcome(PASS))], True)[0]
    with pytest.raises(ValueError):  # a reason must say which kind: "wrong gradient" is never implicit
        Expectations([("mul", "float64", "all", "slightly off")])


def test_entries_name_all_samples_or_the_failing_ones():
    one_way = [(0, Outcome(MISSING_NODES, "X")), (1, Outcome(SKIP, "no grad")), (2, Outcome(MISSING_NODES, "X"))]
    assert [(e.samples, e.reason) for e in entries_for("op", "float64", one_way)] == [("all", "missing nodes: X")]
    mixed = [(0, Outcome(PASS)), (1, Outcome(MISSING_NODES, "X")), (2, Outcome(WRONG_GRADIENT, "input 0: ..."))]
    assert [(e.samples, e.reason) for e in entries_for("op", "float64", mixed)] == [
        ((1,), "missing nodes: X"), ((2,), "wrong gradient: input 0: ...")]
