"""Localization inside compiled autograd's own graph, read from the run that failed.

Compiled autograd (torch._dynamo.compiled_autograd) traces a backward into an FX graph whose calls are the
engine's own steps, made functional (docs/compiled_autograd.md): `ops.<Node>(grads, needs_input_grad,
*saved)` for each built-in node, `ops.validate_outputs` after it, `torch.add` where gradients meet,
`call_accumulate_grad` for each leaf. It hands that graph to its compiler (the engine's backend) and calls
what the compiler returns with the backward's values. During every engine's plain run, check records each
such graph and copies of the values its compiled code was called with (recording_compiled_autograd: the
compiler is wrapped, not replaced, so the graph is compiled as it would be without check). For an engine
that failed:

1. the graph is interpreted node by node (torch.fx.Interpreter) on copies of those values: each
   `ops.<Node>` call runs torch's functional node as the graph calls it. AccumulateGrad is made functional
   (the leaf's new .grad is computed, no leaf is written). A graph that calls hooks is not interpreted:
   that would call fn's hooks a second time.
2. the interpreted results (each leaf's new .grad, and what the graph returns) stand for the compiled code's
   when they equal them bit for bit (a backend that runs the graph's calls as they are: "eager", aot_eager)
   or within rounding (fused code: Inductor's; compiled._REPLAY_RTOL, as for torch.compile's regions).
   Otherwise the compiled code computes something else than the graph it was given (the backend compiled it
   wrongly), no node's value can be read from it, and check falls back on node hooks (a second run).
3. each node call of the graph is matched with a node of the oracle's graph: refgrad's functionalizer
   orders the oracle's graph as compiled autograd does (Order.COMPILED_AUTOGRAD), and its k-th node call is
   the graph's k-th, checked by node name (the engine's ReshapeAliasBackward0 is the oracle's ViewBackward0:
   localize._SAME_DERIVATIVE) and by the shapes of the incoming grads; an AccumulateGrad by its leaf.
4. each node's incoming grads (the call's grads: its input buffer, summed by the graph's torch.add) and its
   validated outgoing grads (the validate_outputs after it) are compared with the oracle's registers under
   the rule, in the graph's own order, by localize._Localizer: the first node whose incoming grads agree and
   one of whose outgoing grads does not is named.

refgrad.check.swap uses the same recording and matching to swap node implementations.
"""
from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.fx
from torch._dynamo import external_utils

from refgrad.aot.importing import RecordingInterpreter
from refgrad.check.compiled import _REPLAY_RTOL, _copy, _same_bits, _within_rounding
from refgrad.check.localize import _SAME_DERIVATIVE, _NodeRecorder
from refgrad.check.oracle import _NODE_OPS, _Oracle
from refgrad.compiled_autograd.importing import _OPS_MODULE
from refgrad.graph import FunctionalizeOptions, Order, functionalize


@dataclass
class _GraphCall:
    """One call of the code compiled from one compiled autograd graph: the graph as compiled autograd traced
    it, copies of the values it was called with (the graph steals its ``inputs``), the tensors compiled
    autograd passed (by the id of their copy: a leaf is known by its identity) and copies of what it returned."""

    graph_module: torch.fx.GraphModule
    inputs: list[Any]
    sizes: list[Any]
    scalars: list[Any]
    hooks: list[Any]
    packed_data: list[Any]
    passed: dict[int, torch.Tensor] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list)


@contextlib.contextmanager
def compiling_compiled_autograd_graphs(wrap: Callable[[torch.fx.GraphModule, Callable], Callable]):
    """Within it, each graph compiled autograd traces goes to ``wrap(graph_module, compiler)`` instead of to its
    compiler (the one given to compiled_autograd._enable); what wrap returns is what compiled autograd calls
    with (inputs, sizes, scalars, hooks, packed_data)."""
    from torch._dynamo.compiled_autograd import AutogradCompilerInstance

    original = AutogradCompilerInstance.end_capture

    def end_capture(self, outputs):
        compiler = self.compiler_fn  # end_capture hands the finished graph to it
        self.compiler_fn = lambda graph_module: wrap(graph_module, compiler)
        try:
            return original(self, outputs)
        finally:
            self.compiler_fn = compiler

    AutogradCompilerInstance.end_capture = end_capture
    try:
        yield
    finally:
        AutogradCompilerInstance.end_capture = original


@contextlib.contextmanager
def recording_compiled_autograd():
    """Within it, every call of code compiled from a compiled autograd graph is recorded (a list of
    _GraphCall, in call order); the graph is compiled by the engine's own compiler, unchanged."""
    calls: list[_GraphCall] = []

    def wrap(graph_module, compiler):
        compiled = compiler(graph_module)

        def recorded(inputs, sizes, scalars, hooks, packed_data):
            copies = _copy(inputs)
            passed = {id(copy): tensor for copy, tensor in zip(copies, inputs) if isinstance(tensor, torch.Tensor)}
            call = _GraphCall(graph_module, copies, list(sizes), list(scalars), list(hooks), list(packed_data), passed)
            calls.append(call)
            outputs = compiled(inputs, sizes, scalars, hooks, packed_data)
            call.outputs = _copy(outputs or [])
            return outputs

        return recorded

    with compiling_compiled_autograd_graphs(wrap):
        yield calls


# ----------------------------------------------------------------- the graph's calls ---

def is_node_op(target: Any) -> bool:
    """Whether an FX call target is compiled autograd's functional op of a built-in node, `ops.<Node>`."""
    return getattr(target, "__module__", None) == _OPS_MODULE and target.__name__ != "validate_outputs"


def node_name(target: Any) -> str:
    """PyTorch's name of the node an `ops.<Node>` target runs (hand-written nodes keep their C++ namespace in
    the op's name: torch::autograd::CopyBackwards)."""
    return target.__name__.removeprefix("torch::autograd::")


def node_calls(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The graph's node calls, in its order: `ops.<Node>` and call_backward (an autograd.Function)."""
    return [node for node in graph_module.graph.nodes if node.op == "call_function"
            and (is_node_op(node.target) or node.target is external_utils.call_backward)]


def _accumulate_calls(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [node for node in graph_module.graph.nodes if node.op == "call_function"
            and node.target is external_utils.call_accumulate_grad]


def _hook_calls(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The calls of fn's hooks (a saved tensor's unpack hook is not one: it makes a saved tensor)."""
    cpp_hooks = torch._C._dynamo.compiled_autograd.call_cpp_tensor_pre_hooks
    return [node for node in graph_module.graph.nodes if node.op == "call_function" and (
        (node.target is external_utils.call_hook and node.kwargs.get("hook_type") != "unpack_hook")
        or node.target is cpp_hooks)]


def _graph_label(node: torch.fx.Node) -> str:
    """How the report names a call of the graph: its FX name and what it calls."""
    target = node_name(node.target) if is_node_op(node.target) else getattr(node.target, "__name__", str(node.target))
    return f"`{node.name}` ({target})"


@dataclass
class _Match:
    """The graph's node calls matched with the oracle's nodes: for each FX node name, the oracle's graph node
    index and the pc of its call in the oracle's program; ``problem`` says why they could not be matched."""

    index_of: dict[str, int] = field(default_factory=dict)
    pc_of: dict[str, int] = field(default_factory=dict)
    problem: str = ""


def match_node_calls(oracle: _Oracle, graph_module: torch.fx.GraphModule,
                     leaf_of: Optional[Callable[[torch.fx.Node], Optional[str]]] = None) -> _Match:
    """Each node call of compiled autograd's graph with the oracle's graph node it runs (see the module
    docstring, 3). ``leaf_of`` names the leaf of a call_accumulate_grad (None: those are not matched)."""
    capture = oracle.capture
    options = FunctionalizeOptions(order=Order.COMPILED_AUTOGRAD, accumulate_grad=capture.accumulate_grad)
    bundle, node_of_instruction = functionalize(capture.graph, options)
    in_order = [(instr, node_of_instruction[pc]) for pc, instr in enumerate(bundle.program.code)
                if instr.op in _NODE_OPS and instr.op != "accumulate_grad" and node_of_instruction[pc] >= 0]
    calls = node_calls(graph_module)
    match = _Match()
    call_of_node = {index: pc for pc, index in oracle.node_calls()}
    if len(calls) != len(in_order):
        match.problem = (f"compiled autograd's graph makes {len(calls)} node calls, the oracle's program "
                         f"{len(in_order)}")
        return match
    for position, (call, (instr, index)) in enumerate(zip(calls, in_order)):
        same = (instr.op == "call" and is_node_op(call.target)
                and _SAME_DERIVATIVE.get(node_name(call.target), node_name(call.target)) == instr.node) or \
               (instr.op == "call_backward" and call.target is external_utils.call_backward)
        if not same or index not in call_of_node:
            match.problem = (f"node call {position} of compiled autograd's graph, {_graph_label(call)}, is not the "
                             f"oracle's in compiled autograd's order ({instr.op} {instr.node})")
            return match
        match.index_of[call.name], match.pc_of[call.name] = index, call_of_node[index]
    if leaf_of is not None:
        by_leaf = {node.leaf: i for i, node in enumerate(capture.graph.nodes) if node.kind == "accumulate_grad"}
        for call in _accumulate_calls(graph_module):
            index = by_leaf.get(leaf_of(call))
            if index is None or index not in call_of_node:
                match.problem = f"{_graph_label(call)} accumulates into a leaf the oracle's program does not"
                return match
            match.index_of[call.name], match.pc_of[call.name] = index, call_of_node[index]
    return match


# ------------------------------------------------------------------- the reading ---


class _Interpreter(RecordingInterpreter):
    """Runs compiled autograd's graph node by node, keeping every node's value, with AccumulateGrad made
    functional: the new .grad of each leaf is kept in ``accumulated`` (by FX node name), no leaf is written."""

    def __init__(self, graph_module: torch.fx.GraphModule):
        super().__init__(graph_module)
        self.accumulated: dict[str, tuple[torch.Tensor, Optional[torch.Tensor]]] = {}  # name -> (variable, new .grad)

    def run_node(self, node):
        self.current = node
        return super().run_node(node)

    def call_function(self, target, args, kwargs):
        if target is external_utils.call_accumulate_grad:
            variable, old, grad = args[:3]
            new = old if grad is None else (grad.detach().clone() if old is None else old + grad)
            self.accumulated[self.current.name] = (variable, new)
            return None
        if target is external_utils.FakeCompiledAutogradEngine._exec_final_callbacks_stub:
            return None  # queue_callback()'s callbacks: the engine's business, not a gradient
        return super().call_function(target, args, kwargs)


@dataclass
class GraphReading:
    """What compiled autograd's graph showed, node by node: a _NodeRecorder (incoming and outgoing grads by
    the oracle's graph node index) and the (pc, index) of its calls in the graph's order; or, in
    ``problem``, why it could not be read. ``description`` says what was read, for Divergence.graph."""

    recorder: Optional[_NodeRecorder] = None
    calls: list[tuple[int, int]] = field(default_factory=list)
    description: str = ""
    problem: str = ""


def read_graph(oracle: _Oracle, calls: list[_GraphCall], grads: dict[str, Optional[torch.Tensor]],
               leaf_names: dict[int, str]) -> GraphReading:
    """The per-node values of the engine's compiled autograd graph (the module docstring's steps 1-3).
    ``grads``: the engine's gradients from the same run; ``leaf_names``: id(leaf tensor) -> its name."""
    if len(calls) != 1:
        return GraphReading(problem=f"the backward called {len(calls)} compiled autograd graphs; one is read")
    call = calls[0]
    graph_module = call.graph_module
    hooks = _hook_calls(graph_module)
    if hooks:
        return GraphReading(problem=f"compiled autograd's graph calls {len(hooks)} hook(s) ("
                                    + ", ".join(_graph_label(node) for node in hooks[:3])
                                    + "); interpreting it would call fn's hooks a second time")
    interpreter = _Interpreter(graph_module)
    try:
        # the recorded copies themselves (call.passed knows a leaf by its copy's id); nothing writes into them
        returned = interpreter.run(list(call.inputs), list(call.sizes), list(call.scalars), list(call.hooks),
                                   list(call.packed_data))
    except Exception as error:  # a graph that cannot be interpreted cannot be read; say so
        return GraphReading(problem=f"interpreting compiled autograd's graph raised {type(error).__name__}: {error}")

    def leaf_of(node: torch.fx.Node) -> Optional[str]:
        variable = interpreter.accumulated.get(node.name, (None, None))[0]
        tensor = call.passed.get(id(variable))
        return None if tensor is None else leaf_names.get(id(tensor))

    exact, problem = _compare_results(interpreter, list(returned or []), call.outputs, grads, leaf_of)
    if problem:
        return GraphReading(problem=problem)
    match = match_node_calls(oracle, graph_module, leaf_of)
    if match.problem:
        return GraphReading(problem=match.problem)
    recorder = _NodeRecorder()
    values = interpreter.values
    for node in node_calls(graph_module):
        index = match.index_of[node.name]
        # ops.<Node>(grads, needs_input_grad, *saved); call_backward(ctx, saved_tensors, *grads)
        grads = node.args[2:] if node.target is external_utils.call_backward else node.args[0]
        recorder.incoming[index] = tuple(values.get(g.name) if isinstance(g, torch.fx.Node) else None for g in grads)
        recorder.outgoing[index] = tuple(_validated(node, values))
    for node in _accumulate_calls(graph_module):
        grad = node.args[2]
        recorder.incoming[match.index_of[node.name]] = (values.get(grad.name) if isinstance(grad, torch.fx.Node)
                                                        else None,)
    misfit = _misfit(oracle, match, recorder)
    if misfit:
        return GraphReading(problem=misfit)
    order = [(match.pc_of[node.name], match.index_of[node.name]) for node in graph_module.graph.nodes
             if node.name in match.index_of]
    agreement = "bit for bit" if exact else f"within rounding ({_REPLAY_RTOL:.0e} of their size)"
    description = (f"compiled autograd's graph of the plain run ({len(order)} node calls), interpreted node by "
                   f"node on the values its compiled code was called with (the results are the compiled code's "
                   f"{agreement}), compared in the graph's order")
    return GraphReading(recorder, order, description)


def _validated(call: torch.fx.Node, values: dict[str, Any]) -> list[Any]:
    """A node call's outgoing grads as the validate_outputs after it made them (its own results where no
    validate_outputs takes them: after an AOT backward compiled autograd has none)."""
    for user in call.users:
        for validate in user.users:
            if _is_validate(validate):
                taken = validate.args[0]
                if all(g is None or (g.target is operator.getitem and g.args[0] is call) for g in taken):
                    return list(values.get(validate.name) or [])
    return list(values.get(call.name) or [])


def _is_validate(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "__module__", None) == _OPS_MODULE \
        and node.target.__name__ == "validate_outputs"


def _compare_results(interpreter: _Interpreter, returned: list, outputs: list, grads: dict,
                     leaf_of: Callable) -> tuple[bool, str]:
    """Whether the interpreted graph's results (each leaf's new .grad, the returned grads) are the compiled
    code's: (True, "") bit for bit, (False, "") within rounding, else a problem saying which differs."""
    compared: list[tuple[str, Any, Any]] = []
    for node in _accumulate_calls(interpreter.module):
        leaf = leaf_of(node)
        if leaf is None:
            return False, f"{_graph_label(node)} accumulates into a tensor that is not one of fn's leaves"
        compared.append((f"@{leaf}", interpreter.accumulated[node.name][1], grads.get(leaf)))
    if len(returned) != len(outputs):
        return False, "the interpreted graph returns another number of grads than its compiled code"
    compared += [(f"output {i}", mine, theirs) for i, (mine, theirs) in enumerate(zip(returned, outputs))]
    if all(_same_bits(mine, theirs) for _, mine, theirs in compared):
        return True, ""
    differ = [name for name, mine, theirs in compared if not _within_rounding(mine, theirs)]
    if differ:
        return False, (f"compiled autograd's graph, interpreted, does not give what its compiled code gave ("
                       f"{', '.join(differ)} beyond {_REPLAY_RTOL:.0e} of their size): the backend compiled the "
                       "graph into code that computes something else, whose intermediate gradients cannot be read "
                       "from the graph")
    return False, ""


def _misfit(oracle: _Oracle, match: _Match, recorder: _NodeRecorder) -> str:
    """"" when every matched call's incoming grads have the shapes of the oracle's registers, else why not: a
    call matched with the wrong node would be judged against another node's gradients."""
    code = oracle.capture.program.code
    for name, index in match.index_of.items():
        operands = code[match.pc_of[name]].operands
        incoming = recorder.incoming.get(index, ())
        if len(incoming) != len(operands):
            return f"`{name}` has {len(incoming)} incoming grads, the oracle's node {len(operands)}"
        for value, register in zip(incoming, operands):
            reference = oracle.register(register)
            if value is not None and reference is not None and list(value.shape) != list(reference.shape):
                return (f"`{name}`'s incoming grad has shape {list(value.shape)}, the oracle's register %{register} "
                        f"{list(reference.shape)}")
    return ""
