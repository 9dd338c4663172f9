"""refgrad: a reference interpreter for functionalized PyTorch backward programs.

    import refgrad
    bundle = refgrad.load("examples/programs/mlp.bwd")
    machine = refgrad.Machine(bundle)
    machine.run()
    machine.leaf_grad("W1").numpy()

Tensors: Tensor.from_numpy / Tensor.from_torch (sharing memory), t.numpy(),
np.asarray(t), t.torch(). Programs: Program.parse, str(program),
program.verify(), refgrad.load / Program.save, Bundle. The interpreter:
Machine (run, step, run_until, registers, Python hooks), run_program. The
node registry: nodes(), node(name), call_node(...). The autograd graph
model and functionalize() are in refgrad.graph. Every error is refgrad.Error
(a RuntimeError) with the C++ core's message.

The PyTorch bridge is imported when first used, so that `import refgrad`
does not import torch: refgrad.torch (capture a grad_fn graph),
refgrad.check (check engines against the oracle; the module is callable:
refgrad.check(fn, *args)), refgrad.engines, refgrad.zoo (small models).
"""
import importlib
from refgrad._refgrad import (
    ACCUMULATE_GRAD_SEQUENCE_NR,
    AtenSchema,
    BoundProgram,
    Bundle,
    Comparison,
    Diagnostic,
    Error,
    FunctionDecl,
    GradDecl,
    HookDecl,
    InputMetadata,
    Instr,
    LeafDecl,
    Machine,
    NO_GRAD,
    NodeSchema,
    OutputDecl,
    Program,
    ResultSet,
    RoundingNoise,
    SavedDecl,
    SavedField,
    SourceLocation,
    Tensor,
    TensorGeometry,
    TensorOptions,
    TensorType,
    TraceEntry,
    TypeAndSize,
    __version__,
    allclose,
    aten_ops,
    bind,
    call_aten_op,
    call_node,
    default_memory_limit,
    default_num_threads,
    equal,
    linear_sensitivity,
    load,
    make_bundle,
    node,
    nodes,
    not_finite_where_finite,
    num_threads,
    perturbed_to_float64,
    promote_to_float64,
    read_safetensors,
    rounding_noise_of,
    run_program,
    saved_values_broken_by_moving,
    set_num_threads,
    write_safetensors,
)
from refgrad.graph import Edge, FunctionalizeOptions, Graph, GraphLeaf, GraphNode, Order, functionalize

__all__ = [
    "ACCUMULATE_GRAD_SEQUENCE_NR",
    "AtenSchema",
    "BoundProgram",
    "Bundle",
    "Comparison",
    "Diagnostic",
    "Edge",
    "Error",
    "FunctionDecl",
    "FunctionalizeOptions",
    "GradDecl",
    "Graph",
    "GraphLeaf",
    "GraphNode",
    "HookDecl",
    "InputMetadata",
    "Instr",
    "LeafDecl",
    "Machine",
    "NO_GRAD",
    "NodeSchema",
    "Order",
    "OutputDecl",
    "Program",
    "ResultSet",
    "RoundingNoise",
    "SavedDecl",
    "SavedField",
    "SourceLocation",
    "Tensor",
    "TensorGeometry",
    "TensorOptions",
    "TensorType",
    "TraceEntry",
    "TypeAndSize",
    "__version__",
    "allclose",
    "aten_ops",
    "bind",
    "call_aten_op",
    "call_node",
    "default_memory_limit",
    "default_num_threads",
    "equal",
    "functionalize",
    "linear_sensitivity",
    "load",
    "make_bundle",
    "node",
    "nodes",
    "not_finite_where_finite",
    "num_threads",
    "perturbed_to_float64",
    "promote_to_float64",
    "read_safetensors",
    "rounding_noise_of",
    "run_program",
    "saved_values_broken_by_moving",
    "set_num_threads",
    "write_safetensors",
]

_TORCH_MODULES = ("torch", "check", "engines", "zoo", "aot")


def __getattr__(name: str):
    """Imports the torch-dependent submodules on first use: refgrad.check(...) works after `import refgrad`."""
    if name in _TORCH_MODULES:
        return importlib.import_module(f"refgrad.{name}")
    raise AttributeError(f"module 'refgrad' has no attribute {name!r}")

import refgrad.display  # noqa: E402,F401  gives Program, Bundle and Machine their _repr_html_ (Jupyter)
