"""An AOTAutograd backward graph (an FX graph of ATen ops) written as refgrad `aten` instructions.

The graph's placeholders are given as operands: a register (a grad), a saved tensor ("$name") or a
number (a SymInt, concrete in this backward). Each call of an ATen op becomes one instruction, its
arguments in the op's schema order; a multi-result op's `getitem`s name its results; the graph's
outputs are returned as operands for the caller to place (docs/program.md, "ATen instructions").
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Optional, Union

import torch

import refgrad
from refgrad.compiled_autograd.importing import _dtype, _float, _string

# What a placeholder or a node's value is in the program: "%name" (a register), "$name" (a saved
# tensor), an int (a SymInt's value), or None (an undefined tensor).
Operand = Union[str, int, None]

_MEMORY_FORMATS = {torch.contiguous_format: "contiguous_format", torch.preserve_format: "preserve_format",
                   torch.channels_last: "channels_last", torch.channels_last_3d: "channels_last_3d"}
_LAYOUTS = {torch.strided: "strided", torch.sparse_coo: "sparse_coo", torch.sparse_csr: "sparse_csr",
            torch._mkldnn: "mkldnn", torch.sparse_csc: "sparse_csc", torch.sparse_bsr: "sparse_bsr",
            torch.sparse_bsc: "sparse_bsc", torch.jagged: "jagged"}


def _error(message: str) -> refgrad.Error:
    return refgrad.Error(f"refgrad.aot: {message}")


def op_name(target) -> str:
    """How a program names an ATen op overload: torch.ops.aten.mul.Tensor -> "aten.mul.Tensor"."""
    return f"{target.namespace}.{target._schema.name.split('::')[1]}.{target._overloadname}"


class RecordingInterpreter(torch.fx.Interpreter):
    """Runs a GraphModule node by node (torch's own ops), keeping every node's value by node name: torch's run
    of a graph, as refgrad.check and refgrad.aot.coverage read it."""

    def __init__(self, graph_module: torch.fx.GraphModule):
        super().__init__(graph_module)
        self.values: dict[str, object] = {}

    def run_node(self, node):
        value = super().run_node(node)
        self.values[node.name] = value
        return value


def schema_arguments(node: torch.fx.Node) -> list[tuple[object, object]]:
    """(schema argument, value) for every argument of an FX call of an ATen op, in schema order: the call's
    positional and keyword arguments, and the schema's defaults for the ones it leaves out."""
    arguments = []
    for i, argument in enumerate(node.target._schema.arguments):
        if i < len(node.args) and not argument.kwarg_only:
            given = node.args[i]
        elif argument.name in node.kwargs:
            given = node.kwargs[argument.name]
        elif argument.has_default_value():
            given = argument.default_value
        else:
            raise _error(f"{node.name} ({op_name(node.target)}) argument '{argument.name}' is missing")
        arguments.append((argument, given))
    return arguments


@dataclass
class Emitted:
    """The instructions of one backward graph, the operand of each graph output (None for a None
    output), and the ATen op each instruction calls with the FX node it came from."""

    lines: list[str] = field(default_factory=list)
    outputs: list[Operand] = field(default_factory=list)
    nodes: list[torch.fx.Node] = field(default_factory=list)  # per instruction
    constants: dict[str, torch.Tensor] = field(default_factory=dict)  # saved tensors the graph holds (get_attr)


class _Emitter:
    def __init__(self, gm: torch.fx.GraphModule, placeholders: dict[torch.fx.Node, Operand], prefix: str,
                 origin: Optional[str]):
        self.gm = gm
        self.values: dict[torch.fx.Node, Union[Operand, list]] = dict(placeholders)
        self.prefix = prefix
        self.origin = origin
        self.known = {schema.name for schema in refgrad.aten_ops()}
        self.emitted = Emitted()

    def register(self, node: torch.fx.Node) -> str:
        return f"%{self.prefix}{node.name}"

    # ------------------------------------------------------------ values ---

    def operand(self, value, where: str) -> str:
        """A tensor argument: an FX node's operand, a number standing for a tensor, or none."""
        if isinstance(value, torch.fx.Node):
            operand = self.values[value]
            if operand is None:
                return "none"
            if isinstance(operand, int):
                return str(operand)
            if isinstance(operand, str):
                return operand
            raise _error(f"{where}: {value.name} is a tuple of results, not one tensor")
        if value is None:
            return "none"
        if isinstance(value, (bool, int, float, complex)):
            return self.number(value)
        raise _error(f"{where}: a tensor argument is {type(value).__name__}")

    def number(self, value) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, complex):  # a complex Scalar: 2.0-0.5j
            imaginary = _float(value.imag)
            return f"{_float(value.real)}{'' if imaginary.startswith('-') else '+'}{imaginary}j"
        return _float(value)

    def concrete(self, value):
        """A SymInt given as a node (a placeholder's or an arithmetic node's value) as its int."""
        if isinstance(value, torch.fx.Node):
            concrete = self.values.get(value)
            if not isinstance(concrete, int):
                raise _error(f"{value.name} is used as an int but is {concrete!r}")
            return concrete
        return value

    def value(self, value, argument, where: str) -> str:
        """A value argument, spelled as docs/program.md writes values of its kind. TorchScript's types
        call a ScalarType, Layout or MemoryFormat an int, so the Python value says which it is."""
        value = self.concrete(value)
        element = argument.type.getElementType() if isinstance(argument.type, torch.OptionalType) else argument.type
        if value is None:
            return "none"
        if isinstance(value, torch.dtype):
            return _dtype(value)
        if isinstance(value, torch.layout):
            return _LAYOUTS[value]
        if isinstance(value, torch.memory_format):
            return _MEMORY_FORMATS[value]
        if isinstance(value, torch.device) or isinstance(element, torch.DeviceObjType):
            return torch.device(value).type
        if isinstance(value, str):
            return _string(value)
        if isinstance(value, (bool, int, float)) and isinstance(element, torch.ListType):
            value = [value] * (argument.N or 1)  # `int[2] dilation=1`: ATen repeats a bare int
        if isinstance(value, (list, tuple)):
            items = [self.concrete(item) for item in value]
            if all(isinstance(item, bool) for item in items) and items:
                return "[" + ", ".join("true" if item else "false" for item in items) + "]"
            if all(isinstance(item, int) for item in items):
                return "[" + ", ".join(str(item) for item in items) + "]"
            raise _error(f"{where}: refgrad programs have no lists of {type(items[0]).__name__}")
        if isinstance(value, bool):
            return self.number(value)
        if isinstance(value, (int, float, complex)):
            return _float(value) if isinstance(element, torch.FloatType) else self.number(value)
        raise _error(f"{where}: refgrad programs have no values of type {type(value).__name__}")

    # ------------------------------------------------------------- nodes ---

    def call(self, node: torch.fx.Node) -> None:
        target = node.target
        if target is operator.getitem:
            source, index = node.args
            parts = self.values[source]
            if not isinstance(parts, list):
                raise _error(f"{node.name}: getitem of {source.name}, which is not a tuple of results")
            self.values[node] = parts[index]
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise _error(f"{node.name}: the graph calls {target}, which is not an ATen op; refgrad runs ATen ops only")
        name = op_name(target)
        if name not in self.known:
            raise _error(f"{node.name}: refgrad has no ATen op {name} yet")
        schema = target._schema
        positional, keywords = [], []
        for argument, given in schema_arguments(node):
            text = self.argument(given, argument, f"{node.name} ({name}) argument '{argument.name}'")
            if argument.kwarg_only:
                keywords.append(f"{argument.name}={text}")
            else:
                positional.append(text)
        results = self.results(node, schema)
        line = f"{', '.join(results)} = {name}"
        if positional:
            line += " " + ", ".join(positional)
        if keywords:
            line += "  " + " ".join(keywords)
        if self.origin:
            line += f" origin={_string(self.origin)}"
        self.emitted.lines.append(line)
        self.emitted.nodes.append(node)

    def argument(self, given, argument, where: str) -> str:
        type_ = argument.type
        element = type_.getElementType() if isinstance(type_, torch.OptionalType) else type_
        if isinstance(element, torch.TensorType):
            return self.operand(given, where)
        if isinstance(element, torch.ListType) and isinstance(element.getElementType(), (torch.TensorType,
                                                                                             torch.OptionalType)):
            if given is None:
                return "none"
            return "[" + ", ".join(self.operand(item, where) for item in given) + "]"
        return self.value(given, argument, where)

    def results(self, node: torch.fx.Node, schema) -> list[str]:
        """One register per result: `%name` for a one-result op; for several, the getitem nodes' names
        where the graph uses a result, `_` where it does not."""
        if len(schema.returns) == 1 and not isinstance(schema.returns[0].type, torch.ListType):
            self.values[node] = self.register(node)
            return [self.register(node)]
        value = node.meta.get("val")
        count = len(value) if isinstance(value, (tuple, list)) else len(schema.returns)
        parts: list[Operand] = [None] * count
        for user in node.users:
            if user.target is operator.getitem:
                parts[user.args[1]] = self.register(user)
        self.values[node] = parts
        return [part if part is not None else "_" for part in parts]

    def run(self) -> Emitted:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                if node not in self.values:
                    raise _error(f"placeholder {node.name} has no operand")
            elif node.op == "call_function":
                if node.target is operator.getitem or isinstance(node.target, torch._ops.OpOverload):
                    self.call(node)
                elif node.target in (operator.add, operator.sub, operator.mul, operator.floordiv):
                    self.values[node] = node.target(self.concrete(node.args[0]), self.concrete(node.args[1]))
                else:
                    raise _error(f"{node.name}: the graph calls {node.target}; refgrad runs ATen ops only")
            elif node.op == "get_attr":  # a tensor the graph holds: a saved tensor of the program
                value = self.gm
                for part in node.target.split("."):
                    value = getattr(value, part)
                name = f"{self.prefix}{node.name}"
                self.emitted.constants[name] = value.detach()
                self.values[node] = "$" + name
            elif node.op == "output":
                outputs = node.args[0]
                outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
                for output in outputs:
                    if output is None:
                        self.emitted.outputs.append(None)
                    elif isinstance(output, torch.fx.Node):
                        self.emitted.outputs.append(self.values[output])
                    else:
                        self.emitted.outputs.append(output)
            else:
                raise _error(f"{node.name}: an FX {node.op} node; a backward graph has placeholders, constants, calls "
                             "and an output")
        return self.emitted


def emit(gm: torch.fx.GraphModule, placeholders: dict[torch.fx.Node, Operand], prefix: str = "",
         origin: Optional[str] = None) -> Emitted:
    """The graph's calls as `aten` instructions. placeholders: each placeholder node's operand. Registers
    are the FX nodes' names after `prefix`."""
    return _Emitter(gm, placeholders, prefix, origin).run()
