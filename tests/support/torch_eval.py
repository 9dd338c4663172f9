"""The torch side of the tests' torch oracle (tests/support/torch_oracle.hpp).

Reads one JSON request per line on stdin, evaluates the Python expression in it
(or runs its statements, which leave their value in `result`)
with torch 2.13 and the given tensors bound to a, b, c, ..., and writes one JSON
response per line on stdout. Tensors travel as base64 of their raw bytes, so
values cross exactly (NaN and Inf included).
"""
import base64
import json
import math
import os
import sys

import warnings

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
# Test code may import helpers that live beside the tests, e.g. nodes.torch_module_nodes.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every dtype refgrad has, by its name (torch's). NumPy has no bfloat16 and no complex32: their bits
# travel as int16 and int32.
TORCH_DTYPES = {getattr(torch, name): name for name in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128")}
BITS_AS = {torch.bfloat16: torch.int16, torch.complex32: torch.int32}
# torch warns on every complex32 tensor it makes; the tests make many on purpose.
warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")


def decode(spec):
    raw = base64.b64decode(spec["data"])
    dtype = getattr(torch, spec["dtype"])
    # bytearray: a writable buffer for frombuffer; clone: a contiguous tensor of its own.
    tensor = torch.frombuffer(bytearray(raw), dtype=BITS_AS.get(dtype, dtype)) if raw else \
        torch.empty(0, dtype=BITS_AS.get(dtype, dtype))
    return tensor.view(dtype).reshape(spec["shape"]).clone(memory_format=torch.contiguous_format)


def encode(value):
    if isinstance(value, torch.dtype):  # a dtype travels as an empty 0-d tensor of it
        value = torch.zeros((), dtype=value)
    elif isinstance(value, bool):
        value = torch.tensor(value, dtype=torch.bool)
    elif isinstance(value, int):
        value = torch.tensor(value, dtype=torch.int64)
    elif isinstance(value, float):
        value = torch.tensor(value, dtype=torch.float64)
    elif isinstance(value, complex):
        value = torch.tensor(value, dtype=torch.complex128)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"torch_eval: cannot return a {type(value).__name__}")
    if value.dtype not in TORCH_DTYPES:
        raise TypeError(f"torch_eval: result dtype {value.dtype} is not one refgrad has")
    value = value.detach().contiguous()
    return {
        "dtype": TORCH_DTYPES[value.dtype],
        "shape": list(value.shape),
        "data": base64.b64encode(value.view(BITS_AS.get(value.dtype, value.dtype)).numpy().tobytes()).decode("ascii"),
    }


def evaluate_value(request):
    names = {"torch": torch, "F": F, "math": math, "np": np}
    for name, spec in zip("abcdefghijklmnopqrstuvwxyz", request["inputs"]):
        names[name] = decode(spec)
    if "code" in request:  # statements that leave their value in `result`
        exec(request["code"], names)
        return names["result"]
    return eval(request["expr"], names)  # the expression comes from our own tests


def evaluate(request):
    value = evaluate_value(request)
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    return [encode(v) for v in values]


def main():
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request.get("as_text"):
                response = {"ok": True, "text": str(evaluate_value(request))}
            else:
                response = {"ok": True, "outputs": evaluate(request)}
        except Exception as error:  # reported to the C++ test, which decides
            response = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(response) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
