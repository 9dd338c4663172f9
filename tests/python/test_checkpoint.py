"""Activation checkpointing and nn.Module full backward hooks, captured and run in refgrad; refgrad.check
on them, and on a backward it cannot capture.

The truth is torch's own autograd: each test runs torch's backward on the same graph (after the
capture, which must leave it runnable) and compares .grad, and the hooks' calls, with refgrad's run.
"""
import functools

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
checkpoint = pytest.importorskip("torch.utils.checkpoint")

import refgrad  # noqa: E402
import refgrad.check  # noqa: E402
import refgrad.torch as rt  # noqa: E402
from grad_compare import DTYPES, assert_grads_close, precision  # noqa: E402

MODES = {"reentrant": True, "non-reentrant": False}


def assert_close(ours, theirs, dtype, what):
    assert_grads_close(ours, theirs, dtype, what, same_dtype=True)


def run_and_compare(loss, names, dtype):
    """Captures loss's backward, runs it in refgrad, then torch's backward; compares every .grad."""
    ours = rt.capture(loss, names=names).run(precision(dtype))
    loss.backward()
    for name, tensor in names.items():
        assert_close(ours[name], tensor.grad, dtype, name)
    return ours


# ------------------------------------------------------------------ checkpointing ---


class CheckpointedMLP(nn.Module):
    """Three checkpointed blocks (one with dropout: the recomputation must draw the forward's mask), a
    parameter used inside and outside the blocks, and a head; ``calls`` counts the blocks' forwards."""

    def __init__(self, use_reentrant, width=6):
        super().__init__()
        self.use_reentrant = use_reentrant
        self.blocks = nn.ModuleList(
            [nn.Sequential(nn.Linear(width, width), nn.Tanh()),
             nn.Sequential(nn.Linear(width, width), nn.Dropout(0.3), nn.GELU()),
             nn.Sequential(nn.Linear(width, width), nn.Sigmoid())])
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, width))
        self.head = nn.Linear(width, 2)
        self.calls = 0

    def block(self, index, x):
        self.calls += 1
        return self.blocks[index](x) * self.scale

    def forward(self, x):
        for index in range(len(self.blocks)):
            x = checkpoint.checkpoint(functools.partial(self.block, index), x, use_reentrant=self.use_reentrant)
        return (self.head(x * self.scale) ** 2).mean()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_checkpointed_mlp_runs_as_in_torch(mode, dtype):
    torch.manual_seed(0)
    model = CheckpointedMLP(MODES[mode]).to(dtype)
    x = torch.randn(5, 6, dtype=dtype, requires_grad=True)
    loss = model(x)
    assert model.calls == 3
    run_and_compare(loss, {"x": x, **dict(model.named_parameters())}, dtype)
    # each block recomputed once by the capture (its own GraphExecGroup, or its inner graph) and once
    # by torch's backward
    assert model.calls == 9


def test_reentrant_checkpoints_inner_nodes_are_in_the_program():
    torch.manual_seed(1)
    model = CheckpointedMLP(use_reentrant=True).double()
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)  # else torch's reentrant checkpoint has no grad
    captured = rt.capture(model(x), names=dict(model.named_parameters()))
    names = [node.name for node in captured.graph.nodes]
    assert not any("CheckpointFunction" in name for name in names)
    for node in ("TanhBackward0", "GeluBackward0", "SigmoidBackward0"):
        assert node in names  # the oracle covers what the checkpoints recompute
    assert captured.program.functions == []  # nothing left to a host call


def test_selective_checkpointing_leaves_its_cache_for_torchs_backward():
    # Selective activation checkpointing lets a region's saved ops be read once per backward: the capture's
    # recomputation must put the cache back, or torch's backward raises "backward an extra time".
    def policy(context, op, *args, **kwargs):
        return (checkpoint.CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.addmm.default
                else checkpoint.CheckpointPolicy.PREFER_RECOMPUTE)

    torch.manual_seed(2)
    layer, head = nn.Linear(4, 4).double(), nn.Linear(4, 1).double()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    context = functools.partial(checkpoint.create_selective_checkpoint_contexts, policy)
    h = checkpoint.checkpoint(lambda a: layer(a).tanh().sin(), x, use_reentrant=False, context_fn=context)
    run_and_compare(head(h).sum(), {"x": x, **dict(layer.named_parameters())}, torch.float64)


def test_nested_non_reentrant_checkpoints_run_as_in_torch():
    torch.manual_seed(3)
    inner, outer = nn.Linear(4, 4).double(), nn.Linear(4, 4).double()

    def region(a):
        return outer(checkpoint.checkpoint(lambda b: inner(b).tanh(), a.sin(), use_reentrant=False)).exp()

    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    loss = checkpoint.checkpoint(region, x, use_reentrant=False).sum()
    run_and_compare(loss, {"x": x, "inner": inner.weight, "outer": outer.weight}, torch.float64)


def test_a_reentrant_checkpoint_output_no_grad_reaches_gets_zeros_as_in_torch():
    # torch's CheckpointFunctionBackward materializes zeros for the unused output and runs the inner
    # backward with them: `aux`'s weight gets a .grad of zeros, not None.
    torch.manual_seed(4)
    main, aux = nn.Linear(3, 3).double(), nn.Linear(3, 2).double()
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    h, _unused = checkpoint.checkpoint(lambda a: (main(a).relu(), aux(a).tanh()), x, use_reentrant=True)
    ours = run_and_compare(h.sum(), {"x": x, "main": main.weight, "aux": aux.weight}, torch.float64)
    assert torch.equal(ours["aux"], torch.zeros(2, 3, dtype=torch.float64))


def test_a_hook_on_a_reentrant_checkpoints_output_runs_as_in_torch():
    torch.manual_seed(5)
    layer = nn.Linear(3, 3).double()
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    h = checkpoint.checkpoint(lambda a: layer(a).tanh(), x, use_reentrant=True)
    h.register_hook(lambda grad: grad * torch.arange(3.0, dtype=torch.float64))
    h.retain_grad()
    loss = (h ** 2).sum()
    ours = rt.capture(loss, names={"x": x, "h": h, **dict(layer.named_parameters())}).run()
    loss.backward()
    assert_close(ours["h"], h.grad, torch.float64, "h")
    assert_close(ours["x"], x.grad, torch.float64, "x")
    assert_close(ours["weight"], layer.weight.grad, torch.float64, "weight")


def test_reentrant_checkpointing_under_autograd_grad_is_refused_as_torch_refuses_it():
    layer = nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    loss = checkpoint.checkpoint(lambda a: layer(a).relu(), x, use_reentrant=True).sum()
    with pytest.raises(RuntimeError, match="incompatible with .grad"):
        torch.autograd.grad(loss, x, retain_graph=True)
    with pytest.raises(refgrad.Error, match="incompatible with .grad"):
        rt.capture(loss, inputs=x)


# ----------------------------------------------------- module full backward hooks ---


class Scaled(nn.Module):
    """Two tensor inputs, one of which needs no grad: its grad_input entry is None."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, mask):
        return self.linear(x) * mask


def hooked_model(dtype, calls):
    """A model whose modules' full backward hooks and backward pre-hooks change grads and record each
    call: the hook's kind, the module and copies of the grads torch gives it."""
    torch.manual_seed(6)
    model = nn.ModuleDict({"first": nn.Linear(3, 4), "scaled": Scaled(), "act": nn.Tanh(),
                           "head": nn.Linear(4, 2)}).to(dtype)

    def copies(grads):
        return tuple(None if g is None else g.detach().clone() for g in grads)

    def full_hook(name, factor):
        def hook(module, grad_input, grad_output):
            calls.append(("hook", name, copies(grad_input), copies(grad_output)))
            return tuple(None if g is None else g * factor for g in grad_input)
        return hook

    def pre_hook(name):
        def hook(module, grad_output):
            calls.append(("pre", name, copies(grad_output)))
            return (grad_output[0].clamp(-0.05, 0.05),)
        return hook

    model["first"].register_full_backward_hook(full_hook("first", 3.0))  # its input needs no grad
    model["scaled"].register_full_backward_hook(full_hook("scaled", -2.0))
    model["scaled"].register_full_backward_pre_hook(pre_hook("scaled"))
    model["act"].register_full_backward_hook(lambda module, grad_input, grad_output: calls.append(("observe", "act")))
    model["head"].register_full_backward_pre_hook(pre_hook("head"))
    return model


def hooked_loss(model, x, dtype):
    mask = torch.tensor([1.0, 0.5, 0.0, 2.0], dtype=dtype)
    return (model["head"](model["act"](model["scaled"](model["first"](x), mask))) ** 2).sum()


def assert_calls_alike(ours, theirs, dtype):
    assert [call[:2] for call in ours] == [call[:2] for call in theirs]  # the same hooks, in torch's order
    for our_call, their_call in zip(ours, theirs):
        for our_grads, their_grads in zip(our_call[2:], their_call[2:]):
            assert len(our_grads) == len(their_grads), our_call[:2]
            for ours_, theirs_ in zip(our_grads, their_grads):
                if ours_ is None and our_call[:2] == ("hook", "scaled") and theirs_ is not None:
                    # the known difference (refgrad.torch.host._module_hook): for the mask, which needs no
                    # grad, torch gives zeros of a shape it does not show, refgrad None
                    assert theirs_.shape == (4,) and not theirs_.any()
                    continue
                assert (ours_ is None) == (theirs_ is None), our_call[:2]
                if theirs_ is not None:
                    assert_close(ours_, theirs_, dtype, f"{our_call[:2]}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_module_full_backward_hooks_run_as_in_torch(dtype):
    ours_calls, torch_calls = [], []
    model = hooked_model(dtype, ours_calls)
    x = torch.randn(5, 3, dtype=dtype)
    with pytest.warns(UserWarning, match="no inputs require gradients"):  # torch's, for "first"
        captured = rt.capture(hooked_loss(model, x, dtype), names=dict(model.named_parameters()))
        ours = captured.run(precision(dtype))
        assert {hook.kind for hook in captured.program.hooks} == {"post"}
        twin = hooked_model(dtype, torch_calls)
        hooked_loss(twin, x, dtype).backward()
    assert len(torch_calls) == 5  # head's pre-hook, act, scaled's pre-hook and hook, first
    assert_calls_alike(ours_calls, torch_calls, dtype)
    for name, parameter in twin.named_parameters():
        assert_close(ours[name], parameter.grad, dtype, name)
    # the hooks matter: without them the first layer's grad is another
    plain = hooked_model(dtype, [])
    for module in plain.modules():
        module._backward_hooks.clear()
        module._backward_pre_hooks.clear()
    hooked_loss(plain, x, dtype).backward()
    assert (plain["first"].weight.grad - ours["first.weight"]).abs().max() > 1e-3


@pytest.mark.parametrize("mode", MODES)
def test_module_hooks_inside_a_checkpointed_region_run_as_in_torch(mode):
    # the region's forward is recomputed, and with it the hooks' nodes: refgrad runs the recomputed ones
    ours_calls, torch_calls = [], []
    runs = []
    for calls in (ours_calls, torch_calls):
        model = hooked_model(torch.float64, calls)
        x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).requires_grad_()
        loss = checkpoint.checkpoint(hooked_loss, model, x, torch.float64, use_reentrant=MODES[mode])
        runs.append((model, x, loss))
    (model, x, loss), (twin, twin_x, twin_loss) = runs
    ours = rt.capture(loss, names={"x": x, **dict(model.named_parameters())}).run()
    twin_loss.backward()
    assert len(torch_calls) == 5  # head's pre-hook, act, scaled's pre-hook and hook, first
    assert_calls_alike(ours_calls, torch_calls, torch.float64)
    assert_close(ours["x"], twin_x.grad, torch.float64, "x")
    for name, parameter in twin.named_parameters():
        assert_close(ours[name], parameter.grad, torch.float64, name)


# ----------------------------------------------------------------- refgrad.check ---


@pytest.mark.parametrize("mode", MODES)
def test_check_passes_a_checkpointed_mlp(mode):
    torch.manual_seed(8)
    # compiled autograd breaks its graph at a checkpoint's recomputation (dynamo skips torch.utils.checkpoint),
    # as under torch._dynamo.config.compiled_autograd: the engine compiles without fullgraph, as that does
    report = refgrad.check(CheckpointedMLP(MODES[mode]), torch.randn(4, 6, requires_grad=True),
                           engines=["eager", "compiled_autograd"], reproducer_dir=None)
    assert report.passed, str(report)
    assert not report.uncovered
    assert len(report.results["compiled_autograd"]) == 10  # 9 parameters and the input


def test_check_passes_a_model_with_module_hooks():
    model = hooked_model(torch.float32, [])
    report = refgrad.check(lambda x: hooked_loss(model, x, torch.float32), torch.randn(5, 3, requires_grad=True),
                           engines=["eager", "compiled_autograd"], reproducer_dir=None)
    assert report.passed, str(report)
    assert "post hook" in " ".join(report.notes)  # the program calls the hooks
    assert set(report.results) == {"eager", "compiled_autograd"}


class Lacking(nn.Module):
    """igamma (the regularized lower incomplete gamma function) of a constant and x: a node refgrad
    does not have."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return torch.igamma(torch.full((4,), 1.5), self.linear(x).exp()).sum()


class Off:
    """An engine that is wrong by 1%: checked against eager, it must still fail."""

    name = "off"

    def gradients(self, forward, grad_outputs):
        run = forward()
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad * 1.01 for name, leaf in run.leaves.items()}


def test_check_of_a_backward_refgrad_cannot_capture_runs_the_engines_against_eager():
    torch.manual_seed(9)
    report = refgrad.check(Lacking(), torch.randn(3, 4), engines=["eager", "compiled_autograd", Off()])
    assert [line.split(":")[0] for line in report.uncovered] == ["IgammaBackward0"]
    assert "refgrad has no node IgammaBackward0" in report.uncovered[0]
    text = str(report)
    assert "R = eager's backward" in text and "not covered by the oracle: IgammaBackward0" in text
    assert report.to_dict()["uncovered"] == report.uncovered
    assert all(result.passed for result in report.results["compiled_autograd"].values())
    assert not report.engine_passed("off") and not report.passed
    assert "no program to localize" in report.first_divergence["off"].reason
    assert report.reproducers == {}
