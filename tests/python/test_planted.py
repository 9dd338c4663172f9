"""Issue 7, Deliver 7: planted bugs. refgrad.check must name exactly the node that went wrong, every time.

- a torch.compile backend (compiled autograd's) whose FX pass scales one op of the backward by 1.01, at
  three depths of a model;
- a black-box engine (it only returns gradients: no observe=, so check localizes it through probes on the
  forward's intermediates) that scales one node's outgoing gradients, at three depths;
- an engine that adds two gradients meeting in an input buffer wrongly (1.01 a + b);
- an engine whose AccumulateGrad accumulates into an existing .grad wrongly (keep_grad=True);
- and correct engines that only sum in another order (or in float64), which must not be flagged.

Each instance is pinned by the node's name and by the forward source line that created it (Deep's lines
are marked "# depth: ..."); the divergence's pc must be an instruction that calls that node.

Run as tests/python/conftest.py says:
    PYTHONPATH=build-py/src/python:src/python python -m pytest tests/python/test_planted.py -q
"""
import inspect

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import refgrad
import refgrad.check as refgrad_check
import refgrad.torch as rt
from refgrad.engines import CompiledAutograd, Eager, Forward

from planting import scale_op_results


class Deep(torch.nn.Module):
    """Four Linear layers, tanh, sigmoid, a residual (h2 used twice) and an MSE loss; each depth on its own
    source line, so that a node's forward source line says which instance it is."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 8)
        self.l3, self.l4 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)

    def forward(self, x, target):
        h1 = torch.tanh(self.l1(x))  # depth: inputs
        h2 = torch.sigmoid(self.l2(h1))  # depth: middle
        h3 = torch.tanh(self.l3(h2)) + h2  # depth: residual
        return torch.nn.functional.mse_loss(self.l4(h3), target)  # depth: loss


def line_of(marker):
    """The source line of Deep.forward marked ``# depth: marker``, as the report writes it (file:line)."""
    lines, first = inspect.getsourcelines(Deep.forward)
    numbers = [first + i for i, text in enumerate(lines) if text.rstrip().endswith(f"# depth: {marker}")]
    assert len(numbers) == 1, marker
    return f"{inspect.getsourcefile(Deep)}:{numbers[0]}"


@pytest.fixture
def deep():
    torch.manual_seed(0)
    return Deep(), torch.randn(5, 6), torch.randn(5, 3)


def check(model, *args, engine, tmp_path, **options):
    return refgrad_check.check(model, *args, engines=("eager", engine), reproducer_dir=str(tmp_path), **options)


def assert_names(report, engine, node, source=None, gradient=None):
    """The engine failed, eager did not, and the first divergence is ``node`` (created at ``source``):
    the report's pc is an instruction of the oracle's program that calls that node."""
    assert report.engine_passed("eager") and not report.engine_passed(engine), str(report)
    assert report.first_divergence["eager"] is None
    divergence = report.first_divergence[engine]
    assert divergence.localized, str(report)
    assert divergence.node == node, str(divergence)
    if source is not None:
        assert divergence.source == source, str(divergence)
    if gradient is not None:
        assert gradient in divergence.gradient, str(divergence)
    assert divergence.error > divergence.tolerance
    program = refgrad.Bundle.load(report.reproducers[engine]).program
    instruction = program.code[divergence.pc]
    called = f"AccumulateGrad(@{instruction.target})" if instruction.op == "accumulate_grad" else instruction.node
    assert called == node
    return divergence


def assert_swap_names(report, engine, node, source=None):
    """Swap mode named ``node`` first, at a pc of the oracle's program (the reproducer's) that calls it."""
    swap = report.swaps[engine]
    assert swap.node == node, str(swap)
    if source is not None:
        assert swap.source == source, str(swap)
    program = refgrad.Bundle.load(report.reproducers[engine]).program
    assert program.code[swap.pc].node == node, str(swap)
    return swap


# ------------------------------------------------- a. a compiler with a bug ---


aten = torch.ops.aten


@pytest.mark.parametrize("op, occurrence, node, depth", [
    (aten.mse_loss_backward.default, 0, "MseLossBackward0", "loss"),
    (aten.sigmoid_backward.default, 0, "SigmoidBackward0", "middle"),
    (aten.tanh_backward.default, -1, "TanhBackward0", "inputs"),  # h1's tanh, not h3's
], ids=["near-the-loss", "middle", "near-the-inputs"])
def test_a_compiler_that_miscomputes_one_op(deep, tmp_path, op, occurrence, node, depth):
    buggy = CompiledAutograd(backend=aot_autograd(fw_compiler=scale_op_results(op, occurrence)), name="buggy_compiler")
    report = check(*deep, engine=buggy, tmp_path=tmp_path)
    divergence = assert_names(report, "buggy_compiler", node, line_of(depth))
    assert "second backward" in divergence.graph


# -------------------------------------------------- b. a black-box engine ---


def grad_fn_nodes(outputs):
    """Every node of the outputs' backward graph, each once, as capture walks them."""
    return rt._Walk(output.grad_fn for output in outputs).order


def node_created_at(outputs, name, source):
    """The node named ``name`` whose forward source line (capture's origin, from anomaly mode's traceback)
    is ``source``."""
    nodes = [node for node in grad_fn_nodes(outputs) if node.name() == name and rt._origin(node) == source]
    assert len(nodes) == 1, (name, source, len(nodes))
    return nodes[0]


class PerturbsOneNode:
    """A black box: torch's autograd with a post-hook that scales the outgoing gradients of one node,
    found by its name and forward source line. It returns only gradients (no observe=): check must
    localize it through the probes' gradients."""

    def __init__(self, node, source, factor=1.01):
        self.name = f"perturbs_{node}"
        self.node, self.source, self.factor = node, source, factor

    def gradients(self, forward, grad_outputs):
        with torch.autograd.set_detect_anomaly(True, check_nan=False):  # to know each node's source line
            run = forward()
        target = node_created_at(run.outputs, self.node, self.source)
        target.register_hook(lambda grads, incoming: tuple(None if g is None else g * self.factor for g in grads))
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}


@pytest.mark.parametrize("node, depth", [
    ("MseLossBackward0", "loss"),
    ("SigmoidBackward0", "middle"),
    ("TanhBackward0", "inputs"),  # h1's tanh; h3's is another instance of TanhBackward0
], ids=["near-the-loss", "middle", "near-the-inputs"])
def test_a_black_box_that_perturbs_one_node(deep, tmp_path, node, depth):
    engine = PerturbsOneNode(node, line_of(depth))
    report = check(*deep, engine=engine, tmp_path=tmp_path)
    divergence = assert_names(report, engine.name, node, line_of(depth))
    assert "intermediates" in divergence.graph
    # the node's own incoming gradient was recorded (a probe on the result of tanh, sigmoid or mse_loss):
    # the localization is exact, not "in it or in a node between"
    assert "was not recorded" not in divergence.gradient, str(divergence)


# ------------------------------------------- c. a wrong add in an input buffer ---


def producers_into(outputs, consumer):
    """(node, slot) of every outgoing gradient that goes into ``consumer``'s input buffer."""
    return [(node, slot) for node in grad_fn_nodes(outputs)
            for slot, (child, _) in enumerate(node.next_functions) if child is consumer]


def sum_buffer_with(consumer, outputs, add):
    """Makes torch's engine sum ``consumer``'s input buffer (slot 0) as ``add(contributions)`` does, the
    contributions in the order they arrived: a post-hook on every producer records its gradient into the
    buffer, and a pre-hook on the consumer replaces what torch summed with ``add``'s sum."""
    contributions = []
    producers = producers_into(outputs, consumer)
    for producer, slot in producers:
        producer.register_hook(lambda grads, incoming, slot=slot: contributions.append(grads[slot]))

    def summed(incoming):
        assert len(contributions) == len(producers)
        return (add(contributions),) + tuple(incoming[1:])

    consumer.register_prehook(summed)
    return len(producers)


class SumsBuffer:
    """torch's autograd, except where the gradients into one node meet: that input buffer is summed by
    ``add`` (a list of the contributions -> their sum). It runs torch's autograd graph, so it takes
    observe=: check localizes it with node hooks."""

    def __init__(self, name, find, add):
        self.name, self.find, self.add = name, find, add
        self.contributions = 0

    def gradients(self, forward, grad_outputs, *, observe=None):
        with torch.autograd.set_detect_anomaly(True, check_nan=False):
            run = forward()
        self.contributions = sum_buffer_with(self.find(run), run.outputs, self.add)
        if observe is not None:
            observe(run)
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}


def wrong_add(contributions):
    """1.01 a + b + ...: the first gradient to arrive is added wrongly."""
    first, *rest = contributions
    return sum(rest, 1.01 * first)


def accumulate_grad_of(leaf_name):
    return lambda run: torch.autograd.graph.get_gradient_edge(run.leaves[leaf_name]).node


def test_a_wrong_add_where_an_activations_gradients_meet(deep, tmp_path):
    """h2 feeds l3 and the residual: two gradients meet in SigmoidBackward0's input buffer, whose slot 0
    is the gradient with respect to SigmoidBackward0's output (DESIGN.md). Every gradient added into it
    agrees with the oracle and their sum does not: the node named is SigmoidBackward0, the node whose input
    buffer was summed wrongly (its incoming gradient is off, not its formula)."""
    engine = SumsBuffer("wrong_add", lambda run: node_created_at(run.outputs, "SigmoidBackward0", line_of("middle")),
                        wrong_add)
    report = check(*deep, engine=engine, tmp_path=tmp_path)
    assert engine.contributions == 2
    assert_names(report, "wrong_add", "SigmoidBackward0", line_of("middle"), gradient="input buffer")


def used_often(w, x):
    """The leaf w used four times (w * x, sin(w), w * w): four gradients meet in its AccumulateGrad's input
    buffer, of mixed magnitudes, so that the order of the sums changes the float32 result."""
    return (torch.tanh(w * x) + 3.7 * torch.sin(w) + (w * w).exp() / 7).sum()


@pytest.fixture
def leaf_used_often():
    torch.manual_seed(1)
    return (0.7 * torch.randn(64)).requires_grad_(), torch.randn(64)


def test_a_wrong_add_where_a_leafs_gradients_meet(leaf_used_often, tmp_path):
    """The gradients of w meet in its AccumulateGrad's input buffer: the node named is AccumulateGrad(@arg0)."""
    engine = SumsBuffer("wrong_add", accumulate_grad_of("arg0"), wrong_add)
    report = check(used_often, *leaf_used_often, engine=engine, tmp_path=tmp_path)
    assert engine.contributions == 4  # w * w adds two gradients from one MulBackward0
    assert_names(report, "wrong_add", "AccumulateGrad(@arg0)", gradient="input buffer")


# ------------------------------------------------ d. a wrong AccumulateGrad ---


class AccumulatesWrongly:
    """torch's autograd, except that one leaf's AccumulateGrad writes ``accumulate(old .grad, incoming)``
    into .grad instead of old + incoming (a pre-hook on the AccumulateGrad node sees the incoming gradient,
    a post-accumulate-grad hook rewrites .grad)."""

    def __init__(self, name, leaf, accumulate):
        self.name, self.leaf, self.accumulate = name, leaf, accumulate

    def gradients(self, forward, grad_outputs, *, observe=None):
        run = forward()
        leaf = run.leaves[self.leaf]
        old = None if leaf.grad is None else leaf.grad.clone()
        incoming = []
        torch.autograd.graph.get_gradient_edge(leaf).node.register_prehook(lambda grads: incoming.append(grads[0]))

        def rewrite(tensor):
            with torch.no_grad():
                tensor.grad.copy_(self.accumulate(old, incoming[0]))

        leaf.register_post_accumulate_grad_hook(rewrite)
        if observe is not None:
            observe(run)
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}


@pytest.mark.parametrize("accumulate", [lambda old, new: old + 1.01 * new, lambda old, new: new.clone()],
                         ids=["scales-the-new-grad", "replaces-instead-of-adding"])
def test_a_wrong_accumulate_grad(deep, tmp_path, accumulate):
    model, x, target = deep
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 0.25)
    engine = AccumulatesWrongly("wrong_accumulate", "l2.weight", accumulate)
    report = check(model, x, target, engine=engine, tmp_path=tmp_path, keep_grad=True)
    assert [name for name, result in report.results["wrong_accumulate"].items() if not result.passed] == ["l2.weight"]
    assert_names(report, "wrong_accumulate", "AccumulateGrad(@l2.weight)", gradient="@l2.weight")


# ----------------------------------- e. correct engines that sum in another order ---


class Float64ThenCast:
    """A correct engine: the forward and backward in float64, the gradients cast back to float32."""

    name = "float64_then_cast"

    def gradients(self, forward, grad_outputs):
        def in_float64(fn):
            return lambda *args: fn(*[arg.double() for arg in args])

        run = forward(transform=in_float64)
        torch.autograd.backward(run.outputs, [g.double() for g in grad_outputs])
        return {name: leaf.grad.float() for name, leaf in run.leaves.items()}


def reversed_sum(contributions):
    return sum(reversed(contributions[:-1]), contributions[-1])


def test_an_engine_that_sums_in_another_order_is_not_flagged(leaf_used_often, tmp_path):
    w, x = leaf_used_often
    reordered = SumsBuffer("reversed_sums", accumulate_grad_of("arg0"), reversed_sum)
    report = refgrad_check.check(used_often, w, x, engines=("eager", reordered, Float64ThenCast()),
                                 reproducer_dir=str(tmp_path))
    assert report.passed, str(report)
    assert reordered.contributions == 4
    assert all(divergence is None for divergence in report.first_divergence.values())
    assert report.reproducers == {}
    # the order mattered: each engine's float32 gradient differs from eager's, bit for bit
    eager = run_alone(Eager(), w, x)
    assert not torch.equal(run_alone(reordered, w, x), eager)
    assert not torch.equal(run_alone(Float64ThenCast(), w, x), eager)


def run_alone(engine, w, x):
    """The engine's gradient of used_often(w, x) on a fresh leaf, outside check."""
    def forward(transform=None):
        leaf = w.detach().clone().requires_grad_()
        return Forward([(transform or (lambda fn: fn))(used_often)(leaf, x)], {"arg0": leaf})

    return engine.gradients(forward, [torch.ones(())])["arg0"]
