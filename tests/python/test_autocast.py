"""Mixed precision: forwards under torch.autocast("cpu", float16 / bfloat16), captured and checked.

Under autocast a Linear or a matmul runs in the low-precision dtype while its float32 parameters stay
float32: the backward program holds ToCopyBackward0 nodes between the dtypes and float16/bfloat16
registers. The tests:
- capture such a backward and run it in refgrad, in the program's own dtypes and at the reference
  precision (float64), and compare both with torch.autograd.grad under DESIGN.md's rule;
- check that refgrad runs float16/bfloat16 as ATen does (float32 opmath, rounded once per primitive):
  its run in the program's dtypes is as close to torch's gradient as the dtype's rounding allows, and
  every float16/bfloat16 register is really float16/bfloat16;
- run refgrad.check on an MLP, a CNN and a transformer block under autocast, with eager and compiled
  autograd, against the float64 oracle, and plant a bug in a low-precision node to see it named.
"""
import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import refgrad
import refgrad.check as refgrad_check
import refgrad.torch
from refgrad.engines import CompiledAutograd

from planting import scale_op_results

LOW_DTYPES = [torch.float16, torch.bfloat16]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(6, 4, 3)
        self.head = torch.nn.Linear(4 * 2 * 2, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1))


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention with softmax, then an MLP, both residual."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))
        self.heads = heads

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


def models():
    torch.manual_seed(0)
    return {"mlp": (MLP(), torch.randn(6, 8)), "cnn": (CNN(), torch.randn(2, 3, 12, 12)),
            "block": (Block(), torch.randn(2, 5, 16))}


def autocast_loss(model, dtype):
    """fn for refgrad.check: the model's forward under autocast, reduced to a float32 scalar."""
    def fn(x):
        with torch.autocast("cpu", dtype=dtype):
            out = model(x)
        return out.float().square().mean()
    return fn


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["mlp", "cnn", "block"])
def test_an_autocast_backward_is_captured_and_runs_in_its_dtypes(name, dtype):
    model, x = models()[name]
    x.requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        out = model(x)
    leaves = [x, *model.parameters()]
    grad_out = torch.randn_like(out)
    expected = torch.autograd.grad(out, leaves, grad_out, retain_graph=True)
    captured = refgrad.torch.capture(out, inputs=leaves, grad_outputs=[grad_out])
    text = str(captured.program)
    low = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    assert "ToCopyBackward0" in text and f"{low}[" in text  # a mixed-dtype program
    as_captured = captured.run("as_captured").values()  # the program's own dtypes: float16/bfloat16 stay so
    reference = captured.run("float64").values()
    for leaf, torch_grad, ours, ref in zip(leaves, expected, as_captured, reference):
        assert ours.dtype == torch_grad.dtype == leaf.dtype
        ref = ref.double()
        scale = ref.abs().max().item() or 1.0
        # The dtype's own rounding, through a few layers: refgrad and torch both within it of R ...
        low_rtol = {torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
        bound = 64 * low_rtol * scale
        assert (torch_grad.double() - ref).abs().max().item() <= bound
        assert (ours.double() - ref).abs().max().item() <= bound
        # ... and closer to each other than to R's float64 truth: the same roundings at the same places.
        assert (ours.double() - torch_grad.double()).abs().max().item() <= bound


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
def test_refgrad_reproduces_eagers_low_precision_bits_on_single_kernels(dtype):
    # A chain of nodes each of which is one ATen kernel rounding once: refgrad's float16/bfloat16 run
    # must give torch's bits exactly.
    torch.manual_seed(1)
    x = torch.randn(4, 7, dtype=dtype, requires_grad=True)
    w = torch.randn(4, 7, dtype=dtype, requires_grad=True)
    y = (x * w + x).relu() * 0.5 - w
    grad_out = torch.randn_like(y)
    expected = torch.autograd.grad(y, [x, w], grad_out, retain_graph=True)
    actual = refgrad.torch.capture(y, inputs=[x, w], grad_outputs=[grad_out]).run("as_captured")
    for ours, theirs in zip(actual.values(), expected):
        assert ours.dtype == dtype
        assert torch.equal(ours, theirs)


def _ulps_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest distance in units of the last place between two float16/bfloat16 tensors."""
    bits_a, bits_b = a.view(torch.int16).int(), b.view(torch.int16).int()
    # Map the sign-magnitude bit patterns onto a line where neighbouring values are one apart.
    line_a = torch.where(bits_a < 0, -(bits_a & 0x7FFF), bits_a)
    line_b = torch.where(bits_b < 0, -(bits_b & 0x7FFF), bits_b)
    return int((line_a - line_b).abs().max())


def _grads(make, inputs, dtype):
    """torch's gradients, refgrad's run in the program's dtypes and refgrad's float64 run (R)."""
    y = make()
    grad_out = torch.randn_like(y)
    expected = torch.autograd.grad(y, inputs, grad_out, retain_graph=True)
    captured = refgrad.torch.capture(y, inputs=inputs, grad_outputs=[grad_out])
    return expected, list(captured.run("as_captured").values()), list(captured.run("float64").values()), captured


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
def test_nodes_that_aten_computes_in_one_kernel_round_once(dtype):
    # softmax's, gelu's and layer_norm's backwards are one ATen kernel each, computing in float32 and
    # rounding once; refgrad's formulas take several primitives, so it runs these nodes in float32 as
    # a whole (computes_in_one_kernel) and gives torch's bits.
    torch.manual_seed(2)
    x = torch.randn(6, 16, dtype=dtype, requires_grad=True)
    weight = torch.randn(16, dtype=dtype, requires_grad=True)
    bias = torch.randn(16, dtype=dtype, requires_grad=True)
    for make, node in ((lambda: torch.softmax(x * 3, -1), "SoftmaxBackward0"),
                       (lambda: torch.nn.functional.gelu(x * 3), "GeluBackward0")):
        expected, ours, reference, captured = _grads(make, [x], dtype)
        assert node in str(captured.program)
        assert ours[0].dtype == dtype
        # torch's bits wherever the gradient is not deep in gelu's tail. There, 1 + erf(x / sqrt 2) cancels
        # to a few float32 ulps of 1, and torch's vectorized erf (Vectorized<float>, not libm's) can differ
        # from libm's by those ulps: on an AMD EPYC (AVX512) one element at x = -5.94 of this input is 29
        # bfloat16 ulps off the float32 formula that torch's own scalar kernel computes. refgrad computes
        # that formula; there it must be at least as close to the float64 reference as torch.
        tail = expected[0].float().abs() < 1e-6 * expected[0].float().abs().max()
        assert _ulps_apart(ours[0][~tail], expected[0][~tail]) == 0, node
        ours_error = (ours[0].double() - reference[0])[tail].abs()
        torch_error = (expected[0].double() - reference[0])[tail].abs()
        assert bool((ours_error <= torch_error).all()), node
    expected, ours, reference, captured = _grads(
        lambda: torch.nn.functional.layer_norm(x, (16,), weight, bias), [x, weight, bias], dtype)
    assert "NativeLayerNormBackward0" in str(captured.program)
    assert _ulps_apart(ours[0], expected[0]) <= 1  # the input's gradient: torch's bits up to the order of sums
    # ATen's kernel sums weight's and bias's gradients over the rows in its own blocked order, rounding
    # partial sums (bias: 8 float16 ulps off the exact sum here); refgrad sums in float32 and rounds once,
    # so it is at least as close to R.
    for k in (1, 2):
        exact = reference[k]
        assert (ours[k].double() - exact).abs().max() <= (expected[k].double() - exact).abs().max()


@pytest.mark.parametrize("dtype", LOW_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["mlp", "cnn", "block"])
def test_check_passes_eager_and_compiled_autograd_under_autocast(name, dtype, tmp_path):
    model, x = models()[name]
    report = refgrad_check.check(autocast_loss(model, dtype), x.requires_grad_(True),
                                 engines=("eager", CompiledAutograd()), reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert not report.uncovered, report.uncovered  # R is refgrad's float64 run, not eager's
    assert set(report.results) == {"eager", "compiled_autograd"}


def test_check_names_a_wrong_low_precision_node_under_autocast(tmp_path):
    model, x = models()["mlp"]
    fn = autocast_loss(model, torch.bfloat16)
    # compiled autograd whose gelu backward is wrong: only the bfloat16 GeluBackward0 is.
    # twice the gradient: far beyond bfloat16's rounding at the node itself (a few percent would hide in
    # the node's own bfloat16 bound and show only in a float32 gradient downstream)
    buggy = CompiledAutograd(backend=aot_autograd(fw_compiler=scale_op_results(torch.ops.aten.gelu_backward.default,
                                                                               factor=2.0)),
                             name="buggy_gelu")
    report = refgrad_check.check(fn, x.requires_grad_(True), engines=("eager", buggy), reproducer_dir=str(tmp_path))
    assert report.engine_passed("eager")
    assert not report.engine_passed("buggy_gelu")
    assert report.first_divergence["buggy_gelu"].node == "GeluBackward0", str(report)
