"""ATen instructions (issue 20): the schema table against the installed torch, each op against torch on the
backward graphs AOTAutograd makes for the zoo, the text and bytecode round trips of imported graphs, and a
torch.compile'd region opened up in a capture.

The truth for an op is torch running the same FX graph on the same values (the graph's own outputs); for
a captured model, torch's eager autograd in float64.
"""
from __future__ import annotations

import pytest
import torch
import torch._inductor.inductor_prims

import refgrad
import refgrad.aot
import refgrad.torch
import refgrad.zoo

ZOO = sorted(refgrad.zoo.ZOO)


def _torch_op(name: str):
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def test_every_schema_is_torch_s():
    """The table's schema text is torch's, character for character, and its parse has torch's arguments
    (names, keyword-only) and result count."""
    ops = refgrad.aten_ops()
    assert len(ops) >= 80
    for op in ops:
        schema = _torch_op(op.name)._schema
        assert op.text == str(schema), op.name
        assert [(name, keyword_only) for name, _, keyword_only in op.arguments] == \
            [(a.name, a.kwarg_only) for a in schema.arguments], op.name
        variadic = len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch.ListType)
        assert op.num_results == (None if variadic else len(schema.returns)), op.name


def _recorded(name: str, dtype: torch.dtype, decompositions=None) -> refgrad.aot.Recorder:
    torch._dynamo.reset()
    recorder = refgrad.aot.Recorder(decompositions=decompositions)
    model, forward = refgrad.zoo.ZOO[name](dtype=dtype)
    forward(torch.compile(model, backend=recorder.backend)).backward()
    return recorder


def _assert_outputs(imported: refgrad.aot.Imported, dtype: torch.dtype) -> None:
    """refgrad's run of the program as captured against torch running the graph on the same values: equal
    within float32's rounding (dtype float32; ops may round in another order) or float64's, relative to the
    largest grad the graph returns (a grad that is 0 in exact arithmetic, a conv bias under batch norm, is
    rounding noise in both)."""
    got = imported.run("as_captured")
    expected = imported.graph(*imported.args)
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    names = [f"grad{i}" for i, value in enumerate(expected) if isinstance(value, torch.Tensor)]
    assert sorted(got) == sorted(names)
    scale = max(value.abs().max().item() for value in expected if isinstance(value, torch.Tensor))
    for i, value in enumerate(expected):
        if isinstance(value, torch.Tensor):
            rtol = 1e-5 if dtype == torch.float32 else 1e-12
            torch.testing.assert_close(got[f"grad{i}"], value, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("decompositions", [None, "inductor"])
@pytest.mark.parametrize("name", ZOO)
def test_zoo_backward_graphs_run_as_torch_runs_them(name, decompositions, dtype):
    """Each backward graph of the zoo (as aot_eager gets it, and as Inductor gets it after its
    decompositions) imported with the values it was called with: refgrad's outputs are the graph's
    own, run by torch on the same values, up to the order of rounding."""
    recorder = _recorded(name, dtype, decompositions)
    assert recorder.calls, "no backward graph was recorded"
    for imported in recorder.imported:
        _assert_outputs(imported, dtype)


@pytest.mark.parametrize("name", ZOO)
def test_imported_programs_round_trip(name):
    """Text, bytecode and bundle round trips of programs with aten instructions, and the verifier
    finds nothing wrong with them."""
    for imported in _recorded(name, torch.float32, "inductor").imported:
        program = imported.program
        assert not [d for d in program.verify() if d.severity == "error"]
        assert refgrad.Program.parse(program.text()) == program
        assert refgrad.Program.from_bytecode(program.to_bytecode()) == program
        again = refgrad.Bundle.from_bytes(imported.bundle.to_bytes())
        assert again.program == program
        assert sorted(again.tensors) == sorted(imported.bundle.tensors)


def test_text_form_reads_defaults_and_numbers_for_tensors():
    text = """program t
  grad %g : f32[2,3]
  saved $x : f32[2,3] = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
  output ^a : f32[3]
  output ^b : f32[2,3]
code
  %s = aten.sum.dim_IntList %g, [0]
  %m = aten.mul.Tensor %s, 2.0
  %r = aten.sub.Tensor 1, $x  alpha=2
  output ^a %m
  output ^b %r
"""
    program = refgrad.Program.parse(text)
    printed = program.text()
    assert "aten.sum.dim_IntList %g, [0], false" in printed  # the positional default, written out
    assert "aten.sub.Tensor 1, $x  alpha=2" in printed
    assert refgrad.Program.parse(printed) == program
    g = torch.tensor([[1.0, -2.0, 0.5], [3.0, 4.0, -1.0]])
    results = {name: value.torch() for name, value in refgrad.run_program(refgrad.make_bundle(program, {"%g": g})).items()}
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    torch.testing.assert_close(results["^a"], g.sum(0) * 2.0, rtol=0, atol=0)
    torch.testing.assert_close(results["^b"], torch.sub(1, x, alpha=2), rtol=0, atol=0)
    assert results["^b"].dtype == torch.float32  # the number is a wrapped number: no promotion


@pytest.mark.parametrize("line, message", [
    ("%y = aten.nonexistent.default %g", "refgrad has no ATen op 'aten.nonexistent.default'"),
    ("%y = aten.mul.Tensor %g", "argument 'other' (Tensor) is missing"),
    ("%y = aten.sum.dim_IntList %g, [0], 3", "expected true or false for 'keepdim'"),
    ("%y = aten.mul.Tensor %g, $nowhere", "names $nowhere, which is not declared"),
    ("%y = aten.mul.Tensor %g, none", "expected a register '%NAME' or a saved tensor '$NAME' for 'other'"),
    ("%y = aten.expand.default %g, [2,3]  bogus=1", "has no keyword-only argument 'bogus'"),
])
def test_bad_aten_instructions_are_refused_by_name(line, message):
    text = f"program t\n  grad %g : f32[2,3]\ncode\n  {line}\n"
    with pytest.raises(refgrad.Error, match=message.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace("%", "%")):
        refgrad.Program.parse(text).check()


def test_wrong_operand_at_run_time_names_the_op():
    program = refgrad.Program.parse("program t\n  grad %g : f32[2,3]\n  grad %h : f32[4]\n  output ^y : f32[2,3]\n"
                                    "code\n  %y = aten.mm.default %g, %h\n  output ^y %y\n")
    with pytest.raises(refgrad.Error, match=r"instruction 0 \(%y = aten.mm.default %g, %h\): mm: mat2 must be a matrix"):
        refgrad.run_program(refgrad.make_bundle(program, {"%g": torch.ones(2, 3), "%h": torch.ones(4)}))


# -- a compiled region opened up in a capture ---------------------------------------------------------------


def _eager_float64_grads(make, names_of=lambda m: dict(m.named_parameters())) -> dict:
    model, forward = make(dtype=torch.float64)
    forward(model).backward()
    return {name: p.grad for name, p in names_of(model).items()}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name", ZOO)
def test_inlined_capture_agrees_with_eager(name, backend):
    """The zoo model compiled, its backward captured with the region inlined: no call of torch's compiled
    code remains, and the program's grads, as captured (float32), are eager autograd's on the same model
    and inputs, up to float32 rounding relative to the largest grad."""
    torch._dynamo.reset()
    model, forward = refgrad.zoo.ZOO[name](dtype=torch.float32)
    loss = forward(torch.compile(model, backend=backend))
    captured = refgrad.torch.capture(loss, names=dict(model.named_parameters()), inline_compiled=True)
    ops = [instr.op for instr in captured.program.code]
    assert "aten" in ops and "call_backward" not in ops
    assert not captured.program.functions
    got = captured.run("as_captured")
    model.zero_grad(set_to_none=True)
    forward(model).backward()
    scale = max(p.grad.abs().max().item() for p in model.parameters())
    for parameter_name, parameter in model.named_parameters():
        torch.testing.assert_close(got[parameter_name], parameter.grad, rtol=1e-5, atol=1e-5 * scale)


def test_graph_breaks_open_every_region():
    """Two compiled regions (a graph break between them): both are inlined, and the grads are eager's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    first, second = torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)

    def forward(x):
        h = torch.tanh(first(x))
        torch._dynamo.graph_break()
        return (second(h) ** 2).sum()

    x = torch.randn(4, 6)
    loss = torch.compile(forward, backend="aot_eager")(x)
    names = {"first.weight": first.weight, "first.bias": first.bias, "second.weight": second.weight,
             "second.bias": second.bias}
    captured = refgrad.torch.capture(loss, names=names, inline_compiled=True)
    ops = [instr.op for instr in captured.program.code]
    assert "call_backward" not in ops
    prefixes = {instr.results[0].split("_")[0] for instr in captured.program.code if instr.op == "aten" and instr.results[0]}
    assert prefixes == {"aot0", "aot1"}  # one register prefix per region
    got = captured.run("as_captured")
    forward(x).backward()
    for name, parameter in names.items():
        torch.testing.assert_close(got[name], parameter.grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("decompositions", [None, "inductor"])
def test_coverage_of_the_zoo_is_complete(decompositions):
    """make aten-coverage's measure on the zoo (the part make test runs): every graph imports and runs, and every
    op call is torch's within rounding when given torch's values."""
    from refgrad.aot.coverage import Coverage, measure
    coverage = Coverage()
    for name in ZOO:
        measure(f"zoo:{name}", _recorded(name, torch.float32, decompositions), coverage)
    assert coverage.graphs == coverage.graphs_run == len(ZOO), coverage.table()
    assert not coverage.missing and not coverage.failures, coverage.table()
    assert coverage.right == coverage.attempted, coverage.table()
    assert sum(coverage.attempted.values()) > 50


def test_coverage_counts_a_wrong_op_as_wrong(monkeypatch):
    """The coverage measure can fail: an op whose refgrad result is replaced by a wrong one is counted wrong."""
    from refgrad.aot import coverage as coverage_module
    real = refgrad.call_aten_op

    class Scaled:  # stands for a refgrad tensor: coverage reads it with .torch()
        def __init__(self, value):
            self.value = value

        def torch(self):
            return self.value * 1.01

    def wrong_mm(name, arguments):
        results = real(name, arguments)
        return [Scaled(r.torch()) if name == "aten.mm.default" else r for r in results]

    monkeypatch.setattr(refgrad, "call_aten_op", wrong_mm)
    coverage = coverage_module.Coverage()
    coverage_module.measure("zoo:mlp", _recorded("mlp", torch.float32), coverage)
    assert coverage.right["aten.mm.default"] == 0 < coverage.attempted["aten.mm.default"]
    assert coverage.right["aten.t.default"] == coverage.attempted["aten.t.default"] > 0
