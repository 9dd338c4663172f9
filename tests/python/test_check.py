"""refgrad.check and refgrad.engines: engines against the oracle, first divergence, reproducers.

Run as tests/python/conftest.py says, e.g.
    PYTHONPATH=build-py/src/python:src/python python -m pytest tests/python/test_check.py -q
build/refgrad (meson setup build -Dpython=false && ninja -C build refgrad) re-runs the reproducers;
the test that needs it is skipped, saying so, when it is missing.
"""
import copy
import os
import subprocess

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import refgrad
import refgrad.check as refgrad_check
from refgrad.engines import CompiledAutograd, EngineError, TorchCompile, engine

from planting import scale_op_results

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(REPO, "build", "refgrad")


class MLPLoss(torch.nn.Module):
    """nn.Sequential Linear-Tanh-Linear and an MSE loss: forward(x, target) returns the loss."""

    def __init__(self, *layers):
        super().__init__()
        self.net = torch.nn.Sequential(*layers) if layers else torch.nn.Sequential(
            torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))

    def forward(self, x, target):
        return torch.nn.functional.mse_loss(self.net(x), target)


MLP_GRADS = ["net.2.bias", "net.2.weight", "net.0.bias", "net.0.weight"]  # in the oracle's order


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return MLPLoss(), torch.randn(5, 3), torch.randn(5, 2)


class Scaled:
    """An engine that returns eager's gradients with one of them scaled by 1.01."""

    def __init__(self, gradient, factor=1.01):
        self.name = f"scaled_{gradient}"
        self.gradient, self.factor = gradient, factor

    def gradients(self, forward, grad_outputs):
        run = forward()
        torch.autograd.backward(run.outputs, grad_outputs)
        grads = {name: leaf.grad for name, leaf in run.leaves.items()}
        grads[self.gradient] = grads[self.gradient] * self.factor
        return grads


class Float64ThenCast:
    """A correct engine that sums in another order: the forward and backward in float64, the gradients
    cast back to float32."""

    name = "float64_then_cast"

    def gradients(self, forward, grad_outputs):
        def in_float64(module):
            return lambda *args: module.double()(*[arg.double() for arg in args])

        run = forward(transform=in_float64)
        torch.autograd.backward(run.outputs, [g.double() for g in grad_outputs])
        return {name: leaf.grad.float() for name, leaf in run.leaves.items()}


class PerturbedNode:
    """Eager autograd with a node post-hook that scales the outgoing grads of the first node named
    ``node`` (walking from the root): a bug planted in one node of the backward."""

    def __init__(self, node, factor=1.01):
        self.name = f"perturbed_{node}"
        self.node, self.factor = node, factor

    def gradients(self, forward, grad_outputs, *, observe=None):
        run = forward()
        target = self._find(run.outputs[0].grad_fn)
        target.register_hook(lambda inputs, outputs: tuple(None if g is None else g * self.factor for g in inputs))
        if observe is not None:
            observe(run)
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}

    def _find(self, root):
        queue, seen = [root], set()
        while queue:
            node = queue.pop(0)
            if node.name() == self.node:
                return node
            seen.add(node)
            queue += [n for n, _ in node.next_functions if n is not None and n not in seen]
        raise AssertionError(f"no node {self.node}")


def test_mlp_passes_for_eager_and_compiled_autograd(mlp, tmp_path):
    model, x, target = mlp
    compiled = CompiledAutograd()  # aot_eager
    report = refgrad_check.check(model, x, target, engines=("eager", compiled), reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert list(report.results) == ["eager", "compiled_autograd"]
    for grads in report.results.values():
        assert list(grads) == MLP_GRADS
        for result in grads.values():
            assert result.passed and result.max_abs <= result.tolerance
    assert report.first_divergence == {"eager": None, "compiled_autograd": None}
    assert report.reproducers == {} and os.listdir(tmp_path) == []
    # compiled autograd really ran: it captured a graph and compiled code was called
    assert compiled.captures >= 1 and compiled.compiled_calls >= 1


def test_engine_names():
    assert engine("compiled_autograd").name == "compiled_autograd"
    assert engine("compiled_autograd").backend == "aot_eager"
    assert engine("compiled_autograd:inductor").backend == "inductor"
    assert engine("torch_compile").backend == "inductor"
    assert engine("torch_compile:aot_eager").name == "torch_compile:aot_eager"
    with pytest.raises(EngineError, match="unknown engine 'autograd'"):
        engine("autograd")
    with pytest.raises(EngineError, match="neither an engine name"):
        engine(object())


def test_cuda_engines_are_skipped_without_a_gpu(mlp, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the CUDA engine runs instead of being skipped")
    model, x, target = mlp
    report = refgrad_check.check(model, x, target, engines=("eager", "eager:cuda"), reproducer_dir=str(tmp_path))
    assert report.passed and list(report.results) == ["eager"]
    assert "no GPU" in report.skipped["eager:cuda"]
    assert "skipping engine eager:cuda" in capsys.readouterr().out


def test_a_scaled_gradient_fails_alone_and_writes_a_reproducer(mlp, tmp_path):
    model, x, target = mlp
    scaled = Scaled("net.2.weight")
    report = refgrad_check.check(model, x, target, engines=("eager", scaled), reproducer_dir=str(tmp_path))
    assert not report.passed
    failed = [name for name, result in report.results[scaled.name].items() if not result.passed]
    assert failed == ["net.2.weight"]
    result = report.results[scaled.name]["net.2.weight"]
    assert result.max_rel == pytest.approx(0.01, rel=1e-3)  # the 1.01 planted
    assert report.first_divergence["eager"] is None
    # a black box: localized through the gradients of the forward's intermediates; the last node
    # before net.2.weight's AccumulateGrad is the TBackward0 of the second Linear
    divergence = report.first_divergence[scaled.name]
    assert divergence.node == "TBackward0", str(divergence)
    assert "was not recorded" in divergence.gradient and "intermediates" in divergence.graph
    assert list(report.reproducers) == [scaled.name]
    path = report.reproducers[scaled.name]
    assert os.path.dirname(path) == str(tmp_path) and os.listdir(tmp_path) == [os.path.basename(path)]

    bundle = refgrad.Bundle.load(path)
    assert [r.engine for r in bundle.results] == ["eager", scaled.name]
    leaf_grads = sorted(name for name in bundle.results[1].tensors if name.startswith("@"))
    assert leaf_grads == sorted("@" + name for name in MLP_GRADS)
    assert divergence.register in bundle.results[1].tensors  # its value at the divergence (docs/program.md)
    assert bundle.comparison == refgrad.Comparison("reference", "refgrad", None, None)
    provenance = bundle.provenance
    assert provenance["torch_version"] == torch.__version__
    assert provenance["engine"] == scaled.name and provenance["fn"].endswith("MLPLoss")
    assert provenance["python_calls"] == "none" and provenance["date"]


def test_refgrad_check_reruns_a_reproducer_and_fails_on_the_gradient(mlp, tmp_path):
    if not os.path.exists(CLI):
        pytest.skip(f"{CLI} is missing (meson setup build -Dpython=false && ninja -C build refgrad)")
    model, x, target = mlp
    scaled = Scaled("net.0.bias")
    report = refgrad_check.check(model, x, target, engines=("eager", scaled), reproducer_dir=str(tmp_path))
    run = subprocess.run([CLI, "check", report.reproducers[scaled.name]], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    failing = [line.split() for line in run.stdout.splitlines() if line.rstrip().endswith("FAIL")]
    assert [(row[1], row[3]) for row in failing] == [(scaled.name, "@net.0.bias")], run.stdout
    assert "7 of 8 gradients pass" in run.stdout
    # the bundle carries the divergence check found, and refgrad check prints it
    divergence = report.first_divergence[scaled.name]
    first_line = str(divergence).splitlines()[0]
    assert f"first divergence found by refgrad.check for {scaled.name}: {first_line}\n" in run.stdout
    provenance = refgrad.load(report.reproducers[scaled.name]).provenance
    assert provenance["divergence"] == first_line
    if divergence.localized:
        assert provenance["divergence_node"] == divergence.node and int(provenance["divergence_pc"]) == divergence.pc
        assert float(provenance["divergence_error"]) == divergence.error


def test_an_engine_that_sums_in_another_order_is_not_flagged(mlp, tmp_path):
    model, x, target = mlp
    report = refgrad_check.check(model, x, target, engines=("eager", Float64ThenCast()), reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    # it did differ from eager: the check is not passing it by comparing the same numbers
    eager, other = report.results["eager"], report.results["float64_then_cast"]
    assert any(eager[name].max_abs != other[name].max_abs for name in MLP_GRADS)


def test_each_engine_gets_a_fresh_module_and_rng_state(tmp_path):
    torch.manual_seed(1)
    model = MLPLoss(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5), torch.nn.Tanh(),
                    torch.nn.Linear(4, 2))
    model.train()
    x, target = torch.randn(6, 3), torch.randn(6, 2)
    before = copy.deepcopy(model.state_dict())
    rng = torch.random.get_rng_state()
    seen = []

    class Spy:
        name = "spy"

        def gradients(self, forward, grad_outputs):
            def spy(module):
                seen.append((module.net[1].running_mean.clone(), int(module.net[1].num_batches_tracked), module))
                return module

            run = forward(transform=spy)
            torch.autograd.backward(run.outputs, grad_outputs)
            return {name: leaf.grad for name, leaf in run.leaves.items()}

    report = refgrad_check.check(model, x, target, engines=("eager", Spy(), Spy()), reproducer_dir=str(tmp_path))
    # dropout draws the same mask for every engine and the oracle, or eager would disagree with R
    assert report.passed, str(report)
    assert len(seen) == 2 and seen[0][2] is not seen[1][2] and seen[0][2] is not model
    for running_mean, batches, _ in seen:  # each engine's copy starts from the user's running stats
        assert torch.equal(running_mean, before["net.1.running_mean"]) and batches == 0
    for name, value in model.state_dict().items():  # the user's module is untouched
        assert torch.equal(value, before[name]), name
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_leaves_are_named_by_parameter_and_argument(tmp_path):
    torch.manual_seed(2)
    linear = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3, requires_grad=True)
    scale = torch.randn(2, requires_grad=True)

    def fn(layer, inputs, weights):
        return (layer(inputs) * weights[0]).sum()

    report = refgrad_check.check(fn, linear, x, [scale], engines=("eager",), reproducer_dir=str(tmp_path))
    assert report.passed and sorted(report.results["eager"]) == ["arg0.bias", "arg0.weight", "arg1", "arg2.0"]
    assert x.grad is None and scale.grad is None and linear.weight.grad is None


GLOBAL_LAYER = torch.nn.Linear(3, 2)


def test_modules_and_tensors_in_fns_closure_and_globals_are_found_and_copied(tmp_path):
    torch.manual_seed(0)
    dw = torch.nn.Linear(3, 1)
    scale = torch.randn(1, requires_grad=True)
    x = torch.randn(4, 3)
    before = {name: p.detach().clone() for name, p in dw.named_parameters()}

    def fn(inputs):
        return (dw(torch.tanh(GLOBAL_LAYER(inputs) @ torch.ones(2, 3))) * scale).sum()

    class Doubles:  # an engine that changes the parameters it is given, to see that each engine gets a copy
        name = "doubles"

        def gradients(self, forward, grad_outputs):
            run = forward()
            with torch.no_grad():
                for leaf in run.leaves.values():
                    leaf.mul_(2)
            return {name: torch.zeros_like(leaf) for name, leaf in run.leaves.items()}

    report = refgrad_check.check(fn, x, engines=("eager", Doubles(), "compiled_autograd"),
                                 reproducer_dir=str(tmp_path))
    names = sorted(report.results["eager"])
    assert names == ["GLOBAL_LAYER.bias", "GLOBAL_LAYER.weight", "dw.bias", "dw.weight", "scale"]
    assert report.engine_passed("eager") and report.engine_passed("compiled_autograd"), report.format(eager=True)
    assert not report.engine_passed("doubles")
    # the user's modules and tensors are left as they were, gradients and values
    assert all(torch.equal(before[name], p) for name, p in dw.named_parameters())
    assert dw.weight.grad is None and scale.grad is None and GLOBAL_LAYER.weight.grad is None


def test_leaves_reached_through_another_function_are_refused(tmp_path):
    hidden = torch.nn.Linear(3, 1)

    def inner(x):
        return hidden(x)

    with pytest.raises(refgrad.Error, match=r"nor in fn's closure or the globals it names \(input0, input1\)"):
        refgrad_check.check(lambda x: inner(x).sum(), torch.randn(2, 3), reproducer_dir=str(tmp_path))


def test_a_gradient_of_the_wrong_dtype_or_shape_fails(mlp, tmp_path):
    model, x, target = mlp

    class Wrong:
        name = "wrong"

        def gradients(self, forward, grad_outputs):
            run = forward()
            torch.autograd.backward(run.outputs, grad_outputs)
            grads = {name: leaf.grad for name, leaf in run.leaves.items()}
            grads["net.0.bias"] = grads["net.0.bias"].double()
            grads["net.2.bias"] = grads["net.2.bias"][:1]
            grads["net.2.weight"] = torch.full_like(grads["net.2.weight"], float("nan"))
            del grads["net.0.weight"]
            return grads

    report = refgrad_check.check(model, x, target, engines=("eager", Wrong()), reproducer_dir=str(tmp_path))
    wrong = report.results["wrong"]
    assert not any(result.passed for result in wrong.values())
    assert wrong["net.0.bias"].note == "dtype torch.float64, expected torch.float32"
    assert wrong["net.2.bias"].note == "shape [1], R's [2]"
    assert wrong["net.2.weight"].note == "NaN in 8 elements where eager has none"
    assert wrong["net.0.weight"].note == "no gradient"


def test_nan_is_called_out_and_fails_where_eager_has_none(tmp_path):
    # sqrt(x) at x = 0 and x < 0: the gradient of x is inf at 0 and NaN below, in R and in eager alike
    x = torch.tensor([4.0, 0.0, -1.0], requires_grad=True)
    same = refgrad_check.check(lambda x: x.sqrt().sum(), x, engines=("eager",), reproducer_dir=str(tmp_path))
    result = same.results["eager"]["arg0"]
    assert result.passed and result.note == "NaN in 1 elements, as R; Inf in 1 elements, as R"
    assert "pass (NaN in 1 elements, as R; Inf in 1 elements, as R)" in same.format(eager=True)

    class NaNWhereEagerHasNone:
        name = "nan_engine"

        def gradients(self, forward, grad_outputs):
            run = forward()
            torch.autograd.backward(run.outputs, grad_outputs)
            return {"arg0": torch.full_like(run.leaves["arg0"].grad, float("nan"))}

    report = refgrad_check.check(lambda x: x.sqrt().sum(), x, engines=("eager", NaNWhereEagerHasNone()),
                                 reproducer_dir=str(tmp_path))
    result = report.results["nan_engine"]["arg0"]
    assert not result.passed and result.note == "NaN in 2 elements where eager has none"


def test_plain_tolerances_replace_the_rule(mlp, tmp_path):
    model, x, target = mlp
    loose = refgrad_check.check(model, x, target, engines=("eager", Scaled("net.2.weight")), rtol=0.02, atol=0.0,
                                reproducer_dir=str(tmp_path))
    assert loose.passed and "plain rule" in loose.rule
    with pytest.raises(refgrad.Error, match="both rtol and atol"):
        refgrad_check.check(model, x, target, rtol=0.1)


def test_to_dict_and_html_name_every_engine_and_gradient(mlp, tmp_path):
    model, x, target = mlp
    scaled = Scaled("net.0.weight")
    scaled.name = "<scaled & co>"
    report = refgrad_check.check(model, x, target, engines=("eager", scaled), reproducer_dir=str(tmp_path))
    as_dict = report.to_dict()
    assert as_dict["passed"] is False
    assert set(as_dict["results"]) == {"eager", "<scaled & co>"}
    for grads in as_dict["results"].values():
        assert list(grads) == MLP_GRADS and set(grads["net.0.bias"]) >= {"max_abs", "max_rel", "tolerance", "passed"}
    assert as_dict["first_divergence"]["eager"] is None
    assert as_dict["first_divergence"]["<scaled & co>"]["node"] == "TBackward0"
    assert as_dict["reproducers"]["<scaled & co>"].endswith(".safetensors")
    page = report._repr_html_()
    assert "&lt;scaled &amp; co&gt;" in page and "<scaled" not in page
    for name in MLP_GRADS:  # eager passed: its rows are shown only when asked for
        assert page.count(f">{name}</span></td>") == 1 and str(report).count(name) >= 1
    assert 'class="refgrad tex2jax_ignore mathjax_ignore"' in page and "text-align: left" in page
    assert "eager: all 4 gradients pass" in str(report)
    eager_rows = [line for line in report.format(eager=True).splitlines() if line.startswith("eager ")]
    assert [line.split()[1] for line in eager_rows] == MLP_GRADS


def test_the_summary_counts_gradients_engines_and_failures(mlp, tmp_path):
    model, x, target = mlp
    report = refgrad_check.check(model, x, target, engines=("eager", Scaled("net.0.weight")),
                                 reproducer_dir=str(tmp_path))
    first = str(report).splitlines()[0]
    assert first == ("refgrad.check test_check.MLPLoss: FAILED: 4 gradients, 2 engines; "
                     "1 failed: scaled_net.0.weight (1 of 4 gradients)")
    divergence = report.first_divergence["scaled_net.0.weight"]
    assert divergence.relative == pytest.approx(0.01, rel=1e-3)  # Scaled multiplies the gradient by 1.01
    assert "(1% of max|R|;" in str(report)
    # the bound rebuilt by hand from the report's own figures (docs/check.md's rule; float32 rtol 1.3e-6)
    eager, engine = report.results["eager"]["net.0.weight"], report.results["scaled_net.0.weight"]["net.2.bias"]
    eager_bias = report.results["eager"]["net.2.bias"]
    max_r = eager_bias.max_abs / eager_bias.max_rel if eager_bias.max_rel else 0.0
    assert 0 < eager.noise < 1e-5 and engine.noise == eager_bias.noise
    expected = 1.3e-6 * max_r + 32 * max(eager_bias.noise, eager_bias.max_abs) + torch.finfo(torch.float32).tiny
    assert engine.tolerance == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("node, label", [("TanhBackward0", "TanhBackward0"), ("TBackward0", "TBackward0"),
                                         ("MseLossBackward0", "MseLossBackward0")])
def test_first_divergence_names_the_perturbed_node(mlp, tmp_path, node, label):
    model, x, target = mlp
    perturbed = PerturbedNode(node)
    report = refgrad_check.check(model, x, target, engines=("eager", perturbed), reproducer_dir=str(tmp_path))
    assert not report.passed
    divergence = report.first_divergence[perturbed.name]
    assert divergence.localized, str(divergence)
    assert divergence.node == label
    assert report.first_divergence["eager"] is None
    program = refgrad.Bundle.load(report.reproducers[perturbed.name]).program
    assert program.code[divergence.pc].node == label
    assert divergence.instruction.split("=", 1)[1].split()[0] == label
    assert divergence.error > divergence.tolerance


def test_first_divergence_under_compiled_autograd(mlp, tmp_path):
    """A compiler backend that scales every tanh_backward result: compiled autograd's graph goes wrong
    at TanhBackward0, and the node hooks, traced into the compiled graph, find it there."""
    model, x, target = mlp
    buggy = CompiledAutograd(backend=aot_autograd(fw_compiler=scale_op_results(torch.ops.aten.tanh_backward.default)),
                             name="buggy_compiler")
    report = refgrad_check.check(model, x, target, engines=("eager", buggy), reproducer_dir=str(tmp_path))
    assert not report.passed
    assert [n for n, r in report.results["buggy_compiler"].items() if not r.passed] == ["net.0.bias", "net.0.weight"]
    divergence = report.first_divergence["buggy_compiler"]
    assert divergence.node == "TanhBackward0", str(divergence)
    assert "second backward" in divergence.graph


@pytest.mark.parametrize("op, node", [(torch.ops.aten.tanh_backward.default, "TanhBackward0"),
                                      (torch.ops.aten.mse_loss_backward.default, "MseLossBackward0")])
def test_first_divergence_of_a_black_box_compiled_forward(mlp, tmp_path, op, node):
    """torch.compile with a backward compiler that scales one op: the compiled backward is one
    CompiledFunctionBackward node; the node is found in the graph that compiled backward runs, read node by
    node from the run that failed (no probes: its compilation is the plain run's)."""
    model, x, target = mlp
    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=scale_op_results(op))
    buggy = TorchCompile(backend=backend, name="buggy_torch_compile")
    report = refgrad_check.check(model, x, target, engines=("eager", buggy), reproducer_dir=str(tmp_path))
    assert not report.passed
    divergence = report.first_divergence["buggy_torch_compile"]
    assert divergence.node == node, str(divergence)
    assert "no probes" in divergence.graph and "1 read node by node" in divergence.graph


def test_an_engine_without_the_probes_gradients_is_not_localized(mlp, tmp_path):
    model, x, target = mlp

    class NamedOnly(Scaled):
        def gradients(self, forward, grad_outputs):
            return {name: grad for name, grad in super().gradients(forward, grad_outputs).items()
                    if name in MLP_GRADS}

    report = refgrad_check.check(model, x, target, engines=("eager", NamedOnly("net.0.bias")),
                                 reproducer_dir=str(tmp_path))
    divergence = report.first_divergence["scaled_net.0.bias"]
    assert not divergence.localized
    assert str(divergence) == ("not localized: the engine returned no gradients for the recorded intermediates "
                               "(probe leaves)")


def test_torch_compile_is_a_black_box_that_passes(mlp, tmp_path):
    model, x, target = mlp
    report = refgrad_check.check(model, x, target, engines=("eager", "torch_compile:aot_eager"),
                                 reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert list(report.results["torch_compile:aot_eager"]) == MLP_GRADS


def test_compiled_autograd_with_inductor_on_a_tiny_mlp(tmp_path):
    """The one inductor test (inductor compiles slowly on two cores)."""
    torch.manual_seed(3)
    model = MLPLoss(torch.nn.Linear(2, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1))
    report = refgrad_check.check(model, torch.randn(3, 2), torch.randn(3, 1),
                                 engines=("eager", "compiled_autograd:inductor"), reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert list(report.results) == ["eager", "compiled_autograd:inductor"]


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class WithPythonCalls(torch.nn.Module):
    """A tensor hook (registered in the forward, so that every fresh copy has it) and an autograd.Function."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x):
        self.linear.weight.register_hook(lambda grad: 2 * grad)
        return Square.apply(self.linear(x)).sum()


def test_calls_into_python_are_named_in_the_report_and_the_reproducer(tmp_path):
    torch.manual_seed(4)
    model, x = WithPythonCalls(), torch.randn(4, 3)
    scaled = Scaled("linear.bias")
    report = refgrad_check.check(model, x, engines=("eager", scaled), reproducer_dir=str(tmp_path))
    assert report.results["eager"]["linear.weight"].passed and report.results["eager"]["linear.bias"].passed
    assert [n for n, r in report.results[scaled.name].items() if not r.passed] == ["linear.bias"]
    note = [line for line in report.notes if "calls Python" in line]
    assert len(note) == 1 and "tensor_pre hook" in note[0] and "autograd.Function backward" in note[0]
    provenance = refgrad.Bundle.load(report.reproducers[scaled.name]).provenance
    assert provenance["python_calls"].startswith("needs Python")
    assert "autograd.Function backward" in provenance["python_calls"]


class ForgetsGrad(Scaled):
    """An engine that drops the leaves' existing .grad before its backward (no accumulation)."""

    def __init__(self):
        super().__init__("net.0.bias", factor=1.0)
        self.name = "forgets_grad"

    def gradients(self, forward, grad_outputs):
        def dropping_grads(fn):
            for parameter in fn.parameters():
                parameter.grad = None
            return fn

        run = forward(transform=dropping_grads)
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}


def test_accumulation_into_an_existing_grad_is_checked_with_keep_grad(mlp, tmp_path):
    model, x, target = mlp
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 0.5)
    kept = refgrad_check.check(model, x, target, engines=("eager", "compiled_autograd", ForgetsGrad()),
                               keep_grad=True, reproducer_dir=str(tmp_path))
    assert kept.engine_passed("eager") and kept.engine_passed("compiled_autograd"), str(kept)
    forgot = kept.results["forgets_grad"]
    assert not any(r.passed for r in forgot.values()) and all(r.max_abs == pytest.approx(0.5) for r in forgot.values())
    # the reproducer's program starts from the kept .grad, so refgrad check accumulates as the engines should
    leaves = refgrad.Bundle.load(kept.reproducers["forgets_grad"]).program.leaves
    assert all(leaf.grad is not None for leaf in leaves)
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in model.parameters())
    fresh = refgrad_check.check(model, x, target, engines=("eager", ForgetsGrad()), reproducer_dir=str(tmp_path))
    assert fresh.passed  # without keep_grad every .grad starts as None


def test_a_leaf_used_twice(tmp_path):
    torch.manual_seed(5)
    w, x = torch.randn(3, requires_grad=True), torch.randn(3)
    report = refgrad_check.check(lambda w, x: (torch.tanh(w * x) + w).sum(), w, x, reproducer_dir=str(tmp_path))
    assert report.passed and list(report.results["compiled_autograd"]) == ["arg0"]


def test_an_engine_that_raises_fails_and_the_others_are_still_checked(mlp, tmp_path):
    model, x, target = mlp

    class Raises:
        name = "raises"

        def gradients(self, forward, grad_outputs):
            raise RuntimeError("no kernel for this op\nmore detail")

    report = refgrad_check.check(model, x, target, engines=("eager", Raises(), "compiled_autograd"),
                                 reproducer_dir=str(tmp_path))
    assert list(report.results) == ["eager", "raises", "compiled_autograd"]
    assert report.engine_passed("eager") and report.engine_passed("compiled_autograd")
    # one error row that says why, no nan rows per gradient
    assert report.results["raises"] == {} and report.errors["raises"] == "RuntimeError: no kernel for this op"
    rows = [line for line in str(report).splitlines() if line.startswith("raises ")]
    assert len(rows) == 1 and rows[0].endswith("ERROR: RuntimeError: no kernel for this op") and "nan" not in rows[0]
    assert str(report).splitlines()[0].endswith("1 failed: raises (raised)")
    assert str(report.first_divergence["raises"]) == "not localized: raises raised RuntimeError: no kernel for this op"
    assert report.reproducers == {}


class WithHooks(torch.nn.Module):
    """Registers, in its forward, a tensor hook on a non-leaf, one on a parameter and a
    post-accumulate-grad hook (which torch calls with the leaf after writing its .grad)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x):
        hidden = self.linear(x)
        hidden.register_hook(lambda grad: grad * 3)
        self.linear.weight.register_hook(lambda grad: grad + 1)
        self.linear.bias.register_post_accumulate_grad_hook(lambda leaf: None)
        return torch.tanh(hidden).sum()


class TwoBackwards:
    """Eager autograd run twice over a retained graph: every gradient doubles, every hook fires twice."""

    name = "two_backwards"

    def gradients(self, forward, grad_outputs, *, observe=None):
        run = forward()
        torch.autograd.backward(run.outputs, grad_outputs, retain_graph=True)
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}


def test_hooks_fire_as_eager_fires_them(tmp_path):
    torch.manual_seed(6)
    model, x = WithHooks(), torch.randn(4, 3)
    report = refgrad_check.check(model, x, engines=("eager", "compiled_autograd", TwoBackwards()),
                                 reproducer_dir=str(tmp_path))
    # eager's order, as torch 2.13 fires them: the non-leaf's hook, then per leaf its tensor hook
    # before AccumulateGrad and the post-accumulate-grad hook after it
    eager = report.hooks["eager"]
    assert sorted(eager) == ["post-accumulate-grad hook 2 on linear.bias",
                             "tensor hook 0 on the output of AddmmBackward0", "tensor hook 1 on linear.weight"]
    assert eager[0] == "tensor hook 0 on the output of AddmmBackward0"
    assert report.engine_passed("eager") and report.engine_passed("compiled_autograd"), str(report)
    assert report.hooks["compiled_autograd"] == eager
    assert report.hooks["two_backwards"] == eager + eager
    assert not report.hooks_as_eager("two_backwards") and not report.engine_passed("two_backwards")
    assert "two_backwards: FAIL: hooks fired otherwise than eager's" in str(report)
    assert "compiled_autograd: hooks fired as eager's (3 calls)" in str(report)


def test_a_reproducer_under_the_plain_rule_reruns_with_the_plain_bound(mlp, tmp_path):
    if not os.path.exists(CLI):
        pytest.skip(f"{CLI} is missing (meson setup build -Dpython=false && ninja -C build refgrad)")
    model, x, target = mlp
    scaled = Scaled("net.0.weight", factor=1.001)
    report = refgrad_check.check(model, x, target, engines=("eager", scaled), rtol=1e-4, atol=0.0,
                                 reproducer_dir=str(tmp_path))
    assert [n for n, r in report.results[scaled.name].items() if not r.passed] == ["net.0.weight"]
    bundle = refgrad.Bundle.load(report.reproducers[scaled.name])
    assert [r.engine for r in bundle.results] == ["eager", scaled.name]
    assert bundle.comparison == refgrad.Comparison("plain", "refgrad", 1e-4, 0.0)
    run = subprocess.run([CLI, "check", report.reproducers[scaled.name]], capture_output=True, text=True)
    assert run.returncode == 1 and "7 of 8 gradients pass" in run.stdout, run.stdout + run.stderr


def test_the_oracle_at_float32(mlp, tmp_path):
    model, x, target = mlp
    report = refgrad_check.check(model, x, target, engines=("eager", Scaled("net.2.bias")), precision="float32",
                                 reproducer_dir=str(tmp_path))
    assert report.precision == "float32" and "float32" in str(report)
    assert report.engine_passed("eager") and not report.engine_passed("scaled_net.2.bias")
    with pytest.raises(refgrad.Error, match="precision must be 'float64' or 'float32'"):
        refgrad_check.check(model, x, target, precision="float16")


def test_compiled_engines_that_run_nothing_compiled_fail(mlp):
    """With dynamo disabled torch.compile silently runs eager code; the compiled engines must not pass."""
    model, x, target = mlp
    with torch._dynamo.config.patch(disable=True):
        report = refgrad_check.check(model, x, target, reproducer_dir=None,
                                     engines=("eager", "compiled_autograd", "torch_compile:aot_eager"))
    assert report.engine_passed("eager")
    assert not report.engine_passed("compiled_autograd") and not report.engine_passed("torch_compile:aot_eager")
    assert report.results["torch_compile:aot_eager"] == {}
    assert report.errors["torch_compile:aot_eager"] == ("EngineError: torch_compile:aot_eager: the forward ran no "
                                                        "compiled code (torch.compile fell back to eager)")
    assert report.reproducers == {}


def test_the_module_refgrad_check_is_callable(mlp):
    import refgrad.check
    model, x, target = mlp
    report = refgrad.check(model, x, target, engines=("eager",), reproducer_dir=None)
    assert isinstance(report, refgrad.check.Report) and report.passed


def test_a_compiled_module_is_checked_as_the_torch_compile_engine_it_is(mlp, tmp_path):
    model, x, target = mlp
    compilations = []

    def tanh_backward_scaled(graph_module, example_inputs):
        compilations.append(graph_module)
        return scale_op_results(torch.ops.aten.tanh_backward.default)(graph_module, example_inputs)

    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=tanh_backward_scaled)
    report = refgrad_check.check(torch.compile(model, backend=backend), x, target, engines=("eager",),
                                 reproducer_dir=str(tmp_path))
    compiled = [engine for engine in report.results if engine.startswith("torch.compile(fn")]
    assert len(compiled) == 1 and compilations, report.format(eager=True)
    assert report.engine_passed("eager")  # eager ran the original module, not the compiled one
    assert not report.engine_passed(compiled[0])
    assert report.first_divergence[compiled[0]].node == "TanhBackward0"
    assert any(note.startswith("fn is torch.compile'd") for note in report.notes)


def test_a_compiled_function_runs_its_backend_and_later_torch_compile_checks_still_compile(mlp, tmp_path):
    model, x, target = mlp
    calls = []

    def counting(graph_module, example_inputs):
        calls.append(1)
        return graph_module

    report = refgrad_check.check(torch.compile(lambda inputs: model(inputs, target), backend=counting), x,
                                 engines=("eager",), reproducer_dir=str(tmp_path))
    assert calls and report.passed, report.format(eager=True)
    assert sorted(report.results) == ["eager", "torch.compile(fn, backend=counting)"]
    # the forward's code compiled once by the user's backend must not be reused from dynamo's cache
    again = refgrad_check.check(model, x, target, engines=("eager", "torch_compile:aot_eager"),
                                reproducer_dir=str(tmp_path))
    assert again.passed, again.format(eager=True)


def test_a_compiled_module_among_args_runs_as_its_original(tmp_path):
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    report = refgrad_check.check(lambda module, inputs: module(inputs).sum(), torch.compile(layer, backend="eager"),
                                 x, engines=("eager",), reproducer_dir=str(tmp_path))
    assert report.passed and sorted(report.results["eager"]) == ["arg0.bias", "arg0.weight"]
    assert any(note.startswith("arg0 is torch.compile'd (backend eager)") for note in report.notes), report.notes


def test_a_divergence_is_reported_only_when_the_observed_run_fails_as_the_plain_run(mlp, tmp_path):
    model, x, target = mlp

    class WrongOnlyUnobserved:  # a black box whose bug vanishes once check adds its probes
        name = "wrong_only_unobserved"

        def gradients(self, forward, grad_outputs):
            run = forward()
            torch.autograd.backward(run.outputs, grad_outputs)
            grads = {name: leaf.grad for name, leaf in run.leaves.items()}
            if not any(name.startswith("~probe") for name in grads):
                grads["net.0.weight"] = grads["net.0.weight"] * 1.01
            return grads

    class WrongOnlyUnhooked:  # runs torch's graph (observe=), wrong only without check's node hooks
        name = "wrong_only_unhooked"

        def gradients(self, forward, grad_outputs, *, observe=None):
            run = forward()
            if observe is not None:
                observe(run)
            torch.autograd.backward(run.outputs, grad_outputs)
            grads = {name: leaf.grad for name, leaf in run.leaves.items()}
            if observe is None:
                grads["net.2.bias"] = grads["net.2.bias"] * 1.01
            return grads

    report = refgrad_check.check(model, x, target, engines=("eager", WrongOnlyUnobserved(), WrongOnlyUnhooked()),
                                 reproducer_dir=str(tmp_path))
    for name, gradient in (("wrong_only_unobserved", "net.0.weight"), ("wrong_only_unhooked", "net.2.bias")):
        divergence = report.first_divergence[name]
        assert not divergence.localized, divergence
        assert divergence.reason.startswith(f"the observed run did not fail as the plain run did: the plain run "
                                            f"fails {gradient}, the observed run no gradient")
        assert sorted(divergence.observed) == sorted(MLP_GRADS) and all(r.passed for r in divergence.observed.values())
    assert str(report).count("    observed run: ") == 2 * len(MLP_GRADS)
