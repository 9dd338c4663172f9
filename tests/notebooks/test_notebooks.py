"""Runs every teaching notebook (notebooks/*.ipynb) twice, in a fresh Jupyter kernel each time.

- solved: each exercise cell (tag `exercise-<id>`) gets the block `# %% exercise-<id>` of
  notebooks/solutions/<notebook>.py in place of its stub; every check cell (tag `check-<id>`) must then
  print a line beginning with ✓. This proves each exercise can be solved and its check accepts a solution.
- stubs: the notebook as committed; every check cell must print a line beginning with ○ (not done yet)
  and no cell may raise. This proves the checks answer an untouched notebook politely.

Each executed notebook is written to build/notebooks/<notebook>.<mode>.ipynb, also when it fails, so a
failure can be opened and read in Jupyter. The structural tests need no kernel: each notebook has
exercises, each exercise a check after it and a solution, and the committed notebooks carry no outputs.

The kernel is the `python3` kernel of the Python running pytest (ipykernel), so it imports the same
refgrad; it starts in notebooks/, as Jupyter would.
"""
from __future__ import annotations

import pathlib
import re

import nbclient
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
    notebook = nbformat.read(path, as_version=4)
    solutions = solutions_of(SOLUTION_DIR / f"{path.stem}.py")
    for identifier, index in tagged(notebook, "exercise").items():
        notebook.cells[index].source = solutions[identifier]
    execute(notebook, f"{path.stem}.solved.ipynb")
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
