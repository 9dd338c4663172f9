"""refgrad.torch.capture: real torch 2.13 backward graphs, captured and run in refgrad.

The truth is torch's own autograd: every test runs torch's backward (or
torch.autograd.grad) on the same graph and compares .grad with what the
captured program computes. Models are built in float64 (compared under
torch.testing's float64 tolerances) and in float32 (run as captured, compared
under float32's), with DESIGN.md's rule: max|refgrad - torch| <= atol + rtol * max|torch|.
"""
import inspect
import pathlib

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import refgrad  # noqa: E402
import refgrad.torch as rt  # noqa: E402

from grad_compare import DTYPES, assert_grads_close, precision  # noqa: E402


def capture_and_compare(model, forward, dtype, seed=0):
    """Captures forward()'s backward, runs it in refgrad, then torch's backward; compares every .grad."""
    torch.manual_seed(seed)
    model = model.to(dtype)
    loss = forward(model, dtype)
    captured = rt.capture(loss, names=dict(model.named_parameters()))
    ours = captured.run(precision(dtype))
    loss.backward()
    for name, parameter in model.named_parameters():
        assert_grads_close(ours[name], parameter.grad, dtype, name)
        assert ours[name].dtype == dtype
    return captured


# ---------------------------------------------------------------- the zoo ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mlp_with_mse(dtype):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(m, dt):
        return nn.MSELoss()(m(torch.randn(6, 3, dtype=dt)), torch.randn(6, 2, dtype=dt))

    captured = capture_and_compare(model, forward, dtype)
    # torch 2.13 records these nodes for the MLP (walked by hand from loss.grad_fn).
    assert {instr.node for instr in captured.program.code if instr.op == "call"} == {
        "MseLossBackward0", "AddmmBackward0", "TBackward0", "TanhBackward0"}
    assert set(captured.leaves) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    for instr, node in zip(captured.program.code, captured.node_of_instruction):
        if instr.op == "call":
            assert captured.graph.nodes[node].name == instr.node


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cnn_with_batchnorm_pools_and_cross_entropy(dtype):
    torch.manual_seed(2)
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    model.train()

    def forward(m, dt):
        return nn.CrossEntropyLoss()(m(torch.randn(3, 2, 6, 6, dtype=dt)), torch.tensor([0, 2, 1]))

    captured = capture_and_compare(model, forward, dtype)
    called = {instr.node for instr in captured.program.code if instr.op == "call"}
    assert {"ConvolutionBackward0", "NativeBatchNormBackward0", "MaxPool2DWithIndicesBackward0",
            "NllLossBackward0", "LogSoftmaxBackward0"} <= called


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_transformer_encoder_layer(dtype):
    torch.manual_seed(3)
    model = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(m, dt):
        return (m(torch.randn(2, 5, 8, dtype=dt)) ** 2).mean()

    captured = capture_and_compare(model, forward, dtype)
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in {instr.node for instr in captured.program.code}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_embedding_softmax_cumsum(dtype):
    torch.manual_seed(4)
    model = nn.Embedding(10, 4)

    def forward(m, dt):
        weights = torch.linspace(-1, 1, 4, dtype=dt)
        return (m(torch.tensor([[1, 2, 3], [4, 5, 1]])).softmax(-1).cumsum(1) * weights).sum()

    capture_and_compare(model, forward, dtype)


class ScaledCube(torch.autograd.Function):
    """y = scale * x**3 + other, with a ctx attribute and a non-tensor argument."""

    @staticmethod
    def forward(ctx, x, scale, other):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return scale * x ** 3 + other

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.scale * 3 * x ** 2, None, grad


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_custom_autograd_function(dtype):
    torch.manual_seed(5)
    x = torch.randn(4, dtype=dtype, requires_grad=True)
    other = torch.randn(4, dtype=dtype, requires_grad=True)
    loss = (ScaledCube.apply(x * 2, 0.5, other) * torch.arange(4, dtype=dtype)).sum()
    captured = rt.capture(loss, names={"x": x, "other": other})
    node = next(n for n in captured.graph.nodes if n.kind == "function")
    assert node.name.startswith("ScaledCubeBackward_")
    assert len(node.function_saved) == 1
    assert set(captured.host.functions) == {node.name}
    ours = captured.run(precision(dtype))
    loss.backward()
    assert_grads_close(ours["x"], x.grad, dtype, "x")
    assert_grads_close(ours["other"], other.grad, dtype, "other")


class TwoOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, grad_first, grad_second):
        return grad_first * 2 + grad_second * 3


def test_custom_function_gets_zeros_for_an_unused_output():
    a = torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    first, _ = TwoOutputs.apply(a)
    loss = (first * 5).sum()
    ours = rt.capture(loss, names={"a": a}).run()  # the unused output's grad is None in the program
    loss.backward()  # torch materializes it as zeros, so backward's grad_second * 3 works
    assert torch.equal(ours["a"], a.grad)


class MaybeScaled(torch.autograd.Function):
    """x * w, or x alone when w is None: save_for_backward(None, ...) as torch's own chunked
    linear_cross_entropy does for an absent bias."""

    @staticmethod
    def forward(ctx, x, w, y):
        ctx.save_for_backward(w, x, None, y)
        return x * (1.0 if w is None else w) + y * y

    @staticmethod
    def backward(ctx, grad):
        w, x, none, y = ctx.saved_tensors
        assert none is None
        grad_x = grad if w is None else grad * w
        grad_w = None if w is None else grad * x
        return grad_x, grad_w, 2 * grad * y


@pytest.mark.parametrize("with_weight", [False, True])
def test_custom_function_that_saved_none(with_weight):
    """The Nones among a Function's saved tensors are no program tensors; its backward gets them back
    in their places."""
    torch.manual_seed(6)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True) if with_weight else None
    loss = (MaybeScaled.apply(x, w, y) * torch.arange(3, dtype=torch.float64)).sum()
    names = {"x": x, "y": y, **({"w": w} if with_weight else {})}
    captured = rt.capture(loss, names=names)
    node = next(n for n in captured.graph.nodes if n.kind == "function")
    assert len(node.function_saved) == (3 if with_weight else 2)
    for precision_name in ("as_captured", "float64"):
        ours = captured.run(precision_name)
        expected = torch.autograd.grad(loss, list(names.values()), retain_graph=True)
        for name, grad in zip(names, expected):
            assert torch.equal(ours[name], grad), name


class Float32Only(torch.autograd.Function):
    """3 x**2 * grad, with a backward that refuses any dtype but the forward's (as torch's chunked
    linear_cross_entropy does)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if x.dtype != torch.float32 or grad.dtype != torch.float32:
            raise RuntimeError(f"Float32Only takes float32, got {x.dtype} and {grad.dtype}")
        return 3 * x ** 2 * grad


def test_a_float64_run_gives_a_function_refusing_float64_its_own_dtypes():
    x = torch.tensor([0.5, -1.5, 2.0], requires_grad=True)
    loss = (Float32Only.apply(x.exp()) * torch.tensor([1.0, 2.0, 3.0])).sum()
    captured = rt.capture(loss, names={"x": x})
    ours = captured.run("float64")
    (expected,) = torch.autograd.grad(loss, [x])
    assert ours["x"].dtype == torch.float64  # the rest of the program ran in float64
    torch.testing.assert_close(ours["x"], expected.double(), rtol=1e-6, atol=0)
    # A backward that raises in its own dtypes too still raises, with its message.
    with pytest.raises(refgrad.Error, match="Float32Only takes float32"):
        loss64 = Float32Only.apply(torch.ones(2, dtype=torch.float64, requires_grad=True)).sum()
        rt.capture(loss64).run("float64")


def test_the_host_drives_a_machine_step_by_step():
    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    x.register_hook(lambda grad: grad * 4)
    loss = ScaledCube.apply(x, 0.5, torch.zeros(3)).sum()
    captured = rt.capture(loss, names={"x": x})
    machine = refgrad.Machine(captured.bundle, hooks=captured.host.hooks, functions=captured.host.functions)
    while not machine.finished:
        machine.step()
    loss.backward()
    assert torch.equal(machine.leaf_grad("x").torch(), x.grad)  # 4 * 1.5 x**2
    assert repr(captured).startswith("<Capture backward: ")


def test_custom_function_runs_promoted_to_float64():
    x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    loss = ScaledCube.apply(x, 0.5, torch.zeros(3)).sum()
    ours = rt.capture(loss, names={"x": x}).run("float64")
    assert ours["x"].dtype == torch.float64
    torch.testing.assert_close(ours["x"], 1.5 * x.detach().double() ** 2)  # d/dx 0.5 x^3


def test_custom_function_returning_the_wrong_count_raises():
    class Broken(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, grad):
            return grad

    x = torch.ones(2, requires_grad=True)
    captured = rt.capture(Broken.apply(x, x).sum())
    with pytest.raises(refgrad.Error, match=r"incorrect number of gradients \(expected 2, got 1\)"):
        captured.run()


# ------------------------------------------------------ compiled forwards ---


@pytest.fixture
def fresh_dynamo():
    """Each compiled test starts with dynamo's caches empty (no recompile limit from earlier tests)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_function_nodes(captured):
    return [node for node in captured.graph.nodes if node.kind == "function"]


@pytest.mark.parametrize("backend, warm", [("aot_eager", False), ("aot_eager", True), ("inductor", True)],
                         ids=["aot_eager", "aot_eager-warm", "inductor-warm"])
def test_compiled_forward_runs_as_in_torch(fresh_dynamo, backend, warm):
    # A torch.compile'd forward is one node, CompiledFunctionBackward, whose backward takes its grads
    # boxed as one list. Warm: a backward ran first, so the compiled backward donates its buffers.
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend=backend)
    if warm:
        compiled(torch.randn(3, 4)).sum().backward()
        model.zero_grad()
    x = torch.randn(3, 4, requires_grad=True)
    loss = (compiled(x) * torch.randn(3, 2)).sum()  # the loss is eager, around the compiled node
    names = {"x": x, **dict(model.named_parameters())}
    captured = rt.capture(loss, names=names)
    (function,) = compiled_function_nodes(captured)
    assert function.name.startswith("CompiledFunctionBackward_")
    ours = {precision: captured.run(precision) for precision in ("float64", "float32")}
    again = captured.run("float32")
    loss.backward()
    for name, tensor in names.items():
        # The compiled backward runs at the dtype it was compiled for, in a float64 run too.
        assert_grads_close(ours["float64"][name], tensor.grad, torch.float32, name)
        assert_grads_close(ours["float32"][name], tensor.grad, torch.float32, name)
        assert ours["float64"][name].dtype == torch.float64 and ours["float32"][name].dtype == torch.float32
        assert torch.equal(again[name], ours["float32"][name]), name  # each call gets fresh saved tensors


def test_compiled_forward_with_a_graph_break_and_dynamic_shapes(fresh_dynamo):
    # Two compiled graphs in a row, each a CompiledFunctionBackward; dynamic=True saves the batch size
    # as a SymInt (ctx.symints), which the compiled backward reads from the node.
    torch.manual_seed(4)
    first, second = nn.Linear(4, 8).double(), nn.Linear(8, 3).double()

    def forward(x):
        h = torch.relu(first(x))
        torch._dynamo.graph_break()
        return torch.log_softmax(second(h * h.sum(1, keepdim=True)), dim=1)

    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    loss = torch.compile(forward, backend="aot_eager", dynamic=True)(x)[:, 0].sum()
    names = {"x": x, **{f"first.{n}": p for n, p in first.named_parameters()},
             **{f"second.{n}": p for n, p in second.named_parameters()}}
    captured = rt.capture(loss, names=names)
    assert len(compiled_function_nodes(captured)) == 2
    loss.backward()  # frees torch's graph; the program keeps its own saved tensors
    ours = captured.run()
    for name, tensor in names.items():
        assert_grads_close(ours[name], tensor.grad, torch.float64, name)


def test_a_failing_host_call_is_a_refgrad_error_naming_the_node_and_the_error():
    class Fails(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("no backward today")

    x = torch.ones(3, requires_grad=True)
    captured = rt.capture(Fails.apply(x).sum())
    message = r"function &FailsBackward_\d+ raised ValueError: no backward today"
    with pytest.raises(refgrad.Error, match=message) as raised:
        captured.run()
    assert isinstance(raised.value.__cause__, ValueError)


@pytest.mark.parametrize("outputs, error", [(object(), "TypeError"), ([1.0], "AttributeError")],
                         ids=["object", "float"])
def test_capture_of_what_is_no_tensor_is_a_refgrad_error(outputs, error):
    with pytest.raises(refgrad.Error, match=rf"refgrad.torch.capture: {error}: "):
        rt.capture(outputs)


# ------------------------------------------------------------------ hooks ---


def hooked_model(log):
    torch.manual_seed(6)
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    w.register_hook(lambda grad: log.append(("w hook 1", grad.sum().item())) or grad * 2)
    w.register_hook(lambda grad: log.append(("w hook 2", grad.sum().item())))
    b.register_hook(lambda grad: log.append(("b hook", grad.sum().item())) or grad + 1)
    w.register_post_accumulate_grad_hook(lambda p: log.append(("w post", p.grad.sum().item())))
    b.register_post_accumulate_grad_hook(lambda p: log.append(("b post", p.grad.sum().item())))
    x = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)
    hidden = x @ w + b
    hidden.register_hook(lambda grad: log.append(("hidden hook", grad.sum().item())) or grad * 0.5)
    return w, b, hidden, (hidden.tanh() * torch.arange(3.0, dtype=torch.float64)).sum()


def test_tensor_hooks_and_post_accumulate_grad_hooks_fire_as_in_torch():
    ours_log, torch_log = [], []
    w, b, hidden, loss = hooked_model(ours_log)
    captured = rt.capture(loss, names={"w": w, "b": b, "hidden": hidden})
    assert sorted(captured.host.hooks) == [
        "b_hook0", "b_post_accumulate_grad_hook0", "hidden_hook0", "w_hook0", "w_hook1",
        "w_post_accumulate_grad_hook0"]
    ours = captured.run("float64")
    assert ours_log  # the hooks ran, in refgrad
    w2, b2, _, loss2 = hooked_model(torch_log)
    loss2.backward()
    assert [name for name, _ in ours_log] == [name for name, _ in torch_log]
    for (name, ours_sum), (_, torch_sum) in zip(ours_log, torch_log):
        assert ours_sum == pytest.approx(torch_sum, rel=1e-12), name
    assert_grads_close(ours["w"], w2.grad, torch.float64, "w")
    assert_grads_close(ours["b"], b2.grad, torch.float64, "b")


def test_non_leaf_hook_and_retain_grad_of_a_named_tensor():
    x = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    hidden = x * 3
    hidden.register_hook(lambda grad: grad * 10)
    hidden.retain_grad()
    loss = (hidden.exp() / 20).sum()
    captured = rt.capture(loss, names={"x": x, "hidden": hidden})
    ours = captured.run()
    loss.backward()
    assert_grads_close(ours["x"], x.grad, torch.float64, "x")
    # retains_grad reads the grad after the tensor's hooks, as torch's .grad does.
    assert_grads_close(ours["hidden"], hidden.grad, torch.float64, "hidden")


def test_a_hook_that_changes_its_grad_in_place_changes_it_as_in_torch():
    def in_place(grad):
        grad.mul_(10)  # returns None; torch passes the changed tensor on

    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    hidden = x * 3
    hidden.register_hook(in_place)
    loss = (hidden ** 2).sum()
    ours = rt.capture(loss, names={"x": x, "hidden": hidden}).run()
    loss.backward()
    assert x.grad.tolist() == [180.0, 360.0]  # 10 * 2 * hidden * 3
    assert ours["x"].tolist() == x.grad.tolist()


def optimizer_in_backward(lr):
    """A leaf whose post-accumulate-grad hook takes an SGD step and frees .grad, and its loss."""
    p = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)

    def step(parameter):
        with torch.no_grad():
            parameter -= lr * parameter.grad
        parameter.grad = None

    p.register_post_accumulate_grad_hook(step)
    return p, (p ** 2).sum()


def test_a_post_accumulate_grad_hook_that_frees_grad_leaves_none_as_in_torch():
    p, loss = optimizer_in_backward(0.1)
    ours = rt.capture(loss, names={"p": p}).run()
    loss.backward()
    assert p.grad is None and ours.get("p") is None
    assert p.tolist() == pytest.approx([0.8, -1.6, 2.4])  # torch stepped the real p; refgrad a stand-in


def clip_in_place(parameter):
    parameter.grad.clamp_(-3, 3)  # a post-accumulate-grad hook must return None


@pytest.mark.parametrize("clip", [
    lambda parameter: setattr(parameter, "grad", parameter.grad.clamp(-3, 3)),
    clip_in_place,
], ids=["new tensor", "in place"])
def test_a_post_accumulate_grad_hook_that_changes_grad_as_in_torch(clip):
    p = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    p.register_post_accumulate_grad_hook(clip)
    loss = (p ** 2).sum()
    ours = rt.capture(loss, names={"p": p}).run()
    loss.backward()
    assert p.grad.tolist() == [2.0, -3.0, 3.0]
    assert ours["p"].tolist() == p.grad.tolist()


def test_leaf_nodes_carry_accumulate_grads_sequence_number():
    w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    loss = (w * 2).sum()
    captured = rt.capture(loss, names={"w": w})
    (accumulate,) = [node for node in captured.graph.nodes if node.kind == "accumulate_grad"]
    assert accumulate.sequence_nr == loss.grad_fn.next_functions[0][0].next_functions[0][0]._sequence_nr()
    assert accumulate.sequence_nr == refgrad.ACCUMULATE_GRAD_SEQUENCE_NR == 2**64 - 1


# ------------------------------------------------ engine cases, end to end ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcasting_grads_are_summed_to_the_input_shape(dtype):
    a = torch.randn(3, 1, dtype=dtype, requires_grad=True)
    b = torch.randn(4, dtype=dtype, requires_grad=True)
    loss = ((a + b) * (a * b)).sum()
    ours = rt.capture(loss, names={"a": a, "b": b}).run(precision(dtype))
    loss.backward()
    assert ours["a"].shape == (3, 1) and ours["b"].shape == (4,)
    assert_grads_close(ours["a"], a.grad, dtype, "a")
    assert_grads_close(ours["b"], b.grad, dtype, "b")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copy_into_a_whole_tensor_is_captured_as_copy_backwards(dtype):
    """copy_ into a tensor that is no view makes a CopyBackwards node of its own (not inside CopySlices),
    whose torch name is "torch::autograd::CopyBackwards": capture must find refgrad's node by its short
    name, as it does inside CopySlices (refgrad.fuzz found it refused: "refgrad has no node CopyBackwards").
    The source broadcasts and has another dtype, so the grad goes back summed and converted."""
    x = torch.randn(3, 4, dtype=dtype, requires_grad=True)
    y = torch.randn(4, dtype=torch.float64 if dtype == torch.float32 else torch.float32, requires_grad=True)
    v = x.clone()
    v.copy_(y)
    loss = (v * x).sum()
    assert v.grad_fn.name() == "torch::autograd::CopyBackwards"
    ours = rt.capture(loss, names={"x": x, "y": y}).run(precision(dtype))
    loss.backward()
    assert_grads_close(ours["x"], x.grad, dtype, "x")
    assert_grads_close(ours["y"].to(y.dtype), y.grad, y.dtype, "y")  # (a float64 run promotes float32 y)


@pytest.mark.parametrize("dim", [0, -1])
def test_squeeze_and_unsqueeze_of_a_0d_tensor_as_torch(dim):
    """A 0-d tensor accepts dims 0 and -1; torch runs these backwards, so refgrad must too (it used to crash)."""
    x = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    loss = x.squeeze(dim) * x.unsqueeze(dim).sum()
    captured = rt.capture(loss, names={"x": x})
    nodes = {instr.node for instr in captured.program.code if instr.node}
    assert {"SqueezeBackward1", "UnsqueezeBackward0"} <= nodes
    ours = captured.run("float64")
    loss.backward()
    assert ours["x"].shape == () and ours["x"].item() == x.grad.item() == 6.0  # d(x*x)/dx at 3


def test_the_capture_keeps_the_values_it_was_taken_with():
    w = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64, requires_grad=True)
    captured = rt.capture((w * w.exp()).sum(), names={"w": w})
    before = captured.run()
    with torch.no_grad():
        w.mul_(3)  # an optimizer step, say
    assert torch.equal(captured.run()["w"], before["w"])


def test_an_existing_grad_is_accumulated_into():
    w = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64, requires_grad=True)
    w.grad = torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64)
    loss = (w * w).sum()
    captured = rt.capture(loss, names={"w": w})
    assert captured.graph.leaves[0].grad.tolist() == [0.5, 0.5, 0.5]
    ours = captured.run()
    loss.backward()
    assert ours["w"].tolist() == w.grad.tolist() == [2.5, 4.5, -1.5]  # 0.5 + 2w


def test_autograd_grad_with_a_subset_of_inputs():
    torch.manual_seed(7)
    w1 = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    x = torch.randn(5, 3, dtype=torch.float64)
    hidden = (x @ w1).relu()
    loss = (hidden @ w2).pow(2).sum()
    captured = rt.capture(loss, inputs=[w1, hidden], names={"w1": w1, "w2": w2, "hidden": hidden})
    assert [name for name, _ in captured.graph.captures] == ["w1", "hidden"]
    ours = captured.run()
    expected = torch.autograd.grad(loss, [w1, hidden])
    assert list(ours) == ["w1", "hidden"]
    assert_grads_close(ours["w1"], expected[0], torch.float64, "w1")
    assert_grads_close(ours["hidden"], expected[1], torch.float64, "hidden")
    assert w1.grad is None and w2.grad is None  # autograd.grad accumulates nothing


def test_backward_with_inputs_accumulates_only_into_them():
    torch.manual_seed(9)
    w1 = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    loss = ((torch.randn(5, 3, dtype=torch.float64) @ w1).relu() @ w2).pow(2).sum()
    ours = rt.capture(loss, inputs=[w1], accumulate_grad=True, names={"w1": w1, "w2": w2}).run()
    loss.backward(inputs=[w1])
    assert w2.grad is None and ours.get("w2") is None
    assert_grads_close(ours["w1"], w1.grad, torch.float64, "w1")


def test_autograd_grad_of_an_unused_input_raises_as_torch_does():
    x = torch.ones(2, requires_grad=True)
    unused = torch.ones(2, requires_grad=True)
    loss = (x * 2).sum()
    with pytest.raises(refgrad.Error, match="appears to not have been used in the graph"):
        rt.capture(loss, inputs=[unused])
    captured = rt.capture(loss, inputs=[x, unused], allow_unused=True)
    ours = captured.run()
    assert ours["input0"].tolist() == [2.0, 2.0] and ours["input1"] is None


def test_negative_saved_ints_round_trip(tmp_path):
    x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3).requires_grad_()
    loss = (x.sum(-1) * torch.tensor([1.0, -2.0], dtype=torch.float64)).sum()
    assert loss.grad_fn.next_functions[0][0].next_functions[0][0]._saved_dim == (2**64 - 1,)  # torch's view of -1
    captured = rt.capture(loss, names={"x": x})
    assert "dim=[-1]" in str(captured.program)
    path = tmp_path / "sum.safetensors"
    captured.save(path)
    loaded = refgrad.Bundle.load(str(path))
    assert loaded.program == captured.program
    ours = refgrad.run_program(loaded)["@x"].torch()
    loss.backward()
    assert torch.equal(ours, x.grad)


def test_grad_outputs_for_a_non_scalar_output():
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    y = x * x
    with pytest.raises(refgrad.Error, match="grad can be implicitly created only for scalar outputs"):
        rt.capture(y)
    g = torch.tensor([1.0, -3.0], dtype=torch.float64)
    ours = rt.capture(y, grad_outputs=g, names={"x": x}).run()
    y.backward(g)
    assert torch.equal(ours["x"], x.grad)
    with pytest.raises(refgrad.Error, match="element 0 of tensors does not require grad"):
        rt.capture(torch.ones(1))


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_origin_is_the_forward_line_under_anomaly_mode():
    x = torch.ones(2, requires_grad=True)
    with torch.autograd.detect_anomaly(check_nan=False):
        loss = (x.exp() * 2).sum()
    line = inspect.currentframe().f_lineno - 1
    captured = rt.capture(loss)
    origins = {node.name: node.origin for node in captured.graph.nodes if node.kind == "builtin"}
    assert origins["ExpBackward0"] == f"{pathlib.Path(__file__)}:{line}"
    assert rt.capture((x * 2).sum()).graph.nodes[0].origin == ""  # no anomaly mode, no origin


# ------------------------------------------------------------ unsupported ---


def test_a_reentrant_checkpoint_whose_recomputation_fails_is_refused_naming_node_fields_and_path():
    import torch.utils.checkpoint as checkpoint

    torch.manual_seed(8)
    layer = nn.Linear(3, 3)
    calls = []

    def block(a):  # the recomputation (its second call) fails
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("not again")
        return layer(a).relu()

    loss = checkpoint.checkpoint(block, torch.randn(2, 3, requires_grad=True), use_reentrant=True).mean()
    with pytest.raises(rt.UnsupportedError) as raised:
        rt.capture(loss)
    message = str(raised.value)
    assert "CheckpointFunctionBackward: activation checkpointing (use_reentrant=True)" in message
    assert "raised ValueError: not again" in message
    assert "_raw_saved_tensors" in message  # its saved fields
    assert "MeanBackward0 -> CheckpointFunctionBackward" in message  # where it sits
    assert isinstance(raised.value, refgrad.Error)


class Float32Store:
    """Saved-tensor hooks that keep saved tensors in float32 and give them back in their dtype: the
    backward computes with the rounded values. Counts how often each packed value is unpacked."""

    def __init__(self):
        self.unpacked = []

    def pack(self, tensor):
        return tensor.dtype, tensor.detach().to(torch.float32)

    def unpack(self, packed):
        self.unpacked.append(id(packed))
        dtype, values = packed
        return values.to(dtype)


def test_saved_tensor_hooks_are_captured_through_their_unpack_hooks():
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2)).double()
    x, target = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    store = Float32Store()
    with torch.autograd.graph.saved_tensors_hooks(store.pack, store.unpack):
        loss = ((model(x) - target) ** 2 * torch.arange(2.0, dtype=torch.float64)).sum()
        x_scaled = torch.randn(4, dtype=torch.float64, requires_grad=True)
        loss = loss + (ScaledCube.apply(x_scaled * 2, 0.5, torch.zeros(4, dtype=torch.float64)) * 3).sum()
    names = {"x_scaled": x_scaled, **dict(model.named_parameters())}
    captured = rt.capture(loss, names=names)
    assert len(store.unpacked) == len(set(store.unpacked)), "an unpack hook ran twice for one saved value"
    ours = captured.run()
    exact = {name: tensor.grad for name, tensor in names.items()}  # None: no backward yet
    loss.backward()
    for name, tensor in names.items():
        assert exact[name] is None
        assert_grads_close(ours[name], tensor.grad, torch.float64, name)
    # The hooks matter: without them (exact saved values) the first layer's grad is another.
    plain = ((model(x) - target) ** 2 * torch.arange(2.0, dtype=torch.float64)).sum()
    grad = torch.autograd.grad(plain, model[0].weight)[0]
    assert (grad - ours["0.weight"]).abs().max() > 1e-9


def test_capture_under_active_saved_tensor_hooks_runs_as_in_torch():
    # save_on_cpu is a saved_tensors_hooks (CPU to CPU here); capture may run inside it.
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.save_on_cpu():
        y = x.clone()
        with rt.recording():
            y[1:].mul_(2.0)  # a CopySlices, whose wrapped node capture replays under the hooks
        loss = (y @ w).tanh().sum()
        captured = rt.capture(loss, names={"x": x, "w": w})
    ours = captured.run()
    loss.backward()
    assert_grads_close(ours["x"], x.grad, torch.float64, "x")
    assert_grads_close(ours["w"], w.grad, torch.float64, "w")


def test_coverage_lists_unsupported_nodes_without_raising():
    x = torch.randn(4, 4, requires_grad=True)
    copy = x.clone()
    copy[0] = 0.0  # an in-place write into a view: CopySlices
    loss = (torch.igamma(torch.full((4, 4), 1.5), x.exp()).mean() + copy.sum()).exp()  # refgrad has no IgammaBackward0
    found = rt.coverage(loss)
    assert sorted(item.name for item in found) == ["CopySlices", "IgammaBackward0"]
    copy_slices = next(item for item in found if item.name == "CopySlices")
    assert copy_slices.where == "ExpBackward0 -> AddBackward0 -> SumBackward0 -> CopySlices"
    assert "base and view geometry" in copy_slices.reason
    igamma = next(item for item in found if item.name == "IgammaBackward0")
    assert igamma.where == "ExpBackward0 -> AddBackward0 -> MeanBackward0 -> IgammaBackward0"
    assert "refgrad has no node IgammaBackward0" in igamma.reason
    assert rt.coverage((x * 2).sum()) == []


def test_in_place_op_on_a_view_runs_as_in_torch():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    with rt.recording():
        y = x.clone()
        y[:, 0] *= 3.0  # MulBackward0 inside CopySlices, then setitem's copy_: CopyBackwards inside CopySlices
        loss = (y * y).sum()
    captured = rt.capture(loss, names={"x": x})
    ours = captured.run()
    loss.backward()
    assert torch.equal(ours["x"], x.grad)
    wrapped = sorted(instr.node for instr in captured.program.code if instr.op == "CopySlices")
    assert wrapped == ["CopyBackwards", "MulBackward0"]


# ------------------------------------------------- in-place ops on views ---


def copy_slices_of(captured):
    """The captured CopySlices nodes, in the program's order: (wrapped node, base, view) with each
    geometry as (sizes, strides, storage_offset)."""
    def geometry(g):
        return list(g.sizes), list(g.strides), g.storage_offset

    nodes = [captured.graph.nodes[node] for instr, node in zip(captured.program.code, captured.node_of_instruction)
             if instr.op == "CopySlices"]
    assert all(node.kind == "copy_slices" for node in nodes)
    return [(node.name, geometry(node.saved["base"]), geometry(node.saved["view"])) for node in nodes]


def capture_in_place_and_compare(forward, dtype):
    """Runs forward(x, y) (x 3x4, y 3x2, both requiring grad) under recording(), captures its backward,
    runs it in refgrad and compares with torch's backward."""
    torch.manual_seed(20)
    x = torch.randn(3, 4, dtype=dtype, requires_grad=True)
    y = torch.randn(3, 2, dtype=dtype, requires_grad=True)
    with rt.recording():
        loss = forward(x, y)
    captured = rt.capture(loss, names={"x": x, "y": y})
    ours = captured.run(precision(dtype))
    loss.backward()
    for name, leaf in (("x", x), ("y", y)):
        if leaf.grad is None:
            assert ours.get(name) is None, name
        else:
            assert_grads_close(ours[name], leaf.grad, dtype, name)
            assert ours[name].dtype == dtype
    return captured


# Geometries below are known by construction: x * 1 is a contiguous 3x4 tensor (strides [4, 1], offset 0).
BASE = ([3, 4], [4, 1], 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mul_on_a_row_view(dtype):
    def forward(x, y):
        b = x * 1
        b[0].mul_(2)
        return (b * b).sum()

    captured = capture_in_place_and_compare(forward, dtype)
    assert copy_slices_of(captured) == [("MulBackward0", BASE, ([4], [1], 0))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_of_a_tensor_requiring_grad_on_a_slice_view(dtype):
    def forward(x, y):
        b = x * 1
        b[:, 1:3].add_(y, alpha=2)
        return (b ** 3).sum()

    captured = capture_in_place_and_compare(forward, dtype)
    assert copy_slices_of(captured) == [("AddBackward0", BASE, ([3, 2], [4, 1], 1))]
    add = next(node for node in captured.graph.nodes if node.kind == "copy_slices")
    assert add.saved["alpha"] == 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_three_in_place_ops_on_views_of_one_base(dtype):
    def forward(x, y):
        b = x * 1
        b[0].mul_(2)
        b[:, 1:3].add_(y)
        b[1].exp_()  # saves its result, the view's values after the op
        return (b * b).sum()

    captured = capture_in_place_and_compare(forward, dtype)
    # The program runs the last op's CopySlices first.
    assert copy_slices_of(captured) == [("ExpBackward0", BASE, ([4], [1], 4)),
                                        ("AddBackward0", BASE, ([3, 2], [4, 1], 1)),
                                        ("MulBackward0", BASE, ([4], [1], 0))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mul_on_a_transposed_view(dtype):
    def forward(x, y):
        b = x * 1
        b.t()[1:3].mul_(y.t() * 3)  # rows 1 and 2 of the 4x3 transpose: columns 1 and 2 of b
        return b.exp().sum()

    captured = capture_in_place_and_compare(forward, dtype)
    assert copy_slices_of(captured) == [("MulBackward0", BASE, ([2, 3], [1, 4], 1))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_in_place_ops_on_views_of_a_column_major_base(dtype):
    def forward(x, y):
        b = x.t() * 1  # 4x3, strides [1, 4]: the product keeps x.t()'s layout
        b[:, 1].mul_(y[:, 0].repeat(2)[:4])
        b[2:].sigmoid_()  # saves its result
        return (b * torch.arange(12, dtype=b.dtype).reshape(4, 3)).sum()

    captured = capture_in_place_and_compare(forward, dtype)
    base = ([4, 3], [1, 4], 0)
    assert copy_slices_of(captured) == [("SigmoidBackward0", base, ([2, 3], [1, 4], 2)),
                                        ("MulBackward0", base, ([4], [1], 4))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_into_a_view_of_a_base_that_needs_no_grad(dtype):
    def forward(x, y):
        z = torch.zeros(3, 2, dtype=dtype)
        z[0].add_(y[0] * 2)  # CopySlices' edge to the base is invalid; AddBackward0's other edge is not
        return (x[:, :2] * z).sum()

    captured = capture_in_place_and_compare(forward, dtype)
    assert copy_slices_of(captured) == [("AddBackward0", ([3, 2], [2, 1], 0), ([2], [1], 0))]


def test_an_in_place_op_under_no_grad_is_not_recorded():
    x = torch.randn(3, 4, requires_grad=True)
    b = x * 1
    b[0].mul_(2)  # outside recording(): its CopySlices has no record
    with rt.recording(), torch.no_grad():
        b[1].mul_(3)  # autograd makes no CopySlices, so nothing may be recorded for b's
    with pytest.raises(rt.UnsupportedError, match=r"refgrad\.torch\.recording\(\)"):
        rt.capture(b.sum())


def test_copy_slices_outside_recording_says_how_to_capture_it():
    x = torch.randn(3, 4, requires_grad=True)
    b = x * 1
    b[0].mul_(2)
    with pytest.raises(rt.UnsupportedError, match=r"CopySlices: .*base and view geometry.*run the forward under "
                                                   r"refgrad\.torch\.recording\(\)"):
        rt.capture(b.sum())


def test_copy_slices_around_a_node_refgrad_lacks_raises_clearly():
    x = torch.randn(3, 4, requires_grad=True)
    with rt.recording():
        b = x * 1
        b[1:].uniform_()  # UniformBackward0 inside CopySlices
    with pytest.raises(rt.UnsupportedError, match=r"CopySlices: CopySlices wraps UniformBackward0 \(in-place "
                                                   r"aten\.uniform_\.default\), which refgrad has not.*at SumBackward0 "
                                                   r"-> CopySlices"):
        rt.capture(b.sum())


def test_copy_slices_of_a_replayed_view_raises_clearly():
    x = torch.randn(3, 4, requires_grad=True)
    with rt.recording(), torch.autograd._force_original_view_tracking(True):
        b = x * 1
        b[0].mul_(2)  # CopySlices keeps a view_fn to replay b[0], which refgrad's CopySlices does not run
    with pytest.raises(rt.UnsupportedError, match=r"CopySlices: an in-place aten\.mul_\.Tensor on a view: view "
                                                   r"replay is enabled"):
        rt.capture(b.sum())


class ScaledColumns(nn.Module):
    """A linear layer whose first two output columns are scaled in place by a parameter."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 4)
        self.scale = nn.Parameter(torch.tensor([0.5, -2.0]))

    def forward(self, x):
        h = self.linear(x)
        h[:, 0:2].mul_(self.scale)
        return h.tanh().sum()


def test_refgrad_check_passes_a_model_with_an_in_place_op_on_a_view(tmp_path):
    import refgrad.check as refgrad_check
    from refgrad.engines import CompiledAutograd

    torch.manual_seed(21)
    model = ScaledColumns().double()
    report = refgrad_check.check(model, torch.randn(5, 3, dtype=torch.float64),
                                 engines=("eager", CompiledAutograd()), reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert list(report.results) == ["eager", "compiled_autograd"]
    assert report.first_divergence == {"eager": None, "compiled_autograd": None}


def test_a_freed_graph_raises_clearly():
    x = torch.ones(2, requires_grad=True)
    loss = x.exp().sum()
    loss.backward()
    with pytest.raises(refgrad.Error, match="freed by a backward"):
        rt.capture(loss)


def test_hidden_scalar_types_come_from_the_forward_inputs():
    x = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)  # float32
    row = torch.tensor([0.1, 0.2, 1 / 3], dtype=torch.float64, requires_grad=True)
    loss = (x * row * torch.arange(3.0, dtype=torch.float64)).sum()
    captured = rt.capture(loss, names={"x": x, "row": row})
    mul = next(node for node in captured.graph.nodes if node.name == "MulBackward0" and node.next_edges[1] is not None)
    # Known by construction: x is float32, row float64.
    assert (mul.saved["self_scalar_type"], mul.saved["other_scalar_type"]) == ("float32", "float64")
    ours = captured.run("float32")  # as captured: float32 and float64 mixed
    loss.backward()
    for name, leaf in captured.leaves.items():
        assert ours[name].dtype == leaf.dtype, name
        assert torch.equal(ours[name], leaf.grad), name


def cat_with_an_item_that_needs_no_grad():
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64, requires_grad=True)
    y = torch.full((4, 3), 1 / 3, dtype=torch.float64, requires_grad=True)
    fixed = torch.zeros(2, 3, dtype=torch.float64)  # needs no grad: no edge shows its sizes
    loss = (torch.cat([x * 2, fixed, y], dim=0) * torch.arange(7.0, dtype=torch.float64)[:, None]).sum()
    return x, y, loss


def test_cat_sizes_and_dtypes_are_derived_per_item():
    x, y, loss = cat_with_an_item_that_needs_no_grad()
    graph = rt.graph_of(loss, names={"x": x, "y": y})
    cat = next(node for node in graph.nodes if node.name == "CatBackward0")
    # Known by construction: cat's items have 1, 2 and 4 rows of float64.
    assert cat.saved["tensors_args_sizes_symint"] == [[1, 3], [2, 3], [4, 3]]
    assert cat.saved["tensors_args_scalartypes"] == ["float64"] * 3
    assert cat.saved["dim"] == 0


def test_functionalize_errors_say_where_the_node_sits(monkeypatch):
    # A graph functionalize refuses: cat's saved scalar types one short of its three list items.
    capture_graph = rt.capturing._capture_graph

    def one_item_short(*args):
        captured = capture_graph(*args)
        cat = next(node for node in captured.graph.nodes if node.name == "CatBackward0")
        cat.saved["tensors_args_scalartypes"] = cat.saved["tensors_args_scalartypes"][:2]
        return captured

    monkeypatch.setattr(rt.capturing, "_capture_graph", one_item_short)
    x, y, loss = cat_with_an_item_that_needs_no_grad()
    with pytest.raises(refgrad.Error, match=r"node \d+ \(CatBackward0\) has 3 next edges.*\(at SumBackward0 -> "
                                            r"MulBackward0 -> CatBackward0\)"):
        rt.capture(loss)


def test_cat_runs_as_in_torch():
    x, y, loss = cat_with_an_item_that_needs_no_grad()
    ours = rt.capture(loss, names={"x": x, "y": y}).run()
    loss.backward()
    assert torch.equal(ours["x"], x.grad) and torch.equal(ours["y"], y.grad)


def test_stack_of_three_items_one_a_constant_runs_as_in_torch():
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([3.0, -1.0], dtype=torch.float64, requires_grad=True)
    stacked = torch.stack([x, torch.ones(2, dtype=torch.float64), y * y], dim=1)
    loss = (stacked * torch.arange(6.0, dtype=torch.float64).view(2, 3)).sum()
    ours = rt.capture(loss, names={"x": x, "y": y}).run()
    loss.backward()
    assert torch.equal(ours["x"], x.grad) and torch.equal(ours["y"], y.grad)


def test_native_dropout_train_is_recorded():
    # torch hides train; outside recording() the node is refused (test_geometry.py has those cases)
    torch.manual_seed(10)
    x = torch.randn(50, dtype=torch.float64, requires_grad=True)
    with rt.recording():
        output, _ = torch.native_dropout(x, 0.25, True)
    loss = (output * torch.arange(50.0, dtype=torch.float64)).sum()
    captured = rt.capture(loss, names={"x": x})
    assert next(n for n in captured.graph.nodes if n.name == "NativeDropoutBackward0").saved["train"] is True
    ours = captured.run()
    loss.backward()
    assert torch.equal(ours["x"], x.grad)  # kept elements scaled by 1 / (1 - p), dropped ones 0


def test_compiled_autograd_order_gives_the_same_grads():
    torch.manual_seed(11)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)).double()
    loss = model(torch.randn(4, 3, dtype=torch.float64)).pow(2).mean()
    captured = rt.capture(loss, names=dict(model.named_parameters()), order="compiled_autograd")
    ours = captured.run()
    loss.backward()
    for name, parameter in model.named_parameters():
        assert_grads_close(ours[name], parameter.grad, torch.float64, name)


def test_sparse_tensors_are_refused_by_name():
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64)
    sparse = dense.to_sparse_csr().requires_grad_()
    out = torch.sparse.mm(sparse, torch.ones(2, 2, dtype=torch.float64, requires_grad=True))
    with pytest.raises(refgrad.Error, match=r"input 0 is a torch.sparse_csr tensor; .*sparse layouts are not supported"):
        rt.capture(out.sum(), inputs=[sparse])
    coo = dense.to_sparse().requires_grad_()
    with pytest.raises(refgrad.Error, match=r"output 0 is a torch.sparse_coo tensor"):
        rt.capture(coo * 2, grad_outputs=[(coo * 2).detach()])


def test_a_dense_graph_through_a_sparse_layout_is_refused_naming_the_layout():
    """x.to_sparse().to_dense(): dense at both ends, sparse between. The two nodes are refused as sparse
    (UnsupportedError, so that refgrad.check falls back on eager), not as nodes refgrad happens to lack."""
    x = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64, requires_grad=True)
    out = (x.to_sparse().to_dense() * 2).sum()
    with pytest.raises(rt.UnsupportedError) as refused:
        rt.capture(out)
    assert {item.name for item in refused.value.unsupported} == {"ToDenseBackward0", "ToSparseBackward1"}
    for item in refused.value.unsupported:
        assert "sparse layout" in item.reason and "refgrad has no node" not in item.reason
    assert rt.coverage(out)  # coverage() says the same without raising


def test_an_input_that_is_a_no_grad_view_of_a_leaf_gets_no_gradient_as_in_torch():
    """A view made under no_grad of a leaf that requires grad (OpInfo's istft window, window[:8]) requires
    grad but has no node of its own: torch.autograd.graph.get_gradient_edge fails on it ("Expected gradient
    function to be set") and torch.autograd.grad gives it None. capture does the same with allow_unused,
    and says what torch says without it."""
    base = torch.randn(10, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        window = base[:8]
    assert window.requires_grad and window.grad_fn is None
    x = torch.randn(8, dtype=torch.float64, requires_grad=True)
    out = (x * window).sum()
    expected = torch.autograd.grad(out, [x, window], allow_unused=True, retain_graph=True)
    assert expected[1] is None
    grads = rt.capture(out, inputs=[x, window], allow_unused=True, names={"x": x, "window": window}).run()
    assert grads["window"] is None
    torch.testing.assert_close(grads["x"], expected[0])
    with pytest.raises(refgrad.Error, match=r"input 1: One of the differentiated Tensors appears to not have been used"):
        rt.capture(out, inputs=[x, window])


# A hidden field of a forward input X (X_scalar_type, X_options, X_info, ...) is derived from X's edge, else
# from a saved tensor named X, else from the node's own output metadata. The last is no fact about X: it is
# exact only where X is the node's output's shape and dtype, and harmless only where nothing reads it. X has
# no edge exactly when it needs no grad, so X's own formula never runs; what must not happen is another
# input's formula reading it. These are the derivatives.yaml formulas that do, with why each node of refgrad
# is safe (a node refgrad lacks must be looked at when it comes: the test fails for it).
_HIDDEN_FIELDS_READ_BY_ANOTHER_FORMULA = {
    # zeros_like(values) / zeros_like(source) scattered into grad: refgrad scatters zeros of grad's dtype,
    # not reading the field (tests/nodes/test_indexing.cpp)
    ("IndexPutBackward0", "values_info"): "not read",
    ("PutBackward0", "source_info"): "not read",
    # select/slice/diagonal_scatter(grad, zeros_like(src)): refgrad zeroes the view of grad
    ("SelectScatterBackward0", "src_info"): "not read",
    ("SliceScatterBackward0", "src_info"): "not read",
    ("DiagonalScatterBackward0", "src_info"): "not read",
    # a geometry is never derived from output metadata: capture refuses the node when it cannot know it
    ("AsStridedScatterBackward0", "src_geometry"): "refused when unknown",
}


def _formulas_reading_another_inputs_hidden_field() -> set[tuple[str, str]]:
    import os
    import torchgen
    from torchgen.packaged.autograd.load_derivatives import load_derivatives
    packaged = os.path.join(os.path.dirname(torchgen.__file__), "packaged")
    infos, _ = load_derivatives(os.path.join(packaged, "autograd", "derivatives.yaml"),
                                os.path.join(packaged, "ATen", "native", "native_functions.yaml"),
                                os.path.join(packaged, "ATen", "native", "tags.yaml"))
    hidden = ("_scalar_type", "_options", "_info", "_layout", "_args_scalartypes", "_args_sizes_symint",
              "_args_sizes", "_geometry")
    found = set()
    for per_key in infos.values():
        for info in per_key.values():
            if info is None or info.op is None:
                continue
            inputs = {argument.name for argument in info.func.func.arguments.flat_all}
            for derivative in info.derivatives:
                for saved in derivative.saved_inputs:
                    field = str(saved.nctype.name)
                    for suffix in hidden:
                        owner = field.removesuffix(suffix)
                        if field.endswith(suffix) and owner in inputs and owner not in derivative.var_names:
                            found.add((info.op, field))
    return found


def test_no_gradient_reads_a_hidden_field_that_capture_cannot_know():
    registered = {node.name for node in refgrad.nodes()}
    found = _formulas_reading_another_inputs_hidden_field()
    assert ("IndexPutBackward0", "values_info") in found  # the search finds what it looks for
    unexamined = sorted(pair for pair in found if pair[0] in registered and pair not in _HIDDEN_FIELDS_READ_BY_ANOTHER_FORMULA)
    assert not unexamined, f"nodes whose formula reads another input's hidden field: {unexamined}"


@pytest.mark.parametrize("op", ["index_put", "put", "index_put_broadcast"])
def test_scattering_values_that_need_no_grad_runs_as_in_torch(op):
    """values / source need no grad: no edge shows their sizes, and self's gradient must not depend on them."""
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    if op == "index_put":
        out = x.index_put((torch.tensor([0, 3, 0]),), torch.randn(3, 4, dtype=torch.float64))
    elif op == "index_put_broadcast":
        out = x.index_put((torch.tensor([1, 2]), torch.tensor([0, 3])), torch.tensor(2.0, dtype=torch.float64))
    else:
        out = x.put(torch.tensor([0, 7, 19]), torch.randn(3, dtype=torch.float64))
    loss = (out * torch.arange(20.0, dtype=torch.float64).reshape(5, 4)).sum()
    ours = rt.capture(loss, names={"x": x}).run()
    loss.backward()
    torch.testing.assert_close(ours["x"], x.grad, rtol=0, atol=0)
