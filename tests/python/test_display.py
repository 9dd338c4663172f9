"""refgrad.display: Program and Machine as HTML, a program's dataflow as DOT and SVG (issue 8)."""
import math
import os
import shutil

import pytest

import refgrad

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PROGRAMS = os.path.join(ROOT, "examples", "programs")
PC_MARK = '<tr style="background:#fdf3d0" data-pc="{}"><td>▶</td><td>{}</td>'

requires_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


def example(name):
    return refgrad.load(os.path.join(PROGRAMS, name)).program


def negations(count):
    """A long synthetic program: y = -(-(...(-x))) for a leaf x, each NegBackward0 followed by its validate."""
    lines = ["program negations", "  grad %g : f32[2] = [1.0, 2.0]", "  leaf @x : f32[2]", "code",
             "  %v0 = validate %g : f32[2]"]
    for k in range(count):
        lines += [f"  %n{k} = NegBackward0 %v{k}", f"  %v{k + 1} = validate %n{k} : f32[2]"]
    lines.append(f"  accumulate_grad @x %v{count}")
    return refgrad.Program.parse("\n".join(lines) + "\n")


# ----------------------------------------------------------------------- HTML ---


def test_program_html_lists_declarations_and_every_instruction_with_its_node_in_bold():
    program = example("mlp.bwd")
    text = program._repr_html_()
    for instr in program.code:
        if instr.op == "call":
            assert f"<b>{instr.node}</b>" in text
    # mlp.bwd's nodes, read off the file by hand: two of each Addmm and T, one Sum and one Relu.
    assert text.count("<b>AddmmBackward0</b>") == 2 and text.count("<b>TBackward0</b>") == 2
    assert text.count("<b>SumBackward0</b>") == 1 and text.count("<b>ReluBackward0</b>") == 1
    assert text.count("<td>accumulate_grad @") == 4 and text.count("<td>validate</td>") == 7
    assert "<td>saved</td><td>$W2t</td><td>f32[4,2]</td>" in text
    assert "<td>leaf</td><td>@W1</td><td>f32[4,3]</td>" in text
    assert "<td>grad</td><td>%loss</td><td>f32[]</td>" in text
    # the second Addmm skips mat1's gradient: need and the `_` result are shown as the text prints them
    assert "<td>%13, _, %14</td>" in text and "need=[1,0,1]" in text
    assert "▶" not in text


def test_program_html_escapes_the_programs_text():
    program = refgrad.Program.parse(
        'program p\n  grad %g : f32[2]\n  hook &h : tensor_pre\ncode\n'
        '  %0 = validate %g : f32[2]  origin="<script>alert(1)</script>.py:3"\n')
    program.name = "<script>alert('name')</script>"
    text = program._repr_html_()
    assert "<script>" not in text
    assert "&lt;script&gt;alert(&#x27;name&#x27;)&lt;/script&gt;" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.py:3" in text
    assert "<td>hook</td><td>&amp;h</td><td>tensor_pre</td>" in text


def test_machine_html_marks_the_pc_and_lists_the_live_registers():
    machine = refgrad.Machine(example("mlp.bwd"))
    for _ in range(3):
        machine.step()
    assert machine.pc == 3
    text = machine._repr_html_()
    assert "at pc 3 of 17" in text
    assert PC_MARK.format(3, 3) in text and text.count("▶") == 1
    # after validate %1 (pc 2) only %2 is live: SumBackward0's grad expanded to [2,2], all ones (norm 2)
    assert machine.live_registers() == ["2"]
    assert "<tr><td>%2</td><td>float32</td><td>[2,2]</td><td>2</td><td>1, 1, 1, 1</td></tr>" in text


def test_machine_html_lists_every_live_register_and_shortens_long_values():
    machine = refgrad.Machine(example("mlp.bwd"))
    machine.run_until(pc=5)
    text = machine._repr_html_()
    assert PC_MARK.format(5, 5) in text
    # AddmmBackward0's validated grads: %6 for b2 [2], %7 for h [2,4], %8 for W2.t() [4,2]
    for register, shape in [("6", "[2]"), ("7", "[2,4]"), ("8", "[4,2]")]:
        assert f"<tr><td>%{register}</td><td>float32</td><td>{shape}</td>" in text
    assert "…" in text  # eight values, six shown
    machine.run()
    assert "finished" in machine._repr_html_() and "▶" not in machine._repr_html_()


# ------------------------------------------------------------------------ DOT ---

# examples/programs/mul.bwd drawn by hand as `build/refgrad dot` (src/cli/dot.cpp) draws it.
MUL_DOT = """\
digraph "mul" {
  node [fontname="Helvetica", fontsize=10];
  edge [fontname="Helvetica", fontsize=9];
  "%g" [label="%g\\nf32[3]", shape=invhouse, style=filled, fillcolor="#dbe8fb"];
  "$x" [label="$x\\nf32[3]", shape=note, style=filled, fillcolor="#fdf3d0"];
  "$y" [label="$y\\nf32[3]", shape=note, style=filled, fillcolor="#fdf3d0"];
  "@x" [label="@x\\nf32[3]", shape=doubleoctagon, style=filled, fillcolor="#d9f2dd"];
  "@y" [label="@y\\nf32[3]", shape=doubleoctagon, style=filled, fillcolor="#d9f2dd"];
  "pc0" [label="0: validate\\nf32[3]", shape=box, style=rounded];
  "pc1" [label="1: MulBackward0", shape=box, style=bold];
  "pc2" [label="2: validate\\nf32[3], f32[3]", shape=box, style=rounded];
  "pc3" [label="3: accumulate_grad", shape=box, style=rounded];
  "pc4" [label="4: accumulate_grad", shape=box, style=rounded];
  "%g" -> "pc0" [label="%g"];
  "pc0" -> "pc1" [label="%0"];
  "$y" -> "pc1" [label="other", style=dashed];
  "$x" -> "pc1" [label="self", style=dashed];
  "pc1" -> "pc2" [label="%1"];
  "pc1" -> "pc2" [label="%2"];
  "pc2" -> "pc3" [label="%3"];
  "pc3" -> "@x";
  "pc2" -> "pc4" [label="%4"];
  "pc4" -> "@y";
}
"""


def test_dot_of_mul_has_its_nodes_and_edges():
    graph = refgrad.display.program_graph(example("mul.bwd"))
    assert graph.source == MUL_DOT
    assert not graph.collapsed and graph._repr_html_() is None  # small: Jupyter shows the SVG itself


def test_dot_with_a_machine_shows_each_value_by_dtype_shape_and_norm():
    machine = refgrad.Machine(example("mul.bwd"), keep_values=True)
    machine.run()
    source = refgrad.display.program_graph(example("mul.bwd"), machine).source
    # by hand: %1 = g*y = [4,5,12], %2 = g*x = [1,2,6]; $x = [1,2,3]; the leaves' grads are %3 and %4
    norm = lambda *values: f"{math.sqrt(sum(v * v for v in values)):.4g}"  # noqa: E731
    assert f'"pc1" -> "pc2" [label="%1\\nfloat32 [3] norm {norm(4, 5, 12)}"];' in source
    assert f'"pc1" -> "pc2" [label="%2\\nfloat32 [3] norm {norm(1, 2, 6)}"];' in source
    assert f'"$x" [label="$x\\nf32[3]\\nfloat32 [3] norm {norm(1, 2, 3)}"' in source
    assert f'"@x" [label="@x\\nf32[3]\\nfloat32 [3] norm {norm(4, 5, 12)}"' in source
    assert f'"%g" [label="%g\\nf32[3]\\nfloat32 [3] norm {norm(1, 1, 2)}"' in source


def test_dot_quotes_names_that_would_break_it():
    program = example("mul.bwd")
    program.name = 'a "quoted" \\ name'
    assert refgrad.display.program_graph(program).source.startswith('digraph "a \\"quoted\\" \\\\ name" {\n')


# ------------------------------------------------------------------------ SVG ---


@requires_dot
def test_repr_svg_runs_dot():
    svg = refgrad.display.program_graph(example("mul.bwd"))._repr_svg_()
    assert svg.startswith("<svg") or svg.startswith("<?xml")
    assert "MulBackward0" in svg and "</svg>" in svg


def test_repr_svg_without_dot_is_a_refgrad_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with nothing on it
    graph = refgrad.display.program_graph(example("mul.bwd"))
    with pytest.raises(refgrad.Error, match="`dot` is not on PATH"):
        graph._repr_svg_()


@requires_dot
def test_a_big_program_folds_its_validates_and_shows_collapsed():
    graph = refgrad.display.program_graph(negations(40))  # 3 declarations + 82 instructions
    assert graph.collapsed and graph.nodes == 84
    # each validate went into the NegBackward0 before it; the root's validate (its operand is %g) stays
    assert '"pc0" [label="0: validate' in graph.source
    assert '"pc1" [label="1: NegBackward0\\n+ validate", shape=box, style=bold];' in graph.source
    assert '"pc2" [' not in graph.source
    assert '"pc1" -> "pc3" [label="%v1"];' in graph.source  # pc 3 negates %v1, validated at pc 2
    assert '"pc79" -> "pc81" [label="%v40"];' in graph.source and '"pc81" -> "@x";' in graph.source
    text = graph._repr_html_()
    assert text.startswith("<details><summary>") and text.endswith("</details>")
    assert "<svg" in text and "<?xml" not in text
    assert not refgrad.display.program_graph(negations(40), collapse_above=1000).collapsed


@requires_dot
def test_a_captured_transformer_shows_collapsed():
    torch = pytest.importorskip("torch")
    import refgrad.torch as rt
    import refgrad.zoo as zoo

    model, forward = zoo.transformer(torch.float32)
    captured = rt.capture(forward(model), names=dict(model.named_parameters()))
    graph = refgrad.display.program_graph(captured.bundle)
    assert graph.collapsed and "ScaledDotProductFlashAttentionForCpuBackward0\\n+ validate" in graph.source
    # a validate stays its own DOT node only when what it checks comes from a declaration (the root grad)
    drawn = graph.source.count(": validate")
    assert drawn == 1 and sum(instr.op == "validate" for instr in captured.program.code) > 10
    assert graph._repr_html_().startswith("<details><summary>refgrad program ")
    machine = refgrad.Machine(captured.bundle)
    machine.run_until(pc=len(captured.program.code) // 2)
    text = machine._repr_html_()
    assert text.count("▶") == 1 and "<b>ScaledDotProductFlashAttentionForCpuBackward0</b>" in text
