"""Issue 7, Deliver 6: inductor, in one module since it compiles slowly on two cores.

The zoo's MLP and transformer layer checked against refgrad's oracle with eager, compiled autograd
compiling the backward with inductor, and torch.compile (inductor; its backward is AOT autograd's
compiled backward, a black box). Slow: with inductor's cache cold, about 1.5 minutes on two cores (the
transformer layer two thirds of it; 8.7 minutes while C++ builds shared the cores), half a minute with its
cache warm. Run as tests/python/conftest.py says:
    PYTHONPATH=build-py/src/python:src/python python -m pytest tests/python/test_inductor.py -q
"""
import os

import pytest
import torch
import torch.nn.functional as F

import refgrad.check as refgrad_check
import refgrad.zoo as zoo

ENGINES = ("eager", "compiled_autograd:inductor", "torch_compile")


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_inductor_agrees_with_the_oracle(name, tmp_path):
    model, forward = zoo.ZOO[name]()
    report = refgrad_check.check(forward, model, engines=ENGINES, reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert list(report.results) == list(ENGINES)
    expected = sorted(f"arg0.{parameter}" for parameter, _ in model.named_parameters())
    for grads in report.results.values():
        assert sorted(grads) == expected
        assert all(result.passed for result in grads.values())
    assert report.first_divergence == dict.fromkeys(ENGINES), str(report)
    assert report.reproducers == {} and os.listdir(tmp_path) == []


def test_a_forward_that_inductor_rounds_otherwise_is_not_a_finding(tmp_path):
    """refgrad.fuzz case 100130 (generator version 2), minimized: a batch_norm over two numbers per channel
    amplifies the forward's rounding of x - mean, and torch.compile's forward, compiled by Inductor, rounds
    otherwise than eager's. Its float32 bias gradient was 4.3e-6 (1.2e-5 relative) off R, the backward of
    eager's forward, over the bound then (2.9e-6), yet closer to the program's float64 gradient than eager's
    (6.7e-6 against 1.1e-5; Inductor in float64 agrees with it to 4e-15): a false finding. An engine that
    compiles the forward too is allowed the spread of eager's gradient around the float64 program's."""
    def pixel_unshuffle_batch_norm(x4, w6, w7):
        v5 = F.batch_norm(F.pixel_unshuffle(x4, 2), torch.zeros(12), torch.ones(12), w6, w7, training=True)
        return torch.logsumexp(torch.logsumexp(v5, 1), 1)

    leaves = [torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
              .float().requires_grad_() for shape, seed in (((1, 3, 2, 4), 43715), ((12,), 12022), ((12,), 16877))]
    report = refgrad_check.check(pixel_unshuffle_batch_norm, *leaves, engines=("eager", "torch_compile"),
                                 reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    bias = report.results["torch_compile"]["arg2"]
    assert bias.max_abs > 2e-6, str(report)  # Inductor's rounding is still there, over eager's own error
    assert bias.max_abs > 32 * report.results["eager"]["arg2"].max_abs, str(report)


def test_a_wrong_gradient_of_a_compiled_forward_still_fails():
    """The allowance for a compiled forward is rounding-sized: Inductor's wrong avg_pool2d(ceil_mode=True)
    gradient (pytorch/pytorch#198119, refgrad.fuzz's one-hour campaign) still fails."""
    x = torch.randn((2, 3, 3, 5), generator=torch.Generator().manual_seed(0)).requires_grad_()
    report = refgrad_check.check(lambda x: F.avg_pool2d(x, 2, ceil_mode=True).square().sum(), x,
                                 engines=("eager", "torch_compile"))
    assert report.results["eager"]["arg0"].passed, str(report)
    assert not report.results["torch_compile"]["arg0"].passed, str(report)


def test_a_gradient_that_is_all_forward_rounding_is_not_a_finding(tmp_path):
    """refgrad.fuzz case 200534 (generator version 3), reduced: ``layer_norm(x).sum()`` is 0 exactly and ~1e-7
    in float32, and every gradient is scaled by it. Inductor computes it otherwise, 53% and 99.7% off R; the
    spread of eager's gradient around the float64 program's (whose gradient is ~0) is no measure here, as max|R|
    is the residue itself: the forward's sensitivity to a rounding of every op's result is
    (refgrad.check.forward_rounding)."""
    def residue(x, w):
        return F.linear((F.layer_norm(x, (3,)).sum() / (x.abs() + 1)).reshape(-1, 1), w)

    leaves = [torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
              .float().requires_grad_() for shape, seed in (((4, 3), 5667), ((1, 1), 41366))]
    report = refgrad_check.check(residue, *leaves, engines=("eager", "torch_compile"), reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert report.results["torch_compile"]["arg1"].max_rel > 0.1, str(report)  # Inductor's residue is its own


def test_an_autocast_forward_that_inductor_rounds_otherwise_is_not_a_finding(tmp_path):
    """refgrad.fuzz case 200588 (generator version 3), reduced: under autocast(bfloat16) eager rounds the
    upsampled convolution to bfloat16 before the huber loss; Inductor fuses them and rounds otherwise, 2e-3 off R
    in the target's gradient (eager: 3e-8). The forward computes in bfloat16, whose rounding is the allowance's
    scale (float32's refused the spread, 3.7e-3 of max|R| = 1)."""
    def upsampled_huber(x, w, other, target):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            upsampled = F.interpolate(F.conv2d(x, w, None, stride=2, padding=1), scale_factor=2, mode="bilinear",
                                      align_corners=False)
            return F.huber_loss(torch.cat([upsampled, other]), target, reduction="none")

    leaves = [torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
              .float().requires_grad_()
              for shape, seed in (((1, 1, 4, 5), 29612), ((3, 1, 1, 1), 63548), ((2, 3, 6, 8), 48195),
                                  ((3, 3, 6, 8), 32111))]
    report = refgrad_check.check(upsampled_huber, *leaves, engines=("eager", "torch_compile"),
                                 reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    target = report.results["torch_compile"]["arg3"]
    assert target.max_abs > 1e3 * report.results["eager"]["arg3"].max_abs, str(report)
