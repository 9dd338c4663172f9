"""Issue 18, Deliver 4: localization inside compiled autograd's own graph, and swap mode.

Planted bugs, each of which check must name exactly:
- a wrong node implementation: the functional op compiled autograd's graph calls for one node
  (torch._dynamo.compiled_autograd.ops.<Node>) scales its gradients by 1.01. It is in the graph the backend
  compiles, so the plain run's graph, interpreted node by node, shows it: the node is named from the graph
  (no second run), and swap mode names it too;
- a wrong compilation: the backend scales one aten op of the code it compiles from compiled autograd's graph.
  The graph itself is right, so it cannot show the error (the report says why, and falls back on node hooks);
  swap mode, which runs refgrad's node in place of that node's compiled code, names it;
- and correct engines, which must pass with nothing named.

The slower variants (Inductor, two wrong calls, the larger models of test_planted_matrix.py) run in
`make test-planted` (REFGRAD_PLANTED_MATRIX=1).
"""
import os

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

import refgrad
import refgrad.check as refgrad_check
from refgrad.engines import CompiledAutograd

from planting import plant_in_op, scale_op_results
from test_check import Square
from test_planted import Deep, assert_names, assert_swap_names
from test_planted_matrix import deep, line_of

aten = torch.ops.aten
FULL = os.environ.get("REFGRAD_PLANTED_MATRIX") == "1"


class Small(torch.nn.Module):
    """loss = mse(tanh(l1(x)) * y, target): five node calls, each node once (y needs no grad); twice=True:
    mse(tanh(tanh(l1(x)) * y), target), six node calls, two of them TanhBackward0."""

    def __init__(self, twice: bool = False):
        super().__init__()
        self.l1 = torch.nn.Linear(4, 3)
        self.twice = twice

    def forward(self, x, y, target):
        h = torch.tanh(self.l1(x))  # at: tanh
        h = h * y  # at: mul
        if self.twice:
            h = torch.tanh(h)  # at: outer
        return torch.nn.functional.mse_loss(h, target)


def small(twice: bool = False):
    torch.manual_seed(3)
    return Small(twice), torch.randn(5, 4), torch.randn(5, 3), torch.randn(5, 3)


def check(model_and_args, engine, tmp_path, **options):
    return refgrad_check.check(*model_and_args, engines=("eager", engine), reproducer_dir=str(tmp_path), **options)


def test_the_import_says_which_instruction_each_node_call_became():
    """Imported.pc_of, which swap mode reads each call's fields through: every ops.<Node> call of the graph
    maps to an instruction that calls that node."""
    import refgrad.compiled_autograd as rca
    from torch._dynamo import compiled_autograd
    from refgrad.check.compiled_autograd import node_calls, node_name

    graphs = []
    recorder = rca.backend(record=True, compiler=lambda gm: graphs.append(gm) or gm)
    model, x, y, target = small()
    compiled_autograd.reset()
    with compiled_autograd._enable(recorder):
        model(x, y, target).backward()
    compiled_autograd.reset()
    imported, calls = recorder.recorded[0], node_calls(graphs[0])
    assert len(calls) == 5 and sorted(imported.pc_of) == sorted(call.name for call in calls)
    for call in calls:
        assert imported.program.code[imported.pc_of[call.name]].node == node_name(call.target)


# ------------------------------------------------- per-node reading of the graph ---


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_wrong_node_is_named_from_compiled_autographs_graph(monkeypatch, tmp_path, backend):
    """Deep's one SigmoidBackward0 is planted: read from the plain run's graph, it is the node named, with the
    forward line that created it; nothing ran a second time (the graph is the plain run's)."""
    plant_in_op(monkeypatch, "SigmoidBackward0")
    report = check(deep(), CompiledAutograd(backend=backend, name="planted"), tmp_path)
    divergence = assert_names(report, "planted", "SigmoidBackward0", line_of(Deep, "middle"))
    assert "compiled autograd's graph of the plain run" in divergence.graph, divergence.graph
    assert "bit for bit" in divergence.graph, divergence.graph


def test_a_node_planted_in_both_of_its_instances_names_the_first_in_the_graphs_order(monkeypatch, tmp_path):
    """Both TanhBackward0 of Deep are wrong: the first divergent node, in compiled autograd's order, is the tanh
    nearest the loss (h3's, on the residual line): the other's incoming grad already disagrees."""
    plant_in_op(monkeypatch, "TanhBackward0")
    report = check(deep(), CompiledAutograd(backend="aot_eager", name="planted"), tmp_path)
    assert_names(report, "planted", "TanhBackward0", line_of(Deep, "residual"))


def test_a_wrong_compilation_is_not_read_from_the_graph_and_says_why(tmp_path):
    """The backend scales every aten.tanh_backward of the code it compiles: the graph compiled autograd handed
    it is right, so interpreting it gives other gradients than the compiled code did; check says so and names
    the node from a second run with node hooks instead."""
    engine = CompiledAutograd(backend=aot_autograd(fw_compiler=scale_op_results(aten.tanh_backward.default)),
                              name="planted")
    report = check(small(), engine, tmp_path)
    divergence = assert_names(report, "planted", "TanhBackward0", line_of(Small, "tanh"))
    assert "could not be read node by node" in divergence.graph and "second backward" in divergence.graph, \
        divergence.graph


def through_a_function(w, x):
    return Square.apply(torch.tanh(w * x)).sum()


def with_a_tensor_hook(w, x):
    h = torch.tanh(w * x)
    h.register_hook(lambda grad: grad * 1.0)
    return (h * h).sum()


def test_an_autograd_function_is_read_from_the_graph_and_a_hook_makes_check_fall_back(monkeypatch, tmp_path):
    """call_backward (autograd.Function) is a node call of the graph like the others; a graph that calls fn's
    hooks is not interpreted (it would call them again): check says so, and names the node by node hooks."""
    plant_in_op(monkeypatch, "MulBackward0")
    torch.manual_seed(0)
    w, x = torch.randn(4, requires_grad=True), torch.randn(4)
    engine = CompiledAutograd(backend="eager", name="planted")
    divergence = assert_names(check((through_a_function, w, x), engine, tmp_path), "planted", "MulBackward0")
    assert "compiled autograd's graph of the plain run" in divergence.graph, divergence.graph
    divergence = assert_names(check((with_a_tensor_hook, w, x), engine, tmp_path), "planted", "MulBackward0")
    assert "calls 1 hook(s)" in divergence.graph and "second backward" in divergence.graph, divergence.graph


# ---------------------------------------------------------------- swap mode ---


def assert_runs_pass_exactly_when_swapping(swap, node):
    """Every run passed exactly when it swapped the call of ``node`` for refgrad's (a single wrong call)."""
    planted = [call.position for call in swap.calls if call.node == node]
    assert len(planted) == 1
    for run in swap.runs:
        assert run.passed == (planted[0] in run.swapped) and not run.error, swap.describe(run)


@pytest.mark.parametrize("node, marker", [("MulBackward0", "mul"), ("TanhBackward0", "tanh")])
def test_swap_only_one_names_the_planted_node(monkeypatch, tmp_path, node, marker):
    """Halving the five node calls ends with the run that swaps the planted node alone, which passes."""
    plant_in_op(monkeypatch, node)
    report = check(small(), CompiledAutograd(backend="eager", name="planted"), tmp_path, swap="only_one")
    swap = assert_swap_names(report, "planted", node, line_of(Small, marker))
    assert [call.node for call in swap.named] == [node]
    assert len(swap.calls) == 5 and len(swap.runs) <= 5, [swap.describe(run) for run in swap.runs]
    assert swap.runs[-1].swapped == [swap.named[0].position] and swap.runs[-1].passed
    assert_runs_pass_exactly_when_swapping(swap, node)
    assert report.first_divergence["planted"].node == node  # the graph's reading agrees


def test_swap_all_but_one_names_the_planted_node(monkeypatch, tmp_path):
    """With every node refgrad's the engine passes; with every node but MulBackward0 refgrad's it fails."""
    plant_in_op(monkeypatch, "MulBackward0")
    report = check(small(), CompiledAutograd(backend="eager", name="planted"), tmp_path, swap="all_but_one")
    swap = assert_swap_names(report, "planted", "MulBackward0", line_of(Small, "mul"))
    assert [call.node for call in swap.named] == ["MulBackward0"]
    assert len(swap.runs[0].swapped) == 5 and swap.runs[0].passed
    described = [swap.describe(run) for run in swap.runs]
    assert any(run.swapped == [0, 2, 3, 4] and not run.passed for run in swap.runs), described
    assert_runs_pass_exactly_when_swapping(swap, "MulBackward0")


@pytest.mark.skipif(not FULL, reason="nine runs that swap most calls (20 s): make test-planted")
def test_swap_all_but_one_names_every_wrong_call_and_only_one_says_no_single_swap_can(monkeypatch, tmp_path):
    """Both TanhBackward0 are wrong: all_but_one names both (the outer first, in the graph's order); no single
    swap makes only_one's engine pass, and it says so."""
    plant_in_op(monkeypatch, "TanhBackward0")
    args = small(twice=True)
    engine = CompiledAutograd(backend="eager", name="planted")
    swap = assert_swap_names(check(args, engine, tmp_path, swap="all_but_one"), "planted", "TanhBackward0",
                             line_of(Small, "outer"))
    named = [(call.node, call.position) for call in swap.named]
    assert named == [("TanhBackward0", 1), ("TanhBackward0", 3)], str(swap)
    swap = check(args, engine, tmp_path, swap="only_one").swaps["planted"]
    assert not swap.named and "several nodes are wrong" in swap.reason, str(swap)


def test_swap_names_a_node_the_backend_compiles_wrongly(tmp_path):
    """Where the graph cannot show the error (the backend's compiled code scales aten.tanh_backward), swapping
    TanhBackward0 for refgrad's takes that op out of the compiled code, and only that run passes."""
    engine = CompiledAutograd(backend=aot_autograd(fw_compiler=scale_op_results(aten.tanh_backward.default)),
                              name="planted")
    report = check(small(), engine, tmp_path, swap="only_one")
    assert_swap_names(report, "planted", "TanhBackward0", line_of(Small, "tanh"))


def test_swap_in_an_engine_that_cannot_break_its_graph_says_why(monkeypatch, tmp_path):
    """fullgraph=True: dynamo may not break the graph at a swapped call, so every run raises; nothing is named
    and the report says why (the plain run's localization is unaffected)."""
    plant_in_op(monkeypatch, "MulBackward0")
    engine = CompiledAutograd(backend="eager", fullgraph=True, name="planted")
    report = check(small(), engine, tmp_path, swap="only_one")
    swap = report.swaps["planted"]
    assert swap.node is None and all(run.error for run in swap.runs), str(swap)
    assert "every run raised" in swap.reason and "disable" in swap.reason, swap.reason
    assert report.first_divergence["planted"].node == "MulBackward0"


def test_correct_engines_pass_and_nothing_is_named(tmp_path):
    report = check(small(), CompiledAutograd(backend="eager", name="correct"), tmp_path, swap="only_one")
    assert report.passed, str(report)
    assert report.first_divergence["correct"] is None and report.swaps == {} and report.reproducers == {}


def test_swap_must_be_a_known_mode():
    with pytest.raises(refgrad.Error, match="swap must be"):
        refgrad_check.check(*small(), swap="every")


# ------------------------------------------------------- slower: make test-planted ---


@pytest.mark.skipif(not FULL, reason="Inductor compiles (20 s): make test-planted")
def test_inductor_a_wrong_node_is_named_from_the_graph_within_rounding_and_by_swap(monkeypatch, tmp_path):
    """Inductor fuses the graph's nodes into code whose intermediates cannot be read; its results are the
    graph's within rounding, so the graph, interpreted, stands for it and names the node; swap names it too."""
    plant_in_op(monkeypatch, "MulBackward0")
    report = check(small(), CompiledAutograd(backend="inductor", name="planted"), tmp_path, swap="only_one")
    divergence = assert_names(report, "planted", "MulBackward0", line_of(Small, "mul"))
    assert "compiled autograd's graph of the plain run" in divergence.graph, divergence.graph
    assert_swap_names(report, "planted", "MulBackward0", line_of(Small, "mul"))
