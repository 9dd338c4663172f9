"""refgrad.exercises: what a notebook's check cell prints for a solved, an untouched and a wrong exercise."""
import numpy as np
import pytest
import torch

from refgrad.exercises import Wrong, answered, check, expect, expect_close, expect_equal


def printed(capsys, body) -> str:
    with check("Exercise 1"):
        body()
    return capsys.readouterr().out


def stub():
    raise NotImplementedError("your code here")


def test_a_solved_exercise_is_marked_correct(capsys):
    assert printed(capsys, lambda: expect_close(torch.tensor([1.0, 2.0]), [1.0, 2.0], "g")) == \
        "✓ Exercise 1: correct.\n"


@pytest.mark.parametrize("body", [
    stub,
    lambda: expect_close(None, 1.0, "the answer"),
    lambda: expect_equal(..., "MulBackward0", "the node"),
    lambda: answered(None, "the answer"),
], ids=["NotImplementedError", "None", "Ellipsis", "answered"])
def test_an_untouched_stub_is_not_done(capsys, body):
    out = printed(capsys, body)
    assert out.startswith("○ Exercise 1: not done yet (") and out.endswith(").\n"), out


def test_a_name_the_check_cell_uses_but_nobody_defined_is_not_done(capsys):
    out = printed(capsys, lambda: exec("grad_by_hand(1.0)", {}))
    assert out.startswith("○") and "grad_by_hand" in out and "run the exercise cell above first" in out, out


def test_a_name_error_inside_the_students_code_is_their_error(capsys):
    namespace = {}
    exec(compile("def grad_by_hand(x):\n    return undefined_name * x\n", "<cell-7>", "exec"), namespace)
    out = printed(capsys, lambda: namespace["grad_by_hand"](1.0))
    assert out.startswith("✗ Exercise 1: your code raised NameError") and "line 2" in out, out


def test_an_exception_in_the_students_code_names_its_line(capsys):
    namespace = {}
    exec(compile("def f(x):\n    y = x + 1\n    return y / 0\n", "<cell-3>", "exec"), namespace)
    out = printed(capsys, lambda: namespace["f"](1))
    assert out == "✗ Exercise 1: your code raised ZeroDivisionError: division by zero " \
                  "(in f, line 3 of its cell).\n", out


@pytest.mark.parametrize("actual, expected, message", [
    (2.5, 3.0, "g should be 3, but it is 2.5"),
    ([1.0, 2.0], [1.0, 2.0, 3.0], "g should have shape [3], but it has [2]"),
    (np.array([[1.0, 2.0], [3.0, 9.0]]), np.array([[1.0, 2.0], [3.0, 4.0]]),
     "g is off by up to 5: at index [1, 1] it is 9 where 4 was expected"),
    ((1.0,), (torch.ones(2), torch.ones(2)), "g should have 2 values, but it has 1"),
    ((torch.ones(2), torch.zeros(2)), (torch.ones(2), torch.ones(2)), "g[1] is off by up to 1"),
    ("text", 1.0, "g should be numbers, but it is str"),
    ([np.nan], [1.0], "g is off by up to inf: at index [0] it is nan where 1 was expected"),
])
def test_a_wrong_answer_says_what_is_wrong(capsys, actual, expected, message):
    out = printed(capsys, lambda: expect_close(actual, expected, "g"))
    assert out.startswith("✗ Exercise 1: not right yet. ") and message in out, out


def test_expect_and_expect_equal_say_what_they_were_told(capsys):
    assert "3 nodes, not 2" in printed(capsys, lambda: expect(False, "3 nodes, not 2"))
    assert "the node should be 'MulBackward0', but it is 'AddBackward0'" in \
        printed(capsys, lambda: expect_equal("AddBackward0", "MulBackward0", "the node"))


def test_tolerances_are_numpy_allclose_ones():
    expect_close(1.0 + 1e-7, 1.0, "g")
    with pytest.raises(Wrong):
        expect_close(1.0 + 1e-3, 1.0, "g")
    expect_close(1.0 + 1e-3, 1.0, "g", rtol=1e-2)


def test_keyboard_interrupt_is_not_swallowed():
    with pytest.raises(KeyboardInterrupt):
        with check("Exercise 1"):
            raise KeyboardInterrupt
