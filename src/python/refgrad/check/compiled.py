"""Localization inside torch.compile'd regions, without changing what is compiled.

A torch.compile'd forward shows the autograd engine one node per compiled region,
CompiledFunctionBackward, whose backward is AOTAutograd's compiled backward: a function of the saved
tensors and the tangents (the gradients of the region's outputs) that returns the gradients of the
region's inputs. Adding probes to the forward would split it into other graphs (dynamo breaks the graph
at a TorchFunctionMode), so the run observed would not be the run that failed. Instead, check records
what the compiled artifact itself exposes, during a run that compiles exactly as the plain one:

1. every call of a compiled backward (AOTAutograd's _AutogradBackwardCompiler.get_or_compile hands the
   compiled callable to CompiledFunction._backward_impl; check wraps what it returns, so that each call's
   inputs and outputs are copied and the callable itself is kept: nothing is compiled differently);
2. when that callable is an FX GraphModule (aot_eager, and any backend whose compiler returns the graph it
   was given, changed or not), the graph is interpreted node by node on the recorded inputs: the same aten
   calls on the same tensors, so each FX node's value is the engine's own intermediate (checked: the
   interpreted outputs must equal the recorded ones bit for bit);
3. each FX node of AOTAutograd's backward carries meta["seq_nr"], the autograd sequence number of the
   forward op whose derivative it computes, and meta["stack_trace"], that op's forward source line. The
   forward ops of a region get consecutive sequence numbers, as the oracle's forward's grad_fn nodes do, so
   one offset maps the region's sequence numbers onto the oracle's nodes; it is accepted only when it is
   the one offset under which every sequence number is an oracle node created on the same source line;
4. the incoming grad of the oracle's node for sequence number s is the value that the FX nodes of s read
   from outside their own group (a tangent, or another group's result) with the shape of the oracle's
   register; where that is not one value, the node is not read.

Those readings are compared in the oracle's program order as probes' are (localize._Readings): the first
that disagrees names the node that made it, and only when that node's own incoming grad was read and
agrees (a node the graph computes with no op, a TBackward0 whose transpose was cancelled, is passed
through to the node before it); a disagreeing sum is taken apart into its parts; otherwise the report says
it cannot name the node.

Inductor's compiled code is not a graph: its intermediates are fused away. AOTAutograd keeps the graph it
handed Inductor (for compiled autograd); interpreted on the recorded inputs, its outputs are either the
compiled code's within rounding (_REPLAY_RTOL), and then its intermediates stand for Inductor's and are
read as above, or they are not, and the error is in Inductor's code: not localized, naming the compiled
backward.
"""
from __future__ import annotations

import collections
import contextlib
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.fx

import refgrad
from refgrad.aot.importing import RecordingInterpreter
from refgrad.check.aten_localize import localize_in_compiled_code
from refgrad.check.localize import _Point, _Readings, _consumer_of, _slot_error
from refgrad.check.oracle import _Oracle, _node_label
from refgrad.check.report import Divergence


@dataclass
class _BackwardCall:
    """One call of a compiled backward: the callable AOTAutograd ran, copies of its inputs (the saved
    tensors and SymInts, then the tangents) and of its outputs, and the graph it was compiled from."""

    compiled: Any
    inputs: list[Any]
    outputs: list[Any]
    aot_graph: Optional[torch.fx.GraphModule] = None
    compiler: Any = None  # AOTAutograd's _AutogradBackwardCompiler, to compile the graph again


def _copy(values) -> list[Any]:
    return [value.detach().clone() if isinstance(value, torch.Tensor) else value for value in values]


@contextlib.contextmanager
def recording_compiled_backwards():
    """Within it, every compiled backward AOTAutograd runs is recorded (a list of _BackwardCall, in call
    order). The callables are wrapped, not replaced: their code and compilation stay as they are."""
    import torch._dynamo  # noqa: F401  (runtime_wrappers imports dynamo; importing it first avoids a cycle)
    from torch._functorch._aot_autograd import runtime_wrappers

    compiler_class = runtime_wrappers._AutogradBackwardCompiler
    original = compiler_class.get_or_compile
    calls: list[_BackwardCall] = []

    def get_or_compile(self, *args, **kwargs):
        compiled = original(self, *args, **kwargs)
        lazy = self.lazy_backward_info
        aot_graph = getattr(lazy, "bw_module", None)
        if aot_graph is None and hasattr(lazy, "bw_module_fn"):  # a backward from AOTAutograd's cache
            aot_graph = lazy.bw_module_fn()

        def recorded(boxed_args):
            call = _BackwardCall(compiled, _copy(boxed_args), [], aot_graph, self)
            calls.append(call)
            if getattr(compiled, "_boxed_call", False):
                outputs = compiled(boxed_args)
            else:
                outputs = compiled(*boxed_args)
            call.outputs = _copy(outputs)
            return outputs

        recorded._boxed_call = True  # AOTAutograd then passes the argument list itself, as to a boxed callable
        return recorded

    compiler_class.get_or_compile = get_or_compile
    try:
        # A backward AOTAutograd's cache hands back was compiled in another process: no compiler is left to
        # compile its graph again (aten_localize). Off, the backward is compiled as the cache would have it.
        with torch._functorch.config.patch(enable_autograd_cache=False):
            yield calls
    finally:
        compiler_class.get_or_compile = original


def _graph_module_of(compiled: Any, depth: int = 4) -> Optional[torch.fx.GraphModule]:
    """The FX GraphModule a compiled callable runs, when it is one (possibly wrapped: dynamo's
    OptimizedModule, a bound forward, make_boxed_func's closure); None for anything else (Inductor's
    compiled code)."""
    if isinstance(compiled, torch.fx.GraphModule):
        return compiled
    if depth == 0:
        return None
    inner = getattr(compiled, "_orig_mod", None) or getattr(compiled, "__self__", None)
    if inner is not None:
        return _graph_module_of(inner, depth - 1)
    for cell in getattr(compiled, "__closure__", None) or ():
        try:
            found = _graph_module_of(cell.cell_contents, depth - 1)
        except ValueError:  # an empty cell
            continue
        if found is not None:
            return found
    return None


def _same_bits(a: Any, b: Any) -> bool:
    """Whether two outputs are the same: tensors of one dtype and shape with equal bits (NaN equal to NaN),
    or both not tensors."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor)
    return a.dtype == b.dtype and a.shape == b.shape and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


# Two float32 computations of one graph, fused differently, differ by rounding: a few ulps of float32
# (rtol 1.3e-6, assert_close's) per op, times 32 as the rule allows. The errors check hunts are larger.
_REPLAY_RTOL = 32 * 1.3e-6


def _within_rounding(replayed: Any, compiled: Any) -> bool:
    """Whether an output of the graph a compiled backward came from is the compiled code's, within rounding:
    max|replayed - compiled| <= _REPLAY_RTOL max|compiled| (exactly equal for float64 and non-floats)."""
    if not isinstance(replayed, torch.Tensor) or not isinstance(compiled, torch.Tensor):
        return _same_bits(replayed, compiled)
    if replayed.shape != compiled.shape:
        return False
    if not compiled.is_floating_point() or compiled.numel() == 0:
        return _same_bits(replayed, compiled)
    a, b = replayed.double(), compiled.double()
    return bool((a - b).abs().max() <= _REPLAY_RTOL * b.abs().max())


_FRAME = re.compile(r'\s*File "([^"]+)", line (\d+)')


def _source_line(stack_trace: Optional[str]) -> str:
    """The user's source line of an FX node's stack trace, written as capture writes a node's origin."""
    from refgrad.torch.builder import _REFGRAD_DIR, _TORCH_DIR

    for frame in reversed((stack_trace or "").splitlines()):
        match = _FRAME.match(frame)
        if match and not match.group(1).startswith((_TORCH_DIR, _REFGRAD_DIR)):
            return refgrad.display.source_line(match.group(1), int(match.group(2)))
    return ""


@dataclass
class _Region:
    """One compiled backward: the FX nodes of each forward op (by sequence number), the oracle's graph
    node each sequence number maps to, and the values the interpreted graph gave (None: not read)."""

    number: int
    call: _BackwardCall
    graph_module: Optional[torch.fx.GraphModule]
    values: Optional[dict[str, Any]] = None
    groups: dict[int, list[torch.fx.Node]] = field(default_factory=dict)
    node_of_seq: dict[int, int] = field(default_factory=dict)  # sequence number -> oracle graph node index
    group_of: dict[str, int] = field(default_factory=dict)  # FX node name -> sequence number
    replayed: bool = False  # read from the graph it was compiled from, not from its own
    problem: str = ""  # why the region's intermediates cannot be read ("" when they can)
    code_differs: bool = False  # its compiled code's outputs are not its graph's: the error is in that code
    replayed_values: Optional[dict[str, Any]] = None  # then, torch's run of that graph, node by node


def _groups(graph_module: torch.fx.GraphModule) -> tuple[dict[int, list], dict[str, int]]:
    """The call_function nodes by the sequence number of the forward op they differentiate; a node without
    one (added by a compiler pass) joins its first input's group."""
    group_of: dict[str, int] = {}
    groups: dict[int, list] = {}
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        seq = node.meta.get("seq_nr")
        if seq is None:
            seq = next((group_of[a.name] for a in node.all_input_nodes if a.name in group_of), None)
        if seq is None:
            continue
        group_of[node.name] = int(seq)
        groups.setdefault(int(seq), []).append(node)
    return groups, group_of


class _CompiledRegions(_Readings):
    """The readings of a torch.compile engine's gradients made without changing its compilation: the
    incoming grads of the oracle's nodes inside each compiled backward whose graph could be interpreted,
    and every leaf's .grad; the first divergence among them (localize._Readings), sums taken apart."""

    def __init__(self, oracle: _Oracle, calls: list[_BackwardCall], eager_incoming: dict[int, tuple],
                 leaf_grads: dict[str, Optional[torch.Tensor]]):
        super().__init__(oracle)
        self.leaf_grads = leaf_grads
        self.call_of_node = {index: pc for pc, index in oracle.node_calls()}
        self.regions = [self._region(number, call) for number, call in enumerate(calls)]
        self.read: dict[str, tuple[_Region, torch.fx.Node]] = {}  # point name -> the FX node it reads
        self.no_op_calls: set[int] = set()  # pcs of the nodes a readable region computes with no op
        self.engine_values: dict[str, torch.Tensor] = {}
        self.eager_values: dict[str, torch.Tensor] = {}
        for region in self.regions:
            if not region.problem:
                self._read(region, eager_incoming)
        self.add_leaf_points()

    # --------------------------------------------------------------- regions ---

    def _region(self, number: int, call: _BackwardCall) -> _Region:
        """Interprets the compiled backward's graph: its own, when the compiled callable is a graph (its values
        are the engine's), else the graph it was compiled from, when AOTAutograd kept it (Inductor's input:
        its values stand for the engine's only where its outputs are the compiled code's, within rounding)."""
        graph_module = _graph_module_of(call.compiled)
        replayed = graph_module is None
        if replayed:
            graph_module = call.aot_graph
        region = _Region(number, call, graph_module, replayed=replayed)
        compiled_code = f"compiled backward {number} is compiled code ({type(call.compiled).__name__}), not a graph"
        if graph_module is None:
            region.problem = f"{compiled_code}, and the graph it was compiled from was not kept"
            return region
        recorder = RecordingInterpreter(graph_module)
        try:
            outputs = recorder.run(*_copy(call.inputs))
        except Exception as error:  # an interpreted graph that fails cannot be read; say so
            region.problem = f"interpreting compiled backward {number}'s graph raised {type(error).__name__}: {error}"
            return region
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        if len(outputs) != len(call.outputs):
            region.problem = f"compiled backward {number}'s graph, interpreted, gives another number of outputs"
            return region
        if not replayed and not all(map(_same_bits, outputs, call.outputs)):
            region.problem = (f"compiled backward {number}'s graph, interpreted, does not give the outputs its "
                              "compiled callable gave, bit for bit")
            return region
        if replayed and not all(map(_within_rounding, outputs, call.outputs)):
            region.problem = (f"{compiled_code}, and the graph it was compiled from, interpreted, gives other "
                              f"outputs (beyond {_REPLAY_RTOL:.0e} of their size): the error is in the compiled "
                              "code, whose intermediate gradients are fused away")
            region.code_differs, region.replayed_values = True, recorder.values
            return region
        region.values = recorder.values
        region.groups, region.group_of = _groups(graph_module)
        region.node_of_seq, region.problem = self._map(region)
        if not region.problem:
            self._add_trailing_nodes(region)
        return region

    def _add_trailing_nodes(self, region: _Region) -> None:
        """Adds to the region the nodes just before leaves that its graph computes with no op (a TBackward0
        whose transpose the compiler cancelled): a node one sequence number below the region's, whose every
        child is the AccumulateGrad of a leaf whose .grad is, bit for bit, one of the region's outputs (the
        compiled backward handed it to the leaf: nothing ran between)."""
        nodes = self.oracle.capture.graph.nodes
        by_seq = {node.sequence_nr: index for index, node in enumerate(nodes) if node.kind != "accumulate_grad"}
        outputs = [output for output in region.call.outputs if isinstance(output, torch.Tensor)]
        offset = nodes[region.node_of_seq[min(region.node_of_seq)]].sequence_nr - min(region.node_of_seq)

        def handed_over(edge) -> bool:
            child = nodes[edge.node]
            grad = self.leaf_grads.get(child.leaf) if child.kind == "accumulate_grad" else None
            return grad is not None and any(_same_bits(grad.detach().cpu(), output.cpu()) for output in outputs)

        seq = min(region.node_of_seq) - 1
        while seq + offset in by_seq:
            edges = [edge for edge in nodes[by_seq[seq + offset]].next_edges if edge is not None]
            if not edges or not all(map(handed_over, edges)):
                break
            region.node_of_seq[seq] = by_seq[seq + offset]
            seq -= 1

    def _map(self, region: _Region) -> tuple[dict[int, int], str]:
        """The one offset that maps every sequence number of the region onto an oracle node created on the
        same source line (see the module docstring); an empty map and the reason when there is not one."""
        nodes = self.oracle.capture.graph.nodes
        by_seq = {node.sequence_nr: index for index, node in enumerate(nodes) if node.kind != "accumulate_grad"}
        lines = {seq: next((line for line in map(_source_line, (n.meta.get("stack_trace") for n in group)) if line), "")
                 for seq, group in region.groups.items()}
        if not lines:
            return {}, f"compiled backward {region.number}'s graph has no nodes with sequence numbers"
        first = min(lines)
        found = []
        for seq in by_seq:
            offset = seq - first
            mapping = {s: by_seq.get(s + offset) for s in lines}
            if any(index is None for index in mapping.values()):
                continue
            if all(not line or not nodes[mapping[s]].origin or line == nodes[mapping[s]].origin
                   for s, line in lines.items()):
                found.append(mapping)
        if len(found) != 1:
            return {}, (f"the forward ops of compiled backward {region.number} match "
                        f"{'no' if not found else len(found)} runs of the oracle's nodes (by sequence number and "
                        "source line)")
        # the forward ops between whose derivative is no op at all (AddBackward0 passes its grad on): their
        # nodes are in the region too, with no group of their own
        offset = next(index_seq for index_seq, index in by_seq.items() if index == found[0][first]) - first
        for seq in range(first, max(lines) + 1):
            if seq not in found[0] and seq + offset in by_seq:
                found[0][seq] = by_seq[seq + offset]
        return found[0], ""

    def _read(self, region: _Region, eager_incoming: dict[int, tuple]) -> None:
        """A point for each oracle node of the region whose incoming grad is one value of the graph."""
        code = self.oracle.capture.program.code
        graph_nodes = self.oracle.capture.graph.nodes
        read: dict[tuple[int, int], torch.fx.Node] = {}  # (oracle node, incoming slot) -> the FX node read
        for seq, group in region.groups.items():
            index = region.node_of_seq[seq]
            pc = self.call_of_node.get(index)
            if pc is None:
                continue
            members = {node.name for node in group}
            outside = []
            for node in group:
                for source in node.all_input_nodes:
                    saved = source.op == "placeholder" and not source.name.startswith("tangents")
                    if source.name not in members and not saved and source not in outside:
                        outside.append(source)
            for slot, register in enumerate(code[pc].operands):
                fitting = [source for source in outside if self._fits(region, source, register)]
                if len(fitting) == 1:
                    read[(index, slot)] = fitting[0]
        self.no_op_calls.update(self.call_of_node[index] for seq, index in region.node_of_seq.items()
                                if seq not in region.groups and index in self.call_of_node)
        # a node whose derivative is no op passes its incoming grad on unchanged: what a child reads through
        # an edge from it (when no other node adds into that slot) is its incoming grad too
        feeds = collections.Counter((edge.node, edge.input_nr) for node in graph_nodes
                                    for edge in node.next_edges if edge is not None)
        for seq, index in region.node_of_seq.items():
            pc = self.call_of_node.get(index)
            if seq in region.groups or pc is None or len(code[pc].operands) != 1:
                continue
            passed = {read.get((edge.node, edge.input_nr)) for edge in graph_nodes[index].next_edges
                      if edge is not None and feeds[(edge.node, edge.input_nr)] == 1}
            if len(passed) == 1 and None not in passed and self._fits(region, next(iter(passed)), code[pc].operands[0]):
                read[(index, 0)] = next(iter(passed))
        for (index, slot), source in read.items():
            pc = self.call_of_node[index]
            name = f"~region{region.number}:{source.name}:{index}"  # no leaf's name begins with "~"
            self.read[name] = (region, source)
            self.engine_values[name] = region.values[source.name]
            eager = eager_incoming.get(index, ())
            if slot < len(eager) and eager[slot] is not None:
                self.eager_values[name] = eager[slot]
            where = (f"the graph compiled backward {region.number} was compiled from (interpreted; its outputs are "
                     "the compiled code's within rounding)" if region.replayed else f"compiled backward {region.number}")
            self.points.append(_Point(pc, code[pc].operands[slot], name, f"`{source.name}` in {where}"))

    def _fits(self, region: _Region, source: torch.fx.Node, register: Optional[str]) -> bool:
        """Whether the FX node's value can be the oracle register's: a tensor of its shape."""
        if register is None:
            return False
        value = region.values.get(source.name)
        return isinstance(value, torch.Tensor) and list(value.shape) == list(self.oracle.register(register).shape)

    # ---------------------------------------------------------- the verdict ---

    def first_divergence(self, grads: dict, eager_grads: dict, rule, is_eager: bool, graph: str) -> Divergence:
        """Over the regions' readings and the leaves' .grad (``grads``); not localized when the first
        disagreeing reading's node did not have its own incoming grad read, or lies in a region that could
        not be read."""
        for region in self.regions:
            if region.code_differs:  # that region's code computes something else than its graph: look inside it
                divergence = localize_in_compiled_code(region.number, region.graph_module, region.call.inputs,
                                                       region.call.compiler, rule, region.replayed_values)
                if divergence.localized:
                    return divergence
                region.problem += f"; {divergence.reason}"
        if not self.engine_values:
            problems = [region.problem for region in self.regions if region.problem] or ["no gradient of them was read"]
            return Divergence(reason=f"the engine ran {len(self.regions)} compiled backward(s) and none could be read: "
                                     + "; ".join(problems), graph=graph)
        return super().first_divergence({**grads, **self.engine_values}, {**eager_grads, **self.eager_values},
                                         rule, is_eager, graph)

    def _blame(self, point, measured, agreeing, graph, values) -> Divergence:
        producers = self.producers(point.register)
        if len(producers) > 1:
            return self._blame_sum(point, measured, producers, agreeing, graph, values)
        passed_through = []
        while len(producers) == 1 and producers[0] not in agreeing and producers[0] in self.no_op_calls:
            # the compiled graph computes this node with no op at all (a transpose cancelled by another): the
            # error cannot arise in it, so it lies with the node that makes its incoming grad
            passed_through.append(_node_label(self._graph_node(producers[0])))
            operands = [r for r in self.oracle.capture.program.code[producers[0]].operands if r is not None]
            producers = self.producers(operands[0]) if len(operands) == 1 else []
        if passed_through and len(producers) == 1 and producers[0] in agreeing:
            return self._divergence_at(
                producers[0], measured, f"its outgoing grad, read at {point.what} (the incoming grad of "
                f"{self._consumer(point)}) through {', '.join(passed_through)}, which the compiled graph computes "
                "with no op", point.register, values, graph)
        if producers and min(producers) not in agreeing:
            node = self._graph_node(min(producers))
            unreadable = [region.problem for region in self.regions if region.problem]
            return Divergence(
                reason=(f"the first gradient that disagrees, at {point.what}, comes from {_node_label(node)}, whose "
                        "own incoming gradient could not be read, so the error is in it or in a node before it"
                        + (f" ({'; '.join(unreadable)})" if unreadable else "")),
                graph=graph)
        return super()._blame(point, measured, agreeing, graph, values)

    def _blame_sum(self, point, measured, producers: list[int], agreeing: set, graph: str, values: dict) -> Divergence:
        """A disagreeing gradient that several nodes add into: the compiled graph computes it as a tree of
        aten adds; each part, matched to the node that made it (by the part's group, or as the incoming grad
        a pass-through node hands on), is compared with that node's outgoing grad. A part that disagrees
        names its node (when that node's incoming grad agrees); parts that all agree name the consumer,
        whose input buffer was summed wrongly (DESIGN.md); anything else is not localized."""
        region, summed = self.read.get(point.name, (None, None))
        names = ", ".join(_node_label(self._graph_node(pc)) for pc in producers)
        cannot = Divergence(reason=(f"the first gradient that disagrees, at {point.what}, is the sum of what "
                                    f"{len(producers)} nodes ({names}) add into the incoming grad of "
                                    f"{self._consumer(point)}, and the compiled graph does not show each part"),
                            graph=graph)
        if region is None:
            return cannot
        while summed.op == "call_function" and "seq_nr" not in summed.meta and summed.args \
                and isinstance(summed.args[0], torch.fx.Node):
            summed = summed.args[0]  # an op a compiler pass added after the sum: part of computing the sum
        parts, stack = [], [summed]
        while stack:
            node = stack.pop()
            if node.op == "call_function" and node.target is torch.ops.aten.add.Tensor and not node.kwargs \
                    and all(isinstance(arg, torch.fx.Node) for arg in node.args):
                stack.extend(node.args)
            else:
                parts.append(node)
        part_of = {}
        for pc in producers:
            index = self.oracle.capture.node_of_instruction[pc]
            mine = [part for part in parts if region.node_of_seq.get(region.group_of.get(part.name)) == index
                    or any(read == (region, part) and name.endswith(f":{index}") for name, read in self.read.items())]
            if len(mine) != 1:
                return cannot
            part_of[pc] = mine[0]
        if len(set(map(id, part_of.values()))) != len(parts):
            return cannot
        registers = {pc: self._outgoing_register(pc, point) for pc in part_of}
        if None in registers.values():
            return cannot
        values = {**values, **{f"%{registers[pc]}": region.values[part.name] for pc, part in part_of.items()}}
        for pc, part in part_of.items():
            register = registers[pc]
            part_measured = _slot_error(region.values[part.name], self.oracle.register(register), None, self.rule,
                                        False, self.oracle.register_noise(register))
            if not part_measured.agrees:
                if pc not in agreeing:
                    return cannot
                return self._divergence_at(pc, part_measured, f"its outgoing grad, read at `{part.name}` in compiled "
                                           f"backward {region.number} (one of the {len(producers)} parts of "
                                           f"{point.what})", register, values, graph)
        divergence = self._divergence_at(point.pc, measured, (
            f"incoming grad, the sum of its input buffer ({point.what}): each of the {len(producers)} gradients "
            f"added into it (from {names}) agrees, their sum does not"), point.register, values, graph)
        divergence.values.update({f"%{register}": values[f"%{register}"].detach().cpu().contiguous()
                                  for register in registers.values()})
        return divergence

    def _outgoing_register(self, pc: int, point: _Point) -> Optional[str]:
        """The oracle's register for what the node called at ``pc`` hands to the slot ``point`` reads (a
        validated outgoing grad of it that feeds that register)."""
        for register in self.oracle.validated_outputs(pc):
            if register is not None and pc in self.producers(register) and \
                    self._feeds(register, point.register):
                return register
        return None

    def _feeds(self, register: str, target: str) -> bool:
        """Whether ``register`` is ``target`` or one of the registers added (or hooked) into it."""
        if register == target:
            return True
        pc = self.defined_at.get(target)
        if pc is None:
            return False
        instr = self.oracle.capture.program.code[pc]
        if instr.op in ("add", "validate", "hook"):
            return any(operand is not None and self._feeds(register, operand) for operand in instr.operands)
        return False

    def _graph_node(self, pc: int):
        return self.oracle.capture.graph.nodes[self.oracle.capture.node_of_instruction[pc]]

    def _consumer(self, point: _Point) -> str:
        return _consumer_of(self.oracle.capture.program.code[point.pc])

    def describe(self) -> str:
        own = sum(1 for region in self.regions if not region.problem and not region.replayed)
        replayed = sum(1 for region in self.regions if not region.problem and region.replayed)
        return (f"the engine's plain run, compiled as it was (no probes), its {len(self.regions)} compiled backward(s) "
                f"recorded: {own} read node by node from the graph they run, {replayed} from the graph they were "
                f"compiled from (its outputs the compiled code's within rounding), {len(self.points)} gradients "
                "compared")
