"""refgrad.check(fn, *args, inputs=NAMES): torch.autograd.grad over a subset of the leaves (issue 19).

Every engine computes the gradients of the leaves named in inputs only, as
torch.autograd.grad(outputs, [leaves...], grad_outputs, allow_unused=True) does; the oracle captures the same
backward; the report lists those gradients only; a planted error is caught and localized (node hooks,
compiled autograd's graph, probes) and its reproducer re-runs in `build/refgrad check`; post-accumulate-grad
hooks fire in no engine; a name that is not a leaf is refused, naming it.

Run as tests/python/conftest.py says, e.g.
    .venv/bin/python -m pytest -q tests/python/test_check_inputs.py
"""
import os
import subprocess

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import refgrad
import refgrad.check as refgrad_check
from refgrad.engines import CompiledAutograd, Eager, TorchCompile, differentiate

from planting import plant_in_op, scale_op_results

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(REPO, "build", "refgrad")


class Model(torch.nn.Module):
    """Three leaves: linear.weight, linear.bias and the argument x (arg0); tanh between the linear and the sum."""

    def __init__(self, hooks=False):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.hooks = hooks

    def forward(self, x):
        hidden = self.linear(x)
        if self.hooks:
            hidden.register_hook(lambda grad: grad * 3)
            self.linear.weight.register_hook(lambda grad: grad + 1)
            self.linear.bias.register_hook(lambda grad: grad * 2)
            self.linear.bias.register_post_accumulate_grad_hook(lambda leaf: None)
            self.linear.weight.register_post_accumulate_grad_hook(lambda leaf: None)
        return (torch.tanh(hidden) ** 2).sum()


INPUTS = ["linear.weight", "arg0"]


@pytest.fixture
def model_and_x():
    torch.manual_seed(0)
    return Model(), torch.randn(4, 3, requires_grad=True)


class PerturbedNode:
    """torch.autograd.grad over the inputs the forward asks for (refgrad.engines.differentiate), with the
    outgoing grads of the first node named ``node`` scaled by 1.01 (a node post-hook): a planted bug."""

    def __init__(self, node, factor=1.01):
        self.name, self.node, self.factor = f"perturbed_{node}", node, factor

    def gradients(self, forward, grad_outputs, *, observe=None):
        run = forward()
        queue = [run.outputs[0].grad_fn]
        while queue[0].name() != self.node:
            queue += [n for n, _ in queue.pop(0).next_functions if n is not None]
        queue[0].register_hook(lambda inputs, outputs: tuple(None if g is None else g * self.factor for g in inputs))
        if observe is not None:
            observe(run)
        return differentiate(run, grad_outputs)


class ScaledGrad:
    """A black box: torch.autograd.grad over the inputs asked for, one returned gradient scaled by 1.01."""

    def __init__(self, gradient):
        self.name, self.gradient = f"scaled_{gradient}", gradient

    def gradients(self, forward, grad_outputs):
        grads = differentiate(forward(), grad_outputs)
        grads[self.gradient] = grads[self.gradient] * 1.01
        return grads


class IgnoresInputs:
    """An engine that runs backward() into every leaf whatever the forward asks."""

    name = "ignores_inputs"

    def gradients(self, forward, grad_outputs):
        run = forward()
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}


def test_two_of_three_leaves_pass_and_only_they_are_reported(model_and_x, tmp_path):
    model, x = model_and_x
    compiled = CompiledAutograd()
    report = refgrad_check.check(model, x, engines=("eager", compiled, "torch_compile:aot_eager"), inputs=INPUTS,
                                 reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert list(report.results) == ["eager", "compiled_autograd", "torch_compile:aot_eager"]
    for grads in report.results.values():
        assert sorted(grads) == sorted(INPUTS), str(report)  # linear.bias is not asked for: no row
    assert compiled.captures >= 1 and compiled.compiled_calls >= 1  # compiled autograd compiled autograd.grad
    assert any("torch.autograd.grad over linear.weight, arg0" in note for note in report.notes)
    assert report.inputs == INPUTS and report.to_dict()["inputs"] == INPUTS
    for name in INPUTS:  # eager's torch.autograd.grad is R's, within rounding
        result = report.results["eager"][name]
        assert result.max_abs <= 1e-6 and result.max_rel <= 1e-5, (name, result)
    assert os.listdir(tmp_path) == []  # no engine failed: no reproducer


class Watching:
    """Runs ``inner`` and records, after its backward, which leaves of its forward hold a .grad."""

    def __init__(self, inner):
        self.inner, self.name, self.written = inner, f"watched_{inner.name}", []

    def gradients(self, forward, grad_outputs):
        runs = []

        def kept(transform=None):
            runs.append(forward(transform))
            return runs[-1]

        grads = self.inner.gradients(kept, grad_outputs)
        self.written += [name for run in runs for name, leaf in run.leaves.items() if leaf.grad is not None]
        return grads


def test_no_engine_writes_a_grad(model_and_x, tmp_path):
    """torch.autograd.grad returns the gradients: no engine accumulates into any leaf's .grad."""
    model, x = model_and_x
    watched = [Watching(Eager()), Watching(CompiledAutograd()), Watching(TorchCompile("aot_eager"))]
    report = refgrad_check.check(model, x, engines=["eager"] + watched, inputs=INPUTS, reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert [engine.written for engine in watched] == [[], [], []]


def test_a_single_name_is_one_input(model_and_x, tmp_path):
    model, x = model_and_x
    report = refgrad_check.check(model, x, engines=("eager",), inputs="linear.bias", reproducer_dir=str(tmp_path))
    assert report.passed and list(report.results["eager"]) == ["linear.bias"], str(report)


@pytest.mark.parametrize("node", ["TanhBackward0", "TBackward0"])
def test_a_planted_node_error_is_caught_and_localized(model_and_x, tmp_path, node):
    """Node hooks under torch.autograd.grad: the node that scales its outgoing grads is named."""
    model, x = model_and_x
    perturbed = PerturbedNode(node)
    report = refgrad_check.check(model, x, engines=("eager", perturbed), inputs=INPUTS, reproducer_dir=str(tmp_path))
    failed = sorted(name for name, result in report.results[perturbed.name].items() if not result.passed)
    assert failed == (sorted(INPUTS) if node == "TanhBackward0" else ["linear.weight"]), str(report)
    assert sorted(report.results[perturbed.name]) == sorted(INPUTS)
    divergence = report.first_divergence[perturbed.name]
    assert divergence.localized and divergence.node == node, str(divergence)
    program = refgrad.Bundle.load(report.reproducers[perturbed.name]).program
    assert program.code[divergence.pc].node == node
    assert {output.name for output in program.outputs} == set(INPUTS)  # autograd.grad's captures


class WithUnused(Model):
    """Model with a parameter its forward never uses: torch.autograd.grad gives it None (allow_unused)."""

    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Parameter(torch.ones(2))


def test_an_input_no_output_reaches_gets_no_gradient_and_localization_still_works(tmp_path):
    torch.manual_seed(0)
    model, x = WithUnused(), torch.randn(4, 3)
    perturbed = PerturbedNode("TanhBackward0")
    report = refgrad_check.check(model, x, engines=("eager", "compiled_autograd", perturbed),
                                 inputs=["unused", "linear.weight"], reproducer_dir=str(tmp_path))
    assert all(list(grads) == ["linear.weight"] for grads in report.results.values()), str(report)
    assert report.engine_passed("eager") and report.engine_passed("compiled_autograd"), str(report)
    assert not report.results[perturbed.name]["linear.weight"].passed
    divergence = report.first_divergence[perturbed.name]
    assert divergence.localized and divergence.node == "TanhBackward0", str(divergence)


def test_a_wrong_node_of_compiled_autograd_is_read_from_its_graph_of_autograd_grad(model_and_x, tmp_path,
                                                                                   monkeypatch):
    """Compiled autograd's TanhBackward0 op made wrong: its graph of torch.autograd.grad (which returns the
    captured grads, and calls no call_accumulate_grad) is read node by node from the plain run."""
    model, x = model_and_x
    plant_in_op(monkeypatch, "TanhBackward0")
    planted = CompiledAutograd(name="planted")
    report = refgrad_check.check(model, x, engines=("eager", planted), inputs=INPUTS, reproducer_dir=str(tmp_path))
    assert sorted(n for n, r in report.results["planted"].items() if not r.passed) == sorted(INPUTS), str(report)
    divergence = report.first_divergence["planted"]
    assert divergence.node == "TanhBackward0", str(divergence)
    assert "compiled autograd's graph of the plain run" in divergence.graph, divergence.graph


def test_a_compiler_bug_is_localized_by_node_hooks(model_and_x, tmp_path):
    """A backend that scales every tanh_backward it compiles: not the graph it was given, so a second run with
    node hooks names the node."""
    model, x = model_and_x
    buggy = CompiledAutograd(backend=aot_autograd(fw_compiler=scale_op_results(torch.ops.aten.tanh_backward.default)),
                             name="buggy_compiler")
    report = refgrad_check.check(model, x, engines=("eager", buggy), inputs=INPUTS, reproducer_dir=str(tmp_path))
    assert sorted(n for n, r in report.results["buggy_compiler"].items() if not r.passed) == sorted(INPUTS)
    divergence = report.first_divergence["buggy_compiler"]
    assert divergence.node == "TanhBackward0", str(divergence)
    assert "second backward" in divergence.graph, divergence.graph


def test_a_black_box_error_is_localized_at_the_captured_gradient(model_and_x, tmp_path):
    """Probes read each input's gradient at its capture (`output ^name`), where they read a leaf's .grad."""
    model, x = model_and_x
    scaled = ScaledGrad("linear.weight")
    report = refgrad_check.check(model, x, engines=("eager", scaled), inputs=INPUTS, reproducer_dir=str(tmp_path))
    assert [n for n, r in report.results[scaled.name].items() if not r.passed] == ["linear.weight"], str(report)
    divergence = report.first_divergence[scaled.name]
    assert divergence.localized and divergence.node == "TBackward0", str(divergence)
    assert "read at ^linear.weight" in divergence.gradient and "captured by torch.autograd.grad" in divergence.gradient
    bundle = refgrad.Bundle.load(report.reproducers[scaled.name])
    assert sorted(bundle.results[1].tensors.keys() - {divergence.register}) == ["^arg0", "^linear.weight"]
    assert bundle.provenance["inputs"] == "linear.weight, arg0"


def test_the_reproducer_reruns_in_refgrad_check(model_and_x, tmp_path):
    if not os.path.exists(CLI):
        pytest.skip(f"{CLI} is missing (meson setup build -Dpython=false && ninja -C build refgrad)")
    model, x = model_and_x
    scaled = ScaledGrad("arg0")
    report = refgrad_check.check(model, x, engines=("eager", scaled), inputs=INPUTS, reproducer_dir=str(tmp_path))
    run = subprocess.run([CLI, "check", report.reproducers[scaled.name]], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    failing = [line.split() for line in run.stdout.splitlines() if line.rstrip().endswith("FAIL")]
    assert [(row[1], row[3]) for row in failing] == [(scaled.name, "^arg0")], run.stdout
    assert "3 of 4 gradients pass" in run.stdout, run.stdout


def test_hooks_fire_as_under_autograd_grad(tmp_path):
    """No post-accumulate-grad hook fires, nor a tensor hook on a leaf outside inputs (linear.bias): in every
    engine, as in torch; an engine that runs backward() instead fails on its hooks and its extra gradient."""
    torch.manual_seed(1)
    model, x = Model(hooks=True), torch.randn(4, 3, requires_grad=True)
    report = refgrad_check.check(model, x, engines=("eager", "compiled_autograd", IgnoresInputs()), inputs=INPUTS,
                                 reproducer_dir=str(tmp_path))
    eager = report.hooks["eager"]
    assert sorted(eager) == ["tensor hook 0 on the output of AddmmBackward0", "tensor hook 1 on linear.weight"], eager
    assert report.engine_passed("eager") and report.engine_passed("compiled_autograd"), str(report)
    assert report.hooks["compiled_autograd"] == eager
    ignoring = report.hooks["ignores_inputs"]
    assert "post-accumulate-grad hook 4 on linear.weight" in ignoring and not report.hooks_as_eager("ignores_inputs")
    assert report.results["ignores_inputs"]["linear.bias"].note.startswith("not among inputs")


@pytest.mark.parametrize("inputs, message", [
    (["linear.weight", "linear.wieght"], "inputs names 'linear.wieght', which is not among the leaves of "
                                         "test_check_inputs.Model"),
    ([], "inputs is empty"),
    (["arg0", "arg0"], "inputs names 'arg0' more than once"),
    ([0], "inputs must be a leaf's name or a sequence of them"),
])
def test_inputs_that_name_no_leaf_are_refused(model_and_x, tmp_path, inputs, message):
    model, x = model_and_x
    with pytest.raises(refgrad.Error, match=message) as raised:
        refgrad_check.check(model, x, engines=("eager",), inputs=inputs, reproducer_dir=str(tmp_path))
    if "wieght" in message:
        assert "linear.weight, linear.bias, arg0" in str(raised.value)  # the leaves it could have named
