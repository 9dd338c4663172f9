"""The compiled autograd graph, read as a refgrad program.

Compiled autograd (torch._dynamo.compiled_autograd) traces a backward into an FX graph
``forward(inputs, sizes, scalars, hooks, packed_data)`` and hands it to its compiler. Each call in it
is one step of the engine, already functional, already in order; import_graph() writes each as the
refgrad instruction that does the same (docs/compiled_autograd.md shows each with a real excerpt):

    ops.validate_outputs(grads, metadata)        validate
    ops.<Node>(grads, needs_input_grad, *packed) a node call, fields by name (refgrad.compiled_autograd.packing)
    torch.add(old, new)                          add (input-buffer accumulation)
    call_accumulate_grad(variable, old, grad, _) accumulate_grad
    call_hook(hook, ..., hook_type=...)          hook (tensor_pre, pre, post, post_acc_grad)
    call_cpp_tensor_pre_hooks(id, grad)          hook (tensor_pre): C++ tensor pre-hooks, retain_grad()'s
    call_backward(ctx, saved, *grads)            call_backward (autograd.Function)
    call_aot_bwd_prologue(...), aot0_* aten ops  call_backward of a host function (an AOT backward)
    copy_slices_prologue / _epilogue             call_backward of host functions around the wrapped node
    return [...]                                 output (torch.autograd.grad's inputs)

The graph is run by an FX Interpreter over the concrete values compiled autograd calls it with: the
sizes (SymInts) become the integers they are in this backward, the tensors in ``inputs`` become saved
tensors, grads or leaves by where they are used, and every gradient is a register. Any other call on
a gradient is refused with a refgrad.Error that names it. Saved-tensor unpack hooks run at import: what they return is a saved
tensor of the program.
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.fx
from torch._dynamo import external_utils
from torch.utils import _pytree as pytree

import refgrad
from refgrad.compiled_autograd.packing import packing
from refgrad.torch.builder import _Names
from refgrad.torch.host import _to_torch

__all__ = ["Imported", "import_graph"]

# c10::ScalarType, as compiled autograd packs a dtype (an int), and the torch dtypes, in refgrad's short names.
_SCALAR_TYPES = {0: "u8", 1: "i8", 2: "i16", 3: "i32", 4: "i64", 5: "f16", 6: "f32", 7: "f64", 8: "c32", 9: "c64",
                 10: "c128", 11: "b8", 15: "bf16", 27: "u16", 28: "u32", 29: "u64"}
_SCALAR_TYPE_NAMES = {23: "float8_e5m2", 24: "float8_e4m3fn"}
_DTYPES = {getattr(torch, name): short for name, short in (
    ("uint8", "u8"), ("int8", "i8"), ("int16", "i16"), ("int32", "i32"), ("int64", "i64"), ("uint16", "u16"),
    ("uint32", "u32"), ("uint64", "u64"), ("float16", "f16"), ("bfloat16", "bf16"), ("float32", "f32"),
    ("float64", "f64"), ("complex32", "c32"), ("complex64", "c64"), ("complex128", "c128"), ("bool", "b8"))}
# c10::Layout, in enum order; refgrad's Layout names are the same list.
_LAYOUTS = ["strided", "sparse_coo", "sparse_csr", "mkldnn", "sparse_csc", "sparse_bsr", "sparse_bsc", "jagged"]
_OPS_MODULE = "torch._dynamo.compiled_autograd.ops"
# Calls that start a region run by a host function: an AOT backward's prologue (its aten ops follow), and
# CopySlices' prologue and epilogue (the wrapped node's call between them is a node call of the program).
_HOST_REGIONS = {"call_aot_bwd_prologue", "copy_slices_prologue", "copy_slices_epilogue"}


def _error(message: str) -> refgrad.Error:
    return refgrad.Error(f"refgrad.compiled_autograd: {message}")


@dataclass(frozen=True)
class _Register:
    """A gradient in the program: a register, with its type when validate_outputs gave it one."""

    name: str
    type: Optional[str] = None

    def __str__(self) -> str:
        return "%" + self.name


def _dtype(dtype: torch.dtype) -> str:
    if dtype not in _DTYPES:
        raise _error(f"refgrad programs have no dtype {dtype} yet")
    return _DTYPES[dtype]


def _scalar_type(value: int) -> str:
    if value not in _SCALAR_TYPES:
        raise _error(f"refgrad programs have no dtype {_SCALAR_TYPE_NAMES.get(value, value)} yet")
    return _SCALAR_TYPES[value]


def _tensor_type(tensor: torch.Tensor) -> str:
    text = _dtype(tensor.dtype) + "[" + ",".join(str(s) for s in tensor.shape) + "]"
    return text if tensor.device.type == "cpu" else f"{text} {tensor.device.type}"


def _string(value: str) -> str:
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}
    return '"' + "".join(escapes.get(c, c if c >= " " else f"\\x{ord(c):02x}") for c in value) + '"'


def _float(value: float) -> str:
    return repr(float(value))  # repr is the shortest spelling that reads back: 1.0, 1e-05, inf, nan


def _options(packed) -> str:
    """IValuePacker<TensorOptions>: (requires_grad, memory_format, device, dtype, layout, pinned_memory)."""
    requires_grad, _, device, dtype, layout, _ = packed
    parts = []
    if dtype is not None:
        parts.append(f"dtype={_scalar_type(dtype)}")
    if device is not None:
        parts.append(f"device={torch.device(device).type}")
    if layout is not None:
        parts.append(f"layout={_LAYOUTS[layout]}")
    if requires_grad is not None:
        parts.append(f"requires_grad={'true' if requires_grad else 'false'}")
    return "{" + ", ".join(parts) + "}"


def _ints(values) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def _metadata(packed) -> str:
    """IValuePacker<InputMetadata>: (options, shape, is_tensor_subclass, grad_dtype); None: `_`."""
    if packed is None:
        return "_"
    options, shape, is_subclass, grad_dtype = packed
    dtype = _scalar_type(options[3])
    extras = []
    device = torch.device(options[2]).type
    if device != "cpu":
        extras.append(f"device={device}")
    if grad_dtype is None:
        extras.append("grad_dtype=none")
    elif _scalar_type(grad_dtype) != dtype:
        extras.append(f"grad_dtype={_scalar_type(grad_dtype)}")
    if is_subclass:
        extras.append("subclass")
    text = dtype + _ints(shape)
    return text + (" {" + ", ".join(extras) + "}" if extras else "")


@dataclass
class Imported:
    """A program imported from a compiled autograd graph: the bundle (program and tensors), the host
    functions its hooks and autograd.Function backwards call, and the torch leaves by program name."""

    bundle: refgrad.Bundle
    hooks: dict[str, Callable] = field(default_factory=dict)
    functions: dict[str, Callable] = field(default_factory=dict)
    leaves: dict[str, torch.Tensor] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)  # the graph's returned grads, by output name
    text: str = ""  # the program as import_graph wrote it, before parsing
    leaf_names: dict[str, str] = field(default_factory=dict)  # program name -> the user's (leaves, outputs)
    pc_of: dict[str, int] = field(default_factory=dict)  # an ops.<Node> call's FX node name -> its instruction's pc

    @property
    def program(self) -> refgrad.Program:
        return self.bundle.program

    def run(self, precision: str = "float64") -> dict[str, Optional[torch.Tensor]]:
        """Runs the program in refgrad ("float64": promoted; "float32": as imported): each leaf's new
        .grad by name, and each output by name."""
        if precision not in ("float32", "float64"):
            raise _error(f"precision must be 'float64' or 'float32', got {precision!r}")
        bundle = refgrad.promote_to_float64(self.bundle) if precision == "float64" else self.bundle
        results = refgrad.run_program(bundle, hooks=self.hooks, functions=self.functions)
        named = {}
        for name, value in results.items():
            name = name[1:]
            named[self.leaf_names.get(name, name)] = _to_torch(value)
        return named

    def save(self, path: str) -> None:
        """Writes the program and its tensors as one bundle (.safetensors)."""
        self.bundle.save(str(path))


class _Importer(torch.fx.Interpreter):
    """Runs the graph with concrete inputs, writing one program line for each engine step."""

    def __init__(self, gm: torch.fx.GraphModule, names, program_name: str, output_names=()):
        super().__init__(gm, garbage_collect_values=False)
        self.output_names = list(output_names)
        self.program_name = program_name
        self.names = _Names(names)
        self.declarations: list[str] = []
        self.code: list[str] = []
        self.values: dict[str, torch.Tensor] = {}  # bundle tensors by sigiled name
        # id(tensor) -> its sigiled name, one map per role: a parameter may be a leaf and a saved tensor
        self.named: dict[str, dict[int, str]] = {"$": {}, "%": {}, "@": {}}
        self.imported = Imported(bundle=None)  # type: ignore[arg-type]
        self.registers = 0
        self.computed: dict[torch.fx.Node, _Register] = {}  # deferred values (an AOT backward's) computed

    # -- names -------------------------------------------------------------------------------------

    def register(self, type_: Optional[str] = None) -> _Register:
        self.registers += 1
        return _Register(str(self.registers - 1), type_)

    def saved(self, tensor: Optional[torch.Tensor], hint: str) -> str:
        if tensor is None:
            return "none"
        named = self.named["$"]
        if id(tensor) not in named:
            name = "$" + hint
            named[id(tensor)] = name
            self.values[name] = tensor.detach()
            self.declarations.append(f"  saved {name} : {_tensor_type(tensor)}")
        return named[id(tensor)]

    def operand(self, grad) -> str:
        """A gradient operand: a register, `none`, or a tensor of the graph's inputs (a root's grad)."""
        if grad is None:
            return "none"
        if isinstance(grad, _Register):
            return str(grad)
        if isinstance(grad, torch.Tensor):
            named = self.named["%"]
            if id(grad) not in named:
                name = f"%grad_output{len(named)}"
                named[id(grad)] = name
                self.values[name] = grad.detach()
                self.declarations.append(f"  grad {name} : {_tensor_type(grad)}")
            return named[id(grad)]
        raise _error(f"expected a gradient, got {type(grad).__name__}")

    def leaf(self, variable: torch.Tensor, grad: Optional[torch.Tensor]) -> str:
        named = self.named["@"]
        if id(variable) not in named:
            name = self.names(variable, "input")
            spelled = self.spelled(name)
            named[id(variable)] = "@" + spelled
            self.imported.leaves[name] = variable
            self.declarations.append(f"  leaf @{spelled} : {_tensor_type(variable)}")
            if grad is not None:
                self.values["@" + spelled] = grad.detach()
        return named[id(variable)]

    def spelled(self, name: str) -> str:
        """The program text reads a name that starts with a digit as a number: "0.weight" is written
        "_0.weight" there, and run() gives it back under its own name."""
        spelled = "_" + name if name[0].isdigit() and not name.isdigit() else name
        self.imported.leaf_names[spelled] = name
        return spelled

    def hook(self, kind: str, call: Callable) -> str:
        """Declares a host hook of this kind that calls ``call``; returns its sigiled name."""
        name = f"{kind}{len(self.imported.hooks)}"
        self.imported.hooks[name] = call
        self.declarations.append(f"  hook &{name} : {kind}")
        return "&" + name

    # -- the graph's calls ---------------------------------------------------------------------------

    def run_node(self, node: torch.fx.Node):
        self.current_node = node  # named in messages and in the saved tensors' names
        return super().run_node(node)

    def call_function(self, target, args, kwargs):
        step = self.engine_step(target)
        if step is not None:
            args, kwargs = self.materialize((args, kwargs))  # an AOT backward's results, where it has some
            return step(*args, **kwargs)
        name = getattr(target, "__name__", str(target))
        values = pytree.tree_leaves((args, kwargs))
        if name in _HOST_REGIONS or any(isinstance(v, _Deferred) for v in values):
            return _Deferred(self.current_node)  # run later, in a host function
        if target is operator.getitem or not any(isinstance(v, _Register) for v in values):
            return super().call_function(target, args, kwargs)  # sizes, indexing: plain values
        raise _error(f"the graph calls {name} ({self.current_node.name}) on a gradient: refgrad has no "
                     "instruction for it")

    def engine_step(self, target) -> Optional[Callable]:
        """The method that writes the instruction for an engine step; None for other calls."""
        if getattr(target, "__module__", None) == _OPS_MODULE:
            if target.__name__ == "validate_outputs":
                return self.validate_outputs
            # hand-written nodes keep their C++ namespace in the op's name, as in grad_fn.name()
            return functools.partial(self.node_call, self.current_node,
                                     target.__name__.removeprefix("torch::autograd::"))
        steps = {torch.add: self.add,
                 external_utils.call_accumulate_grad: self.accumulate_grad,
                 external_utils.call_hook: self.call_hook,
                 torch._C._dynamo.compiled_autograd.call_cpp_tensor_pre_hooks: self.cpp_tensor_pre_hooks,
                 external_utils.call_backward: self.call_backward,
                 # queue_callback()'s callbacks: the engine's business, not a gradient
                 external_utils.FakeCompiledAutogradEngine._exec_final_callbacks_stub: lambda: None}
        try:
            return steps.get(target)
        except TypeError:  # an unhashable target
            return None

    def validate_outputs(self, grads, metadata):
        metadata = list(metadata)
        results = [None if g is None else self.register(_metadata(m).split(" ")[0] if m else None)
                   for g, m in zip(grads, metadata)]
        self.code.append(f"  {self.results(results)} = validate {', '.join(self.operand(g) for g in grads)} : "
                         + ", ".join(_metadata(m) for m in metadata))
        return results

    def results(self, registers) -> str:
        return ", ".join("_" if r is None else str(r) for r in registers)

    def node_call(self, fx_node, node: str, grads, needs_input_grad, *packed):
        packed_args = packing(node)
        if len(packed) != len(packed_args.args):
            raise _error(f"{node} ({fx_node.name}) has {len(packed)} packed arguments, but torch's generator packs "
                         f"{len(packed_args.args)}: {', '.join(packed_args.args)}")
        if len(needs_input_grad) != packed_args.num_inputs:
            raise _error(f"{node} ({fx_node.name}): needs_input_grad has {len(needs_input_grad)} bits, "
                         f"torch's generator says {packed_args.num_inputs}")
        try:
            schema = refgrad.node(node)
        except refgrad.Error as error:
            raise _error(f"refgrad has no node {node} ({fx_node.name})") from error
        by_name = dict(zip(packed_args.args, packed))
        fields = []
        for saved_field in schema.saved:
            if saved_field.name not in by_name:
                raise _error(f"{node}: torch packs no field {saved_field.name!r} (it packs "
                             f"{', '.join(packed_args.args)})")
            value = self.field(by_name[saved_field.name], saved_field, f"{fx_node.name}_{saved_field.name}")
            fields.append(f"{saved_field.name}={value}")
        list_sizes = packed_args.list_sizes()
        results = []
        for need, input_name in zip(needs_input_grad, schema.inputs):
            count = by_name[f"{input_name}_size_"] if input_name in list_sizes else 1
            results += [self.register() if need else None for _ in range(count)]
        need = "" if all(needs_input_grad) else " need=[" + ",".join("1" if n else "0" for n in needs_input_grad) + "]"
        line = f"  {self.results(results)} = {node} {', '.join(self.operand(g) for g in grads)}"
        self.imported.pc_of[fx_node.name] = len(self.code)
        self.code.append(line + ("  " + " ".join(fields) if fields else "") + need)
        return results

    def field(self, value, saved_field, hint: str) -> str:
        """One packed value written as refgrad's field of the type the node's schema gives it."""
        kind = saved_field.type
        if value is None:
            if saved_field.optional or kind.startswith("Tensor"):
                return "none"
            raise _error(f"field {saved_field.name} ({kind}) is None")
        base = kind.rstrip("?")
        if base == "Tensor":
            return self.saved(value, hint)
        if base == "Tensor[]":
            return "[" + ", ".join(self.saved(t, f"{hint}{i}") for i, t in enumerate(value)) + "]"
        if base == "Tensor?[]":
            return "[" + ", ".join(self.saved(t, f"{hint}{i}") for i, t in enumerate(value)) + "]"
        if base in ("int", "SymInt"):
            return str(int(value))
        if base in ("int[]", "SymInt[]"):
            return _ints(value)
        if base == "SymInt[][]":
            return "[" + ", ".join(_ints(v) for v in value) + "]"
        if base == "float":
            return _float(value)
        if base == "bool":
            return "true" if value else "false"
        if base == "Scalar":
            if isinstance(value, bool):
                return "true" if value else "false"
            return str(value) if isinstance(value, int) else _float(value)
        if base == "str":
            return _string(value)
        if base == "ScalarType":
            return _scalar_type(value)
        if base == "ScalarType[]":
            return "[" + ", ".join(_scalar_type(v) for v in value) + "]"
        if base == "Layout":
            return _LAYOUTS[value]
        if base == "TensorOptions":
            return _options(value)
        if base == "TensorGeometry":
            sizes, strides, offset = value
            return f"{{sizes={_ints(sizes)}, strides={_ints(strides)}, storage_offset={int(offset)}}}"
        if base == "TypeAndSize":
            sizes, options = value
            return f"{{sizes={_ints(sizes)}, options={_options(options)}}}"
        raise _error(f"field {saved_field.name}: refgrad cannot import a {kind} yet")

    def add(self, old, new):
        result = self.register(old.type if isinstance(old, _Register) else None)
        self.code.append(f"  {result} = add {self.operand(old)}, {self.operand(new)}")
        return result

    def accumulate_grad(self, variable, variable_grad, grad, has_post_hooks=None):
        leaf = self.leaf(variable, variable_grad)
        if grad is not None:
            self.code.append(f"  accumulate_grad {leaf} {self.operand(grad)}")
        return None

    def call_hook(self, hook, *args, hook_type: str):
        if hook_type == "unpack_hook":
            # a saved-tensor hook's unpack (torch.autograd.graph.saved_tensors_hooks): it turns packed
            # data (a graph input) into the saved tensor, at backward time, before any gradient exists;
            # run now, its result is one more saved tensor of the program
            if any(isinstance(a, _Register) for a in pytree.tree_leaves(args)):
                raise _error(f"an unpack hook ({self.current_node.name}) on a gradient")
            return external_utils.call_hook(hook, *args, hook_type=hook_type)
        if hook_type == "tensor_pre_hook":
            name = self.hook("tensor_pre", _tensor_pre(hook))
            result = self.register(args[0].type if isinstance(args[0], _Register) else None)
            self.code.append(f"  {result} = hook {name} {self.operand(args[0])}")
            return result
        if hook_type == "pre_hook":
            grads = list(args[0])
            name = self.hook("pre", _listed(hook))
            results = [self.register() for _ in grads]
            self.code.append(f"  {self.results(results)} = hook {name} {', '.join(self.operand(g) for g in grads)}")
            return results
        if hook_type == "post_hook":
            grad_inputs, grad_outputs = list(args[0]), list(args[1])
            name = self.hook("post", _listed(hook))
            results = [self.register() for _ in grad_inputs]
            self.code.append(f"  {self.results(results)} = hook {name} "
                             + ", ".join(self.operand(g) for g in grad_inputs + grad_outputs))
            return results
        if hook_type == "post_acc_grad_hook":
            leaf = self.named["@"].get(id(args[0]))
            if leaf is None:
                raise _error("a post-accumulate-grad hook on a tensor the graph never accumulates into")
            name = self.hook("post_acc_grad", _post_accumulate_grad(hook, args[0]))
            self.code.append(f"  hook {name} {leaf}")
            return None
        raise _error(f"call_hook with hook_type={hook_type!r} ({self.current_node.name}): refgrad has no "
                     "instruction for it")

    def cpp_tensor_pre_hooks(self, hook_id: int, grad):
        """C++ tensor pre-hooks (retain_grad()'s among them) live in torch's C++ engine; the host hook
        calls them through torch, which works only while compiled autograd runs this graph."""
        name = self.hook("tensor_pre", _cpp_tensor_pre(hook_id))
        result = self.register(grad.type if isinstance(grad, _Register) else None)
        self.code.append(f"  {result} = hook {name} {self.operand(grad)}")
        return result

    def call_backward(self, ctx, saved_tensors, *grads):
        name = f"function{len(self.imported.functions)}"
        self.imported.functions[name] = _backward(ctx)
        self.declarations.append(f"  function &{name}")
        needs = list(ctx.needs_input_grad)
        saved = [self.saved(t, f"{name}_saved{i}") for i, t in enumerate(saved_tensors)]
        results = [self.register() if need else None for need in needs]
        need = "" if all(needs) else " need=[" + ",".join("1" if n else "0" for n in needs) + "]"
        self.code.append(f"  {self.results(results)} = call_backward &{name} "
                         f"{', '.join(self.operand(g) for g in grads)}  saved=[{', '.join(saved)}]{need}")
        return tuple(results)

    def call_method(self, target, args, kwargs):
        if any(isinstance(v, _Deferred) for v in pytree.tree_leaves((args, kwargs))):
            return _Deferred(self.current_node)
        return super().call_method(target, args, kwargs)

    # -- an AOT backward, CopySlices -------------------------------------------------------------------
    #
    # torch 2.13 has no single call for the backward of a torch.compile'd region (a CompiledFunction):
    # compiled autograd calls call_aot_bwd_prologue, copies the AOT backward graph's aten ops into its own
    # graph (aot0_mul_1 = torch.ops.aten.mul.Tensor(...)) and traces the epilogue. refgrad has no aten
    # instructions, so that region is one host function, as an autograd.Function's backward is: every
    # call from the prologue on that depends on it is deferred (_Deferred), and where an engine step first
    # needs one of its values, the calls it needs become one `call_backward` of a function that runs them.
    # CopySlices is traced as copy_slices_prologue (the slice of the base's grad the wrapped node gets),
    # the wrapped node's call, and copy_slices_epilogue (its result written back into the slice): the
    # node is a node call of the program, the prologue and epilogue host functions. The epilogue writes
    # into a view of the prologue's result, so its function runs the prologue again (regions are
    # recomputed from their inputs, never passed between functions), keeping that view a view.

    def materialize(self, tree):
        """``tree`` with each deferred value replaced by the register of a call that computes it."""
        deferred = [v.node for v in pytree.tree_leaves(tree) if isinstance(v, _Deferred)]
        missing = list(dict.fromkeys(n for n in deferred if n not in self.computed))
        if missing:
            # with every other result of the region that is ready and that an engine step will need, so
            # that one call computes them all (compiled autograd's reordering may put an accumulate-grad
            # between the region's results)
            ready = [n for n, v in self.env.items() if isinstance(v, _Deferred) and n not in self.computed
                     and n not in missing and any(self.needs_computed(user) for user in n.users)]
            self.compute(missing + ready)
        return pytree.tree_map(lambda v: self.computed[v.node] if isinstance(v, _Deferred) else v, tree)

    def needs_computed(self, user: torch.fx.Node) -> bool:
        """Whether this call takes computed values: an engine step, or the graph's output."""
        return user.op == "output" or (user.op == "call_function" and self.engine_step(user.target) is not None)

    def compute(self, wanted: list[torch.fx.Node]) -> None:
        region: set[torch.fx.Node] = set()
        stack = list(wanted)
        while stack:  # the deferred calls the wanted values need
            node = stack.pop()
            if node not in region and isinstance(self.env.get(node), _Deferred):
                region.add(node)
                stack += node.all_input_nodes
        ordered = [node for node in self.module.graph.nodes if node in region]
        inputs = list(dict.fromkeys(i for node in ordered for i in node.all_input_nodes if i not in region))
        grads = [i for i in inputs if isinstance(self.env[i], _Register)]
        saved = [i for i in inputs if isinstance(self.env[i], torch.Tensor)]
        constants = {i: self.env[i] for i in inputs if i not in grads and i not in saved}
        if any(isinstance(v, (_Register, _Deferred)) for v in pytree.tree_leaves(list(constants.values()))):
            raise _error(f"an AOT backward ({wanted[0].name}) takes a list of gradients; not imported yet")
        first = getattr(ordered[0].target, "__name__", "")
        kind = "copy_slices" if first.startswith("copy_slices") else "aot_backward"
        name = f"{kind}{len(self.imported.functions)}"
        self.imported.functions[name] = _region(ordered, grads, saved, constants, wanted)
        self.declarations.append(f"  function &{name}")
        results = [self.register() for _ in wanted]
        saved_names = [self.saved(self.env[i], f"{name}_{i.name}") for i in saved]
        self.code.append(f"  {self.results(results)} = call_backward &{name} "
                         f"{', '.join(str(self.env[g]) for g in grads)}  saved=[{', '.join(saved_names)}]")
        self.computed.update(zip(wanted, results))

    def output(self, target, args, kwargs):
        args, kwargs = self.materialize((args, kwargs))
        for i, grad in enumerate(args[0]):
            name = self.output_names[i] if i < len(self.output_names) else f"output{i}"
            name = self.spelled(name)
            self.imported.outputs.append(name)
            if isinstance(grad, _Register) and grad.type is None:
                raise _error(f"output {i}: refgrad needs its type, which the graph does not give")
            type_ = grad.type if isinstance(grad, _Register) else _tensor_type(grad)
            self.declarations.append(f"  output ^{name} : {type_}")
            self.code.append(f"  output ^{name} {self.operand(grad)}")
        return args[0]

    def text(self) -> str:
        return "\n".join([f"program {self.program_name}", *self.declarations, "code", *self.code]) + "\n"


@dataclass(frozen=True)
class _Deferred:
    """A value of a host region (an AOT backward, CopySlices' prologue or epilogue), computed by a host
    function when an engine step needs it."""

    node: torch.fx.Node


def _region(nodes: list[torch.fx.Node], grads: list[torch.fx.Node], saved: list[torch.fx.Node],
            constants: dict, outputs: list[torch.fx.Node]) -> Callable:
    """The host function of an AOT backward's region: runs its calls (the prologue, the copied aten ops,
    the epilogue) as compiled autograd's graph would, on the program's grads and saved tensors."""

    def call(saved_values, need, grad_values):
        env = dict(constants)
        env.update(zip(grads, [_to_torch(g) for g in grad_values]))
        env.update(zip(saved, [_to_torch(t) for t in saved_values]))
        with torch.no_grad():
            for node in nodes:
                args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
                if node.op == "call_method":
                    env[node] = getattr(args[0], node.target)(*args[1:], **kwargs)
                else:
                    env[node] = node.target(*args, **kwargs)
        return [env[node] for node in outputs]

    return call


def _tensor_pre(hook: Callable) -> Callable:
    """call_hook(hook, grad): the hook's result, or grad when it returns None."""
    return lambda grad: hook(_to_torch(grad))


def _listed(hook: Callable) -> Callable:
    """pre and post hooks take and return lists (torch's node hooks take tuples)."""

    def call(*lists):
        result = hook(*[[_to_torch(g) for g in grads] for grads in lists])
        return None if result is None else list(result)

    return call


def _cpp_tensor_pre(hook_id: int) -> Callable:
    def call(grad):
        try:
            return torch._C._dynamo.compiled_autograd.call_cpp_tensor_pre_hooks(hook_id, _to_torch(grad))
        except Exception as error:
            raise _error(f"C++ tensor pre-hook {hook_id} (retain_grad() and hooks registered in C++) runs only "
                         f"inside compiled autograd's call of this graph: {error}") from error

    return call


def _post_accumulate_grad(hook: Callable, variable: torch.Tensor) -> Callable:
    """torch calls hook(variable) after writing variable.grad; the hook sees refgrad's .grad there."""

    def call(leaf_name: str, grad):
        saved = variable.grad
        variable.grad = _to_torch(grad)
        try:
            hook(variable)
            after = variable.grad
        finally:
            variable.grad = saved
        return refgrad.NO_GRAD if after is None else after

    return call


def _backward(ctx) -> Callable:
    """external_utils.call_backward, as compiled autograd calls it: the Function's backward with a ctx
    whose saved_tensors are the program's; one result per forward input."""

    def call(saved, need, grads):
        with torch.no_grad():
            result = external_utils.call_backward(ctx, [_to_torch(t) for t in saved],
                                                  *[_to_torch(g) for g in grads])
        return [g if needed else None for g, needed in zip(result, need)]

    return call


def import_graph(gm: torch.fx.GraphModule, inputs, sizes, scalars, hooks, packed_data, *, names=None,
                 program_name: str = "backward", output_names=()) -> Imported:
    """The program of one compiled autograd graph, called with these values (what compiled autograd
    passes its compiled function). names: leaf names, as refgrad.torch.capture takes them
    (dict(model.named_parameters())). output_names: the names of the grads the graph returns
    (torch.autograd.grad's inputs), else output0, output1, ..."""
    importer = _Importer(gm, names, program_name, output_names)
    try:
        importer.run(inputs, sizes, scalars, hooks, packed_data)
        program = refgrad.Program.parse(importer.text(), f"<{program_name}>")
    except refgrad.Error:
        raise
    except Exception as error:
        raise _error(f"{type(error).__name__}: {error}") from error
    importer.imported.bundle = refgrad.make_bundle(program, importer.values)
    importer.imported.text = importer.text()
    return importer.imported
