"""The autograd graph functionalize() orders, as plain dataclasses.

They mirror include/refgrad/graph.hpp field for field, so that code walking
torch's grad_fn graph can fill them with lists and dicts; functionalize() reads
them into the C++ Graph, reading each saved field as its node's schema types
it (``refgrad.node(name).saved``): a Python int for an int field, "float32" or
torch.float32 for a dtype, a Tensor / NumPy array / torch tensor for a tensor,
None for an unsaved tensor or an absent optional.

    g = Graph()
    x = g.add_leaf("x", TensorType("float32", [3]))
    y = g.add_leaf("y", TensorType("float32", [3]))
    mul = g.add_node(GraphNode(
        name="MulBackward0", sequence_nr=0,
        saved={"self": xs, "other": ys, "self_scalar_type": "float32", "other_scalar_type": "float32"},
        next_edges=[Edge(x, 0), Edge(y, 0)],
        input_metadata=[InputMetadata("float32", [3])]))
    g.roots.append(Edge(mul, 0))
    g.root_grads.append(("g", grad))
    bundle, node_of_instruction = refgrad.functionalize(g)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

from refgrad import _refgrad
from refgrad._refgrad import InputMetadata, TensorType

__all__ = ["Edge", "GraphNode", "GraphLeaf", "Graph", "Order", "FunctionalizeOptions", "functionalize"]


@dataclass
class Edge:
    """An edge to input ``input_nr`` of ``node`` (an index into Graph.nodes); node -1 needs no grad."""

    node: int = -1
    input_nr: int = 0

    @property
    def valid(self) -> bool:
        return self.node >= 0


@dataclass
class GraphNode:
    """One node of the graph. ``kind``: "builtin" (a node of refgrad.nodes(), named ``name``),
    "accumulate_grad" (the grad accumulator of leaf ``leaf``), "function" (an autograd.Function's
    backward, called as host function ``name`` with ``function_saved``), or "copy_slices" (CopySlices
    around builtin ``name``; ``saved`` holds base and view, TensorGeometry, then its fields)."""

    kind: str = "builtin"
    name: str = ""
    saved: dict[str, Any] = field(default_factory=dict)  # by PyTorch's field names
    function_saved: list = field(default_factory=list)
    leaf: str = ""
    next_edges: list[Optional[Edge]] = field(default_factory=list)  # one per node input; None: invalid
    sequence_nr: int = 0
    input_metadata: list[Optional[InputMetadata]] = field(default_factory=list)  # one per incoming grad
    tensor_pre_hooks: dict[int, list[str]] = field(default_factory=dict)  # slot -> host hook names
    retains_grad: dict[int, str] = field(default_factory=dict)  # slot -> output name
    pre_hooks: list[str] = field(default_factory=list)
    post_hooks: list[str] = field(default_factory=list)
    post_acc_grad_hooks: list[str] = field(default_factory=list)
    origin: str = ""  # the forward source line, when known


@dataclass
class GraphLeaf:
    """A leaf tensor: its name, type, and .grad before the backward (None: no .grad)."""

    name: str
    type: TensorType
    grad: Any = None


@dataclass
class Graph:
    nodes: list[GraphNode] = field(default_factory=list)
    leaves: list[GraphLeaf] = field(default_factory=list)
    roots: list[Edge] = field(default_factory=list)  # the outputs' gradient edges
    root_grads: list[tuple[str, Any]] = field(default_factory=list)  # (name, tensor or None) per root
    captures: list[tuple[str, Edge]] = field(default_factory=list)  # torch.autograd.grad's inputs

    def add_node(self, node: GraphNode) -> int:
        """Appends the node; returns its index, for Edges."""
        self.nodes.append(node)
        return len(self.nodes) - 1

    def add_leaf(self, name: str, type: TensorType, grad: Any = None) -> int:
        """Appends a leaf and its AccumulateGrad node; returns the node's index."""
        self.leaves.append(GraphLeaf(name, type, grad))
        metadata = InputMetadata(type.dtype, type.sizes, type.device)
        return self.add_node(GraphNode(kind="accumulate_grad", leaf=name, input_metadata=[metadata],
                                       sequence_nr=_refgrad.ACCUMULATE_GRAD_SEQUENCE_NR))


class Order(str, enum.Enum):
    EAGER = "eager"  # Engine's ready queue: higher sequence_nr first
    COMPILED_AUTOGRAD = "compiled_autograd"  # compiled autograd's LIFO topological order


@dataclass
class FunctionalizeOptions:
    order: Order = Order.EAGER
    accumulate_grad: bool = True  # backward() accumulates; autograd.grad (captures) does not
    allow_unused: bool = False
    inline_limit: int = 16  # saved tensors up to this many elements are written inline
    program_name: str = "backward"


def functionalize(graph: Graph, options: Optional[FunctionalizeOptions] = None):
    """Orders the graph as PyTorch's engine would and writes the program.

    Returns (bundle, node_of_instruction): the program with its tensors, and for
    each instruction the index of the graph node it came from (-1 for none).
    """
    return _refgrad._functionalize(graph, options or FunctionalizeOptions())
