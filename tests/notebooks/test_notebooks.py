"""Runs every teaching notebook (notebooks/*.ipynb) twice, in a fresh Jupyter kernel each time.

- solved: each exercise cell (tag `exercise-<id>`) gets the block `# %% exercise-<id>` of
  notebooks/solutions/<notebook>.py in place of its stub; every check cell (tag `check-<id>`) must then
  print a line beginning with ✓. This proves each exercise can be solved and its check accepts a solution.
- stubs: the notebook as committed; every check cell must print a line beginning with ○ (not done yet)
  and no cell may raise. This proves the checks answer an untouched notebook politely.

Each executed notebook is written to build/notebooks/<notebook>.<mode>.ipynb, also when it fails, so a
failure can be opened and read in Jupyter. The structural tests need no kernel: each notebook has
exercises, each exercise a check after it and a solution, and the committed notebooks carry no outputs.

- rendered: each solved notebook as nbconvert's HTML (JupyterLab's look; build/notebooks/<notebook>.html,
  to open in a browser). No output may give MathJax two `$` to typeset between, refgrad's tables included
  (their `$name`s are why refgrad's HTML carries MathJax's ignore classes), refgrad's cells are
  left-aligned against Jupyter's right-aligning CSS, and no origin names the kernel's temporary cell files.

The kernel is the `python3` kernel of the Python running pytest (ipykernel), so it imports the same
refgrad; it starts in notebooks/, as Jupyter would.
"""
from __future__ import annotations

import html.parser
import pathlib
import re

import nbclient
import nbconvert
import nbformat
import pytest

from refgrad.exercises import NOT_DONE, SOLVED

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
SOLUTION_DIR = NOTEBOOK_DIR / "solutions"
EXECUTED_DIR = ROOT / "build" / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 600
KERNEL_STARTUP_TIMEOUT_S = 180  # nbclient's default is 60 s; a busy CI machine can be slower

SOLVED_RUNS = {}  # notebook stem -> the notebook test_solved executed, for the rendering tests

_TAG = re.compile(r"^(exercise|check)-([A-Za-z0-9_]+)$")
_SOLUTION_HEADER = re.compile(r"^# %% exercise-([A-Za-z0-9_]+)\s*$", re.MULTILINE)


def tagged(notebook, kind: str) -> dict[str, int]:
    """{id: cell index} of the code cells tagged `<kind>-<id>`."""
    found = {}
    for index, cell in enumerate(notebook.cells):
        for tag in cell.get("metadata", {}).get("tags", []):
            match = _TAG.match(tag)
            if match and match.group(1) == kind:
                assert cell.cell_type == "code", f"cell {index} is tagged {tag} but is {cell.cell_type}"
                assert match.group(2) not in found, f"two cells are tagged {tag}"
                found[match.group(2)] = index
    return found


def solutions_of(path: pathlib.Path) -> dict[str, str]:
    """{id: source} from a solutions file: blocks that begin with a line `# %% exercise-<id>`."""
    text = path.read_text()
    headers = list(_SOLUTION_HEADER.finditer(text))
    assert headers, f"{path} has no block beginning `# %% exercise-<id>`"
    blocks = {}
    for header, following in zip(headers, headers[1:] + [None]):
        end = following.start() if following else len(text)
        identifier = header.group(1)
        assert identifier not in blocks, f"{path}: two blocks for exercise-{identifier}"
        blocks[identifier] = text[header.end():end].strip("\n") + "\n"
    return blocks


def check_outputs(cell) -> str:
    """What a check cell printed."""
    return "".join(output.get("text", "") for output in cell.get("outputs", []) if output.output_type == "stream")


def execute(notebook, name: str) -> None:
    """Runs the notebook in a fresh kernel in notebooks/; writes it to build/notebooks/ whatever happens."""
    EXECUTED_DIR.mkdir(parents=True, exist_ok=True)
    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT_S, startup_timeout=KERNEL_STARTUP_TIMEOUT_S,
                                     kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    try:
        client.execute()
    finally:
        nbformat.write(notebook, EXECUTED_DIR / name)


def ids(paths):
    return [path.stem for path in paths]


def test_there_are_five_notebooks_at_least():
    assert len(NOTEBOOKS) >= 5, [path.name for path in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_structure(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    exercises, checks = tagged(notebook, "exercise"), tagged(notebook, "check")
    assert exercises, f"{path.name} has no exercise cells"
    assert sorted(exercises) == sorted(checks), f"exercises {sorted(exercises)} but checks {sorted(checks)}"
    for identifier, index in exercises.items():
        assert checks[identifier] > index, f"check-{identifier} comes before exercise-{identifier}"
    solutions = solutions_of(SOLUTION_DIR / f"{path.stem}.py")
    assert sorted(solutions) == sorted(exercises), f"solutions for {sorted(solutions)}, exercises {sorted(exercises)}"
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, \
                f"{path.name} cell {index} was committed with outputs: clear them (Jupyter: Edit > Clear Outputs)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_solved(path):
    notebook = solved_run(path)
    for identifier, index in tagged(notebook, "check").items():
        printed = check_outputs(notebook.cells[index])
        assert printed.startswith(SOLVED), f"check-{identifier} with the solution printed: {printed!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_stubs_answered_politely(path):
    notebook = nbformat.read(path, as_version=4)
    execute(notebook, f"{path.stem}.stubs.ipynb")
    for identifier, index in tagged(notebook, "check").items():
        printed = check_outputs(notebook.cells[index])
        assert printed.startswith(NOT_DONE), f"check-{identifier} with the stub printed: {printed!r}"


# ------------------------------------------------------------------ rendered as HTML ---

# Elements whose text MathJax never searches for `$`: its skipHtmlTags (MathJax 2 and 3 agree on these),
# and an element with the ignore class of MathJax 2 (nbconvert's pages, the classic notebook) or of
# MathJax 3 (JupyterLab 4, Notebook 7), each searched by its own MathJax.
_SKIPPED_TAGS = {"script", "noscript", "style", "textarea", "pre", "code"}
_IGNORE_CLASSES = {"MathJax 2": "tex2jax_ignore", "MathJax 3": "mathjax_ignore"}
_VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class RenderedPage(html.parser.HTMLParser):
    """What the MathJax of a Jupyter page would see in a notebook's outputs, and refgrad's table cells.

    exposed[mathjax]: per output (an element of class jp-OutputArea-output) the text that MathJax searches
    for math; refgrad_cells: (whether inside both ignore classes, the cell's inline style) for each td or
    th inside refgrad's HTML (class "refgrad")."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self._open = []  # (tag, classes) of the open elements, outermost first
        self.exposed = {mathjax: [] for mathjax in _IGNORE_CLASSES}
        self.refgrad_cells = []
        self.feed(text)

    def _inside(self, class_name):
        return any(class_name in classes for _, classes in self._open)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        if tag in ("td", "th") and self._inside("refgrad"):
            hidden = all(self._inside(name) for name in _IGNORE_CLASSES.values())
            self.refgrad_cells.append((hidden, attrs.get("style") or ""))
        if tag in _VOID_TAGS:
            return
        self._open.append((tag, classes))
        if "jp-OutputArea-output" in classes:
            for texts in self.exposed.values():
                texts.append("")

    def handle_startendtag(self, tag, attrs):  # <path/> in an SVG: opens nothing
        self.handle_starttag(tag, attrs)
        if tag not in _VOID_TAGS:
            self._open.pop()

    def handle_endtag(self, tag):
        for depth in range(len(self._open) - 1, -1, -1):  # close up to the matching element
            if self._open[depth][0] == tag:
                del self._open[depth:]
                return

    def handle_data(self, data):
        if not self._inside("jp-OutputArea-output") or any(tag in _SKIPPED_TAGS for tag, _ in self._open):
            return
        for mathjax, ignore_class in _IGNORE_CLASSES.items():
            if not self._inside(ignore_class):
                self.exposed[mathjax][-1] += data


def solved_run(path):
    """The notebook as test_solved executed it, or executed now when test_solved did not run."""
    if path.stem not in SOLVED_RUNS:
        notebook = nbformat.read(path, as_version=4)
        solutions = solutions_of(SOLUTION_DIR / f"{path.stem}.py")
        for identifier, index in tagged(notebook, "exercise").items():
            notebook.cells[index].source = solutions[identifier]
        execute(notebook, f"{path.stem}.solved.ipynb")
        SOLVED_RUNS[path.stem] = notebook
    return SOLVED_RUNS[path.stem]


# The notebooks that show a refgrad Program or Machine as a table (the others print text).
SHOWS_PROGRAM_TABLES = {"01_what_backward_computes", "02_from_grad_fn_to_program",
                        "03_validate_outputs_broadcasting_accumulation", "05_differential_testing"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_rendered_outputs_give_mathjax_nothing_and_refgrad_tables_are_left_aligned(path):
    page, _ = nbconvert.HTMLExporter(template_name="lab").from_notebook_node(solved_run(path))
    (EXECUTED_DIR / f"{path.stem}.html").write_text(page)
    rendered = RenderedPage(page)
    for mathjax, outputs in rendered.exposed.items():
        for text in outputs:
            assert text.count("$") < 2, f"{mathjax} would typeset the text between two $ in an output: {text!r}"
    assert bool(rendered.refgrad_cells) == (path.stem in SHOWS_PROGRAM_TABLES), len(rendered.refgrad_cells)
    for hidden, style in rendered.refgrad_cells:
        assert hidden, "a refgrad table cell outside MathJax's ignore classes"
        assert re.search(r"(^|;)\s*text-align:\s*left\b", style), f"a refgrad table cell not left-aligned: {style!r}"
    assert "/ipykernel_" not in page, "an origin names the kernel's temporary file for a cell"
