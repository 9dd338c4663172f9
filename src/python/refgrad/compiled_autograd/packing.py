"""How compiled autograd packs each node's saved fields into the arguments of its functional op.

In a compiled autograd graph a built-in node is one call

    torch__dynamo_compiled_autograd_ops_AddmmBackward0([grad], [True, False, True], 1, 1, mat1, 0, ...)

whose arguments are the incoming grads, needs_input_grad, then the node's saved fields *by position*.
The names are nowhere in the graph: torch's generated `apply_with_saved` calls `packed_args.pack(field)`
for each field in an order chosen by its code generator, and `bind_function` hands Python only the
packed types. So the order is read from the same generator: torchgen ships with torch
(torchgen/packaged/autograd), and its `process_function` is the function that writes
`<Node>::apply_with_saved`. We run it on torch's own derivatives.yaml with a template that keeps only
the list it packs (`${apply_functional_args}`): the names, in the order torch packs them. A torch whose
generator packs differently gives a different list, and the tests compare it with refgrad's fields.

Two kinds of packed argument are not saved fields: `<input>_size_`, the length of a Tensor[] input
(cat's `tensors_size_`: the number of results for that input), and `retain_variables` (whether the
engine may free the saved tensors; it does not change the gradient).

CopyBackwards is written by hand in torch (torch/csrc/autograd/functions/tensor.cpp), not generated;
its struct (torch/include/torch/csrc/autograd/functions/tensor.h) has one field, `src_options`, so its
packing is that one field; packing() reads the struct from the installed header and refuses if it has
more than one.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import torch

import refgrad

__all__ = ["Packing", "packing", "packings"]


@dataclass(frozen=True)
class Packing:
    """One node's functional op, as torch packs it: ``op(grads, needs_input_grad, *args)``."""

    node: str
    num_inputs: int  # len(needs_input_grad): one bit per differentiable input (one for a Tensor[] input)
    args: tuple[str, ...]  # the names of the packed arguments after needs_input_grad, in torch's order
    types: tuple[str, ...]  # their C++ types, as the generated code unpacks them

    def list_sizes(self) -> dict[str, int]:
        """Tensor[] inputs (by name) and the position of their `<name>_size_` argument."""
        return {name[:-len("_size_")]: i for i, name in enumerate(self.args) if name.endswith("_size_")}


@functools.cache
def packings() -> dict[str, Packing]:
    """Every node torch's generator writes, by name, with its packing (about 650 nodes; ~1 s once)."""
    import torchgen
    from torchgen.code_template import CodeTemplate
    from torchgen.packaged.autograd import gen_autograd_functions
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    packaged = os.path.join(os.path.dirname(torchgen.__file__), "packaged")
    infos, _ = load_derivatives(os.path.join(packaged, "autograd", "derivatives.yaml"),
                                os.path.join(packaged, "ATen", "native", "native_functions.yaml"),
                                os.path.join(packaged, "ATen", "native", "tags.yaml"))
    # The template is ours (one line: a list is written inline, joined by ", "), the substitutions are torch's: the same lists that fill
    # `packed_args.pack(...)` and `IValuePacker<...>::packed_type()` in Functions.cpp.
    template = CodeTemplate("${op}|${num_inputs}|${apply_functional_args}|${apply_functional_args_signature}")
    result: dict[str, Packing] = {}
    for info in gen_autograd_functions.get_infos_with_derivatives_list(infos):
        if info.op in result:
            continue
        op, num_inputs, args, signature = gen_autograd_functions.process_function(info, template).split("|")
        names = tuple(name.strip() for name in args.split(",") if name.strip())
        types = tuple(_split_signature(signature, names))
        result[op] = Packing(op, int(num_inputs), names, types)
    result["CopyBackwards"] = _copy_backwards()
    return result


def _split_signature(signature: str, names: tuple[str, ...]) -> list[str]:
    """`at::Scalar& alpha, Tensor& mat1, ...` -> the type before each name (types may hold commas)."""
    types = []
    rest = signature
    for name in names:
        found = re.search(r"\s" + re.escape(name) + r"(,|$)", rest)
        types.append(rest[:found.start()].strip().lstrip(",").strip())
        rest = rest[found.end():]
    return types


def _copy_backwards() -> Packing:
    header = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "autograd", "functions",
                          "tensor.h")
    with open(header) as file:
        text = file.read()
    body = re.search(r"struct TORCH_API CopyBackwards : public Node \{(.*?)\n\};", text, re.S)
    fields = re.findall(r"^\s+([\w:<>]+) (\w+);$", body.group(1), re.M) if body else []
    if len(fields) != 1:
        raise refgrad.Error(f"refgrad.compiled_autograd: torch's CopyBackwards struct ({header}) has fields "
                            f"{[name for _, name in fields]}; refgrad knows its packing only for one field, "
                            "src_options")
    (type_, name), = fields
    return Packing("CopyBackwards", 2, (name,), (type_ + "&",))


def packing(node: str) -> Packing:
    """The packing of one node; refgrad.Error for a node torch's generator does not write."""
    found = packings().get(node)
    if found is None:
        raise refgrad.Error(f"refgrad.compiled_autograd: torch {torch.__version__} generates no functional op "
                            f"named {node}, so its packed arguments cannot be read from torch")
    return found
