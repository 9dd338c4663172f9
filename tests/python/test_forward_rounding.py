"""refgrad.check.forward_rounding: the allowance of an engine that compiles the forward too for the forward's own
rounding, checked with engines of the test's own (no compiler: test_inductor.py has Inductor's cases).

Run as tests/python/conftest.py says, e.g.
    PYTHONPATH=build-py/src/python:src/python python -m pytest tests/python/test_forward_rounding.py -q
"""
import torch
import torch.nn.functional as F

import refgrad.check as refgrad_check
from refgrad.check.forward_rounding import ForwardRounding, unit_roundoff
from refgrad.check.oracle import _Oracle
from refgrad.check.subject import _Subject


def leaf(shape, seed, dtype=torch.float32):
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


class ForwardInFloat64:
    """A correct engine that compiles the forward too, as Inductor may: the whole program (forward included) in
    float64, the gradients cast back to the leaves' float32 at the end. ``planted`` scales them: a wrong one."""

    compiles_forward = True

    def __init__(self, planted=1.0):
        self.name = "forward_in_float64" if planted == 1.0 else f"forward_in_float64_times_{planted}"
        self.planted = planted

    def gradients(self, forward, grad_outputs):
        run = forward(transform=lambda fn: lambda *args: fn(*[arg.double() for arg in args]))
        torch.autograd.backward(run.outputs, [g.double() for g in grad_outputs])
        return {name: leaf.grad * self.planted for name, leaf in run.leaves.items()}


def residue(x, w):
    """``layer_norm(x).sum()`` is 0 exactly, about 1e-7 in float32: every gradient here is scaled by it."""
    total = F.layer_norm(x, (3,)).sum()
    return F.linear((total / (x.abs() + 1)).reshape(-1, 1), w)


RESIDUE_LEAVES = ((4, 3), 5667), ((1, 1), 41366)  # refgrad.fuzz case 200534 of generator version 3, reduced


def test_every_op_result_moves_by_at_most_one_rounding_and_views_and_leaves_not_at_all():
    assert unit_roundoff(torch.float32) == 2.0 ** -24 and unit_roundoff(torch.float16) == 2.0 ** -11
    x = leaf((5,), 0, torch.float64)
    roundoff = 1e-3
    with torch.no_grad(), ForwardRounding(seed=0, unit_roundoff=roundoff) as mode:
        doubled = x * 2
        view = doubled[1:3]
        view.add_(1.0)  # in place, through a view: moves doubled's numbers 1 and 2 once more, in place
        halved = doubled / 2
    expected = (x * 2).detach()
    expected[1:3] += 1
    assert view.data_ptr() == doubled.data_ptr() + doubled.element_size()  # still a view of doubled
    # doubled moved once by its own op and, in 1:3, once by add_ (each relative, at most roundoff); halved once more
    bound = (1 + roundoff) ** 2 - 1
    assert ((doubled - expected).abs() <= bound * expected.abs()).all()
    assert ((doubled - expected).abs() > 0).all()  # every number moved
    assert ((halved - doubled / 2).abs() <= roundoff * (doubled / 2).abs()).all()
    assert mode.ops == 3  # mul, add_, div: the view is not an op that rounds
    assert torch.equal(x, leaf((5,), 0, torch.float64))  # the leaf is the program's input: not moved


def test_the_same_seed_moves_the_same_way():
    x = leaf((4,), 1, torch.float64).detach()
    runs = []
    for seed in (3, 3, 4):
        with ForwardRounding(seed=seed, unit_roundoff=1e-6):
            runs.append(x.exp())
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_the_program_computes_in_its_lowest_precision_dtype():
    def autocast_linear(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(x, w).float().sum()

    cases = [(autocast_linear, torch.float32, torch.bfloat16), (residue, torch.float32, torch.float32),
             (residue, torch.float64, torch.float64)]
    for fn, dtype, computes_in in cases:
        shapes = ((4, 3), (1, 3)) if fn is autocast_linear else ((4, 3), (1, 1))
        args = [leaf(shape, i, dtype) for i, shape in enumerate(shapes)]
        assert _Oracle(_Subject(fn, args, False, None), "float64").computes_in == computes_in, fn.__name__


def test_a_gradient_that_is_all_forward_rounding_is_not_a_finding_for_a_compiled_forward():
    """The float32 forward's residue is the whole gradient (R 1e-6, the exact gradient 1e-16): an engine that
    computes the forward otherwise (here in float64) is 100% off R, and within the forward's rounding."""
    leaves = [leaf(shape, seed) for shape, seed in RESIDUE_LEAVES]
    report = refgrad_check.check(residue, *leaves, engines=("eager", ForwardInFloat64()), reproducer_dir=None)
    assert report.passed, str(report)
    result = report.results["forward_in_float64"]["arg1"]
    assert result.max_rel > 0.5 and result.max_abs > 1e3 * report.results["eager"]["arg1"].max_abs, str(report)


def test_the_same_engine_without_a_compiled_forward_still_fails():
    """Without compiles_forward the allowance is not given: the residue is over the rule's other terms."""

    class NotCompiling(ForwardInFloat64):
        compiles_forward = False

    leaves = [leaf(shape, seed) for shape, seed in RESIDUE_LEAVES]
    report = refgrad_check.check(residue, *leaves, engines=("eager", NotCompiling()), reproducer_dir=None)
    assert not report.results["forward_in_float64"]["arg1"].passed, str(report)


def test_a_wrong_gradient_of_a_compiled_forward_still_fails():
    """The allowance is rounding-sized: 1% off every gradient of a well-conditioned program fails."""
    def tanh_linear(x, w):
        return torch.tanh(F.linear(x, w)).sum()

    leaves = [leaf((4, 3), 1), leaf((2, 3), 2)]
    report = refgrad_check.check(tanh_linear, *leaves, engines=("eager", ForwardInFloat64(), ForwardInFloat64(1.01)),
                                 reproducer_dir=None)
    assert all(result.passed for result in report.results["forward_in_float64"].values()), str(report)
    assert not any(result.passed for result in report.results["forward_in_float64_times_1.01"].values()), str(report)


def test_a_tie_that_the_moves_break_is_not_rounding():
    """maximum(2 x, 2 y) with x == y: eager splits the gradient, 1 each; the forward's moves (of 2 x and 2 y, op
    results) break the tie, a jump to 2 or 0 that is left out of the sensitivity (not linear in the move). An
    engine that gives it all to x still fails."""

    class TieToFirst(ForwardInFloat64):
        def gradients(self, forward, grad_outputs):
            run = forward()
            return {name: torch.full_like(leaf, 2.0) if name == "arg0" else torch.zeros_like(leaf)
                    for name, leaf in run.leaves.items()}

    x = leaf((3,), 7)
    y = x.detach().clone().requires_grad_()
    report = refgrad_check.check(lambda x, y: torch.maximum(2 * x, 2 * y).sum(), x, y,
                                 engines=("eager", TieToFirst()), reproducer_dir=None)
    assert report.results["eager"]["arg0"].passed, str(report)
    assert not report.results["forward_in_float64"]["arg0"].passed, str(report)
    assert not report.results["forward_in_float64"]["arg1"].passed, str(report)
