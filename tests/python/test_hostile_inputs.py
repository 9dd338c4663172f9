"""Property tests: whatever fields, grads and tensors a node call or a program gets, refgrad answers
with a result or with refgrad.Error, never with another exception or a dead interpreter (issue
"Running a program never crashes"; fuzz/fuzz_run.cpp does the same from C++ under the sanitizers).

Hypothesis draws a node from the registry, a value for each of its saved fields from the field's
kind (and sometimes of another kind, or None where None is not allowed), grads and tensors of every
NumPy dtype (refgrad's four and some it does not have), shapes with size-0 dims, 0-d arrays, views,
NaN and Inf, and huge or negative ints. Each example calls the node with refgrad.call_node and runs a
program around it with refgrad.Machine.

`make test` runs a fixed number of examples with a fixed seed (REFGRAD_HYPOTHESIS_EXAMPLES, 150 per
test); `make fuzz` explores with REFGRAD_HYPOTHESIS_EXPLORE=1 and more examples.
"""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refgrad

EXAMPLES = int(os.environ.get("REFGRAD_HYPOTHESIS_EXAMPLES", "150"))
EXPLORE = os.environ.get("REFGRAD_HYPOTHESIS_EXPLORE", "") not in ("", "0")
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=not EXPLORE,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# Far below the machine's memory: a case whose sizes ask for more must be refused with refgrad.Error.
MEMORY_LIMIT = 16 << 20

NODES = refgrad.nodes()
REFGRAD_DTYPES = [np.float32, np.float64, np.int64, np.bool_]
OTHER_DTYPES = [np.float16, np.int32, np.uint8, np.complex64]
SHORT_DTYPE = {np.float32: "f32", np.float64: "f64", np.int64: "i64", np.bool_: "b8"}
HUGE_INTS = [2**63 - 1, -(2**63), 2**40, 2**31, -(2**40)]

# ------------------------------------------------------------------ values ---

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4)
floats = st.one_of(
    st.floats(-4, 4, width=32),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 1e30, 1e-30]),
)
small_ints = st.integers(-5, 6)
ints = st.one_of(small_ints, small_ints, small_ints, st.sampled_from(HUGE_INTS))


@st.composite
def arrays(draw, dtypes=REFGRAD_DTYPES, foreign=False):
    """A NumPy array of one of `dtypes` (``foreign``: sometimes one refgrad lacks), sometimes a view."""
    dtype = draw(st.sampled_from(dtypes + OTHER_DTYPES if foreign and draw(st.integers(0, 3)) == 0 else dtypes))
    shape = tuple(draw(shapes))
    count = int(np.prod(shape))
    if dtype == np.bool_:
        flat = np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=np.bool_)
    elif np.issubdtype(dtype, np.integer):
        flat = np.array(draw(st.lists(st.integers(-3, 6), min_size=count, max_size=count)), dtype=np.int64)
    else:
        flat = np.array(draw(st.lists(floats, min_size=count, max_size=count)), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # 1e30 in float16 is inf, as intended
        array = flat.astype(dtype).reshape(shape)
    view = draw(st.integers(0, 7))
    if view == 0 and array.ndim >= 2:
        return array.T  # transposed
    if view == 1 and array.ndim >= 1:
        return array[::2]  # gapped
    if view == 2 and array.ndim >= 1:
        return array[::-1]  # negative strides
    if view == 3:
        return np.broadcast_to(array, (2, *array.shape))  # stride 0, read-only
    return array


def field_values(field, hostile):
    """Values for one saved field of its kind; ``hostile``: sometimes None, of another kind, or a
    tensor of a dtype refgrad lacks."""
    kind = field.kind
    by_kind = {
        "tensor": arrays(foreign=hostile),
        "tensor_list": st.lists(arrays(foreign=hostile), max_size=3),
        "optional_tensor_list": st.lists(st.one_of(st.none(), arrays([np.int64, np.bool_], hostile)), max_size=4),
        "int": ints,
        "int_list": st.lists(ints, max_size=5),
        "sizes": st.lists(ints, max_size=5),
        "float": floats,
        "bool": st.booleans(),
        "scalar": st.one_of(small_ints, floats, st.booleans()),
        "string": st.sampled_from(["none", "tanh", "floor", "trunc", "sum", "mean", "", "\x00"]),
        "dtype": st.sampled_from(["float32", "float64", "int64", "bool", "f32"]
                                 + (["bfloat16", "complex64"] if hostile else [])),
        "layout": st.sampled_from(["strided", "strided", "sparse_coo", "mkldnn"] + (["nope"] if hostile else [])),
        "tensor_options": st.builds(
            refgrad.TensorOptions, dtype=st.one_of(st.none(), st.sampled_from(["float32", "float64", "int64"]))
        ),
        "tensor_geometry": st.builds(
            refgrad.TensorGeometry,
            sizes=st.lists(ints, max_size=4),
            strides=st.lists(ints, max_size=4),
            storage_offset=st.integers(-3, 50),
        ),
        "type_and_size": st.builds(
            refgrad.TypeAndSize,
            sizes=st.lists(small_ints, max_size=4),
            options=st.builds(refgrad.TensorOptions, dtype=st.sampled_from(["float32", "float64"])),
        ),
        "dtype_list": st.lists(st.sampled_from(["float32", "float64", "int64"]), max_size=4),
        "sizes_list": st.lists(st.lists(small_ints, max_size=4), max_size=4),
    }
    if not hostile:
        return by_kind[kind]
    too_big = st.just(2**64)  # not an int64
    wrong_kind = st.one_of(st.none(), st.text(max_size=3), st.lists(st.none(), max_size=2), too_big, st.lists(too_big))
    return st.one_of(by_kind[kind], by_kind[kind], by_kind[kind], wrong_kind)


@st.composite
def node_calls(draw):
    """(node, grads, need, saved fields by name). One example in five is hostile: fields left out or
    of the wrong kind, tensors of dtypes refgrad lacks, grad counts and need masks that do not fit; the
    others hold values of the right kinds, so that most reach the node's function."""
    node = draw(st.sampled_from(NODES))
    hostile = draw(st.integers(0, 4)) == 0
    saved = {}
    for field in node.saved:
        if hostile and draw(st.integers(0, 9)) == 0:
            continue  # a field left out
        saved[field.name] = draw(field_values(field, hostile))
    grad_count = node.num_grads if node.num_grads is not None else draw(st.integers(1, 4))
    if hostile and draw(st.integers(0, 4)) == 0:
        grad_count += 1
    grads = [None if draw(st.integers(0, 6)) == 0 else draw(arrays(foreign=hostile)) for _ in range(grad_count)]
    need_length = len(node.inputs) + (1 if hostile and draw(st.integers(0, 4)) == 0 else 0)
    need = draw(st.lists(st.booleans(), min_size=need_length, max_size=need_length))
    return node, grads, need, saved


def expect_only_refgrad_errors(action):
    """Runs `action`; only refgrad.Error (exactly, not another RuntimeError) may come out of it."""
    try:
        action()
    except refgrad.Error:
        pass
    except Exception as error:  # noqa: BLE001 - any other exception is the failure this test looks for
        pytest.fail(f"{type(error).__name__} (not refgrad.Error): {error}")


# ------------------------------------------------------------------- tests ---


@SETTINGS
@given(node_calls())
def test_call_node_raises_only_refgrad_errors(call):
    node, grads, need, saved = call
    expect_only_refgrad_errors(lambda: refgrad.call_node(node.name, grads, need, saved))


def spell(value, kind, tensors, program_saved):
    """A field value as program text writes it; tensors become `saved` declarations."""
    if value is None:
        return "none"
    if isinstance(value, np.ndarray):
        name = f"s{len(program_saved)}"
        array = np.ascontiguousarray(value)
        short = SHORT_DTYPE.get(array.dtype.type)
        if short is None:  # a dtype refgrad lacks: declared as f32, so binding must refuse the value
            short = "f32"
        program_saved.append(f"  saved ${name} : {short}[{','.join(map(str, array.shape))}]")
        tensors["$" + name] = array
        return "$" + name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        if kind in ("dtype",):
            return {"float32": "f32", "float64": "f64", "int64": "i64", "bool": "b8"}.get(value, value)
        if kind == "layout":
            return value
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", "\\0") + '"'
    if isinstance(value, list):
        element_kind = {"tensor_list": "tensor", "optional_tensor_list": "tensor", "dtype_list": "dtype"}.get(kind, kind)
        return "[" + ", ".join(spell(v, element_kind, tensors, program_saved) for v in value) + "]"
    if isinstance(value, refgrad.TensorOptions):
        return "{" + (f"dtype={spell(value.dtype, 'dtype', tensors, program_saved)}" if value.dtype else "") + "}"
    if isinstance(value, refgrad.TensorGeometry):
        return (f"{{sizes={spell(list(value.sizes), 'sizes', tensors, program_saved)}, "
                f"strides={spell(list(value.strides), 'sizes', tensors, program_saved)}, "
                f"storage_offset={value.storage_offset}}}")
    if isinstance(value, refgrad.TypeAndSize):
        return (f"{{sizes={spell(list(value.sizes), 'sizes', tensors, program_saved)}, "
                f"options={spell(value.options, 'tensor_options', tensors, program_saved)}}}")
    raise AssertionError(f"no spelling for {value!r}")


@SETTINGS
@given(node_calls(), st.sampled_from(["float32", "float64"]))
def test_machine_run_raises_only_refgrad_errors(call, precision):
    """The same calls as a program: grads declared and validated, results accumulated into leaves."""
    node, grads, need, saved = call
    tensors, saved_lines = {}, []
    fields = " ".join(
        f"{field.name}={spell(saved[field.name], field.kind, tensors, saved_lines)}"
        for field in node.saved
        if field.name in saved
    )
    grad_lines, operands = [], []
    for i, grad in enumerate(grads):
        if grad is None:
            operands.append("none")
            continue
        array = np.ascontiguousarray(grad)
        short = SHORT_DTYPE.get(array.dtype.type, "f32")
        grad_lines.append(f"  grad %g{i} : {short}[{','.join(map(str, array.shape))}]")
        tensors[f"%g{i}"] = array
        operands.append(f"%g{i}")
    results = [f"%r{i}" if bit else "_" for i, bit in enumerate(need[: len(node.inputs)])]
    code = [f"  {', '.join(results)} = {node.name} {', '.join(operands)}  {fields} need=[{','.join(str(int(b)) for b in need)}]"]
    leaves = []
    for i, result in enumerate(results):
        if result != "_":
            leaves.append(f"  leaf @l{i} : f32[]")
            code.append(f"  accumulate_grad @l{i} {result}")
    text = "\n".join(["program hostile", *grad_lines, *saved_lines, *leaves, "code", *code]) + "\n"

    def run():
        program = refgrad.Program.parse(text)
        if precision == "float64":
            program = refgrad.promote_to_float64(program)
        machine = refgrad.Machine(program, tensors=tensors, memory_limit=MEMORY_LIMIT)
        machine.run()

    expect_only_refgrad_errors(run)


def test_the_strategies_reach_every_node():
    """The property tests cannot fail for a node they never draw: every node is drawable."""
    assert len({node.name for node in NODES}) == len(NODES) > 150
