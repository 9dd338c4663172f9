"""Issue 15, Deliver 1: planted bugs at fourteen positions across an MLP, a CNN and a transformer block, for
every kind of engine check localizes, and the accuracy of the node named.

The kinds, and how each is observed:
- compiled autograd (a backend whose FX pass scales one aten op of the backward graph): node hooks traced
  into compiled autograd's graph;
- torch.compile (a backward compiler whose FX pass scales one aten op): the compiled backward recorded as it
  ran and its own graph read node by node (refgrad.check.compiled), so nothing is compiled differently;
- a black box that scales one node's outgoing gradients in torch's engine: probes on the forward's
  intermediates;
- compiled autograd's functional op of one node (ops.<Node>) planted with a wrong gradient (issue 18): read from
  compiled autograd's own graph, node by node ("compiled_autograd_graph"), and named by swap mode ("swap",
  swap="only_one": one run per node call of the graph, each compiling anew).

Each position is worked out by hand from the model's source: the aten op the backward computes the node
with, its occurrence in the backward graph's order (0: nearest the loss; both compiled graphs list a
node's op in backward order), the node's name and the forward line that created it ("# at: NAME"). A
wrong sum where two gradients meet is tested on its own (test_a_wrong_sum_inside_a_compiled_backward_...).

`make test` runs the positions of the Deep model (test_planted.py's) for every kind but swap (its runs compile
once per node call; test_compiled_autograd_localize.py covers it in `make test`); the whole matrix, and the
accuracy table, run with REFGRAD_PLANTED_MATRIX=1 (`make test-planted`).
"""
import inspect
import os

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import refgrad
import refgrad.check as refgrad_check
from refgrad.engines import CompiledAutograd, TorchCompile

from planting import plant_in_op, scale_op_results
from test_planted import Deep, PerturbsOneNode, assert_names, assert_swap_names

aten = torch.ops.aten


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 3)
        self.fc = torch.nn.Linear(4 * 2 * 2, 5)

    def forward(self, x, target):
        h = torch.relu(self.conv1(x))  # at: conv1
        h = torch.nn.functional.max_pool2d(h, 2)  # at: pool
        h = torch.tanh(self.conv2(h))  # at: conv2
        logits = self.fc(h.flatten(1))  # at: fc
        log_probs = torch.log_softmax(logits, dim=1)  # at: log_softmax
        return torch.nn.functional.nll_loss(log_probs, target)  # at: loss


class Block(torch.nn.Module):
    """A pre-norm transformer block with attention written out (one head) and a GELU MLP."""

    def __init__(self, d=8):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x, target):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)  # at: ln1
        weights = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1)  # at: softmax
        h = x + self.proj(weights @ v)  # at: attention-out
        m = torch.nn.functional.gelu(self.up(self.ln2(h)))  # at: ln2
        out = h + self.down(m)  # at: gelu-out
        return torch.nn.functional.mse_loss(out, target)  # at: loss


def line_of(cls, marker):
    """The forward source line of ``cls`` marked ``# at: marker`` (Deep: ``# depth: marker``), as file:line."""
    lines, first = inspect.getsourcelines(cls.forward)
    tags = (f"# at: {marker}", f"# depth: {marker}")
    numbers = [first + i for i, text in enumerate(lines) if text.rstrip().endswith(tags)]
    assert len(numbers) == 1, marker
    return f"{inspect.getsourcefile(cls)}:{numbers[0]}"


def deep():
    torch.manual_seed(0)
    return Deep(), torch.randn(5, 6), torch.randn(5, 3)


def cnn():
    torch.manual_seed(1)
    return CNN(), torch.randn(3, 2, 8, 8), torch.tensor([0, 4, 2])


def block():
    torch.manual_seed(2)
    return Block(), torch.randn(2, 5, 8), torch.randn(2, 5, 8)


MODELS = {"mlp": (Deep, deep), "cnn": (CNN, cnn), "transformer": (Block, block)}

# (model, aten op, occurrence in the backward graph, the node, its forward line's marker)
POSITIONS = [
    ("mlp", aten.mse_loss_backward.default, 0, "MseLossBackward0", "loss"),
    ("mlp", aten.sigmoid_backward.default, 0, "SigmoidBackward0", "middle"),
    ("mlp", aten.tanh_backward.default, 0, "TanhBackward0", "residual"),
    ("mlp", aten.tanh_backward.default, -1, "TanhBackward0", "inputs"),
    ("cnn", aten.nll_loss_backward.default, 0, "NllLossBackward0", "loss"),
    ("cnn", aten._log_softmax_backward_data.default, 0, "LogSoftmaxBackward0", "log_softmax"),
    ("cnn", aten.tanh_backward.default, 0, "TanhBackward0", "conv2"),
    ("cnn", aten.max_pool2d_with_indices_backward.default, 0, "MaxPool2DWithIndicesBackward0", "pool"),
    ("cnn", aten.threshold_backward.default, 0, "ReluBackward0", "conv1"),
    ("transformer", aten.mse_loss_backward.default, 0, "MseLossBackward0", "loss"),
    ("transformer", aten.gelu_backward.default, 0, "GeluBackward0", "ln2"),
    ("transformer", aten.native_layer_norm_backward.default, 0, "NativeLayerNormBackward0", "ln2"),
    ("transformer", aten._softmax_backward_data.default, 0, "SoftmaxBackward0", "softmax"),
    ("transformer", aten.native_layer_norm_backward.default, -1, "NativeLayerNormBackward0", "ln1"),
]


def compiled_autograd_engine(op, occurrence):
    return CompiledAutograd(backend=aot_autograd(fw_compiler=scale_op_results(op, occurrence)), name="planted")


def torch_compile_engine(op, occurrence):
    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=scale_op_results(op, occurrence))
    return TorchCompile(backend=backend, name="planted")


def black_box_engine(model_class, node, marker):
    engine = PerturbsOneNode(node, line_of(model_class, marker))
    engine.name = "planted"
    return engine


KINDS = ["compiled_autograd", "torch_compile", "black_box"]
FULL = os.environ.get("REFGRAD_PLANTED_MATRIX") == "1"


def planted_engine(kind, model_class, op, occurrence, node, marker):
    if kind == "compiled_autograd":
        return compiled_autograd_engine(op, occurrence)
    if kind == "torch_compile":
        return torch_compile_engine(op, occurrence)
    return black_box_engine(model_class, node, marker)


def positions() -> list:
    params = []
    for model, op, occurrence, node, marker in POSITIONS:
        for kind in KINDS:
            marks = [] if FULL or model == "mlp" else [pytest.mark.skip(reason="the whole matrix runs in make "
                                                                               "test-planted")]
            params.append(pytest.param(kind, model, op, occurrence, node, marker, marks=marks,
                                       id=f"{kind}-{model}-{node}-{marker}"))
    return params


# (model, a node that occurs once in its backward, whose compiled-autograd op is planted; its line's marker)
OP_POSITIONS = [
    ("mlp", "MseLossBackward0", "loss"),
    ("mlp", "SigmoidBackward0", "middle"),
    ("cnn", "NllLossBackward0", "loss"),
    ("cnn", "LogSoftmaxBackward0", "log_softmax"),
    ("cnn", "TanhBackward0", "conv2"),
    ("cnn", "MaxPool2DWithIndicesBackward0", "pool"),
    ("cnn", "ReluBackward0", "conv1"),
    ("transformer", "MseLossBackward0", "loss"),
    ("transformer", "GeluBackward0", "ln2"),
    ("transformer", "SoftmaxBackward0", "softmax"),
]
SWAPPED = {("mlp", "SigmoidBackward0"), ("cnn", "MaxPool2DWithIndicesBackward0"), ("transformer", "SoftmaxBackward0")}
OP_KINDS = ["compiled_autograd_graph", "swap"]


def op_positions() -> list:
    params = []
    for model, node, marker in OP_POSITIONS:
        for kind in OP_KINDS:
            if kind == "swap" and (model, node) not in SWAPPED:
                continue
            runs = FULL or (model == "mlp" and kind != "swap")
            marks = [] if runs else [pytest.mark.skip(reason="the whole matrix runs in make test-planted")]
            params.append(pytest.param(kind, model, node, marker, marks=marks, id=f"{kind}-{model}-{node}-{marker}"))
    return params


ACCURACY: dict[str, list[bool]] = {kind: [] for kind in KINDS + OP_KINDS}


@pytest.mark.parametrize("kind, model, op, occurrence, node, marker", positions())
def test_the_planted_node_is_named(kind, model, op, occurrence, node, marker, tmp_path):
    model_class, make = MODELS[model]
    engine = planted_engine(kind, model_class, op, occurrence, node, marker)
    report = refgrad_check.check(*make(), engines=("eager", engine), reproducer_dir=str(tmp_path))
    named = report.first_divergence.get("planted")
    ACCURACY[kind].append(named is not None and named.node == node and named.source == line_of(model_class, marker))
    divergence = assert_names(report, "planted", node, line_of(model_class, marker))
    if kind == "torch_compile":  # read from the run that failed, compiled as it was: no probes
        assert "no probes" in divergence.graph and "1 read node by node" in divergence.graph
        # the engine's value of the divergent gradient, kept for the reproducer: its error against refgrad's
        # float64 run of the bundle is the divergence's
        bundle = refgrad.Bundle.load(report.reproducers["planted"])
        machine = refgrad.Machine(refgrad.promote_to_float64(bundle), keep_values=True)
        machine.run()
        reference = machine.register_value(divergence.register.lstrip("%")).torch()
        value = divergence.values[divergence.register].double()
        assert (value - reference).abs().max().item() == pytest.approx(divergence.error, rel=1e-6)


@pytest.mark.parametrize("kind, model, node, marker", op_positions())
def test_the_node_planted_in_compiled_autograds_op_is_named(kind, model, node, marker, monkeypatch, tmp_path):
    model_class, make = MODELS[model]
    plant_in_op(monkeypatch, node)
    report = refgrad_check.check(*make(), engines=("eager", CompiledAutograd(name="planted")),
                                 reproducer_dir=str(tmp_path), swap="only_one" if kind == "swap" else None)
    named = report.swaps.get("planted") if kind == "swap" else report.first_divergence.get("planted")
    ACCURACY[kind].append(named is not None and named.node == node and named.source == line_of(model_class, marker))
    if kind == "swap":
        assert_swap_names(report, "planted", node, line_of(model_class, marker))
    else:
        divergence = assert_names(report, "planted", node, line_of(model_class, marker))
        assert "compiled autograd's graph of the plain run" in divergence.graph, divergence.graph


def test_accuracy_table(capsys):
    """Prints, after the matrix (run it in one pytest call), the share of positions named exactly per kind."""
    if not any(ACCURACY.values()):
        pytest.skip("the matrix did not run in this pytest process")
    with capsys.disabled():
        for kind, named in ACCURACY.items():
            print(f"\nplanted-bug accuracy, {kind}: {sum(named)}/{len(named)} positions named exactly")
    assert all(all(named) for named in ACCURACY.values())


@pytest.mark.parametrize("make, node, marker", [(deep, "SigmoidBackward0", "middle"),
                                                 (block, "AddBackward0", "attention-out")], ids=["mlp", "transformer"])
def test_a_wrong_sum_inside_a_compiled_backward_names_the_node_whose_input_buffer_it_is(make, node, marker, tmp_path):
    """Deep's h2 feeds l3 and the residual, Block's h feeds ln2 and the residual: AOTAutograd's backward adds
    their two gradients with one aten add, the first add of its graph. Scaled, the sum is wrong while each
    part is right: the node named is the one whose input buffer that sum is (DESIGN.md)."""
    model, x, target = make()
    report = refgrad_check.check(model, x, target, engines=("eager", torch_compile_engine(aten.add.Tensor, 0)),
                                 reproducer_dir=str(tmp_path))
    divergence = assert_names(report, "planted", node, line_of(type(model), marker), gradient="input buffer")
    assert "each of the 2 gradients added into it" in divergence.gradient and "their sum does not" in divergence.gradient


def test_a_torch_compile_check_compiles_once_and_reads_the_run_that_failed(tmp_path):
    """The divergence comes from the plain run itself: the backend compiles the forward once and the backward
    once for the engine (no second run, no per-op graphs)."""
    compilations = []

    def counting(gm, example_inputs):
        compilations.append(len(gm.graph.nodes))
        return gm

    backend = aot_autograd(fw_compiler=counting, bw_compiler=lambda gm, ex: (
        counting(gm, ex), scale_op_results(aten.sigmoid_backward.default, 0)(gm, ex))[1])
    report = refgrad_check.check(*deep(), engines=("eager", TorchCompile(backend=backend, name="planted")),
                                 reproducer_dir=str(tmp_path))
    assert report.first_divergence["planted"].node == "SigmoidBackward0", str(report)
    assert len(compilations) == 2, compilations


@pytest.mark.parametrize("occurrence, marker", [(0, "loss"), (3, "residual"), (-1, "inputs")])
def test_inside_inductor_code_the_aten_op_is_named(tmp_path, occurrence, marker):
    """Inductor's compiled backward is code, not a graph: its intermediate gradients are fused away. A bug
    planted in the graph it compiles (one aten.mm of Deep's backward scaled by 1.01: the first, nearest the
    loss; the fourth, in the residual layer; the last, nearest the inputs) makes its code compute something
    other than the graph it was given. check compiles that graph again with every op's result kept (the same
    compiler, so the same planted pass) and names the first op whose result disagrees with refgrad's run of
    the graph as aten instructions, with its forward source line."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def planted_then_inductor(gm, example_inputs):
        return compile_fx_inner(scale_op_results(aten.mm.default, occurrence)(gm, example_inputs), example_inputs)

    def backend(gm, example_inputs):
        return compile_fx(gm, example_inputs, inner_compile=lambda g, ex, **kw: (
            planted_then_inductor(g, ex) if kw.get("is_backward") else compile_fx_inner(g, ex, **kw)))

    report = refgrad_check.check(*deep(), engines=("eager", TorchCompile(backend=backend, name="planted")),
                                 reproducer_dir=str(tmp_path))
    assert not report.engine_passed("planted")
    divergence = report.first_divergence["planted"]
    print(divergence)  # docs/aot.md shows the last position's (pytest -s -k 'aten_op_is_named and inputs')
    assert divergence.node == "aten.mm.default", str(divergence)
    assert " = aten.mm.default " in divergence.instruction, divergence.instruction
    assert divergence.source.endswith(line_of(Deep, marker)), (divergence.source, line_of(Deep, marker))
    assert 0.009 < divergence.relative < 0.011, divergence.relative  # the planted 1%
    assert "compiled again" in divergence.graph, divergence.graph


def test_a_bug_in_the_graph_inductor_compiles_is_named_from_that_graph(tmp_path):
    """A bug AOTAutograd's graph already holds when Inductor gets it (planted by a joint-graph pass, before
    the forward and backward are split) is in the graph the compiled backward was compiled from: interpreted,
    its outputs are Inductor's within rounding, so its intermediates stand for Inductor's fused ones and the
    node is named: the last backward mm of Deep is the weight gradient of l1's AddmmBackward0."""
    from torch._inductor.compile_fx import compile_fx

    def scale_last_backward_mm(graph):
        target = [node for node in graph.nodes if node.target is aten.mm.default
                  and node.meta.get("partitioner_tag") == "is_backward"][-1]
        with graph.inserting_after(target):
            scaled = graph.call_function(aten.mul.Tensor, (target, 1.01))
        target.replace_all_uses_with(scaled, delete_user_cb=lambda user: user is not scaled)

    def backend(gm, example_inputs):
        with torch._inductor.config.patch(joint_custom_post_pass=scale_last_backward_mm):
            return compile_fx(gm, example_inputs)

    report = refgrad_check.check(*deep(), engines=("eager", TorchCompile(backend=backend, name="planted")),
                                 reproducer_dir=str(tmp_path))
    divergence = assert_names(report, "planted", "AddmmBackward0", line_of(Deep, "inputs"))
    assert "1 from the graph they were compiled from" in divergence.graph, divergence.graph


class Deep12(torch.nn.Module):
    """The issue's twelve-layer MLP: every layer's nodes come from one source line, so only the sequence
    numbers tell the layers apart."""

    def __init__(self):
        super().__init__()
        self.ls = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(12)])

    def forward(self, x, target):
        for layer in self.ls:
            x = torch.tanh(layer(x))
        return torch.nn.functional.mse_loss(x, target)


def weight_leaf_of(program, pc):
    """The leaf that the weight gradient (output 2) of the AddmmBackward0 called at ``pc`` is accumulated into,
    followed through validate and TBackward0."""
    register = program.code[pc].results[2]
    for instr in program.code[pc + 1:]:
        if register in instr.operands:
            if instr.op == "accumulate_grad":
                return instr.target
            register = instr.results[list(instr.operands).index(register)] if instr.op == "validate" else \
                instr.results[0]
    return None


@pytest.mark.parametrize("occurrence, layer", [(-1, 0), (11, 6), (3, 10)])
def test_a_twelve_layer_mlp_of_one_source_line(occurrence, layer, tmp_path):
    """The backward's mm occurrences come two per layer from the loss down (input grad, weight grad): the
    planted one fails only ls.<layer>.weight, and the node named is that layer's AddmmBackward0."""
    torch.manual_seed(0)
    report = refgrad_check.check(Deep12(), torch.randn(8, 16), torch.randn(8, 16),
                                 engines=("eager", torch_compile_engine(aten.mm.default, occurrence)),
                                 reproducer_dir=str(tmp_path))
    assert [name for name, result in report.results["planted"].items() if not result.passed] == [f"ls.{layer}.weight"]
    divergence = report.first_divergence["planted"]
    assert divergence.node == "AddmmBackward0", str(divergence)
    program = refgrad.Bundle.load(report.reproducers["planted"]).program
    assert weight_leaf_of(program, divergence.pc) == f"ls.{layer}.weight"
