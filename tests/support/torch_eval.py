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

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
# Test code may import helpers that live beside the tests, e.g. nodes.torch_module_nodes.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NUMPY_DTYPES = {"bool": np.bool_, "int64": np.int64, "float32": np.float32, "float64": np.float64}
TORCH_DTYPES = {torch.bool: "bool", torch.int64: "int64", torch.float32: "float32", torch.float64: "float64"}


def decode(spec):
    raw = base64.b64decode(spec["data"])
    array = np.frombuffer(raw, dtype=NUMPY_DTYPES[spec["dtype"]]).reshape(spec["shape"])
    # clone: NumPy gives empty arrays all-zero strides; torch.empty would not.
    return torch.from_numpy(array.copy()).clone(memory_format=torch.contiguous_format)


def encode(value):
    if isinstance(value, torch.dtype):  # a dtype travels as an empty 0-d tensor of it
        value = torch.zeros((), dtype=value)
    elif isinstance(value, bool):
        value = torch.tensor(value, dtype=torch.bool)
    elif isinstance(value, int):
        value = torch.tensor(value, dtype=torch.int64)
    elif isinstance(value, float):
        value = torch.tensor(value, dtype=torch.float64)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"torch_eval: cannot return a {type(value).__name__}")
    if value.dtype not in TORCH_DTYPES:
        raise TypeError(f"torch_eval: result dtype {value.dtype} is not one refgrad has")
    value = value.detach().contiguous()
    return {
        "dtype": TORCH_DTYPES[value.dtype],
        "shape": list(value.shape),
        "data": base64.b64encode(value.numpy().tobytes()).decode("ascii"),
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
