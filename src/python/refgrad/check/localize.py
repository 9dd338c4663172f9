"""Localization: the first divergent node of a failed engine, by node hooks (engines that run torch's
autograd graph) or by probes (black boxes)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

import refgrad.torch as refgrad_torch
from refgrad.engines import Forward
from refgrad.check.oracle import _NODE_OPS, _Oracle, _node_label
from refgrad.check.report import Divergence
from refgrad.check.rule import _Measured, _Rule, _max_abs, _max_magnitude
from refgrad.check.subject import _PROBE, _ProbeMode, _Subject


def _clone_all(grads) -> tuple:
    return tuple(None if g is None else g.detach().clone() for g in grads)


def _walk(run: Forward) -> refgrad_torch._Walk:
    """torch's graph of the forward's backward, walked as refgrad.torch.capture walks it, so that node k is the
    oracle's graph node k: from the outputs' nodes, and under torch.autograd.grad (check's inputs=) from the
    AccumulateGrad of each input too (capture starts there as well: an input no output reaches has a node)."""
    starts = [torch.autograd.graph.get_gradient_edge(output).node for output in run.outputs]
    if run.inputs is not None:
        starts += [torch.autograd.graph.get_gradient_edge(run.leaves[name]).node for name in run.inputs
                   if not name.startswith(_PROBE)]
    return refgrad_torch._Walk(starts)


class _NodeRecorder:
    """observe= for engines that run torch's autograd graph: hooks every grad_fn node of the forward
    (walked as refgrad.torch.capture walks it, so that node k is the oracle's graph node k) to record
    its incoming grads (pre-hook) and validated outgoing grads (post-hook)."""

    def __init__(self):
        self.names: list[str] = []
        self.incoming: dict[int, tuple] = {}
        self.outgoing: dict[int, tuple] = {}
        self.leaves: dict[str, Optional[torch.Tensor]] = {}

    def __call__(self, run: Forward) -> None:
        walk = _walk(run)
        self.names = [node.name() for node in walk.order]
        incoming, outgoing = self.incoming, self.outgoing
        for index, node in enumerate(walk.order):
            node.register_prehook(lambda grads, index=index: incoming.__setitem__(index, _clone_all(grads)))
            node.register_hook(lambda inputs, grads, index=index: outgoing.__setitem__(index, _clone_all(inputs)))


def _slot_error(engine_value, oracle_value, eager_value, rule: _Rule, is_eager: bool,
                noise: Optional[float]) -> _Measured:
    """One slot (an incoming or outgoing grad) against R; an undefined grad counts as zeros, a shape
    mismatch as an infinite error."""
    if oracle_value is None and engine_value is None:
        return _Measured(0.0, 0.0, 0.0)
    reference = oracle_value if oracle_value is not None else torch.zeros_like(engine_value, dtype=torch.float64)
    actual = engine_value if engine_value is not None else torch.zeros_like(reference)
    if list(actual.shape) != list(reference.shape):
        return _Measured(math.inf, 0.0, _max_magnitude(reference))
    eager_error = 0.0
    if not is_eager and eager_value is not None and list(eager_value.shape) == list(reference.shape):
        eager_error = _max_abs(eager_value, reference)
    dtype = actual.dtype if actual.is_floating_point() else torch.float64
    scale = _max_magnitude(reference)
    return _Measured(_max_abs(actual, reference), rule.bound(dtype, scale, eager_error, is_eager, noise), scale)


# reshape records ReshapeAliasBackward0 in plain eager and ViewBackward0 under a dispatch mode (the
# oracle's forward runs under recording()'s): ATen's reshape calls _reshape_alias only for plain tensors.
# Both nodes' derivative is grad.reshape(self's sizes).
_SAME_DERIVATIVE = {"ReshapeAliasBackward0": "ViewBackward0"}


def _same_node(graph_node, torch_name: str) -> bool:
    """Whether torch's node named ``torch_name`` is the oracle's graph node (the same walk finds both)."""
    if graph_node.kind == "accumulate_grad":
        return torch_name == "torch::autograd::AccumulateGrad"
    if graph_node.kind == "builtin":
        name = torch_name.removeprefix("torch::autograd::")
        return _SAME_DERIVATIVE.get(name, name) == graph_node.name
    return True  # an autograd.Function's node (named by capture) or CopySlices


class _Localizer:
    """The first divergent node (DESIGN.md): in the oracle's program order, the first node whose incoming
    grads all agree with the oracle's registers and one of whose outgoing grads does not, or whose
    incoming grad disagrees although every outgoing grad added into its input buffer agrees (a wrong sum)."""

    def __init__(self, oracle: _Oracle, rule: _Rule, eager: _NodeRecorder, eager_grads: dict):
        self.oracle = oracle
        self.rule = rule
        self.eager = eager
        self.eager_grads = eager_grads

    def first_divergence(self, recorder: _NodeRecorder, grads: dict, is_eager: bool, graph: str,
                         calls: Optional[list[tuple[int, int]]] = None) -> Divergence:
        """``calls``: the (pc, graph node index) of the nodes to judge, in the order to judge them, when the
        recorder's nodes were matched with the oracle's by its maker (compiled autograd's graph); None: every
        node call of the oracle's program in its order, the recorder's nodes found by the same walk."""
        if calls is None:
            graph_nodes = self.oracle.capture.graph.nodes
            if len(recorder.names) != len(graph_nodes) or not all(map(_same_node, graph_nodes, recorder.names)):
                return Divergence(reason="the engine's autograd graph differs from the oracle's (node names or count)",
                                  graph=graph)
            calls = self.oracle.node_calls()
        for pc, index in calls:
            divergence = self._judge(pc, index, recorder, grads, is_eager)
            if divergence is not None:
                divergence.graph = graph
                return divergence
        return Divergence(reason="every node's outgoing grads agree with the oracle: the error arises outside the "
                                 "autograd graph (in what the engine returns)", graph=graph)

    def _judge(self, pc: int, index: int, recorder: _NodeRecorder, grads: dict, is_eager: bool) -> Optional[Divergence]:
        instr = self.oracle.capture.program.code[pc]
        if index not in recorder.incoming:
            return None  # the engine did not run this node's hooks: nothing to judge it by
        engine_in = recorder.incoming[index]
        eager_in = self.eager.incoming.get(index, ())
        for slot, register in enumerate(instr.operands):
            engine_value = engine_in[slot] if slot < len(engine_in) else None
            eager_value = eager_in[slot] if slot < len(eager_in) else None
            measured = _slot_error(engine_value, self.oracle.register(register), eager_value, self.rule, is_eager,
                                   self.oracle.register_noise(register))
            if not measured.agrees:
                # an earlier node is to blame, unless every gradient added into this slot agrees: then
                # the sum of this node's input buffer is wrong (DESIGN.md: the gradient with respect to a
                # node's output k is its summed input-buffer slot k), and this node is named
                return self._buffer_divergence(pc, index, slot, measured, recorder, is_eager)
        incoming = {f"%{r}": value for r, value in zip(instr.operands, engine_in) if r is not None}
        for label, register, engine_value, oracle_value, eager_value, noise in self._outgoing(pc, index, recorder,
                                                                                              grads):
            measured = _slot_error(engine_value, oracle_value, eager_value, self.rule, is_eager, noise)
            if not measured.agrees:
                # a leaf's .grad ("@leaf") is in the engine's result set already
                outgoing = {register: engine_value} if register.startswith("%") else {}
                return self.oracle.divergence_at(pc, measured, label, register, {**incoming, **outgoing})
        return None

    def _buffer_divergence(self, pc: int, index: int, slot: int, measured: _Measured,
                           recorder: _NodeRecorder, is_eager: bool) -> Optional[Divergence]:
        """A Divergence at the node called by ``pc`` when its incoming grad ``slot`` disagrees while each
        outgoing grad of another node that goes into that input-buffer slot agrees (recorded by the
        producers' post-hooks, before the engine adds them); None when one of them disagrees or was not
        recorded (the error came from elsewhere)."""
        graph_nodes = self.oracle.capture.graph.nodes
        call_of_node = {node: call for call, node in self.oracle.node_calls()}
        summed = f"%{self.oracle.capture.program.code[pc].operands[slot]}"
        producers, values = [], {summed: recorder.incoming[index][slot]}
        for producer, graph_node in enumerate(graph_nodes):
            for out, edge in enumerate(graph_node.next_edges):
                if edge is not None and edge.node == index and edge.input_nr == slot:
                    producers.append((producer, out))
        if not producers:
            return None  # a root: its incoming grad is the grad_output
        for producer, out in producers:
            engine_out = recorder.outgoing.get(producer)
            register = self.oracle.validated_outputs(call_of_node[producer])[out] if producer in call_of_node else None
            if engine_out is None or out >= len(engine_out) or register is None:
                return None
            eager_out = self.eager.outgoing.get(producer, ())
            eager_value = eager_out[out] if out < len(eager_out) else None
            if not _slot_error(engine_out[out], self.oracle.register(register), eager_value, self.rule, is_eager,
                               self.oracle.register_noise(register)).agrees:
                return None
            values[f"%{register}"] = engine_out[out]
        names = ", ".join(_node_label(graph_nodes[producer]) for producer, _ in producers)
        label = (f"incoming grad {slot}, the sum of its input buffer: each of the {len(producers)} gradients added "
                 f"into it (from {names}) agrees, their sum does not")
        return self.oracle.divergence_at(pc, measured, label, summed, values)

    def _outgoing(self, pc: int, index: int, recorder: _NodeRecorder, grads: dict):
        instr = self.oracle.capture.program.code[pc]
        if instr.op == "accumulate_grad":
            leaf = instr.target
            yield (f"@{leaf}", f"@{leaf}", grads.get(leaf), self.oracle.grads.get(leaf), self.eager_grads.get(leaf),
                   self.oracle.noise.get(leaf))
            return
        engine_out = recorder.outgoing.get(index, ())
        eager_out = self.eager.outgoing.get(index, ())
        node = self.oracle.capture.graph.nodes[index]
        for slot, register in enumerate(self.oracle.validated_outputs(pc)):
            if register is None:
                continue
            edge = node.next_edges[slot] if slot < len(node.next_edges) else None
            target = "" if edge is None else f" (to {_node_label(self.oracle.capture.graph.nodes[edge.node])})"
            yield (f"output {slot}{target}", f"%{register}", engine_out[slot] if slot < len(engine_out) else None,
                   self.oracle.register(register), eager_out[slot] if slot < len(eager_out) else None,
                   self.oracle.register_noise(register))


def _consumer_of(instr) -> str:
    """The node whose incoming grad an instruction reads, for the report: AccumulateGrad(@leaf) for a leaf's
    accumulation, and for torch.autograd.grad's capture of an input (`output ^name`) its AccumulateGrad too,
    which captures the grad without running."""
    if instr.op == "accumulate_grad":
        return f"AccumulateGrad(@{instr.target})"
    if instr.op == "output":
        return f"AccumulateGrad(@{instr.target}), captured by torch.autograd.grad"
    return instr.node


@dataclass
class _Point:
    """A place where the engine's gradient can be read: the incoming grad ``slot`` of the oracle's
    node call at ``pc`` (register ``register``), read from the engine as leaf ``name`` (a probe, or a
    leaf whose .grad is the incoming grad of its AccumulateGrad)."""

    pc: int
    register: str
    name: str
    what: str  # for the report: "the output of torch.tanh" or "@0.weight"


class _Readings:
    """Places where an engine's gradients were read (``points``, each an incoming grad of an oracle node, or a
    leaf's .grad), in the oracle's program order, and the first divergence among them: the first reading
    that disagrees blames the node whose outgoing grad makes it. Probes (_Probing) and compiled backwards
    (refgrad.check.compiled) make the readings."""

    def __init__(self, oracle: _Oracle):
        self.oracle = oracle
        code = oracle.capture.program.code
        self.points: list[_Point] = []
        self.defined_at = {r: pc for pc, instr in enumerate(code) for r in instr.results if r is not None}

    def add_leaf_points(self) -> None:
        """A reading for each leaf: its .grad is the incoming grad of its AccumulateGrad; under
        torch.autograd.grad (check's inputs=), the gradient the engine returned for an input is the grad the
        program captures (`output ^name`: the incoming grad of its AccumulateGrad, which does not run)."""
        for pc, instr in enumerate(self.oracle.capture.program.code):
            if instr.op in ("accumulate_grad", "output") and instr.operands[0] is not None:
                marker = "@" if instr.op == "accumulate_grad" else "^"
                self.points.append(_Point(pc, instr.operands[0], instr.target, f"{marker}{instr.target}"))
        self.points.sort(key=lambda point: point.pc)

    def producers(self, register: str) -> list[int]:
        """The pcs of the node calls whose outgoing grads make ``register`` (through validate, add, hooks)."""
        pc = self.defined_at.get(register)
        if pc is None:
            return []
        instr = self.oracle.capture.program.code[pc]
        if instr.op in _NODE_OPS:
            return [pc]
        if instr.op in ("validate", "hook") and len(instr.operands) == len(instr.results):
            operand = instr.operands[list(instr.results).index(register)]
            return [] if operand is None else self.producers(operand)
        return [p for operand in instr.operands if operand is not None for p in self.producers(operand)]

    def first_divergence(self, grads: dict, eager_grads: dict, rule: _Rule, is_eager: bool, graph: str) -> Divergence:
        """``grads``: the engine's readings by point name; ``eager_grads``: eager's, for the rule's bound."""
        self.rule = rule
        recorded, values = set(), {}
        for point in self.points:
            measured = _slot_error(grads.get(point.name), self.oracle.register(point.register),
                                   eager_grads.get(point.name), rule, is_eager, self.oracle.register_noise(point.register))
            values[f"%{point.register}"] = grads.get(point.name)
            if measured.agrees:
                recorded.add(point.pc)
                continue
            return self._blame(point, measured, recorded, graph, values)
        return Divergence(reason="the gradients of every recorded intermediate and leaf agree with the oracle",
                          graph=graph)

    def _blame(self, point: _Point, measured: _Measured, agreeing: set, graph: str, values: dict) -> Divergence:
        """The node whose outgoing grad makes ``point``'s; ``values`` are the engine's at the points read so
        far, by register: the divergence keeps point's and the blamed node's incoming grads."""
        producers = self.producers(point.register)
        if not producers:
            return Divergence(reason=f"the gradient of {point.what} disagrees and no node makes it (a root's grad)",
                              graph=graph)
        pc = min(producers)
        gradient = f"its outgoing grad, read at {point.what} (the incoming grad of {self._consumer(point)})"
        if pc not in agreeing:
            gradient += ("; its own incoming grad was not recorded: the error is in it or in a node between it "
                         "and the last recorded gradient that agrees")
        if len(producers) > 1:
            gradient += f"; {len(producers)} nodes add into that gradient, this is the first"
        return self._divergence_at(pc, measured, gradient, point.register, values, graph)

    def _divergence_at(self, pc: int, measured: _Measured, gradient: str, register: str, values: dict,
                       graph: str) -> Divergence:
        """A Divergence at the node called by ``pc``, off in ``register``, keeping the engine's values (by
        "%register") there and at that node's incoming grads."""
        operands = self.oracle.capture.program.code[pc].operands
        kept = {f"%{register}"} | {f"%{r}" for r in operands if r is not None}
        divergence = self.oracle.divergence_at(pc, measured, gradient, f"%{register}",
                                               {name: value for name, value in values.items() if name in kept})
        divergence.graph = graph
        return divergence

    def _consumer(self, point: _Point) -> str:
        """The node whose incoming grad ``point`` reads."""
        return _consumer_of(self.oracle.capture.program.code[point.pc])


class _Probing(_Readings):
    """Black-box localization (issue 7, Deliver 4): one recording forward finds the tensors torch
    functions return; each engine then runs a forward that adds a zero probe leaf to each of them and
    is asked for the probes' gradients, which are the gradients with respect to those intermediates:
    the incoming grads of their grad_fn nodes, compared with the oracle's registers in program order."""

    def __init__(self, subject: _Subject, oracle: _Oracle):
        super().__init__(oracle)
        recording = _ProbeMode(record=True)
        run = subject.forward(mode=recording)
        walk = _walk(run)
        graph_nodes = oracle.capture.graph.nodes
        self.matches = len(walk.order) == len(graph_nodes) and all(
            map(_same_node, graph_nodes, [node.name() for node in walk.order]))
        call_of_node = {index: pc for pc, index in oracle.node_calls()}
        code = oracle.capture.program.code
        self.templates = [(t.shape, t.dtype) for t in recording.recorded]
        for i, (tensor, function) in enumerate(zip(recording.recorded, recording.functions)):
            pc = call_of_node.get(walk.index.get(tensor.grad_fn, -1))
            register = None if pc is None else code[pc].operands[tensor.output_nr]
            if register is not None:
                self.points.append(_Point(pc, register, f"{_PROBE}{i}", f"the output of {function}"))
        self.add_leaf_points()
        self.last_mode: Optional[_ProbeMode] = None

    def probes(self, device: str) -> _ProbeMode:
        self.last_mode = _ProbeMode([torch.zeros(shape, dtype=dtype, device=device, requires_grad=True)
                                     for shape, dtype in self.templates])
        return self.last_mode

    def misaligned(self) -> str:
        """Why the last probed forward's intermediates were not the recording's ("" when they were)."""
        mode = self.last_mode
        if mode is not None and mode.aligned and mode.count == len(mode.probes):
            return ""
        count = "?" if mode is None else mode.count
        return (f"the probed forward's torch function results differ from the recording's ({count} results, "
                f"{len(self.templates)} recorded, or of other shapes)")

    def first_divergence(self, grads: dict, eager_grads: dict, rule: _Rule, is_eager: bool, graph: str) -> Divergence:
        if not self.matches:
            return Divergence(reason="the recording forward's graph differs from the oracle's", graph=graph)
        if not any(name.startswith(_PROBE) for name in grads):
            return Divergence(reason="the engine returned no gradients for the recorded intermediates (probe leaves)",
                              graph=graph)
        return super().first_divergence(grads, eager_grads, rule, is_eager, graph)
