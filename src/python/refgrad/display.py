"""Rich display for Jupyter: Program and Machine as HTML tables, a program's dataflow as SVG.

    import refgrad
    program = refgrad.load("examples/programs/mlp.bwd").program
    program                                  # in Jupyter: its declarations and code as a table
    machine = refgrad.Machine(program); machine.step()
    machine                                  # the same table, the current pc marked, and the live registers
    refgrad.display.program_graph(program)   # the dataflow as SVG (Graphviz's `dot`), .source is the DOT
    refgrad.display.source_line(file, 8)     # a forward source line as a reader names it: "cell 3, line 8"

`import refgrad` imports this module, which gives Program and Machine their `_repr_html_`. The graph
follows `build/refgrad dot` (src/cli/dot.cpp): one DOT node per instruction and per declaration (grads
blue, saved tensors yellow, leaves and outputs green), an edge from where each register is made to where
it is used, labelled with the register, and dashed edges for saved fields. Given a Machine, it adds each
value it can see: registers on their edges, and grads, saved tensors and leaf grads on their nodes, by
dtype, shape and norm. A graph above ``collapse_above`` DOT nodes folds each validate into the
instruction that made its operands, and shows collapsed (an HTML <details> element).

Everything that comes from the program (names, node names, fields, origins) is html.escape'd: a
program's text is data, and a notebook must not run a `<script>` a program happened to contain.

What Jupyter does to HTML outputs, and how the tables hold up against it:
- MathJax typesets `$...$` in outputs, and a program's text is full of `$name`s: the text between
  `self=$n0_self` and `target=$n0_target` would come out as italic LaTeX. refgrad's HTML is therefore
  wrapped in an element with the classes MathJax skips: `tex2jax_ignore` (MathJax 2: classic notebook,
  nbconvert's HTML) and `mathjax_ignore` (MathJax 3: JupyterLab 4, Notebook 7).
- JupyterLab's CSS right-aligns table cells (`:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td`),
  more specific than any stylesheet of ours could be short of `!important`; so each cell carries its
  alignment inline.
- Long instructions wrap to fit, but only between the tokens of the text (`self=$n0_self` stays whole):
  each token is a `white-space: nowrap` span.
"""
from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

import refgrad

__all__ = ["ProgramGraph", "machine_html", "program_graph", "program_html", "source_line"]

# The colours of src/cli/dot.cpp, used by the HTML tables and the graph alike.
_INPUT_COLOUR = "#dbe8fb"  # blue: what comes in
_SAVED_COLOUR = "#fdf3d0"  # yellow: what the forward kept
_RESULT_COLOUR = "#d9f2dd"  # green: what the program makes
_PC_COLOUR = _SAVED_COLOUR  # the machine's current instruction

_VALUES_SHOWN = 6  # how many of a register's values the Machine's table shows


def _escape(value: Any) -> str:
    return html.escape(str(value))


def _program_of(program: Any) -> Any:
    """A Program from a Program, a Bundle (its .program) or a Machine (its .program)."""
    return program.program if isinstance(program, (refgrad.Bundle, refgrad.Machine)) else program


# ------------------------------------------------------------------ source lines ---

_CELL_NAME = re.compile(r"In\s*\[(\d+)\]")


def _cell_label(filename: str) -> Optional[str]:
    """"cell 3" when ``filename`` is the name the running IPython kernel gave a cell's code (ipykernel
    compiles each cell as a temporary file, /tmp/ipykernel_<pid>/<hash>.py); None otherwise.

    IPython's compiler keeps which execution count each of those names belongs to, and says so through
    format_code_name (its tracebacks' "Cell In[3], line 8" come from there). IPython is only asked when it
    is already imported: outside a kernel there are no cells."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    format_code_name = getattr(getattr(shell, "compile", None), "format_code_name", None)
    named = format_code_name(filename) if format_code_name is not None else None
    if not named:
        return None
    match = _CELL_NAME.fullmatch(named[1])
    return f"cell {match.group(1)}" if match else named[1]


def source_line(filename: str, line: int) -> str:
    """How to name a line of source for a reader: "cell 3, line 8" for line 8 of the notebook cell that
    ran as In [3] (the number Jupyter shows left of the cell), "model.py:8" for a file."""
    cell = _cell_label(filename)
    return f"{cell}, line {line}" if cell else f"{filename}:{line}"


# ------------------------------------------------------------ the text of an instruction ---


def _register(name: Optional[str]) -> str:
    return "_" if name is None else f"%{name}"


def _operand(name: Optional[str]) -> str:
    return "none" if name is None else f"%{name}"


def _known_types(instr: Any) -> str:
    """The result types the program states (validate's metadata, zeros' type), as the text prints them."""
    if instr.op not in ("validate", "zeros"):
        return ""
    return ", ".join("_" if metadata is None else str(metadata) for metadata in instr.metadata)


def _operation_label(instr: Any) -> str:
    """As dot.cpp names an instruction: the node, CopySlices[node], `hook &name`, or the opcode."""
    if instr.op == "call":
        return instr.node
    if instr.op == "CopySlices":
        return f"CopySlices[{instr.node}]"
    if instr.op in ("hook", "call_backward"):
        return f"{instr.op} &{instr.target}"
    return instr.op


def _operation_html(instr: Any) -> str:
    """The operation cell: the backward node's name in bold, the opcode and its target otherwise."""
    if instr.op == "call":
        return f"<b>{_escape(instr.node)}</b>"
    if instr.op == "CopySlices":
        return f"CopySlices[<b>{_escape(instr.node)}</b>]"
    if instr.op == "call_backward":
        return f"call_backward <b>&amp;{_escape(instr.target)}</b>"
    if instr.op == "hook":
        on_leaf = f" @{instr.leaf}" if instr.leaf else ""
        return _escape(f"hook &{instr.target}{on_leaf}")
    if instr.op == "accumulate_grad":
        return _escape(f"accumulate_grad @{instr.target}")
    if instr.op == "output":
        return _escape(f"output ^{instr.target}")
    return _escape(instr.op)


def _field_text(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join("none" if item is None else _field_text(item) for item in value) + "]"
    return "none" if value is None else str(value)


def _fields(instr: Any) -> str:
    parts = [f"{name}={_field_text(value)}" for name, value in instr.attrs.items()]
    if not all(instr.need):  # as the text prints it: only a mask that skips a result
        parts.append(f"need=[{','.join(str(int(bit)) for bit in instr.need)}]")
    types = _known_types(instr)
    if types:
        parts.append(f": {types}")
    return " ".join(parts)


# -------------------------------------------------------------------------- values ---


@dataclass
class _Summary:
    """What the tables and the graph say about one tensor: dtype, shape, norm and its first values."""

    dtype: str
    shape: list[int]
    norm: float
    values: list[Any]
    numel: int

    @staticmethod
    def of(tensor: Any) -> Optional["_Summary"]:
        if tensor is None:
            return None
        # NumPy has no bfloat16 (a refgrad bfloat16 tensor's array holds its bits): its values come through torch.
        array = tensor.torch().float().numpy() if tensor.dtype == "bfloat16" else np.asarray(tensor.numpy())
        flat = array.reshape(-1)
        norm = float(np.linalg.norm(flat.astype(np.complex128 if np.iscomplexobj(flat) else np.float64)))
        return _Summary(str(tensor.dtype), list(array.shape), norm, flat[:_VALUES_SHOWN].tolist(), flat.size)

    @property
    def shape_text(self) -> str:
        return "[" + ",".join(str(size) for size in self.shape) + "]"

    @property
    def values_text(self) -> str:
        shown = ", ".join(f"{value:.4g}" if isinstance(value, float) else str(value) for value in self.values)
        return shown + (", …" if self.numel > len(self.values) else "")

    @property
    def brief(self) -> str:
        """One line for the graph: "f32 [2,4] norm 3.5"."""
        return f"{self.dtype} {self.shape_text} norm {self.norm:.4g}"


def _read(getter: Any, name: str) -> Optional[_Summary]:
    """The summary of what the machine holds under that name; None when it holds nothing there."""
    try:
        return _Summary.of(getter(name))
    except refgrad.Error:
        return None


# ---------------------------------------------------------------------- the tables ---

# Jupyter's own CSS right-aligns cells and outranks a stylesheet's `.refgrad td`: the styles go inline.
_IGNORED_BY_MATHJAX = "tex2jax_ignore mathjax_ignore"
_TABLE_STYLE = "border-collapse: collapse; font-family: monospace; margin: 0.3em 0"
_CELL_STYLE = "text-align: left; vertical-align: top; padding: 0.15em 0.6em"

# How the code table's columns share a narrow output: the fields wrap (between tokens); a list of registers
# keeps a few on a line before it wraps; the origin and a short operation (`accumulate_grad @fc1.bias`) stay on
# one line, a long one (a leaf of a real model: `accumulate_grad @encoder.layers.0.self_attn.in_proj_weight`)
# may wrap at its space.
_NO_WRAP = "; white-space: nowrap"
_RESULTS = "; min-width: 12ch"
_OPERANDS = "; min-width: 15ch"
_SHORT_OPERATION = 32  # characters


def _cell(content_html: str, tag: str = "td", style: str = "") -> str:
    return f'<{tag} style="{_CELL_STYLE}{style}">{content_html}</{tag}>'


def _tokens(text: str) -> str:
    """``text`` escaped, each space-separated token unbreakable: a line may wrap between tokens only."""
    return " ".join(f'<span style="white-space: nowrap">{_escape(token)}</span>' for token in text.split())


def _table(header: list[str], rows: list[str]) -> str:
    head = "".join(_cell(_escape(cell), "th") for cell in header)
    return f'<table style="{_TABLE_STYLE}"><tr>{head}</tr>{"".join(rows)}</table>'


def _outer(content_html: str) -> str:
    """refgrad's HTML as one element that MathJax leaves alone."""
    return f'<div class="refgrad {_IGNORED_BY_MATHJAX}">{content_html}</div>'


def text_table_html(header: list[str], rows: list[list[str]]) -> str:
    """A table of plain-text cells (escaped, left-aligned, wrapping only between tokens), as other parts of
    refgrad show theirs (refgrad.check's Report)."""
    body = ["<tr>" + "".join(_cell(_tokens(cell)) for cell in row) + "</tr>" for row in rows]
    return _table(header, body)


def block_html(content_html: str) -> str:
    """refgrad's HTML as one element that MathJax leaves alone (see _outer)."""
    return _outer(content_html)


def _declaration_rows(program: Any) -> list[str]:
    rows = []

    def row(kind: str, sigil: str, name: str, detail: str, colour: str) -> None:
        cells = _cell(kind) + _cell(_escape(sigil + name)) + _cell(_escape(detail))
        rows.append(f'<tr style="background:{colour}">{cells}</tr>')

    for grad in program.grads:
        row("grad", "%", grad.name, grad.type, _INPUT_COLOUR)
    for saved in program.saved:
        row("saved", "$", saved.name, saved.type, _SAVED_COLOUR)
    for leaf in program.leaves:
        row("leaf", "@", leaf.name, leaf.type, _RESULT_COLOUR)
    for output in program.outputs:
        row("output", "^", output.name, output.type, _RESULT_COLOUR)
    for hook in program.hooks:
        row("hook", "&", hook.name, hook.kind, "transparent")
    for function in program.functions:
        row("function", "&", function.name, "autograd.Function backward", "transparent")
    return rows


def _code_rows(program: Any, current_pc: Optional[int]) -> list[str]:
    rows = []
    for pc, instr in enumerate(program.code):
        here = pc == current_pc
        marker = "▶" if here else ""
        style = f' style="background:{_PC_COLOUR}"' if here else ""
        results = ", ".join(_register(result) for result in instr.results)
        operands = ", ".join(_operand(operand) for operand in instr.operands)
        operation = _operation_html(instr)
        operation_text = html.unescape(re.sub(r"<[^>]*>", "", operation))
        cells = [_cell(marker, style=_NO_WRAP), _cell(str(pc), style=_NO_WRAP),
                 _cell(_tokens(results), style=_RESULTS),
                 _cell(operation, style=_NO_WRAP if len(operation_text) <= _SHORT_OPERATION else ""),
                 _cell(_tokens(operands), style=_OPERANDS), _cell(_tokens(_fields(instr))),
                 _cell(_tokens(instr.origin), style=_NO_WRAP)]
        rows.append(f'<tr{style} data-pc="{pc}">{"".join(cells)}</tr>')
    return rows


def _program_tables(program: Any, current_pc: Optional[int]) -> str:
    declarations = _table(["declaration", "name", "type"], _declaration_rows(program))
    code = _table(["", "pc", "results", "op / node", "operands", "fields", "origin"], _code_rows(program, current_pc))
    return f"{declarations}<br>{code}"


def program_html(program: Any) -> str:
    """A Program (or Bundle) as HTML: its declarations, then its code with each node's name in bold."""
    program = _program_of(program)
    return _outer(f"<p><b>refgrad.Program {_escape(program.name)}</b>: {len(program.code)} instructions</p>"
                  f"{_program_tables(program, None)}")


def _register_rows(machine: Any) -> list[str]:
    rows = []
    for name in machine.live_registers():
        summary = _read(machine.register_value, name)
        cells = ([summary.dtype, summary.shape_text, f"{summary.norm:.4g}", summary.values_text]
                 if summary else ["none", "", "", ""])
        rows.append("<tr>" + "".join(_cell(_escape(cell)) for cell in ["%" + name] + cells) + "</tr>")
    return rows


def machine_html(machine: Any) -> str:
    """A Machine as HTML: its program's tables with the current pc marked, then its live registers."""
    program = machine.program
    where = "finished" if machine.finished else f"at pc {machine.pc} of {len(program.code)}"
    registers = _table(["register", "dtype", "shape", "norm", "values"], _register_rows(machine))
    return _outer(f"<p><b>refgrad.Machine running {_escape(program.name)}</b>: {_escape(where)}</p>"
                  f"{_program_tables(program, None if machine.finished else machine.pc)}"
                  f"<p><b>live registers</b></p>{registers}")


# ----------------------------------------------------------------------- the graph ---


def _quoted(text: str) -> str:
    """A DOT string literal, as dot.cpp writes one: quotes and backslashes escaped, newlines as \\n."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _instruction_id(pc: int) -> str:
    return _quoted(f"pc{pc}")


def _declaration_id(sigil: str, name: str) -> str:
    return _quoted(sigil + name)


def _saved_references(instr: Any) -> list[tuple[str, str]]:
    """(field, saved tensor) for each saved tensor the instruction's fields refer to ('$x' in attrs)."""
    references = []
    for name, value in instr.attrs.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item.startswith("$"):
                references.append((name, item[1:]))
    return references


@dataclass
class _Dot:
    """The DOT graph being written: nodes (id -> label and attributes, in order) and edges."""

    nodes: dict[str, list[str]] = field(default_factory=dict)  # id -> [label, attributes]
    edges: list[str] = field(default_factory=list)

    def node(self, node_id: str, label: str, attributes: str) -> None:
        self.nodes[node_id] = [label, attributes]

    def edge(self, source: str, target: str, attributes: str = "") -> None:
        self.edges.append(f"  {source} -> {target}{f' [{attributes}]' if attributes else ''};")

    def text(self, name: str) -> str:
        lines = [f"digraph {_quoted(name)} {{", '  node [fontname="Helvetica", fontsize=10];',
                 '  edge [fontname="Helvetica", fontsize=9];']
        for node_id, (label, attributes) in self.nodes.items():
            lines.append(f"  {node_id} [label={_quoted(label)}, {attributes}];")
        return "\n".join(lines + self.edges + ["}"]) + "\n"


def _with_value(label: str, summary: Optional[_Summary]) -> str:
    return f"{label}\n{summary.brief}" if summary else label


def _write_declarations(program: Any, machine: Any, dot: _Dot) -> None:
    def value(getter_name: str, name: str) -> Optional[_Summary]:
        return _read(getattr(machine, getter_name), name) if machine is not None else None

    def node(sigil: str, decl: Any, shape: str, colour: str, summary: Optional[_Summary]) -> None:
        dot.node(_declaration_id(sigil, decl.name), _with_value(f"{sigil}{decl.name}\n{decl.type}", summary),
                 f'shape={shape}, style=filled, fillcolor="{colour}"')

    for grad in program.grads:
        node("%", grad, "invhouse", _INPUT_COLOUR, value("register_value", grad.name))
    for saved in program.saved:
        node("$", saved, "note", _SAVED_COLOUR, value("saved_value", saved.name))
    for leaf in program.leaves:
        node("@", leaf, "doubleoctagon", _RESULT_COLOUR, value("leaf_grad", leaf.name))
    for output in program.outputs:
        node("^", output, "house", _RESULT_COLOUR, value("output", output.name))


def _folded_into(instr: Any, made_by: dict[str, str]) -> Optional[str]:
    """The instruction a validate folds into: the one that made all its operands; None for any other."""
    if instr.op != "validate":
        return None
    makers = {made_by.get(operand) for operand in instr.operands if operand is not None}
    maker = makers.pop() if len(makers) == 1 else None
    return maker if maker is not None and maker.startswith('"pc') else None


def _write_instruction(program: Any, pc: int, made_by: dict[str, str], machine: Any, fold: bool, dot: _Dot) -> None:
    instr = program.code[pc]
    node_id = _folded_into(instr, made_by) if fold else None
    if node_id is not None:
        dot.nodes[node_id][0] += "\n+ validate"
    else:
        node_id = _instruction_id(pc)
        types = _known_types(instr)
        is_node = instr.op in ("call", "CopySlices", "call_backward")
        dot.node(node_id, f"{pc}: {_operation_label(instr)}" + (f"\n{types}" if types else ""),
                 "shape=box, style=bold" if is_node else "shape=box, style=rounded")
        for operand in instr.operands:
            if operand is not None and operand in made_by:
                register = _read(machine.register_value, operand) if machine is not None else None
                dot.edge(made_by[operand], node_id, f"label={_quoted(_with_value('%' + operand, register))}")
        for field_name, saved in _saved_references(instr):
            if any(decl.name == saved for decl in program.saved):
                dot.edge(_declaration_id("$", saved), node_id, f"label={_quoted(field_name)}, style=dashed")
    if instr.op == "accumulate_grad" and any(leaf.name == instr.target for leaf in program.leaves):
        dot.edge(node_id, _declaration_id("@", instr.target))
    if instr.op == "hook" and instr.leaf and any(leaf.name == instr.leaf for leaf in program.leaves):
        dot.edge(_declaration_id("@", instr.leaf), node_id, 'label=".grad", style=dashed')
    if instr.op == "output" and any(output.name == instr.target for output in program.outputs):
        dot.edge(node_id, _declaration_id("^", instr.target))
    for result in instr.results:
        if result is not None:
            made_by[result] = node_id


def _dot_source(program: Any, machine: Any, fold: bool) -> str:
    dot = _Dot()
    _write_declarations(program, machine, dot)
    made_by = {grad.name: _declaration_id("%", grad.name) for grad in program.grads}  # register -> DOT node
    for pc in range(len(program.code)):
        _write_instruction(program, pc, made_by, machine, fold, dot)
    return dot.text(program.name)


def _run_dot(source: str) -> str:
    """SVG from Graphviz's `dot` (tools/bootstrap.sh installs Debian's graphviz)."""
    binary = shutil.which("dot")
    if binary is None:
        raise refgrad.Error("program_graph: Graphviz's `dot` is not on PATH (install graphviz, as tools/bootstrap.sh "
                            "does); the DOT text is in .source")
    done = subprocess.run([binary, "-Tsvg"], input=source, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise refgrad.Error(f"program_graph: dot -Tsvg failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


@dataclass
class ProgramGraph:
    """A program's dataflow: ``source`` is the DOT text, ``_repr_svg_()`` the picture (run by `dot`).
    ``collapsed``: the graph was big, its validates are folded, and Jupyter shows it in a <details>."""

    name: str
    source: str
    nodes: int
    collapsed: bool
    _svg: Optional[str] = field(default=None, repr=False)

    def svg(self) -> str:
        if self._svg is None:
            self._svg = _run_dot(self.source)
        return self._svg

    def _repr_svg_(self) -> str:
        return self.svg()

    def _repr_html_(self) -> Optional[str]:
        """None (Jupyter then shows the SVG) unless collapsed: the SVG inside a closed <details>."""
        if not self.collapsed:
            return None
        svg = self.svg()
        inline = svg[svg.find("<svg"):]  # HTML takes the <svg> element, not the XML prolog
        return (f'<details class="{_IGNORED_BY_MATHJAX}"><summary>refgrad program {_escape(self.name)}: '
                f"{self.nodes} nodes (validates folded into their calls)</summary>{inline}</details>")


def program_graph(program: Any, machine: Any = None, collapse_above: int = 60) -> ProgramGraph:
    """The dataflow of a Program (or Bundle, or Machine) as a ProgramGraph.

    machine: a Machine running it; each value it holds is shown (dtype, shape, norm): registers on their
    edges (the live ones, or all of them with keep_values=True), grads, saved tensors and leaf grads on
    their nodes. collapse_above: a graph with more DOT nodes (one per declaration and per instruction)
    folds each validate into the instruction that made its operands and shows collapsed."""
    if isinstance(program, refgrad.Machine) and machine is None:
        machine = program
    program = _program_of(program)
    nodes = len(program.grads) + len(program.saved) + len(program.leaves) + len(program.outputs) + len(program.code)
    collapsed = nodes > collapse_above
    return ProgramGraph(program.name, _dot_source(program, machine, fold=collapsed), nodes, collapsed)


def _attach() -> None:
    """Gives the pybind11 classes their HTML (a Python function set as an attribute of the class)."""
    refgrad.Program._repr_html_ = program_html
    refgrad.Bundle._repr_html_ = program_html
    refgrad.Machine._repr_html_ = machine_html


_attach()
