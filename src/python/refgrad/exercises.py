"""Check cells for the exercises of the teaching notebooks (notebooks/).

An exercise is a code cell the student fills in (a stub: a function whose body raises
NotImplementedError, or a name set to None), followed by a check cell:

    from refgrad.exercises import check, expect_close

    with check("Exercise 1: the gradient of f by hand"):
        expect_close(grad_f(2.0, 3.0), (6.0, 4.0), "grad_f(2.0, 3.0)")

A check cell never raises. It prints one line that begins with a mark:

    ✓  the exercise is solved;
    ○  it is not done yet: the stub still raises NotImplementedError, an answer is still None or ...,
       or the exercise cell has not been run (a NameError);
    ✗  it is not right yet: what is wrong, in words (an expect_* failed), or what the student's code
       raised, with the line of their cell it came from.

`make test` runs every notebook twice (tests/notebooks/): with the solutions of notebooks/solutions/ put
into the exercise cells, where every check must print ✓, and as committed, where every check must print ○.
"""
from __future__ import annotations

import contextlib
import sys
import traceback
from typing import Any, Iterator, Optional

import numpy as np

__all__ = ["NotDone", "Wrong", "check", "expect", "expect_close", "expect_equal", "answered"]

SOLVED = "✓"
NOT_DONE = "○"
WRONG = "✗"


class NotDone(Exception):
    """The exercise has not been attempted: an answer is still the stub's None or `...`."""


class Wrong(AssertionError):
    """The answer is there but not right; the message says what is wrong."""


def answered(value: Any, what: str) -> Any:
    """`value`, unless it is still a stub's placeholder (None or ...), which raises NotDone."""
    if value is None or value is Ellipsis:
        raise NotDone(f"{what} is still {value!r}")
    return value


def expect(condition: bool, message: str) -> None:
    """Wrong(message) unless condition holds."""
    if not condition:
        raise Wrong(message)


def _as_array(value: Any, what: str) -> np.ndarray:
    """A float64 NumPy array from a number, a sequence, a NumPy array, a torch or refgrad tensor."""
    answered(value, what)
    if hasattr(value, "detach"):  # a torch.Tensor
        value = value.detach().cpu().double().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise Wrong(f"{what} should be numbers, but it is {type(value).__name__}: {error}") from None


def expect_close(actual: Any, expected: Any, what: str, *, rtol: float = 1e-5, atol: float = 1e-8) -> None:
    """Wrong unless `actual` has `expected`'s shape and values (numpy.allclose with rtol, atol).

    Tuples and lists of tensors are compared element by element, each named `what[i]`."""
    answered(actual, what)
    if isinstance(expected, (tuple, list)) and expected and not np.isscalar(expected[0]):
        expect(isinstance(actual, (tuple, list)), f"{what} should be a tuple of {len(expected)} values, "
                                                  f"but it is {type(actual).__name__}")
        expect(len(actual) == len(expected),
               f"{what} should have {len(expected)} values, but it has {len(actual)}")
        for index, (one_actual, one_expected) in enumerate(zip(actual, expected)):
            expect_close(one_actual, one_expected, f"{what}[{index}]", rtol=rtol, atol=atol)
        return
    actual_array = _as_array(actual, what)
    expected_array = _as_array(expected, "the expected value")
    expect(actual_array.shape == expected_array.shape,
           f"{what} should have shape {list(expected_array.shape)}, but it has {list(actual_array.shape)}")
    if np.allclose(actual_array, expected_array, rtol=rtol, atol=atol, equal_nan=True):
        return
    matches = np.isclose(actual_array, expected_array, rtol=rtol, atol=atol, equal_nan=True)
    difference = np.where(matches, 0.0, np.abs(actual_array - expected_array))
    difference[np.isnan(difference)] = np.inf  # a NaN where a number was expected is as far off as can be
    if actual_array.ndim == 0:
        raise Wrong(f"{what} should be {expected_array.item():.6g}, but it is {actual_array.item():.6g}")
    where = np.unravel_index(np.argmax(difference), difference.shape)
    raise Wrong(f"{what} is off by up to {difference[where]:.3g}: at index {list(map(int, where))} it is "
                f"{actual_array[where]:.6g} where {expected_array[where]:.6g} was expected")


def expect_equal(actual: Any, expected: Any, what: str) -> None:
    """Wrong unless actual == expected (for answers that are names, counts, lists)."""
    answered(actual, what)
    expect(actual == expected, f"{what} should be {expected!r}, but it is {actual!r}")


def _student_line(error: BaseException) -> str:
    """' (in f, line N of its cell: source)' for the innermost frame of the error from a notebook cell."""
    frames = traceback.extract_tb(error.__traceback__)
    cell_frames = [frame for frame in frames if "ipykernel_" in frame.filename or frame.filename.startswith("<")]
    if not cell_frames:
        return ""
    frame = cell_frames[-1]
    source = f": {frame.line.strip()}" if frame.line else ""
    return f" (in {frame.name}, line {frame.lineno} of its cell{source})"


def _not_done(error: BaseException) -> Optional[str]:
    """Why the exercise counts as not attempted, or None if the error is a real one."""
    if isinstance(error, NotDone):
        return str(error)
    if isinstance(error, NotImplementedError):
        return "the exercise cell still raises NotImplementedError: replace that line with your code"
    if isinstance(error, NameError) and traceback.extract_tb(error.__traceback__)[-1].name == "<module>":
        return f"{error}: run the exercise cell above first"  # the check cell itself names what is missing
    return None


@contextlib.contextmanager
def check(title: str) -> Iterator[None]:
    """Runs the body (a check), prints ✓, ○ or ✗ with the title and what is wrong; never raises.

    Only Exceptions are caught: a KeyboardInterrupt still stops the notebook."""
    try:
        yield
    except Exception as error:  # noqa: BLE001  a check cell reports every failure in words
        reason = _not_done(error)
        if reason is not None:
            print(f"{NOT_DONE} {title}: not done yet ({reason}).")
        elif isinstance(error, AssertionError):
            print(f"{WRONG} {title}: not right yet. {error}")
        else:
            print(f"{WRONG} {title}: your code raised {type(error).__name__}: {error}{_student_line(error)}.")
    else:
        print(f"{SOLVED} {title}: correct.")
    sys.stdout.flush()
