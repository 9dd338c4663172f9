"""Swap mode: the node whose implementation, as the engine runs compiled autograd's graph, disagrees with refgrad's.

refgrad.check(..., swap="only_one" | "all_but_one") runs the backward of each failed engine that ran compiled
autograd again, with some `ops.<Node>` calls of compiled autograd's graph replaced by refgrad's implementation
of that node: refgrad.call_node with the saved fields the call is given, read as
refgrad.compiled_autograd.import_graph reads them (the packing read from torch's code generator). The rest of
the graph (validate_outputs, the sums, AccumulateGrad, the other nodes) is compiled and run by the engine as in
its plain run. Each run's gradients are judged by the rule against the oracle, as the plain run's were.

- "only_one": names the call k such that with refgrad's implementation of k only, every gradient passes:
  torch's k alone made the engine fail. The search halves the node calls: a half that, swapped alone, makes
  every gradient pass holds every wrong call; the last run swaps k alone. Where neither half passes, one more
  run swaps every call: if it passes, several nodes are wrong (no single swap can fix the engine), else the
  error is outside the nodes' implementations.
- "all_but_one": names each call k such that with every call refgrad's but k, the engine fails: torch's k,
  compiled by the engine's backend among refgrad's nodes, is wrong by itself. The first run swaps every call
  and must pass (else the error is outside the nodes' implementations). Then each set of calls left torch's
  whose run fails is halved, down to single calls, whose runs (every call refgrad's but k) name them: every
  such k is found.
Halving takes about 2 log2(N) runs for N node calls, where trying each call takes N (a transformer block's
graph has 38); every node named is backed by the run the mode is named for.

A swapped call runs outside the compiled code (torch._dynamo.disable: dynamo breaks the graph there and
compiles the parts around it with the engine's backend), so swapping works whatever the backend makes of the
graph, Inductor's fused code included, where reading the graph node by node cannot. Each run compiles anew;
runs that swap many calls break the graph many times and compile longest. An engine with fullgraph=True
cannot break its graph: its runs raise, and the report says so.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.fx

import refgrad
from refgrad.check.compiled_autograd import (_GraphCall, compiling_compiled_autograd_graphs, is_node_op,
                                             match_node_calls, node_calls, node_name)
from refgrad.check.oracle import _Oracle
from refgrad.check.report import Swap, SwapCall, SwapRun, _positions, error_text
from refgrad.compiled_autograd.importing import import_graph

MODES = ("only_one", "all_but_one")


def _refgrad_node(instruction, tensors: dict[str, Any]) -> Callable:
    """refgrad's implementation of one `ops.<Node>` call: the node of the imported ``instruction``, with its
    saved fields (saved tensors looked up by their sigiled name, "$x", in ``tensors``). It takes the op's
    arguments (grads, needs_input_grad, *packed) and returns one torch gradient or None per input, as the op
    does. Disabled for dynamo: it runs between the compiled parts of the graph."""
    schema = refgrad.node(instruction.node)
    tensor_fields = {saved.name for saved in schema.saved
                     if saved.type.rstrip("?") in ("Tensor", "Tensor[]", "Tensor?[]")}

    def resolved(name: str, value: Any) -> Any:
        if name not in tensor_fields or value is None:
            return value
        if isinstance(value, list):
            return [None if item is None else tensors[item] for item in value]
        return tensors[value]

    fields = {name: resolved(name, value) for name, value in instruction.attrs.items()}

    @torch._dynamo.disable
    def node(grads, needs_input_grad, *packed):
        results = refgrad.call_node(instruction.node, list(grads), [bool(need) for need in needs_input_grad], fields)
        return [None if result is None else result.torch() for result in results]

    node.__name__ = f"refgrad_{instruction.node}"
    return node


def swapping(positions: set[int], expected: dict[int, str]):
    """Within it, the `ops.<Node>` calls at ``positions`` (among the graph's node calls; ``expected`` their
    node names, checked) of every compiled autograd graph are refgrad's. The graph is imported with the values
    of its first call, its calls rewritten, and then compiled by the engine's compiler."""

    def wrap(graph_module: torch.fx.GraphModule, compiler: Callable) -> Callable:
        compiled: Optional[Callable] = None

        def call(inputs, sizes, scalars, hooks, packed_data):
            nonlocal compiled
            if compiled is None:
                # imported first: the compiled graph steals `inputs` as it runs
                imported = import_graph(graph_module, inputs, sizes, scalars, hooks, packed_data)
                calls = node_calls(graph_module)
                # small saved tensors are written inline in the program, the others are the bundle's
                tensors = {**{f"${saved.name}": saved.value for saved in imported.program.saved},
                           **imported.bundle.tensors}
                for position in sorted(positions):
                    node = calls[position] if position < len(calls) else None
                    if node is None or not is_node_op(node.target) or node_name(node.target) != expected[position]:
                        raise refgrad.Error(f"refgrad.check swap: node call {position} of this run's compiled "
                                            f"autograd graph is not {expected[position]} as in the plain run's")
                    node.target = _refgrad_node(imported.program.code[imported.pc_of[node.name]], tensors)
                graph_module.recompile()
                compiled = compiler(graph_module)
            return compiled(inputs, sizes, scalars, hooks, packed_data)

        return call

    return compiling_compiled_autograd_graphs(wrap)


class _Swapper:
    """Runs swap mode for one engine. ``run_engine()`` runs the engine's backward on a fresh forward and returns
    its gradients; ``failed(grads)`` the names of those that fail the rule."""

    def __init__(self, oracle: _Oracle, call: _GraphCall, run_engine: Callable[[], dict],
                 failed: Callable[[dict], list[str]]):
        self.oracle = oracle
        self.run_engine = run_engine
        self.failed = failed
        match = match_node_calls(oracle, call.graph_module)
        self.calls = [SwapCall(position, node.name, node_name(node.target), match.pc_of.get(node.name))
                      for position, node in enumerate(node_calls(call.graph_module)) if is_node_op(node.target)]
        self.swap: Optional[Swap] = None

    def run(self, mode: str) -> Swap:
        self.swap = swap = Swap(mode=mode, calls=self.calls)
        if not self.calls:
            swap.reason = "compiled autograd's graph calls no built-in node (ops.<Node>) to swap"
            return swap
        everything = [call.position for call in self.calls]
        if mode == "only_one":
            self._only_one(everything)
        else:
            self._all_but_one(everything)
        errors = [run for run in swap.runs if run.error]
        if errors and len(errors) == len(swap.runs):
            swap.reason = f"every run raised, so none could be judged: {errors[0].error}"
        elif errors and not swap.named:
            swap.reason += f" ({len(errors)} of the {len(swap.runs)} runs raised: {errors[0].error})"
        if swap.named and swap.named[0].pc is not None:
            pc = swap.named[0].pc
            swap.instruction = self.oracle.machine.instruction_text(pc)
            node = self.oracle.capture.graph.nodes[self.oracle.capture.node_of_instruction[pc]]
            swap.source = self.oracle.capture.program.code[pc].origin or node.origin
        return swap

    def _only_one(self, suspects: list[int]) -> None:
        """Halves the suspects while one half, swapped alone, makes every gradient pass: that half holds every
        call whose torch implementation is wrong. The last run swaps one call: that call is named."""
        if len(suspects) == 1:
            if self._run(suspects).passed:
                self.swap.named = [self._call(suspects[0])]
            else:
                self.swap.reason = ("with the graph's one node call refgrad's the engine still fails: the error is "
                                    "outside the node's implementation")
            return
        while len(suspects) > 1:
            halves = suspects[:len(suspects) // 2], suspects[len(suspects) // 2:]
            passing = next((half for half in halves if self._run(half).passed), None)
            if passing is None:
                everything = self._run([call.position for call in self.calls])
                self.swap.reason = (
                    f"neither half of {_positions(suspects, self.calls)} swapped for refgrad's makes every gradient "
                    "pass, " + ("while every call swapped does: several nodes are wrong (no single node's swap can "
                                "make the engine pass)" if everything.passed else
                                "nor does every call swapped: the error is outside the nodes' implementations "
                                "(validate_outputs, the sums, AccumulateGrad, the compiled code between the nodes)"))
                return
            suspects = list(passing)
        self.swap.named = [self._call(suspects[0])]

    def _all_but_one(self, everything: list[int]) -> None:
        """With every call refgrad's the engine must pass; then a set of calls left torch's (the others
        refgrad's) that fails holds a wrong call. Each failing set is halved down to single calls, each named."""
        baseline = self._run(everything)
        if not baseline.passed:
            self.swap.reason = ("with refgrad's implementation of every node the engine still fails ("
                                + (baseline.error or ", ".join(baseline.failed)) + "): the error is outside the "
                                "nodes' implementations (validate_outputs, the sums, AccumulateGrad, or the compiled "
                                "code between the nodes)")
            return
        pending = [everything]  # sets of calls known to hold a wrong one (all of them: the plain run failed)
        while pending:
            torch_calls = pending.pop(0)
            if len(torch_calls) == 1:
                self.swap.named.append(self._call(torch_calls[0]))
                continue
            for half in torch_calls[:len(torch_calls) // 2], torch_calls[len(torch_calls) // 2:]:
                run = self._run([position for position in everything if position not in half])
                if not run.passed and not run.error:
                    pending.append(half)
        self.swap.named.sort(key=lambda call: call.position)
        if not self.swap.named:
            self.swap.reason = ("no set of calls left torch's among refgrad's fails: no node's implementation fails "
                                "by itself (the error needs several of torch's nodes together)")

    def _call(self, position: int) -> SwapCall:
        return next(call for call in self.calls if call.position == position)

    def _run(self, swapped: list[int]) -> SwapRun:
        """The engine's backward with the calls at ``swapped`` refgrad's, judged by the rule."""
        run = SwapRun(swapped=sorted(swapped))
        self.swap.runs.append(run)
        expected = {position: self._call(position).node for position in swapped}
        try:
            with swapping(set(swapped), expected):
                grads = self.run_engine()
        except Exception as error:  # a run that cannot swap (fullgraph=True, a node refgrad lacks) says why
            run.error = error_text(error)
            return run
        run.failed = self.failed(grads)
        run.passed = not run.failed
        return run
