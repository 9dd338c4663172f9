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
