"""The pybind11 bindings: tensors, programs, the machine, the graph model.

Expected values come from outside the code under test: the gradients written
in examples/programs/*.bwd (from torch 2.13), torch's own repr and autograd,
and hand-worked products.
"""
import pathlib
import random
import re

import numpy as np
import pytest

import refgrad

EXAMPLES = pathlib.Path(__file__).parents[2] / "examples" / "programs"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.bwd"))
DTYPES = [np.bool_, np.int64, np.float32, np.float64]


def values(dtype, shape):
    count = int(np.prod(shape))
    return (np.arange(count) % 3 - 1).astype(dtype).reshape(shape)


# ------------------------------------------------------------------- tensors ---


def layouts(dtype):
    """A plain array, a 0-d one, an empty one and non-contiguous views."""
    base = values(dtype, (4, 6))
    return {
        "contiguous": base,
        "0-d": np.array(values(dtype, (1,))[0]),
        "size-0": np.zeros((3, 0), dtype=dtype),
        "transposed": base.T,
        "strided": base[1:, ::2],
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_round_trip_keeps_dtype_shape_and_values(dtype):
    for layout, array in layouts(dtype).items():
        tensor = refgrad.Tensor.from_numpy(array)
        assert tensor.dtype == np.dtype(dtype).name, layout
        assert tensor.shape == array.shape, layout
        for back in (tensor.numpy(), np.asarray(tensor)):
            assert back.dtype == array.dtype, layout
            assert back.shape == array.shape, layout
            np.testing.assert_array_equal(back, array)


def test_from_numpy_shares_memory_and_strides():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = array[:, 1::2]
    tensor = refgrad.Tensor.from_numpy(view)
    assert tensor.stride() == (4, 2)  # elements, as torch counts them
    assert not tensor.is_contiguous()
    array[0, 1] = 100.0
    assert tensor.numpy()[0, 0] == 100.0
    assert np.shares_memory(tensor.numpy(), array)


def test_numpy_views_of_a_tensor_are_read_only():
    tensor = refgrad.Tensor.from_numpy(np.ones(3))
    with pytest.raises(ValueError):
        tensor.numpy()[0] = 2.0
    with pytest.raises(ValueError):
        np.asarray(tensor)[0] = 2.0


def test_arrays_refgrad_cannot_address_are_copied():
    reversed_view = np.arange(5.0)[::-1]
    np.testing.assert_array_equal(refgrad.Tensor.from_numpy(reversed_view).numpy(), [4, 3, 2, 1, 0])
    big_endian = np.array([1.5, -2.0], dtype=">f4")
    tensor = refgrad.Tensor.from_numpy(big_endian)
    assert tensor.dtype == "float32"
    np.testing.assert_array_equal(tensor.numpy(), [1.5, -2.0])
    zero_d = refgrad.Tensor.from_numpy(np.array(2.5, dtype=">f8"))
    assert zero_d.shape == () and zero_d.item() == 2.5


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.uint16, np.uint32,
                                   np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128])
def test_every_numpy_dtype_refgrad_has_round_trips(dtype):
    values = np.array([0, 1, 2, 3, 100, 7], dtype=np.int64).astype(dtype).reshape(2, 3)
    tensor = refgrad.Tensor.from_numpy(values)
    assert tensor.dtype == np.dtype(dtype).name
    back = tensor.numpy()
    assert back.dtype == values.dtype
    np.testing.assert_array_equal(back, values)


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
def test_dtypes_refgrad_lacks_raise_a_clear_error(dtype):
    with pytest.raises(refgrad.Error, match=r"refgrad has no dtype .*" + np.dtype(dtype).name):
        refgrad.Tensor.from_numpy(np.zeros(2, dtype=dtype))


def test_refgrad_error_is_a_runtime_error():
    assert issubclass(refgrad.Error, RuntimeError)


def test_repr_is_torchs():
    torch = pytest.importorskip("torch")
    for x in (torch.tensor([[1.0, 2.5]], dtype=torch.float64), torch.tensor([1, -2]), torch.tensor(True),
              torch.zeros(2, 0)):
        assert repr(refgrad.Tensor.from_torch(x)) == repr(x)


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    x = torch.arange(12.0, requires_grad=True).reshape(3, 4).t()  # not contiguous, and needs no .detach() by hand
    tensor = refgrad.Tensor.from_torch(x)
    assert tensor.shape == (4, 3)
    with torch.no_grad():
        x[0, 0] = -7.0  # shared memory
    assert tensor.numpy()[0, 0] == -7.0
    back = tensor.torch()
    assert back.dtype == torch.float32
    assert torch.equal(back, x.detach())
    back[0, 0] = 1.0  # a copy: refgrad's tensor is unchanged
    assert tensor.numpy()[0, 0] == -7.0
    # every dtype refgrad has crosses both ways with its bits: bfloat16 and complex32 (which NumPy lacks) too
    for dtype in (torch.bfloat16, torch.float16, torch.int32, torch.uint8, torch.complex32, torch.complex64,
                  torch.complex128):
        values = (torch.arange(6.0) * 0.3 - 1).to(dtype)
        if dtype.is_complex:  # a nonzero imaginary part; complex32 has too few ops of its own in torch for *
            values = (values.to(torch.complex64) * (1 - 2j)).to(dtype)
        crossed = refgrad.Tensor.from_torch(values)
        assert crossed.dtype == str(dtype).removeprefix("torch.")
        bits = torch.int32 if dtype == torch.complex32 else dtype  # torch.equal has no complex32 kernel
        assert crossed.torch().dtype == dtype and torch.equal(crossed.torch().view(bits), values.view(bits))
    assert complex(refgrad.Tensor.from_torch(torch.tensor([0.5 - 2j], dtype=torch.complex32)).item()) == 0.5 - 2j
    with pytest.raises(refgrad.Error, match="refgrad has no dtype 'float8_e5m2'"):
        refgrad.Tensor.from_torch(torch.ones(2, dtype=torch.float8_e5m2))


def test_tensor_keeps_its_numpy_memory_alive():
    tensor = refgrad.Tensor.from_numpy(np.arange(4.0) * 2)  # the array has no other owner
    np.testing.assert_array_equal(tensor.numpy(), [0, 2, 4, 6])
    view = tensor.numpy()
    del tensor
    np.testing.assert_array_equal(view, [0, 2, 4, 6])


# ------------------------------------------------------------------ programs ---


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_examples_parse_print_and_verify(path, tmp_path):
    program = refgrad.Program.parse(path.read_text(), str(path))
    assert refgrad.Program.parse(str(program)) == program
    assert [d for d in program.verify() if d.severity == "error"] == []
    assert refgrad.Program.from_bytecode(program.to_bytecode()) == program
    for suffix in (".bwd", ".rgbc", ".safetensors"):
        copy = tmp_path / (path.stem + suffix)
        program.save(str(copy))
        assert refgrad.Program.load(str(copy)) == program, suffix


def test_program_declarations_and_instructions():
    program = refgrad.Program.load(str(EXAMPLES / "mul.bwd"))
    assert program.name == "mul"
    assert [leaf.name for leaf in program.leaves] == ["x", "y"]
    assert str(program.leaves[0].type) == "f32[3]"
    np.testing.assert_array_equal(program.saved[1].value.numpy(), [4, 5, 6])
    mul = program.code[1]
    assert (mul.op, mul.node, mul.results, mul.operands) == ("call", "MulBackward0", ["1", "2"], ["0"])
    assert mul.text.startswith("%1, %2 = MulBackward0 %0")
    assert mul.attrs == {"other": "$y", "other_scalar_type": "float32", "self": "$x", "self_scalar_type": "float32"}
    addmm = refgrad.Program.load(str(EXAMPLES / "mlp.bwd")).code[11]
    assert (addmm.attrs["mat2"], addmm.attrs["alpha"], addmm.attrs["mat1_sym_sizes"]) == (None, 1, [2, 3])
    assert addmm.need == [True, False, True] and addmm.results == ["13", None, "14"]
    assert mul.location.line == 18
    assert len(program) == 5
    validate = program.code[2]  # %3, %4 = validate %1, %2 : f32[3], f32[3]
    assert [(m.dtype, m.shape) for m in validate.metadata] == [("float32", [3]), ("float32", [3])]
    assert mul.metadata == []
    skipped = refgrad.Program.load(str(EXAMPLES / "leaf_twice.bwd")).code[6]  # %8, _ = validate %7, none
    assert [None if m is None else str(m) for m in skipped.metadata] == ["f32[3]", None]


def test_parse_errors_name_file_line_and_column():
    text = "program p\n  grad %g : f32[3]\ncode\n  %0 = NoSuchBackward0 %g\n"
    with pytest.raises(refgrad.Error) as raised:
        refgrad.Program.parse(text, "bad.bwd")
    assert re.match(r"bad\.bwd:4:\d+: error: ", str(raised.value)), str(raised.value)


def test_verify_reports_severity_message_and_location():
    text = "program p\n  grad %g : f32[3]\ncode\n  %0 = validate %g : f32[3]\n  %1 = add %0, %9\n"
    program = refgrad.Program.parse(text, "p.bwd")
    errors = [d for d in program.verify() if d.severity == "error"]
    assert errors, "a register used before it is defined"
    assert any("%9" in d.message and d.pc == 1 and d.location.line == 5 for d in errors), [str(d) for d in errors]
    assert str(errors[0]).startswith("p.bwd:")
    with pytest.raises(refgrad.Error, match="%9"):
        program.check()


def test_bundle_round_trip_keeps_tensors():
    program = refgrad.Program.load(str(EXAMPLES / "mul.bwd"))
    bundle = refgrad.Bundle(program, {"%g": np.array([2.0, 0.0, 1.0], dtype=np.float32)})
    again = refgrad.Bundle.from_bytes(bundle.to_bytes())
    assert again.program == program
    np.testing.assert_array_equal(again.tensors["%g"].numpy(), [2, 0, 1])
    grads = refgrad.run_program(again)
    np.testing.assert_allclose(grads["@x"].numpy(), [8, 0, 6])  # g * y


def test_node_listing():
    names = [schema.name for schema in refgrad.nodes()]
    assert names == sorted(names)
    assert "MulBackward0" in names
    mul = refgrad.node("MulBackward0")
    assert mul.inputs == ["self", "other"]
    assert mul.num_grads == 1
    # torch 2.13: MulBackward0 exposes _saved_self and _saved_other; the scalar types are hidden fields.
    assert {(f.name, f.kind, f.exposed) for f in mul.saved} == {
        ("other", "tensor", True), ("other_scalar_type", "dtype", False),
        ("self", "tensor", True), ("self_scalar_type", "dtype", False)}
    with pytest.raises(refgrad.Error, match="NoSuchBackward0"):
        refgrad.node("NoSuchBackward0")


def test_call_node_reads_saved_fields_by_schema():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    y = np.array([4.0, 5.0, 6.0], dtype=np.float32)
    saved = {"self": x, "other": y, "self_scalar_type": "float32", "other_scalar_type": "f32"}
    grad_self, grad_other = refgrad.call_node("MulBackward0", [np.ones(3, dtype=np.float32)], [True, True], saved)
    np.testing.assert_array_equal(grad_self.numpy(), y)
    np.testing.assert_array_equal(grad_other.numpy(), x)
    with pytest.raises(refgrad.Error, match="saved field 'self_scalar_type'.*3"):
        refgrad.call_node("MulBackward0", [np.ones(3, dtype=np.float32)], [True, True], {**saved, "self_scalar_type": 3})
    with pytest.raises(refgrad.Error, match="has no saved field 'alpha'"):
        refgrad.call_node("MulBackward0", [np.ones(3, dtype=np.float32)], [True, True], {**saved, "alpha": 1})


def test_python_values_that_raise_while_read_propagate_their_exception():
    class BadNumber:
        def __index__(self):
            raise ZeroDivisionError("bad index")

        def __float__(self):
            raise ZeroDivisionError("bad float")

    grad = np.ones(3, dtype=np.float32)
    with pytest.raises(ZeroDivisionError, match="bad index"):
        refgrad.call_node("SumBackward0", [grad], [True], {"self_sym_sizes": [BadNumber()]})
    with pytest.raises(ZeroDivisionError, match="bad float"):
        refgrad.call_node("NativeDropoutBackward0", [grad], [True], {"p": BadNumber()})


# ------------------------------------------------------------------- machine ---

# From the comments of examples/programs/mlp.bwd (torch 2.13's .grad values).
MLP_GRADS = {
    "b2": [2, 2],
    "W2": [[0, 0, 5, 5], [0, 0, 5, 5]],
    "b1": [0, 0, -1, 2],
    "W1": [[0, 0, 0], [0, 0, 0], [0, -1, -2], [0, 2, 4]],
}


def test_machine_steps_mlp_to_the_end():
    machine = refgrad.Machine(refgrad.load(str(EXAMPLES / "mlp.bwd")), trace=True)
    steps = 0
    while not machine.finished:
        assert machine.pc == steps
        machine.step()
        steps += 1
    assert steps == len(machine) == 17
    for leaf, expected in MLP_GRADS.items():
        np.testing.assert_allclose(machine.leaf_grad(leaf).numpy(), expected, err_msg=leaf)
    assert [entry.pc for entry in machine.trace] == list(range(17))
    assert machine.trace[1].outputs == ["f32[2,2]"]
    with pytest.raises(refgrad.Error):
        machine.step()  # past the end


def test_machine_stops_at_a_node_breakpoint_and_shows_registers():
    machine = refgrad.Machine(refgrad.load(str(EXAMPLES / "mlp.bwd")), keep_values=True)
    assert machine.run_until(node="AddmmBackward0") == "breakpoint"
    assert machine.pc == 3
    assert machine.instruction_text(3).startswith("%3, %4, %5 = AddmmBackward0 %2")
    np.testing.assert_array_equal(machine.register_value("2").numpy(), np.ones((2, 2)))  # loss.sum()'s grad
    assert machine.register_value("3") is None  # not computed yet
    assert machine.run_until(node="AddmmBackward0") == "breakpoint"  # resumes, stops at the second one
    assert machine.pc == 11
    assert "3" in machine.live_registers()
    assert machine.run_until(pc=[13]) == "breakpoint" and machine.pc == 13
    assert machine.run_until(stop_before=lambda m: m.pc == 15) == "breakpoint" and machine.pc == 15
    assert machine.run_until() == "finished"
    np.testing.assert_allclose(machine.leaf_grad("W1").numpy(), MLP_GRADS["W1"])
    machine.reset()
    assert machine.pc == 0 and machine.leaf_grad("W1") is None


def test_run_until_stops_after_a_non_finite_value():
    bundle = refgrad.load(str(EXAMPLES / "mul.bwd"))
    machine = refgrad.Machine(bundle)
    machine.set_grad("g", np.array([1.0, np.inf, 2.0], dtype=np.float32))
    assert machine.run_until(non_finite=True) == "non_finite"
    assert machine.pc == 1  # after the root's validate, the first to hold the inf
    assert np.isinf(machine.register_value("0").numpy()[1])


def test_check_finite_raises_at_the_first_non_finite_value():
    machine = refgrad.Machine(refgrad.load(str(EXAMPLES / "mul.bwd")), check_finite=True)
    machine.set_grad("g", np.array([1.0, np.nan, 2.0], dtype=np.float32))
    with pytest.raises(refgrad.Error, match="instruction 0 .*non-finite value in %0"):
        machine.run()
    assert machine.pc == 0


def test_memory_limit_refuses_a_larger_tensor_naming_the_instruction():
    program = refgrad.Program.parse(
        "program big\n  grad %g : f32[] = 1.0\n  leaf @x : f32[1000,1000]\ncode\n  %0 = validate %g : f32[]\n"
        "  %1 = SumBackward0 %0  self_sym_sizes=[1000,1000]\n  %2 = validate %1 : f32[1000,1000]\n"
        "  accumulate_grad @x %2\n"
    )
    assert refgrad.default_memory_limit() > 4_000_000
    machine = refgrad.Machine(program, memory_limit=1 << 20)
    with pytest.raises(refgrad.Error, match=r"instruction 1 .*shape \[1000,1000\] would need 4000000 bytes .*"
                                            r"more than the memory limit of 1048576 bytes"):
        machine.run()
    assert machine.pc == 1
    assert refgrad.Machine(program).run() is None  # the default limit is this machine's memory
    with pytest.raises(refgrad.Error, match="memory limit"):
        refgrad.run_program(program, memory_limit=1000)


def test_set_grad_checks_the_declared_type():
    machine = refgrad.Machine(refgrad.load(str(EXAMPLES / "mul.bwd")))
    with pytest.raises(refgrad.Error, match="f32\\[3\\]"):
        machine.set_grad("g", np.ones(4, dtype=np.float32))


def leaf_twice():
    return refgrad.load(str(EXAMPLES / "leaf_twice.bwd"))


def test_python_hook_scales_a_grad():
    calls = []
    hooks = {
        "double": lambda grad: grad.numpy() * 3,  # a NumPy array is accepted as the new grad
        "log": lambda leaf, grad: calls.append((leaf, grad.numpy().copy())),
    }
    machine = refgrad.Machine(leaf_twice(), hooks=hooks)
    machine.run()
    # w.grad = 0.5 + 3 * (x + 1) with x = [1, -2, 4] (the program's comment, with 3 for its 2).
    np.testing.assert_allclose(machine.leaf_grad("w").numpy(), [6.5, -2.5, 15.5])
    assert len(calls) == 1 and calls[0][0] == "w"
    np.testing.assert_allclose(calls[0][1], [6.5, -2.5, 15.5])
    # None leaves the grad unchanged: 0.5 + (x + 1).
    unchanged = refgrad.run_program(leaf_twice(), hooks={"double": lambda grad: None, "log": lambda leaf, grad: None})
    np.testing.assert_allclose(unchanged["@w"].numpy(), [2.5, -0.5, 5.5])


def test_post_acc_grad_hook_may_replace_or_clear_the_leafs_grad():
    double = {"double": lambda grad: None}  # w.grad = 0.5 + (x + 1) = [2.5, -0.5, 5.5] before the log hook
    replaced = refgrad.run_program(leaf_twice(), hooks={**double, "log": lambda leaf, grad: grad.numpy() * 2})
    np.testing.assert_allclose(replaced["@w"].numpy(), [5.0, -1.0, 11.0])
    cleared = refgrad.Machine(leaf_twice(), hooks={**double, "log": lambda leaf, grad: refgrad.NO_GRAD})
    cleared.run()
    assert cleared.leaf_grad("w") is None and repr(refgrad.NO_GRAD) == "refgrad.NO_GRAD"
    wrong = refgrad.Machine(leaf_twice(), hooks={**double, "log": lambda leaf, grad: np.ones(2, np.float32)})
    with pytest.raises(refgrad.Error, match=r"post_acc_grad hook &log set @w.grad"):
        wrong.run()


def test_python_hook_that_raises_becomes_refgrad_error():
    def broken(grad):
        raise ValueError("boom")

    machine = refgrad.Machine(leaf_twice(), hooks={"double": broken, "log": lambda leaf, grad: None})
    with pytest.raises(refgrad.Error, match=r"tensor_pre hook &double raised ValueError: boom") as raised:
        machine.run()
    assert isinstance(raised.value.__cause__, ValueError)
    assert machine.pc == 8  # stopped before the hook instruction, state unchanged
    with pytest.raises(refgrad.Error, match="boom"):
        machine.step()


def test_hook_results_of_the_wrong_kind_raise():
    machine = refgrad.Machine(leaf_twice(), hooks={"double": lambda grad: "not a tensor", "log": print})
    with pytest.raises(refgrad.Error, match="hook &double"):
        machine.run()
    with pytest.raises(refgrad.Error, match="declares no hook &nope"):
        refgrad.Machine(leaf_twice(), hooks={"nope": print})
    missing = refgrad.Machine(leaf_twice())
    with pytest.raises(refgrad.Error, match="the host has no"):
        missing.run()


PRE_POST_HOOKS = """
program hooks
  grad  %g : f32[3] = [1.0, 1.0, 2.0]
  saved $x : f32[3] = [1.0, 2.0, 3.0]
  saved $y : f32[3] = [4.0, 5.0, 6.0]
  leaf  @x : f32[3]
  leaf  @y : f32[3]
  hook  &times10 : pre
  hook  &minus_grad_output : post
code
  %0 = validate %g : f32[3]
  %1 = hook &times10 %0
  %2, %3 = MulBackward0 %1  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %4, %5 = hook &minus_grad_output %2, %3, %1
  %6, %7 = validate %4, %5 : f32[3], f32[3]
  accumulate_grad @x %6
  accumulate_grad @y %7
"""


def test_pre_and_post_hooks_see_and_replace_a_nodes_grads():
    seen = {}

    def times10(grad_outputs):
        return [grad_outputs[0].numpy() * 10]

    def minus_grad_output(grad_inputs, grad_outputs):
        seen["counts"] = (len(grad_inputs), len(grad_outputs))
        return [grad_inputs[0].numpy() - grad_outputs[0].numpy(), grad_inputs[1]]

    program = refgrad.Program.parse(PRE_POST_HOOKS)
    grads = refgrad.run_program(program, hooks={"times10": times10, "minus_grad_output": minus_grad_output})
    assert seen["counts"] == (2, 1)
    np.testing.assert_allclose(grads["@x"].numpy(), [30, 40, 100])  # 10 g * y - 10 g
    np.testing.assert_allclose(grads["@y"].numpy(), [10, 20, 60])  # 10 g * x
    wrong_count = {"times10": lambda grads: [], "minus_grad_output": lambda inputs, outputs: None}
    with pytest.raises(refgrad.Error, match="pre hook &times10 returned 0 gradients, expected 1"):
        refgrad.run_program(program, hooks=wrong_count)


FUNCTION = """
program function
  grad     %g : f32[2] = [1.0, 2.0]
  saved    $x : f32[2] = [3.0, 4.0]
  function &Scale
  output   ^x : f32[2]
code
  %0 = validate %g : f32[2]
  %1 = call_backward &Scale %0  saved=[$x]
  %2 = validate %1 : f32[2]
  output ^x %2
"""


def test_autograd_function_backward_is_a_python_callable():
    calls = []

    def scale(saved, need, grads):
        calls.append((len(saved), need))
        return grads[0].numpy() * saved[0].numpy()  # one input: a single tensor, as backward() returns

    machine = refgrad.Machine(refgrad.bind(refgrad.Program.parse(FUNCTION)), functions={"Scale": scale})
    assert machine.output("x") is None
    machine.run()
    assert calls == [(1, [True])]
    np.testing.assert_allclose(machine.output("x").numpy(), [3, 8])
    two = refgrad.Machine(refgrad.Program.parse(FUNCTION), functions={"Scale": lambda saved, need, grads: (grads[0], grads[0])})
    with pytest.raises(refgrad.Error, match="incorrect number of gradients"):
        two.run()


def test_hook_cannot_drive_its_own_machine():
    machine = None

    def reentrant(grad):
        machine.step()

    machine = refgrad.Machine(leaf_twice(), hooks={"double": reentrant, "log": lambda leaf, grad: None})
    with pytest.raises(refgrad.Error, match="called from inside"):
        machine.run()


def test_promote_to_float64():
    promoted = refgrad.promote_to_float64(refgrad.load(str(EXAMPLES / "mlp.bwd")))
    assert promoted.program.leaves[0].type.dtype == "float64"
    grads = refgrad.run_program(promoted)
    assert grads["@W1"].dtype == "float64"
    np.testing.assert_allclose(grads["@W1"].numpy(), MLP_GRADS["W1"])


# --------------------------------------------------------------------- graph ---


def mul_graph(x, y, g):
    """z = x * y; z.backward(g), built by hand as the capture would."""
    graph = refgrad.Graph()
    mul = graph.add_node(refgrad.GraphNode(
        name="MulBackward0",
        saved={"self": x, "other": y, "self_scalar_type": "float32", "other_scalar_type": "float32"},
        next_edges=[refgrad.Edge(1, 0), refgrad.Edge(2, 0)],
        input_metadata=[refgrad.InputMetadata("float32", [3])]))
    graph.add_leaf("x", refgrad.TensorType("float32", [3]))
    graph.add_leaf("y", refgrad.TensorType("float32", [3]))
    graph.roots.append(refgrad.Edge(mul, 0))
    graph.root_grads.append(("g", g))
    return graph


def test_hand_built_graph_functionalizes_and_runs():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    y = np.array([4.0, 5.0, 6.0], dtype=np.float32)
    g = np.array([1.0, 0.5, 2.0], dtype=np.float32)
    bundle, node_of_instruction = refgrad.functionalize(mul_graph(x, y, g))
    # The engine's order, worked out by hand (tests/frontends/test_functionalize.cpp has the same graph).
    assert [instr.text for instr in bundle.program.code] == [
        "%0 = validate %g : f32[3]",
        "%1, %2 = MulBackward0 %0  other=$n0_other other_scalar_type=f32 self=$n0_self self_scalar_type=f32",
        "%3, %4 = validate %1, %2 : f32[3], f32[3]",
        "accumulate_grad @x %3",
        "accumulate_grad @y %4",
    ]
    assert node_of_instruction == [-1, 0, -1, 1, 2]
    grads = refgrad.run_program(bundle)
    np.testing.assert_allclose(grads["@x"].numpy(), g * y)
    np.testing.assert_allclose(grads["@y"].numpy(), g * x)


def test_graph_from_torch_tensors_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    y = torch.tensor([3.0, 0.25, -1.0], requires_grad=True)
    g = torch.tensor([1.0, 2.0, -1.0])
    (x * y).backward(g)
    options = refgrad.FunctionalizeOptions(order=refgrad.Order.COMPILED_AUTOGRAD, inline_limit=0)
    bundle, _ = refgrad.functionalize(mul_graph(x.detach(), y.detach(), g), options)
    assert set(bundle.tensors) >= {"$n0_self", "$n0_other"}  # inline_limit 0: every saved tensor in the bundle
    grads = refgrad.run_program(bundle)
    assert torch.equal(grads["@x"].torch(), x.grad)
    assert torch.equal(grads["@y"].torch(), y.grad)


def test_graph_hooks_become_program_hooks_run_by_python():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    y = np.array([4.0, 5.0, 6.0], dtype=np.float32)
    g = np.ones(3, dtype=np.float32)
    graph = mul_graph(x, y, g)
    accumulate_x = graph.nodes[1]
    accumulate_x.tensor_pre_hooks = {0: ["double"]}  # x.register_hook(double)
    accumulate_x.post_acc_grad_hooks = ["log"]  # x.register_post_accumulate_grad_hook(log)
    bundle, _ = refgrad.functionalize(graph)
    assert {(hook.name, hook.kind) for hook in bundle.program.hooks} == {("double", "tensor_pre"), ("log", "post_acc_grad")}
    logged = []
    grads = refgrad.run_program(bundle, hooks={"double": lambda grad: grad.numpy() * 2,
                                               "log": lambda leaf, grad: logged.append(leaf)})
    np.testing.assert_allclose(grads["@x"].numpy(), 2 * y)  # the hook doubled g * y
    np.testing.assert_allclose(grads["@y"].numpy(), x)
    assert logged == ["x"]


def test_graph_errors_name_the_node_and_field():
    x = np.ones(3, dtype=np.float32)
    graph = mul_graph(x, x, x)
    graph.nodes[0].saved["self_scalar_type"] = 3
    with pytest.raises(refgrad.Error, match=r"Graph.nodes\[0\] \(MulBackward0\): saved field 'self_scalar_type'"):
        refgrad.functionalize(graph)
    graph = mul_graph(x, x, x)
    graph.nodes[0].name = "NoSuchBackward0"
    with pytest.raises(refgrad.Error, match="refgrad has no node 'NoSuchBackward0'"):
        refgrad.functionalize(graph)
    graph = mul_graph(x, x, x)
    graph.nodes[0].next_edges = ["not an edge"]
    with pytest.raises(refgrad.Error, match="next_edges"):
        refgrad.functionalize(graph)
    graph.nodes[0].next_edges = [(1, 0), (2,)]
    with pytest.raises(refgrad.Error, match=r"next_edges\[1\]: expected an Edge or a \(node, input_nr\) pair"):
        refgrad.functionalize(graph)


def test_saved_field_kinds_read_from_python_values():
    # Each kind's Python spelling, through nodes that save it (their schemas say the kinds).
    grad = np.ones((2, 3), dtype=np.float32)
    (expanded,) = refgrad.call_node("ExpandBackward0", [grad], [True], {"self_sym_sizes": (1, 3)})
    np.testing.assert_array_equal(expanded.numpy(), [[2, 2, 2]])
    (copied,) = refgrad.call_node("ToCopyBackward0", [grad], [True], {
        "self_options": refgrad.TensorOptions(dtype="float64", device="cpu", layout="strided")})
    assert copied.dtype == "float64"
    (copied,) = refgrad.call_node("ToCopyBackward0", [grad], [True], {"self_options": {"dtype": "float64"}})
    assert copied.dtype == "float64"


# -------------------------------------------------------------------- robust ---


def valid_inputs():
    program = refgrad.Program.load(str(EXAMPLES / "mlp.bwd"))
    return {
        "bundle": refgrad.Bundle(program).to_bytes(),
        "bytecode": program.to_bytecode(),
        "text": str(program).encode(),
    }


LOADERS = {
    "bundle": refgrad.Bundle.from_bytes,
    "bytecode": refgrad.Program.from_bytecode,
    "safetensors": refgrad.read_safetensors,
    "text": lambda data: refgrad.Program.parse(data.decode("utf-8", errors="replace")),
}


def mutations(rng, data, count):
    for _ in range(count):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        yield bytes(mutated[: rng.randint(0, len(mutated))] if rng.random() < 0.2 else mutated)


def test_random_and_mutated_bytes_raise_refgrad_error_never_crash(tmp_path):
    rng = random.Random(7)
    valid = valid_inputs()
    for name, load in LOADERS.items():
        seeds = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))) for _ in range(100)]
        seeds += list(mutations(rng, valid.get(name, valid["bundle"]), 300))
        for data in seeds:
            try:
                load(data)
            except refgrad.Error:
                pass
    # Mutated example programs that still parse and verify must run or raise refgrad.Error.
    texts = [path.read_text() for path in EXAMPLE_FILES]
    tokens = ["0", "-1", "[2,2]", "f64", "none", "_", "%0", "%3", "$x", "@w", "[]", "need=[0,0]", "nan", "[1,0,1]"]
    for _ in range(300):
        words = rng.choice(texts).split(" ")
        for _ in range(rng.randint(1, 4)):
            words[rng.randrange(len(words))] = rng.choice(tokens)
        try:
            program = refgrad.Program.parse(" ".join(words))
            program.check()
            refgrad.run_program(program, hooks={hook.name: lambda *args: None for hook in program.hooks})
        except refgrad.Error:
            pass
    for suffix in (".bwd", ".rgbc", ".safetensors"):
        path = tmp_path / ("random" + suffix)
        path.write_bytes(bytes(rng.randrange(256) for _ in range(64)))
        with pytest.raises(refgrad.Error):
            refgrad.load(str(path))
    with pytest.raises(refgrad.Error):
        refgrad.load(str(tmp_path / "missing.bwd"))
