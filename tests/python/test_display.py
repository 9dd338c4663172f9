"""refgrad.display: Program and Machine as HTML, a program's dataflow as DOT and SVG (issue 8)."""
import html.parser
import math
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import refgrad

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PROGRAMS = os.path.join(ROOT, "examples", "programs")

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


class Tables(html.parser.HTMLParser):
    """Reads HTML as a browser lays out its tables: .rows, each row's cells' text (tags dropped), and
    .cells, each td/th with its attributes, the style of its row and its spans' styles."""

    def __init__(self, text):
        super().__init__()
        self.rows, self.cells, self.row_styles = [], [], []
        self._cell = None
        self._span = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr":
            self.rows.append([])
            self.row_styles.append(attrs.get("style", ""))
        elif tag in ("td", "th"):
            self._cell = {"tag": tag, "style": attrs.get("style", ""), "text": "", "spans": []}
            self.cells.append(self._cell)
        elif tag == "span" and self._cell is not None:
            self._span = {"style": attrs.get("style", ""), "text": ""}
            self._cell["spans"].append(self._span)

    def handle_endtag(self, tag):
        if tag == "span":
            self._span = None
        elif tag in ("td", "th"):
            self.rows[-1].append(self._cell["text"])
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data
        if self._span is not None:
            self._span["text"] += data


def rows(text):
    return Tables(text).rows


def marked_pc(text):
    """The pc of the row that carries the ▶ mark, and whether that row is highlighted; None if none is."""
    tables = Tables(text)
    marked = [(row[1], style) for row, style in zip(tables.rows, tables.row_styles) if row and row[0] == "▶"]
    assert len(marked) <= 1, marked
    return (int(marked[0][0]), "background:#fdf3d0" in marked[0][1]) if marked else None


def test_program_html_lists_declarations_and_every_instruction_with_its_node_in_bold():
    program = example("mlp.bwd")
    text = program._repr_html_()
    for instr in program.code:
        if instr.op == "call":
            assert f"<b>{instr.node}</b>" in text
    # mlp.bwd's nodes, read off the file by hand: two of each Addmm and T, one Sum and one Relu.
    assert text.count("<b>AddmmBackward0</b>") == 2 and text.count("<b>TBackward0</b>") == 2
    assert text.count("<b>SumBackward0</b>") == 1 and text.count("<b>ReluBackward0</b>") == 1
    table = rows(text)
    operations = [row[3] for row in table if len(row) == 7]
    assert sum(op.startswith("accumulate_grad @") for op in operations) == 4 and operations.count("validate") == 7
    assert ["saved", "$W2t", "f32[4,2]"] in table
    assert ["leaf", "@W1", "f32[4,3]"] in table
    assert ["grad", "%loss", "f32[]"] in table
    # the second Addmm skips mat1's gradient: need and the `_` result are shown as the text prints them
    addmm = [row for row in table if len(row) == 7 and row[3] == "AddmmBackward0"][1]
    assert addmm[2] == "%13, _, %14" and "need=[1,0,1]" in addmm[5].split()
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
    assert ["hook", "&h", "tensor_pre"] in rows(text)


def test_html_is_hidden_from_mathjax_and_left_aligned():
    """MathJax (in Jupyter) would typeset the text between two `$name` fields as LaTeX: refgrad's HTML is
    one element with the classes MathJax 2 and 3 skip. Jupyter right-aligns cells: each says left."""
    machine = refgrad.Machine(example("mlp.bwd"))
    machine.step()
    for text in (example("mlp.bwd")._repr_html_(), machine._repr_html_()):
        assert text.startswith('<div class="refgrad tex2jax_ignore mathjax_ignore">') and text.endswith("</div>")
        assert text.count("<div") == 1  # nothing outside that one element
        cells = Tables(text).cells
        assert len(cells) > 50
        for cell in cells:
            assert "text-align: left" in cell["style"], cell


def test_long_instructions_wrap_between_tokens_only():
    """A browser may break a line at a space; every token of the fields (and origin) is a nowrap span, so
    a line breaks only between tokens: `mat1_sym_sizes=[5,6]` is never cut."""
    program = refgrad.Program.parse(
        "program p\n  grad %g : f32[2,3]\n  saved $m1 : f32[2,4]\n  saved $m2 : f32[4,3]\n"
        "  leaf @b : f32[3]\n  leaf @x : f32[2,4]\n  leaf @w : f32[4,3]\ncode\n"
        "  %0 = validate %g : f32[2,3]\n"
        "  %1, %2, %3 = AddmmBackward0 %0  alpha=1 beta=1 mat1=$m1 mat1_layout=strided mat1_sym_sizes=[2,4] "
        "mat1_sym_strides=[4,1] mat2=$m2 mat2_layout=strided mat2_sym_sizes=[4,3] mat2_sym_strides=[3,1] "
        'origin="cell 3, line 8"\n'
        "  %4, %5, %6 = validate %1, %2, %3 : f32[3], f32[2,4], f32[4,3]\n"
        "  accumulate_grad @b %4\n  accumulate_grad @x %5\n  accumulate_grad @w %6\n")
    cells = Tables(program._repr_html_()).cells
    fields = next(cell for cell in cells if "mat1_sym_sizes" in cell["text"])
    tokens = [span["text"] for span in fields["spans"]]
    assert "mat1_sym_sizes=[2,4]" in tokens and "mat2=$m2" in tokens
    assert " ".join(tokens) == fields["text"]  # every token is a span, and only spaces come between them
    assert all(span["style"] == "white-space: nowrap" for span in fields["spans"])
    origin = cells[cells.index(fields) + 1]
    assert origin["text"] == "cell 3, line 8"
    assert [span["style"] for span in origin["spans"]] == ["white-space: nowrap"] * 4


def test_machine_html_marks_the_pc_and_lists_the_live_registers():
    machine = refgrad.Machine(example("mlp.bwd"))
    for _ in range(3):
        machine.step()
    assert machine.pc == 3
    text = machine._repr_html_()
    assert "at pc 3 of 17" in text
    assert marked_pc(text) == (3, True) and text.count("▶") == 1
    # after validate %1 (pc 2) only %2 is live: SumBackward0's grad expanded to [2,2], all ones (norm 2)
    assert machine.live_registers() == ["2"]
    assert ["%2", "float32", "[2,2]", "2", "1, 1, 1, 1"] in rows(text)


def test_machine_html_lists_every_live_register_and_shortens_long_values():
    machine = refgrad.Machine(example("mlp.bwd"))
    machine.run_until(pc=5)
    text = machine._repr_html_()
    assert marked_pc(text) == (5, True)
    # AddmmBackward0's validated grads: %6 for b2 [2], %7 for h [2,4], %8 for W2.t() [4,2]
    registers = {row[0]: row[1:3] for row in rows(text) if len(row) == 5}
    for register, shape in [("6", "[2]"), ("7", "[2,4]"), ("8", "[4,2]")]:
        assert registers["%" + register] == ["float32", shape]
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
    assert text.startswith('<details class="tex2jax_ignore mathjax_ignore"><summary>') and text.endswith("</details>")
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
    assert graph._repr_html_().startswith('<details class="tex2jax_ignore mathjax_ignore"><summary>refgrad program ')
    machine = refgrad.Machine(captured.bundle)
    machine.run_until(pc=len(captured.program.code) // 2)
    text = machine._repr_html_()
    assert text.count("▶") == 1 and "<b>ScaledDotProductFlashAttentionForCpuBackward0</b>" in text


# --------------------------------------------------------------- source lines ---


def test_source_line_outside_ipython_is_file_and_line():
    assert refgrad.display.source_line("/home/me/model.py", 12) == "/home/me/model.py:12"


# Run in a fresh interpreter: IPython's shell is a process-wide singleton that takes over the display hook.
IN_IPYTHON = textwrap.dedent("""\
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    cells = [
        "import torch, refgrad, refgrad.torch",
        "x = torch.ones(3, requires_grad=True)\\n"
        "with torch.autograd.detect_anomaly():\\n"
        "    y = (x.exp() * 2).sum()\\n",
        "captured = refgrad.torch.capture(y)",
        "origins = {node.name: node.origin for node in captured.graph.nodes if node.kind == 'builtin'}",
    ]
    for cell in cells:
        shell.run_cell(cell, store_history=True).raise_error()
    print(shell.user_ns["origins"])
    print(shell.user_ns["refgrad"].display.source_line("/somewhere/model.py", 4))
""")


def test_source_line_in_ipython_names_the_cell_and_its_line():
    """In IPython (a Jupyter kernel too), a cell's code runs under a made-up file name; capture's origins
    name the cell by its execution count instead, as IPython's tracebacks do ("Cell In[2], line 3")."""
    pytest.importorskip("torch")
    pytest.importorskip("IPython")
    done = subprocess.run([sys.executable, "-c", IN_IPYTHON], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    origins, plain = done.stdout.strip().splitlines()[-2:]
    # the second cell ran as In [2]; exp and mul are on its third line
    assert eval(origins) == {"SumBackward0": "cell 2, line 3", "MulBackward0": "cell 2, line 3",
                             "ExpBackward0": "cell 2, line 3"}
    assert plain == "/somewhere/model.py:4"  # a file that is no cell keeps its name
