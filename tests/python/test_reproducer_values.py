"""Issue 15, item 7: a reproducer carries the engine's values at the first divergence.

A planted bug (an engine that scales the outgoing gradient of the MLP's TanhBackward0 by 1.01) is checked;
its bundle must hold, in the engine's result set, the engine's value of the divergent register ("%12")
equal to what that engine computes there, which each test computes on its own with torch; `refgrad check
BUNDLE` must print it beside refgrad's, and a scripted `refgrad step` session must show it beside refgrad's
value at float64, the precision of the bundle's comparison.

Run as tests/python/conftest.py says, e.g.
    PYTHONPATH=build-py/src/python:src/python python -m pytest tests/python/test_reproducer_values.py -q
The tests of the command line need build/refgrad and are skipped, saying so, without it.
"""
import os
import re
import subprocess

import pytest
import torch

import refgrad
import refgrad.check as refgrad_check

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(REPO, "build", "refgrad")
FACTOR = 1.01


class MLPLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

    def forward(self, x, target):
        return torch.nn.functional.mse_loss(self.l2(torch.tanh(self.l1(x))), target)


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return MLPLoss(), torch.randn(5, 3), torch.randn(5, 2)


def tanh_node(outputs):
    """The one TanhBackward0 of the MLP's backward graph."""
    queue, seen = [output.grad_fn for output in outputs], set()
    while queue:
        node = queue.pop(0)
        if node.name() == "TanhBackward0":
            return node
        seen.add(node)
        queue += [child for child, _ in node.next_functions if child is not None and child not in seen]
    raise AssertionError("no TanhBackward0")


def scaled_backward(run, grad_outputs, observe=None):
    """torch's backward with TanhBackward0's outgoing gradient scaled by FACTOR: the planted bug. It is
    planted before observe's hooks, so that they see what the node hands on, as a bug in the node would."""
    tanh_node(run.outputs).register_hook(lambda grads, incoming: tuple(g * FACTOR for g in grads))
    if observe is not None:
        observe(run)
    torch.autograd.backward(run.outputs, grad_outputs)
    return {name: leaf.grad for name, leaf in run.leaves.items()}


class ScalesTanh:
    """Runs torch's autograd graph (observe=): check localizes it with node hooks."""

    name = "scales_tanh"

    def gradients(self, forward, grad_outputs, *, observe=None):
        return scaled_backward(forward(), grad_outputs, observe)


class ScalesTanhBlackBox:
    """The same bug in a black box (no observe=): check localizes it through probes on the forward's results."""

    name = "scales_tanh_black_box"

    def gradients(self, forward, grad_outputs):
        return scaled_backward(forward(), grad_outputs)


def engine_values_by_torch(model, x, target):
    """What the planted engine computes at the tanh, found with torch alone: the gradient with respect to the
    tanh's input (TanhBackward0's outgoing gradient, scaled) and to its output (its incoming gradient)."""
    pre = model.l1(x)
    post = torch.tanh(pre)
    loss = torch.nn.functional.mse_loss(model.l2(post), target)
    incoming, = torch.autograd.grad(loss, post, retain_graph=True)
    outgoing, = torch.autograd.grad(loss, pre)
    return outgoing * FACTOR, incoming


def checked(model, x, target, engine, tmp_path):
    report = refgrad_check.check(model, x, target, engines=("eager", engine), reproducer_dir=str(tmp_path))
    divergence = report.first_divergence[engine.name]
    assert divergence is not None and divergence.localized, str(report)
    assert divergence.node == "TanhBackward0", str(divergence)
    return report, divergence, refgrad.Bundle.load(report.reproducers[engine.name])


def defining_pc(program, register):
    return next(pc for pc, instr in enumerate(program.code) if register.lstrip("%") in instr.results)


@pytest.mark.parametrize("engine", [ScalesTanh(), ScalesTanhBlackBox()], ids=["node-hooks", "black-box"])
def test_the_bundle_holds_the_engines_value_at_the_divergence(mlp, tmp_path, engine):
    model, x, target = mlp
    expected_outgoing, expected_incoming = engine_values_by_torch(model, x, target)
    report, divergence, bundle = checked(model, x, target, engine, tmp_path)

    register = divergence.register
    assert re.fullmatch(r"%\w+", register), register
    [eager, engine_set] = bundle.results
    assert engine_set.engine == engine.name and eager.engine == "eager"
    assert not any(name.startswith("%") for name in eager.tensors)  # eager's set: its leaf grads only
    recorded = engine_set.tensors[register].torch()
    torch.testing.assert_close(recorded, expected_outgoing, rtol=0, atol=1e-9)
    torch.testing.assert_close(divergence.values[register], expected_outgoing, rtol=0, atol=1e-9)

    # the node's incoming gradient, which agreed, is there too, under the register the instruction reads
    instruction = bundle.program.code[divergence.pc]
    incoming = f"%{instruction.operands[0]}"
    torch.testing.assert_close(engine_set.tensors[incoming].torch(), expected_incoming, rtol=0, atol=1e-9)

    # the recorded value is the engine's, not refgrad's: its error is the divergence's
    reference = refgrad_check_reference(bundle, register)
    assert (recorded.double() - reference).abs().max().item() == pytest.approx(divergence.error, rel=1e-9)
    assert divergence.error > 100 * divergence.tolerance

    provenance = bundle.provenance
    assert provenance["divergence_register"] == register
    assert register in provenance["divergence_values"] and incoming in provenance["divergence_values"]
    # the bundle round-trips with its register tensors
    again = tmp_path / "again.safetensors"
    bundle.save(str(again))
    assert torch.equal(refgrad.Bundle.load(str(again)).results[1].tensors[register].torch(), recorded)


def refgrad_check_reference(bundle, register):
    """R at the register: the bundle's program run by refgrad in float64, every register kept."""
    machine = refgrad.Machine(refgrad.promote_to_float64(bundle), keep_values=True)
    machine.run()
    return machine.register_value(register.lstrip("%")).torch()


def numbers(text):
    return [float(number) for number in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)]


@pytest.fixture
def reproducer(mlp, tmp_path):
    if not os.path.exists(CLI):
        pytest.skip(f"{CLI} is missing (make build)")
    model, x, target = mlp
    expected, _ = engine_values_by_torch(model, x, target)
    report, divergence, bundle = checked(model, x, target, ScalesTanh(), tmp_path)
    return report.reproducers["scales_tanh"], divergence, bundle, expected


def test_refgrad_check_prints_the_engines_value_beside_refgrads(reproducer):
    path, divergence, bundle, expected = reproducer
    run = subprocess.run([CLI, "check", path], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    # the '%' tensors are not judged as gradients: 4 leaves in each of the 2 result sets
    assert "6 of 8 gradients pass" in lines and not any(line.split()[3:4] == [divergence.register] for line in lines)
    header = lines.index(f"    {divergence.register}: scales_tanh's value (result 1) beside refgrad's (float64):")
    engine_line, refgrad_line, error_line = lines[header + 1:header + 4]
    assert engine_line.split()[:2] == ["scales_tanh", f"f32[{','.join(map(str, expected.shape))}]"]
    assert numbers(engine_line.split("  [", 1)[1]) == pytest.approx(expected.flatten()[:6].tolist(), rel=1e-6)
    assert refgrad_line.split()[:2] == ["refgrad", "f64[5,4]"]
    assert error_line.strip() == f"max|E - R| {divergence.error:.3g}"


def test_refgrad_step_shows_the_engines_value_beside_refgrads_at_float64(reproducer):
    path, divergence, bundle, expected = reproducer
    pc = defining_pc(bundle.program, divergence.register)
    register = divergence.register
    script = f"break {pc}\ncontinue\nstep\nprint {register}\nengine\nengine off\nprint {register}\nquit\n"
    run = subprocess.run([CLI, "step", path], input=script, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert out.splitlines()[0].startswith(f"program {bundle.program.name}: {len(bundle.program.code)} instructions, "
                                          "float64, as refgrad check compares under the bundle's rule reference")
    assert "showing scales_tanh's values (result set 1: 4 results and 2 registers it recorded)" in out

    # after the step: refgrad's value in float64, the engine's beneath it with max|E - R|
    shown = re.search(rf"\n          {register} = f64\[5,4\]  norm=\S+  \[(.*)\]\n"
                      rf"            scales_tanh: f32\[5,4\]  norm=\S+  \[(.*)\]  max\|E - R\| (\S+)\n", out)
    assert shown, out
    assert numbers(shown.group(2)) == pytest.approx(expected.flatten()[:6].tolist(), rel=1e-6)
    assert float(shown.group(3)) == pytest.approx(divergence.error, rel=1e-2)
    reference = refgrad_check_reference(bundle, register)
    assert numbers(shown.group(1)) == pytest.approx(reference.flatten()[:6].tolist(), rel=1e-12)

    # print: both in full, and the difference
    printed = out.split(f"(refgrad) print {register}\n", 2)
    assert f"scales_tanh's {register} = tensor(" in printed[1]
    assert f"max|E - R| {divergence.error:.3g}\n" in printed[1]
    assert "=> 1  scales_tanh  4 results, 2 registers recorded" in out
    assert "scales_tanh's" not in printed[2]  # engine off

    # --precision float32 runs the program as written
    as_written = subprocess.run([CLI, "step", "--precision", "float32", path], input="quit\n", capture_output=True,
                                text=True)
    assert as_written.stdout.splitlines()[0].endswith("instructions, float32; type help for the commands")
