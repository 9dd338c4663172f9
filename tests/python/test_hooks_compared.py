"""refgrad.check compares the hooks fn registers in its forward for every engine, torch_compile included:
which hooks fired, how often and in what order, against eager (issue 15, item 6).

torch.compile runs here with backend aot_eager only (inductor is slow on this machine; the hooks are
recorded outside the compiled code, whatever the backend).
"""
import torch
from torch._dynamo.utils import counters

import refgrad.check as refgrad_check
from refgrad.engines import TorchCompile, leaf_grads

TORCH_COMPILE = "torch_compile:aot_eager"


class OneHookedLeaf(torch.nn.Module):
    """Hooks registered in the forward: a tensor hook on a non-leaf (torch.compile traces it into its
    backward), two tensor hooks and a post-accumulate-grad hook on first.weight. Only one leaf is hooked,
    so that torch.compile's backward, which runs every AccumulateGrad after its one CompiledFunctionBackward
    node, cannot fire them in another order than eager's. Every tensor hook is linear in its gradient."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(3, 4)
        self.second = torch.nn.Linear(4, 2)

    def forward(self, x):
        hidden = self.first(x)
        hidden.register_hook(lambda grad: grad * 3)
        self.first.weight.register_hook(lambda grad: grad * 2)
        self.first.weight.register_hook(lambda grad: -grad)
        self.first.weight.register_post_accumulate_grad_hook(lambda leaf: None)
        return self.second(torch.tanh(hidden)).sum()


NON_LEAF_HOOK = "tensor hook 0 on the output of AddmmBackward0"
# eager's order (torch 2.13): the non-leaf's hook as its gradient arrives, then first.weight's tensor
# hooks in registration order before its AccumulateGrad, and its post-accumulate-grad hook after it
ONE_HOOKED_LEAF_FIRED = [NON_LEAF_HOOK, "tensor hook 1 on first.weight", "tensor hook 2 on first.weight",
                         "post-accumulate-grad hook 3 on first.weight"]


class EveryLeafHooked(torch.nn.Module):
    """A post-accumulate-grad hook on every parameter, as an optimizer-in-backward or a gradient
    bucketer registers them."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))

    def forward(self, x):
        for parameter in self.net.parameters():
            parameter.register_post_accumulate_grad_hook(lambda leaf: None)
        return self.net(x).sum()


class PlainBlackBox:
    """An engine of one's own without observe=: it calls forward() and runs torch's backward."""

    name = "plain_black_box"

    def gradients(self, forward, grad_outputs):
        run = forward()
        torch.autograd.backward(run.outputs, grad_outputs)
        return leaf_grads(run)


class TorchCompileInTwoHalves:
    """torch.compile's forward, and its backward run twice, each time with half the incoming gradient
    (retain_graph): halving is exact in floating point, so the gradients are the one backward's, bit for
    bit where the hooks are linear, but every hook fires twice."""

    name = "torch_compile_in_two_halves"

    def gradients(self, forward, grad_outputs):
        torch._dynamo.reset()  # compile afresh, as TorchCompile does
        run = forward(transform=lambda fn: torch.compile(fn, backend="aot_eager"))
        halves = [grad / 2 for grad in grad_outputs]
        torch.autograd.backward(run.outputs, halves, retain_graph=True)
        torch.autograd.backward(run.outputs, halves)
        return leaf_grads(run)


def all_gradients_pass(report, engine):
    return report.results[engine] and all(result.passed for result in report.results[engine].values())


def test_hooks_recorded_for_every_engine_and_passing(tmp_path):
    torch.manual_seed(0)
    model, x = OneHookedLeaf(), torch.randn(5, 3)
    report = refgrad_check.check(model, x, engines=("eager", "compiled_autograd", TORCH_COMPILE, PlainBlackBox()),
                                 reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert report.hooks["eager"] == ONE_HOOKED_LEAF_FIRED
    assert report.hooks["compiled_autograd"] == ONE_HOOKED_LEAF_FIRED
    assert report.hooks["plain_black_box"] == ONE_HOOKED_LEAF_FIRED
    # torch.compile traced the non-leaf's hook into its backward (the gradients pass: it ran there), where
    # no Python call of it is made; first.weight's hooks, replayed on the real parameter after the compiled
    # forward, fire outside the compiled code and are recorded
    assert report.hooks[TORCH_COMPILE] == ONE_HOOKED_LEAF_FIRED[1:]
    assert report.hooks_not_recorded == {TORCH_COMPILE: [NON_LEAF_HOOK]}
    text = str(report)
    assert f"{TORCH_COMPILE}: hooks fired as eager's (3 calls)" in text
    assert f"{TORCH_COMPILE}: hooks not recorded: {NON_LEAF_HOOK} (on non-leaf tensors" in text
    assert "compiled_autograd: hooks fired as eager's (4 calls)" in text
    assert report.to_dict()["hooks_not_recorded"] == {TORCH_COMPILE: [NON_LEAF_HOOK]}


def test_recording_the_hooks_leaves_torch_compile_one_graph(tmp_path):
    """The hooks are wrapped after the compiled forward ran: dynamo compiles fn's forward as it would
    without check, one graph and no graph break (a TorchFunctionMode around the compiled forward would
    break it: dynamo traces the mode's wrapping of the registrations)."""
    torch.manual_seed(0)
    model, x = OneHookedLeaf(), torch.randn(5, 3)
    engine = TorchCompile(backend="aot_eager")
    counters.clear()
    report = refgrad_check.check(model, x, engines=("eager", engine), reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert report.hooks[engine.name] == ONE_HOOKED_LEAF_FIRED[1:]
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert engine.compiled_calls == 1


def test_torch_compile_fires_post_accumulate_grad_hooks_in_another_order_and_fails(tmp_path):
    """torch 2.13's eager backward runs each parameter's AccumulateGrad (and its post-accumulate-grad hook)
    as soon as its gradient is ready, net.2's before net.0's; torch.compile's backward is one
    CompiledFunctionBackward node, after which every AccumulateGrad is ready at once and the engine runs
    them in another order. The gradients agree; the engine fails on its hooks alone."""
    torch.manual_seed(0)
    model, x = EveryLeafHooked(), torch.randn(5, 3)
    report = refgrad_check.check(model, x, engines=("eager", TORCH_COMPILE), reproducer_dir=str(tmp_path))
    eager, compiled = report.hooks["eager"], report.hooks[TORCH_COMPILE]
    assert eager == ["post-accumulate-grad hook 3 on net.2.bias", "post-accumulate-grad hook 2 on net.2.weight",
                     "post-accumulate-grad hook 1 on net.0.bias", "post-accumulate-grad hook 0 on net.0.weight"]
    assert sorted(compiled) == sorted(eager) and compiled != eager
    assert all_gradients_pass(report, TORCH_COMPILE), str(report)
    assert report.engine_passed("eager") and not report.engine_passed(TORCH_COMPILE)
    text = str(report)
    assert text.splitlines()[0].endswith(f"1 failed: {TORCH_COMPILE} (0 of 4 gradients, hooks)")
    assert f"{TORCH_COMPILE}: FAIL: hooks fired otherwise than eager's: {compiled} (eager: {eager})" in text


def test_a_compiled_engine_that_fires_each_hook_twice_fails(tmp_path):
    torch.manual_seed(0)
    model, x = OneHookedLeaf(), torch.randn(5, 3)
    engine = TorchCompileInTwoHalves()
    report = refgrad_check.check(model, x, engines=("eager", engine), reproducer_dir=str(tmp_path))
    assert all_gradients_pass(report, engine.name), str(report)
    once = ONE_HOOKED_LEAF_FIRED[1:]
    assert report.hooks[engine.name] == once + once
    assert report.hooks_not_recorded[engine.name] == [NON_LEAF_HOOK]
    assert not report.engine_passed(engine.name)
    assert f"{engine.name}: FAIL: hooks fired otherwise than eager's: {once + once} (eager: {once})" in str(report)


def test_a_compiled_model_whose_hooks_fire_out_of_eager_order_fails(tmp_path):
    """The issue's case: a torch.compile'd model passed as fn is checked as the torch_compile engine it is,
    and its post-accumulate-grad hooks, out of eager's order, fail it."""
    torch.manual_seed(0)
    model, x = torch.compile(EveryLeafHooked(), backend="aot_eager"), torch.randn(5, 3)
    report = refgrad_check.check(model, x, engines=("eager",), reproducer_dir=str(tmp_path))
    engine = "torch.compile(fn, backend=aot_eager)"
    assert list(report.hooks) == ["eager", engine]
    eager, compiled = report.hooks["eager"], report.hooks[engine]
    assert sorted(compiled) == sorted(eager) and compiled != eager
    assert all_gradients_pass(report, engine) and not report.engine_passed(engine) and not report.passed
    assert f"{engine}: FAIL: hooks fired otherwise than eager's" in str(report)
