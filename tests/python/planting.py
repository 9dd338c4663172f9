"""Planted bugs for the check tests: an FX compiler that scales what one aten op computes, and a wrong
implementation of one node in compiled autograd's functional ops."""
import operator
from typing import Optional

import torch
from torch._dynamo.compiled_autograd import Op


def scale_op_results(op, occurrence: Optional[int] = None, factor: float = 1.01):
    """A compiler for aot_autograd (fw_compiler: compiled autograd hands it the whole backward;
    bw_compiler: torch.compile's backward) that multiplies the result of aten ``op`` (its first used one, for an op with several) by ``factor``:
    every call of it, or only the ``occurrence``-th in the graph's order (for compiled autograd's
    graph that is the backward's: 0 is nearest the loss, -1 nearest the inputs)."""

    def compiler(graph_module, example_inputs):
        calls = [node for node in graph_module.graph.nodes if node.target is op]
        if occurrence is not None:  # every call may be none: a graph can lack the op (graph breaks)
            assert calls, f"no {op} in the graph"
            calls = [calls[occurrence]]
        for target in calls:
            getitems = sorted((user for user in target.users if user.target is operator.getitem),
                              key=lambda user: user.args[1])
            if getitems:  # an op with several outputs (native_layer_norm_backward): its first used output is scaled
                target = getitems[0]
            with graph_module.graph.inserting_after(target):
                scaled = graph_module.graph.call_function(torch.ops.aten.mul.Tensor, (target, factor))
            target.replace_all_uses_with(scaled, delete_user_cb=lambda user: user is not scaled)
        graph_module.recompile()
        return graph_module

    return compiler


def plant_in_op(monkeypatch, node: str, factor: float = 1.01) -> None:
    """Makes compiled autograd's functional op of ``node`` (torch._dynamo.compiled_autograd.ops.<node>, every
    call of it) scale the gradients it returns by ``factor``: a wrong node implementation inside the
    compiled-autograd path only (eager autograd and refgrad never call these ops). Op.__call__ is what compiled
    autograd's graph, dynamo's code and AOTAutograd's tracing of it all call, so every backend compiles the bug."""
    real = Op.__call__

    def planted(self, *args, **kwargs):
        grads = real(self, *args, **kwargs)
        if self.__name__ != node:
            return grads
        return [None if grad is None else grad * factor for grad in grads]

    monkeypatch.setattr(Op, "__call__", planted)
