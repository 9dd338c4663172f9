"""PyTorch's OpInfo database (op_db) as the tests use it: which ops, how each is named, and a sample as a
function of the tensors that require grad.

Shared by test_opinfo.py (the conformance harness), tools/conformance.py and test_rule_calibration.py.
"""
from __future__ import annotations

import zlib
from typing import Callable, Iterator

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import is_iterable_of_tensors

# The dtypes the harness tries, in the order its table prints them.
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128)


def op_id(op) -> str:
    """An op's name with its variant: "div.floor_rounding", "nn.functional.conv2d". op_db keys its own
    xfail lists by (name, variant_test_name); joined here so one string names one OpInfo (checked below)."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def autograd_ops() -> list:
    """Every OpInfo that supports autograd, sorted by op_id."""
    ops = sorted((op for op in op_db if op.supports_autograd), key=op_id)
    ids = [op_id(op) for op in ops]
    assert len(ids) == len(set(ids)), "op_id must name one OpInfo"
    return ops


def first_variant(name: str):
    """The first OpInfo named ``name`` (div's is no_rounding_mode): what ``torch.<name>`` means."""
    return next(op for op in op_db if op.name == name)


def backward_dtypes(op) -> list[torch.dtype]:
    """The dtypes of DTYPES that the op's backward supports on the CPU, in DTYPES' order."""
    supported = op.supported_backward_dtypes("cpu")
    return [dtype for dtype in DTYPES if dtype in supported]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def seed_of(*parts) -> int:
    """A fixed seed for one op, dtype or sample: the same values on every run and in every process (not
    Python's hash(), which is salted per process)."""
    return zlib.crc32(" ".join(str(part) for part in parts).encode())


def samples(op, dtype: torch.dtype) -> Iterator:
    """The op's samples on the CPU, with requires_grad=True, from a fixed seed: sample i is the same
    whether one or all of them are drawn (sample_inputs draws them in order from the global generator)."""
    torch.manual_seed(seed_of(op_id(op), dtype_name(dtype)))
    return iter(op.sample_inputs("cpu", dtype, requires_grad=True))


def differentiable_call(op, sample) -> tuple[Callable, list[torch.Tensor]]:
    """(fn, inputs): inputs are the sample's tensors that require grad (in its input, its args, its kwargs,
    and inside tensor lists), and fn(*inputs) runs the op on the sample with them put back, as torch's own
    gradcheck tests do (common_utils' _check_helper: op.gradcheck_wrapper, then output_process_fn_grad,
    which picks the differentiable outputs of ops such as linalg.eig)."""
    def differentiable(value) -> list[torch.Tensor]:
        if is_iterable_of_tensors(value):
            return [x for x in value if x.requires_grad]
        return [value] if isinstance(value, torch.Tensor) and value.requires_grad else []

    arguments = [sample.input, *sample.args, *sample.kwargs.values()]
    inputs = [x for value in arguments for x in differentiable(value)]

    def fn(*given):
        remaining = iter(given)

        def put_back(value):  # the same walk as differentiable()'s, taking the given tensors in order
            if is_iterable_of_tensors(value):
                return [next(remaining) if x.requires_grad else x for x in value]
            if isinstance(value, torch.Tensor) and value.requires_grad:
                return next(remaining)
            return value

        positional = [put_back(sample.input), *(put_back(x) for x in sample.args)]
        keywords = {key: put_back(value) for key, value in sample.kwargs.items()}
        output = op.gradcheck_wrapper(op.get_op(), *positional, **keywords)
        if sample.output_process_fn_grad is not None:
            return sample.output_process_fn_grad(output)
        return output

    return fn, inputs
