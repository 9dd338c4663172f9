"""Check backward engines against refgrad's oracle, and name the first node that went wrong.

    import refgrad.check
    report = refgrad.check.check(model, x, target)   # fn(*args): model(x, target) returns the loss
    print(report)                                    # a table: engine, gradient, errors, bound, verdict
    report.passed, report.results["compiled_autograd"]["0.weight"].max_abs
    report.first_divergence["compiled_autograd"]     # None, or the node, pc, instruction, error, source line
    report.reproducers["compiled_autograd"]          # the bundle `build/refgrad check` re-runs
    refgrad.check(model, x, target, swap="only_one").swaps["compiled_autograd"]   # the node swap mode names

What check does (DESIGN.md, "Numbers and precision"):

1. Every engine (refgrad.engines) gets its own fresh forward of fn(*args): an nn.Module fn (and any
   module among args, or in fn's closure or the globals it names) deep-copied, parameters and buffers
   alike, the RNG state restored, tensor args cloned, every .grad None. The user's module, tensors and RNG are left as they were.
2. The oracle R: one more fresh forward, captured by refgrad.torch.capture and run by refgrad's Machine
   at ``precision`` ("float64" promotes a float32 program). Where capture refuses the backward
   (refgrad.torch.UnsupportedError), R is eager's backward instead: the engines are checked against
   eager, report.uncovered names each node refgrad could not capture and why, and no divergence is
   localized nor reproducer written (there is no program).
3. Per gradient, the rule (docs/check.md, "The rule, and why"): noise = max(max|R' - R|, max|R~ - R|), R'
   refgrad's run of the same program in the other precision (the rounding error of this very gradient in
   float32), R~ the float64 run with values and results moved by one rounding of their dtypes (how far the gradient
   moves with its inputs' last bits: it keeps a gradient that cancels to nearly 0 from being all error); eager
   passes when max|eager - R| <= rtol max|R| + 32 noise, engine E when max|E - R| <= rtol max|R| +
   32 max(noise, max|eager - R|), rtol torch.testing.assert_close's for the dtype; an engine that compiles
   the forward too (torch_compile) and fails that gets 16 F more, F how far the forward's own rounding moves
   the gradient (refgrad.check.forward_rounding: the spread of eager's gradient around the program's float64
   one, or its sensitivity to a rounding of every forward op's result). A float64 gradient (no
   noise to measure) keeps assert_close's atol: max|E - R| <= 2 max|eager - R| + atol + rtol max|R|.
   Given rtol and atol, the rule is plain instead: max|E - R| <= atol + rtol max|R| for every engine. A
   missing gradient, a shape or dtype that differs, a NaN where R has none or where eager has none fails.
4. The first divergent node of a failed engine:
   - an engine that ran compiled autograd: compiled autograd's own graph, recorded as the plain run compiled
     and called it, interpreted node by node on the values it was called with, where its results are the
     compiled code's (bit for bit, or within rounding for fused code); each `ops.<Node>` call's incoming
     and validated outgoing grads are compared with the oracle's registers in the graph's order
     (refgrad.check.compiled_autograd). Where the graph cannot stand for the compiled code (the backend
     compiled it into something else) or calls fn's hooks, the report says why and node hooks are used:
   - an engine that runs torch's autograd graph (eager, compiled autograd, and engines whose
     gradients() takes observe=) runs again with a pre-hook (incoming grads) and a post-hook (validated
     outgoing grads) on every grad_fn node; compiled autograd traces them into its graph;
   - a black box that ran torch.compile'd code (torch_compile): the compiled backwards of its plain run,
     recorded as they ran, are read node by node where they are FX graphs (refgrad.check.compiled): its
     compilation is the plain run's, nothing is added to it;
   - any other black box (an engine of your own) runs a forward under a TorchFunctionMode that adds a
     zero "probe" leaf to each tensor a torch function returns, and is asked, as for any leaf, for the
     probes' gradients: the gradients with respect to the forward's intermediates, i.e. the incoming
     grads of their grad_fn nodes;
   all are compared, in the oracle's program order, with the oracle's registers under the same rule:
   the first node whose incoming grads agree and one of whose outgoing grads (for AccumulateGrad: the
   leaf's .grad) does not is the first divergent node. Where gradients meet, the sum of a node's input
   buffer belongs to that node (DESIGN.md: its incoming grad k is its summed input-buffer slot k): a node
   whose incoming grad disagrees while each outgoing grad added into it agrees is named, for a wrong sum
   (not for probes: they show no gradient before the sum). A second run's graph is not the plain run's,
   so it must fail the plain run's gradients; Divergence.graph says which run was used.
5. The hooks fn registers in its forward (Tensor.register_hook, register_post_accumulate_grad_hook) are
   recorded for every engine, compiled ones and black boxes included: after the engine's forward has run
   and before its backward, each hook on the forward's leaves and on its hooked non-leaf tensors is
   replaced, in the tensor's own hook dict, by one that records its call first. Nothing is added to the
   forward, so torch.compile compiles what it would without check. Every engine passes only when its
   hooks fired as eager's did: the same hooks, as often, in the same order. A forward the engine runs
   under a transform (torch_compile's torch.compile) is not searched for hooked non-leaves: torch.compile
   traces their hooks into its backward, where no call can be recorded; report.hooks_not_recorded names
   them, and that engine's record is compared with eager's without them.
6. swap="only_one" or "all_but_one" (refgrad.check.swap): each failed engine that ran compiled autograd runs
   its backward again with some node calls of that graph swapped for refgrad's implementation (halving the
   calls); report.swaps names the call whose swap alone makes every gradient pass (only_one), or each call
   that alone left torch's, every other refgrad's, fails (all_but_one): the node whose torch implementation,
   as the engine compiles it, is wrong. It works where the graph cannot be read node by node (Inductor's
   fused code), and names nodes a backend compiles wrongly.
7. Each failed engine writes one bundle into ``reproducer_dir``: the program and its tensors, eager's
   and the engine's gradients as result sets, the rule and tolerances, and provenance (torch version,
   engine, backend, fn's qualname, date). ``build/refgrad check BUNDLE`` re-runs it without Python.
8. ``inputs=NAMES`` (leaf names, as above) asks for torch.autograd.grad(outputs, [those leaves],
   grad_outputs, allow_unused=True) instead of a backward into every leaf: every engine computes those
   gradients only (Forward.inputs: eager and compiled autograd by torch.autograd.grad, which compiled
   autograd compiles too; torch_compile runs its compiled backward under it), and writes no .grad; the
   oracle captures the same backward (refgrad.torch.capture's inputs: the program's `output ^name`
   instructions), and the report lists those gradients only. Post-accumulate-grad hooks do not fire
   under torch.autograd.grad, in any engine, nor do tensor hooks on leaves outside inputs; the hook
   records compare what fired. Localization reads the captured gradients where it read the leaves'
   .grad (their AccumulateGrad nodes are not run).
"""
from __future__ import annotations

import functools
import math
import sys
import types
from typing import Any, Callable, Optional, Sequence, Union

import torch

import refgrad
from refgrad import engines as engines_module
from refgrad.engines import Forward, differentiate
from refgrad.check.localize import _Localizer, _NodeRecorder, _Probing
from refgrad.check.compiled import _CompiledRegions, recording_compiled_backwards
from refgrad.check.compiled_autograd import read_graph, recording_compiled_autograd
from refgrad.check.forward_rounding import forward_allowance
from refgrad.check.oracle import _EagerOracle, _Oracle, _oracle_for
from refgrad.check.report import Divergence, GradientResult, Report, Swap, SwapCall, SwapRun, error_text
from refgrad.check.reproducer import _write_reproducer
from refgrad.check.rule import _Rule, _compare
from refgrad.check.subject import _HookMode, _HookRecorder, _ProbeMode, _Subject
from refgrad.check.swap import MODES as SWAP_MODES, _Swapper

__all__ = ["Divergence", "GradientResult", "Report", "Swap", "SwapCall", "SwapRun", "check"]


def _rule_from(rtol: Optional[float], atol: Optional[float]) -> _Rule:
    if (rtol is None) != (atol is None):
        raise refgrad.Error("refgrad.check: give both rtol and atol, or neither (as torch.testing.assert_close)")
    return _Rule(rtol, atol)


def _inputs_from(inputs: Optional[Union[str, Sequence[str]]], keep_grad: bool) -> Optional[list[str]]:
    """check's inputs= as a list of leaf names (None: a backward into every leaf); refuses what is not one."""
    if inputs is None:
        return None
    names = [inputs] if isinstance(inputs, str) else list(inputs) if isinstance(inputs, (list, tuple)) else None
    if names is None or not all(isinstance(name, str) for name in names):
        raise refgrad.Error(f"refgrad.check: inputs must be a leaf's name or a sequence of them (as the report names "
                            f"leaves: 'net.0.weight', 'arg0'), got {inputs!r}")
    if not names:
        raise refgrad.Error("refgrad.check: inputs is empty: name at least one leaf (None differentiates every leaf)")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise refgrad.Error(f"refgrad.check: inputs names {', '.join(map(repr, repeated))} more than once")
    if keep_grad:
        raise refgrad.Error("refgrad.check: keep_grad=True checks the accumulation into .grad, which "
                            "torch.autograd.grad over inputs does not do: give one of keep_grad and inputs")
    return names


def _kind(value: Any) -> str:
    return "module" if isinstance(value, torch.nn.Module) else "function"


def _engines_from(specs: Sequence[Any], report: Report) -> list[Any]:
    """The engines, eager first (every other engine's bound needs it); a CUDA engine without a GPU is
    skipped, with a printed reason."""
    found = []
    for spec in ([specs] if isinstance(specs, str) else list(specs)):
        try:
            found.append(engines_module.engine(spec))
        except engines_module.NoDevice as error:
            report.skipped[str(spec)] = str(error)
            print(f"refgrad.check: skipping engine {spec}: {error}")
    eager = [e for e in found if isinstance(e, engines_module.Eager) and e.device == "cpu"]
    if not eager:
        eager = [engines_module.Eager()]
        report.notes.append("eager ran as the baseline of the rule (not among the engines asked for)")
    return eager[:1] + [e for e in found if e is not eager[0]]


class _Checker:
    def __init__(self, subject: _Subject, oracle: _Oracle, rule: _Rule, report: Report, reproducer_dir: Optional[str],
                 swap: Optional[str] = None):
        self.subject, self.oracle, self.rule, self.report = subject, oracle, rule, report
        self.reproducer_dir = reproducer_dir
        self.swap = swap
        # a failed engine's compiled autograd graphs, recorded as its plain run called them, and that run's grads
        self._graph_calls: dict[int, tuple[list, dict]] = {}
        self._leaves: dict[int, dict[str, torch.Tensor]] = {}  # per engine: its plain run's leaves by name
        self._eager_record: Optional[tuple[_NodeRecorder, dict]] = None
        self._probing: Optional[_Probing] = None
        self._probed: dict[int, dict] = {}
        self._compiled_calls: dict[int, tuple[list, dict]] = {}  # a failed black box's compiled backwards
        self._eager_hooks: Optional[_HookRecorder] = None  # eager's record of fn's hooks
        self._forward_allowance: Optional[dict[str, float]] = None

    def forward_for(self, engine: Any, mode: Optional[Union[_ProbeMode, _HookMode]] = None,
                    hooks: Optional[_HookRecorder] = None) -> Callable[..., Forward]:
        """The engine's forward(transform=None): a fresh forward on the engine's device (under ``mode``;
        with its hooks wrapped by ``hooks``, given one)."""
        device = getattr(engine, "device", "cpu")
        if hooks is not None:
            return lambda transform=None: hooks.forward(self.subject, transform, device)
        return lambda transform=None: self.subject.forward(transform, device, mode)

    def gradients(self, engine: Any) -> dict[str, Optional[torch.Tensor]]:
        """The engine's gradients; the calls of the hooks fn registers are recorded too, for every engine
        (compiled and black boxes included), into report.hooks (see _HookRecorder: they are wrapped after
        the engine's forward, so that what the engine compiles is its own). Eager runs first: its record
        numbers the hooks for every other engine's."""
        is_eager = engine is self.eager
        recorder = _HookRecorder(None if is_eager else self._eager_hooks.numbering)
        forward, runs = self.forward_for(engine, hooks=recorder), []

        def forward_kept(transform=None):  # the leaves' identities name what compiled autograd's graph accumulates
            runs.append(forward(transform))
            return runs[-1]

        grads = engine.gradients(forward_kept, self.oracle.grad_outputs)
        self._leaves[id(engine)] = {name: leaf for run in runs for name, leaf in run.leaves.items()}
        if is_eager:
            self._eager_hooks = recorder
        eager = self._eager_hooks
        if not recorder.labels and not eager.labels:
            return grads
        self.report.hooks[engine.name] = recorder.fired
        if not recorder.looked_for_non_leaves and eager.non_leaf_labels:
            self.report.hooks_not_recorded[engine.name] = list(eager.non_leaf_labels)
        return grads

    def compare(self, engine: Any, grads: dict, eager_grads: dict) -> dict[str, GradientResult]:
        is_eager = engine is self.eager
        inputs = self.subject.inputs
        results = {}
        for name, reference in self.oracle.grads.items():
            eager_error = 0.0
            if not is_eager:
                eager_result = self.report.results[self.eager.name][name]
                eager_error = eager_result.max_abs if eager_result.max_abs == eager_result.max_abs else 0.0
            compared = functools.partial(_compare, grads.get(name), reference, self.oracle.dtypes[name], self.rule,
                                         is_eager=is_eager, noise=self.oracle.noise.get(name),
                                         eager=eager_grads.get(name), in_dtype=self.oracle.in_dtype.get(name))
            results[name] = compared(eager_error=eager_error)
            if not results[name].passed and getattr(engine, "compiles_forward", False) and not self.rule.plain:
                forward = self.forward_allowance().get(name, 0.0)
                if forward > 0:
                    results[name] = compared(eager_error=eager_error, forward=forward)
        for name, grad in grads.items():
            if name not in self.oracle.grads and grad is not None:
                note = "R computes no gradient"
                if inputs is not None and name not in inputs:
                    note = ("not among inputs: torch.autograd.grad over inputs gives no gradient for it (the engine "
                            "ignored Forward.inputs?)")
                results[name] = GradientResult(math.nan, math.nan, math.nan, False, note)
        return results

    def forward_allowance(self) -> dict[str, float]:
        """Per gradient, how far the forward's own rounding moves it (refgrad.check.forward_rounding): what an
        engine that compiles the forward too is allowed beside max|eager - R|. Measured once, when such an
        engine first fails without it."""
        if self._forward_allowance is None:
            self._forward_allowance = forward_allowance(self.subject, self.oracle.grad_outputs, self.oracle.grads,
                                                        self.eager_grads, self.oracle.computes_in)
        return self._forward_allowance

    def run(self, engines: list[Any]) -> None:
        self.eager = engines[0]
        self.report.eager = self.eager.name
        eager_grads = self.gradients(self.eager)
        self.eager_grads = eager_grads
        for engine in engines:
            try:
                # a black box's compiled backwards (torch.compile's) and compiled autograd's graphs are recorded
                # as they run: if it fails, its divergence is looked for in this very run
                # (refgrad.check.compiled, refgrad.check.compiled_autograd)
                with recording_compiled_backwards() as compiled_calls, recording_compiled_autograd() as graph_calls:
                    grads = eager_grads if engine is self.eager else self.gradients(engine)
            except Exception as error:  # an engine that cannot run fails; the others are still checked
                self.record_crash(engine, error)
                continue
            self.report.results[engine.name] = self.compare(engine, grads, eager_grads)
            if self.report.engine_passed(engine.name):
                self.report.first_divergence[engine.name] = None
                continue
            self._compiled_calls[id(engine)] = (compiled_calls, grads)
            self._graph_calls[id(engine)] = (graph_calls, grads)
            try:
                self.report.first_divergence[engine.name] = self.localize(engine)
            except Exception as error:
                self.report.first_divergence[engine.name] = Divergence(
                    reason=f"the localizing run raised {error_text(error)}")
            if self.swap is not None:
                self.report.swaps[engine.name] = self.swapped(engine)
            if self.reproducer_dir is not None:
                self.report.reproducers[engine.name] = _write_reproducer(
                    self.reproducer_dir, self.oracle, self.subject, self.rule, self.report.precision, self.eager,
                    eager_grads, engine, grads, self.report.first_divergence.get(engine.name))

    def record_crash(self, engine: Any, error: Exception) -> None:
        """An engine that raised (a compiled one that ran no compiled code included): it fails, with one
        error row that says why, and no gradients to compare."""
        self.report.results[engine.name] = {}
        self.report.errors[engine.name] = error_text(error)
        self.report.first_divergence[engine.name] = Divergence(reason=f"{engine.name} raised {error_text(error)}")

    def eager_record(self) -> tuple[_NodeRecorder, dict]:
        if self._eager_record is None:
            self._eager_record = self._recorded(self.eager)
        return self._eager_record

    def _recorded(self, engine: Any) -> tuple[_NodeRecorder, dict]:
        recorder = _NodeRecorder()
        grads = engine.gradients(self.forward_for(engine), self.oracle.grad_outputs, observe=recorder)
        return recorder, grads

    def probed(self, engine: Any) -> dict[str, Optional[torch.Tensor]]:
        """The engine's gradients with a probe added to every recorded intermediate of the forward."""
        if self._probing is None:
            self._probing = _Probing(self.subject, self.oracle)
        key = id(engine)
        if key not in self._probed:
            probes = self._probing.probes(getattr(engine, "device", "cpu"))
            grads = engine.gradients(self.forward_for(engine, probes), self.oracle.grad_outputs)
            misaligned = self._probing.misaligned()
            if misaligned:
                raise refgrad.Error(misaligned)
            self._probed[key] = grads
        return self._probed[key]

    def unlike_the_plain_run(self, engine: Any, observed_grads: dict, graph: str) -> Optional[Divergence]:
        """None when the observed (second) run fails the same gradients as the plain run did, by the rule;
        else a Divergence that says it did not, with the observed run's results: a divergence found in a run
        that failed otherwise would not be the plain run's."""
        plain = {name for name, result in self.report.results[engine.name].items() if not result.passed}
        leaves = {name: grad for name, grad in observed_grads.items() if name in self.oracle.grads}
        observed_results = self.compare(engine, leaves, self.eager_grads)
        observed = {name for name, result in observed_results.items() if not result.passed}
        if observed == plain:
            return None
        return Divergence(reason=f"the observed run did not fail as the plain run did: the plain run fails "
                                 f"{', '.join(sorted(plain)) or 'no gradient'}, the observed run "
                                 f"{', '.join(sorted(observed)) or 'no gradient'} (its results below)",
                          graph=graph, observed=observed_results)

    def localize_compiled(self, engine: Any, calls: list, grads: dict) -> Divergence:
        """The first divergence of a black box that ran compiled backwards, read from the run that failed
        (refgrad.check.compiled): its compilation is the plain run's, as nothing was added to it."""
        eager_recorder, eager_grads = self.eager_record()
        eager_incoming = eager_recorder.incoming if len(eager_recorder.names) == len(self.oracle.capture.graph.nodes) \
            else {}
        regions = _CompiledRegions(self.oracle, calls, eager_incoming, grads)
        return regions.first_divergence(grads, eager_grads, self.rule, engine is self.eager, regions.describe())

    def localize_black_box(self, engine: Any) -> Divergence:
        calls, grads = self._compiled_calls.pop(id(engine), ([], None))
        if calls:
            return self.localize_compiled(engine, calls, grads)
        eager_grads, grads = self.probed(self.eager), self.probed(engine)
        graph = (f"a second run of {engine.name} asked for the gradients of {len(self._probing.templates)} "
                 "intermediates of the forward (a zero leaf added to each torch function's result, so its graph "
                 "is not the plain run's)")
        unlike = self.unlike_the_plain_run(engine, grads, graph)
        if unlike is not None:
            return unlike
        return self._probing.first_divergence(grads, eager_grads, self.rule, engine is self.eager, graph)

    def localize(self, engine: Any) -> Divergence:
        """The first divergence: read from compiled autograd's graph where the engine ran one and it can be
        read node by node (refgrad.check.compiled_autograd); else by node hooks, compiled regions or probes."""
        graph_calls, grads = self._graph_calls.get(id(engine), ([], {}))
        if not graph_calls:
            return self.localize_without_graph(engine)
        leaf_names = {id(leaf): name for name, leaf in self._leaves.get(id(engine), {}).items()}
        reading = read_graph(self.oracle, graph_calls, grads, leaf_names)
        if not reading.problem:
            eager_recorder, eager_grads = self.eager_record()
            return _Localizer(self.oracle, self.rule, eager_recorder, eager_grads).first_divergence(
                reading.recorder, grads, engine is self.eager, reading.description, calls=reading.calls)
        divergence = self.localize_without_graph(engine)
        unread = f"compiled autograd's graph could not be read node by node: {reading.problem}"
        if divergence.localized:
            divergence.graph = f"{unread}; instead, {divergence.graph}"
        else:
            divergence.reason += f" ({unread})"
        return divergence

    def swapped(self, engine: Any) -> Swap:
        """Swap mode for a failed engine (refgrad.check.swap): its backward again, with node calls of the
        compiled autograd graph its plain run compiled swapped for refgrad's."""
        calls = self._graph_calls.get(id(engine), ([], {}))[0]
        if len(calls) != 1:
            return Swap(self.swap, reason=f"{engine.name} ran {len(calls)} compiled autograd graphs; swap mode swaps "
                                          "the node calls of one")

        def run_engine() -> dict:
            return engine.gradients(self.forward_for(engine), self.oracle.grad_outputs)

        def failed(grads: dict) -> list[str]:
            leaves = {name: grad for name, grad in grads.items() if name in self.oracle.grads}
            results = self.compare(engine, leaves, self.eager_grads)
            return [name for name, result in results.items() if not result.passed]

        try:
            return _Swapper(self.oracle, calls[0], run_engine, failed).run(self.swap)
        except Exception as error:
            return Swap(self.swap, reason=f"swap mode raised {error_text(error)}")

    def localize_without_graph(self, engine: Any) -> Divergence:
        if not engines_module.accepts_observe(engine):
            return self.localize_black_box(engine)
        eager_recorder, eager_grads = self.eager_record()
        is_eager = engine is self.eager
        recorder, grads = (eager_recorder, eager_grads) if is_eager else self._recorded(engine)
        graph = ("eager's backward with node hooks (hooks do not change its numbers)" if is_eager else
                 f"a second backward of {engine.name} with a pre- and a post-hook on every node (a compiler traces "
                 "the hooks into its graph, so it is not the plain run's graph)")
        if not recorder.incoming:
            return Divergence(reason=f"{engine.name} ran none of the node hooks", graph=graph)
        unlike = None if is_eager else self.unlike_the_plain_run(engine, grads, graph)
        if unlike is not None:
            return unlike
        return _Localizer(self.oracle, self.rule, eager_recorder, eager_grads).first_divergence(
            recorder, grads, is_eager, graph)


def check(fn: Callable, *args: Any, engines: Sequence[Any] = ("eager", "compiled_autograd"), precision: str = "float64",
          rtol: Optional[float] = None, atol: Optional[float] = None,
          reproducer_dir: Optional[str] = "refgrad-reproducers", keep_grad: bool = False,
          swap: Optional[str] = None, inputs: Optional[Union[str, Sequence[str]]] = None) -> Report:
    """Checks each engine's gradients of fn(*args) against refgrad's oracle; see the module docstring.

    fn: a callable or an nn.Module returning the tensor(s) to differentiate (each gets a grad of
      ones). Gradients are taken for every leaf that requires grad and that the backward reaches:
      fn's parameters (named as named_parameters() names them) and args' tensors ("arg0", "arg1",
      ...; a module among args: "arg1.weight"; a list: "arg2.0").
    engines: names (refgrad.engines.engine()) or Engine objects. eager always runs (the rule needs it).
    precision: the oracle's, "float64" (a float32 program promoted) or "float32".
    rtol, atol: both or neither; given, the plain rule replaces DESIGN.md's.
    reproducer_dir: where failed engines' bundles go (None: write none).
    keep_grad: every fresh leaf starts with a copy of the user's .grad (where it has one) instead of None,
      so that each engine's accumulation into an existing .grad is checked too.
    swap: "only_one" or "all_but_one" (refgrad.check.swap): each failed engine that ran compiled autograd runs
      its backward again with node calls of compiled autograd's graph swapped for refgrad's implementation,
      and report.swaps[engine] names the call whose swap alone makes it pass (only_one), or each call whose
      torch implementation alone, among refgrad's, makes it fail (all_but_one). None (the default): no swap.
    inputs: None (the default: a backward into every leaf), or the names of some leaves (a name, or a
      non-empty sequence of names, as the report names leaves): every engine and the oracle compute
      torch.autograd.grad(outputs, [those leaves], grad_outputs, allow_unused=True), and only those
      gradients are compared and reported (see the module docstring, 8). A name that is not a leaf of
      fn(*args) raises refgrad.Error naming it.
    """
    rule = _rule_from(rtol, atol)
    inputs = _inputs_from(inputs, keep_grad)
    if swap is not None and swap not in SWAP_MODES:
        raise refgrad.Error(f"refgrad.check: swap must be None, {' or '.join(map(repr, SWAP_MODES))}, got {swap!r}")
    notes, compiled_engine = [], None
    compiled = engines_module.compiled_parts(fn)
    if compiled is not None:
        # a torch.compile'd fn is checked as the engine it is; every other engine (eager included) runs the
        # original module or function
        fn = compiled.original
        compiled_engine = engines_module.TorchCompile(backend=compiled.backend,
                                                      name=f"torch.compile(fn, backend={compiled.backend_name})")
        notes.append(f"fn is torch.compile'd (backend {compiled.backend_name}): it is checked as the engine "
                     f"{compiled_engine.name}; the other engines run its original {_kind(fn)}")
    args = list(args)
    for i, arg in enumerate(args):
        inner = engines_module.compiled_parts(arg)
        if inner is not None:
            args[i] = inner.original
            notes.append(f"arg{i} is torch.compile'd (backend {inner.backend_name}): every engine runs its original "
                         f"{_kind(inner.original)} (pass the compiled module as fn to check torch.compile)")
    subject = _Subject(fn, args, keep_grad, inputs)
    try:
        oracle = _oracle_for(subject, precision)
        report = Report(fn=subject.qualname, precision=precision, rule=rule.describe(), notes=notes, inputs=inputs)
        if isinstance(oracle, _EagerOracle):  # capture refused the backward: the engines are checked against eager
            report.uncovered = oracle.uncovered
            if reproducer_dir is not None:
                report.notes.append("no reproducers: refgrad could not capture the backward as a program")
            reproducer_dir = None
        if inputs is not None:
            report.notes.append(f"inputs: torch.autograd.grad over {', '.join(inputs)} in every engine (the other "
                                "leaves get no gradient; post-accumulate-grad hooks do not fire)")
        calls = oracle.python_calls()
        if calls:
            report.notes.append("the program calls Python (reproducers need it; refgrad check takes --hook for "
                                "tensor hooks): " + ", ".join(calls))
        chosen = _engines_from(engines, report)
        if compiled_engine is not None:
            chosen.append(compiled_engine)
        _Checker(subject, oracle, rule, report, reproducer_dir, swap).run(chosen)
    finally:
        subject.restore_rng()
    return report


class _CallableModule(types.ModuleType):
    """The issue asks for refgrad.check(fn, ...), and this module is refgrad.check: calling the module
    calls check(), so that both refgrad.check(fn, ...) and refgrad.check.Report work. (A package that
    did `from refgrad.check import check` would hide the module behind the function instead.)"""

    def __call__(self, *args, **kwargs) -> Report:
        return check(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
